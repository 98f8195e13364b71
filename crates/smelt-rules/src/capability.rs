//! What the Spark engine runs, and the refusal of everything else by name, at `validate`,
//! before anything runs (never run embedded instead without a word). docs/spark.md's
//! table of what runs on Spark is this one.

use smelt_spec::COMMIT_TIMESTAMP;
use smelt_spec::{
    ApplyFlow, CastDialect, ChangeData, FileFormat, Flow, FlowKind, OnSequenceConflict,
    OptimizeMode, Pipeline, ReplaceSource, TableName, WriteMode,
};

use crate::Message;

/// Every reason the Spark engine cannot run `flow` of `pipeline` as asked; `since`: the run
/// replays a window (`--since`).
pub fn spark_refusals(pipeline: &Pipeline, flow: &Flow, since: bool) -> Vec<Message> {
    let mut out = Vec::new();
    let mut refuse = |what: String, hint: &str| {
        out.push(Message {
            text: format!("{what} is not supported on the Spark engine yet"),
            hint: hint.to_string(),
        });
    };
    let embedded = "run it with `--engine embedded`, or leave it out of this run";
    if since {
        refuse("a replay window (`--since`)".into(), embedded);
    }
    // Iceberg tables of `sql` catalogs, in append and SCD1 apply flows.
    let rest = |t: &TableName| {
        pipeline
            .catalogs
            .iter()
            .any(|c| Some(&c.name) == t.catalog.as_ref() && c.kind.name() == "rest")
    };
    match &flow.kind {
        FlowKind::Apply(spec) => {
            if let Some(t) = [&spec.from, &spec.into].into_iter().find(|t| rest(t)) {
                refuse(format!("the table `{t}` of a `rest` catalog"), embedded);
            }
            if spec.scd == 2 && (spec.from.catalog.is_some() || spec.into.catalog.is_some()) {
                refuse("an `scd: 2` flow over Iceberg tables".into(), embedded);
            }
            if spec.write_mode == WriteMode::MergeOnRead && spec.into.catalog.is_some() {
                refuse(
                    "`write_mode: merge_on_read` into an Iceberg table".into(),
                    embedded,
                );
            }
            apply(spec, &mut refuse)
        }
        FlowKind::Append(spec) => {
            if let Some(t) = [&spec.from, &spec.into].into_iter().find(|t| rest(t)) {
                refuse(format!("the table `{t}` of a `rest` catalog"), embedded);
            }
        }
        FlowKind::ReplaceWhere(spec) => match &spec.from {
            ReplaceSource::Table(from) => {
                if let Some(t) = [from, &spec.into].iter().find(|t| t.catalog.is_some()) {
                    refuse(format!("the Iceberg table `{t}`"), embedded);
                }
            }
            ReplaceSource::Files(files) if files.format != FileFormat::Parquet => {
                refuse(
                    "a `replace_where` flow from CSV or JSON files".into(),
                    embedded,
                );
            }
            ReplaceSource::Files(_) => {}
        },
        FlowKind::Ingest(spec) => {
            if spec.into.catalog.is_some() {
                refuse(
                    format!("ingest into the Iceberg table `{}`", spec.into),
                    embedded,
                );
            }
            if spec.infer_types {
                refuse(
                    "`infer_types`".into(),
                    "leave bronze's columns STRING (the default), or run it with `--engine embedded`",
                );
            }
        }
        FlowKind::Export(spec) => {
            if spec.from.catalog.is_some() {
                refuse(format!("the Iceberg table `{}`", spec.from), embedded);
            }
        }
    }
    out
}

fn apply(spec: &ApplyFlow, refuse: &mut impl FnMut(String, &str)) {
    let embedded = "run this flow with `--engine embedded`";
    if spec.silver.is_none() {
        refuse(
            "an apply flow without `schema:`".into(),
            "give the flow its silver DDL file (`schema:`)",
        );
    }
    if spec.cast_dialect != CastDialect::Spark {
        let dialect = match spec.cast_dialect {
            CastDialect::BigQuery => "bigquery",
            CastDialect::Lenient => "lenient",
            CastDialect::Spark => "spark",
        };
        refuse(
            format!("`cast_dialect: {dialect}`"),
            "set `cast_dialect: spark` (Spark's own `try_cast`); a schema file with BigQuery type names (BOOL, INT64) defaults to `bigquery`",
        );
    }
    if spec.change_data == ChangeData::Derived {
        refuse(
            "`change_data: derived`".into(),
            "remove `change_data` (Delta on Spark writes change data files in every merge of a table with a change feed), or run this flow with `--engine embedded`",
        );
    }
    if spec.sequence_by.iter().any(|s| s == COMMIT_TIMESTAMP)
        && spec.audit.ingest_timestamp.is_none()
    {
        refuse(
            "`sequence_by: [_commit_timestamp]` without an ingest-timestamp audit column".into(),
            "keep `audit.ingest_timestamp`: silver stores the commit time there",
        );
    }
    if spec.sequence_by.is_empty() {
        refuse(
            "an empty `sequence_by`".into(),
            "order the changes: `sequence_by: [_commit_timestamp]` (the default) or a column",
        );
    }
    let options = [
        (spec.apply_as_truncates.is_some(), "`apply_as_truncates`"),
        (
            spec.on_sequence_conflict == OnSequenceConflict::Quarantine,
            "`on_sequence_conflict: quarantine`",
        ),
        (spec.widen_types, "`widen_types`"),
        (spec.optimize == OptimizeMode::Auto, "`optimize: auto`"),
    ];
    for (set, what) in options {
        if set {
            refuse(what.to_string(), embedded);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(apply: &str) -> Vec<String> {
        let yaml = format!(
            "lake: l\nflows:\n  f:\n    apply:\n      from: b.t\n      into: s.t\n      keys: [k]\n{apply}"
        );
        let pipeline = Pipeline::from_str(&yaml, "smelt.yaml".as_ref()).unwrap();
        spark_refusals(&pipeline, &pipeline.flows[0], false)
            .iter()
            .map(|e| e.text.clone())
            .collect()
    }

    #[test]
    fn replace_where_runs_from_a_table_and_parquet_files() {
        let refused = |from: &str| -> Vec<String> {
            let yaml = format!(
                "lake: l\nflows:\n  r:\n    replace_where:\n      from: {from}\n      into: s.t\n      predicate: x > 1\n"
            );
            let pipeline = Pipeline::from_str(&yaml, "smelt.yaml".as_ref()).unwrap();
            spark_refusals(&pipeline, &pipeline.flows[0], false)
                .iter()
                .map(|e| e.text.clone())
                .collect()
        };
        assert_eq!(refused("b.t"), Vec::<String>::new());
        assert_eq!(
            refused("./in/*.parquet\n      format: parquet"),
            Vec::<String>::new()
        );
        let files = refused("./in/*.csv\n      format: csv");
        assert_eq!(files.len(), 1, "{files:?}");
        assert!(
            files[0].contains(
                "a `replace_where` flow from CSV or JSON files is not supported on the Spark engine"
            ),
            "{files:?}"
        );
    }

    #[test]
    fn options_the_spark_engine_lacks_are_refused_by_name() {
        let all = refused("      cast_dialect: lenient\n      widen_types: true\n");
        let text = all.join("\n");
        for name in [
            "`cast_dialect: lenient`",
            "`widen_types`",
            "without `schema:`",
        ] {
            assert!(text.contains(name), "{name} not refused in:\n{text}");
        }
        // The flow is named once, by the problem that carries it (`Problem::flow`).
        assert!(all.iter().all(|e| !e.contains("flow `")), "{text}");
    }

    #[test]
    fn iceberg_tables_of_sql_catalogs_run_in_append_and_scd1_flows() {
        let refused = |kind: &str, flow: &str| -> Vec<String> {
            let yaml = format!(
                "lake: l\ncatalogs:\n  ice:\n    type: {kind}\n    uri: {}\n    warehouse: ./wh\nflows:\n{flow}",
                match kind {
                    "sql" => "sqlite:c.db",
                    _ => "http://127.0.0.1:8181",
                }
            );
            let pipeline = Pipeline::from_str(&yaml, "smelt.yaml".as_ref()).unwrap();
            spark_refusals(&pipeline, &pipeline.flows[0], false)
                .iter()
                .map(|e| e.text.clone())
                .collect()
        };
        let append = "  a:\n    append:\n      from: ice.ns.input\n      into: ice.ns.out\n";
        assert_eq!(refused("sql", append), Vec::<String>::new());
        let rest = refused("rest", append);
        assert!(
            rest[0].contains("`ice.ns.input` of a `rest` catalog"),
            "{rest:?}"
        );
        let apply = "  c:\n    apply:\n      from: ice.ns.input\n      into: ice.ns.cur\n      keys: [id]\n      cast_dialect: spark\n";
        // (Refused for its missing `schema:` only.)
        let scd1 = refused("sql", apply);
        assert!(scd1.iter().all(|e| !e.contains("Iceberg")), "{scd1:?}");
        let scd2 = refused(
            "sql",
            &format!("{apply}      scd: 2\n      write_mode: merge_on_read\n"),
        );
        assert!(
            scd2.iter()
                .any(|e| e.contains("`scd: 2` flow over Iceberg")),
            "{scd2:?}"
        );
        assert!(
            scd2.iter()
                .any(|e| e.contains("`write_mode: merge_on_read` into an Iceberg")),
            "{scd2:?}"
        );
        let ingest = refused(
            "sql",
            "  i:\n    ingest:\n      from: ./in\n      into: ice.ns.raw\n      format: csv\n",
        );
        assert!(
            ingest[0].contains("ingest into the Iceberg table `ice.ns.raw`"),
            "{ingest:?}"
        );
    }

    #[test]
    fn csv_json_and_parquet_ingest_run_and_infer_types_is_refused() {
        let refused = |rest: &str| -> Vec<String> {
            let yaml = format!("lake: l\nflows:\n  i:\n    ingest:\n      into: b.t\n{rest}");
            let pipeline = Pipeline::from_str(&yaml, "smelt.yaml".as_ref()).unwrap();
            spark_refusals(&pipeline, &pipeline.flows[0], false)
                .iter()
                .map(|e| e.text.clone())
                .collect()
        };
        assert_eq!(
            refused("      from: ./in/*.tbl\n      format: csv\n      sep: \"|\"\n"),
            Vec::<String>::new()
        );
        assert_eq!(
            refused("      from: ./in/*.json\n      format: json\n"),
            Vec::<String>::new()
        );
        assert_eq!(
            refused("      from: ./in/*.parquet\n      format: parquet\n"),
            Vec::<String>::new()
        );
        let typed =
            refused("      from: ./in/*.parquet\n      format: parquet\n      infer_types: true\n");
        assert_eq!(typed.len(), 1, "{typed:?}");
        assert!(typed[0].contains("`infer_types`"), "{typed:?}");
    }
}
