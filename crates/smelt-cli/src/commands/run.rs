//! `smelt run` and `smelt plan`.

use smelt_delta::silver::DeltaSilver;
use smelt_delta::source::DeltaSource;
use smelt_engine::append::run_append;
use smelt_engine::apply::app_id;
use smelt_engine::apply::{ApplyTables, RunContext, run_apply, tombstone_table};
use smelt_engine::ports::{ChangeSource, SilverTable, Watermark};
use smelt_engine::rejects::rejects_table;
use smelt_engine::replace::{TableBatch, run_replace_where};
use smelt_engine::report::{FlowEvent, FlowReport};
use smelt_engine::{EngineError, failpoint};
use smelt_ingest::batch::FileBatch;
use smelt_ingest::export::run_export;
use smelt_ingest::files::Landing;
use smelt_ingest::flow::{IngestTables, files_entry, loaded_files, plan_files, run_ingest};
use smelt_spec::{
    AppendFlow, ApplyFlow, Flow, FlowKind, IngestFlow, ReplaceSource, ReplaceWhereFlow,
    SourceDeletes,
};

use super::{load_pipeline, open_lake, select};
use crate::args::{GlobalArgs, RunArgs};
use crate::failure::Failure;
use crate::printer::{Progress, flow_report};

/// The bronze versions of a replay window: read after `after`, up to `to`.
async fn window(
    source: &DeltaSource,
    since: &str,
    until: Option<&str>,
    tz: Option<&str>,
    now_us: i64,
) -> Result<(i64, i64), EngineError> {
    use smelt_engine::window::parse_instant;
    let since_us = parse_instant(since, tz, now_us, "--since")?;
    let after = source.version_at(since_us - 1).await?.unwrap_or(-1);
    let to = match until {
        Some(u) => {
            let until_us = parse_instant(u, tz, now_us, "--until")?;
            if until_us < since_us {
                return Err(EngineError::user(
                    format!("--until ({u}) is before --since ({since})"),
                    "swap them",
                ));
            }
            source.version_at(until_us).await?.unwrap_or(-1)
        }
        None => smelt_engine::ports::ChangeSource::version(source),
    };
    Ok((after, to))
}

/// The event of the last silver commit of `flow`, when the event log lacks it (a crash
/// between that commit and the event-log append).
async fn lost_event(
    lake: &smelt_delta::Lake,
    flow: &str,
    silver: &DeltaSilver,
) -> Result<Option<FlowEvent>, EngineError> {
    let Some(last) = silver.last_commit().await? else {
        return Ok(None);
    };
    let (Some(run_id), Some(report)) = (last.run_id, last.report) else {
        return Ok(None);
    };
    let Ok(report) = serde_json::from_str::<FlowReport>(&report) else {
        return Ok(None);
    };
    if report.flow != flow || smelt_delta::event_log::has_run(lake, &run_id, flow).await? {
        return Ok(None);
    }
    Ok(Some(FlowEvent {
        report,
        started_at_us: last.at_ms * 1000,
        finished_at_us: last.at_ms * 1000,
        error: None,
    }))
}

/// Runs one apply flow.
async fn run_apply_flow(
    lake: &smelt_delta::Lake,
    flow: &Flow,
    apply: &ApplyFlow,
    args: &RunArgs,
    ctx: &RunContext,
    progress: &Progress,
    events: &mut Vec<FlowEvent>,
) -> Result<FlowReport, EngineError> {
    let mut source = DeltaSource::open(lake, &apply.from)
        .await?
        .with_removed_files(apply.source_deletes == SourceDeletes::Apply);
    let mut ctx = ctx.clone();
    if let Some(since) = &args.since {
        let (after, to) = window(
            &source,
            since,
            args.until.as_deref(),
            args.tz.as_deref(),
            ctx.run_timestamp_us,
        )
        .await?;
        source = source.pin(to);
        ctx.replay_after = Some(after);
    }
    let mut silver = DeltaSilver::open_for_write(lake, &apply.into).await?;
    recover_event(lake, flow, &silver, ctx.dry_run, events).await;
    let mut tombstones = DeltaSilver::open_for_write(lake, &tombstone_table(&apply.into)).await?;
    let mut rejects = DeltaSilver::open_for_write(lake, &rejects_table(&apply.into)).await?;
    let tables = ApplyTables {
        silver: &mut silver,
        tombstones: &mut tombstones,
        rejects: &mut rejects,
    };
    run_apply(&flow.name, apply, &source, tables, &ctx, progress).await
}

/// Runs one ingest flow.
async fn run_ingest_flow(
    lake: &smelt_delta::Lake,
    flow: &Flow,
    ingest: &IngestFlow,
    ctx: &RunContext,
    progress: &Progress,
    events: &mut Vec<FlowEvent>,
) -> Result<FlowReport, EngineError> {
    let mut bronze = DeltaSilver::open_for_write(lake, &ingest.into)
        .await?
        .without_compaction();
    recover_event(lake, flow, &bronze, ctx.dry_run, events).await;
    let mut rejects = DeltaSilver::open_for_write(lake, &rejects_table(&ingest.into)).await?;
    let tables = IngestTables {
        bronze: &mut bronze,
        rejects: &mut rejects,
    };
    run_ingest(&flow.name, ingest, tables, ctx, progress).await
}

/// Runs one append flow.
async fn run_append_flow(
    lake: &smelt_delta::Lake,
    flow: &Flow,
    append: &AppendFlow,
    ctx: &RunContext,
    progress: &Progress,
    events: &mut Vec<FlowEvent>,
) -> Result<FlowReport, EngineError> {
    let source = DeltaSource::open(lake, &append.from).await?;
    let mut target = DeltaSilver::open_for_write(lake, &append.into).await?;
    recover_event(lake, flow, &target, ctx.dry_run, events).await;
    run_append(&flow.name, append, &source, &mut target, ctx, progress).await
}

/// Runs one replace_where flow: the batch is the source table's snapshot when its version
/// moved, or the files not applied yet.
async fn run_replace_flow(
    lake: &smelt_delta::Lake,
    flow: &Flow,
    replace: &ReplaceWhereFlow,
    exported: bool,
    ctx: &RunContext,
    progress: &Progress,
    events: &mut Vec<FlowEvent>,
) -> Result<FlowReport, EngineError> {
    let mut target = DeltaSilver::open_for_write(lake, &replace.into).await?;
    recover_event(lake, flow, &target, ctx.dry_run, events).await;
    let app = app_id(&flow.name);
    let applied = target.watermark(&app).await?;
    let up_to_date = |to_version| FlowReport {
        flow: flow.name.clone(),
        kind: "replace_where".into(),
        from: replace.from_text.clone(),
        into: replace.into.to_string(),
        run_id: ctx.run_id.clone(),
        status: "up_to_date".into(),
        from_version: applied,
        to_version,
        silver_version: target.version(),
        ..FlowReport::default()
    };
    let watermark = |version, extra| Watermark {
        app_id: app.clone(),
        version,
        run_id: ctx.run_id.clone(),
        report: None,
        extra,
    };
    match &replace.from {
        ReplaceSource::Table(table) => {
            let source = DeltaSource::open(lake, table).await?;
            let v = ChangeSource::version(&source);
            if applied == Some(v) && !ctx.full_refresh {
                return Ok(up_to_date(v));
            }
            let batch = TableBatch(&source);
            let w = watermark(v, Vec::new());
            run_replace_where(&flow.name, replace, &batch, &mut target, w, ctx, progress).await
        }
        ReplaceSource::Files(files) => {
            // No folder yet, and an export of the pipeline writes it: no batch yet.
            if exported && files.url.is_none() && !files.folder.exists() {
                return Ok(up_to_date(applied.unwrap_or(0)));
            }
            let landing =
                Landing::of(files).map_err(|e| EngineError::user(e.to_string(), "fix `from:`"))?;
            let loaded = if ctx.full_refresh {
                Default::default()
            } else {
                loaded_files(&target).await?
            };
            let listing = plan_files(&flow.name, files, &landing, &loaded, false).await?;
            let next = applied.unwrap_or(0) + 1;
            if listing.to_load.is_empty() {
                return Ok(up_to_date(applied.unwrap_or(0)));
            }
            let batch = FileBatch {
                flow: files,
                landing: &landing,
                files: &listing.to_load,
            };
            let entry = files_entry(&flow.name, false, &listing.to_load);
            let w = watermark(next, vec![entry]);
            let mut report =
                run_replace_where(&flow.name, replace, &batch, &mut target, w, ctx, progress)
                    .await?;
            report.files_found = listing.found.len();
            report.files_new = listing.to_load.len();
            report.files_read = listing.to_load.len();
            Ok(report)
        }
    }
}

/// An event-log row lost to a crash after the last commit of `table` comes back from
/// that commit.
async fn recover_event(
    lake: &smelt_delta::Lake,
    flow: &Flow,
    table: &DeltaSilver,
    dry_run: bool,
    events: &mut Vec<FlowEvent>,
) {
    if dry_run {
        return;
    }
    match lost_event(lake, &flow.name, table).await {
        Ok(Some(event)) => events.push(event),
        Ok(None) => {}
        Err(e) => eprintln!(
            "warning: could not check the event log for flow `{}`: {e}",
            flow.name
        ),
    }
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// Runs (or plans) the selected flows in dependency order (file order otherwise); stops at
/// the first failing flow.
/// Every flow run (not plans) is appended to the lake's event log.
pub async fn run(global: &GlobalArgs, args: &RunArgs, dry_run: bool) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let flows = smelt_engine::dag::run_order(&select(&pipeline, &args.flows)?)?;
    let lake = open_lake(&pipeline.lake)?;
    let mut ctx = RunContext::new(dry_run, args.full_refresh);
    // A window that does not parse is a usage error, found before any flow runs.
    for (option, value) in [("--since", &args.since), ("--until", &args.until)] {
        if let Some(value) = value {
            smelt_engine::window::parse_instant(
                value,
                args.tz.as_deref(),
                ctx.run_timestamp_us,
                option,
            )
            .map_err(|e| Failure::usage(e.to_string(), e.hint().map(str::to_string)))?;
        }
    }
    if args.memory_limit.is_some() {
        ctx.memory_limit = args.memory_limit;
    }
    let progress = Progress::new(!global.quiet && !global.json);
    let mut reports = Vec::new();
    let mut events = Vec::new();
    let mut failed = None;
    for flow in flows {
        let started_at_us = now_us();
        let result: Result<_, EngineError> = match &flow.kind {
            FlowKind::Apply(apply) => {
                run_apply_flow(&lake, flow, apply, args, &ctx, &progress, &mut events).await
            }
            FlowKind::Ingest(ingest) => {
                run_ingest_flow(&lake, flow, ingest, &ctx, &progress, &mut events).await
            }
            FlowKind::Append(append) => {
                run_append_flow(&lake, flow, append, &ctx, &progress, &mut events).await
            }
            FlowKind::ReplaceWhere(replace) => {
                // Files an export of the pipeline writes may not exist before its first run.
                let exported = pipeline.flows.iter().any(|g| flow.reads_files_of(g));
                run_replace_flow(&lake, flow, replace, exported, &ctx, &progress, &mut events).await
            }
            FlowKind::Export(export) => {
                let source = DeltaSource::open(&lake, &export.from).await;
                match source {
                    Ok(source) => run_export(&flow.name, export, &source, &ctx, &progress).await,
                    Err(e) => Err(e.into()),
                }
            }
        };
        progress.finish();
        match result {
            Ok(report) => {
                if !global.json {
                    print!("{}", flow_report(&report));
                }
                events.push(FlowEvent {
                    report: report.clone(),
                    started_at_us,
                    finished_at_us: now_us(),
                    error: None,
                });
                reports.push(report);
            }
            Err(e) => {
                let report = FlowReport {
                    flow: flow.name.clone(),
                    kind: flow.kind_name().into(),
                    from: flow.source(),
                    into: flow.target(),
                    run_id: ctx.run_id.clone(),
                    status: "failed".into(),
                    ..FlowReport::default()
                };
                events.push(FlowEvent {
                    report,
                    started_at_us,
                    finished_at_us: now_us(),
                    error: Some(e.to_string()),
                });
                failed = Some((flow.name.clone(), e));
                break;
            }
        }
    }
    if !dry_run {
        failpoint("before_event_log").map_err(Failure::from)?;
    }
    if !dry_run && let Err(e) = smelt_delta::event_log::append(&lake, &events).await {
        eprintln!(
            "warning: the run is committed, but its event log rows could not be written: {e}"
        );
    }
    if let Some((name, e)) = failed {
        if global.json {
            println!(
                "{}",
                serde_json::json!({ "run_id": ctx.run_id, "flows": reports, "error": e.to_string() })
            );
        }
        let mut failure = Failure::from(e);
        let prefix = format!("flow `{name}`: ");
        let message = failure.messages[0]
            .strip_prefix(&prefix)
            .unwrap_or(&failure.messages[0])
            .to_string();
        failure.messages[0] = format!("flow `{name}` failed: {message}");
        if !reports.is_empty() {
            failure.causes.push(format!(
                "{} flow(s) before it completed and stay committed",
                reports.len()
            ));
        }
        return Err(failure);
    }
    if global.json {
        let out = serde_json::json!({ "run_id": ctx.run_id, "dry_run": dry_run, "flows": reports });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialisable")
        );
    }
    Ok(0)
}
