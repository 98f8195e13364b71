//! Files as a `replace_where` batch: the files of a landing folder not applied yet, read
//! with the ingest readers (Parquet in its own types; Hive folders as columns).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use smelt_engine::EngineError;
use smelt_engine::replace::{BatchSink, BatchSource, Origin};
use smelt_spec::IngestFlow;

use crate::files::{Landing, LandingFile};
use crate::flow::read_file;
use crate::{IngestError, Malformed, RawRows, RowSink};

/// Some files of a landing folder, read as one batch.
pub struct FileBatch<'a> {
    /// How to read them.
    pub flow: &'a IngestFlow,
    /// Where they are.
    pub landing: &'a Landing,
    /// The files.
    pub files: &'a [LandingFile],
}

/// Hands a file's rows to a batch sink, its partition values as columns.
struct Forward<'a, 'b> {
    sink: &'a mut BatchSink<'b>,
    file: &'a LandingFile,
    error: Option<EngineError>,
}

impl RowSink for Forward<'_, '_> {
    fn rows(&mut self, raw: RawRows) -> crate::Result<()> {
        let n = raw.batch.num_rows();
        let mut fields: Vec<Field> = raw
            .batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let mut columns: Vec<ArrayRef> = raw.batch.columns().to_vec();
        for (k, v) in &self.file.partitions {
            if !fields.iter().any(|f| f.name() == k) {
                fields.push(Field::new(k, DataType::Utf8, true));
                columns.push(Arc::new(StringArray::from(vec![v.as_str(); n])));
            }
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        let origin = Origin {
            source: &self.file.url,
            rows: &raw.rows,
        };
        (self.sink)(batch, origin).map_err(|e| {
            let message = e.to_string();
            self.error = Some(e);
            IngestError::Options(message)
        })
    }

    fn malformed(&mut self, row: Malformed) -> crate::Result<()> {
        Err(IngestError::Malformed {
            file: self.file.url.clone(),
            message: format!(
                "line {}: {}; a replace_where batch must be whole",
                row.line, row.reason
            ),
        })
    }
}

#[async_trait]
impl BatchSource for FileBatch<'_> {
    async fn read(&self, sink: &mut BatchSink<'_>) -> smelt_engine::Result<()> {
        for file in self.files {
            let mut forward = Forward {
                sink: &mut *sink,
                file,
                error: None,
            };
            let read = tokio::task::block_in_place(|| {
                read_file(
                    self.flow,
                    self.landing,
                    file,
                    Arc::new(AtomicU64::new(0)),
                    &mut forward,
                )
            });
            if let Some(e) = forward.error {
                return Err(e);
            }
            read.map_err(|e| {
                EngineError::user(
                    e.to_string(),
                    "fix or replace the file (a new name is a new file), or move it out of the folder",
                )
            })?;
        }
        Ok(())
    }
}
