//! One file per command.

pub mod docs;
pub mod maintain;
pub mod run;
pub mod spark;
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

/// The lake of commands that work without a pipeline: `--lake`, else the pipeline file's
/// `lake:` if the file exists, else `./lake`; with the file's `tables:` if it exists.
pub fn lake_without_pipeline(global: &GlobalArgs) -> Result<smelt_delta::Lake, Failure> {
    if global.pipeline.exists() {
        let pipeline = load_pipeline(global)?;
        return open_lake(&pipeline);
    }
    let root = global.lake.clone().unwrap_or_else(|| "lake".to_string());
    Ok(smelt_delta::Lake::at(&root)?)
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

/// The tables of a pipeline: its Delta lake and its Iceberg catalogs.
pub struct Lakes {
    delta: smelt_delta::Lake,
    catalogs: Vec<(String, smelt_iceberg::IcebergLake)>,
}

impl Lakes {
    /// The pipeline's Delta lake (and its event log).
    pub fn delta(&self) -> &smelt_delta::Lake {
        &self.delta
    }

    /// Every table of the pipeline behind one [`smelt_engine::ports::Lake`].
    pub fn ports(&self) -> smelt_engine::ports::Catalogs<'_> {
        self.catalogs.iter().fold(
            smelt_engine::ports::Catalogs::new(&self.delta),
            |all, (name, lake)| all.with(name.clone(), lake),
        )
    }
}

/// Opens the Delta lake of a pipeline and each of its catalogs.
pub async fn open_lakes(pipeline: &Pipeline) -> Result<Lakes, Failure> {
    let delta = open_lake(pipeline)?;
    let mut catalogs = Vec::new();
    for spec in &pipeline.catalogs {
        let catalog = smelt_iceberg::IcebergCatalog::open(spec, &pipeline.storage)
            .await
            .map_err(smelt_engine::EngineError::from)?;
        catalogs.push((spec.name.clone(), smelt_iceberg::IcebergLake::new(catalog)));
    }
    Ok(Lakes { delta, catalogs })
}

/// Opens the lake of a pipeline: its root folder or URL, and its placed tables.
pub fn open_lake(pipeline: &Pipeline) -> Result<smelt_delta::Lake, Failure> {
    Ok(smelt_delta::Lake::at(&pipeline.lake)?
        .with_tables(&pipeline.tables)?
        .with_store_settings(pipeline.storage))
}
