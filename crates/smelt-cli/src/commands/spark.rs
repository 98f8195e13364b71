//! The engine a command runs on (`--engine`, `SMELT_SPARK_REMOTE`, `engine:` / `connect:`),
//! and `smelt compile`.

use smelt_engine::context::RunContext;
use smelt_spark::SparkEngine;
use smelt_spec::{Engine, Pipeline};

use super::{load_pipeline, select};
use crate::args::{CompileArgs, GlobalArgs};
use crate::failure::Failure;

/// The environment variable naming a Spark Connect URL to run on.
const REMOTE: &str = "SMELT_SPARK_REMOTE";

/// The Spark Connect URL the command runs on; `None`: the embedded engine.
pub fn remote(global: &GlobalArgs, pipeline: &Pipeline) -> Result<Option<String>, Failure> {
    let env = std::env::var(REMOTE).ok().filter(|v| !v.trim().is_empty());
    let from_file = match &pipeline.engine {
        Engine::Spark { connect } => connect.clone(),
        Engine::Embedded => None,
    };
    match global.engine.as_deref() {
        Some("embedded") => Ok(None),
        Some(url) if url.starts_with("sc://") => Ok(Some(url.to_string())),
        Some("spark") => from_file.or(env).map(Some).ok_or_else(|| no_url(pipeline)),
        Some(other) => Err(Failure::usage(
            format!("unknown engine `{other}`"),
            Some("use `--engine embedded`, `--engine spark` or `--engine sc://host:15002`".into()),
        )),
        None => match (env, &pipeline.engine) {
            (Some(url), _) => Ok(Some(url)),
            (None, Engine::Spark { .. }) => from_file.map(Some).ok_or_else(|| no_url(pipeline)),
            (None, Engine::Embedded) => Ok(None),
        },
    }
}

fn no_url(pipeline: &Pipeline) -> Failure {
    Failure::usage(
        format!(
            "the Spark engine needs a cluster, and {} names none",
            pipeline.file.display()
        ),
        Some(format!(
            "add `connect: sc://host:15002` to the pipeline file, or set `{REMOTE}=sc://…`, or pass `--engine sc://…`"
        )),
    )
}

/// Connects to the cluster at `url` for `pipeline`.
pub async fn connect(
    url: &str,
    pipeline: &Pipeline,
    settings: &RunContext,
) -> Result<SparkEngine, Failure> {
    Ok(SparkEngine::connect(url, pipeline, settings).await?)
}

/// `smelt compile`: each selected flow's statements, in order.
pub async fn compile(global: &GlobalArgs, args: &CompileArgs) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let flows = select(&pipeline, &args.flows)?;
    let Some(url) = remote(global, &pipeline)? else {
        return Err(Failure::usage(
            "`smelt compile` shows the Spark SQL of the Spark engine; this pipeline runs embedded",
            Some("add `engine: spark` and `connect:` to the pipeline file, or pass `--engine sc://…`".into()),
        ));
    };
    let ctx = RunContext::new(true, false);
    let engine = connect(&url, &pipeline, &ctx).await?;
    let problems = engine.check(&flows).await;
    if let Some(p) = problems.into_iter().next() {
        return Err(Failure::from(p.error));
    }
    let mut all = Vec::new();
    for flow in smelt_engine::dag::run_order(&flows)? {
        let statements = engine.compile(flow, &ctx).await?;
        all.push((flow.name.clone(), statements));
    }
    engine.close().await;
    if global.json {
        let out: Vec<_> = all
            .iter()
            .map(|(flow, s)| serde_json::json!({ "flow": flow, "statements": s }))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialisable")
        );
        return Ok(0);
    }
    for (flow, statements) in &all {
        println!("-- flow `{flow}`: {} statement(s)", statements.len());
        for s in statements {
            let writes = if s.writes { " (writes)" } else { "" };
            println!("-- {}{writes}\n{};\n", s.what, s.sql);
        }
    }
    Ok(0)
}
