//! `smelt run` and `smelt plan`.

use smelt_delta::silver::DeltaSilver;
use smelt_delta::source::DeltaSource;
use smelt_engine::EngineError;
use smelt_engine::apply::{RunContext, run_apply};
use smelt_spec::FlowKind;

use super::{load_pipeline, open_lake, select};
use crate::args::{GlobalArgs, RunArgs};
use crate::failure::Failure;
use crate::printer::{Progress, flow_report};

/// Runs (or plans) the selected flows in file order; stops at the first failing flow.
pub async fn run(global: &GlobalArgs, args: &RunArgs, dry_run: bool) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let flows = select(&pipeline, &args.flows)?;
    let lake = open_lake(&pipeline.lake)?;
    let ctx = RunContext::new(dry_run, args.full_refresh);
    let progress = Progress::new(!global.quiet && !global.json);
    let mut reports = Vec::new();
    for flow in flows {
        let FlowKind::Apply(apply) = &flow.kind;
        let result: Result<_, EngineError> = async {
            let source = DeltaSource::open(&lake, &apply.from).await?;
            let mut silver = DeltaSilver::open(&lake, &apply.into).await?;
            run_apply(&flow.name, apply, &source, &mut silver, &ctx, &progress).await
        }
        .await;
        match result {
            Ok(report) => {
                if !global.json {
                    progress.finish();
                    print!("{}", flow_report(&report));
                }
                reports.push(report);
            }
            Err(e) => {
                progress.finish();
                if global.json {
                    println!(
                        "{}",
                        serde_json::json!({ "run_id": ctx.run_id, "flows": reports, "error": e.to_string() })
                    );
                }
                let mut failure = Failure::from(e);
                failure.messages[0] = format!(
                    "flow `{}` failed: {}",
                    flow.name,
                    failure.messages[0].trim_start_matches(&format!("flow `{}`: ", flow.name))
                );
                if !reports.is_empty() {
                    failure.causes.push(format!(
                        "{} flow(s) before it completed and stay committed",
                        reports.len()
                    ));
                }
                return Err(failure);
            }
        }
    }
    progress.finish();
    if global.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "run_id": ctx.run_id, "dry_run": dry_run, "flows": reports })
            )
            .expect("serialisable")
        );
    }
    Ok(0)
}
