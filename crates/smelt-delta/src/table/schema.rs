//! Schema evolution: the schema a run writes (`current_schema`), new columns
//! (`add_columns`), wider types (`widen`), and rows lined up with the table's schema
//! (`align_to`).

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use deltalake::DeltaTable;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::{Action, StructType};
use deltalake::protocol::{DeltaOperation, SaveMode};
use smelt_engine::ports::keys;
use smelt_engine::ports::{TableView, WriteStats};

use super::DeltaLakeTable;
use super::batches::read_whole;
use crate::error::{Context, Error, Result};

impl DeltaLakeTable {
    /// The schema of the existing `table` as this run writes it: with the columns it adds.
    pub(super) fn current_schema(&self, table: &DeltaTable) -> Result<SchemaRef> {
        match &self.staged.evolved {
            Some(evolved) => Ok(Arc::clone(evolved)),
            None => Ok(table
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?
                .snapshot()
                .arrow_schema()),
        }
    }

    /// `TableSink::add_columns`: the schema with the new columns, for the table this
    /// commit creates or in the commit's metadata.
    pub(super) fn add_columns(&mut self, fields: Vec<Field>) -> smelt_engine::Result<()> {
        let current = self.schema().ok_or_else(|| {
            Error::user(
                format!("silver `{}` does not exist yet", self.name),
                "run the flow once to create it",
            )
        })?;
        let mut all: Vec<Field> = current
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for f in fields {
            if current.field_with_name(f.name()).is_err() {
                all.push(f.with_nullable(true));
            }
        }
        let evolved = Arc::new(Schema::new(all));
        // A table created by this commit is created with the columns.
        if self.pending.is_some() {
            self.pending = Some(evolved);
        } else {
            self.staged.evolved = Some(evolved);
        }
        Ok(())
    }

    /// `TableSink::widen`: every file rewritten with `schema`'s wider types, in a commit
    /// of its own that changes no data.
    pub(super) async fn widen(
        &mut self,
        schema: SchemaRef,
        keys: &[String],
    ) -> smelt_engine::Result<WriteStats> {
        let table = self.table()?.clone();
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        let columns: StructType = schema.as_ref().try_into_kernel().map_err(Error::Arrow)?;
        let metadata =
            deltalake::kernel::MetadataExt::with_schema(snapshot.metadata().clone(), &columns)
                .map_err(deltalake::DeltaTableError::from)
                .context(|| format!("widening the columns of `{}`", self.name))?;
        let mut actions = vec![Action::Metadata(metadata)];
        // Every file again, cast to the wider types: the values do not change
        // (`dataChange: false`, so change-feed readers skip the commit).
        let store = table.object_store();
        let name = self.name.to_string();
        for f in self.active_files(&table).await? {
            let rows = read_whole(Arc::clone(&store), &name, &f.file, None, None, &schema).await?;
            let mut remove = f.remove;
            remove.data_change = false;
            actions.push(Action::Remove(remove));
            for mut add in self.write_data(&rows, keys).await? {
                add.data_change = false;
                actions.push(Action::Add(add));
            }
        }
        // Every file was rewritten from the version read: no retry over another commit.
        let props = CommitProperties::default()
            .with_metadata([(
                keys::OPERATION.to_string(),
                serde_json::json!("widen column types"),
            )])
            .with_max_retries(0);
        let operation = DeltaOperation::Write {
            mode: SaveMode::Overwrite,
            partition_by: None,
            predicate: None,
        };
        Ok(self.commit_actions(actions, operation, props).await?)
    }
}
