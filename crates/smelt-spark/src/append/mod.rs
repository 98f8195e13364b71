//! An `append` flow on Spark (seed 004's append-only transform), as embedded: the rows the
//! source gained since the watermark — its commits' new files, read as apply flows read them
//! ([`crate::rows`]) — filtered by `where`, cast to the target's types by Spark's `try_cast`,
//! appended by one `INSERT INTO` that carries the watermark (Delta's `txnAppId` /
//! `txnVersion`) and the report; the first run and `--full-refresh` write the source's
//! snapshot by `INSERT OVERWRITE`. A source commit that rewrites rows is `on_rewrite`'s.

use std::collections::BTreeMap;

use arrow::datatypes::SchemaRef;
use smelt_engine::append::rewrite_refused;
use smelt_engine::context::{RunContext, app_id};
use smelt_engine::report::{FlowReport, ReadMode, ReportKind, ReportStatus};
use smelt_engine::schema::column_type;
use smelt_engine::{EngineError, Result};
use smelt_spec::{AppendFlow, CastDialect, ColumnType, OnCastError, OnRewrite};

use crate::places::Places;
use crate::rows::{self, Source};
use crate::scd1::discover::{Last, check_bronze, last_commit, schema_of, txn_of};
use crate::scd1::read::{REWRITES_QUERY, Span};
use crate::scd1::write::{self, commit_metadata};
use crate::scd1::{create_table, spark_type};
use crate::session::{Mode, Session};

mod sql;
use sql::{cache, counts, first_failure, insert};

/// The cache of an append run's rows.
pub(crate) const VIEW: &str = "smelt_append";

/// Where an append flow stands before its run.
#[derive(Debug, Clone)]
pub(crate) struct AppendState {
    /// The source's latest version: what the run reads up to.
    pub(crate) source_version: i64,
    /// The source's schema, as Spark reads it.
    pub(crate) source_schema: SchemaRef,
    /// The target's last commit, when it exists.
    pub(crate) target: Option<Last>,
    /// The target's schema, when it exists.
    pub(crate) target_schema: Option<SchemaRef>,
    /// The source version the target has appended through.
    pub(crate) watermark: Option<i64>,
}

/// Where append flow `name` (`spec`) stands.
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    name: &str,
    spec: &AppendFlow,
) -> Result<AppendState> {
    let source = places.sql(&spec.from);
    let Some(last) = last_commit(s, "read the source's version", &source).await? else {
        return Err(EngineError::TableNotFound {
            table: spec.from.to_string(),
            location: places.location(&spec.from),
            hint: "create the source table first (as a Delta table), or fix `from:` / `lake:`"
                .into(),
        });
    };
    check_bronze(s, &spec.from, &source).await?;
    let source_schema = schema_of(s, "read the source's columns", &source).await?;
    let target_sql = places.sql(&spec.into);
    let target = last_commit(s, "read the target's last commit", &target_sql).await?;
    let (target_schema, watermark) = match &target {
        Some(_) => (
            Some(schema_of(s, "read the target's columns", &target_sql).await?),
            txn_of(
                s,
                &places.location(&spec.into),
                name,
                "read the target's watermark",
            )
            .await?,
        ),
        None => (None, None),
    };
    Ok(AppendState {
        source_version: last.version,
        source_schema,
        target,
        target_schema,
        watermark,
    })
}

/// One column an append flow writes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Column {
    pub(crate) name: String,
    /// Its type in the target.
    pub(crate) ty: ColumnType,
    pub(crate) nullable: bool,
    /// Whether the source's type differs: the value is cast.
    pub(crate) cast: bool,
}

/// The columns `spec` appends — the target's, else its DDL's, else the source's — each a
/// source column: every problem, in the embedded engine's words where it has them.
pub(crate) fn columns(
    name: &str,
    spec: &AppendFlow,
    state: &AppendState,
) -> std::result::Result<Vec<Column>, Vec<EngineError>> {
    let what = format!("flow `{name}`");
    let mut problems = Vec::new();
    let of_schema = |schema: &SchemaRef| -> Vec<(String, Option<ColumnType>, bool)> {
        schema
            .fields()
            .iter()
            .map(|f| {
                (
                    f.name().clone(),
                    column_type(f.data_type()),
                    f.is_nullable(),
                )
            })
            .collect()
    };
    let declared = match (&state.target_schema, &spec.target) {
        (Some(schema), _) => of_schema(schema),
        (None, Some(def)) => def
            .columns
            .iter()
            .map(|c| (c.name.clone(), Some(c.ty), c.nullable))
            .collect(),
        (None, None) => of_schema(&state.source_schema),
    };
    let mut out = Vec::new();
    for (column, ty, nullable) in declared {
        let Ok(source) = state.source_schema.field_with_name(&column) else {
            problems.push(EngineError::user(
                format!(
                    "{what}: target column `{column}` is not a column of `{}`",
                    spec.from
                ),
                "add it to the source, or remove it from the target's CREATE TABLE",
            ));
            continue;
        };
        let Some(ty) = ty else {
            problems.push(EngineError::user(
                format!(
                    "{what}: column `{column}` is of a type the Spark engine does not append yet"
                ),
                "run this flow with `--engine embedded`",
            ));
            continue;
        };
        let from = column_type(source.data_type());
        let casts = from != Some(ty);
        if casts && spec.cast_dialect != CastDialect::Spark {
            let dialect = match spec.cast_dialect {
                CastDialect::BigQuery => "bigquery",
                _ => "lenient",
            };
            problems.push(EngineError::user(
                format!(
                    "{what}: column `{column}` is cast to {ty} by `cast_dialect: {dialect}`, which is not supported on the Spark engine"
                ),
                "set `cast_dialect: spark` (Spark's own `try_cast`), or run this flow with `--engine embedded`",
            ));
        }
        out.push(Column {
            name: column,
            ty,
            nullable,
            cast: casts,
        });
    }
    match problems.is_empty() {
        true => Ok(out),
        false => Err(problems),
    }
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
    pub(crate) async fn run(&self, s: &Session<'_>, state: &AppendState) -> Result<FlowReport> {
        let (spec, v, stored) = (self.spec, state.source_version, state.watermark);
        let mut report = self.report(state);
        if stored == Some(v) && !self.ctx.full_refresh {
            report.status = ReportStatus::UpToDate;
            report.mode = ReadMode::Incremental;
            return Ok(report);
        }
        if let Some(w) = stored.filter(|w| *w > v && !self.ctx.full_refresh) {
            return Err(EngineError::user(
                format!(
                    "flow `{}`: the target's watermark is source version {w}, but `{}` is at version {v}: was the source recreated?",
                    self.name, spec.from
                ),
                "drop the target and run again: Delta's idempotent writes cannot lower a watermark",
            ));
        }
        let columns = columns(self.name, spec, state).map_err(|mut e| e.remove(0))?;
        write::reset_watermark(s).await?;
        let tz = spec.tz.clone().unwrap_or_else(|| "UTC".to_string());
        s.setting(format!("SET spark.sql.session.timeZone={tz}"))
            .await?;
        s.setting("SET spark.sql.parquet.mergeSchema=true".to_string())
            .await?;
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
        let mut opened = None;
        if let (Some(after), false) = (stored, rebuild) {
            let span = Span::Range(after, v);
            let history = rows::open(s, src, span).await?;
            let rewrites = self.rewrites(s).await?;
            if !rewrites.is_empty() {
                match spec.on_rewrite {
                    OnRewrite::Fail => {
                        return Err(rewrite_refused(self.name, &spec.from, after, &rewrites));
                    }
                    OnRewrite::Skip => {
                        report.skipped_versions = rewrites.iter().map(|(v, _)| *v).collect();
                    }
                    OnRewrite::FullRefresh => rebuild = true,
                }
            }
            opened = (!rebuild).then_some((span, history));
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
        let (span, history) = match opened {
            Some(opened) => opened,
            None => {
                let span = Span::Snapshot(v);
                (span, rows::open(s, src, span).await?)
            }
        };
        rows::rows(s, src, span, &history).await?;
        self.count(s, &columns, &mut report).await?;
        report.status = ReportStatus::Applied;
        self.write(s, state, &columns, rebuild, &mut report).await?;
        Ok(report)
    }

    /// The report's fixed part.
    fn report(&self, state: &AppendState) -> FlowReport {
        FlowReport {
            flow: self.name.to_string(),
            kind: ReportKind::Append,
            from: self.spec.from.to_string(),
            into: self.spec.into.to_string(),
            run_id: self.ctx.run_id.clone(),
            from_version: state.watermark,
            to_version: state.source_version,
            silver_version: state.target.as_ref().map(|l| l.version),
            on_cast_error: match self.spec.on_cast_error {
                OnCastError::Null => "null",
                OnCastError::Fail => "fail",
                OnCastError::Quarantine => "quarantine",
            }
            .to_string(),
            ..FlowReport::default()
        }
    }

    /// The source commits read that remove rows (`smelt_log` defined): version, operation.
    async fn rewrites(&self, s: &Session<'_>) -> Result<Vec<(i64, String)>> {
        let rows = s
            .read(
                "look for source commits that rewrite rows",
                REWRITES_QUERY.to_string(),
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
            flow: self.name.to_string(),
            source: Box::new(smelt_core::CoreError::CastFailed {
                column: column.name.clone(),
                target: column.ty.to_string(),
                value: rows
                    .strings("raw")
                    .first()
                    .cloned()
                    .flatten()
                    .unwrap_or_default(),
                row: rows
                    .ints("_row_pos")
                    .first()
                    .copied()
                    .flatten()
                    .unwrap_or(0) as usize,
                context: format!(" (`{}` version {version})", self.spec.from),
            }),
        }
    }

    /// The target created when it does not exist, then the rows appended (or, in a rebuild,
    /// written over the target's) with the watermark and the report.
    async fn write(
        &self,
        s: &Session<'_>,
        state: &AppendState,
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
        s.write(
            None,
            "create the target table",
            create_table(&target, &defs),
        )
        .await?;
        // A rebuild of the version already appended moves no watermark: Delta would skip a
        // write whose txn version is not newer.
        if !(rebuild && state.watermark.is_some_and(|w| w >= v)) {
            s.write_setting(write::set(write::TXN_APP_ID, &app_id(self.name)))
                .await?;
            s.write_setting(write::set(write::TXN_VERSION, &v.to_string()))
                .await?;
        }
        let metadata = commit_metadata(&self.ctx.run_id, self.name, v, report)?;
        s.write_setting(write::set(write::USER_METADATA, &metadata))
            .await?;
        let sql = insert(&target, columns, rebuild);
        let written = s
            .write(Some("before_spark_append"), "append the new rows", sql)
            .await;
        for key in [write::USER_METADATA, write::TXN_APP_ID, write::TXN_VERSION] {
            s.write_setting(write::reset(key)).await?;
        }
        written?;
        if s.mode == Mode::Run {
            let last = s
                .read(
                    "read the target's version",
                    format!("DESCRIBE HISTORY {target} LIMIT 1"),
                )
                .await?;
            report.silver_version = last.ints("version").first().copied().flatten();
        }
        Ok(())
    }
}
