//! Where an ingest flow stands, read through Spark: bronze, its watermark and properties,
//! the files its log records loaded (the ledger), the rejects table.

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use smelt_engine::Result;
use smelt_engine::flow::ingest::LOG_CLEANUP;
use smelt_engine::flow::ingest::ledger::{FILES_KEY, FileStamp, loaded_from};
use smelt_engine::ports::keys;
use smelt_engine::rejects::rejects_table;
use smelt_spec::IngestFlow;

use crate::delta::describe::{Last, last_commit, schema_of};
use crate::delta::txn::txn_of;
use crate::places::Places;
use crate::session::Session;
use crate::sql::{ident, string_literal};

/// Where an ingest flow stands before its run.
#[derive(Debug, Clone)]
pub(crate) struct IngestState {
    /// Bronze's last commit, when it exists.
    pub(crate) bronze: Option<Last>,
    /// Bronze's schema, when it exists.
    pub(crate) schema: Option<SchemaRef>,
    /// The loads bronze has taken in (the flow's watermark).
    pub(crate) watermark: Option<i64>,
    /// The files bronze's log records loaded.
    pub(crate) loaded: HashMap<String, FileStamp>,
    /// Whether bronze keeps its whole log (the ledger).
    pub(crate) log_kept: bool,
    /// The rejects table's columns, when it exists.
    pub(crate) rejects: Option<Vec<String>>,
    /// The load the rejects table was last written for.
    pub(crate) rejects_watermark: Option<i64>,
}

/// Where ingest flow `name` (`spec`) stands.
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    name: &str,
    spec: &IngestFlow,
) -> Result<IngestState> {
    let bronze = places.sql(&spec.into);
    let last = last_commit(s, "read bronze's last commit", &bronze).await?;
    let mut state = IngestState {
        bronze: last.clone(),
        schema: None,
        watermark: None,
        loaded: HashMap::new(),
        log_kept: false,
        rejects: None,
        rejects_watermark: None,
    };
    let Some(last) = last else {
        return Ok(state);
    };
    let location = places.location(&spec.into);
    state.schema = Some(schema_of(s, "read bronze's columns", &bronze).await?);
    state.watermark = txn_of(s, &location, name, "read bronze's watermark").await?;
    state.loaded = loaded_from(ledger(s, &location, last.version).await?);
    let props = s
        .read(
            "read bronze's properties",
            format!("SHOW TBLPROPERTIES {bronze}"),
        )
        .await?;
    state.log_kept = props
        .strings("key")
        .into_iter()
        .zip(props.strings("value"))
        .any(|(k, v)| k.as_deref() == Some(LOG_CLEANUP) && v.as_deref() == Some("false"));
    let rejects = places.sql(&rejects_table(&spec.into));
    if last_commit(s, "read the rejects table's last commit", &rejects)
        .await?
        .is_some()
    {
        let schema = schema_of(s, "read the rejects table's columns", &rejects).await?;
        state.rejects = Some(schema.fields().iter().map(|f| f.name().clone()).collect());
        state.rejects_watermark = txn_of(
            s,
            &places.location(&rejects_table(&spec.into)),
            name,
            "read the rejects table's watermark",
        )
        .await?;
    }
    Ok(state)
}

/// The ledger entries (loaded files) of the commits of the table at `location` up to
/// `version`, oldest first, as the embedded engine reads them: in the commits' infos (the
/// embedded engine's) or `userMetadata` (this engine's), and in the files the embedded
/// engine keeps beside the table (`_smelt/ledger/`, which outlive log cleanup).
pub(crate) async fn ledger(s: &Session<'_>, location: &str, version: i64) -> Result<Vec<String>> {
    let sql = format!(
        "SELECT v, c.userMetadata AS meta, c.`{FILES_KEY}` AS files, c.`smelt.flow` AS app, \
         c.`smelt.source_version` AS number FROM (\
         SELECT from_json(value, 'commitInfo STRUCT<userMetadata: STRING, `{FILES_KEY}`: STRING, \
         `smelt.flow`: STRING, `smelt.source_version`: BIGINT>').commitInfo AS c, \
         try_cast(regexp_extract(_metadata.file_name, '^([0-9]+)[.]json$', 1) AS BIGINT) AS v FROM text.{}) \
         WHERE v IS NOT NULL AND v <= {version} AND (c.`{FILES_KEY}` IS NOT NULL OR c.userMetadata LIKE {}) ORDER BY v",
        ident(&format!("{location}/_delta_log/*.json")),
        string_literal(&format!("%{FILES_KEY}%")),
    );
    let rows = s.read("read the loaded files", sql).await?;
    // (version, app, number, value) of each entry.
    let mut entries: Vec<(i64, Option<String>, Option<i64>, String)> = Vec::new();
    let (vs, metas, files, apps, numbers) = (
        rows.ints("v"),
        rows.strings("meta"),
        rows.strings("files"),
        rows.strings("app"),
        rows.ints("number"),
    );
    for ((((v, meta), own), app), number) in
        vs.into_iter().zip(metas).zip(files).zip(apps).zip(numbers)
    {
        let spark = meta.and_then(|m| serde_json::from_str::<serde_json::Value>(&m).ok());
        let from_spark = |key: &str| spark.as_ref().and_then(|j| j.get(key).cloned());
        let (value, app, number) = match own {
            Some(value) => (value, app, number),
            None => {
                let Some(value) =
                    from_spark(FILES_KEY).and_then(|v| v.as_str().map(str::to_string))
                else {
                    continue;
                };
                let app = from_spark(keys::FLOW).and_then(|v| v.as_str().map(str::to_string));
                (
                    value,
                    app,
                    from_spark(keys::SOURCE_VERSION).and_then(|v| v.as_i64()),
                )
            }
        };
        entries.push((v.unwrap_or(0), app, number, value));
    }
    // The entries beside the table: a missing folder is none.
    let beside = format!(
        "SELECT e.app, e.number, e.version, e.value FROM (SELECT from_json(value, \
         'app STRING, number BIGINT, version BIGINT, value STRING') AS e FROM text.{}) WHERE e.value IS NOT NULL",
        ident(&format!("{location}/_smelt/ledger/{FILES_KEY}/*/*.json"))
    );
    s.record_read("read the loaded files kept beside the table", &beside);
    let found = match s
        .spark
        .sql("read the loaded files kept beside the table", &beside)
        .await
    {
        Ok(rows) => Some(rows),
        Err(e) if e.to_string().contains("PATH_NOT_FOUND") => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(rows) = found {
        let (apps, numbers, versions, values) = (
            rows.strings("app"),
            rows.ints("number"),
            rows.ints("version"),
            rows.strings("value"),
        );
        for (((app, number), v), value) in apps.into_iter().zip(numbers).zip(versions).zip(values) {
            let (Some(v), Some(value)) = (v, value) else {
                continue;
            };
            let known = entries
                .iter()
                .any(|(_, a, n, _)| a.is_some() && *a == app && *n == number);
            if v <= version && !known {
                entries.push((v, app, number, value));
            }
        }
    }
    entries.sort_by_key(|(v, _, n, _)| (*v, *n));
    Ok(entries.into_iter().map(|(_, _, _, value)| value).collect())
}
