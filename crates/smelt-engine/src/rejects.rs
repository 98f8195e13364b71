//! Quarantined changes: the rejects table next to silver (`<silver>__rejects`), one row per
//! rejected change and reason, with the raw row as JSON.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    UInt32Array,
};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::util::display::array_value_to_string;
use smelt_core::change::{CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, timestamp_utc};
use smelt_spec::TableName;

use crate::{EngineError, Result};

/// The rejects table of a silver table: `<schema>.<table>__rejects`.
pub fn rejects_table(silver: &TableName) -> TableName {
    silver.sibling(format!("{}__rejects", silver.table))
}

/// Column of the rejects table holding the bronze version of the rejected change.
pub use smelt_rules::tables::SOURCE_VERSION;

/// The rejects table's columns ([`smelt_rules::tables::REJECTS_COLUMNS`]).
pub fn schema() -> SchemaRef {
    crate::schema::side_table(&smelt_rules::tables::REJECTS_COLUMNS)
}

/// Why rows are rejected: the rule (an expectation's name, `cast` or `sequence_conflict`),
/// the column and target type where one value is at fault, and the reason.
pub struct Reason<'a> {
    /// Rule name.
    pub rule: &'a str,
    /// The column at fault (its raw value is recorded), if any.
    pub column: Option<&'a str>,
    /// The type the value should have had.
    pub target_type: Option<&'a str>,
    /// What went wrong, for a human.
    pub reason: &'a str,
}

/// Rejected changes of one flow run, collected until they are written.
pub struct Rejects {
    run_id: String,
    flow: String,
    source: String,
    at_us: i64,
    batches: Vec<RecordBatch>,
}

impl Rejects {
    /// An empty collection for a run of `flow` reading `source`, stamped `at_us`.
    pub fn new(run_id: &str, flow: &str, source: &TableName, at_us: i64) -> Self {
        Self {
            run_id: run_id.to_string(),
            flow: flow.to_string(),
            source: source.to_string(),
            at_us,
            batches: Vec::new(),
        }
    }

    /// Rows collected.
    pub fn len(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// True when nothing was rejected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rejects `rows` of `changes` (a change batch: bronze or cast columns plus
    /// `_commit_version` and `_commit_timestamp`) for `why`.
    pub fn add(
        &mut self,
        changes: &RecordBatch,
        rows: &UInt32Array,
        why: &Reason<'_>,
    ) -> Result<()> {
        let n = rows.len();
        if n == 0 {
            return Ok(());
        }
        let picked = take_record_batch(changes, rows)?;
        let col = |name: &str| {
            picked
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| EngineError::Internal(format!("rejected rows without `{name}`")))
        };
        let version = arrow::compute::cast(&col(COMMIT_VERSION)?, &DataType::Int64)?;
        let commit_ts = arrow::compute::cast(&col(COMMIT_TIMESTAMP)?, &timestamp_utc())?;
        let raw_value: ArrayRef = match why.column {
            Some(c) => {
                let values = col(c)?;
                Arc::new(StringArray::from_iter((0..n).map(|i| {
                    values
                        .is_valid(i)
                        .then(|| array_value_to_string(&values, i).ok())
                        .flatten()
                })))
            }
            None => arrow::array::new_null_array(&DataType::Utf8, n),
        };
        let constant = |v: Option<&str>| -> ArrayRef { Arc::new(StringArray::from(vec![v; n])) };
        let columns: Vec<ArrayRef> = vec![
            constant(Some(&self.run_id)),
            constant(Some(&self.flow)),
            constant(Some(&self.source)),
            version,
            commit_ts,
            constant(Some(why.rule)),
            constant(why.column),
            raw_value,
            constant(why.target_type),
            constant(Some(why.reason)),
            Arc::new(StringArray::from(row_json(&picked)?)),
            Arc::new(TimestampMicrosecondArray::from(vec![self.at_us; n]).with_timezone("UTC")),
        ];
        self.batches.push(RecordBatch::try_new(schema(), columns)?);
        Ok(())
    }

    /// The collected rows of bronze versions in `(after, through]`, as one batch. Rows of
    /// versions up to `after` were written by an earlier run (or an interrupted run of the
    /// same range); rows past `through` belong to versions the run does not consume (a replay
    /// window with a gap), which the next run writes.
    pub fn between(self, after: Option<i64>, through: i64) -> Result<RecordBatch> {
        let all = arrow::compute::concat_batches(&schema(), &self.batches)?;
        let versions = all
            .column_by_name(SOURCE_VERSION)
            .expect("rejects schema")
            .as_primitive::<arrow::datatypes::Int64Type>();
        let mut keep =
            arrow::compute::kernels::cmp::lt_eq(versions, &Int64Array::new_scalar(through))?;
        if let Some(after) = after {
            let later = arrow::compute::kernels::cmp::gt(versions, &Int64Array::new_scalar(after))?;
            keep = arrow::compute::and(&keep, &later)?;
        }
        Ok(arrow::compute::filter_record_batch(&all, &keep)?)
    }
}

/// Each row of `batch` as a JSON object of its columns (change metadata and smelt's own
/// columns left out).
fn row_json(batch: &RecordBatch) -> Result<Vec<String>> {
    let keep: Vec<usize> = batch
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            let n = f.name().as_str();
            !(n == CHANGE_TYPE
                || n == COMMIT_VERSION
                || n == COMMIT_TIMESTAMP
                || n.starts_with("_smelt_"))
        })
        .map(|(i, _)| i)
        .collect();
    let data = batch.project(&keep)?;
    let mut buf = Vec::new();
    {
        let mut writer = arrow::json::writer::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
        writer.write(&data)?;
        writer.finish()?;
    }
    let text = String::from_utf8(buf)
        .map_err(|e| EngineError::Internal(format!("rejected row is not UTF-8 JSON: {e}")))?;
    Ok(text.lines().map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn rows_keep_raw_values_and_json_and_drop_replayed_versions() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("amount", DataType::Utf8, true),
            Field::new(COMMIT_VERSION, DataType::Int64, false),
            Field::new(COMMIT_TIMESTAMP, timestamp_utc(), false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(StringArray::from(vec![Some("1e9x"), None])),
                Arc::new(Int64Array::from(vec![3, 4])),
                Arc::new(TimestampMicrosecondArray::from(vec![0, 0]).with_timezone("UTC")),
            ],
        )
        .unwrap();
        let name = TableName::parse("b.t").unwrap();
        let mut r = Rejects::new("run", "f", &name, 7);
        let why = Reason {
            rule: "cast",
            column: Some("amount"),
            target_type: Some("DECIMAL(10,2)"),
            reason: "not a number",
        };
        r.add(&batch, &UInt32Array::from(vec![0, 1]), &why).unwrap();
        assert_eq!(r.len(), 2);
        let mut again = Rejects::new("run", "f", &name, 7);
        again
            .add(&batch, &UInt32Array::from(vec![0, 1]), &why)
            .unwrap();
        assert_eq!(
            again.between(None, 3).unwrap().num_rows(),
            1,
            "version 4 is past the versions the run consumes"
        );
        let out = r.between(Some(3), 4).unwrap();
        assert_eq!(
            out.num_rows(),
            1,
            "version 3 was written by an earlier attempt"
        );
        let text = |c: &str| {
            out.column_by_name(c)
                .unwrap()
                .as_string::<i32>()
                .value(0)
                .to_string()
        };
        assert_eq!(text("raw_row"), r#"{"id":"b","amount":null}"#);
        assert_eq!(text("rule"), "cast");
        assert_eq!(text("source_table"), "b.t");
        assert!(out.column_by_name("raw_value").unwrap().is_null(0));
    }
}
