//! `smelt validate` (and the check `smelt plan` starts with): every problem the selected
//! flows would meet against the lake, all at once, before anything runs.

use smelt_spec::{Flow, FlowKind, IngestFlow, Pipeline, ReplaceSource, TableName};

use crate::EngineError;
use crate::apply::{check_apply, tombstone_table};
use crate::ports::{FileFlows, Lake, SourceOptions};

/// One problem of one flow.
#[derive(Debug)]
pub struct Problem {
    /// The flow.
    pub flow: String,
    /// What is wrong, with its hint.
    pub error: EngineError,
}

/// Checks `flows` of `pipeline` against the lake: the tables they read exist (or a flow of
/// the pipeline writes them), the tables they write fit the flow (columns, types, keys,
/// predicates, expectations), their landing folders can be listed. Returns every problem,
/// in flow order.
pub async fn validate(
    pipeline: &Pipeline,
    flows: &[&Flow],
    lake: &dyn Lake,
    files: &dyn FileFlows,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for flow in flows {
        for error in check(pipeline, flow, lake, files).await {
            problems.push(Problem {
                flow: flow.name.clone(),
                error,
            });
        }
    }
    problems
}

/// The problems of one flow.
async fn check(
    pipeline: &Pipeline,
    flow: &Flow,
    lake: &dyn Lake,
    files: &dyn FileFlows,
) -> Vec<EngineError> {
    // A table another flow of the pipeline writes may not exist before the first run.
    let written = |t: &TableName| pipeline.flows.iter().any(|g| g.writes() == Some(t));
    let mut problems = Vec::new();
    let source = match flow.reads() {
        Some(table) => match lake.source(table, SourceOptions::default()).await {
            Ok(source) => Some(source),
            Err(_) if written(table) => None,
            Err(e) => {
                problems.push(e);
                None
            }
        },
        None => None,
    };
    match &flow.kind {
        FlowKind::Apply(apply) => {
            let (silver, tombstones) = match (
                lake.inspect(&apply.into).await,
                lake.inspect(&tombstone_table(&apply.into)).await,
            ) {
                (Ok(s), Ok(t)) => (s, t),
                (Err(e), _) | (_, Err(e)) => {
                    problems.push(e);
                    return problems;
                }
            };
            if let Some(source) = &source {
                problems.extend(check_apply(
                    &flow.name,
                    apply,
                    &**source,
                    &*silver,
                    &*tombstones,
                ));
            }
        }
        FlowKind::Ingest(ingest) => {
            if let Some(e) = landing_problem(flow, ingest, false, lake, files).await {
                problems.push(e);
            }
        }
        FlowKind::ReplaceWhere(replace) => {
            if let ReplaceSource::Files(landing) = &replace.from {
                let exported = pipeline.flows.iter().any(|g| flow.reads_files_of(g));
                if let Some(e) = landing_problem(flow, landing, exported, lake, files).await {
                    problems.push(e);
                }
            }
        }
        FlowKind::Append(_) | FlowKind::Export(_) => {}
    }
    if let Some(table) = flow.writes()
        && !matches!(flow.kind, FlowKind::Apply(_))
        && let Err(e) = lake.inspect(table).await
    {
        problems.push(e);
    }
    problems
}

/// The problem listing the landing of `files` has, if any. A local folder that does not
/// exist yet is none when an export of the pipeline writes it (`exported`).
async fn landing_problem(
    flow: &Flow,
    landing: &IngestFlow,
    exported: bool,
    lake: &dyn Lake,
    files: &dyn FileFlows,
) -> Option<EngineError> {
    if exported && landing.url.is_none() && !landing.folder.exists() {
        return None;
    }
    let table = flow.writes()?;
    let output = match lake.inspect(table).await {
        Ok(output) => output,
        Err(e) => return Some(e),
    };
    files
        .files_waiting(&flow.name, landing, &*output)
        .await
        .err()
}
