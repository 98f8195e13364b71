//! Where an apply flow stands, read through Spark: bronze's version and columns, silver's
//! watermark and last commit, whether the tombstones exist; bronze's history for the
//! versions a run reads; the commits that rewrite rows without change data.

use arrow::datatypes::SchemaRef;
use smelt_engine::flow::apply::tombstone_table;
use smelt_engine::{EngineError, Result};
use smelt_spec::{ApplyFlow, SourceDeletes};

use super::read::{REWRITES_QUERY, Span};
use crate::commits::{Last, check_bronze, last_commit, schema_of, txn_of};
use crate::iceberg::{Meta, meta};
use crate::places::Places;
use crate::session::Session;
use crate::tables::{check_readable, target};

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
    if spec.from.catalog.is_none() {
        check_bronze(s, &spec.from, &bronze).await?;
    }
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

/// One commit of bronze's history.
#[derive(Debug, Clone)]
pub(crate) struct Commit {
    pub(crate) version: i64,
    /// The commit's time (µs): Delta's, as `table_changes` gives it.
    pub(crate) at_us: i64,
}

/// Bronze's history for `span`, oldest first: every version of a range (a commit made
/// since bronze's version was read moves `DESCRIBE HISTORY … LIMIT n` on, so the limit grows
/// until the range is in); a version the log no longer has stops the run.
pub(crate) async fn history(
    s: &Session<'_>,
    bronze: &str,
    bronze_version: i64,
    span: Span,
    from: &str,
) -> Result<Vec<Commit>> {
    let mut limit = match span {
        Span::Range(after, to) => Some(to - after),
        Span::Snapshot(_) => None,
    };
    loop {
        let sql = match limit {
            Some(n) => format!("DESCRIBE HISTORY {bronze} LIMIT {n}"),
            None => format!("DESCRIBE HISTORY {bronze}"),
        };
        let rows = s.read("read bronze's commit times", sql).await?;
        let (versions, times) = (rows.ints("version"), rows.micros("timestamp"));
        let mut commits: Vec<Commit> = versions
            .iter()
            .zip(&times)
            .filter_map(|(v, t)| {
                Some(Commit {
                    version: (*v)?,
                    at_us: (*t)?,
                })
            })
            .collect();
        commits.sort_by_key(|c| c.version);
        let Span::Range(after, to) = span else {
            commits.retain(|c| c.version <= bronze_version);
            return Ok(commits);
        };
        let oldest = commits.first().map_or(i64::MAX, |c| c.version);
        let n = limit.unwrap_or(0);
        if oldest > after + 1 && commits.len() as i64 == n {
            // Newer commits took the places: ask for as many more.
            let newest = commits.last().map_or(to, |c| c.version);
            limit = Some(newest - after);
            continue;
        }
        commits.retain(|c| c.version > after && c.version <= to);
        if commits.len() as i64 != to - after {
            let missing = (after + 1..=to)
                .find(|v| !commits.iter().any(|c| c.version == *v))
                .unwrap_or(after + 1);
            return Err(EngineError::user(
                format!(
                    "`{from}`'s log no longer has version {missing} (cleaned up after a checkpoint): its changes cannot be read"
                ),
                "rebuild silver with `--full-refresh`",
            ));
        }
        return Ok(commits);
    }
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
        .read(
            "look for rewrites without change data",
            REWRITES_QUERY.to_string(),
        )
        .await?;
    let (versions, removes, adds, cdc) = (
        rows.ints("version"),
        rows.ints("removes"),
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
        let (v, r, a, c) = (
            versions[i].unwrap_or(-1),
            removes[i].unwrap_or(0),
            adds[i].unwrap_or(0),
            cdc[i].unwrap_or(0),
        );
        if c > 0 || r == 0 {
            continue;
        }
        let op = ops[i].clone().unwrap_or_default();
        // As embedded: an overwrite is a `WRITE` without a predicate, or a `CREATE…`.
        let overwrite = (op == "WRITE" && predicates[i].is_none()) || op.starts_with("CREATE");
        if a > 0 && !overwrite {
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
