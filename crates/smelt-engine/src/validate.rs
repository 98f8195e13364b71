//! `smelt validate` (and the check `smelt plan` starts with): every problem the selected
//! flows would meet against the lake, all at once, before anything runs.

use smelt_spec::{Flow, Pipeline, TableName};

use crate::EngineError;
use crate::flow::{LakeCx, build};
use crate::ports::{FileStores, Lake, SourceOptions};

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
    files: &dyn FileStores,
) -> Vec<Problem> {
    let cx = LakeCx {
        pipeline,
        lake,
        files,
    };
    // A table another flow of the pipeline writes may not exist before the first run.
    let written = |t: &TableName| pipeline.flows.iter().any(|g| g.writes() == Some(t));
    let mut problems = Vec::new();
    for flow in flows {
        let mut errors = Vec::new();
        let source = match flow.reads() {
            Some(table) => match lake.source(table, SourceOptions::default()).await {
                Ok(source) => Some(source),
                Err(_) if written(table) => None,
                Err(e) => {
                    errors.push(e);
                    None
                }
            },
            None => None,
        };
        errors.extend(build(flow).check(&cx, source.as_deref()).await);
        problems.extend(errors.into_iter().map(|error| Problem {
            flow: flow.name.clone(),
            error,
        }));
    }
    problems
}
