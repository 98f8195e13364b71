//! Table names: `schema.table` (Delta) and `catalog.namespace.table` (Iceberg).

use std::fmt;

use sqlparser::ast::ObjectName;

/// A table name: `schema.table`, a Delta table that lives at `<lake>/schema/table` (or where
/// `tables:` places it), or `catalog.namespace.table`, an Iceberg table of a catalog named
/// under `catalogs:`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    /// The Iceberg catalog that holds it; `None` for a Delta table of the lake.
    pub catalog: Option<String>,
    /// Schema (folder under the lake; the namespace in a catalog).
    pub schema: String,
    /// Table (folder under the schema).
    pub table: String,
}

impl TableName {
    /// A Delta table of the lake.
    pub fn new(schema: impl Into<String>, table: impl Into<String>) -> Self {
        TableName {
            catalog: None,
            schema: schema.into(),
            table: table.into(),
        }
    }

    /// A table beside this one (same catalog, same schema), named `table`.
    pub fn sibling(&self, table: impl Into<String>) -> Self {
        TableName {
            catalog: self.catalog.clone(),
            schema: self.schema.clone(),
            table: table.into(),
        }
    }

    /// Parses `schema.table` or `catalog.namespace.table` (surrounding backticks or quotes
    /// allowed).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().trim_matches(|c| c == '`' || c == '"');
        let ok = |p: &str| !p.is_empty() && !p.contains(['/', '\\', '.']) && p != "..";
        let parts: Vec<&str> = s.split('.').collect();
        match parts.as_slice() {
            [schema, table] if ok(schema) && ok(table) => Some(TableName::new(*schema, *table)),
            [catalog, schema, table] if ok(catalog) && ok(schema) && ok(table) => Some(TableName {
                catalog: Some(catalog.to_string()),
                schema: schema.to_string(),
                table: table.to_string(),
            }),
            _ => None,
        }
    }

    /// From a SQL object name: `a.b`, `` `a.b` `` (BigQuery) or `` `a`.`b` ``; a
    /// three-part `project.a.b` keeps the last two parts.
    pub fn from_object_name(name: &ObjectName) -> Option<Self> {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident())
            .flat_map(|i| i.value.split('.').map(str::to_string).collect::<Vec<_>>())
            .collect();
        match parts.as_slice() {
            [.., schema, table] => Self::parse(&format!("{schema}.{table}")),
            _ => None,
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(catalog) = &self.catalog {
            write!(f, "{catalog}.")?;
        }
        write!(f, "{}.{}", self.schema, self.table)
    }
}
