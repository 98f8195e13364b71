//! An `ingest` flow on Spark (seed 002's Auto Loader), as embedded: the landing's files
//! listed through the cluster, those bronze's ledger does not record loaded ([`plan_found`],
//! the embedded engine's rule) read in the cluster ([`sql`]) and appended to bronze by one
//! statement (`CREATE TABLE … AS` the first time, `INSERT` after) that carries the flow's
//! watermark (the load's number, Delta's `txnAppId` /
//! `txnVersion`) and the files it loads (the commit's `userMetadata`, where the embedded
//! engine also reads them): a crash before it loads the files again, one after it loads
//! nothing twice. Malformed lines go to `<bronze>__rejects` first, tagged with the load.
//!
//! CSV ([`sql`]), JSON lines ([`json`]) and Parquet ([`parquet`]).

use std::collections::HashMap;

use arrow::datatypes::{DataType, SchemaRef};
use smelt_engine::flow::ingest::FIX_FILE;
use smelt_engine::flow::ingest::ledger::plan_found;
use smelt_engine::flow::ingest::load::{BronzeAt, MAX_MALFORMED, ingest_report};
use smelt_engine::flow::ingest::rejects::INGEST_BATCH;
use smelt_engine::ports::LandingFile;
use smelt_engine::rejects::rejects_table;
use smelt_engine::report::{FlowReport, ReportStatus};
use smelt_engine::{EngineError, Result};
use smelt_rules::messages::too_many_malformed;
use smelt_spec::{FileFormat, IngestEvolution, IngestFlow};

use crate::delta::describe::schema_of;
use crate::delta::txn;
use crate::places::Places;
use crate::session::{Mode, Session};

mod columns;
mod csv;
mod json;
mod listing;
mod parquet;
pub(crate) mod sql;
mod state;
mod write;
use columns::{Heads, csv_names, plan_columns};
pub(crate) use listing::{absolute, list};
use sql::{LoadFile, Own};
pub(crate) use state::{IngestState, discover, ledger};

/// The session conf letting a write add the columns its rows have and the table lacks.
const AUTO_MERGE: &str = "spark.databricks.delta.schema.autoMerge.enabled";

/// One ingest flow run.
pub(crate) struct Ingest<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a IngestFlow,
    pub(crate) places: &'a Places,
    pub(crate) ctx: &'a smelt_engine::context::RunContext,
}

impl Ingest<'_> {
    fn own(&self) -> Own<'_> {
        let a = &self.spec.audit;
        Own {
            datasource: a.datasource.as_deref(),
            ingest_timestamp: a.ingest_timestamp.as_deref(),
            file_row: a.file_row.as_deref(),
            rescued_data: self.spec.rescued_data.as_deref(),
        }
    }

    /// The landing's files as Spark lists them (see [`list`]).
    pub(crate) async fn list(&self, s: &Session<'_>) -> Result<Vec<(LandingFile, String)>> {
        list(s, self.spec).await
    }

    /// Runs (or plans) the flow on `s`; `state` is where things stood before.
    pub(crate) async fn run(&self, s: &Session<'_>, state: &IngestState) -> Result<FlowReport> {
        let (name, spec, ctx) = (self.name, self.spec, self.ctx);
        let listed = self.list(s).await?;
        let paths: HashMap<String, String> = listed
            .iter()
            .map(|(f, p)| (f.url.clone(), p.clone()))
            .collect();
        let found: Vec<LandingFile> = listed.into_iter().map(|(f, _)| f).collect();
        let loaded = if ctx.full_refresh {
            HashMap::new()
        } else {
            state.loaded.clone()
        };
        let listing = plan_found(spec, found, &loaded, ctx.full_refresh)?;
        let done = state.watermark.unwrap_or(0);
        let bronze = BronzeAt {
            exists: state.schema.is_some(),
            done,
            version: state.bronze.as_ref().map(|l| l.version),
        };
        let mut report = ingest_report(name, spec, ctx, &listing, bronze);
        if s.mode == Mode::Plan {
            report.status = ReportStatus::Planned;
            return Ok(report);
        }
        let batch = done + 1;
        let rejects = self.places.sql(&rejects_table(&spec.into));
        let stale = state.rejects_watermark.is_some_and(|w| w >= batch);
        if listing.to_load.is_empty() {
            if stale {
                s.write(
                    None,
                    "clear an unfinished load's rejects",
                    format!("DELETE FROM {rejects} WHERE {INGEST_BATCH} = {batch}"),
                )
                .await?;
            }
            report.status = ReportStatus::UpToDate;
            return Ok(report);
        }
        report.to_version = batch;
        txn::reset_watermark(s).await?;
        let (names, mut load) = self.read(s, &listing.to_load, &paths).await?;
        let planned = plan_columns(spec, state.schema.as_ref(), &listing.to_load, &names)?;
        assign_groups(&mut load, &planned, &listing.to_load);
        s.view(
            "name the files' columns",
            sql::meta_view(&load, planned.plan.partition_keys.len()),
        )
        .await?;
        let rows = match spec.format {
            FileFormat::Json => json::rows_view(&planned.plan, self.own()),
            FileFormat::Parquet => parquet::rows_view(&planned.plan, self.own()),
            _ => csv::rows_view(&planned.plan, &spec.csv, self.own()),
        };
        s.view("line the rows up with bronze", rows).await?;
        let (loaded, malformed, rescued) = self.count_rows(s).await?;
        report.rows_written = loaded;
        report.rescued = rescued;
        report.malformed = malformed;
        report.files_read = listing.to_load.len();
        report.columns_added = planned.added.clone();

        if malformed > 0 || stale || (ctx.full_refresh && state.rejects.is_some()) {
            self.write_rejects(s, state, &rejects, batch).await?;
            report.quarantined = malformed;
        }
        if planned.plan.columns.is_empty() {
            // No file named a column: nothing to create bronze from, nothing recorded.
            report.status = ReportStatus::NoColumns;
            return Ok(report);
        }
        report.status = ReportStatus::Applied;
        self.write_bronze(s, state, &planned, &listing.to_load, batch, &mut report)
            .await?;
        Ok(report)
    }

    /// The rows lined up with bronze, counted: (loaded, malformed, rescued); a field that
    /// spans lines, too many malformed rows or a rescued value with `rescued_data` off stop
    /// the run.
    async fn count_rows(&self, s: &Session<'_>) -> Result<(usize, usize, usize)> {
        let spec = self.spec;
        let counts = s.read("count the rows", sql::counts_query()).await?;
        let one = |c: &str| counts.ints(c).first().copied().flatten().unwrap_or(0);
        let text = |c: &str| counts.strings(c).first().cloned().flatten();
        let (malformed, rescued) = (one("malformed") as usize, one("rescued") as usize);
        if let Some(url) = text("open_url") {
            return Err(EngineError::user(
                format!(
                    "{url}: line {}: a quoted field does not end before the next separator or the line's end (text after its closing quote, or a field that spans lines): the Spark engine cuts a file into lines first, and reads neither",
                    one("open_line")
                ),
                "run this flow with `--engine embedded`, or write line breaks inside fields escaped; nothing was committed",
            ));
        }
        if malformed > MAX_MALFORMED {
            return Err(EngineError::rule(too_many_malformed(
                &text("bad_url").unwrap_or_default(),
                MAX_MALFORMED,
                one("bad_line"),
                &text("bad_reason").unwrap_or_default(),
            )));
        }
        if rescued > 0 && spec.rescued_data.is_none() {
            return Err(EngineError::user(
                format!(
                    "{}: row at line {}: a value has no place in bronze (a column bronze does not have, or a field beyond the file's columns), and `rescued_data` is off; turn it on to keep such values",
                    text("rescued_url").unwrap_or_default(),
                    one("rescued_line"),
                ),
                FIX_FILE,
            ));
        }
        Ok((one("loaded") as usize, malformed, rescued))
    }

    /// The columns each file names (`None`: none): a Parquet file's schema, a JSON file's
    /// keys, a CSV file's header (or the flow's `columns`).
    async fn names(
        &self,
        s: &Session<'_>,
        files: &[LandingFile],
        schemas: &[(String, SchemaRef)],
    ) -> Result<Vec<Option<Vec<String>>>> {
        let spec = self.spec;
        Ok(match spec.format {
            FileFormat::Parquet => schemas
                .iter()
                .map(|(_, schema)| Some(schema.fields().iter().map(|f| f.name().clone()).collect()))
                .collect(),
            FileFormat::Json => {
                let rows = s.read("read the files' keys", json::keys_query()).await?;
                let mut names: Vec<Option<Vec<String>>> = vec![None; files.len()];
                for (i, k) in rows.ints("__i").into_iter().zip(rows.strings("k")) {
                    if let (Some(i), Some(k)) = (i, k) {
                        names[i as usize].get_or_insert_with(Vec::new).push(k);
                    }
                }
                names
            }
            _ => {
                let rows = s
                    .read("read the files' first lines", csv::heads_query())
                    .await?;
                let mut heads = Heads::default();
                let (index, fields, lines) =
                    (rows.ints("__i"), rows.strings("f"), rows.ints("__line"));
                for ((i, f), line) in index.into_iter().zip(fields).zip(lines) {
                    let (Some(i), Some(f)) = (i, f) else { continue };
                    let fields: Vec<String> = serde_json::from_str(&f)
                        .map_err(|e| EngineError::Internal(format!("a file's first line: {e}")))?;
                    heads.insert(i as usize, (line.unwrap_or(0), fields));
                }
                csv_names(spec, files, &heads)?
            }
        })
    }

    /// The files read and cut into lines in the cluster (cached); each file's columns
    /// (`None`: it names none).
    async fn read(
        &self,
        s: &Session<'_>,
        files: &[LandingFile],
        paths: &HashMap<String, String>,
    ) -> Result<(Vec<Option<Vec<String>>>, Vec<LoadFile>)> {
        let spec = self.spec;
        let base = match &spec.url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => absolute(&spec.folder)?.to_string_lossy().into_owned(),
        };
        let relatives: Vec<&str> = files.iter().map(|f| f.relative.as_str()).collect();
        let glob = sql::files_relation("binaryFile", &base, &relatives);
        let load: Vec<LoadFile> = files
            .iter()
            .map(|f| LoadFile {
                path: paths.get(&f.url).cloned().unwrap_or_default(),
                url: f.url.clone(),
                size: f.size,
                modified_us: f.modified_us,
                group: 0,
                partitions: Vec::new(),
            })
            .collect();
        s.view("name the files to load", sql::files_view(&load))
            .await?;
        // Text not in the file's encoding reads as U+FFFD (the line is then malformed);
        // encodings beyond Spark's six by their Java names; a key written twice on a JSON
        // line: the last value, as embedded.
        for setting in [
            "spark.sql.legacy.codingErrorAction=true",
            "spark.sql.legacy.javaCharsets=true",
            "spark.sql.mapKeyDedupPolicy=LAST_WIN",
        ] {
            s.setting(format!("SET {setting}")).await?;
        }
        s.setting(format!("UNCACHE TABLE IF EXISTS {}", sql::LINES))
            .await?;
        let there = s
            .read("check the files are there", sql::files_found_query(&glob))
            .await?;
        let there = there.ints("n").first().copied().flatten().unwrap_or(0) as usize;
        if there != files.len() {
            return Err(EngineError::user(
                format!(
                    "{} of the {} files listed are gone or unreadable",
                    files.len() - there.min(files.len()),
                    files.len()
                ),
                "nothing was committed; run again (writers should not delete files from the landing folder while they are loaded)",
            ));
        }
        let schemas = match spec.format {
            FileFormat::Parquet => self.schemas(s, &base, files).await?,
            _ => Vec::new(),
        };
        let cache = match spec.format {
            FileFormat::Json => json::lines_cache(&glob),
            FileFormat::Parquet => {
                let scans: Vec<parquet::Scan<'_>> = schemas
                    .iter()
                    .enumerate()
                    .map(|(index, (relation, schema))| parquet::Scan {
                        index,
                        relation: relation.clone(),
                        schema,
                    })
                    .collect();
                parquet::lines_cache(&scans, |i| files[i].url.clone())?
            }
            _ => csv::lines_cache(&glob, &spec.csv),
        };
        s.read("read the new files", cache).await?;
        let changed = match spec.format {
            FileFormat::Parquet => parquet::changed_query(&glob),
            _ => format!("SELECT min(__i) AS i FROM {} WHERE __changed", sql::LINES),
        };
        let changed = s.read("check the files did not change", changed).await?;
        if let Some(i) = changed.ints("i").first().copied().flatten() {
            let file = &files[i as usize];
            return Err(EngineError::user(
                format!(
                    "`{}` changed while it was read (it was {} bytes when listed): it is being written",
                    file.url, file.size
                ),
                "nothing was committed; run again once the file is complete. Writers should write under a hidden name (`.name` or `_name`) and rename the file when done",
            ));
        }
        let names = self.names(s, files, &schemas).await?;
        Ok((names, load))
    }

    /// Each Parquet file's scan and columns, as Spark reads them (one file at a time: the
    /// files need not share a schema).
    async fn schemas(
        &self,
        s: &Session<'_>,
        base: &str,
        files: &[LandingFile],
    ) -> Result<Vec<(String, SchemaRef)>> {
        let mut schemas = Vec::with_capacity(files.len());
        for file in files {
            let relation = sql::files_relation("parquet", base, &[file.relative.as_str()]);
            let schema = match schema_of(s, "read a file's columns", &relation).await {
                Ok(schema) => schema,
                Err(e) => {
                    let message = e.to_string();
                    return Err(match parquet::illegal_type(&message) {
                        Some(ty) => EngineError::user(
                            format!(
                                "{}: a column of Parquet type {ty}, which Spark's Parquet reader refuses",
                                file.url
                            ),
                            match ty.contains("NANOS") {
                                true => {
                                    "write timestamps in microseconds (pyarrow: `coerce_timestamps='us'`), or run this flow with `--engine embedded`; nothing was committed"
                                }
                                false => {
                                    "run this flow with `--engine embedded`; nothing was committed"
                                }
                            },
                        ),
                        None if message.contains("PATH_NOT_FOUND") => e,
                        None => EngineError::user(
                            format!(
                                "{}: not a readable Parquet file: {}",
                                file.url,
                                message.lines().next().unwrap_or_default()
                            ),
                            FIX_FILE,
                        ),
                    });
                }
            };
            schemas.push((relation, schema));
        }
        Ok(schemas)
    }
}

/// Each file to load with its group of columns and its partition folders' values.
fn assign_groups(load: &mut [LoadFile], planned: &columns::Planned, to_load: &[LandingFile]) {
    for (i, f) in load.iter_mut().enumerate() {
        f.group = planned.groups[i];
        f.partitions = planned
            .plan
            .partition_keys
            .iter()
            .map(|k| {
                to_load[i]
                    .partitions
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
            })
            .collect();
    }
}

/// Whether bronze's column `name` of `schema` holds text (the files' columns do).
pub(crate) fn is_text(schema: &SchemaRef, name: &str) -> bool {
    schema
        .field_with_name(name)
        .map(|f| {
            matches!(
                f.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
        })
        .unwrap_or(true)
}

/// What `evolution` is called in the pipeline file.
pub(crate) fn evolution_name(evolution: IngestEvolution) -> &'static str {
    match evolution {
        IngestEvolution::AddNewColumns => "add_new_columns",
        IngestEvolution::Rescue => "rescue",
        IngestEvolution::Fail => "fail",
    }
}
