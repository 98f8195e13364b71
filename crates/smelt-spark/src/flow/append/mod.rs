//! An `append` flow on Spark (seed 004's append-only transform), as embedded: the rows the
//! source gained since the watermark — its commits' new files, read as apply flows read them
//! ([`crate::delta::read`]) — filtered by `where`, cast to the target's types by Spark's `try_cast`,
//! appended by one `INSERT INTO` that carries the watermark (Delta's `txnAppId` /
//! `txnVersion`) and the report; the first run and `--full-refresh` write the source's
//! snapshot by `INSERT OVERWRITE`. A source commit that rewrites rows is `on_rewrite`'s.

use std::collections::BTreeMap;

use smelt_engine::context::RunContext;
use smelt_engine::flow::append::rewrite_refused;
use smelt_engine::flow::report_head;
use smelt_engine::report::{FlowReport, ReadMode, ReportStatus};
use smelt_engine::{EngineError, Result};
use smelt_spec::{AppendFlow, OnCastError, OnRewrite};

use crate::delta::ddl::create_table;
use crate::delta::describe;
use crate::delta::log::{Span, rewrites_query};
use crate::delta::read::{self as rows, Source};
use crate::delta::txn::{self, commit_metadata};
use crate::flow::tables::{self, Column, Tables, Wanted};
use crate::iceberg::{self, rows as ice_rows};
use crate::places::Places;
use crate::session::{Mode, Session};
use crate::sql::spark_type;
use crate::views::View;
use smelt_rules::watermark;

mod sql;
use sql::{cache, counts, first_failure, insert};

/// The cache of an append run's rows.
pub(crate) const VIEW: View = View::new("append");

/// Where append flow `name` (`spec`) stands.
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    name: &str,
    spec: &AppendFlow,
) -> Result<Tables> {
    tables::discover(s, places, name, (&spec.from, &spec.into)).await
}

/// The columns `spec` appends — the target's, else its DDL's, else the source's — each a
/// source column: every problem, in the embedded engine's words.
pub(crate) fn columns(
    spec: &AppendFlow,
    state: &Tables,
) -> std::result::Result<Vec<Column>, Vec<EngineError>> {
    let missing = |column: &str| {
        EngineError::user(
            format!(
                "target column `{column}` is not a column of `{}`",
                spec.from
            ),
            "add it to the source, or remove it from the target's CREATE TABLE",
        )
    };
    let wanted = Wanted {
        ddl: spec.target.as_ref(),
        dialect: spec.cast_dialect,
        missing: &missing,
    };
    tables::columns(&wanted, state)
}

/// One append flow run.
pub(crate) struct Append<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a AppendFlow,
    pub(crate) places: &'a Places,
    pub(crate) ctx: &'a RunContext,
}

impl Append<'_> {
    /// Runs (or plans) the flow on `session`; `state` is where things stood before.
    pub(crate) async fn run(&self, s: &Session<'_>, state: &Tables) -> Result<FlowReport> {
        let (spec, v, stored) = (self.spec, state.source_version, state.watermark);
        let mut report = self.report(state);
        if stored == Some(v) && !self.ctx.full_refresh {
            report.status = ReportStatus::UpToDate;
            report.mode = ReadMode::Incremental;
            return Ok(report);
        }
        if let Some(w) = stored.filter(|w| *w > v && !self.ctx.full_refresh) {
            return Err(EngineError::rule(watermark::ahead(
                &format!("the target `{}`", spec.into),
                &format!("the source `{}`", spec.from),
                w,
                v,
                tables::ahead_fix(&spec.into),
            )));
        }
        let columns = columns(spec, state).map_err(|mut e| e.remove(0))?;
        txn::reset_watermark(s).await?;
        super::run_settings(s, spec.tz.as_deref(), spec.into.catalog.is_some()).await?;
        let location = self.places.location(&spec.from);
        let from = spec.from.to_string();
        let source_columns: Vec<String> = state
            .source_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let src = Source {
            name: &from,
            location: &location,
            version: v,
            columns: &source_columns,
            removes: false,
        };
        let mut rebuild = self.ctx.full_refresh || stored.is_none();
        let source_sql = self.places.sql(&spec.from);
        let ice = state.source_meta.as_ref().map(|meta| ice_rows::Source {
            name: &from,
            table: &source_sql,
            meta,
            columns: &source_columns,
            removes: false,
        });
        let mut opened = None;
        let mut ice_range = None;
        if let (Some(after), false) = (stored, rebuild) {
            let rewrites = match &ice {
                Some(src) => {
                    let snaps = ice_rows::range(src, after)?;
                    let rewrites = ice_rows::rewrites(&snaps);
                    ice_range = Some(snaps);
                    rewrites
                }
                None => {
                    let span = Span::Range(after, v);
                    opened = Some((span, rows::open(s, src, span).await?));
                    self.rewrites(s).await?
                }
            };
            if !rewrites.is_empty() {
                match spec.on_rewrite {
                    OnRewrite::Fail => {
                        return Err(rewrite_refused(&spec.from, after, &rewrites));
                    }
                    OnRewrite::Skip => {
                        report.skipped_versions = rewrites.iter().map(|(v, _)| *v).collect();
                    }
                    OnRewrite::FullRefresh => {
                        rebuild = true;
                        (opened, ice_range) = (None, None);
                    }
                }
            }
        }
        report.mode = match (rebuild, state.target.is_some()) {
            (true, true) => ReadMode::Rebuild,
            (true, false) => ReadMode::Snapshot,
            (false, _) => ReadMode::Incremental,
        };
        if s.mode == Mode::Plan {
            // As embedded: a plan says what the run would read, not what it finds.
            report.status = ReportStatus::Planned;
            return Ok(report);
        }
        match &ice {
            Some(ice) => ice_rows::rows(s, *ice, ice_range.as_deref())
                .await
                .map(|_| ())?,
            None => read_delta(s, src, opened).await?,
        }
        self.count(s, &columns, &mut report).await?;
        report.status = ReportStatus::Applied;
        self.write(s, state, &columns, rebuild, &mut report).await?;
        Ok(report)
    }

    /// The report's fixed part.
    fn report(&self, state: &Tables) -> FlowReport {
        FlowReport {
            from_version: state.watermark,
            to_version: state.source_version,
            silver_version: state.target.as_ref().map(|l| l.version),
            on_cast_error: match self.spec.on_cast_error {
                OnCastError::Null => "null",
                OnCastError::Fail => "fail",
                OnCastError::Quarantine => "quarantine",
            }
            .to_string(),
            ..report_head(self.name, self.spec, &self.ctx.run_id)
        }
    }

    /// The source commits read that remove rows (`smelt_log` defined): version, operation.
    async fn rewrites(&self, s: &Session<'_>) -> Result<Vec<(i64, String)>> {
        let rows = s
            .read(
                "look for source commits that rewrite rows",
                rewrites_query(),
            )
            .await?;
        let (versions, removes, ops) = (
            rows.ints("version"),
            rows.ints("removes"),
            rows.strings("operation"),
        );
        Ok(versions
            .iter()
            .zip(&removes)
            .zip(&ops)
            .filter(|((_, r), _)| r.unwrap_or(0) > 0)
            .filter_map(|((v, _), op)| Some(((*v)?, op.clone().unwrap_or_default())))
            .collect())
    }

    /// The rows read, filtered and cast, cached; their counts into `report`;
    /// `on_cast_error: fail`.
    async fn count(
        &self,
        s: &Session<'_>,
        columns: &[Column],
        report: &mut FlowReport,
    ) -> Result<()> {
        s.setting(format!("DROP VIEW IF EXISTS {VIEW}")).await?;
        let sql = cache(self.spec, columns, &report.skipped_versions);
        s.read("read, filter and cast the new rows", sql).await?;
        let rows = s.read("count the new rows", counts(columns)).await?;
        let one = |name: &str| rows.ints(name).first().copied().flatten().unwrap_or(0) as usize;
        report.changes_read = one("changes_read");
        report.ignored = one("ignored");
        report.filtered = one("filtered");
        report.rows_written = one("appended");
        report.inserted = report.rows_written;
        let failures: BTreeMap<String, usize> = columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.cast)
            .map(|(i, c)| (c.name.clone(), one(&format!("f{i}"))))
            .filter(|(_, n)| *n > 0)
            .collect();
        report.cast_failures = failures;
        if self.spec.on_cast_error == OnCastError::Fail && !report.cast_failures.is_empty() {
            return Err(self.cast_error(s, columns, &report.skipped_versions).await);
        }
        Ok(())
    }

    /// `on_cast_error: fail`: the first value (in the source's order) that does not cast.
    async fn cast_error(
        &self,
        s: &Session<'_>,
        columns: &[Column],
        skipped: &[i64],
    ) -> EngineError {
        let sql = first_failure(self.spec, columns, skipped);
        let rows = match s.read("find the first value that does not cast", sql).await {
            Ok(rows) => rows,
            Err(e) => return e,
        };
        let i = rows.ints("i").first().copied().flatten().unwrap_or(0) as usize;
        let column = &columns[i.min(columns.len().saturating_sub(1))];
        let version = rows
            .ints("_commit_version")
            .first()
            .copied()
            .flatten()
            .unwrap_or(0);
        EngineError::Cast {
            source: Box::new(smelt_core::CoreError::CastFailed {
                column: column.name.clone(),
                target: column.ty.to_string(),
                value: rows
                    .strings("raw")
                    .first()
                    .cloned()
                    .flatten()
                    .unwrap_or_default(),
                context: format!(" (`{}` version {version})", self.spec.from),
            }),
        }
    }

    /// The target created when it does not exist, then the rows appended (or, in a rebuild,
    /// written over the target's) with the watermark and the report.
    async fn write(
        &self,
        s: &Session<'_>,
        state: &Tables,
        columns: &[Column],
        rebuild: bool,
        report: &mut FlowReport,
    ) -> Result<()> {
        let target = self.places.sql(&self.spec.into);
        let v = state.source_version;
        let defs: Vec<(String, String, bool)> = columns
            .iter()
            .map(|c| (c.name.clone(), spark_type(c.ty), c.nullable))
            .collect();
        if self.spec.into.catalog.is_some() {
            s.write(
                None,
                "create the target's namespace",
                iceberg::create_namespace(&self.spec.into),
            )
            .await?;
        }
        s.write(
            None,
            "create the target table",
            create_table(&target, &defs, self.places.feed(&self.spec.into)),
        )
        .await?;
        if self.spec.into.catalog.is_some() {
            return self
                .write_iceberg(s, state, (&target, columns), rebuild, report)
                .await;
        }
        let metadata = commit_metadata(&self.ctx.run_id, self.name, v, report)?;
        txn::write_target(
            s,
            (
                "before_spark_append",
                "append the new rows",
                insert(&target, columns, rebuild),
            ),
            (self.name, v, rebuild, state.watermark),
            &metadata,
        )
        .await?;
        if let Some(version) = describe::version_after(s, &target).await? {
            report.silver_version = Some(version);
        }
        Ok(())
    }

    /// An Iceberg target's write: checked unmoved, the rows committed with the watermark,
    /// run id, source and report in the snapshot summary, then the watermark in the table's
    /// properties.
    async fn write_iceberg(
        &self,
        s: &Session<'_>,
        state: &Tables,
        (target, columns): (&str, &[Column]),
        rebuild: bool,
        report: &mut FlowReport,
    ) -> Result<()> {
        let into = self.spec.into.to_string();
        let v = state.source_version;
        iceberg::check_unmoved(s, (target, &into), self.name, state.watermark).await?;
        let summary = iceberg::Summary {
            flow: self.name,
            version: v,
            run_id: &self.ctx.run_id,
            source: (
                report.from.clone(),
                state.source_meta.as_ref().and_then(|m| m.current),
            ),
        };
        summary.set(s, &iceberg::report_json(report)?).await?;
        let written = s
            .write(
                Some("before_spark_append"),
                "append the new rows",
                insert(target, columns, rebuild),
            )
            .await;
        summary.clear(s).await?;
        written?;
        s.write(
            Some("before_spark_watermark_property"),
            "keep the watermark in the table's properties",
            iceberg::watermark_property(target, self.name, v),
        )
        .await?;
        if let Some(meta) = iceberg::written(s, target).await? {
            report.silver_version = Some(meta.version());
        }
        Ok(())
    }
}

/// The rows a Delta source's commits added after the watermark (the log entries `opened`
/// already), or its snapshot's.
async fn read_delta(
    s: &Session<'_>,
    src: Source<'_>,
    opened: Option<(Span, rows::Opened)>,
) -> Result<()> {
    let (span, opened) = match opened {
        Some(opened) => opened,
        None => {
            let span = Span::Snapshot(src.version);
            (span, rows::open(s, src, span).await?)
        }
    };
    rows::rows(s, src, span, &opened).await?;
    Ok(())
}
