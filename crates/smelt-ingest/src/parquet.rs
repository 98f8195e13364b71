//! Parquet files, a row group's batch at a time: columns as text (bronze's raw layer), or
//! in their own types with `infer_types`.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, RecordBatchReader, StringBuilder};
use arrow::compute::{can_cast_types, cast};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::ChunkReader;

use crate::{IngestError, RawRows, Result, RowSink};

/// Reads the Parquet file `input` (named `file` in errors) into `sink`, `batch_size`
/// rows at a time. With `keep_types` false every column becomes text: what a cast to
/// STRING gives, nested values as displayed by Arrow.
pub fn read_parquet<T: ChunkReader + 'static>(
    input: T,
    file: &str,
    keep_types: bool,
    batch_size: usize,
    sink: &mut dyn RowSink,
) -> Result<()> {
    let malformed = |e: &dyn std::fmt::Display| IngestError::Malformed {
        file: file.to_string(),
        message: format!("not a readable Parquet file: {e}"),
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(input)
        .map_err(|e| malformed(&e))?
        .with_batch_size(batch_size.max(1))
        .build()
        .map_err(|e| malformed(&e))?;
    let mut row = 0i64;
    let mut any = false;
    let schema = reader.schema();
    for batch in reader {
        let batch = batch.map_err(|e| malformed(&e))?;
        let batch = if keep_types { batch } else { as_text(&batch)? };
        let rows: Vec<i64> = (row + 1..=row + batch.num_rows() as i64).collect();
        row += batch.num_rows() as i64;
        any = true;
        sink.rows(RawRows {
            batch,
            rows,
            extra: None,
        })?;
    }
    if !any {
        // An empty file still names its columns.
        let empty = RecordBatch::new_empty(schema);
        let batch = if keep_types { empty } else { as_text(&empty)? };
        sink.rows(RawRows {
            batch,
            rows: Vec::new(),
            extra: None,
        })?;
    }
    Ok(())
}

/// Every column as text.
fn as_text(batch: &RecordBatch) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| {
            if c.data_type() == &DataType::Utf8 {
                return Ok(Arc::clone(c));
            }
            if can_cast_types(c.data_type(), &DataType::Utf8) {
                return Ok(cast(c, &DataType::Utf8)?);
            }
            let format = FormatOptions::default().with_null("");
            let formatter = ArrayFormatter::try_new(c.as_ref(), &format)?;
            let mut b = StringBuilder::new();
            for i in 0..c.len() {
                if c.is_null(i) {
                    b.append_null();
                } else {
                    b.append_value(formatter.value(i).to_string());
                }
            }
            Ok(Arc::new(b.finish()) as ArrayRef)
        })
        .collect::<Result<Vec<_>>>()?;
    let schema = Arc::new(Schema::new(
        batch
            .schema()
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use arrow::array::{Array, AsArray, Int64Array, StringArray};
    use parquet::arrow::ArrowWriter;

    use super::*;

    struct Collect(Vec<RawRows>);
    impl RowSink for Collect {
        fn rows(&mut self, rows: RawRows) -> Result<()> {
            self.0.push(rows);
            Ok(())
        }
        fn malformed(&mut self, _: crate::Malformed) -> Result<()> {
            unreachable!("parquet has no malformed rows")
        }
    }

    #[test]
    fn columns_as_text_or_typed_with_row_numbers() {
        let batch = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])) as ArrayRef,
            ),
            (
                "name",
                Arc::new(StringArray::from(vec!["a", "b", "c"])) as ArrayRef,
            ),
        ])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let mut w =
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();

        let mut sink = Collect(Vec::new());
        read_parquet(File::open(&path).unwrap(), "f", false, 2, &mut sink).unwrap();
        assert_eq!(sink.0.len(), 2);
        let ids = sink.0[0].batch.column(0).as_string::<i32>();
        assert_eq!((ids.value(0), ids.is_null(1)), ("1", true));
        assert_eq!(sink.0[1].rows, [3]);

        let mut sink = Collect(Vec::new());
        read_parquet(File::open(&path).unwrap(), "f", true, 10, &mut sink).unwrap();
        assert_eq!(sink.0[0].batch.column(0).data_type(), &DataType::Int64);

        std::fs::write(&path, b"not parquet").unwrap();
        let err = read_parquet(
            File::open(&path).unwrap(),
            "f.parquet",
            false,
            10,
            &mut sink,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("f.parquet: not a readable Parquet file"),
            "{err}"
        );
    }
}
