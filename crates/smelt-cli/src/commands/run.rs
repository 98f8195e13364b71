//! `smelt run` and `smelt plan`: settings → the engine's run → reports.

use smelt_engine::context::RunContext;
use smelt_engine::run::check_window;
use smelt_ingest::Files;

use super::{load_pipeline, open_lakes, select};
use crate::args::{GlobalArgs, RunArgs};
use crate::failure::Failure;
use crate::printer::Progress;

/// The run settings of the command line.
fn settings(args: &RunArgs, dry_run: bool) -> RunContext {
    let mut ctx = RunContext::new(dry_run, args.full_refresh);
    ctx.since = args.since.clone();
    ctx.until = args.until.clone();
    ctx.tz = args.tz.clone();
    if args.memory_limit.is_some() {
        ctx.memory_limit = args.memory_limit;
    }
    ctx
}

/// Runs (or plans) the selected flows in dependency order (file order otherwise); stops at
/// the first failing flow.
pub async fn run(global: &GlobalArgs, args: &RunArgs, dry_run: bool) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let flows = select(&pipeline, &args.flows)?;
    let settings = settings(args, dry_run);
    // A window that does not parse is a usage error, found before any flow runs.
    check_window(&settings, &flows, chrono::Utc::now().timestamp_micros())
        .map_err(|e| Failure::usage(e.to_string(), e.hint().map(str::to_string)))?;
    let progress = Progress::new(!global.quiet && !global.json, !global.json);
    let outcome = match super::spark::remote(global, &pipeline)? {
        Some(url) => {
            let engine = super::spark::connect(&url, &pipeline, &settings).await?;
            // What the engine does not run is refused before anything runs; a plan
            // starts with every problem of every flow.
            let problems = engine.check(&flows).await;
            if !problems.is_empty() {
                return Err(super::validate::report(&problems));
            }
            let outcome = smelt_engine::run::run_on(&flows, &engine, settings, &progress).await;
            engine.close().await;
            outcome?
        }
        None => {
            let lakes = open_lakes(&pipeline).await?;
            let lake = lakes.ports();
            // A plan starts with the checks: every problem of every flow, at once.
            if dry_run {
                super::validate::check(global, &pipeline, &flows).await?;
            }
            smelt_engine::run::run(
                &pipeline,
                &flows,
                &lake,
                &Files::new(pipeline.storage),
                settings,
                &progress,
            )
            .await?
        }
    };
    let (run_id, reports) = (outcome.run_id, outcome.reports);
    if let Some(e) = outcome.failed {
        let mut failure = Failure::flow_failed(&e)
            .with_detail("run_id", run_id.into())
            .with_detail(
                "flows",
                serde_json::to_value(&reports).expect("serialisable"),
            );
        if !reports.is_empty() {
            failure.causes.push(format!(
                "{} flow(s) before it completed and stay committed",
                reports.len()
            ));
        }
        return Err(failure);
    }
    if global.json {
        let out = serde_json::json!({ "run_id": run_id, "dry_run": dry_run, "flows": reports });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialisable")
        );
    }
    Ok(0)
}
