//! `smelt validate`, and the check `smelt plan` starts with: every problem at once.

use smelt_engine::validate::Problem;
use smelt_ingest::Files;
use smelt_spec::{Flow, Pipeline};

use super::{load_pipeline, open_lakes, select};
use crate::args::{GlobalArgs, ValidateArgs};
use crate::failure::Failure;

/// Checks the selected flows against the lake; prints every problem.
pub async fn validate(global: &GlobalArgs, args: &ValidateArgs) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let flows = select(&pipeline, &args.flows)?;
    check(global, &pipeline, &flows).await?;
    if global.json {
        println!("{}", serde_json::json!({ "problems": [] }));
    } else if !global.quiet {
        println!(
            "{} flow(s) of {} checked: no problems",
            flows.len(),
            pipeline.file.display()
        );
    }
    Ok(0)
}

/// Fails with every problem of `flows` (printing them as JSON with `--json`).
pub async fn check(
    global: &GlobalArgs,
    pipeline: &Pipeline,
    flows: &[&Flow],
) -> Result<(), Failure> {
    let problems = match super::spark::remote(global, pipeline)? {
        Some(url) => {
            let ctx = smelt_engine::context::RunContext::new(true, false);
            let engine = super::spark::connect(&url, pipeline, &ctx).await?;
            let problems = engine.check(flows).await;
            engine.close().await;
            problems
        }
        None => {
            let lakes = open_lakes(pipeline).await?;
            let lake = lakes.ports();
            smelt_engine::validate::validate(pipeline, flows, &lake, &Files::new(pipeline.storage))
                .await
        }
    };
    if problems.is_empty() {
        return Ok(());
    }
    Err(report(&problems))
}

/// The failure listing `problems` (in its JSON object too, as `problems`).
pub fn report(problems: &[Problem]) -> Failure {
    let list: Vec<_> = problems.iter().map(json).collect();
    failure(problems).with_detail("problems", list.into())
}

fn json(p: &Problem) -> serde_json::Value {
    serde_json::json!({ "flow": p.flow, "error": p.error.to_string(), "hint": p.error.hint() })
}

/// One failure listing every problem: each headline, then its hint.
fn failure(problems: &[Problem]) -> Failure {
    let messages = problems
        .iter()
        .map(|p| {
            let hint = p.error.hint().map(str::to_string);
            (format!("flow `{}`: {}", p.flow, p.error), hint)
        })
        .collect();
    let flows = {
        let mut names: Vec<&str> = problems.iter().map(|p| p.flow.as_str()).collect();
        names.dedup();
        names.len()
    };
    Failure {
        code: 1,
        messages,
        causes: Vec::new(),
        hint: Some(format!(
            "{} problem(s) in {flows} flow(s); fix them and run `smelt validate` again",
            problems.len()
        )),
        details: Default::default(),
    }
}
