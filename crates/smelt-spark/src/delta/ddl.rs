//! The tables smelt creates through Spark: `CREATE TABLE IF NOT EXISTS` with the table
//! properties a flow asks for (change feed, deletion vectors), and a property turned on for
//! a table that exists.

use crate::sql::ident;

/// Table property `property` turned on for an existing table (deletion vectors for
/// `write_mode: merge_on_read`, the change feed of a table a flow now reads).
pub(crate) fn turn_on(table: &str, property: &str) -> String {
    format!("ALTER TABLE {table} SET TBLPROPERTIES ('{property}' = 'true')")
}

/// `CREATE TABLE IF NOT EXISTS` of a Delta table, with the change feed on where `feed`, as
/// embedded creates silver, tombstone and rejects tables (of an Iceberg table, `table`
/// named in its catalog).
pub(crate) fn create_table(table: &str, columns: &[(String, String, bool)], feed: bool) -> String {
    create_table_with(table, columns, false, feed)
}

/// The table property that turns a Delta table's change feed on.
pub(crate) const CHANGE_FEED: &str = "delta.enableChangeDataFeed";

/// The table property that makes Delta mark replaced and deleted rows in deletion vectors
/// instead of rewriting their files (`write_mode: merge_on_read`).
pub(crate) const DELETION_VECTORS: &str = "delta.enableDeletionVectors";

/// [`create_table`], with deletion vectors on where `merge_on_read`.
pub(crate) fn create_table_with(
    table: &str,
    columns: &[(String, String, bool)],
    merge_on_read: bool,
    feed: bool,
) -> String {
    let cols: Vec<String> = columns
        .iter()
        .map(|(n, t, nullable)| {
            format!(
                "{} {t}{}",
                ident(n),
                if *nullable { "" } else { " NOT NULL" }
            )
        })
        .collect();
    if !table.starts_with("delta.") {
        // An Iceberg table of a catalog, as the embedded engine creates one: format
        // version 2, unpartitioned, copy-on-write.
        return format!(
            "CREATE TABLE IF NOT EXISTS {table} ({}) USING iceberg TBLPROPERTIES ('format-version' = '2')",
            cols.join(", ")
        );
    }
    let mut properties = Vec::new();
    if feed {
        properties.push(format!("'{CHANGE_FEED}' = 'true'"));
    }
    if merge_on_read {
        properties.push(format!("'{DELETION_VECTORS}' = 'true'"));
    }
    let properties = match properties.is_empty() {
        true => String::new(),
        false => format!(" TBLPROPERTIES ({})", properties.join(", ")),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {table} ({}) USING DELTA{properties}",
        cols.join(", ")
    )
}
