//! Runs one flow of a run: opens what it reads and writes through the ports and calls its
//! runner. The only `match` on the flow kind.

use smelt_spec::{Flow, FlowKind, ReplaceSource, ReplaceWhereFlow, SourceDeletes};

use crate::apply::{ApplyTables, run_apply, tombstone_table};
use crate::context::app_id;
use crate::ports::{IngestTables, SourceOptions, TableRole};
use crate::rejects::rejects_table;
use crate::replace::{TableBatch, run_replace_where};
use crate::report::{FlowEvent, FlowReport};
use crate::run::{FlowRun, window};
use crate::{Result, append::run_append};

/// Runs (or plans) `flow`; an event-log row a crash lost is pushed to `events` first.
pub(crate) async fn run_flow(
    cx: &FlowRun<'_>,
    flow: &Flow,
    events: &mut Vec<FlowEvent>,
) -> Result<FlowReport> {
    let (lake, ctx, reporter) = (cx.lake, cx.ctx, cx.reporter);
    match &flow.kind {
        FlowKind::Apply(apply) => {
            let options = SourceOptions {
                removed_rows: apply.source_deletes == SourceDeletes::Apply,
            };
            let mut source = lake.source(&apply.from, options).await?;
            let mut ctx = ctx.clone();
            if let Some(since) = &cx.settings.since {
                let (after, to) =
                    window(&*source, cx.settings, since, ctx.run_timestamp_us).await?;
                source.pin(to)?;
                ctx.replay_after = Some(after);
            }
            let mut silver = lake.table(&apply.into, TableRole::Silver).await?;
            cx.recover_event(&flow.name, &*silver, events).await;
            let mut tombstones = lake
                .table(&tombstone_table(&apply.into), TableRole::Tombstones)
                .await?;
            let mut rejects = lake
                .table(&rejects_table(&apply.into), TableRole::Rejects)
                .await?;
            let tables = ApplyTables {
                silver: &mut *silver,
                tombstones: &mut *tombstones,
                rejects: &mut *rejects,
            };
            run_apply(&flow.name, apply, &*source, tables, &ctx, reporter).await
        }
        FlowKind::Ingest(ingest) => {
            let mut bronze = lake.table(&ingest.into, TableRole::Bronze).await?;
            cx.recover_event(&flow.name, &*bronze, events).await;
            let mut rejects = lake
                .table(&rejects_table(&ingest.into), TableRole::Rejects)
                .await?;
            let tables = IngestTables {
                bronze: &mut *bronze,
                rejects: &mut *rejects,
            };
            cx.files
                .ingest(&flow.name, ingest, tables, ctx, reporter)
                .await
        }
        FlowKind::Append(append) => {
            let source = lake.source(&append.from, SourceOptions::default()).await?;
            let mut target = lake.table(&append.into, TableRole::Target).await?;
            cx.recover_event(&flow.name, &*target, events).await;
            run_append(&flow.name, append, &*source, &mut *target, ctx, reporter).await
        }
        FlowKind::ReplaceWhere(replace) => replace_where(cx, flow, replace, events).await,
        FlowKind::Export(export) => {
            let source = lake.source(&export.from, SourceOptions::default()).await?;
            if !ctx.dry_run {
                let last = cx.files.last_export(&flow.name, export).await?;
                cx.recover_from(&flow.name, last, events).await;
            }
            cx.files
                .export(&flow.name, export, &*source, ctx, reporter)
                .await
        }
    }
}

/// A replace_where flow: the batch is the source table's snapshot when its version moved,
/// or the files not applied yet.
async fn replace_where(
    cx: &FlowRun<'_>,
    flow: &Flow,
    replace: &ReplaceWhereFlow,
    events: &mut Vec<FlowEvent>,
) -> Result<FlowReport> {
    let (lake, ctx, reporter) = (cx.lake, cx.ctx, cx.reporter);
    let mut target = lake.table(&replace.into, TableRole::Target).await?;
    cx.recover_event(&flow.name, &*target, events).await;
    match &replace.from {
        ReplaceSource::Table(table) => {
            let app = app_id(&flow.name);
            let applied = target.watermark(&app).await?;
            let source = lake.source(table, SourceOptions::default()).await?;
            let v = source.version();
            if applied == Some(v) && !ctx.full_refresh {
                return Ok(crate::replace::up_to_date(
                    &flow.name,
                    replace,
                    ctx,
                    applied,
                    v,
                    target.version(),
                ));
            }
            let batch = TableBatch(&*source);
            let watermark = crate::replace::watermark(&flow.name, ctx, v, Vec::new());
            run_replace_where(
                &flow.name,
                replace,
                &batch,
                &mut *target,
                watermark,
                ctx,
                reporter,
            )
            .await
        }
        ReplaceSource::Files(files) => {
            // Files an export of the pipeline writes may not exist before its first run.
            let exported = cx.pipeline.flows.iter().any(|g| flow.reads_files_of(g));
            cx.files
                .replace_where(
                    &flow.name,
                    replace,
                    files,
                    exported,
                    &mut *target,
                    ctx,
                    reporter,
                )
                .await
        }
    }
}
