//! Time travel in queries: `t VERSION AS OF n`, `t TIMESTAMP AS OF '…'` (Databricks) and
//! `t FOR SYSTEM_TIME AS OF '…'` (BigQuery) read the table as it was at that version. Each
//! such table is registered in the session under a name of its own, and the query reads it
//! there, aliased as the table so that `t.column` still resolves. DataFusion alone would
//! read the current version and ignore the clause.

use std::ops::ControlFlow;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use deltalake::DeltaTable;
use deltalake::datafusion::common::TableReference;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::ast::{
    Expr, Ident, ObjectName, Statement, TableAlias, TableFactor, TableVersion, Value, VisitMut,
    VisitorMut,
};
use smelt_spec::TableName;

use super::catalogs::{AsOf, CatalogTables};
use crate::Lake;
use crate::error::{Context, Error, Result};

/// The session schema time-travelled tables are registered in.
const SCHEMA: &str = "__smelt_as_of";

/// Rewrites every time-travelled table of `statement` to a table registered in `ctx` at
/// the version asked for.
pub(super) async fn resolve(
    lake: &Lake,
    catalogs: &dyn CatalogTables,
    ctx: &SessionContext,
    statement: &mut Statement,
) -> Result<()> {
    let mut visitor = Rewrite::default();
    if let ControlFlow::Break(e) = statement.visit(&mut visitor) {
        return Err(e);
    }
    if visitor.found.is_empty() {
        return Ok(());
    }
    super::session_schema(ctx, SCHEMA)?;
    for (name, as_of, alias) in visitor.found {
        let provider = if name.catalog.is_some() {
            super::snapshot::of_source(catalogs.rows(&name, Some(&as_of)).await?)?
        } else {
            super::snapshot::delta(&name, delta_as_of(lake, &name, &as_of).await?).await?
        };
        ctx.register_table(TableReference::partial(SCHEMA, alias.as_str()), provider)
            .context(|| format!("registering `{name}`"))?;
    }
    Ok(())
}

/// Delta table `name` loaded at the version `as_of` names.
async fn delta_as_of(lake: &Lake, name: &TableName, as_of: &AsOf) -> Result<DeltaTable> {
    let mut table = lake.open_existing(name, "check the table name").await?;
    let latest = table.version().unwrap_or_default();
    let loaded = match *as_of {
        AsOf::Version(v) if v < 0 || v > latest as i64 => {
            return Err(Error::user(
                format!("`{name}` has no version {v}: its versions are 0 to {latest}"),
                "pick a version from `smelt status` or the table's log",
            ));
        }
        AsOf::Version(v) => table.load_version(v as u64).await,
        AsOf::Time(at) => {
            // Delta's commit times (`commit_time`), as `table_changes` and replay
            // windows read them.
            let source = crate::source::DeltaSource::open(lake, name).await?;
            let Some(v) = source.version_at(at.timestamp_micros()).await? else {
                return Err(Error::user(
                    format!("`{name}` has no version at {at}: its first commit is later"),
                    "pick a later time, or a version (`VERSION AS OF n`)",
                ));
            };
            table.load_version(v as u64).await
        }
    };
    loaded.map_err(|e| {
        Error::user(
            format!("cannot read `{name}` at the version asked for: {e}"),
            "a time before the table's first commit, or a version whose log entry was cleaned up, cannot be read",
        )
    })?;
    Ok(table)
}

/// Finds the time-travelled tables and points each at its registered name.
#[derive(Default)]
struct Rewrite {
    found: Vec<(TableName, AsOf, String)>,
}

impl VisitorMut for Rewrite {
    type Break = Error;

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<Error> {
        let TableFactor::Table {
            name,
            version,
            alias,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let Some(asked) = version.take() else {
            return ControlFlow::Continue(());
        };
        let result = (|| {
            let table = catalog_or_lake_table(name).ok_or_else(|| {
                Error::user(
                    format!("`{name}` is not a `schema.table` name"),
                    "name lake tables `schema.table`, e.g. `bronze.product2`",
                )
            })?;
            let as_of = as_of(&table, &asked)?;
            let registered = format!("{}@{}", table, self.found.len());
            if alias.is_none() {
                *alias = Some(TableAlias {
                    explicit: false,
                    name: Ident::new(table.table.clone()),
                    columns: Vec::new(),
                    at: None,
                });
            }
            *name = ObjectName::from(vec![Ident::new(SCHEMA), Ident::new(registered.clone())]);
            self.found.push((table, as_of, registered));
            Ok(())
        })();
        match result {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

/// A three-part name is a catalog's table (`catalog.namespace.table`), any other a lake's.
fn catalog_or_lake_table(name: &ObjectName) -> Option<TableName> {
    if name.0.len() == 3 {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident())
            .map(|i| i.value.clone())
            .collect();
        return TableName::parse(&parts.join("."));
    }
    TableName::from_object_name(name)
}

/// The version or time `asked` names for `table`.
fn as_of(table: &TableName, asked: &TableVersion) -> Result<AsOf> {
    let refuse = |what: String| {
        Err(Error::user(
            format!("`{table} {asked}`: {what}"),
            "write `VERSION AS OF <number>`, `TIMESTAMP AS OF '<time>'` or `FOR SYSTEM_TIME AS OF '<time>'` with a literal time such as '2026-07-01 09:00:00' (UTC) or '2026-07-01T09:00:00+09:00'",
        ))
    };
    match asked {
        TableVersion::VersionAsOf(Expr::Value(v)) => match &v.value {
            Value::Number(n, _) => match n.parse::<i64>() {
                Ok(n) => Ok(AsOf::Version(n)),
                Err(_) => refuse(format!("`{n}` is not a version number")),
            },
            _ => refuse("the version must be a number".into()),
        },
        TableVersion::TimestampAsOf(e) | TableVersion::ForSystemTimeAsOf(e) => {
            match literal_time(e) {
                Some(at) => Ok(AsOf::Time(at)),
                None => refuse("smelt sql takes a literal time here, not an expression".into()),
            }
        }
        _ => refuse("this form of time travel is not supported by smelt sql".into()),
    }
}

/// A time literal: `'…'` or `TIMESTAMP '…'`, RFC 3339 or `YYYY-MM-DD[ HH:MM:SS[.f]]` (UTC).
fn literal_time(e: &Expr) -> Option<DateTime<Utc>> {
    let text = match e {
        Expr::Value(v) => v.value.clone().into_string()?,
        Expr::TypedString(t) => t.value.value.clone().into_string()?,
        _ => return None,
    };
    parse_time(&text)
}

/// A time: RFC 3339 or `YYYY-MM-DD[ HH:MM:SS[.f]]` (UTC).
pub(super) fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Some(t.and_utc());
        }
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}
