//! The `export` flow (seed 003's `EXPORT DATA`): rows of a table changed since the last
//! export, as Parquet under a Hive-style folder `export_timestamp=<ts>/`, each change once.
//!
//! Files are written under hidden names (`.smelt-tmp-…`, which readers skip), then the
//! export's state — the source version and column bound it reaches, and the renames to
//! do — is saved to `<to>/_smelt/<flow>.json`, then the files are renamed to their final
//! names and the state saved again without the renames. A crash before the state is saved
//! leaves only hidden files (removed by the next run, which exports the same rows again);
//! after, the next run finishes the renames first.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{AsArray, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::functions_aggregate::min_max::MaxAccumulator;
use datafusion::logical_expr::Accumulator;
use futures::StreamExt;
use futures::TryStreamExt;
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parquet::arrow::AsyncArrowWriter;
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use smelt_core::change::{CHANGE_TYPE, INSERT, UPDATE_POSTIMAGE, timestamp_utc};
use smelt_engine::apply::RunContext;
use smelt_engine::ports::{ChangeSource, Reporter};
use smelt_engine::predicate::Predicate;
use smelt_engine::report::{FlowReport, ReadMode, ReportKind, ReportStatus};
use smelt_engine::{EngineError, failpoint};
use smelt_spec::{ChangedBy, Compression, ExportFlow};

use crate::files::Landing;

/// Prefix of files being written.
const TMP: &str = ".smelt-tmp-";

/// What an export flow has exported, kept next to the exports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExportState {
    /// Source version exported through.
    pub version: Option<i64>,
    /// With `changed_by: <column>`: the greatest value exported, as a SQL literal.
    pub column_max: Option<String>,
    /// Renames (hidden name → final name) of an export whose files are written but not
    /// all visible yet.
    #[serde(default)]
    pub pending: Vec<(String, String)>,
    /// The run that saved this state.
    #[serde(default)]
    pub run_id: Option<String>,
    /// When it was saved, ms since the epoch.
    #[serde(default)]
    pub at_ms: Option<i64>,
    /// That run's report as JSON, for the event-log row a crash may lose.
    #[serde(default)]
    pub report: Option<String>,
    /// Which save this is (`_smelt/<flow>/<number>.json`); 0 before the first.
    #[serde(skip)]
    pub number: u64,
}

/// The store and folder exports go to.
struct Target {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
}

/// A storage error while `what`, its cause kept (the CLI prints the chain).
fn storage(e: impl Into<Box<dyn std::error::Error + Send + Sync>>, what: &str) -> EngineError {
    EngineError::Storage {
        context: what.to_string(),
        source: e.into(),
    }
}

impl Target {
    /// The export target of `flow`; `create` makes a local folder that does not exist.
    fn of(flow: &ExportFlow, create: bool) -> smelt_engine::Result<Self> {
        let url = match &flow.url {
            Some(u) => u.clone(),
            None => {
                if create || flow.folder.exists() {
                    std::fs::create_dir_all(&flow.folder).map_err(|e| {
                        storage(e, &format!("creating `{}`", flow.folder.display()))
                    })?;
                } else {
                    return Err(EngineError::user(
                        format!("`{}` does not exist yet", flow.folder.display()),
                        "run the flow once to export into it",
                    ));
                }
                let abs = std::fs::canonicalize(&flow.folder)
                    .map_err(|e| storage(e, &format!("opening `{}`", flow.folder.display())))?;
                url::Url::from_directory_path(abs)
                    .map_err(|_| storage("not an absolute path", "export folder"))?
                    .to_string()
            }
        };
        match Landing::store(&url).map_err(|e| storage(e, "export folder"))? {
            Landing::Store { store, prefix, .. } => Ok(Self {
                store,
                prefix,
                url: url.trim_end_matches('/').to_string(),
            }),
            Landing::Local(_) => Err(EngineError::Internal("a URL opened as a folder".into())),
        }
    }

    fn path(&self, relative: &str) -> ObjectPath {
        ObjectPath::from(format!(
            "{}/{relative}",
            self.prefix.as_ref().trim_end_matches('/')
        ))
    }

    /// Where states were kept before they were numbered: read when no numbered one exists.
    fn legacy_state_path(&self, flow: &str) -> ObjectPath {
        self.path(&format!("_smelt/{flow}.json"))
    }

    /// Save `number` of the state of `flow`. Each save creates a new file, only if it does
    /// not exist yet: two runs that loaded the same state cannot both save the next.
    fn state_path(&self, flow: &str, number: u64) -> ObjectPath {
        self.path(&format!("_smelt/{flow}/{number:020}.json"))
    }

    /// The number of the last save of `flow`'s state, 0 when there is none.
    async fn latest(&self, flow: &str) -> smelt_engine::Result<u64> {
        let dir = self.path(&format!("_smelt/{flow}"));
        let mut objects = self.store.list(Some(&dir));
        let mut latest = 0;
        while let Some(meta) = objects.next().await {
            let meta = meta.map_err(|e| storage(e, "listing the export state"))?;
            let number = meta
                .location
                .filename()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<u64>().ok());
            latest = latest.max(number.unwrap_or(0));
        }
        Ok(latest)
    }

    async fn load(&self, flow: &str) -> smelt_engine::Result<ExportState> {
        let number = self.latest(flow).await?;
        let (path, shown) = match number {
            0 => (self.legacy_state_path(flow), format!("_smelt/{flow}.json")),
            n => (
                self.state_path(flow, n),
                format!("_smelt/{flow}/{n:020}.json"),
            ),
        };
        let mut state = match self.store.get(&path).await {
            Ok(got) => {
                let bytes = got
                    .bytes()
                    .await
                    .map_err(|e| storage(e, "reading the export state"))?;
                serde_json::from_slice(&bytes).map_err(|e| {
                    EngineError::user(
                        format!("the export state `{}/{shown}` is damaged: {e}", self.url),
                        "remove it to export everything again",
                    )
                })?
            }
            Err(object_store::Error::NotFound { .. }) => ExportState::default(),
            Err(e) => return Err(storage(e, "reading the export state")),
        };
        state.number = number;
        Ok(state)
    }

    /// Saves `state` as the next save after the one it was loaded from; fails, naming the
    /// flow, when another run saved that one first.
    async fn save(&self, flow: &str, state: &mut ExportState) -> smelt_engine::Result<()> {
        let json = serde_json::to_vec_pretty(state).expect("serialisable");
        let number = state.number + 1;
        let path = self.state_path(flow, number);
        let create = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        // A put is atomic: the state is the old one or the new one.
        match self
            .store
            .put_opts(&path, PutPayload::from(json), create)
            .await
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(EngineError::user(
                    format!(
                        "flow `{flow}`: another run of this export saved its state first (`{}/_smelt/{flow}/{number:020}.json` exists): what this run wrote is not published",
                        self.url
                    ),
                    "run again: the rerun continues from what the other run exported. Two runs of one export at once cannot both publish",
                ));
            }
            Err(e) => return Err(storage(e, "saving the export state")),
        }
        state.number = number;
        // Older saves are no longer read (the one before this stays, for inspection).
        if number > 2 {
            match self.store.delete(&self.state_path(flow, number - 2)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(storage(e, "removing an old export state")),
            }
        }
        Ok(())
    }

    /// Makes the files of `state.pending` visible (again: a rename already done is skipped).
    async fn finish(&self, flow: &str, state: &mut ExportState) -> smelt_engine::Result<()> {
        if state.pending.is_empty() {
            return Ok(());
        }
        failpoint("before_export_rename")?;
        for (from, to) in &state.pending {
            let (from, to) = (self.path(from), self.path(to));
            match self.store.rename(&from, &to).await {
                Ok(()) => {}
                // Renamed by a run that stopped before saving the state.
                Err(object_store::Error::NotFound { .. }) if self.store.head(&to).await.is_ok() => {
                }
                Err(e) => return Err(storage(e, &format!("renaming `{from}`"))),
            }
        }
        state.pending.clear();
        self.save(flow, state).await?;
        // Hidden files written before this save are no export's any more: runs that
        // crashed before saving, or lost the race to save. (A run still writing started
        // after this save's state, which it loaded: its files are newer.)
        let saved = self
            .store
            .head(&self.state_path(flow, state.number))
            .await
            .map_err(|e| storage(e, "reading the export state"))?;
        self.sweep(flow, saved.last_modified).await?;
        Ok(())
    }

    /// Removes the hidden files of `flow` written before `before` (the store's clock).
    async fn sweep(
        &self,
        flow: &str,
        before: chrono::DateTime<chrono::Utc>,
    ) -> smelt_engine::Result<usize> {
        let mine = format!("{TMP}{flow}-");
        let mut objects = self.store.list(Some(&self.prefix));
        let mut gone = Vec::new();
        while let Some(meta) = objects.next().await {
            let meta = meta.map_err(|e| storage(e, "listing the export folder"))?;
            if meta.last_modified < before
                && meta
                    .location
                    .filename()
                    .is_some_and(|n| n.starts_with(&mine))
            {
                gone.push(meta.location);
            }
        }
        for p in &gone {
            self.store
                .delete(p)
                .await
                .map_err(|e| storage(e, "removing an unfinished export file"))?;
        }
        Ok(gone.len())
    }
}

/// The partition folder's value: `at_us` in the flow's zone and format.
pub fn partition_value(flow: &ExportFlow, at_us: i64) -> smelt_engine::Result<String> {
    let at = chrono::DateTime::from_timestamp_micros(at_us)
        .ok_or_else(|| EngineError::Internal(format!("run time {at_us} out of range")))?;
    let zone = &flow.partition_tz;
    let tz: arrow::array::timezone::Tz = zone.parse().map_err(|_| {
        EngineError::user(
            format!("unknown time zone `{zone}`"),
            "use an IANA name such as `Asia/Tokyo` or an offset such as `+09:00`",
        )
    })?;
    use std::fmt::Write;
    let mut text = String::new();
    write!(
        text,
        "{}",
        at.with_timezone(&tz).format(&flow.partition_format)
    )
    .map_err(|_| {
        EngineError::user(
            format!(
                "partition format `{}` is not a valid strftime format",
                flow.partition_format
            ),
            "use chrono's strftime fields, e.g. `%Y-%m-%d %H:%M:%S%:z`",
        )
    })?;
    if text.contains('/') {
        return Err(EngineError::user(
            format!(
                "partition format `{}` writes `/` (`{text}`)",
                flow.partition_format
            ),
            "a partition is one folder: use `-` between date parts (`%Y-%m-%d`, not `%D` or `%x`)",
        ));
    }
    Ok(text)
}

fn properties(c: Compression) -> WriterProperties {
    let compression = match c {
        Compression::Snappy => ParquetCompression::SNAPPY,
        Compression::Zstd => ParquetCompression::ZSTD(ZstdLevel::default()),
        Compression::None => ParquetCompression::UNCOMPRESSED,
    };
    WriterProperties::builder()
        .set_compression(compression)
        .build()
}

/// Exports the rows of `source` changed since the last export of `flow_name`.
pub async fn run_export(
    flow_name: &str,
    flow: &ExportFlow,
    source: &dyn ChangeSource,
    ctx: &RunContext,
    reporter: &dyn Reporter,
) -> smelt_engine::Result<FlowReport> {
    // A plan of a first export: no folder yet, nothing exported.
    let first_plan = ctx.dry_run && flow.url.is_none() && !flow.folder.exists();
    let target = if first_plan {
        None
    } else {
        Some(Target::of(flow, !ctx.dry_run)?)
    };
    let mut state = match (&target, ctx.full_refresh) {
        (Some(t), false) => t.load(flow_name).await?,
        // What was exported no longer counts, but the next save still follows the last.
        (Some(t), true) => ExportState {
            number: t.latest(flow_name).await?,
            ..ExportState::default()
        },
        (None, _) => ExportState::default(),
    };
    let v = source.version();
    let mut report = FlowReport {
        flow: flow_name.to_string(),
        kind: ReportKind::Export,
        from: flow.from.to_string(),
        into: flow.to.clone(),
        run_id: ctx.run_id.clone(),
        from_version: state.version,
        to_version: v,
        mode: if state.version.is_none() {
            ReadMode::Snapshot
        } else {
            ReadMode::Incremental
        },
        ..FlowReport::default()
    };
    let target = target.filter(|_| !ctx.dry_run);
    if let Some(target) = &target {
        // An export a crash interrupted: finish it (and clear what never became visible).
        target.finish(flow_name, &mut state).await?;
    }
    if state.version == Some(v) {
        report.status = ReportStatus::UpToDate;
        return Ok(report);
    }
    let partition = partition_value(flow, ctx.run_timestamp_us)?;
    let folder = format!("{}={partition}", flow.partition_column);
    report.partition = Some(folder.clone());
    let Some(target) = target else {
        report.status = ReportStatus::Planned;
        return Ok(report);
    };

    let started = Instant::now();
    reporter.phase(flow_name, "export");
    let source_schema = source.schema();
    let mut fields: Vec<Field> = source_schema
        .fields()
        .iter()
        .filter(|f| f.name() != &flow.partition_column)
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(&flow.partition_column, timestamp_utc(), false));
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    let (after, newer) = match &flow.changed_by {
        ChangedBy::Version => (state.version, None),
        ChangedBy::Column(c) => {
            if source_schema.field_with_name(c).is_err() {
                return Err(EngineError::user(
                    format!(
                        "flow `{flow_name}`: `changed_by: {c}` names no column of `{}`",
                        flow.from
                    ),
                    "use a column of the table, such as `updated_at`, or `version`",
                ));
            }
            let bound = match (&state.column_max, &flow.since) {
                (Some(max), _) => Some(format!("\"{c}\" > {max}")),
                (None, Some(since)) => Some(format!("\"{c}\" >= '{}'", since.replace('\'', "''"))),
                (None, None) => None,
            };
            let newer = bound
                .map(|sql| {
                    Predicate::compile(
                        &sql,
                        &source_schema,
                        &format!("flow `{flow_name}`: `changed_by`/`since`"),
                    )
                })
                .transpose()?;
            (None, newer)
        }
    };
    let mut max = match &flow.changed_by {
        ChangedBy::Column(c) => Some((
            c.clone(),
            MaxAccumulator::try_new(source_schema.field_with_name(c)?.data_type())?,
        )),
        ChangedBy::Version => None,
    };
    let stamp = ctx.run_timestamp_us;
    let props = properties(flow.compression);
    let mut writer: Option<(AsyncArrowWriter<BufWriter>, usize)> = None;
    let mut renames: Vec<(String, String)> = Vec::new();
    let mut rows_written = 0usize;
    let mut read = 0usize;
    let short = &ctx.run_id[..8.min(ctx.run_id.len())];
    let mut batches = source.read(after);
    while let Some(batch) = batches.try_next().await? {
        read += batch.num_rows();
        // Changed rows: new rows and the new image of rewritten ones.
        let kinds = batch.column_by_name(CHANGE_TYPE).expect("change batch");
        let kinds = kinds.as_string::<i32>();
        let mut keep = arrow::array::BooleanArray::from_iter(
            kinds
                .iter()
                .map(|k| Some(matches!(k, Some(INSERT) | Some(UPDATE_POSTIMAGE)))),
        );
        if let Some(p) = &newer {
            keep = arrow::compute::and(&keep, &p.evaluate(&batch)?)?;
        }
        if keep.true_count() == 0 {
            continue;
        }
        let rows = filter_record_batch(&batch, &keep)?;
        if let Some((c, acc)) = &mut max {
            acc.update_batch(&[Arc::clone(rows.column_by_name(c).expect("checked"))])?;
        }
        let n = rows.num_rows();
        let mut columns: Vec<_> = schema.fields()[..schema.fields().len() - 1]
            .iter()
            .map(|f| Arc::clone(rows.column_by_name(f.name()).expect("a source column")))
            .collect();
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![stamp; n]).with_timezone("UTC"),
        ));
        let out = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        if writer.is_none() {
            let i = renames.len();
            let tmp = format!("{folder}/{TMP}{flow_name}-{short}-{i:05}.parquet");
            let name = format!("{folder}/part-{i:05}-{short}.parquet");
            let w = AsyncArrowWriter::try_new(
                BufWriter::new(Arc::clone(&target.store), target.path(&tmp)),
                Arc::clone(&schema),
                Some(props.clone()),
            )
            .map_err(|e| storage(e, "writing an export file"))?;
            renames.push((tmp, name));
            writer = Some((w, 0));
        }
        let (w, written) = writer.as_mut().expect("opened above");
        w.write(&out)
            .await
            .map_err(|e| storage(e, "writing an export file"))?;
        *written += n;
        if *written >= flow.rows_per_file {
            let (w, _) = writer.take().expect("open");
            w.close()
                .await
                .map_err(|e| storage(e, "writing an export file"))?;
        }
        rows_written += n;
    }
    drop(batches);
    if let Some((w, _)) = writer.take() {
        w.close()
            .await
            .map_err(|e| storage(e, "writing an export file"))?;
    }
    report.changes_read = read;
    report.rows_written = rows_written;
    report.files_written = renames.len();
    let write_ms = started.elapsed().as_millis() as u64;

    // The state first (with the renames), then the renames: exactly once.
    let started = Instant::now();
    let column_max = match max {
        Some((_, mut acc)) => {
            let value = acc.evaluate()?;
            if value.is_null() {
                state.column_max.clone()
            } else {
                Some(smelt_engine::replace::literal(&value)?)
            }
        }
        None => None,
    };
    report.status = ReportStatus::Applied;
    let mut next = ExportState {
        version: Some(v),
        column_max,
        pending: renames,
        run_id: Some(ctx.run_id.clone()),
        at_ms: Some(chrono::Utc::now().timestamp_millis()),
        report: serde_json::to_string(&report).ok(),
        number: state.number,
    };
    failpoint("before_export_state")?;
    target.save(flow_name, &mut next).await?;
    let published: Vec<String> = next.pending.iter().map(|(_, to)| to.clone()).collect();
    target.finish(flow_name, &mut next).await?;
    for name in published {
        if let Ok(meta) = target.store.head(&target.path(&name)).await {
            report.bytes_written += meta.size;
        }
    }
    report.status = ReportStatus::Applied;
    report.phases_ms = vec![
        ("write files".into(), write_ms),
        ("publish".into(), started.elapsed().as_millis() as u64),
    ];
    Ok(report)
}

/// The state of an export flow, for `smelt status`.
pub async fn export_state(flow_name: &str, flow: &ExportFlow) -> smelt_engine::Result<ExportState> {
    Target::of(flow, false)?.load(flow_name).await
}
