//! One file per command.

pub mod run;
pub mod sql;
pub mod status;
pub mod validate;

use smelt_spec::{Pipeline, did_you_mean};

use crate::args::GlobalArgs;
use crate::failure::Failure;

/// Loads the pipeline file and applies `--lake`.
pub fn load_pipeline(global: &GlobalArgs) -> Result<Pipeline, Failure> {
    let mut pipeline = Pipeline::load(&global.pipeline)?;
    if let Some(lake) = &global.lake {
        pipeline.lake = lake.clone();
    }
    Ok(pipeline)
}

/// The lake folder for commands that work without a pipeline: `--lake`, else the
/// pipeline file's `lake:` if the file exists, else `./lake`.
pub fn lake_root(global: &GlobalArgs) -> Result<String, Failure> {
    if let Some(lake) = &global.lake {
        return Ok(lake.clone());
    }
    if global.pipeline.exists() {
        return Ok(load_pipeline(global)?.lake);
    }
    Ok("lake".to_string())
}

/// The flows named on the command line (all when none), in pipeline order.
pub fn select<'a>(
    pipeline: &'a Pipeline,
    names: &[String],
) -> Result<Vec<&'a smelt_spec::Flow>, Failure> {
    for name in names {
        if pipeline.flow(name).is_none() {
            let all: Vec<&str> = pipeline.flows.iter().map(|f| f.name.as_str()).collect();
            let hint = match did_you_mean(name, all.iter().copied()) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("flows in {}: {}", pipeline.file.display(), all.join(", ")),
            };
            return Err(Failure::usage(
                format!("no flow `{name}` in {}", pipeline.file.display()),
                Some(hint),
            ));
        }
    }
    Ok(pipeline
        .flows
        .iter()
        .filter(|f| names.is_empty() || names.contains(&f.name))
        .collect())
}

/// Opens the lake at a folder or URL.
pub fn open_lake(location: &str) -> Result<smelt_delta::Lake, Failure> {
    Ok(smelt_delta::Lake::at(location)?)
}
