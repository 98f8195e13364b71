//! `smelt validate`, and the check `smelt plan` starts with: every problem at once.

use smelt_engine::validate::Problem;
use smelt_ingest::Files;
use smelt_spec::{ChangeFeed, Flow, Pipeline, TableName};

use super::{load_pipeline, open_lakes, select};
use crate::args::{GlobalArgs, ValidateArgs};
use crate::failure::Failure;

/// Checks the selected flows against the lake; prints every problem.
pub async fn validate(global: &GlobalArgs, args: &ValidateArgs) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let flows = select(&pipeline, &args.flows)?;
    check(global, &pipeline, &flows).await?;
    let feeds = change_feeds(&pipeline, &flows);
    if global.json {
        let feeds: Vec<_> = feeds
            .iter()
            .map(|(table, feed)| {
                serde_json::json!({ "table": table.to_string(), "on": feed.on(), "why": feed.to_string() })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "problems": [], "change_feeds": feeds })
        );
    } else if !global.quiet {
        println!(
            "{} flow(s) of {} checked: no problems",
            flows.len(),
            pipeline.file.display()
        );
        for (table, feed) in &feeds {
            println!("change feed of `{table}`: {feed}");
        }
    }
    Ok(0)
}

/// The change feed of each Delta table `flows` write, as smelt creates it
/// ([`Pipeline::change_feed`]); Iceberg tables, whose changes are their snapshots, left out.
fn change_feeds(pipeline: &Pipeline, flows: &[&Flow]) -> Vec<(TableName, ChangeFeed)> {
    let mut out: Vec<(TableName, ChangeFeed)> = Vec::new();
    for table in flows.iter().filter_map(|f| f.writes()) {
        if table.catalog.is_none() && !out.iter().any(|(t, _)| t == table) {
            out.push((table.clone(), pipeline.change_feed(table)));
        }
    }
    out
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
