//! Parquet files, a row group's batch at a time: columns as text (bronze's raw layer), or
//! in their own types with `infer_types`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, AsArray, RecordBatch, RecordBatchOptions, RecordBatchReader, StringBuilder,
};
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
        let batch = if keep_types {
            delta_safe(&batch)?
        } else {
            as_text(&batch)?
        };
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
        let batch = if keep_types {
            delta_safe(&empty)?
        } else {
            as_text(&empty)?
        };
        sink.rows(RawRows {
            batch,
            rows: Vec::new(),
            extra: None,
        })?;
    }
    Ok(())
}

/// A type a Delta table can hold for `dt`, when `dt` is not one: timestamps in µs (UTC
/// when zoned), unsigned integers as wider signed ones (or DECIMAL(20,0)), views and large
/// variants as plain strings and bytes.
fn delta_type(dt: &DataType) -> Option<DataType> {
    use arrow::datatypes::TimeUnit;
    Some(match dt {
        DataType::Timestamp(TimeUnit::Microsecond, None) => return None,
        DataType::Timestamp(TimeUnit::Microsecond, Some(tz)) if tz.as_ref() == "UTC" => {
            return None;
        }
        DataType::Timestamp(_, tz) => {
            DataType::Timestamp(TimeUnit::Microsecond, tz.as_ref().map(|_| "UTC".into()))
        }
        DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 => DataType::Int64,
        DataType::UInt64 => DataType::Decimal128(20, 0),
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        _ => return None,
    })
}

/// `batch` with the columns whose type Delta lacks cast to one it has.
fn delta_safe(batch: &RecordBatch) -> Result<RecordBatch> {
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| delta_type(f.data_type()).is_some())
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        match delta_type(f.data_type()) {
            Some(to) => {
                columns.push(cast(c, &to)?);
                fields.push(Field::new(f.name(), to, true));
            }
            None => {
                columns.push(Arc::clone(c));
                fields.push(f.as_ref().clone());
            }
        }
    }
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
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
            // Bytes are shown as hex (a cast would make invalid UTF-8 NULL).
            let bytes = matches!(
                c.data_type(),
                DataType::Binary
                    | DataType::LargeBinary
                    | DataType::BinaryView
                    | DataType::FixedSizeBinary(_)
            );
            if !bytes && can_cast_types(c.data_type(), &DataType::Utf8) {
                return Ok(cast(c, &DataType::Utf8)?);
            }
            let format = FormatOptions::default().with_null("");
            let formatter = ArrayFormatter::try_new(c.as_ref(), &format)?;
            // Bytes that are UTF-8 text (strings some writers store as plain bytes) stay text.
            let text = bytes.then(|| cast(c, &DataType::Binary)).transpose()?;
            let text = text.as_ref().map(|b| b.as_binary::<i32>());
            let mut b = StringBuilder::new();
            for i in 0..c.len() {
                if c.is_null(i) {
                    b.append_null();
                } else if let Some(Ok(t)) = text.map(|t| std::str::from_utf8(t.value(i))) {
                    b.append_value(t);
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

    #[test]
    fn types_delta_lacks_are_cast_and_bytes_not_utf8_shown_as_hex() {
        use arrow::array::{BinaryArray, TimestampNanosecondArray, UInt32Array};
        use arrow::datatypes::TimeUnit;
        let batch = RecordBatch::try_from_iter([
            (
                "ts",
                Arc::new(
                    TimestampNanosecondArray::from(vec![1_500_000_000, 0])
                        .with_timezone("Asia/Tokyo"),
                ) as ArrayRef,
            ),
            ("n", Arc::new(UInt32Array::from(vec![7, 8])) as ArrayRef),
            (
                "b",
                Arc::new(BinaryArray::from(vec![&[0xff_u8, 0x00][..], &b"hello"[..]])) as ArrayRef,
            ),
        ])
        .unwrap();
        let safe = delta_safe(&batch).unwrap();
        assert_eq!(
            safe.column(0).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        assert_eq!(
            safe.column(0)
                .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                .value(0),
            1_500_000
        );
        assert_eq!(safe.column(1).data_type(), &DataType::Int64);
        let text = as_text(&batch).unwrap();
        assert_eq!(text.column(2).as_string::<i32>().value(0), "ff00");
        assert_eq!(text.column(2).as_string::<i32>().value(1), "hello");
    }
}
