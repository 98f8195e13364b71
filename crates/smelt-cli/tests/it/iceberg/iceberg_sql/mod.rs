//! `smelt sql` over the tables of the pipeline's Iceberg catalogs: queries, joins with the
//! lake's Delta tables, time travel by snapshot id and by time, DESCRIBE and DESCRIBE
//! HISTORY, copies into the lake; writes refused by name. pyiceberg (which wrote the
//! table) is the oracle: its scans at each snapshot, its schema, its snapshot list.

use serde_json::{Value, json};

use crate::common::{Project, text};

const PIPELINE: &str = with_catalog!("flows: {}\n");

const TABLE: &str = "raw.orders";

/// Rows as text, sorted: `columns` of each JSON row object.
fn sorted(rows: &[Value], columns: &[&str]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|c| text(&r[*c])).collect())
        .collect();
    out.sort();
    out
}

fn pyiceberg(p: &Project, steps: &[Value]) -> Vec<Value> {
    super::pyiceberg(p, steps)
}

/// pyiceberg's rows of the table, now or as of `at` (`{"snapshot_id": …}` or
/// `{"as_of_ms": …}`).
fn scan(p: &Project, at: Value, columns: &[&str]) -> Vec<Vec<String>> {
    let mut step = json!({"scan": TABLE});
    if let Value::Object(at) = at {
        step.as_object_mut().unwrap().extend(at);
    }
    let out = pyiceberg(p, &[step]);
    sorted(out[0]["rows"].as_array().unwrap(), columns)
}

fn smelt_rows(p: &Project, sql: &str, columns: &[&str]) -> Vec<Vec<String>> {
    sorted(&p.query(sql), columns)
}

pub fn smelt_sql_reads_iceberg_tables_as_pyiceberg_does() {
    let p = Project::with_pipeline(PIPELINE);
    let row = |id: &str, status: &str, amount: &str| json!({"id": id, "status": status, "amount": amount});
    pyiceberg(
        &p,
        &[
            json!({"create": TABLE, "columns": ["id", "status", "amount"]}),
            json!({"append": TABLE, "rows": [row("1", "new", "10"), row("2", "new", "20"), row("3", "new", "30")]}),
            // Merge-on-read: a position-delete file removes id 2, a new file updates id 3.
            json!({"mor_delete": TABLE, "column": "id", "values": ["2", "3"], "rows": [row("3", "paid", "31")]}),
            json!({"rename": TABLE, "from": "amount", "to": "total"}),
            json!({"append": TABLE, "rows": [{"id": "4", "status": "new", "total": "40"}]}),
        ],
    );
    let snapshots = pyiceberg(&p, &[json!({"snapshots": TABLE})])[0]["snapshots"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(snapshots.len(), 3, "{snapshots:?}");
    let now = ["id", "status", "total"];

    // Now, and as of every snapshot (in the columns the table had then).
    assert_eq!(
        smelt_rows(&p, &format!("SELECT * FROM ice.{TABLE}"), &now),
        scan(&p, Value::Null, &now)
    );
    for (i, s) in snapshots.iter().enumerate() {
        let id = s["id"].as_i64().unwrap();
        let columns = if i < 2 {
            ["id", "status", "amount"]
        } else {
            now
        };
        let want = scan(&p, json!({"snapshot_id": id}), &columns);
        assert!(
            want.iter().all(|r| r.iter().all(|v| v != "NULL")),
            "{want:?}"
        );
        let got = smelt_rows(
            &p,
            &format!("SELECT * FROM ice.{TABLE} VERSION AS OF {id}"),
            &columns,
        );
        assert_eq!(got, want, "snapshot {id}");
        // The time it was committed, and the table as of then.
        let ms = s["timestamp_ms"].as_i64().unwrap();
        let at = chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let got = smelt_rows(
            &p,
            &format!("SELECT * FROM ice.{TABLE} TIMESTAMP AS OF '{at}'"),
            &columns,
        );
        assert_eq!(got, scan(&p, json!({"as_of_ms": ms}), &columns), "at {at}");
    }
    assert_eq!(
        scan(&p, json!({"snapshot_id": snapshots[1]["id"]}), &["id"]).len(),
        2
    );

    // Joined with a Delta table of the lake, and copied into the lake.
    p.ok(&["sql", "CREATE TABLE d.names (id STRING, name STRING); INSERT INTO d.names VALUES ('1', 'ant'), ('3', 'cat'), ('4', 'dog')"]);
    let joined = smelt_rows(
        &p,
        &format!("SELECT o.id, n.name, o.total FROM ice.{TABLE} o JOIN d.names n ON o.id = n.id"),
        &["id", "name", "total"],
    );
    let names = [("1", "ant"), ("3", "cat"), ("4", "dog")];
    let want: Vec<Vec<String>> = scan(&p, Value::Null, &now)
        .into_iter()
        .filter_map(|r| {
            let name = names.iter().find(|(id, _)| *id == r[0])?.1;
            Some(vec![r[0].clone(), name.to_string(), r[2].clone()])
        })
        .collect();
    assert_eq!(joined, want);
    p.ok(&[
        "sql",
        &format!("CREATE TABLE d.orders AS SELECT * FROM ice.{TABLE}"),
    ]);
    p.ok(&[
        "sql",
        &format!(
            "INSERT INTO d.orders SELECT * FROM ice.{TABLE} VERSION AS OF {}",
            snapshots[0]["id"]
        ),
    ]);
    assert_eq!(
        smelt_rows(&p, "SELECT count(*) AS n FROM d.orders", &["n"]),
        [[(scan(&p, Value::Null, &now).len() + 3).to_string()]]
    );

    // DESCRIBE: pyiceberg's columns; DESCRIBE HISTORY: its snapshots, newest first.
    let schema = pyiceberg(&p, &[json!({"schema": TABLE})])[0]["columns"].clone();
    let described: Vec<Value> = p
        .query(&format!("DESCRIBE ice.{TABLE}"))
        .iter()
        .map(|r| {
            json!([
                r["col_name"],
                r["data_type"],
                !r["nullable"].as_bool().unwrap()
            ])
        })
        .collect();
    assert_eq!(Value::Array(described), schema);
    let history = p.query(&format!("DESCRIBE HISTORY ice.{TABLE}"));
    let want: Vec<Value> = snapshots
        .iter()
        .rev()
        .map(|s| json!([s["sequence"], s["id"], s["parent"], s["operation"]]))
        .collect();
    let got: Vec<Value> = history
        .iter()
        .map(|r| {
            json!([
                r["version"],
                r["snapshot_id"],
                r["parent_id"],
                r["operation"]
            ])
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        p.query(&format!("DESCRIBE HISTORY ice.{TABLE} LIMIT 1"))
            .len(),
        1
    );

    // Writes are refused by name, and nothing is written.
    for statement in [
        format!("INSERT INTO ice.{TABLE} VALUES ('9', 'x', '9')"),
        format!("DELETE FROM ice.{TABLE} WHERE id = '1'"),
        format!("UPDATE ice.{TABLE} SET status = 'x'"),
        format!("CREATE TABLE ice.raw.copy AS SELECT * FROM ice.{TABLE}"),
        format!("TRUNCATE TABLE ice.{TABLE}"),
    ] {
        let (_, err) = p.fails(&["sql", &statement], 1);
        assert!(
            err.contains(&format!("`ice.{TABLE}`")) || err.contains("`ice.raw.copy`"),
            "{statement}: {err}"
        );
        assert!(err.contains("does not write them"), "{statement}: {err}");
    }
    let after = pyiceberg(&p, &[json!({"snapshots": TABLE})])[0]["snapshots"].clone();
    assert_eq!(after.as_array().unwrap().len(), 3);

    // Unknown catalogs, tables and snapshots are named.
    let (_, err) = p.fails(&["sql", "SELECT * FROM icy.raw.orders"], 1);
    assert!(
        err.contains("catalog `icy`") && err.contains("did you mean `ice`?"),
        "{err}"
    );
    let (_, err) = p.fails(&["sql", "SELECT * FROM ice.raw.nope"], 1);
    assert!(err.contains("`ice.raw.nope` does not exist"), "{err}");
    let (_, err) = p.fails(
        &[
            "sql",
            &format!("SELECT * FROM ice.{TABLE} VERSION AS OF 42"),
        ],
        1,
    );
    assert!(
        err.contains("has no snapshot 42") && err.contains("DESCRIBE HISTORY"),
        "{err}"
    );
    let (_, err) = p.fails(&["sql", &format!("DESCRIBE DETAIL ice.{TABLE}")], 1);
    assert!(err.contains("DESCRIBE HISTORY"), "{err}");
}
