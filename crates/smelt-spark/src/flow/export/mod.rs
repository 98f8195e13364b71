//! An `export` flow on Spark (seed 003's `EXPORT DATA`), as embedded: the source's rows
//! changed since the last export — new rows and the new image of rewritten ones of the
//! commits after the exported version (the snapshot the first time), or with
//! `changed_by: <column>` the snapshot's rows past the greatest value exported (`since` the
//! first time) — written as Parquet under `<column>=<run time in the flow's zone>/`, each
//! change once.
//!
//! The export's state is a Delta table beside the files (`<to>/_smelt/<flow>.spark`, hidden
//! from readers): a run saves what it is about to write (source version, bounds, folder,
//! run time) as `pending`, then writes the folder (`INSERT OVERWRITE DIRECTORY`: Spark's
//! commit protocol makes the files visible at the end), then marks the state `published`.
//! A crash before the save exports the same rows next run; after it, the next run writes the
//! same rows to the same folder again (the bounds are fixed) before anything new.

use smelt_engine::context::RunContext;
use smelt_engine::flow::export::partition_value;
use smelt_engine::flow::report_head;
use smelt_engine::report::{FlowReport, ReadMode, ReportStatus};
use smelt_engine::schema::column_type;
use smelt_engine::{EngineError, Result};
use smelt_spec::{ChangedBy, ColumnType, Compression, ExportFlow};

use crate::delta::log::Span;
use crate::delta::read::{self as rows, Source};
use crate::places::Places;
use crate::session::{Mode, Session};
use crate::sql::typed_literal as literal;
use crate::sql::{ident, string_literal};
use crate::views::{RAW, View};

/// The rows of an export run, cached.
mod state;

pub(crate) use state::{ExportState, discover, to};
use state::{file_count, state_table};

pub(crate) const VIEW: View = View::new("export");

/// One export flow run.
pub(crate) struct Export<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a ExportFlow,
    pub(crate) places: &'a Places,
    pub(crate) ctx: &'a RunContext,
}

/// What one export writes: the source's rows between two bounds, into one folder.
struct Bounds {
    after_version: Option<i64>,
    after_max: Option<String>,
    version: i64,
    folder: String,
    stamp_us: i64,
}

impl Export<'_> {
    /// Runs (or plans) the flow on `s`; `state` is where things stood before.
    pub(crate) async fn run(&self, s: &Session<'_>, state: &ExportState) -> Result<FlowReport> {
        let (spec, v) = (self.spec, state.source_version);
        let mut saved = state.saved.clone();
        let mut report = FlowReport {
            to_version: v,
            ..report_head(self.name, spec, &self.ctx.run_id)
        };
        s.setting("SET spark.sql.session.timeZone=UTC".into())
            .await?;
        if saved.pending && s.mode != Mode::Plan {
            // An export a crash interrupted: its rows again, into its folder.
            let bounds = Bounds {
                after_version: saved.after_version,
                after_max: saved.after_max.clone(),
                version: saved.version.unwrap_or(v),
                folder: saved.folder.clone().unwrap_or_default(),
                stamp_us: saved.stamp_us.unwrap_or(self.ctx.run_timestamp_us),
            };
            let (_, kept, _) = self.rows(s, state, &bounds).await?;
            self.write(s, state, &bounds, kept).await?;
            self.publish(s, saved.number).await?;
            saved.pending = false;
        }
        if self.ctx.full_refresh {
            (saved.version, saved.column_max) = (None, None);
        }
        report.from_version = saved.version;
        report.mode = match saved.version {
            None => ReadMode::Snapshot,
            Some(_) => ReadMode::Incremental,
        };
        if saved.version == Some(v) {
            report.status = ReportStatus::UpToDate;
            return Ok(report);
        }
        let stamp_us = self.ctx.run_timestamp_us;
        let folder = format!(
            "{}={}",
            escape_path_name(&spec.partition_column),
            escape_path_name(&partition_value(spec, stamp_us)?)
        );
        report.partition = Some(folder.clone());
        if s.mode == Mode::Plan {
            report.status = ReportStatus::Planned;
            return Ok(report);
        }
        let bounds = Bounds {
            after_version: saved.version,
            after_max: saved.column_max.clone(),
            version: v,
            folder,
            stamp_us,
        };
        let path = format!("{}/{}", to(spec)?, bounds.folder);
        if file_count(s, "check the partition folder is new", &path).await? > 0 {
            return Err(EngineError::user(
                format!(
                    "the partition folder `{path}` holds files already (an earlier export's, whose `partition.format` gives the same folder): the Spark engine writes a folder whole and would replace them"
                ),
                "give `partition.format` a finer time (the default has seconds), or run this flow with `--engine embedded`",
            ));
        }
        let (read, written, max) = self.rows(s, state, &bounds).await?;
        report.changes_read = read;
        report.rows_written = written;
        report.status = ReportStatus::Applied;
        let column_max = max.or(bounds.after_max.clone());
        let number = saved.number + 1;
        let status = if written > 0 { "pending" } else { "published" };
        self.save(s, number, &bounds, column_max.as_deref(), status, &report)
            .await?;
        if written > 0 {
            self.write(s, state, &bounds, written).await?;
            self.publish(s, number).await?;
            let files = s
                .read(
                    "count the files written",
                    format!(
                        "SELECT count(*) AS n, sum(length) AS bytes FROM binaryFile.{}",
                        ident(&format!("{}/{}", to(spec)?, bounds.folder))
                    ),
                )
                .await?;
            let one = |c: &str| files.ints(c).first().copied().flatten().unwrap_or(0);
            report.files_written = one("n") as usize;
            report.bytes_written = one("bytes") as u64;
        }
        Ok(report)
    }

    /// The rows between `bounds` cached as [`VIEW`] (the partition column added): the rows
    /// read, those kept, and the greatest value of `changed_by`'s column among them (a Spark
    /// SQL literal).
    async fn rows(
        &self,
        s: &Session<'_>,
        state: &ExportState,
        b: &Bounds,
    ) -> Result<(usize, usize, Option<String>)> {
        let spec = self.spec;
        let source = self.places.sql(&spec.from);
        let columns: Vec<String> = state
            .columns
            .iter()
            .map(|(c, _)| c.clone())
            .filter(|c| c != &spec.partition_column)
            .collect();
        let (relation, keep) = match (&spec.changed_by, b.after_version) {
            (ChangedBy::Version, Some(after)) => {
                let location = self.places.location(&spec.from);
                let src = Source {
                    name: &spec.from.to_string(),
                    location: &location,
                    version: b.version,
                    columns: &columns,
                    removes: false,
                };
                let span = Span::Range(after, b.version);
                let opened = rows::open(s, src, span).await?;
                rows::rows(s, src, span, &opened).await?;
                (
                    RAW.to_string(),
                    "_change_type IN ('insert', 'update_postimage')".to_string(),
                )
            }
            (ChangedBy::Version, None) => (
                format!("{source} VERSION AS OF {}", b.version),
                "true".into(),
            ),
            (ChangedBy::Column(c), _) => {
                let keep = column_bound(spec, state, c, b)?;
                (format!("{source} VERSION AS OF {}", b.version), keep)
            }
        };
        let list: Vec<String> = columns.iter().map(|c| ident(c)).collect();
        s.setting(format!("UNCACHE TABLE IF EXISTS {VIEW}")).await?;
        s.read(
            "read the changed rows",
            format!(
                "CACHE TABLE {VIEW} AS SELECT {}, timestamp_micros({}L) AS {}, coalesce(({keep}), false) AS __keep FROM {relation}",
                list.join(", "),
                b.stamp_us,
                ident(&spec.partition_column)
            ),
        )
        .await?;
        let max = match &spec.changed_by {
            ChangedBy::Column(c) => {
                format!(", CAST(max(IF(__keep, {}, NULL)) AS STRING) AS m", ident(c))
            }
            ChangedBy::Version => String::new(),
        };
        let counts = s
            .read(
                "count the changed rows",
                format!("SELECT count(*) AS n, count_if(__keep) AS kept{max} FROM {VIEW}"),
            )
            .await?;
        let one = |c: &str| counts.ints(c).first().copied().flatten().unwrap_or(0) as usize;
        let max = match &spec.changed_by {
            ChangedBy::Column(c) => {
                let ty = state
                    .columns
                    .iter()
                    .find(|(n, _)| n == c)
                    .and_then(|(_, t)| column_type(t));
                counts
                    .strings("m")
                    .first()
                    .cloned()
                    .flatten()
                    .zip(ty)
                    .map(|(m, ty)| literal(&m, ty))
            }
            ChangedBy::Version => None,
        };
        Ok((one("n"), one("kept"), max))
    }

    /// The state of save `number`: `bounds`, the bound after them, `status`.
    async fn save(
        &self,
        s: &Session<'_>,
        number: i64,
        b: &Bounds,
        column_max: Option<&str>,
        status: &str,
        report: &FlowReport,
    ) -> Result<()> {
        let table = state_table(self.spec, self.name)?;
        s.write(
            None,
            "create the export's state",
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (number BIGINT, version BIGINT, column_max STRING, \
                 status STRING, folder STRING, stamp_us BIGINT, after_version BIGINT, after_max STRING, \
                 run_id STRING, at_ms BIGINT, report STRING) USING DELTA"
            ),
        )
        .await?;
        let text = |v: Option<&str>| v.map_or("CAST(NULL AS STRING)".into(), string_literal);
        let int = |v: Option<i64>| v.map_or("CAST(NULL AS BIGINT)".into(), |v| format!("{v}L"));
        let report =
            serde_json::to_string(report).map_err(|e| EngineError::Internal(e.to_string()))?;
        s.write(
            Some("before_spark_export_state"),
            "save the export's state",
            format!(
                "INSERT INTO {table} VALUES ({number}L, {}L, {}, {}, {}, {}L, {}, {}, {}, {}L, {})",
                b.version,
                text(column_max),
                string_literal(status),
                string_literal(&b.folder),
                b.stamp_us,
                int(b.after_version),
                text(b.after_max.as_deref()),
                string_literal(&self.ctx.run_id),
                chrono_ms(),
                string_literal(&report),
            ),
        )
        .await?;
        Ok(())
    }

    /// The columns exported: the source's (but one named as the partition column), then
    /// the partition column.
    fn output(&self, state: &ExportState) -> Vec<String> {
        let part = &self.spec.partition_column;
        state
            .columns
            .iter()
            .map(|(c, _)| c)
            .filter(|c| *c != part)
            .chain(std::iter::once(part))
            .map(|c| ident(c))
            .collect()
    }

    /// The cached rows (`rows` of them) written into `bounds`' folder, as Parquet: as
    /// many files as embedded, `rows_per_file` rows each at most (one task each).
    async fn write(
        &self,
        s: &Session<'_>,
        state: &ExportState,
        b: &Bounds,
        rows: usize,
    ) -> Result<()> {
        let spec = self.spec;
        let compression = match spec.compression {
            Compression::Snappy => "snappy",
            Compression::Zstd => "zstd",
            Compression::None => "none",
        };
        s.write_setting(format!(
            "SET spark.sql.files.maxRecordsPerFile={}",
            spec.rows_per_file
        ))
        .await?;
        s.write_setting("SET spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS".into())
            .await?;
        let path = format!("{}/{}", to(spec)?, b.folder);
        s.write(
            Some("before_spark_export"),
            "write the files",
            format!(
                "INSERT OVERWRITE DIRECTORY {} USING parquet OPTIONS (compression '{compression}') \
                 SELECT /*+ REPARTITION({}) */ {} FROM {VIEW} WHERE __keep",
                string_literal(&path),
                rows.div_ceil(spec.rows_per_file).max(1),
                self.output(state).join(", ")
            ),
        )
        .await?;
        Ok(())
    }

    /// Save `number` marked published.
    async fn publish(&self, s: &Session<'_>, number: i64) -> Result<()> {
        let table = state_table(self.spec, self.name)?;
        s.write(
            Some("before_spark_export_publish"),
            "mark the export published",
            // A row of its own (an append; an `UPDATE` rewrites the table's file).
            format!(
                "INSERT INTO {table} SELECT number, version, column_max, 'published', folder, stamp_us, \
                 after_version, after_max, run_id, at_ms, report FROM {table} WHERE number = {number} AND status = 'pending'"
            ),
        )
        .await?;
        Ok(())
    }
}

/// The rows of `changed_by: <c>` to export: past the greatest value exported (`after_max`),
/// or from `since` the first time.
fn column_bound(spec: &ExportFlow, state: &ExportState, c: &str, b: &Bounds) -> Result<String> {
    let Some((_, data_type)) = state.columns.iter().find(|(n, _)| n == c) else {
        return Err(EngineError::user(
            format!("`changed_by: {c}` names no column of `{}`", spec.from),
            "use a column of the table, such as `updated_at`, or `version`",
        ));
    };
    let ty = column_type(data_type).ok_or_else(|| {
        EngineError::user(
            format!(
                "`changed_by: {c}` is a column of type {data_type}, which the Spark engine does not compare yet"),
            "bound a time, date or number column, or run this flow with `--engine embedded`",
        )
    })?;
    let keep = match (&b.after_max, &spec.since) {
        (Some(max), _) => format!("{} > {max}", ident(c)),
        (None, Some(since)) => {
            let integer = matches!(
                ty,
                ColumnType::Int64 | ColumnType::Int32 | ColumnType::Int16 | ColumnType::Int8
            );
            if integer && since.trim().parse::<i64>().is_err() {
                return Err(EngineError::user(
                    format!("`since: {since}` is not a value of `{c}` ({ty})"),
                    "write a number, or bound a time column",
                ));
            }
            format!("{} >= {}", ident(c), literal(since.trim(), ty))
        }
        (None, None) => "true".into(),
    };
    Ok(keep)
}

/// `text` as a folder name the way Spark (and BigQuery) write partition folders: `:`, `%`,
/// `=`, `/`, quotes and the other characters paths cannot hold as `%XX` (readers decode
/// them; Hadoop cannot overwrite a folder whose name has a `:`).
fn escape_path_name(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || "\"#%'*/:=?\\{[]^\u{7f}".contains(c) {
            for b in c.to_string().bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Now, ms since the epoch.
fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names_are_escaped_as_spark_escapes_them() {
        assert_eq!(
            escape_path_name("2026-07-21 10:00:00+09:00"),
            "2026-07-21 10%3A00%3A00+09%3A00"
        );
        assert_eq!(escape_path_name("a=b/c%"), "a%3Db%2Fc%25");
    }
}
