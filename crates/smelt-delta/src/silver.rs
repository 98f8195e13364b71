//! Silver tables: lookups for the guard and the upsert that commits data and watermark
//! in one Delta commit (DESIGN §3.8).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use deltalake::DeltaTable;
use deltalake::datafusion::common::{Column, JoinType};
use deltalake::datafusion::logical_expr::{Expr, Operator, binary_expr};
use deltalake::datafusion::prelude::SessionContext;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Transaction};
use deltalake::logstore::get_actions;
use deltalake::protocol::{DeltaOperation, SaveMode};
use smelt_engine::ports::{SilverTable, Watermark, WriteStats};
use smelt_spec::TableName;

use crate::Lake;
use crate::error::{Context, Error, Result};

/// A silver Delta table (it may not exist yet).
pub struct DeltaSilver {
    lake: Lake,
    name: TableName,
    table: Option<DeltaTable>,
    /// Schema of a table to create with the first upsert (one commit: metadata, data and
    /// watermark, so a failed first run leaves no table behind).
    pending: Option<SchemaRef>,
}

impl DeltaSilver {
    /// Opens the silver table if it exists.
    pub async fn open(lake: &Lake, name: &TableName) -> Result<Self> {
        Ok(Self {
            lake: lake.clone(),
            name: name.clone(),
            table: lake.open(name).await?,
            pending: None,
        })
    }

    fn table(&self) -> Result<&DeltaTable> {
        self.table.as_ref().ok_or_else(|| {
            Error::user(
                format!("silver table `{}` does not exist yet", self.name),
                "run the flow once to create it",
            )
        })
    }

    fn commit_properties(watermark: &Watermark) -> CommitProperties {
        CommitProperties::default()
            .with_application_transaction(Transaction::new(&watermark.app_id, watermark.version))
            .with_metadata([
                (
                    "smelt.run_id".to_string(),
                    serde_json::json!(watermark.run_id),
                ),
                (
                    "smelt.flow".to_string(),
                    serde_json::json!(watermark.app_id),
                ),
                (
                    "smelt.source_version".to_string(),
                    serde_json::json!(watermark.version),
                ),
            ])
    }

    /// Counts the data files a commit added and removed, and the bytes added.
    async fn commit_stats(&self, table: &DeltaTable, version: i64) -> Result<WriteStats> {
        let bytes = table
            .log_store()
            .read_commit_entry(version as u64)
            .await
            .context(|| format!("reading the log of `{}`", self.name))?
            .unwrap_or_default();
        let mut stats = WriteStats {
            version,
            ..WriteStats::default()
        };
        for a in get_actions(version as u64, &bytes)
            .context(|| format!("reading the log of `{}`", self.name))?
        {
            match a {
                Action::Add(add) => {
                    stats.files_added += 1;
                    stats.bytes_written += add.size.max(0) as u64;
                }
                Action::Remove(_) => stats.files_removed += 1,
                _ => {}
            }
        }
        Ok(stats)
    }
}

/// `l IS NOT DISTINCT FROM r`: NULL-safe equality.
fn not_distinct(l: Expr, r: Expr) -> Expr {
    binary_expr(l, Operator::IsNotDistinctFrom, r)
}

fn qualified(relation: &str, name: &str) -> Expr {
    Expr::Column(Column::new(Some(relation), name))
}

#[async_trait]
impl SilverTable for DeltaSilver {
    fn table(&self) -> &TableName {
        &self.name
    }

    fn schema(&self) -> Option<SchemaRef> {
        if let Some(pending) = &self.pending {
            return Some(Arc::clone(pending));
        }
        let snapshot = self.table.as_ref()?.snapshot().ok()?;
        Some(snapshot.snapshot().arrow_schema())
    }

    fn version(&self) -> Option<i64> {
        self.table.as_ref()?.version().map(|v| v as i64)
    }

    async fn watermark(&self, app_id: &str) -> smelt_engine::Result<Option<i64>> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        Ok(snapshot
            .transaction_version(table.log_store().as_ref(), app_id)
            .await
            .context(|| format!("reading the watermark of `{}`", self.name))?)
    }

    async fn create(&mut self, schema: SchemaRef) -> smelt_engine::Result<()> {
        if self.table.is_some() {
            return Err(smelt_engine::EngineError::Internal(format!(
                "create called for `{}`, which already exists",
                self.name
            )));
        }
        self.pending = Some(schema);
        Ok(())
    }

    async fn lookup(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<RecordBatch> {
        let table = self.table()?;
        let ctx = SessionContext::new();
        table
            .update_datafusion_session(&ctx.state())
            .context(|| format!("scanning `{}`", self.name))?;
        let provider = table
            .table_provider()
            .await
            .context(|| format!("scanning `{}`", self.name))?;
        let silver = ctx
            .read_table(provider)
            .context(|| format!("scanning `{}`", self.name))?;
        // Key columns renamed so the join sides never clash.
        let silver_keys: Vec<String> = keys
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let renamed: Vec<String> = (0..keys.num_columns())
            .map(|i| format!("__smelt_key_{i}"))
            .collect();
        let key_schema = Arc::new(Schema::new(
            keys.schema()
                .fields()
                .iter()
                .zip(&renamed)
                .map(|(f, n)| f.as_ref().clone().with_name(n))
                .collect::<Vec<_>>(),
        ));
        let keys =
            RecordBatch::try_new(key_schema, keys.columns().to_vec()).map_err(Error::Arrow)?;
        let keys_df = ctx
            .read_batch(keys)
            .context(|| "reading keys".to_string())?;
        let on: Vec<Expr> = silver_keys
            .iter()
            .zip(&renamed)
            .map(|(s, k)| {
                not_distinct(
                    Expr::Column(Column::from_name(s.as_str())),
                    Expr::Column(Column::from_name(k.as_str())),
                )
            })
            .collect();
        let found = silver
            .join_on(keys_df, JoinType::LeftSemi, on)
            .and_then(|df| {
                df.select(
                    columns
                        .iter()
                        .map(|c| Expr::Column(Column::from_name(c.as_str())))
                        .collect::<Vec<_>>(),
                )
            })
            .context(|| format!("looking up keys in `{}`", self.name))?;
        let schema: SchemaRef = Arc::new(found.schema().as_arrow().clone());
        let batches = found
            .collect()
            .await
            .context(|| format!("looking up keys in `{}`", self.name))?;
        Ok(arrow::compute::concat_batches(&schema, &batches).map_err(Error::Arrow)?)
    }

    async fn upsert(
        &mut self,
        rows: RecordBatch,
        keys: &[String],
        watermark: &Watermark,
    ) -> smelt_engine::Result<WriteStats> {
        let props = Self::commit_properties(watermark);
        if let Some(schema) = self.pending.take() {
            return self.create_with(schema, rows, props).await;
        }
        let table = self.table()?.clone();
        // Each branch commits once and yields the table at its new version.
        let committed = if rows.num_rows() == 0 {
            // Nothing to change, but the watermark must still move.
            let snapshot = table
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?;
            let commit = CommitBuilder::from(props)
                .with_actions(vec![])
                .build(
                    Some(snapshot),
                    table.log_store(),
                    DeltaOperation::Write {
                        mode: SaveMode::Append,
                        partition_by: None,
                        predicate: None,
                    },
                )
                .await
                .context(|| format!("committing the watermark of `{}`", self.name))?;
            let mut table = table.clone();
            table
                .load_version(commit.version())
                .await
                .context(|| format!("reloading `{}`", self.name))?;
            table
        } else if table
            .snapshot()
            .map(|s| s.log_data().num_files() == 0)
            .unwrap_or(false)
        {
            // Silver holds no data files yet (first load): nothing to match, so a plain
            // append does the same as the merge without a join.
            table
                .clone()
                .write(vec![rows])
                .with_save_mode(SaveMode::Append)
                .with_commit_properties(props)
                .await
                .context(|| format!("writing the first load of `{}`", self.name))?
        } else {
            let schema = rows.schema();
            let ctx = SessionContext::new();
            let source = ctx
                .read_batch(rows)
                .context(|| "reading rows to merge".to_string())?;
            let predicate = keys
                .iter()
                .map(|k| {
                    let nullable = schema
                        .field_with_name(k)
                        .map(|f| f.is_nullable())
                        .unwrap_or(true);
                    let (t, s) = (qualified("target", k), qualified("source", k));
                    if nullable {
                        not_distinct(t, s)
                    } else {
                        t.eq(s)
                    }
                })
                .reduce(Expr::and)
                .expect("at least one key");
            let non_keys: Vec<String> = schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .filter(|n| !keys.contains(n))
                .collect();
            let all: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
            let (merged, _metrics) = table
                .clone()
                .merge(source, predicate)
                .with_source_alias("source")
                .with_target_alias("target")
                .with_session_state(Arc::new(ctx.state()))
                .with_commit_properties(props)
                .when_matched_update(|mut u| {
                    for c in &non_keys {
                        u = u.update(Column::from_name(c.as_str()), qualified("source", c));
                    }
                    u
                })
                .and_then(|b| {
                    b.when_not_matched_insert(|mut i| {
                        for c in &all {
                            i = i.set(Column::from_name(c.as_str()), qualified("source", c));
                        }
                        i
                    })
                })
                .context(|| format!("planning the merge into `{}`", self.name))?
                .await
                .context(|| format!("merging into `{}`", self.name))?;
            merged
        };
        let version = committed.version().map(|v| v as i64).unwrap_or_default();
        let stats = self.commit_stats(&committed, version).await?;
        self.table = Some(committed);
        Ok(stats)
    }
}

impl DeltaSilver {
    /// Creates the table and writes its first rows and the watermark in one commit.
    async fn create_with(
        &mut self,
        schema: SchemaRef,
        rows: RecordBatch,
        props: CommitProperties,
    ) -> smelt_engine::Result<WriteStats> {
        let path = self.lake.table_path(&self.name);
        std::fs::create_dir_all(&path).map_err(|source| Error::Io {
            context: format!("creating `{}`", path.display()),
            source,
        })?;
        let rows = RecordBatch::try_new(schema, rows.columns().to_vec()).map_err(Error::Arrow)?;
        let table = DeltaTable::try_from_url(self.lake.table_url(&self.name)?)
            .await
            .context(|| format!("creating silver table `{}`", self.name))?;
        let table = table
            .write(vec![rows])
            .with_save_mode(SaveMode::ErrorIfExists)
            .with_table_name(self.name.table.clone())
            .with_configuration([("delta.enableChangeDataFeed", Some("true"))])
            .with_commit_properties(props)
            .await
            .context(|| format!("creating silver table `{}`", self.name))?;
        let version = table.version().map(|v| v as i64).unwrap_or_default();
        let stats = self.commit_stats(&table, version).await?;
        self.table = Some(table);
        Ok(stats)
    }

    /// Time (ms since the epoch) and run id of the latest silver commit, if any.
    pub async fn last_commit(&self) -> Result<Option<(i64, Option<String>)>> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let Some(version) = table.version() else {
            return Ok(None);
        };
        let Some(bytes) = table
            .log_store()
            .read_commit_entry(version)
            .await
            .context(|| format!("reading the log of `{}`", self.name))?
        else {
            return Ok(None);
        };
        for a in get_actions(version, &bytes)
            .context(|| format!("reading the log of `{}`", self.name))?
        {
            if let Action::CommitInfo(info) = a {
                let run = info
                    .info
                    .get("smelt.run_id")
                    .and_then(|v| v.as_str())
                    .map(str::to_string);
                return Ok(info
                    .in_commit_timestamp
                    .or(info.timestamp)
                    .map(|t| (t, run)));
            }
        }
        Ok(None)
    }
}
