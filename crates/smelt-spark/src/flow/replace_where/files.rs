//! A `replace_where` batch of Parquet files on Spark, as embedded: the files of a landing
//! folder the target's ledger does not record applied (listed as an ingest lists them,
//! [`crate::flow::ingest::list`]), read in their own types through one view — one scan per set of
//! files with the same Hive `key=value` folders, whose values are added as text columns
//! where the files lack such a column (as embedded; Spark's own partition discovery would
//! take a folder's value over a column of the same name) — and recorded as applied in the
//! target's commit.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use smelt_engine::flow::ingest::ledger::{FILES_KEY, files_entry, loaded_from, plan_found};
use smelt_engine::ports::LandingFile;
use smelt_engine::schema::column_type;
use smelt_engine::{EngineError, Result};
use smelt_spec::{IngestFlow, ReplaceWhereFlow};

use crate::delta::describe::schema_of;
use crate::flow::ingest::{self, absolute, ledger};
use crate::flow::tables::{self, Tables};
use crate::places::Places;
use crate::session::Session;
use crate::sql::spark_type;
use crate::sql::{ident, string_literal};
use crate::views::View;

/// The view of a run's files.
pub(crate) const VIEW: View = View::new("replace_files");

/// The files of a run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Batch {
    /// Files found in the landing.
    pub(crate) found: usize,
    /// Files the run applies.
    pub(crate) to_load: Vec<LandingFile>,
}

impl Batch {
    /// The ledger entry of the run's commit (key, value) for flow `name`.
    pub(crate) fn entry(&self, name: &str) -> (String, String) {
        let (key, value) = files_entry(name, false, &self.to_load);
        debug_assert_eq!(key, FILES_KEY);
        (key, value)
    }
}

/// Where replace_where flow `name` from `files` stands: the target, and the files not
/// applied yet (all with `full_refresh`) as the view [`VIEW`] — the source's version is
/// the number of the batch (the target's watermark when there is none). `exported`: an
/// export of the pipeline writes the folder, so no folder yet is no batch yet.
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    (name, spec, files): (&str, &ReplaceWhereFlow, &IngestFlow),
    exported: bool,
    full_refresh: bool,
) -> Result<(Tables, Batch)> {
    let (target, target_schema, watermark) = tables::target(s, places, name, &spec.into).await?;
    let loaded = match (&target, full_refresh) {
        (Some(last), false) => {
            loaded_from(ledger(s, &places.location(&spec.into), last.version).await?)
        }
        _ => HashMap::new(),
    };
    let listed = match ingest::list(s, files).await {
        Ok(listed) => listed,
        Err(e) if exported && e.to_string().contains("PATH_NOT_FOUND") => Vec::new(),
        Err(e) => return Err(e),
    };
    let found: Vec<LandingFile> = listed.into_iter().map(|(f, _)| f).collect();
    let listing = plan_found(files, found, &loaded, false)?;
    let applied = watermark.unwrap_or(0);
    let batch = Batch {
        found: listing.found.len(),
        to_load: listing.to_load,
    };
    let mut state = Tables {
        source_version: applied,
        source_schema: Arc::new(Schema::empty()),
        target,
        target_schema,
        watermark,
        source_meta: None,
    };
    if batch.to_load.is_empty() {
        return Ok((state, batch));
    }
    state.source_version = applied + 1;
    state.source_schema = view(s, files, &batch.to_load).await?;
    Ok((state, batch))
}

/// A file's `key=value` folders.
type Partitions = Vec<(String, String)>;

/// The view of `files` (Parquet, below the landing of `flow`), its schema.
async fn view(s: &Session<'_>, flow: &IngestFlow, files: &[LandingFile]) -> Result<SchemaRef> {
    let base = match &flow.url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => absolute(&flow.folder)?.to_string_lossy().into_owned(),
    };
    // Files by their partition folders, in order.
    let mut groups: Vec<(&Partitions, Vec<&str>)> = Vec::new();
    for f in files {
        match groups
            .iter_mut()
            .find(|(p, _)| *p == f.partitions.as_slice())
        {
            Some((_, relatives)) => relatives.push(&f.relative),
            None => groups.push((&f.partitions, vec![&f.relative])),
        }
    }
    s.setting("SET spark.sql.parquet.mergeSchema=true".into())
        .await?;
    let mut scans = Vec::new();
    let mut all: Vec<Field> = Vec::new();
    for (partitions, relatives) in &groups {
        let scan = ingest::sql::files_relation("parquet", &base, relatives);
        let schema = schema_of(s, "read the files' columns", &scan).await?;
        let mut columns: Vec<String> = Vec::new();
        for f in schema.fields() {
            columns.push(f.name().clone());
            if !all.iter().any(|a| a.name() == f.name()) {
                all.push(f.as_ref().clone());
            }
        }
        let mut added = Vec::new();
        for (k, v) in partitions.iter() {
            if !columns.contains(k) {
                added.push((k.clone(), v.clone()));
                if !all.iter().any(|a| a.name() == k) {
                    all.push(Field::new(k, arrow::datatypes::DataType::Utf8, true));
                }
            }
        }
        scans.push((scan, columns, added));
    }
    let mut selects = Vec::new();
    for (scan, columns, added) in &scans {
        let mut list = Vec::new();
        for f in &all {
            let name = f.name();
            if columns.contains(name) {
                list.push(ident(name));
            } else if let Some((_, v)) = added.iter().find(|(k, _)| k == name) {
                list.push(format!("{} AS {}", string_literal(v), ident(name)));
            } else {
                let ty = column_type(f.data_type()).ok_or_else(|| {
                    EngineError::user(
                        format!("column `{name}` of the files is of a type the Spark engine does not read yet"),
                        "run this flow with `--engine embedded`",
                    )
                })?;
                list.push(format!(
                    "CAST(NULL AS {}) AS {}",
                    spark_type(ty),
                    ident(name)
                ));
            }
        }
        selects.push(format!("SELECT {} FROM {scan}", list.join(", ")));
    }
    s.view(
        "name the batch's files",
        format!(
            "CREATE OR REPLACE TEMPORARY VIEW {VIEW} AS {}",
            selects.join(" UNION ALL ")
        ),
    )
    .await?;
    schema_of(s, "read the batch's columns", &VIEW.to_string()).await
}
