//! The page's model, gathered embedded whatever the pipeline's engine (as `smelt sql` reads
//! the lake): each flow from the pipeline file and `smelt status`, its runs and data quality
//! from the event log `_smelt.event_log` (one row per flow run, its report as JSON) and its
//! rejects table, each Delta table from `DESCRIBE DETAIL` / `DESCRIBE HISTORY` / a count,
//! each Iceberg table from its current snapshot.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use smelt_docs::model::{Count, Docs, FlowDoc, Quality, RunDoc, TableDoc, VersionDoc};
use smelt_engine::rejects::rejects_table;
use smelt_engine::status::FlowStatus;
use smelt_ingest::Files;
use smelt_spec::{Flow, FlowKind, Pipeline, TableName};

use crate::commands::{Lakes, open_lakes};
use crate::failure::Failure;

/// A row of a query, by column name.
type Row = Map<String, Value>;

/// The model of `pipeline`'s page, with `samples` rows of each rejects table.
pub async fn gather(pipeline: &Pipeline, samples: usize) -> Result<Docs, Failure> {
    let lakes = open_lakes(pipeline).await?;
    let flows: Vec<&Flow> = pipeline.flows.iter().collect();
    let status = smelt_engine::status::status(
        pipeline,
        &flows,
        &lakes.ports(),
        &Files::new(pipeline.storage),
    )
    .await?;
    let delta = lakes.delta();
    let runs = runs(delta).await?;
    let options = options(pipeline);
    let mut docs = Docs {
        pipeline: pipeline.file.display().to_string(),
        lake: pipeline.lake.clone(),
        engine: match pipeline.engine {
            smelt_spec::Engine::Embedded => "embedded".into(),
            smelt_spec::Engine::Spark { .. } => "spark".into(),
        },
        generated_at: chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string(),
        flows: Vec::new(),
        tables: Vec::new(),
    };
    for (flow, st) in pipeline.flows.iter().zip(&status) {
        let mut doc = flow_doc(pipeline, flow, st);
        doc.options = options.get(&flow.name).cloned().unwrap_or_default();
        let of_flow: Vec<&Row> = runs
            .iter()
            .filter(|r| text(r, "flow") == flow.name)
            .collect();
        doc.runs = of_flow.iter().map(|r| run_doc(r)).collect();
        doc.quality = quality(&of_flow);
        if let Some(into) = flow.writes() {
            let rejects = rejects_table(into);
            if into.catalog.is_none() && delta.open(&rejects).await?.is_some() {
                doc.quality.rejects_table = Some(rejects.to_string());
                doc.quality.samples = sample(delta, &rejects, samples).await?;
            }
        }
        docs.flows.push(doc);
    }
    for name in tables(pipeline) {
        let mut t = table_doc(delta, &lakes, &name).await?;
        if let Some(st) = pipeline
            .flows
            .iter()
            .zip(&status)
            .find(|(f, _)| f.writes() == Some(&name))
            .map(|(_, s)| s)
        {
            t.write_mode = st.write_mode.clone();
            t.deleted_fraction = st.deleted_fraction;
        }
        docs.tables.push(t);
    }
    Ok(docs)
}

/// The flow's facts from the pipeline file and its status.
fn flow_doc(pipeline: &Pipeline, flow: &Flow, st: &FlowStatus) -> FlowDoc {
    let kind = match &flow.kind {
        FlowKind::Apply(a) => format!("apply (SCD{})", a.scd),
        _ => flow.kind_name().to_string(),
    };
    let (keys, sequence_by) = match &flow.kind {
        FlowKind::Apply(a) => (a.keys.clone(), a.sequence_by.clone()),
        _ => (Vec::new(), Vec::new()),
    };
    let mut sources = vec![flow.source()];
    // A flow reading an export's files reads what that export writes.
    for other in &pipeline.flows {
        if flow.reads_files_of(other) {
            sources.push(other.target());
        }
    }
    let (behind, unit) = match st.files_waiting {
        Some(files) => (Some(files as i64), "files"),
        None => (st.versions_behind, "versions"),
    };
    FlowDoc {
        name: flow.name.clone(),
        kind,
        sources,
        target: flow.target(),
        keys,
        sequence_by,
        options: Vec::new(),
        watermark: st.watermark,
        source_version: st.bronze_version,
        behind,
        behind_unit: unit.into(),
        problem: st.problem.clone(),
        runs: Vec::new(),
        quality: Quality::default(),
    }
}

/// Every table a flow reads or writes: sources first, in the file's order.
fn tables(pipeline: &Pipeline) -> Vec<TableName> {
    let mut out: Vec<TableName> = Vec::new();
    let reads = pipeline.flows.iter().filter_map(|f| f.reads());
    let writes = pipeline.flows.iter().filter_map(|f| f.writes());
    for t in reads.chain(writes) {
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

/// The options each flow sets in the pipeline file beyond what it reads and writes, its
/// keys and its sequence, as written (a value that is a list or map in compact YAML).
fn options(pipeline: &Pipeline) -> BTreeMap<String, Vec<(String, String)>> {
    const SHOWN: [&str; 5] = ["from", "into", "to", "keys", "sequence_by"];
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(&pipeline.file) else {
        return out;
    };
    let Ok(doc) = serde_norway::from_str::<serde_norway::Value>(&text) else {
        return out;
    };
    let Some(flows) = doc.get("flows").and_then(|f| f.as_mapping()) else {
        return out;
    };
    for (name, body) in flows {
        let (Some(name), Some(body)) = (name.as_str(), body.as_mapping()) else {
            continue;
        };
        // One key: the flow's kind, whose mapping holds its options.
        let Some((_, spec)) = body.iter().next() else {
            continue;
        };
        let Some(spec) = spec.as_mapping() else {
            continue;
        };
        let set: Vec<(String, String)> = spec
            .iter()
            .filter_map(|(k, v)| {
                let k = k.as_str()?;
                if SHOWN.contains(&k) {
                    return None;
                }
                let v = match v {
                    serde_norway::Value::String(s) => s.clone(),
                    other => serde_json::to_string(other).unwrap_or_default(),
                };
                Some((k.to_string(), v))
            })
            .collect();
        out.insert(name.to_string(), set);
    }
    out
}

/// The event log's rows, oldest first (none when no run has written it yet).
async fn runs(lake: &smelt_delta::Lake) -> Result<Vec<Row>, Failure> {
    if lake
        .open(&smelt_delta::event_log::table_name())
        .await?
        .is_none()
    {
        return Ok(Vec::new());
    }
    query(
        lake,
        "SELECT run_id, flow, status, CAST(started_at AS STRING) AS started_at, \
         CAST((CAST(finished_at AS BIGINT) - CAST(started_at AS BIGINT)) / 1000 AS BIGINT) AS duration_ms, \
         error, report FROM _smelt.event_log ORDER BY started_at, flow",
    )
    .await
}

/// The text of `column` of `row` (empty when NULL).
fn text(row: &Row, column: &str) -> String {
    match row.get(column) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A run's report (the event log's `report` column, JSON).
fn report(row: &Row) -> Value {
    serde_json::from_str(&text(row, "report")).unwrap_or(Value::Null)
}

/// `field` of `report` as a number (0 when missing).
fn n(report: &Value, field: &str) -> i64 {
    report.get(field).and_then(Value::as_i64).unwrap_or(0)
}

/// The time in `column` of `row` as the page shows it (`YYYY-MM-DD HH:MM:SS`).
fn when(row: &Row, column: &str) -> String {
    text(row, column)
        .replace('T', " ")
        .chars()
        .take(19)
        .collect()
}

fn run_doc(row: &Row) -> RunDoc {
    let r = report(row);
    let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
    let written = n(&r, "rows_written");
    let (rows_in, applied) = match kind {
        "ingest" | "append" | "replace_where" | "export" => (written, written),
        _ => (n(&r, "changes_read"), n(&r, "inserted") + n(&r, "updated")),
    };
    let error = Some(text(row, "error")).filter(|e| !e.is_empty());
    RunDoc {
        run_id: text(row, "run_id"),
        status: text(row, "status"),
        started_at: when(row, "started_at"),
        duration_ms: row.get("duration_ms").and_then(Value::as_i64).unwrap_or(0),
        rows_in,
        applied,
        unchanged: n(&r, "unchanged"),
        deleted: n(&r, "deleted"),
        rejected: n(&r, "rejected") + n(&r, "quarantined") + n(&r, "malformed"),
        error,
    }
}

/// The data quality of a flow's runs.
fn quality(runs: &[&Row]) -> Quality {
    let mut q = Quality::default();
    for row in runs {
        let r = report(row);
        let run = when(row, "started_at");
        let counts = |field: &str| -> Vec<Count> {
            r.get(field)
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(name, v)| v.as_i64().filter(|v| *v > 0).map(|n| (name, n)))
                        .map(|(name, n)| Count {
                            run: run.clone(),
                            name: name.clone(),
                            n,
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        q.cast_failures.extend(counts("cast_failures"));
        q.expectations.extend(counts("expectations"));
        q.quarantined += n(&r, "quarantined");
        q.sequence_conflicts += n(&r, "sequence_conflicts");
        q.tombstones += n(&r, "tombstones_written");
    }
    q
}

/// Up to `limit` rows of the rejects table `rejects`, newest first, as text.
async fn sample(
    lake: &smelt_delta::Lake,
    rejects: &TableName,
    limit: usize,
) -> Result<Vec<Vec<(String, String)>>, Failure> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let columns = query(lake, &format!("DESCRIBE {rejects}")).await?;
    let has = |c: &str| columns.iter().any(|r| text(r, "col_name") == c);
    let order = if has("rejected_at") {
        " ORDER BY rejected_at DESC"
    } else {
        ""
    };
    let rows = query(
        lake,
        &format!("SELECT * FROM {rejects}{order} LIMIT {limit}"),
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| {
            columns
                .iter()
                .map(|c| {
                    let name = text(c, "col_name");
                    let value = text(r, &name);
                    (name, value)
                })
                .collect()
        })
        .collect())
}

/// The facts of table `name`.
async fn table_doc(
    delta: &smelt_delta::Lake,
    lakes: &Lakes,
    name: &TableName,
) -> Result<TableDoc, Failure> {
    let mut doc = TableDoc {
        name: name.to_string(),
        format: if name.catalog.is_some() {
            "iceberg"
        } else {
            "delta"
        }
        .into(),
        ..TableDoc::default()
    };
    if name.catalog.is_some() {
        let table = match smelt_engine::ports::Lake::inspect(&lakes.ports(), name).await {
            Ok(table) => table,
            Err(smelt_engine::EngineError::TableNotFound { .. }) => return Ok(doc),
            Err(e) => return Err(e.into()),
        };
        let Some(schema) = table.schema() else {
            return Ok(doc);
        };
        doc.exists = true;
        doc.location = name.to_string();
        doc.columns = schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().to_string()))
            .collect();
        if let Ok(Some((deleted, total))) = table.deleted_rows().await {
            doc.rows = Some(total.saturating_sub(deleted) as i64);
        }
        if let Some(v) = table.version() {
            doc.history.push(VersionDoc {
                version: v,
                timestamp: String::new(),
                operation: "current snapshot".into(),
            });
        }
        return Ok(doc);
    }
    if delta.open(name).await?.is_none() {
        doc.location = delta.location(name);
        return Ok(doc);
    }
    doc.exists = true;
    let detail = query(delta, &format!("DESCRIBE DETAIL {name}")).await?;
    if let Some(d) = detail.first() {
        doc.location = text(d, "location");
        doc.files = d.get("numFiles").and_then(Value::as_i64);
        doc.bytes = d.get("sizeInBytes").and_then(Value::as_i64);
        let props: BTreeMap<String, String> =
            serde_json::from_str(&text(d, "properties")).unwrap_or_default();
        doc.change_feed = Some(
            props
                .get("delta.enableChangeDataFeed")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        );
    }
    doc.columns = query(delta, &format!("DESCRIBE {name}"))
        .await?
        .iter()
        .map(|r| (text(r, "col_name"), text(r, "data_type")))
        .collect();
    let count = query(delta, &format!("SELECT count(*) AS n FROM {name}")).await?;
    doc.rows = count
        .first()
        .and_then(|r| r.get("n"))
        .and_then(Value::as_i64);
    doc.history = query(delta, &format!("DESCRIBE HISTORY {name} LIMIT 5"))
        .await?
        .iter()
        .map(|r| VersionDoc {
            version: r.get("version").and_then(Value::as_i64).unwrap_or(0),
            timestamp: when(r, "timestamp"),
            operation: text(r, "operation"),
        })
        .collect();
    Ok(doc)
}

/// The rows of one query over the lake (`smelt sql`'s engine), as JSON objects.
async fn query(lake: &smelt_delta::Lake, sql: &str) -> Result<Vec<Row>, Failure> {
    let outputs = smelt_delta::sql::execute(lake, &smelt_delta::sql::catalogs::NoCatalogs, sql)
        .await
        .map_err(|(_, _, e)| Failure::from(e))?;
    let mut rows = Vec::new();
    for out in outputs {
        let smelt_delta::sql::SqlOutput::Rows { batches, .. } = out else {
            continue;
        };
        let text = crate::commands::sql::json_rows(&batches)?;
        if text.is_empty() {
            continue;
        }
        let parsed: Vec<Row> = serde_json::from_slice(&text)
            .map_err(|e| Failure::usage(format!("cannot read rows: {e}"), None))?;
        rows.extend(parsed);
    }
    Ok(rows)
}
