//! Files as a `replace_where` batch: the files of a landing folder not applied yet, read
//! through the [`Landing`] port (Parquet in its own types; Hive folders as columns).

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use futures::TryStreamExt;

use crate::flow::replace_where::{BatchSink, BatchSource, Origin};
use crate::ports::{FileRows, Landing, LandingFile, RawRows};
use crate::{EngineError, Result};

/// Some files of a landing folder, read as one batch.
pub struct FileBatch<'a> {
    /// Where they are.
    pub landing: &'a dyn Landing,
    /// The files.
    pub files: &'a [LandingFile],
}

/// A file's rows, its partition values as columns.
fn with_partitions(raw: &RawRows, file: &LandingFile) -> Result<RecordBatch> {
    let n = raw.batch.num_rows();
    let mut fields: Vec<Field> = raw
        .batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let mut columns: Vec<ArrayRef> = raw.batch.columns().to_vec();
    for (k, v) in &file.partitions {
        if !fields.iter().any(|f| f.name() == k) {
            fields.push(Field::new(k, DataType::Utf8, true));
            columns.push(Arc::new(StringArray::from(vec![v.as_str(); n])));
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

#[async_trait]
impl BatchSource for FileBatch<'_> {
    async fn read(&self, sink: &mut BatchSink<'_>) -> Result<()> {
        for file in self.files {
            let mut rows = self.landing.read(file);
            while let Some(item) = rows.try_next().await? {
                match item {
                    FileRows::Rows(raw, _) => {
                        let batch = with_partitions(&raw, file)?;
                        let origin = Origin {
                            source: &file.url,
                            rows: Some(&raw.rows),
                        };
                        sink(batch, origin)?;
                    }
                    FileRows::Malformed(row) => {
                        return Err(EngineError::user(
                            format!(
                                "{}: line {}: {}; a replace_where batch must be whole",
                                file.url, row.line, row.reason
                            ),
                            "fix or replace the file (a new name is a new file), or move it out of the folder",
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
