//! `CREATE TABLE` and `ALTER TABLE` (`SET OPTIONS / TBLPROPERTIES`, `ADD COLUMN`) in
//! `smelt sql`.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use deltalake::datafusion::sql::sqlparser::ast::{
    AlterTable, AlterTableOperation, ColumnDef, ColumnOption,
};
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::{StructField, StructType};
use deltalake::operations::create::CreateBuilder;
use deltalake::protocol::SaveMode;
use deltalake::{DeltaTable, TableProperty};
use smelt_engine::schema::{arrow_schema, arrow_type};
use smelt_spec::ColumnType;
use smelt_spec::ddl::{UNSET_PREFIX, understood_option};

use super::{SqlOutput, table_name};
use crate::Lake;
use crate::error::{Context, Error, Result};

/// BigQuery's table options that change how a table behaves or describe it: refused rather
/// than kept as properties nothing acts on.
const BIGQUERY_OPTIONS: &[&str] = &[
    "expiration_timestamp",
    "partition_expiration_days",
    "require_partition_filter",
    "kms_key_name",
    "friendly_name",
    "description",
    "labels",
    "default_rounding_mode",
    "max_staleness",
    "enable_fine_grained_mutations",
    "storage_uri",
    "file_format",
    "table_format",
    "default_collate",
];

/// `ALTER TABLE t SET OPTIONS / SET TBLPROPERTIES (…)`: the change feed on or off, and
/// properties of the user's own; Delta's other properties and other operations are refused
/// by name.
pub(super) async fn alter_table(lake: &Lake, alter: AlterTable) -> Result<SqlOutput> {
    let name = table_name(&alter.name)?;
    let table = lake
        .open_existing(&name, "create it first with CREATE TABLE")
        .await?;
    let state = table.snapshot().context(|| format!("reading `{name}`"))?;
    crate::features::check_writable(&name.to_string(), state)?;
    let mut properties = HashMap::new();
    let mut added = Vec::new();
    let mut unset = Vec::new();
    for op in &alter.operations {
        let table_properties = match op {
            AlterTableOperation::SetTblProperties { table_properties } => table_properties,
            AlterTableOperation::AddColumn {
                if_not_exists,
                column_def,
                column_position,
                ..
            } => {
                if let Some(field) = new_column(
                    &table,
                    &name,
                    column_def,
                    *if_not_exists,
                    column_position.is_some(),
                )? {
                    added.push(field);
                }
                continue;
            }
            other => {
                return Err(Error::user(
                    format!("ALTER TABLE `{name}` {other} is not supported by smelt sql"),
                    "smelt sql sets table properties and adds columns; for anything else, create the table again",
                ));
            }
        };
        for option in table_properties {
            let text = option.to_string();
            let (key, value) = text.split_once('=').unwrap_or((&text, ""));
            let unquote = |s: &str| {
                s.trim()
                    .trim_matches(|c| c == '\'' || c == '"' || c == '`')
                    .to_string()
            };
            let (key, value) = (unquote(key), unquote(value));
            if let Some(unset_key) = key.strip_prefix(UNSET_PREFIX) {
                unset.push((unset_key.to_string(), value == "if_exists"));
                continue;
            }
            let (lower, lower_value) = (key.to_ascii_lowercase(), value.to_ascii_lowercase());
            if lower.starts_with("delta.") || lower == "enable_change_history" {
                if !understood_option(&lower, &lower_value) || lower.starts_with("delta.feature") {
                    return Err(Error::user(
                        format!(
                            "ALTER TABLE `{name}`: table property `{key}` (= '{value}') is not supported by smelt sql"
                        ),
                        "of Delta's properties smelt sets the change feed: enable_change_history / delta.enableChangeDataFeed (true or false)",
                    ));
                }
                properties.insert("delta.enableChangeDataFeed".to_string(), lower_value);
            } else if BIGQUERY_OPTIONS.contains(&lower.as_str()) {
                return Err(Error::user(
                    format!(
                        "ALTER TABLE `{name}`: BigQuery's table option `{key}` is not supported by smelt sql"
                    ),
                    "smelt does not expire, partition or encrypt tables, and keeps no description or labels; drop the option",
                ));
            } else {
                // A property of the user's own (seed 004 keeps a watermark in one): kept
                // as written, read back with SHOW TBLPROPERTIES.
                properties.insert(key, value);
            }
        }
    }
    if !unset.is_empty() {
        if !properties.is_empty() || !added.is_empty() {
            return Err(Error::user(
                format!("ALTER TABLE `{name}` both unsets properties and makes other changes"),
                "write one ALTER TABLE for each (each is one commit)",
            ));
        }
        return unset_properties(table, &name, unset).await;
    }
    if !added.is_empty() {
        if !properties.is_empty() {
            return Err(Error::user(
                format!("ALTER TABLE `{name}` both adds columns and sets properties"),
                "write one ALTER TABLE for each (each is one commit)",
            ));
        }
        let names: Vec<String> = added.iter().map(|f| f.name().clone()).collect();
        table
            .add_columns()
            .with_fields(added)
            .await
            .context(|| format!("adding columns to `{name}`"))?;
        return Ok(SqlOutput::Message(format!(
            "altered table {name}: added {}",
            names.join(", ")
        )));
    }
    if properties.is_empty() {
        return Ok(SqlOutput::Message(format!("table {name} left as is")));
    }
    let mut set: Vec<String> = properties
        .iter()
        .map(|(k, v)| format!("{k} = '{v}'"))
        .collect();
    set.sort();
    table
        .set_tbl_properties()
        .with_properties(properties)
        // Delta's keys are checked above; the user's own are not delta-rs' to refuse.
        .with_raise_if_not_exists(false)
        .await
        .context(|| format!("altering `{name}`"))?;
    Ok(SqlOutput::Message(format!(
        "altered table {name}: {}",
        set.join(", ")
    )))
}

/// Whether the table `def` names may be created: `Ok(exists)`, or what `IF NOT EXISTS` left.
async fn may_create(
    lake: &Lake,
    def: &smelt_spec::TableDef,
) -> Result<std::result::Result<bool, SqlOutput>> {
    let exists = lake.exists(&def.name).await?;
    if exists && def.if_not_exists {
        return Ok(Err(SqlOutput::Message(format!(
            "table {} exists; left as is",
            def.name
        ))));
    }
    if exists && !def.or_replace {
        return Err(Error::user(
            format!("table `{}` already exists", def.name),
            "use CREATE OR REPLACE TABLE to replace it, or CREATE TABLE IF NOT EXISTS",
        ));
    }
    Ok(Ok(exists))
}

/// `CREATE [OR REPLACE] TABLE t [OPTIONS …] AS SELECT …`: the table with the query's columns
/// and rows, in one commit.
pub(super) async fn create_table_as(
    lake: &Lake,
    def: &smelt_spec::TableDef,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<SqlOutput> {
    // A query over a column-mapped table carries its mapping in the columns' metadata: the
    // new table is a plain one, its columns under their logical names.
    let (schema, batches) = crate::mapping::plain(&schema, batches).map_err(Error::Arrow)?;
    let exists = match may_create(lake, def).await? {
        Ok(exists) => exists,
        Err(left) => return Ok(left),
    };
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows == 0 {
        return create(lake, def, &schema, exists).await;
    }
    lake.prepare(&def.name)?;
    let table = lake.handle(&def.name).await?;
    // Without an option the feed is off (a replaced table's is turned off).
    let feed = def.change_feed == Some(true);
    let configuration: Vec<(&str, Option<&str>)> = if feed {
        vec![("delta.enableChangeDataFeed", Some("true"))]
    } else {
        Vec::new()
    };
    let mut write = table
        .write(batches)
        .with_table_name(def.name.table.clone())
        .with_configuration(configuration);
    write = if exists {
        // OR REPLACE: the query's columns replace the table's.
        write
            .with_save_mode(SaveMode::Overwrite)
            .with_schema_mode(deltalake::operations::write::SchemaMode::Overwrite)
    } else {
        write.with_save_mode(SaveMode::ErrorIfExists)
    };
    let table = write.await.context(|| format!("creating `{}`", def.name))?;
    // Replacing a table keeps its properties (delta-rs writes no new configuration then):
    // the change feed follows the statement in a second commit.
    let mut note = "";
    if exists {
        let feed_on = table
            .snapshot()
            .context(|| format!("reading `{}`", def.name))?
            .metadata()
            .configuration()
            .get("delta.enableChangeDataFeed")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if feed_on != feed {
            table
                .set_tbl_properties()
                .with_properties(HashMap::from([(
                    "delta.enableChangeDataFeed".to_string(),
                    feed.to_string(),
                )]))
                .await
                .context(|| format!("setting the change feed of `{}`", def.name))?;
            note = if feed {
                ", change feed turned on"
            } else {
                ", change feed turned off"
            };
        }
    }
    Ok(SqlOutput::Message(format!(
        "{} table {} ({} columns) with {rows} rows{note}",
        if exists { "replaced" } else { "created" },
        def.name,
        schema.fields().len()
    )))
}

pub(super) async fn create_table(lake: &Lake, def: &smelt_spec::TableDef) -> Result<SqlOutput> {
    let exists = match may_create(lake, def).await? {
        Ok(exists) => exists,
        Err(left) => return Ok(left),
    };
    create(lake, def, &arrow_schema(def), exists).await
}

/// Creates (or replaces) the table with `schema`, no rows.
async fn create(
    lake: &Lake,
    def: &smelt_spec::TableDef,
    schema: &SchemaRef,
    exists: bool,
) -> Result<SqlOutput> {
    let delta_schema: StructType = schema.as_ref().try_into_kernel().map_err(Error::Arrow)?;
    lake.prepare(&def.name)?;
    let mut builder = CreateBuilder::new()
        .with_location(lake.table_url(&def.name)?.to_string())
        .with_storage_options(lake.storage_options(&def.name)?)
        .with_table_name(def.name.table.clone())
        .with_columns(delta_schema.fields().cloned())
        .with_save_mode(if exists {
            SaveMode::Overwrite
        } else {
            SaveMode::ErrorIfExists
        });
    let feed = def.change_feed == Some(true);
    if feed {
        builder =
            builder.with_configuration_property(TableProperty::EnableChangeDataFeed, Some("true"));
    }
    builder
        .await
        .context(|| format!("creating `{}`", def.name))?;
    Ok(SqlOutput::Message(format!(
        "{} table {} ({} columns{})",
        if exists { "replaced" } else { "created" },
        def.name,
        schema.fields().len(),
        if feed { ", change feed on" } else { "" }
    )))
}

/// The column `ADD COLUMN` adds, `None` when it exists and `IF NOT EXISTS` says to leave it.
fn new_column(
    table: &deltalake::DeltaTable,
    name: &smelt_spec::TableName,
    column: &ColumnDef,
    if_not_exists: bool,
    positioned: bool,
) -> Result<Option<StructField>> {
    let col = &column.name.value;
    let exists = table
        .snapshot()
        .context(|| format!("reading `{name}`"))?
        .snapshot()
        .schema()
        .fields()
        .any(|f| f.name().eq_ignore_ascii_case(col));
    if exists {
        return if if_not_exists {
            Ok(None)
        } else {
            Err(Error::user(
                format!("ALTER TABLE `{name}`: column `{col}` exists"),
                "write ADD COLUMN IF NOT EXISTS to leave it",
            ))
        };
    }
    if positioned {
        return Err(Error::user(
            format!("ALTER TABLE `{name}` ADD COLUMN `{col}`: FIRST / AFTER is not supported"),
            "new columns go last",
        ));
    }
    if column
        .options
        .iter()
        .any(|o| !matches!(o.option, ColumnOption::Null))
    {
        return Err(Error::user(
            format!(
                "ALTER TABLE `{name}` ADD COLUMN `{col}`: constraints and defaults are not supported"
            ),
            "a column added to a table is NULL in its rows so far: add it without NOT NULL or DEFAULT",
        ));
    }
    let type_text = column.data_type.to_string();
    let ty = ColumnType::parse(&type_text).ok_or_else(|| {
        Error::user(
            format!("ALTER TABLE `{name}` ADD COLUMN `{col}`: unknown type `{type_text}`"),
            "use STRING, BOOL, INT64, INT, SMALLINT, FLOAT64, FLOAT, NUMERIC, DECIMAL(p,s), DATE, TIMESTAMP, DATETIME or BYTES",
        )
    })?;
    let field = arrow::datatypes::Field::new(col, arrow_type(ty), true);
    Ok(Some((&field).try_into_kernel().map_err(Error::Arrow)?))
}

/// `ALTER TABLE t UNSET TBLPROPERTIES [IF EXISTS] (keys)`: one commit of the table's metadata
/// without them. Of Delta's own properties only the change feed may go.
async fn unset_properties(
    table: DeltaTable,
    name: &smelt_spec::TableName,
    keys: Vec<(String, bool)>,
) -> Result<SqlOutput> {
    use deltalake::kernel::MetadataExt;
    let state = table.snapshot().context(|| format!("reading `{name}`"))?;
    let mut metadata = state.metadata().clone();
    let mut removed = Vec::new();
    for (key, if_exists) in keys {
        let lower = key.to_ascii_lowercase();
        if lower.starts_with("delta.") && lower != "delta.enablechangedatafeed" {
            return Err(Error::user(
                format!(
                    "ALTER TABLE `{name}`: unsetting Delta's property `{key}` is not supported by smelt sql"
                ),
                "of Delta's properties smelt unsets the change feed (delta.enableChangeDataFeed)",
            ));
        }
        let Some(stored) = metadata
            .configuration()
            .keys()
            .find(|k| k.eq_ignore_ascii_case(&key))
            .cloned()
        else {
            if if_exists {
                continue;
            }
            return Err(Error::user(
                format!("ALTER TABLE `{name}`: the table has no property `{key}`"),
                "write UNSET TBLPROPERTIES IF EXISTS (…) to leave absent ones be",
            ));
        };
        metadata = metadata
            .remove_config_key(&stored)
            .map_err(|e| Error::internal(format!("unsetting `{stored}` of `{name}`: {e}")))?;
        removed.push(stored);
    }
    if removed.is_empty() {
        return Ok(SqlOutput::Message(format!("table {name} left as is")));
    }
    deltalake::kernel::transaction::CommitBuilder::default()
        .with_actions(vec![deltalake::kernel::Action::Metadata(metadata)])
        .build(
            Some(state),
            table.log_store(),
            deltalake::protocol::DeltaOperation::SetTableProperties {
                properties: HashMap::new(),
            },
        )
        .await
        .context(|| format!("unsetting properties of `{name}`"))?;
    Ok(SqlOutput::Message(format!(
        "altered table {name}: unset {}",
        removed.join(", ")
    )))
}
