//! Iceberg tables on Spark, through the cluster's Iceberg runtime: the pipeline's catalogs
//! registered in the session (unless the cluster defines one of that name), a table's
//! snapshots read from its current metadata file (Spark's metadata tables have no sequence
//! numbers), the flow's watermark where the embedded engine keeps it — the snapshot summary
//! and the table properties under `smelt.watermark.smelt/<flow>`, the value the source's
//! sequence number — and the session confs that put it in the next snapshot's summary.

pub(crate) mod rows;

use std::collections::BTreeMap;

use smelt_engine::context::app_id;
use smelt_engine::ports::keys;
use smelt_engine::{EngineError, Result};
use smelt_spec::{CatalogKind, Pipeline, TableName};

use crate::client::Spark;
use crate::delta::describe::Last;
use crate::session::Session;
use crate::sql::{ident, string_literal};

/// The session conf prefix whose keys Iceberg's Spark writes put in the snapshot summary.
pub(crate) const SNAPSHOT_PROPERTY: &str = "spark.sql.iceberg.snapshot-property.";

/// The key of flow `flow`'s watermark (the embedded engine's).
pub(crate) fn watermark_key(flow: &str) -> String {
    format!("{}{}", keys::WATERMARK, app_id(flow))
}

/// The session confs that make `catalog` a Spark catalog of Iceberg's runtime: a `sql`
/// catalog through Iceberg's `JdbcCatalog` on the same SQLite file (the tables pyiceberg's
/// `SqlCatalog` and the embedded engine keep), a `rest` catalog through its `RESTCatalog`;
/// the table cache off, so that each statement sees the tables as they are.
pub(crate) fn catalog_confs(catalog: &smelt_spec::Catalog) -> Vec<(String, String)> {
    let key = |k: &str| format!("spark.sql.catalog.{}{k}", catalog.name);
    let mut confs = vec![
        (key(""), "org.apache.iceberg.spark.SparkCatalog".to_string()),
        (key(".cache-enabled"), "false".to_string()),
    ];
    match &catalog.kind {
        CatalogKind::Sql { uri } => {
            // `sqlite:///abs/path.db` (as the spec resolves it) is `jdbc:sqlite:/abs/path.db`.
            let path = uri.strip_prefix("sqlite://").unwrap_or(uri);
            let path = path.split('?').next().unwrap_or(path);
            confs.push((key(".type"), "jdbc".to_string()));
            confs.push((key(".uri"), format!("jdbc:sqlite:{path}")));
        }
        CatalogKind::Rest { uri } => {
            confs.push((key(".type"), "rest".to_string()));
            confs.push((key(".uri"), uri.clone()));
        }
    }
    if let Some(warehouse) = &catalog.warehouse {
        confs.push((key(".warehouse"), warehouse.clone()));
    }
    for (k, v) in &catalog.properties {
        confs.push((key(&format!(".{k}")), v.clone()));
    }
    confs
}

/// The pipeline's catalogs registered in the session: each one the cluster does not define
/// itself (`spark.sql.catalog.<name>` unset) from the pipeline file.
pub(crate) async fn register_catalogs(spark: &Spark, pipeline: &Pipeline) -> Result<()> {
    for catalog in &pipeline.catalogs {
        let key = format!("spark.sql.catalog.{}", catalog.name);
        let set = spark
            .sql("read the cluster's catalogs", &format!("SET {key}"))
            .await?;
        let defined = set
            .strings("value")
            .first()
            .cloned()
            .flatten()
            .is_some_and(|v| v != "<undefined>");
        if defined {
            continue;
        }
        for (k, v) in catalog_confs(catalog) {
            spark
                .sql("register an Iceberg catalog", &set_conf(&k, &v))
                .await?;
        }
    }
    Ok(())
}

/// `SET `key`=`value``: both backquoted (keys with `/` and values with `=`), a backquote
/// doubled.
pub(crate) fn set_conf(key: &str, value: &str) -> String {
    format!("SET {}=`{}`", ident(key), value.replace('`', "``"))
}

/// `report` as the JSON text of a snapshot summary's `smelt.report`, settable
/// ([`crate::sql::settable_json`]).
pub(crate) fn report_json(report: &smelt_engine::report::FlowReport) -> Result<String> {
    let text = serde_json::to_string(report).map_err(|e| EngineError::Internal(e.to_string()))?;
    Ok(crate::sql::settable_json(&text))
}

/// The metadata of `table` after a run's writes (`None` in a plan or a compile).
pub(crate) async fn written(s: &Session<'_>, table: &str) -> Result<Option<Meta>> {
    if s.mode != crate::session::Mode::Run {
        return Ok(None);
    }
    meta(s, "read the written table's snapshot", table).await
}

/// `CREATE NAMESPACE IF NOT EXISTS` for `table`'s namespace.
pub(crate) fn create_namespace(table: &TableName) -> String {
    format!(
        "CREATE NAMESPACE IF NOT EXISTS {}.{}",
        ident(table.catalog.as_deref().unwrap_or_default()),
        ident(&table.schema)
    )
}

/// One snapshot of a table.
#[derive(Debug, Clone)]
pub(crate) struct Snap {
    pub(crate) id: i64,
    pub(crate) parent: Option<i64>,
    pub(crate) seq: i64,
    pub(crate) at_us: i64,
    pub(crate) operation: String,
    pub(crate) summary: BTreeMap<String, String>,
}

/// A table's current metadata.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// The current snapshot's id (`None`: no snapshot yet).
    pub(crate) current: Option<i64>,
    /// Every snapshot the metadata keeps.
    pub(crate) snapshots: Vec<Snap>,
    pub(crate) properties: BTreeMap<String, String>,
    pub(crate) format_version: i64,
}

impl Meta {
    /// The snapshot `id`, when the metadata keeps it.
    pub(crate) fn snapshot(&self, id: i64) -> Option<&Snap> {
        self.snapshots.iter().find(|s| s.id == id)
    }

    /// The current snapshot and its ancestors the metadata keeps, newest first.
    pub(crate) fn ancestors(&self) -> Vec<&Snap> {
        let mut out = Vec::new();
        let mut at = self.current;
        while let Some(snap) = at.and_then(|id| self.snapshot(id)) {
            out.push(snap);
            at = snap.parent;
        }
        out
    }

    /// The current snapshot's sequence number: the version a run reads up to (0 without a
    /// snapshot).
    pub(crate) fn version(&self) -> i64 {
        self.current
            .and_then(|id| self.snapshot(id))
            .map_or(0, |s| s.seq)
    }

    /// Flow `flow`'s watermark as the embedded engine reads it back, newest first: the
    /// summary of the latest ancestor that has it, else the table property (which outlives
    /// expired snapshots; the Spark engine sets it after its commit).
    pub(crate) fn watermark(&self, flow: &str, table: &str) -> Result<Option<i64>> {
        let key = watermark_key(flow);
        let found = self
            .ancestors()
            .into_iter()
            .find_map(|s| s.summary.get(&key))
            .or_else(|| self.properties.get(&key));
        found
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    EngineError::user(
                        format!("`{table}` has `{key}` = `{v}`, not a version"),
                        "drop the target (and its tombstones) and run again",
                    )
                })
            })
            .transpose()
    }

    /// The table's last commit as the engine's runs see one: the current snapshot's
    /// sequence number, time, and the run id and report smelt put in its summary.
    pub(crate) fn last(&self) -> Last {
        let current = self.current.and_then(|id| self.snapshot(id));
        let metadata = current.and_then(|s| {
            let run_id = (s.summary.get(keys::RUN_ID))
                .or_else(|| s.summary.get(keys::LEGACY_ICEBERG_RUN_ID))?;
            let report = s.summary.get(keys::REPORT)?;
            let mut meta = serde_json::json!({});
            meta[keys::RUN_ID] = run_id.as_str().into();
            meta[keys::REPORT] = report.as_str().into();
            Some(meta.to_string())
        });
        Last {
            version: self.version(),
            metadata,
            at_us: current.map_or(0, |s| s.at_us),
        }
    }
}

/// The metadata of the Iceberg table `table` (Spark SQL), `None` when there is none. Read
/// from its current metadata file: the same for every later statement of the run, whatever
/// is committed meanwhile.
pub(crate) async fn meta(s: &Session<'_>, what: &str, table: &str) -> Result<Option<Meta>> {
    // The log lists the previous files, then the current one: the last row (not the
    // latest time — writers' clocks differ).
    let sql = format!("SELECT file FROM {table}.`metadata_log_entries`");
    let file = match s.spark.sql(what, &sql).await {
        Ok(rows) => {
            s.record_read(what, &sql);
            rows.strings("file").last().cloned().flatten()
        }
        Err(e) if e.is_missing_table() || e.to_string().contains("TABLE_OR_VIEW_NOT_FOUND") => {
            s.record_read(what, &sql);
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let Some(file) = file else {
        return Err(EngineError::Internal(format!(
            "`{table}` has no metadata file"
        )));
    };
    let rows = s.read(what, metadata_query(&file)).await?;
    let (ids, parents, seqs, times) = (
        rows.ints("id"),
        rows.ints("parent"),
        rows.ints("seq"),
        rows.ints("ts"),
    );
    let (ops, summaries) = (rows.strings("operation"), rows.strings("summary"));
    let map = |text: Option<String>| -> BTreeMap<String, String> {
        text.and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    };
    let first = |name: &str| rows.ints(name).first().copied().flatten();
    if first("format_version").is_none() {
        return Err(EngineError::user(
            format!("cannot read `{table}`'s metadata file `{file}` as JSON (compressed?)"),
            "run this flow with `--engine embedded`",
        ));
    }
    let snapshots = (0..rows.len())
        .filter_map(|i| {
            Some(Snap {
                id: ids[i]?,
                parent: parents[i],
                seq: seqs[i].unwrap_or(0),
                at_us: times[i].unwrap_or(0) * 1000,
                operation: ops[i].clone().unwrap_or_default(),
                summary: map(summaries[i].clone()),
            })
        })
        .collect();
    Ok(Some(Meta {
        current: first("current").filter(|id| *id >= 0),
        snapshots,
        properties: map(rows.strings("properties").first().cloned().flatten()),
        format_version: first("format_version").unwrap_or(0),
    }))
}

/// The snapshots of the metadata file `file`, one row each (one row of NULLs without any).
fn metadata_query(file: &str) -> String {
    let schema = "`format-version` INT, `current-snapshot-id` BIGINT, properties MAP<STRING, STRING>, \
                  snapshots ARRAY<STRUCT<`snapshot-id`: BIGINT, `parent-snapshot-id`: BIGINT, \
                  `sequence-number`: BIGINT, `timestamp-ms`: BIGINT, summary: MAP<STRING, STRING>>>";
    format!(
        "SELECT m.`format-version` AS format_version, m.`current-snapshot-id` AS current, \
         to_json(m.properties) AS properties, s.`snapshot-id` AS id, s.`parent-snapshot-id` AS parent, \
         s.`sequence-number` AS seq, s.`timestamp-ms` AS ts, s.summary.operation AS operation, \
         to_json(s.summary) AS summary\n\
         FROM (SELECT from_json(decode(content, 'UTF-8'), {}) AS m FROM binaryFile.{})\n\
         LATERAL VIEW OUTER explode(m.snapshots) e AS s",
        string_literal(schema),
        ident(file)
    )
}

/// The session confs that put flow `flow`'s watermark (source version `v`), the run id, the
/// source and the report in the summary of the next snapshot a statement commits.
pub(crate) fn summary_confs(
    flow: &str,
    v: i64,
    run_id: &str,
    source: (&str, Option<i64>),
    report: &str,
) -> Vec<(String, String)> {
    let app = app_id(flow);
    let mut out = vec![
        (watermark_key(flow), v.to_string()),
        (keys::RUN_ID.to_string(), run_id.to_string()),
        (keys::REPORT.to_string(), report.to_string()),
        (format!("{}{app}", keys::SOURCE), source.0.to_string()),
    ];
    if let Some(id) = source.1 {
        out.push((format!("{}{app}", keys::SOURCE_SNAPSHOT), id.to_string()));
    }
    out.into_iter()
        .map(|(k, v)| (format!("{SNAPSHOT_PROPERTY}{k}"), v))
        .collect()
}

/// The summary confs [`summary_confs`] sets, by key.
pub(crate) fn summary_keys(flow: &str) -> Vec<String> {
    summary_confs(flow, 0, "", ("", Some(0)), "")
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

/// After the commit that carries it: flow `flow`'s watermark in `table`'s properties too,
/// where the embedded engine also keeps it (a snapshot expiry does not lose it).
pub(crate) fn watermark_property(table: &str, flow: &str, v: i64) -> String {
    format!(
        "ALTER TABLE {table} SET TBLPROPERTIES ({} = {})",
        string_literal(&watermark_key(flow)),
        string_literal(&v.to_string())
    )
}

/// The statements that write an Iceberg target, with the summary confs around them.
pub(crate) struct Summary<'a> {
    pub(crate) flow: &'a str,
    pub(crate) version: i64,
    pub(crate) run_id: &'a str,
    /// The source's name, and its snapshot read up to when it is an Iceberg table.
    pub(crate) source: (String, Option<i64>),
}

impl Summary<'_> {
    /// Sets the confs (`report`: the run's report as JSON); none is left set when one fails.
    pub(crate) async fn set(&self, s: &Session<'_>, report: &str) -> Result<()> {
        let source = (self.source.0.as_str(), self.source.1);
        for (k, v) in summary_confs(self.flow, self.version, self.run_id, source, report) {
            if let Err(e) = s.write_setting(set_conf(&k, &v)).await {
                let _ = self.clear(s).await;
                return Err(e);
            }
        }
        Ok(())
    }

    /// Resets them.
    pub(crate) async fn clear(&self, s: &Session<'_>) -> Result<()> {
        for k in summary_keys(self.flow) {
            s.write_setting(format!("RESET {}", ident(&k))).await?;
        }
        Ok(())
    }
}

/// Before an Iceberg target's write: its watermark for flow `flow` still the one the run
/// started from (Iceberg has no idempotent-write action as Delta's `txn`: a run of the same
/// flow that committed meanwhile stops this one).
pub(crate) async fn check_unmoved(
    s: &Session<'_>,
    (table, name): (&str, &str),
    flow: &str,
    started: Option<i64>,
) -> Result<()> {
    if s.mode != crate::session::Mode::Run {
        return Ok(());
    }
    let now = match meta(s, "check the target's watermark", table).await? {
        Some(meta) => meta.watermark(flow, name)?,
        None => None,
    };
    if now != started {
        return Err(EngineError::user(
            format!(
                "`{name}`'s watermark moved from {} to {} during the run: another run of the flow committed first",
                started.map_or("none".to_string(), |v| v.to_string()),
                now.map_or("none".to_string(), |v| v.to_string()),
            ),
            "run the flow again (one run at a time per flow)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogs_become_iceberg_spark_catalogs() {
        let yaml = "lake: l\ncatalogs:\n  ice:\n    type: sql\n    uri: sqlite:/abs/c.db\n    warehouse: /abs/wh\n    io-impl: x\nflows: {}\n";
        let pipeline = Pipeline::from_str(yaml, "/p/smelt.yaml".as_ref()).unwrap();
        let confs = catalog_confs(&pipeline.catalogs[0]);
        let get = |k: &str| {
            confs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(
            get("spark.sql.catalog.ice"),
            Some("org.apache.iceberg.spark.SparkCatalog")
        );
        assert_eq!(get("spark.sql.catalog.ice.type"), Some("jdbc"));
        assert_eq!(
            get("spark.sql.catalog.ice.uri"),
            Some("jdbc:sqlite:/abs/c.db")
        );
        assert_eq!(get("spark.sql.catalog.ice.warehouse"), Some("/abs/wh"));
        assert_eq!(get("spark.sql.catalog.ice.io-impl"), Some("x"));
        assert_eq!(
            set_conf(
                "spark.sql.iceberg.snapshot-property.smelt.watermark.smelt/f",
                "a`b"
            ),
            "SET `spark.sql.iceberg.snapshot-property.smelt.watermark.smelt/f`=`a``b`"
        );
    }

    fn snap(id: i64, parent: Option<i64>, seq: i64, summary: &[(&str, &str)]) -> Snap {
        Snap {
            id,
            parent,
            seq,
            at_us: seq * 1000,
            operation: "append".into(),
            summary: summary
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_watermark_is_the_newest_summary_then_the_property() {
        let key = watermark_key("f");
        let meta = Meta {
            current: Some(3),
            snapshots: vec![
                snap(1, None, 1, &[(&key, "4")]),
                snap(2, Some(1), 2, &[(&key, "7")]),
                snap(3, Some(2), 3, &[]),
                // Not an ancestor (another branch): not read.
                snap(9, Some(2), 4, &[(&key, "99")]),
            ],
            properties: [(key.clone(), "5".to_string())].into(),
            format_version: 2,
        };
        assert_eq!(meta.watermark("f", "t").unwrap(), Some(7));
        assert_eq!(meta.version(), 3);
        let expired = Meta {
            snapshots: vec![snap(3, Some(2), 3, &[])],
            ..meta.clone()
        };
        assert_eq!(expired.watermark("f", "t").unwrap(), Some(5));
        assert_eq!(meta.watermark("g", "t").unwrap(), None);
    }
}
