//! Where an apply flow stands, read through Spark: bronze's version and columns, silver's
//! watermark and last commit, whether the tombstones exist; bronze's history for the
//! versions a run reads; the commits that rewrite rows without change data.

use arrow::datatypes::SchemaRef;
use smelt_engine::flow::apply::tombstone_table;
use smelt_engine::{EngineError, Result};
use smelt_spec::{ApplyFlow, SourceDeletes};

use crate::delta::describe::{Last, last_commit, schema_of};
use crate::delta::log::rewrites_query;
use crate::delta::txn::txn_of;
use crate::flow::tables::{check_readable, target};
use crate::iceberg::{Meta, meta};
use crate::places::Places;
use crate::session::Session;

/// Where a flow stands before its run.
#[derive(Debug, Clone)]
pub(crate) struct State {
    /// Bronze's latest version: what the run reads up to.
    pub(crate) bronze_version: i64,
    /// Bronze's columns.
    pub(crate) bronze_columns: Vec<String>,
    /// Bronze's schema, as Spark reads it.
    pub(crate) bronze_schema: SchemaRef,
    /// Silver's last commit, when silver exists.
    pub(crate) silver: Option<Last>,
    /// Silver's schema, as Spark reads it, when silver exists.
    pub(crate) silver_schema: Option<SchemaRef>,
    /// The bronze version silver has applied through.
    pub(crate) watermark: Option<i64>,
    /// Whether the tombstone table exists.
    pub(crate) tombstones: bool,
    /// The bronze version the tombstones were last written for (a run killed after them
    /// leaves it ahead of the watermark).
    pub(crate) tombstones_txn: Option<i64>,
    /// An Iceberg bronze's metadata (its version: its current snapshot's sequence number).
    pub(crate) bronze_meta: Option<Meta>,
}

/// Where flow `name` (`spec`) stands.
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    name: &str,
    spec: &ApplyFlow,
) -> Result<State> {
    let bronze = places.sql(&spec.from);
    let (last, bronze_meta) = match spec.from.catalog {
        Some(_) => match meta(s, "read bronze's snapshots", &bronze).await? {
            Some(meta) => {
                check_readable(&spec.from, &meta)?;
                (Some(meta.last()), Some(meta))
            }
            None => (None, None),
        },
        None => (
            last_commit(s, "read bronze's version", &bronze).await?,
            None,
        ),
    };
    let Some(last) = last else {
        return Err(EngineError::TableNotFound {
            table: spec.from.to_string(),
            location: places.location(&spec.from),
            hint: match spec.from.catalog {
                Some(_) => "create the bronze table in its catalog first, or fix `from:`",
                None => {
                    "create the bronze table first (as a Delta table), or fix `from:` / `lake:`"
                }
            }
            .into(),
        });
    };
    let bronze_schema = schema_of(s, "read bronze's columns", &bronze).await?;
    let tombs = tombstone_table(&spec.into);
    let (silver, silver_schema, watermark) = target(s, places, name, &spec.into).await?;
    let (tombstones, tombstones_txn) = match tombs.catalog {
        Some(_) => match meta(s, "look for the tombstone table", &places.sql(&tombs)).await? {
            Some(meta) => (true, meta.watermark(name, &tombs.to_string())?),
            None => (false, None),
        },
        None => {
            let found = last_commit(s, "look for the tombstone table", &places.sql(&tombs))
                .await?
                .is_some();
            let txn = match found {
                true => {
                    let dir = places.location(&tombs);
                    txn_of(s, &dir, name, "read the tombstones' watermark").await?
                }
                false => None,
            };
            (found, txn)
        }
    };
    Ok(State {
        bronze_version: last.version,
        bronze_columns: bronze_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
        bronze_schema,
        silver,
        silver_schema,
        watermark,
        tombstones,
        tombstones_txn,
        bronze_meta,
    })
}

/// A commit of the range that removes and adds files without change data and is not an
/// overwrite stops the run, as embedded (its changes cannot be read); the files removed by
/// the others are deletes without change data, counted.
pub(crate) async fn check_rewrites(
    s: &Session<'_>,
    spec: &ApplyFlow,
    span: (i64, i64),
) -> Result<usize> {
    let rows = s
        .read("look for rewrites without change data", rewrites_query())
        .await?;
    let (versions, removes, whole, adds, cdc) = (
        rows.ints("version"),
        rows.ints("removes"),
        rows.ints("whole"),
        rows.ints("adds"),
        rows.ints("cdc"),
    );
    let (ops, predicates) = (rows.strings("operation"), rows.strings("predicate"));
    if let Some(v) = (span.0 + 1..=span.1).find(|v| !versions.contains(&Some(*v))) {
        return Err(EngineError::user(
            format!(
                "`{}`'s log no longer has version {v} (cleaned up after a checkpoint): its changes cannot be read",
                spec.from
            ),
            "rebuild silver with `--full-refresh`",
        ));
    }
    let mut ignored = 0;
    for i in 0..versions.len() {
        let (v, r, w, a, c) = (
            versions[i].unwrap_or(-1),
            removes[i].unwrap_or(0),
            whole[i].unwrap_or(0),
            adds[i].unwrap_or(0),
            cdc[i].unwrap_or(0),
        );
        if c > 0 || r == 0 {
            continue;
        }
        let op = ops[i].clone().unwrap_or_default();
        // As embedded: an overwrite is a `WRITE` without a predicate, or a `CREATE…`.
        let overwrite = (op == "WRITE" && predicates[i].is_none()) || op.starts_with("CREATE");
        // Rows only marked in deletion vectors were not copied (no file removed whole): the
        // new files' rows are inserts, as the protocol reads them.
        if w > 0 && a > 0 && !overwrite {
            return Err(EngineError::user(
                format!(
                    "`{}` version {v} rewrites rows ({op}) but has no change data: its changes cannot be read",
                    spec.from
                ),
                "turn the change feed on for bronze (`delta.enableChangeDataFeed = true`) before such writes, or rebuild with `--full-refresh`",
            ));
        }
        // With `source_deletes: apply` the removed files are read, as deletes.
        if spec.source_deletes != SourceDeletes::Apply {
            ignored += r as usize;
        }
    }
    Ok(ignored)
}
