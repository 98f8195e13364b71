//! Where an apply flow stands, read through Spark: bronze's version and columns, silver's
//! watermark and last commit, whether the tombstones exist; bronze's history for the
//! versions a run reads; the commits that rewrite rows without change data.

use smelt_engine::apply::tombstone_table;
use smelt_engine::context::app_id;
use smelt_engine::{EngineError, Result};
use smelt_spec::ApplyFlow;

use super::read::{REWRITES_QUERY, Span};
use crate::places::Places;
use crate::session::Session;
use crate::sql::{ident, string_literal};

/// A table's last commit.
#[derive(Debug, Clone)]
pub(crate) struct Last {
    /// Its version.
    pub(crate) version: i64,
    /// Its `userMetadata` (smelt's commits: the run id, the flow and the report).
    pub(crate) metadata: Option<String>,
    /// Its time (µs).
    pub(crate) at_us: i64,
}

/// Where a flow stands before its run.
#[derive(Debug, Clone)]
pub(crate) struct State {
    /// Bronze's latest version: what the run reads up to.
    pub(crate) bronze_version: i64,
    /// Bronze's columns.
    pub(crate) bronze_columns: Vec<String>,
    /// Silver's last commit, when silver exists.
    pub(crate) silver: Option<Last>,
    /// The bronze version silver has applied through.
    pub(crate) watermark: Option<i64>,
    /// Whether the tombstone table exists.
    pub(crate) tombstones: bool,
}

/// The last commit of `table`, `None` when there is no Delta table there.
pub(crate) async fn last_commit(s: &Session<'_>, what: &str, table: &str) -> Result<Option<Last>> {
    let sql = format!("DESCRIBE HISTORY {table} LIMIT 1");
    match s.spark.sql(what, &sql).await {
        Ok(rows) => {
            s.record_read(what, &sql);
            Ok(rows
                .ints("version")
                .first()
                .copied()
                .flatten()
                .map(|version| Last {
                    version,
                    metadata: rows.strings("userMetadata").first().cloned().flatten(),
                    at_us: rows
                        .micros("timestamp")
                        .first()
                        .copied()
                        .flatten()
                        .unwrap_or(0),
                }))
        }
        Err(e) if e.is_missing_table() => {
            s.record_read(what, &sql);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Where flow `name` (`spec`) stands.
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    name: &str,
    spec: &ApplyFlow,
) -> Result<State> {
    let bronze = places.sql(&spec.from);
    let Some(last) = last_commit(s, "read bronze's version", &bronze).await? else {
        return Err(EngineError::TableNotFound {
            table: spec.from.to_string(),
            location: places.location(&spec.from),
            hint: "create the bronze table first (as a Delta table), or fix `from:` / `lake:`"
                .into(),
        });
    };
    let columns = s
        .read(
            "read bronze's columns",
            format!("SELECT * FROM {bronze} LIMIT 0"),
        )
        .await?
        .names();
    let silver_dir = places.location(&spec.into);
    let silver = last_commit(s, "read silver's last commit", &places.sql(&spec.into)).await?;
    let watermark = match &silver {
        Some(_) => {
            let sql = format!(
                "SELECT max(t.txn.version) AS version FROM (SELECT from_json(value, 'txn STRUCT<appId: STRING, version: BIGINT>') AS t FROM text.{}) WHERE t.txn.appId = {}",
                ident(&format!("{silver_dir}/_delta_log/*.json")),
                string_literal(&app_id(name))
            );
            s.read("read silver's watermark", sql)
                .await?
                .ints("version")
                .first()
                .copied()
                .flatten()
        }
        None => None,
    };
    let tombstones = last_commit(
        s,
        "look for the tombstone table",
        &places.sql(&tombstone_table(&spec.into)),
    )
    .await?
    .is_some();
    Ok(State {
        bronze_version: last.version,
        bronze_columns: columns,
        silver,
        watermark,
        tombstones,
    })
}

/// One commit of bronze's history.
#[derive(Debug, Clone)]
pub(crate) struct Commit {
    pub(crate) version: i64,
    /// The commit's time (µs): Delta's, as `table_changes` gives it.
    pub(crate) at_us: i64,
    pub(crate) operation: String,
}

/// Bronze's history for `span`, oldest first.
pub(crate) async fn history(
    s: &Session<'_>,
    bronze: &str,
    state: &State,
    span: Span,
) -> Result<Vec<Commit>> {
    let sql = match span {
        Span::Range(after, to) => format!("DESCRIBE HISTORY {bronze} LIMIT {}", to - after),
        Span::Snapshot(_) => format!("DESCRIBE HISTORY {bronze}"),
    };
    let rows = s.read("read bronze's commit times", sql).await?;
    let (versions, times, ops) = (
        rows.ints("version"),
        rows.micros("timestamp"),
        rows.strings("operation"),
    );
    let mut commits: Vec<Commit> = versions
        .iter()
        .zip(&times)
        .zip(&ops)
        .filter_map(|((v, t), op)| {
            Some(Commit {
                version: (*v)?,
                at_us: (*t)?,
                operation: op.clone().unwrap_or_default(),
            })
        })
        .filter(|c| c.version <= state.bronze_version)
        .filter(|c| match span {
            Span::Range(after, _) => c.version > after,
            Span::Snapshot(_) => true,
        })
        .collect();
    commits.sort_by_key(|c| c.version);
    Ok(commits)
}

/// A commit of the range that removes and adds files without change data and is not an
/// overwrite stops the run, as embedded (its changes cannot be read); the files removed by
/// the others are deletes without change data, counted.
pub(crate) async fn check_rewrites(
    s: &Session<'_>,
    spec: &ApplyFlow,
    history: &[Commit],
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
        let op = history
            .iter()
            .find(|h| h.version == v)
            .map(|h| h.operation.as_str())
            .unwrap_or("");
        let overwrite = op == "WRITE" || op.starts_with("CREATE") || op.starts_with("REPLACE");
        if a > 0 && !overwrite {
            return Err(EngineError::user(
                format!(
                    "`{}` version {v} rewrites rows ({op}) but has no change data: its changes cannot be read",
                    spec.from
                ),
                "turn the change feed on for bronze (`delta.enableChangeDataFeed = true`) before such writes, or rebuild with `--full-refresh`",
            ));
        }
        ignored += r as usize;
    }
    Ok(ignored)
}
