//! One run of an `ingest` flow: the landing's new files → one bronze commit.
//!
//! Exactly once: the files a commit loads (URL, size, modification time) are recorded in
//! that commit's commit info, with the flow's watermark (a `txn`, counting the flow's
//! loads); see [`super::ledger`]. A run loads the listed files the table does not record,
//! so a crash before the commit loads them again on the next run, and a crash after it
//! loads nothing twice. Malformed rows go to `<bronze>__rejects` ([`super::rejects`]),
//! committed before bronze.

use smelt_rules::messages::too_many_malformed;
use std::collections::HashMap;
use std::sync::Arc;

use futures::TryStreamExt;
use smelt_spec::IngestFlow;

use super::conform::Conformer;
use super::ledger::{Listing, files_entry, loaded_files, plan_files};
use super::rejects::write_rejects;
use crate::context::{RunContext, app_id};
use crate::flow::{FlowRun, report_head};
use crate::phases::Phases;
use crate::ports::{FileRows, LakeTable, Landing, LandingFile, Malformed, Watermark};
use crate::report::{FlowReport, ReadMode, ReportStatus};
use crate::stage::{Buffered, commit_with_report};
use crate::{EngineError, Result, failpoint};

/// Table property that keeps the Delta log (which records the loaded files) from being
/// cleaned up.
pub const LOG_CLEANUP: &str = "delta.enableExpiredLogCleanup";

/// Malformed rows a run keeps for the rejects table at most; more fails the run (a wrong
/// `sep`, `columns` or `format` makes every line malformed).
pub const MAX_MALFORMED: usize = 100_000;

/// The tables an ingest flow writes.
pub struct IngestTables<'a> {
    /// The bronze table the files are loaded into.
    pub bronze: &'a mut dyn LakeTable,
    /// Its rejects table (malformed rows), created with the first reject.
    pub rejects: &'a mut dyn LakeTable,
}

/// Loads the new files of `flow` (read from `landing`) into bronze, in one commit with the
/// loaded-file list and the watermark. Returns the report (a plan when `ctx.dry_run`).
pub async fn run_ingest(
    run: FlowRun<'_, IngestFlow>,
    landing: &dyn Landing,
    tables: IngestTables<'_>,
) -> Result<FlowReport> {
    let FlowRun {
        name: flow_name,
        spec: flow,
        ctx,
        reporter,
    } = run;
    let IngestTables { bronze, rejects } = tables;
    let mut phases = Phases::new();
    reporter.phase(flow_name, "list files");
    let loaded = if ctx.full_refresh {
        HashMap::new()
    } else {
        loaded_files(bronze).await?
    };
    let listing = plan_files(flow, landing, &loaded, ctx.full_refresh).await?;
    let app = app_id(flow_name);
    let done = bronze.watermark(&app).await?.unwrap_or(0);
    let bronze_at = BronzeAt {
        exists: bronze.schema().is_some(),
        done,
        version: bronze.version(),
    };
    let mut report = ingest_report(flow_name, flow, ctx, &listing, bronze_at);
    phases.end("list files");
    if ctx.dry_run {
        report.status = ReportStatus::Planned;
        report.phases_ms = phases.done;
        return Ok(report);
    }
    let batch = done + 1;
    // Rejects an unfinished load left behind (a crash between the two commits) go, whatever
    // this run finds.
    let stale_rejects = !ctx.dry_run
        && rejects.schema().is_some()
        && rejects.watermark(&app).await?.is_some_and(|w| w >= batch);
    if listing.to_load.is_empty() {
        if stale_rejects {
            write_rejects(flow_name, &flow.into, rejects, batch, &[], ctx).await?;
        }
        report.status = ReportStatus::UpToDate;
        report.phases_ms = phases.done;
        return Ok(report);
    }
    report.to_version = batch;

    // Read every file into staged bronze data files.
    reporter.phase(flow_name, "load files");
    if ctx.full_refresh && bronze.schema().is_some() {
        bronze.stage_overwrite().await?;
    }
    let total = (
        listing.to_load.len(),
        listing.to_load.iter().map(|f| f.size).sum::<u64>(),
    );
    let mut loader = Loader {
        conformer: Conformer::new(flow, bronze.schema()),
        bronze,
        buffer: Buffered::default(),
        malformed: Vec::new(),
        rescued: 0,
        columns_added: Vec::new(),
    };
    let mut done_bytes = 0;
    for (i, file) in listing.to_load.iter().enumerate() {
        reporter.files(flow_name, (i, done_bytes), total);
        let mut rows = landing.read(file);
        while let Some(item) = rows.try_next().await? {
            match item {
                FileRows::Rows(raw, read) => {
                    loader.rows(raw, file).await?;
                    reporter.files(flow_name, (i, done_bytes + read), total);
                }
                FileRows::Malformed(row) => loader.malformed(row, file)?,
            }
        }
        if let Some(now) = landing.stat(file).await?
            && (now.0 != file.size || now.1 != file.modified_us)
        {
            return Err(EngineError::user(
                format!(
                    "`{}` changed while it was read (size {} → {}): it is being written",
                    file.url, file.size, now.0
                ),
                "nothing was committed; run again once the file is complete. Writers should write under a hidden name (`.name` or `_name`) and rename the file when done",
            ));
        }
        done_bytes += file.size;
    }
    reporter.files(flow_name, total, total);
    loader.flush().await?;
    let Loader {
        conformer,
        malformed,
        buffer,
        rescued,
        columns_added,
        ..
    } = loader;
    report.rows_written = buffer.rows_written;
    report.rescued = rescued;
    report.malformed = malformed.len();
    report.files_read = listing.to_load.len();
    report.columns_added = columns_added;
    phases.end("load files");

    if !malformed.is_empty() || stale_rejects || (ctx.full_refresh && rejects.schema().is_some()) {
        reporter.phase(flow_name, "write rejects");
        failpoint("before_ingest_rejects_commit")?;
        write_rejects(flow_name, &flow.into, rejects, batch, &malformed, ctx).await?;
        report.quarantined = malformed.len();
    }
    // Nothing to create bronze from (no file named a column: empty, or every line
    // malformed): nothing to record either, and the files are read again next run.
    if conformer.schema().is_none() {
        report.status = ReportStatus::NoColumns;
        report.phases_ms = phases.done;
        return Ok(report);
    }
    reporter.phase(flow_name, "commit");
    if bronze.property(LOG_CLEANUP).as_deref() != Some("false") {
        bronze.set_property(LOG_CLEANUP, "false").await?;
    }
    let files = files_entry(flow_name, ctx.full_refresh, &listing.to_load);
    report.phases_ms = phases.done.clone();
    commit_with_report(
        &mut *bronze,
        &[],
        Watermark {
            app_id: app.clone(),
            version: batch,
            run_id: ctx.run_id.clone(),
            report: None,
            extra: vec![files],
            source: None,
        },
        &mut report,
        "before_bronze_commit",
    )
    .await?;
    phases.end("commit");
    report.phases_ms = phases.done;
    Ok(report)
}

/// Bronze before an ingest run.
#[derive(Debug, Clone, Copy)]
pub struct BronzeAt {
    /// Whether it exists.
    pub exists: bool,
    /// The loads it has taken in (the flow's watermark).
    pub done: i64,
    /// Its version.
    pub version: Option<i64>,
}

/// The report of an ingest run of `flow_name` before it loads anything: what `listing`
/// found, and bronze as it stands (both engines start from it).
pub fn ingest_report(
    flow_name: &str,
    flow: &IngestFlow,
    ctx: &RunContext,
    listing: &Listing,
    bronze: BronzeAt,
) -> FlowReport {
    FlowReport {
        mode: if ctx.full_refresh && bronze.exists {
            ReadMode::Rebuild
        } else {
            ReadMode::Incremental
        },
        from_version: bronze.exists.then_some(bronze.done),
        to_version: bronze.done,
        files_found: listing.found.len(),
        files_new: listing.to_load.len(),
        files_changed: listing.changed.iter().map(|f| f.url.clone()).collect(),
        files_pending: listing.pending,
        bytes_read: listing.to_load.iter().map(|f| f.size).sum(),
        silver_version: bronze.version,
        ..report_head(flow_name, flow, &ctx.run_id)
    }
}

/// Conforms what a landing's files yield and writes it to bronze a few hundred thousand
/// rows at a time, growing bronze's columns as the files bring new ones.
struct Loader<'a> {
    conformer: Conformer<'a>,
    bronze: &'a mut dyn LakeTable,
    buffer: Buffered,
    malformed: Vec<(String, Malformed)>,
    rescued: usize,
    columns_added: Vec<String>,
}

impl Loader<'_> {
    async fn flush(&mut self) -> Result<()> {
        self.buffer.flush(&mut *self.bronze).await
    }

    async fn rows(&mut self, raw: crate::ports::RawRows, file: &LandingFile) -> Result<()> {
        let out = self.conformer.conform(raw, file)?;
        if !out.new_fields.is_empty() {
            // Rows of the old shape are written before the table changes shape.
            self.flush().await?;
            if self.bronze.schema().is_none() {
                let schema = Arc::clone(self.conformer.schema().expect("conformed"));
                self.bronze.create(schema).await?;
            } else {
                self.columns_added
                    .extend(out.new_fields.iter().map(|f| f.name().clone()));
                self.bronze.add_columns(out.new_fields).await?;
            }
        }
        self.rescued += out.rescued;
        if self.buffer.push(out.batch) {
            self.flush().await?;
        }
        Ok(())
    }

    fn malformed(&mut self, row: Malformed, file: &LandingFile) -> Result<()> {
        self.malformed.push((file.url.clone(), row));
        if self.malformed.len() > MAX_MALFORMED {
            let (url, first) = &self.malformed[0];
            return Err(EngineError::rule(too_many_malformed(
                url,
                MAX_MALFORMED,
                first.line,
                &first.reason,
            )));
        }
        Ok(())
    }
}
