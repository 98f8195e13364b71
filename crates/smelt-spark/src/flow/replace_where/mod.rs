//! A `replace_where` flow on Spark (seed 003's selective overwrite), as embedded: from a
//! table, whenever the source's version moves, its snapshot at that version is the batch;
//! from Parquet files, the files not applied yet ([`files`]) —
//! cast to the target's types by Spark's `try_cast` and cached; the predicate's `{min(col)}` /
//! `{max(col)}` filled from the batch as literals of the column's exact type; every batch row
//! checked against the predicate (one outside it stops the run, nothing written); then one
//! `INSERT INTO … REPLACE WHERE` that carries the watermark (Delta's `txnAppId` /
//! `txnVersion`, the source version) and the report.

use std::collections::BTreeMap;

use smelt_engine::cast::CastMiss;
use smelt_engine::context::RunContext;
use smelt_engine::flow::replace_where::{
    Placeholder, cast_failed, empty_bound, outside, placeholders, target_schema, unknown_bound,
    up_to_date,
};
use smelt_engine::flow::report_head;
use smelt_engine::report::{FlowReport, ReadMode, ReportStatus};
use smelt_engine::{EngineError, Result};
use smelt_spec::{OnCastError, ReplaceSource, ReplaceWhereFlow};

use crate::client::Rows;
use crate::delta::ddl::create_table;
use crate::delta::describe;
use crate::delta::txn::{self, commit_metadata_with};
use crate::flow::tables::{self, Column, Tables, Wanted};
use crate::places::Places;
use crate::session::{Mode, Session};
use crate::sql::spark_type;
use crate::views::View;

pub(crate) mod files;
pub(crate) mod sql;

/// The cache of a replace_where run's batch.
pub(crate) const VIEW: View = View::new("replace");

/// Where replace_where flow `name` (`spec`) stands: the source and the target; a batch of
/// files, for a flow from files (see [`files::discover`]; `exported`: an export of the
/// pipeline writes them).
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    (name, spec): (&str, &ReplaceWhereFlow),
    exported: bool,
    full_refresh: bool,
) -> Result<(Tables, Option<files::Batch>)> {
    match &spec.from {
        ReplaceSource::Table(from) => {
            let state = tables::discover(s, places, name, (from, &spec.into)).await?;
            Ok((state, None))
        }
        ReplaceSource::Files(flow) => {
            let (state, batch) =
                files::discover(s, places, (name, spec, flow), exported, full_refresh).await?;
            Ok((state, Some(batch)))
        }
    }
}

/// The columns `spec` writes — the target's, else its DDL's — each a column of the
/// source: every problem, in the embedded engine's words.
pub(crate) fn columns(
    spec: &ReplaceWhereFlow,
    state: &Tables,
) -> std::result::Result<Vec<Column>, Vec<EngineError>> {
    if state.target_schema.is_none() {
        target_schema(spec, None).map_err(|e| vec![e])?;
    }
    let missing =
        |column: &str| EngineError::rule(smelt_rules::messages::target_column_not_in_input(column));
    let wanted = Wanted {
        ddl: spec.target.as_ref(),
        dialect: spec.cast_dialect,
        missing: &missing,
    };
    tables::columns(&wanted, state)
}

/// The predicate's placeholders, each with the column it bounds: an unknown column is a
/// problem.
fn holes<'c>(
    spec: &ReplaceWhereFlow,
    columns: &'c [Column],
) -> Result<Vec<(Placeholder, &'c Column)>> {
    placeholders(&spec.predicate)
        .into_iter()
        .map(|h| match columns.iter().find(|c| c.name == h.column) {
            Some(c) => Ok((h, c)),
            None => Err(unknown_bound(spec, &h)),
        })
        .collect()
}

/// The predicate with each placeholder a NULL of its column's type: what `validate`
/// checks on the cluster.
pub(crate) fn unfilled(spec: &ReplaceWhereFlow, columns: &[Column]) -> Result<String> {
    let holes = holes(spec, columns)?;
    spark_predicate(spec, columns, &holes, |i| {
        format!("CAST(NULL AS {})", spark_type(holes[i].1.ty))
    })
}

/// The predicate as Spark SQL ([`crate::predicate`]), checked against the target's
/// columns, its placeholders (`holes`) filled with `fill(i)`: each is parsed as a column of
/// its own, then its text replaced by the value's Spark literal.
fn spark_predicate(
    spec: &ReplaceWhereFlow,
    columns: &[Column],
    holes: &[(Placeholder, &Column)],
    fill: impl Fn(usize) -> String,
) -> Result<String> {
    let marker = |i: usize| format!("__smelt_bound_{i}");
    let mut marked = spec.predicate.clone();
    for (i, (h, _)) in holes.iter().enumerate() {
        marked = marked.replace(&h.text, &marker(i));
    }
    let markers: Vec<String> = (0..holes.len()).map(marker).collect();
    let scope: Vec<&str> = columns
        .iter()
        .map(|c| c.name.as_str())
        .chain(markers.iter().map(String::as_str))
        .collect();
    let mut text = crate::predicate::spark_sql(&marked, "`predicate`", Some(&scope))?;
    for (i, m) in markers.iter().enumerate() {
        text = text.replace(&crate::sql::ident(m), &fill(i));
    }
    Ok(text)
}

/// One replace_where flow run.
pub(crate) struct ReplaceWhere<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a ReplaceWhereFlow,
    pub(crate) places: &'a Places,
    pub(crate) ctx: &'a RunContext,
}

impl ReplaceWhere<'_> {
    /// Runs (or plans) the flow on `session`; `state` is where things stood before, `batch`
    /// the files of a flow from files.
    pub(crate) async fn run(
        &self,
        s: &Session<'_>,
        state: &Tables,
        batch: Option<&files::Batch>,
    ) -> Result<FlowReport> {
        let (spec, v, stored) = (self.spec, state.source_version, state.watermark);
        let nothing = batch.is_some_and(|b| b.to_load.is_empty());
        if nothing || (stored == Some(v) && !self.ctx.full_refresh) {
            let target = state.target.as_ref().map(|l| l.version);
            return Ok(up_to_date(self.name, spec, self.ctx, stored, v, target));
        }
        let mut report = self.report(state);
        if let Some(batch) = batch {
            report.files_found = batch.found;
            report.files_new = batch.to_load.len();
            report.files_read = batch.to_load.len();
        }
        if let Some(w) = stored.filter(|w| *w > v && !self.ctx.full_refresh) {
            return Err(EngineError::rule(smelt_rules::watermark::ahead(
                &format!("the target `{}`", spec.into),
                &format!("the source `{}`", source_name(spec)),
                w,
                v,
                tables::ahead_fix(&spec.into),
            )));
        }
        let columns = columns(spec, state).map_err(|mut e| e.remove(0))?;
        txn::reset_watermark(s).await?;
        let tz = spec.tz.clone().unwrap_or_else(|| "UTC".to_string());
        s.setting(format!("SET spark.sql.session.timeZone={tz}"))
            .await?;
        s.setting(format!("DROP VIEW IF EXISTS {VIEW}")).await?;
        let source = match &spec.from {
            ReplaceSource::Table(from) => format!("{} VERSION AS OF {v}", self.places.sql(from)),
            ReplaceSource::Files(_) => files::VIEW.to_string(),
        };
        s.read("read and cast the batch", sql::cache(&source, &columns))
            .await?;
        let predicate = self.predicate(s, &columns).await?;
        report.predicate = Some(predicate.clone());
        if s.mode == Mode::Plan {
            report.status = ReportStatus::Planned;
            return Ok(report);
        }
        self.check(s, &source, &columns, &predicate, &mut report)
            .await?;
        report.status = ReportStatus::Applied;
        let entry = batch.map(|b| b.entry(self.name));
        self.write(s, state, (&columns, &predicate), entry, &mut report)
            .await?;
        Ok(report)
    }

    /// The report's fixed part.
    fn report(&self, state: &Tables) -> FlowReport {
        FlowReport {
            mode: ReadMode::Batch,
            to_version: state.source_version,
            silver_version: state.target.as_ref().map(|l| l.version),
            ..report_head(self.name, self.spec, &self.ctx.run_id)
        }
    }

    /// The predicate as run: its placeholders filled from the batch.
    async fn predicate(&self, s: &Session<'_>, columns: &[Column]) -> Result<String> {
        let holes = holes(self.spec, columns)?;
        if holes.is_empty() {
            return spark_predicate(self.spec, columns, &holes, |_| String::new());
        }
        let wanted: Vec<(&Column, bool)> = holes.iter().map(|(h, c)| (*c, h.max)).collect();
        let rows = s.read("the batch's bounds", sql::bounds(&wanted)).await?;
        let mut values = Vec::new();
        for (i, (h, c)) in holes.iter().enumerate() {
            let Some(value) = rows.strings(&format!("b{i}")).first().cloned().flatten() else {
                return Err(empty_bound(h));
            };
            values.push(crate::sql::typed_literal(&value, c.ty));
        }
        spark_predicate(self.spec, columns, &holes, |i| values[i].clone())
    }

    /// Every batch row inside the predicate and, with `on_cast_error: fail`, every value
    /// cast, before anything is written; the counts into `report`.
    async fn check(
        &self,
        s: &Session<'_>,
        source: &str,
        columns: &[Column],
        predicate: &str,
        report: &mut FlowReport,
    ) -> Result<()> {
        let rows = s
            .read("check the batch", sql::counts(columns, predicate))
            .await?;
        let one = |name: &str| rows.ints(name).first().copied().flatten().unwrap_or(0) as usize;
        report.changes_read = one("batch");
        report.rows_written = report.changes_read;
        report.inserted = report.changes_read;
        report.cast_failures = columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.cast)
            .map(|(i, c)| (c.name.clone(), one(&format!("f{i}"))))
            .filter(|(_, n)| *n > 0)
            .collect::<BTreeMap<_, _>>();
        report.on_cast_error = match self.spec.on_cast_error {
            OnCastError::Null => "null",
            OnCastError::Fail => "fail",
            OnCastError::Quarantine => "quarantine",
        }
        .to_string();
        if self.spec.on_cast_error == OnCastError::Fail && !report.cast_failures.is_empty() {
            let rows = s
                .read(
                    "find a value that does not cast",
                    sql::first_failure(source, columns),
                )
                .await?;
            return Err(self.cast_error(&rows, columns, report.to_version));
        }
        if one("outside") > 0 {
            let rows = s
                .read(
                    "find a row outside the predicate",
                    sql::outside(columns, predicate),
                )
                .await?;
            let values: Vec<String> = columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let v = rows.strings(&format!("v{i}")).first().cloned().flatten();
                    format!("{} = {}", c.name, v.as_deref().unwrap_or("NULL"))
                })
                .collect();
            // As the embedded engine names it: a table's rows have no numbers.
            let row = format!(
                "a row of `{}` version {}",
                source_name(self.spec),
                report.to_version
            );
            // The predicate as written, as the embedded engine quotes it.
            return Err(outside(&row, &self.spec.predicate, &values.join(", ")));
        }
        Ok(())
    }

    /// `on_cast_error: fail`: the value found that does not cast (in a row of version `v`).
    fn cast_error(&self, rows: &Rows, columns: &[Column], v: i64) -> EngineError {
        let i = rows.ints("i").first().copied().flatten().unwrap_or(0) as usize;
        let column = columns.get(i).or(columns.iter().find(|c| c.cast));
        let miss = CastMiss {
            column: column.map(|c| c.name.clone()).unwrap_or_default(),
            target: column.map(|c| c.ty.to_string()).unwrap_or_default(),
            value: rows
                .strings("raw")
                .first()
                .cloned()
                .flatten()
                .unwrap_or_default(),
            row: 0,
        };
        let row = format!("a row of `{}` version {v}", source_name(self.spec));
        cast_failed(miss, &row)
    }

    /// The target created when it does not exist, then the batch written over the rows the
    /// predicate matches, with the watermark and the report.
    async fn write(
        &self,
        s: &Session<'_>,
        state: &Tables,
        (columns, predicate): (&[Column], &str),
        entry: Option<(String, String)>,
        report: &mut FlowReport,
    ) -> Result<()> {
        let target = self.places.sql(&self.spec.into);
        let v = state.source_version;
        if state.target.is_some() {
            let rows = s
                .read(
                    "count the target rows replaced",
                    sql::matched(&target, predicate),
                )
                .await?;
            report.rows_replaced =
                rows.ints("matched").first().copied().flatten().unwrap_or(0) as usize;
        }
        let defs: Vec<(String, String, bool)> = columns
            .iter()
            .map(|c| (c.name.clone(), spark_type(c.ty), c.nullable))
            .collect();
        s.write(
            None,
            "create the target table",
            create_table(&target, &defs, self.places.feed(&self.spec.into)),
        )
        .await?;
        // A batch of files records them as applied, as embedded.
        let extra: Vec<(&str, &str)> = entry
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let metadata = commit_metadata_with(&self.ctx.run_id, self.name, v, report, &extra)?;
        let rebuild = self.ctx.full_refresh;
        txn::write_target(
            s,
            (
                "before_spark_replace",
                "replace the rows the predicate matches",
                sql::replace(&target, columns, predicate),
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
}

/// The source's name, for messages.
fn source_name(spec: &ReplaceWhereFlow) -> String {
    match &spec.from {
        ReplaceSource::Table(t) => t.to_string(),
        ReplaceSource::Files(_) => spec.from_text.clone(),
    }
}
