//! The Spark SQL of an append flow run: the cache of the rows read (`smelt_append`), its
//! counts, the first value that does not cast, and the `INSERT`.

use smelt_spec::AppendFlow;

use super::{Column, VIEW};
use crate::flow::tables::{first_failed, typed};
use crate::sql::ident;
use crate::views::RAW;

/// `smelt_append`: each row read — inserted (`__insert`), kept by `where` (`__keep`), its
/// values cast (`__v<i>`) and whether each failed (`__f<i>`) — but those of `skipped`
/// versions.
pub(super) fn cache(spec: &AppendFlow, columns: &[Column], skipped: &[i64]) -> String {
    let mut cols = vec![
        "r._change_type = 'insert' AS __insert".to_string(),
        format!("{} AS __keep", kept(spec)),
    ];
    for (i, c) in columns.iter().enumerate() {
        let (typed, failed) = typed(c);
        cols.push(format!("{typed} AS __v{i}"));
        cols.push(format!("{failed} AS __f{i}"));
    }
    format!(
        "CACHE TABLE {VIEW} AS\nSELECT {}\nFROM {RAW} r WHERE {}",
        cols.join(",\n  "),
        unskipped(skipped)
    )
}

/// Whether a source row `r` passes `where` (NULL does not).
fn kept(spec: &AppendFlow) -> String {
    match &spec.filter {
        Some(pred) => format!("coalesce(({pred}), false)"),
        None => "true".to_string(),
    }
}

/// Whether a source row `r` is of a version read (not one of `skipped`).
fn unskipped(skipped: &[i64]) -> String {
    match skipped.is_empty() {
        true => "true".to_string(),
        false => {
            let list: Vec<String> = skipped.iter().map(|v| format!("{v}L")).collect();
            format!("r._commit_version NOT IN ({})", list.join(", "))
        }
    }
}

/// The counts of `smelt_append`: rows read, not inserts, inserts left out by `where`, rows
/// appended, and per cast column the appended values that do not cast (`f<i>`).
pub(super) fn counts(columns: &[Column]) -> String {
    let mut cols = vec![
        "count(*) AS changes_read".to_string(),
        "count_if(NOT __insert) AS ignored".to_string(),
        "count_if(__insert AND NOT __keep) AS filtered".to_string(),
        "count_if(__insert AND __keep) AS appended".to_string(),
    ];
    for (i, _) in columns.iter().enumerate().filter(|(_, c)| c.cast) {
        cols.push(format!("count_if(__insert AND __keep AND __f{i}) AS f{i}"));
    }
    format!("SELECT {} FROM {VIEW}", cols.join(", "))
}

/// The first appended row (by version, file, row) with a value that does not cast: the
/// first such column (`i`), the raw value, the version and row position.
pub(super) fn first_failure(spec: &AppendFlow, columns: &[Column], skipped: &[i64]) -> String {
    let (which, any) = first_failed(columns);
    let keep = format!(
        "r._change_type = 'insert' AND {} AND {}",
        kept(spec),
        unskipped(skipped)
    );
    format!(
        "SELECT w.i, w.raw, _commit_version, _row_pos FROM (\n\
         SELECT {which} AS w, _commit_version, _file_pos, _row_pos FROM {RAW} r WHERE {keep} AND ({any})\n\
         ) ORDER BY {} LIMIT 1",
        crate::sql::order_by(&smelt_rules::order::read_order())
    )
}

/// The rows kept, as the target's columns: appended, or, in a rebuild, over the target's.
pub(super) fn insert(target: &str, columns: &[Column], rebuild: bool) -> String {
    let cols: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("__v{i} AS {}", ident(&c.name)))
        .collect();
    let verb = match rebuild {
        true => "INSERT OVERWRITE",
        false => "INSERT INTO",
    };
    format!(
        "{verb} {target} SELECT {} FROM {VIEW} WHERE __insert AND __keep",
        cols.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use smelt_spec::{ColumnType, FlowKind, Pipeline};

    use super::super::*;
    use super::*;

    fn flow(extra: &str) -> AppendFlow {
        let yaml = format!(
            "lake: l\nflows:\n  a:\n    append:\n      from: b.t\n      into: s.t\n      where: status = 'active'\n{extra}"
        );
        let pipeline = Pipeline::from_str(&yaml, "smelt.yaml".as_ref()).unwrap();
        match &pipeline.flows[0].kind {
            FlowKind::Append(spec) => spec.clone(),
            other => panic!("{other:?}"),
        }
    }

    fn state(target: Option<Vec<(&str, DataType)>>) -> Tables {
        let schema = |cols: Vec<(&str, DataType)>| -> SchemaRef {
            Arc::new(Schema::new(
                cols.into_iter()
                    .map(|(n, t)| Field::new(n, t, true))
                    .collect::<Vec<_>>(),
            ))
        };
        Tables {
            source_version: 3,
            source_schema: schema(vec![("id", DataType::Utf8), ("status", DataType::Utf8)]),
            target: None,
            target_schema: target.map(schema),
            watermark: None,
            source_meta: None,
        }
    }

    #[test]
    fn a_first_run_without_a_ddl_takes_the_source_columns_uncast() {
        let cols = columns(&flow(""), &state(None)).unwrap();
        assert_eq!(cols.len(), 2);
        assert!(cols.iter().all(|c| !c.cast && c.ty == ColumnType::String));
        assert_eq!(typed(&cols[0]), ("r.`id`".to_string(), "false".to_string()));
    }

    #[test]
    fn casts_need_the_spark_dialect_and_target_columns_the_source() {
        let target = Some(vec![("id", DataType::Int64), ("extra", DataType::Utf8)]);
        let problems = columns(&flow(""), &state(target.clone())).unwrap_err();
        let text: Vec<String> = problems.iter().map(|e| e.to_string()).collect();
        assert!(
            text[0].contains("column `id` is cast to INT64 by `cast_dialect: lenient`"),
            "{text:?}"
        );
        assert!(
            text[1].contains("target column `extra` is not a column of `b.t`"),
            "{text:?}"
        );
        let spark = flow("      cast_dialect: spark\n");
        let target = Some(vec![("id", DataType::Int64)]);
        let cols = columns(&spark, &state(target)).unwrap();
        assert!(cols[0].cast);
        assert!(typed(&cols[0]).0.starts_with("try_cast(r.`id` AS BIGINT)"));
    }

    #[test]
    fn the_rows_kept_are_inserts_passing_where_outside_skipped_versions() {
        let spec = flow("");
        let cols = columns(&spec, &state(None)).unwrap();
        let sql = cache(&spec, &cols, &[4, 6]);
        assert!(
            sql.contains("coalesce((status = 'active'), false) AS __keep"),
            "{sql}"
        );
        assert!(sql.contains("r._commit_version NOT IN (4L, 6L)"), "{sql}");
        assert_eq!(
            insert("delta.`/s/t`", &cols, false),
            format!(
                "INSERT INTO delta.`/s/t` SELECT __v0 AS `id`, __v1 AS `status` FROM {VIEW} WHERE __insert AND __keep"
            )
        );
        assert!(insert("t", &cols, true).starts_with("INSERT OVERWRITE t "));
    }
}
