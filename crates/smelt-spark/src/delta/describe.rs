//! A Delta table's commits as Spark reads them: the last one ([`Last`]), its schema and its
//! history.

use arrow::datatypes::SchemaRef;
use smelt_engine::{EngineError, Result};

use crate::delta::log::Span;
use crate::session::Session;

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

/// The schema of `table` as Spark reads it.
pub(crate) async fn schema_of(s: &Session<'_>, what: &str, table: &str) -> Result<SchemaRef> {
    let rows = s
        .read(what, format!("SELECT * FROM {table} LIMIT 0"))
        .await?;
    rows.schema.ok_or_else(|| {
        EngineError::Internal(format!("Spark sent no schema for `SELECT * FROM {table}`"))
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

/// The version of `table` after a run's writes (`None` in a plan or compile, which write
/// nothing).
pub(crate) async fn version_after(
    s: &crate::session::Session<'_>,
    table: &str,
) -> Result<Option<i64>> {
    if s.mode != crate::session::Mode::Run {
        return Ok(None);
    }
    let last = s
        .read(
            "read the written table's version",
            format!("DESCRIBE HISTORY {table} LIMIT 1"),
        )
        .await?;
    Ok(last.ints("version").first().copied().flatten())
}
