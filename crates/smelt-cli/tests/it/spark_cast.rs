//! Spark's own `try_cast` is the oracle of smelt's `spark` cast dialect (DESIGN §10): a table
//! of hard strings — blanks, signs, exponents, leap days, offsets, zones, overflow — is cast
//! to each silver type by a real apply flow (`cast_dialect: spark`) and by `try_cast` on the
//! test Spark cluster (session time zone UTC, the flow's default `tz`); the values must agree,
//! but for the differences docs/pipeline.md lists, which are checked to be what it says.
//! The same run checks that smelt's Spark string literals read back as the strings they hold.

use std::sync::Arc;

use crate::cluster::SparkCluster;
use crate::common::Project;
use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use smelt_spark::sql::string_literal;

/// The hard strings, per silver type (DDL spelling, Spark spelling).
const CASES: &[(&str, &str, &[&str])] = &[
    (
        "BOOLEAN",
        "BOOLEAN",
        &[
            "true", " TRUE ", "t", "yes", "Y", "1", "0", "no", "N", "f", "off", "on", "tru", "2",
            "", "   ", "\ttrue\n", "truE",
        ],
    ),
    (
        "INT",
        "INT",
        &[
            " 12 ",
            "12a",
            "1e3",
            "12.7",
            "-0",
            "+5",
            "2147483647",
            "2147483648",
            "-2147483648",
            "-2147483649",
            "",
            " ",
            "0x10",
            "1_000",
            "007",
            "\t42\n",
            "- 1",
            "+-1",
            "1.0",
            ".5",
        ],
    ),
    (
        "BIGINT",
        "BIGINT",
        &[
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "12 ",
            "1e3",
            "00000000000000000000001",
        ],
    ),
    (
        "SMALLINT",
        "SMALLINT",
        &["32767", "32768", "-32768", "-32769", " 7 "],
    ),
    (
        "DOUBLE",
        "DOUBLE",
        &[
            "1e3",
            "1E-3",
            "NaN",
            "Infinity",
            "-Infinity",
            "inf",
            "-inf",
            "nan",
            "1.5f",
            "1.5d",
            ".5",
            "5.",
            "1e309",
            "-0",
            " 3.14 ",
            "1,5",
            "0.1",
            "123456789.123456789",
            "+2",
            "1e-400",
            "",
        ],
    ),
    (
        "DECIMAL(10,2)",
        "DECIMAL(10,2)",
        &[
            "1e3",
            "12.345",
            "12.355",
            "-12.355",
            "-1.5e-1",
            "123456789012",
            "99999999.995",
            "99999999.994",
            ".5",
            "-.005",
            "+1",
            "1e-3",
            " 7 ",
            "abc",
            "1E3",
            "0.000",
            "12345678.9",
            "1e8",
            "-0.004",
        ],
    ),
    (
        "DATE",
        "DATE",
        &[
            "2026-02-28",
            "2024-02-29",
            "2026-02-29",
            "2026-02-30",
            "2026-1-5",
            "2026",
            "2026-07",
            "2026-07-01T09:00",
            "2026-07-01 garbage",
            "0001-01-01",
            " 2026-07-01 ",
            "2026-13-01",
            "2026/07/01",
            "20260701",
            "1900-02-29",
            "2000-02-29",
        ],
    ),
    (
        "TIMESTAMP",
        "TIMESTAMP",
        &[
            "2026-07-01T09:00:00.000+0000",
            "2026-07-01 09:00:00Z",
            "2026-07-01T09:00:00+09:00",
            "2026-07-01T09:00:00+0900",
            "2026-07-01T09:00:00+09",
            "2026-07-01T09:00:00-05:30",
            "2026-07-01T09:00:00.1234567",
            "2026-07-01T09:00:00.123456789Z",
            "2024-02-29 23:59:59",
            "2026-02-29 00:00:00",
            "2026-07-01",
            "2026-07-01T25:00:00",
            "2026-07-01 09:00 Asia/Tokyo",
            "2026-07-01T09:00:00 UTC",
            "2026-07-01T09:00:00UTC+02:00",
            "2026-07-01T09:00:00GMT+2",
            "  2026-07-01 09:00:00  ",
            "2026-07-01T09:00:00+18:00",
            "2026-07-01T09:00:00+19:00",
            "1970-01-01 00:00:00",
            "2026-07-01T9:5:3",
            "2026-07-01 09",
            "2026-07-01T09:00:00.",
            "garbage",
        ],
    ),
    (
        "TIMESTAMP_NTZ",
        "TIMESTAMP_NTZ",
        &[
            "2026-07-01T09:00:00",
            "2026-07-01 09:00:00.5",
            "2026-07-01T09:00:00+09:00",
            "2026-07-01",
            "2026-02-29 00:00:00",
        ],
    ),
];

/// Strings where smelt's `spark` dialect and Spark deliberately differ (docs/pipeline.md,
/// "Cast dialects"): smelt gives NULL, Spark a value. Each must still be a real difference.
const DIFFERENT: &[(&str, &str)] = &[
    // Time-only strings: Spark takes today's date; smelt refuses (a change's time must not
    // depend on the day it is read).
    ("TIMESTAMP", "T09:00"),
    // Three-letter zone ids (Java's SHORT_IDS): ambiguous; smelt refuses them.
    ("TIMESTAMP", "2026-07-01 09:00:00 PST"),
];

#[test]
fn spark_try_cast_is_the_oracle_of_the_spark_dialect() {
    let cluster = SparkCluster::start();
    let (runtime, spark) = cluster.connect();
    let sql = |what: &str, statement: &str| -> Vec<RecordBatch> {
        runtime
            .block_on(spark.sql(what, statement))
            .unwrap_or_else(|e| panic!("{e}\n{statement}"))
            .batches
    };
    sql(
        "setting the time zone",
        "SET spark.sql.session.timeZone=UTC",
    );

    // The bronze rows: one id per (type, string); smelt casts them with one flow per type.
    let mut rows: Vec<(usize, &str, &str, &str)> = Vec::new();
    for (ddl, spark_type, values) in CASES {
        for v in *values {
            rows.push((rows.len() + 1, ddl, spark_type, v));
        }
    }
    for (ddl, v) in DIFFERENT {
        let spark_type = CASES.iter().find(|c| c.0 == *ddl).unwrap().1;
        rows.push((rows.len() + 1, ddl, spark_type, v));
    }

    // Literals first: every string reads back from Spark as itself.
    let values = spark_values(rows.iter());
    let back = sql(
        "reading the literals back",
        &format!("SELECT id, v FROM VALUES {values} AS t(id, v) ORDER BY id"),
    );
    let back: Vec<String> = back
        .iter()
        .flat_map(|b| {
            let v = b.column(1).as_string::<i32>();
            (0..b.num_rows())
                .map(|i| v.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let sent: Vec<String> = rows.iter().map(|r| r.3.to_string()).collect();
    assert_eq!(back, sent, "Spark read smelt's literals as other strings");

    let p = Project::with_pipeline(&pipeline());
    for (ddl, _, _) in CASES {
        p.write(
            &format!("{}.sql", table_of(ddl)),
            &format!(
                "CREATE TABLE clean.{} (id BIGINT NOT NULL, v {ddl}, PRIMARY KEY (id))",
                table_of(ddl)
            ),
        );
    }
    p.ok(&["sql", "CREATE TABLE raw.hard (id BIGINT, v STRING)"]);
    let inserts = rows
        .iter()
        .map(|(id, _, _, v)| format!("({id}, {})", sql_text(v)))
        .collect::<Vec<_>>()
        .join(", ");
    p.ok(&["sql", &format!("INSERT INTO raw.hard VALUES {inserts}")]);
    p.ok(&["run"]);

    let mut mismatches = Vec::new();
    for (ddl, spark_type, _) in CASES {
        // Every flow casts every row; the rows of its type are compared.
        let of_type: Vec<_> = rows.iter().filter(|r| r.1 == *ddl).collect();
        let ids = of_type
            .iter()
            .map(|r| r.0.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        // `None` for NULL; a value JSON cannot hold (NaN, infinities) is written `null`.
        let ours: Vec<(i64, Option<String>)> = p
            .query(&format!(
                "SELECT id, v, v IS NULL AS is_null FROM clean.{} WHERE id IN ({ids}) ORDER BY id",
                table_of(ddl)
            ))
            .iter()
            .map(|r| {
                let v = (r["is_null"] != true)
                    .then(|| r.get("v").map_or_else(|| "null".to_string(), json_text));
                (r["id"].as_i64().unwrap(), v)
            })
            .collect();
        let values = spark_values(of_type.iter().copied());
        let theirs = sql(
            &format!("casting to {spark_type}"),
            &format!(
                "SELECT id, try_cast(v AS {spark_type}) AS v FROM VALUES {values} AS t(id, v) ORDER BY id"
            ),
        );
        let theirs = as_smelt_json(&theirs, ddl);
        assert_eq!(ours.len(), of_type.len(), "{ddl}: {ours:?}");
        for (((id, _, _, text), (_, mine)), (_, spark)) in of_type.iter().zip(&ours).zip(&theirs) {
            let different = DIFFERENT.contains(&(*ddl, *text));
            if different {
                assert!(
                    mine.is_none() && spark.is_some(),
                    "{ddl} {text:?}: listed as a difference, but smelt gives {mine:?} and Spark {spark:?}"
                );
            } else if mine != spark {
                mismatches.push(format!(
                    "{ddl} {text:?} (id {id}): smelt {mine:?}, Spark {spark:?}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "smelt's spark dialect and Spark's try_cast disagree:\n{}",
        mismatches.join("\n")
    );
    runtime.block_on(spark.close());
}

/// The rows' `(id, string)` pairs as a Spark `VALUES` list.
fn spark_values<'a>(rows: impl Iterator<Item = &'a (usize, &'a str, &'a str, &'a str)>) -> String {
    rows.map(|(id, _, _, v)| format!("({id}, {})", string_literal(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One apply flow per silver type from `raw.hard`, casting as Spark does.
fn pipeline() -> String {
    let mut yaml = String::from("lake: ./lake\nflows:\n");
    for (ddl, _, _) in CASES {
        let t = table_of(ddl);
        yaml.push_str(&format!(
            "  {t}:\n    apply:\n      from: raw.hard\n      into: clean.{t}\n      schema: {t}.sql\n      cast_dialect: spark\n",
        ));
    }
    yaml
}

/// The silver table of a DDL type: `as_decimal_10_2`.
fn table_of(ddl: &str) -> String {
    let name: String = ddl
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("as_{}", name.trim_end_matches('_'))
}

/// `text` as a `smelt sql` (DataFusion) string literal: quotes doubled; control characters
/// through `chr`.
fn sql_text(text: &str) -> String {
    let mut parts = Vec::new();
    let mut plain = String::new();
    for c in text.chars() {
        if c.is_control() {
            if !plain.is_empty() {
                parts.push(format!("'{}'", plain.replace('\'', "''")));
                plain.clear();
            }
            parts.push(format!("chr({})", c as u32));
        } else {
            plain.push(c);
        }
    }
    if !plain.is_empty() || parts.is_empty() {
        parts.push(format!("'{}'", plain.replace('\'', "''")));
    }
    parts.join(" || ")
}

/// A JSON value as text for comparing.
fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Spark's result `(id, v)` with `v` cast to the Arrow type smelt stores `ddl` as, written
/// as `smelt sql --json` writes it.
fn as_smelt_json(batches: &[RecordBatch], ddl: &str) -> Vec<(i64, Option<String>)> {
    let target = match ddl {
        "BOOLEAN" => DataType::Boolean,
        "INT" => DataType::Int32,
        "BIGINT" => DataType::Int64,
        "SMALLINT" => DataType::Int16,
        "DOUBLE" => DataType::Float64,
        "DECIMAL(10,2)" => DataType::Decimal128(10, 2),
        "DATE" => DataType::Date32,
        "TIMESTAMP" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        "TIMESTAMP_NTZ" => DataType::Timestamp(TimeUnit::Microsecond, None),
        other => panic!("no Arrow type for {other}"),
    };
    let mut out = Vec::new();
    for b in batches {
        let ids = arrow::compute::cast(b.column(0), &DataType::Int64).unwrap();
        // Spark's type is the silver type: only the metadata (a timestamp's zone name)
        // may change, never a value (`safe: false` fails rather than turn one into NULL).
        let strict = arrow::compute::CastOptions {
            safe: false,
            ..Default::default()
        };
        let v: ArrayRef = arrow::compute::cast_with_options(b.column(1), &target, &strict)
            .unwrap_or_else(|e| panic!("{ddl}: Spark's values are not {target}: {e}"));
        let schema = Arc::new(Schema::new(vec![Field::new("v", target.clone(), true)]));
        let batch = RecordBatch::try_new(schema, vec![v]).unwrap();
        let mut writer = arrow::json::ArrayWriter::new(Vec::new());
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        let json: Vec<serde_json::Value> = serde_json::from_slice(&writer.into_inner()).unwrap();
        let ids = ids.as_primitive::<arrow::datatypes::Int64Type>();
        for (i, row) in json.iter().enumerate() {
            out.push((ids.value(i), row.get("v").map(json_text)));
        }
        assert_eq!(ids.len(), json.len());
    }
    out
}
