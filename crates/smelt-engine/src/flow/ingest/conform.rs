//! Lines the rows of a file up with the bronze table: its columns in its order, new
//! columns added or rescued, values that do not fit kept in the rescued-data column, and
//! the audit columns filled.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, StringArray,
    TimestampMicrosecondArray, new_null_array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use smelt_core::change::timestamp_utc;
use smelt_spec::{IngestEvolution, IngestFlow};

use super::FIX_FILE;
use super::rescue::{Misfit, first_unrescued, rescued_objects, rescued_texts};
use crate::ports::{LandingFile, RawRows};
use crate::{EngineError, Result};

/// Rows ready for bronze.
#[derive(Debug)]
pub struct Conformed {
    /// The rows, with every bronze column (as the schema is after this batch).
    pub batch: RecordBatch,
    /// Columns this batch added to bronze (all of them for a table not created yet).
    pub new_fields: Vec<Field>,
    /// Rows with something in the rescued-data column.
    pub rescued: usize,
}

/// Lines rows up with one bronze table, as its schema grows.
pub struct Conformer<'a> {
    flow: &'a IngestFlow,
    schema: Option<SchemaRef>,
}

impl<'a> Conformer<'a> {
    /// For the flow `flow`, writing a bronze table with `schema` (`None`: not created
    /// yet; the first rows decide its columns).
    pub fn new(flow: &'a IngestFlow, schema: Option<SchemaRef>) -> Self {
        Self { flow, schema }
    }

    /// The bronze schema as it is now.
    pub fn schema(&self) -> Option<&SchemaRef> {
        self.schema.as_ref()
    }

    /// `file` does not fit bronze: `message` says why.
    fn malformed(&self, file: &LandingFile, message: String) -> EngineError {
        EngineError::user(format!("{}: {message}", file.url), FIX_FILE)
    }

    fn is_own(&self, name: &str) -> bool {
        self.flow.own_columns().contains(&name)
    }

    /// The columns the flow adds itself, typed.
    fn own_fields(&self) -> Vec<Field> {
        let a = &self.flow.audit;
        [
            a.datasource.as_ref().map(|n| (n, DataType::Utf8)),
            a.ingest_timestamp.as_ref().map(|n| (n, timestamp_utc())),
            a.file_row.as_ref().map(|n| (n, DataType::Int64)),
            self.flow.rescued_data.as_ref().map(|n| (n, DataType::Utf8)),
        ]
        .into_iter()
        .flatten()
        .map(|(n, t)| Field::new(n, t, true))
        .collect()
    }

    /// Lines up `raw`, read from `file`.
    pub fn conform(&mut self, raw: RawRows, file: &LandingFile) -> Result<Conformed> {
        let n = raw.batch.num_rows();
        let input = input_columns(&raw.batch, file);
        let Placement { new_fields, rescue } = self.place(&input, file)?;
        let schema = Arc::clone(self.schema.as_ref().expect("set above"));
        let (mut columns, failed) = self.columns(&schema, &input, &raw, file)?;

        // The rescued-data column: unknown columns, values that did not fit their type,
        // and fields without a name, as one JSON object per row.
        let mut rescued = 0;
        let objects = rescued_objects(&rescue, &failed, raw.extra.as_deref(), n)?;
        if objects.iter().any(|o| !o.is_empty()) {
            let Some(column) = &self.flow.rescued_data else {
                let (what, row) =
                    first_unrescued(&rescue, &failed, &objects, &schema, &raw.rows, n)?;
                return Err(self.malformed(
                    file,
                    format!(
                        "row {row}: {what}, and `rescued_data` is off; turn it on to keep such values"
                    ),
                ));
            };
            let (texts, count) = rescued_texts(objects);
            rescued = count;
            let at = schema.index_of(column)?;
            columns[at] = Arc::new(texts);
        }
        let batch = RecordBatch::try_new_with_options(
            schema,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        Ok(Conformed {
            batch,
            new_fields,
            rescued,
        })
    }

    /// Settles the bronze schema for `input`, read from `file`: the first rows decide its
    /// columns; later ones add theirs, or have them rescued, as `schema_evolution` says.
    fn place(&mut self, input: &[(Field, ArrayRef)], file: &LandingFile) -> Result<Placement> {
        match &self.schema {
            None => {
                let placement = self.first_placement(input);
                self.schema = Some(Arc::new(Schema::new(placement.new_fields.clone())));
                Ok(placement)
            }
            Some(schema) => {
                let (fields, placement) = self.evolved_placement(schema, input, file)?;
                if !placement.new_fields.is_empty() {
                    self.schema = Some(Arc::new(Schema::new(fields)));
                }
                Ok(placement)
            }
        }
    }

    /// The columns of a bronze table `input` creates: its own (typed by inference when the
    /// flow says so), then the flow's; input columns named like the flow's are rescued.
    fn first_placement(&self, input: &[(Field, ArrayRef)]) -> Placement {
        let mut fields: Vec<Field> = Vec::new();
        let mut rescue: Vec<(String, ArrayRef)> = Vec::new();
        for (f, c) in input {
            if self.is_own(f.name()) {
                rescue.push((f.name().clone(), Arc::clone(c)));
                continue;
            }
            let ty = if self.flow.infer_types {
                infer(c)
            } else {
                c.data_type().clone()
            };
            fields.push(Field::new(f.name(), ty, true));
        }
        fields.extend(self.own_fields());
        Placement {
            new_fields: fields,
            rescue,
        }
    }

    /// Bronze's columns once `input`, read from `file`, is added to `schema`: the flow's
    /// columns it lacks, then the input's new ones as `schema_evolution` says (added,
    /// rescued, or an error under `fail`); with what was added and what is rescued.
    fn evolved_placement(
        &self,
        schema: &SchemaRef,
        input: &[(Field, ArrayRef)],
        file: &LandingFile,
    ) -> Result<(Vec<Field>, Placement)> {
        let mut new_fields = Vec::new();
        let mut rescue: Vec<(String, ArrayRef)> = Vec::new();
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        // Audit or rescued-data columns turned on after bronze was created.
        for own in self.own_fields() {
            if schema.field_with_name(own.name()).is_err() {
                fields.push(own.clone());
                new_fields.push(own);
            }
        }
        for (f, c) in input {
            if schema.field_with_name(f.name()).is_ok() && !self.is_own(f.name()) {
                continue;
            }
            match self.flow.schema_evolution {
                IngestEvolution::AddNewColumns if !self.is_own(f.name()) => {
                    let field = Field::new(f.name(), c.data_type().clone(), true);
                    fields.push(field.clone());
                    new_fields.push(field);
                }
                IngestEvolution::Fail if !self.is_own(f.name()) => {
                    return Err(self.malformed(
                        file,
                        format!(
                            "column `{}` is not in bronze `{}` (schema_evolution: fail)",
                            f.name(),
                            self.flow.into
                        ),
                    ));
                }
                _ => rescue.push((f.name().clone(), Arc::clone(c))),
            }
        }
        Ok((fields, Placement { new_fields, rescue }))
    }

    /// The columns of `schema` for the rows `raw` of `file`: the audit values, the input
    /// columns cast to bronze's types (nulls where the input has none) and a null
    /// rescued-data column, filled later; with the values that did not fit their type.
    fn columns(
        &self,
        schema: &SchemaRef,
        input: &[(Field, ArrayRef)],
        raw: &RawRows,
        file: &LandingFile,
    ) -> Result<(Vec<ArrayRef>, Vec<Misfit>)> {
        let n = raw.batch.num_rows();
        let mut failed: Vec<Misfit> = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            let name = f.name();
            let column: ArrayRef = match self.own_column(name, raw, file) {
                Some(column) => column,
                None => match input.iter().find(|(i, _)| i.name() == name) {
                    None => new_null_array(f.data_type(), n),
                    Some((_, c)) if c.data_type() == f.data_type() => Arc::clone(c),
                    Some((_, c)) => {
                        let cast = smelt_core::cast::cast_column(c, f.data_type(), None)
                            .map_err(|e| self.malformed(file, format!("column `{name}`: {e}")))?;
                        if !cast.failed_rows.is_empty() {
                            failed.push((name.clone(), Arc::clone(c), cast.failed_rows));
                        }
                        cast.array
                    }
                },
            };
            columns.push(column);
        }
        Ok((columns, failed))
    }

    /// The column `name` when the flow adds it itself, for the rows `raw` of `file`: an
    /// audit column, or the rescued-data column as nulls (filled later); else `None`.
    fn own_column(&self, name: &str, raw: &RawRows, file: &LandingFile) -> Option<ArrayRef> {
        let n = raw.batch.num_rows();
        let audit = &self.flow.audit;
        let column: ArrayRef = if Some(name) == audit.datasource.as_deref() {
            Arc::new(StringArray::from(vec![file.url.as_str(); n]))
        } else if Some(name) == audit.ingest_timestamp.as_deref() {
            Arc::new(
                TimestampMicrosecondArray::from(vec![file.modified_us; n]).with_timezone("UTC"),
            )
        } else if Some(name) == audit.file_row.as_deref() {
            Arc::new(Int64Array::from(raw.rows.clone()))
        } else if Some(name) == self.flow.rescued_data.as_deref() {
            new_null_array(&DataType::Utf8, n) // filled later
        } else {
            return None;
        };
        Some(column)
    }
}

/// Where the columns of a batch go, beyond those bronze has.
struct Placement {
    /// Columns the batch adds to bronze (all of them for a table not created yet).
    new_fields: Vec<Field>,
    /// Columns kept whole in the rescued-data column, by name.
    rescue: Vec<(String, ArrayRef)>,
}

/// The columns of `batch`, then the values of `file`'s partition folders that are not
/// among them (text, the same on every row).
fn input_columns(batch: &RecordBatch, file: &LandingFile) -> Vec<(Field, ArrayRef)> {
    let n = batch.num_rows();
    let mut input: Vec<(Field, ArrayRef)> = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| (f.as_ref().clone(), Arc::clone(c)))
        .collect();
    for (k, v) in &file.partitions {
        if !input.iter().any(|(f, _)| f.name() == k) {
            input.push((
                Field::new(k, DataType::Utf8, true),
                Arc::new(StringArray::from(vec![v.as_str(); n])),
            ));
        }
    }
    input
}

/// The type of a text column's values: BIGINT, DOUBLE or BOOLEAN when every value is one,
/// else STRING (also when there is none).
fn infer(column: &ArrayRef) -> DataType {
    let Some(text) = column.as_any().downcast_ref::<StringArray>() else {
        return column.data_type().clone();
    };
    let values: Vec<&str> = text.iter().flatten().map(str::trim).collect();
    if values.is_empty() {
        DataType::Utf8
    } else if values.iter().all(|v| v.parse::<i64>().is_ok()) {
        DataType::Int64
    } else if values.iter().all(|v| v.parse::<f64>().is_ok()) {
        DataType::Float64
    } else if values
        .iter()
        .all(|v| v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"))
    {
        DataType::Boolean
    } else {
        DataType::Utf8
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use smelt_spec::{FileFormat, IngestAudit, OnChangedFile};

    use super::*;

    fn flow() -> IngestFlow {
        IngestFlow {
            from: "landing".into(),
            folder: "landing".into(),
            url: None,
            pattern: None,
            into: smelt_spec::TableName::parse("bronze.t").unwrap(),
            format: FileFormat::Csv,
            csv: Default::default(),
            infer_types: false,
            audit: IngestAudit {
                file_row: Some("_file_row".into()),
                ..IngestAudit::default()
            },
            rescued_data: Some("_rescued_data".into()),
            schema_evolution: IngestEvolution::AddNewColumns,
            on_changed_file: OnChangedFile::Ignore,
            max_files_per_run: None,
        }
    }

    fn file() -> LandingFile {
        LandingFile {
            location: "/l/day=2026-07-21/a.csv".into(),
            relative: "day=2026-07-21/a.csv".into(),
            url: "file:///l/day=2026-07-21/a.csv".into(),
            size: 10,
            modified_us: 1_000_000,
            partitions: vec![("day".into(), "2026-07-21".into())],
        }
    }

    fn raw(columns: &[(&str, Vec<Option<&str>>)], extra: Option<Vec<Option<String>>>) -> RawRows {
        let batch = RecordBatch::try_from_iter(
            columns
                .iter()
                .map(|(n, v)| (*n, Arc::new(StringArray::from(v.clone())) as ArrayRef)),
        )
        .unwrap();
        let rows = (1..=batch.num_rows() as i64).collect();
        RawRows { batch, rows, extra }
    }

    fn names(schema: &SchemaRef) -> Vec<&str> {
        schema.fields().iter().map(|f| f.name().as_str()).collect()
    }

    fn text(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
        let c = batch.column_by_name(column).unwrap();
        let c = arrow::compute::cast(c, &DataType::Utf8).unwrap();
        c.as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    }

    #[test]
    fn first_rows_decide_the_columns_then_new_ones_are_added() {
        let flow = flow();
        let mut c = Conformer::new(&flow, None);
        let out = c
            .conform(raw(&[("id", vec![Some("1"), Some("2")])], None), &file())
            .unwrap();
        assert_eq!(
            names(out.batch.schema_ref()),
            [
                "id",
                "day",
                "_datasource",
                "_ingest_timestamp",
                "_file_row",
                "_rescued_data"
            ]
        );
        assert_eq!(out.new_fields.len(), 6);
        assert_eq!(
            text(&out.batch, "day"),
            [Some("2026-07-21".into()), Some("2026-07-21".into())]
        );
        assert_eq!(
            text(&out.batch, "_file_row"),
            [Some("1".into()), Some("2".into())]
        );
        assert_eq!(
            out.batch
                .column_by_name("_ingest_timestamp")
                .unwrap()
                .data_type(),
            &timestamp_utc()
        );

        let out = c
            .conform(
                raw(&[("name", vec![Some("x")]), ("id", vec![Some("3")])], None),
                &file(),
            )
            .unwrap();
        assert_eq!(
            out.new_fields
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>(),
            ["name"]
        );
        assert_eq!(names(out.batch.schema_ref()).last(), Some(&"name"));
        assert_eq!(text(&out.batch, "id"), [Some("3".into())]);
        assert_eq!(out.rescued, 0);
    }

    #[test]
    fn rescue_keeps_unknown_columns_extra_fields_and_values_that_do_not_fit() {
        let mut flow = flow();
        flow.schema_evolution = IngestEvolution::Rescue;
        flow.infer_types = true;
        let mut c = Conformer::new(&flow, None);
        c.conform(raw(&[("n", vec![Some("1")])], None), &file())
            .unwrap();
        assert_eq!(c.schema().unwrap().field(0).data_type(), &DataType::Int64);
        let out = c
            .conform(
                raw(
                    &[
                        ("n", vec![Some("2"), Some("two")]),
                        ("color", vec![None, Some("red")]),
                    ],
                    Some(vec![Some(r#"{"_c2":"x"}"#.into()), None]),
                ),
                &file(),
            )
            .unwrap();
        assert!(out.new_fields.is_empty());
        assert_eq!(text(&out.batch, "n"), [Some("2".into()), None]);
        assert_eq!(
            text(&out.batch, "_rescued_data"),
            [
                Some(r#"{"_c2":"x"}"#.into()),
                Some(r#"{"color":"red","n":"two"}"#.into())
            ]
        );
        assert_eq!(out.rescued, 2);
    }

    #[test]
    fn fail_and_no_rescue_column_name_the_file_and_row() {
        let mut flow = flow();
        flow.schema_evolution = IngestEvolution::Fail;
        let mut c = Conformer::new(&flow, None);
        c.conform(raw(&[("a", vec![Some("1")])], None), &file())
            .unwrap();
        let err = c
            .conform(raw(&[("b", vec![Some("1")])], None), &file())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("column `b` is not in bronze `bronze.t`"),
            "{err}"
        );
        // The file first; the flow is named once, where it runs (`EngineError::InFlow`).
        assert!(err.starts_with("file:///l/"), "{err}");

        let mut flow = self::flow();
        flow.rescued_data = None;
        let mut c = Conformer::new(&flow, None);
        c.conform(raw(&[("a", vec![Some("1")])], None), &file())
            .unwrap();
        let err = c
            .conform(
                raw(
                    &[("a", vec![Some("1"), Some("2")])],
                    Some(vec![None, Some("{\"_c1\":\"z\"}".into())]),
                ),
                &file(),
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 2: the line has more fields"), "{err}");
    }

    #[test]
    fn inference() {
        let col = |v: Vec<Option<&str>>| Arc::new(StringArray::from(v)) as ArrayRef;
        assert_eq!(
            infer(&col(vec![Some("1"), None, Some(" -2")])),
            DataType::Int64
        );
        assert_eq!(infer(&col(vec![Some("1"), Some("2.5")])), DataType::Float64);
        assert_eq!(
            infer(&col(vec![Some("TRUE"), Some("false")])),
            DataType::Boolean
        );
        assert_eq!(infer(&col(vec![Some("1"), Some("x")])), DataType::Utf8);
        assert_eq!(infer(&col(vec![None])), DataType::Utf8);
    }
}
