//! Where an export flow stands: the state it keeps beside the files it publishes (what was
//! exported up to which source version or value), and the source's version now.

use smelt_engine::{EngineError, Result};
use smelt_spec::ExportFlow;

use crate::delta::describe::{last_commit, schema_of};
use crate::flow::ingest::absolute;
use crate::places::Places;
use crate::session::Session;
use crate::sql::{delta_path, ident};

/// What an export saved last.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    /// Which save this is (0: none yet).
    pub(crate) number: i64,
    /// The source version exported through.
    pub(crate) version: Option<i64>,
    /// With `changed_by: <column>`: the greatest value exported, as a Spark SQL literal.
    pub(crate) column_max: Option<String>,
    /// The run's bounds were saved, its files not published yet.
    pub(crate) pending: bool,
    /// The partition folder of the last export.
    pub(crate) folder: Option<String>,
    /// Its run time (µs): the partition column's value.
    pub(crate) stamp_us: Option<i64>,
    /// The version exported through before it.
    pub(crate) after_version: Option<i64>,
    /// The column's bound before it.
    pub(crate) after_max: Option<String>,
}

/// Where an export flow stands.
#[derive(Debug, Clone)]
pub(crate) struct ExportState {
    /// The source's version.
    pub(crate) source_version: i64,
    /// The source's columns.
    pub(crate) columns: Vec<(String, arrow::datatypes::DataType)>,
    /// What the export saved last.
    pub(crate) saved: State,
}

/// The folder or URL exports of `spec` go to, as the cluster sees it.
pub(crate) fn to(spec: &ExportFlow) -> Result<String> {
    Ok(match &spec.url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => absolute(&spec.folder)?.to_string_lossy().into_owned(),
    })
}

/// The export state table of flow `name`.
pub(super) fn state_table(spec: &ExportFlow, name: &str) -> Result<String> {
    Ok(delta_path(&format!("{}/_smelt/{name}.spark", to(spec)?)))
}

/// Where export flow `name` (`spec`) stands. An export the embedded engine started (its
/// state files beside the exports) is refused: each engine keeps its own state.
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    name: &str,
    spec: &ExportFlow,
) -> Result<ExportState> {
    let source = places.sql(&spec.from);
    let Some(last) = last_commit(s, "read the source's version", &source).await? else {
        return Err(EngineError::TableNotFound {
            table: spec.from.to_string(),
            location: places.location(&spec.from),
            hint: "create the source table first (as a Delta table), or fix `from:` / `lake:`"
                .into(),
        });
    };
    let schema = schema_of(s, "read the source's columns", &source).await?;
    let columns = schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    let table = state_table(spec, name)?;
    let saved = match last_commit(s, "read the export's state", &table).await? {
        Some(_) => {
            let rows = s
                .read(
                    "read the export's state",
                    format!("SELECT * FROM {table} ORDER BY number DESC, status = 'published' DESC LIMIT 1"),
                )
                .await?;
            let int = |c: &str| rows.ints(c).first().copied().flatten();
            let text = |c: &str| rows.strings(c).first().cloned().flatten();
            State {
                number: int("number").unwrap_or(0),
                version: int("version"),
                column_max: text("column_max"),
                pending: text("status").as_deref() == Some("pending"),
                folder: text("folder"),
                stamp_us: int("stamp_us"),
                after_version: int("after_version"),
                after_max: text("after_max"),
            }
        }
        None => {
            embedded_state(s, spec, name).await?;
            State::default()
        }
    };
    Ok(ExportState {
        source_version: last.version,
        columns,
        saved,
    })
}

/// An error when the embedded engine keeps a state for this export (its save files, or
/// the single state file of earlier versions).
async fn embedded_state(s: &Session<'_>, spec: &ExportFlow, name: &str) -> Result<()> {
    let base = to(spec)?;
    for place in [
        format!("{base}/_smelt/{name}"),
        format!("{base}/_smelt/{name}.json"),
    ] {
        if file_count(s, "look for the embedded engine's export state", &place).await? > 0 {
            return Err(EngineError::user(
                format!(
                    "the export to `{}` was started by the embedded engine (its state is in `{place}`); the Spark engine keeps its own state",
                    spec.to
                ),
                "run this flow with `--engine embedded`, or export to a new folder",
            ));
        }
    }
    Ok(())
}

/// The files at `place` (a folder or a file), 0 when there is nothing there.
pub(super) async fn file_count(s: &Session<'_>, what: &str, place: &str) -> Result<i64> {
    let sql = format!("SELECT count(*) AS n FROM binaryFile.{}", ident(place));
    s.record_read(what, &sql);
    match s.spark.sql(what, &sql).await {
        Ok(rows) => Ok(rows.ints("n").first().copied().flatten().unwrap_or(0)),
        Err(e) if e.to_string().contains("PATH_NOT_FOUND") => Ok(0),
        Err(e) => Err(e.into()),
    }
}
