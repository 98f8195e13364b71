//! An ingest run's writes: the rejected lines first (`<bronze>__rejects`), then one bronze
//! commit with the loaded files in its ledger and the run's report.

use arrow::datatypes::DataType;
use smelt_engine::flow::ingest::LOG_CLEANUP;
use smelt_engine::flow::ingest::ledger::files_entry;
use smelt_engine::flow::ingest::rejects::INGEST_BATCH;
use smelt_engine::ports::LandingFile;
use smelt_engine::rejects::rejects_table;
use smelt_engine::report::FlowReport;
use smelt_engine::{EngineError, Result};
use smelt_spec::FileFormat;

use super::sql::{self, Input, RejectsOf};
use super::{AUTO_MERGE, Ingest, IngestState, columns};
use crate::delta::ddl::create_table;
use crate::delta::describe;
use crate::delta::txn::{self, commit_metadata_with};
use crate::session::Session;

impl Ingest<'_> {
    /// The rejects of load `batch` written (before bronze), replacing those an unfinished
    /// attempt at the same load left; with `--full-refresh`, replacing the table's.
    pub(super) async fn write_rejects(
        &self,
        s: &Session<'_>,
        state: &IngestState,
        rejects: &str,
        batch: i64,
    ) -> Result<()> {
        let columns: Vec<(String, String, bool)> =
            smelt_engine::flow::ingest::rejects::rejects_schema()
                .fields()
                .iter()
                .map(|f| {
                    let ty = match f.data_type() {
                        DataType::Int64 => "BIGINT",
                        DataType::Utf8 => "STRING",
                        _ => "TIMESTAMP",
                    };
                    (f.name().clone(), ty.to_string(), f.is_nullable())
                })
                .collect();
        if let Some(found) = &state.rejects
            && found != &columns.iter().map(|c| c.0.clone()).collect::<Vec<_>>()
        {
            return Err(EngineError::user(
                format!(
                    "`{}` exists but is not an ingest rejects table",
                    rejects_table(&self.spec.into)
                ),
                "rename or drop that table; smelt keeps the rows of files that do not parse there",
            ));
        }
        s.write(
            None,
            "create the rejects table",
            create_table(
                rejects,
                &columns,
                self.places.feed(&rejects_table(&self.spec.into)),
            ),
        )
        .await?;
        let select = sql::rejects_select(&RejectsOf {
            run_id: &self.ctx.run_id,
            flow: self.name,
            batch,
            run_us: self.ctx.run_timestamp_us,
        });
        let stored = state.rejects_watermark;
        if stored.is_some_and(|w| w >= batch) && !self.ctx.full_refresh {
            // A killed run wrote this load's rejects (and its watermark): they go first.
            s.write(
                Some("before_spark_ingest_rejects"),
                "clear an unfinished load's rejects",
                format!("DELETE FROM {rejects} WHERE {INGEST_BATCH} = {batch}"),
            )
            .await?;
        }
        let statement = match self.ctx.full_refresh {
            true => format!("INSERT OVERWRITE {rejects} {select}"),
            false => format!("INSERT INTO {rejects} {select}"),
        };
        // The load's watermark, unless it is there already.
        txn::set_watermark(s, self.name, batch, true, stored).await?;
        let written = s
            .write(
                Some("before_spark_ingest_rejects"),
                "write the malformed lines",
                statement,
            )
            .await;
        txn::clear_watermark(s).await?;
        written.map(|_| ())
    }

    /// The rows appended to bronze (a rebuild: written over bronze's; the first load:
    /// creating it), its new columns added, in one commit with the watermark and the files
    /// loaded.
    pub(super) async fn write_bronze(
        &self,
        s: &Session<'_>,
        state: &IngestState,
        planned: &columns::Planned,
        files: &[LandingFile],
        batch: i64,
        report: &mut FlowReport,
    ) -> Result<()> {
        let bronze = self.places.sql(&self.spec.into);
        let own = self.own();
        let input = match self.spec.format {
            FileFormat::Json => Input::Json,
            FileFormat::Parquet => Input::Parquet,
            _ => Input::Csv(&self.spec.csv),
        };
        let select = sql::bronze_select(&planned.plan, input, own);
        // One commit as embedded: bronze created by the load (`CREATE TABLE … AS`), or
        // given its new columns by it (Delta's schema merge, on for this statement only).
        let statement = match (state.schema.is_some(), self.ctx.full_refresh) {
            (false, _) => {
                let feed = match self.places.feed(&self.spec.into) {
                    true => "'delta.enableChangeDataFeed' = 'true', ",
                    false => "",
                };
                format!(
                    "CREATE TABLE {bronze} USING DELTA TBLPROPERTIES ({feed}'{LOG_CLEANUP}' = 'false') AS {select}"
                )
            }
            (true, true) => format!("INSERT OVERWRITE {bronze} {select}"),
            (true, false) => format!("INSERT INTO {bronze} {select}"),
        };
        if state.schema.is_some() && !state.log_kept {
            s.write(
                None,
                "keep bronze's log (the loaded files' ledger)",
                format!("ALTER TABLE {bronze} SET TBLPROPERTIES ('{LOG_CLEANUP}' = 'false')"),
            )
            .await?;
        }
        let merge = state.schema.is_some() && !planned.added.is_empty();
        if merge {
            s.write_setting(format!("SET {AUTO_MERGE}=true")).await?;
        }
        let (key, files) = files_entry(self.name, self.ctx.full_refresh, files);
        let metadata = commit_metadata_with(
            &self.ctx.run_id,
            self.name,
            batch,
            report,
            &[(key.as_str(), files.as_str())],
        )?;
        let written = txn::write_target(
            s,
            (
                "before_spark_bronze",
                "load the rows into bronze",
                statement,
            ),
            (self.name, batch, false, state.watermark),
            &metadata,
        )
        .await;
        if merge {
            s.write_setting(crate::sql::reset(AUTO_MERGE)).await?;
        }
        written?;
        if let Some(version) = describe::version_after(s, &bronze).await? {
            report.silver_version = Some(version);
        }
        Ok(())
    }
}
