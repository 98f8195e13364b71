//! Table options of a DDL file: the change feed (in the `CREATE TABLE`'s options, or an
//! `ALTER TABLE … SET OPTIONS` after it, as seed 000 writes it), and the options smelt does not
//! carry out, refused by name.

use std::path::Path;

use sqlparser::ast::{
    AlterTableOperation, CreateTable, CreateTableOptions, Spanned, SqlOption, Statement,
};

use super::{TableName, span_line};
use crate::error::SpecError;

/// Reports the table options smelt does not carry out.
pub(super) fn refuse_options(c: &CreateTable, file: &Path, errors: &mut Vec<SpecError>) {
    let line = Some(span_line(c.name.span().start.line));
    for (key, value) in options_of(&c.table_options) {
        if !understood_option(&key, &value) {
            let option = if value.is_empty() {
                key.clone()
            } else {
                format!("{key} = {value}")
            };
            errors.push(
                SpecError::new(file, "", format!("`{}`: table option `{option}` is not supported", c.name))
                    .at(line)
                    .hint("smelt understands enable_change_history / delta.enableChangeDataFeed (true or false) and delta.feature.timestampNtz = 'supported'; drop the others"),
            );
        }
    }
}

/// What table options say of the change feed: on with BigQuery
/// `enable_change_history = TRUE` or Delta `delta.enableChangeDataFeed = true`, off with
/// `false`, `None` when they do not say (the last option that does wins).
pub(super) fn change_feed_in(options: &CreateTableOptions) -> Option<bool> {
    let list: &[SqlOption] = match options {
        CreateTableOptions::None => &[],
        CreateTableOptions::With(o)
        | CreateTableOptions::Options(o)
        | CreateTableOptions::Plain(o)
        | CreateTableOptions::TableProperties(o) => o,
    };
    change_feed_option(list)
}

/// What `key = value` options say of the change feed (see [`change_feed_in`]).
pub fn change_feed_option(options: &[SqlOption]) -> Option<bool> {
    key_values(options)
        .iter()
        .rev()
        .find(|(k, _)| is_change_feed_key(k))
        .map(|(_, v)| v == "true")
}

/// Whether smelt carries out the table option `key = value` (both lower case, unquoted).
pub fn understood_option(key: &str, value: &str) -> bool {
    (is_change_feed_key(key) && matches!(value, "true" | "false"))
        // Implied by a TIMESTAMP_NTZ column, which delta-rs turns on itself.
        || (key == "delta.feature.timestampntz" && value == "supported")
}

fn is_change_feed_key(key: &str) -> bool {
    matches!(key, "enable_change_history" | "delta.enablechangedatafeed")
}

/// The `key = value` pairs of a CREATE TABLE's options (lower case, unquoted).
fn options_of(options: &CreateTableOptions) -> Vec<(String, String)> {
    match options {
        CreateTableOptions::None => Vec::new(),
        CreateTableOptions::With(o)
        | CreateTableOptions::Options(o)
        | CreateTableOptions::Plain(o)
        | CreateTableOptions::TableProperties(o) => key_values(o),
    }
}

/// `key = value` pairs of options (lower case, unquoted); an option without `=` has an
/// empty value.
pub fn key_values(options: &[SqlOption]) -> Vec<(String, String)> {
    let unquote = |s: &str| {
        s.trim()
            .trim_matches(|c| c == '\'' || c == '"' || c == '`')
            .to_ascii_lowercase()
    };
    options
        .iter()
        .map(|o| match o {
            SqlOption::KeyValue { key, value } => {
                (unquote(&key.to_string()), unquote(&value.to_string()))
            }
            // COMMENT '…' and the like: named as written.
            other => (other.to_string(), String::new()),
        })
        .collect()
}

/// What an `ALTER TABLE <table> SET OPTIONS / SET TBLPROPERTIES` among `stmts` says of
/// `table`'s change feed (the last one that does), as seed 000's silver DDL turns it on.
pub(super) fn change_feed_altered(stmts: &[Statement], table: &TableName) -> Option<bool> {
    let mut feed = None;
    for s in stmts {
        let Statement::AlterTable(alter) = s else {
            continue;
        };
        if TableName::from_object_name(&alter.name).as_ref() != Some(table) {
            continue;
        }
        for op in &alter.operations {
            if let AlterTableOperation::SetTblProperties { table_properties } = op
                && let Some(on) = change_feed_option(table_properties)
            {
                feed = Some(on);
            }
        }
    }
    feed
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::parse_table;

    #[test]
    fn change_feed_options_in_both_spellings() {
        let bq = parse_table(
            "CREATE TABLE a.b (x STRING) OPTIONS (enable_change_history = TRUE)",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(bq.change_feed, Some(true));
        let dbx = parse_table(
            "CREATE TABLE a.b (x STRING) TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(dbx.change_feed, Some(true));
        let dotted = parse_table(
            "CREATE TABLE a.b (x STRING) TBLPROPERTIES (delta.enableChangeDataFeed = true)",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(dotted.change_feed, Some(true));
        let off = parse_table(
            "CREATE TABLE a.b (x STRING) OPTIONS (enable_change_history = FALSE)",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(off.change_feed, Some(false));
        // Seed 000's silver DDL turns the feed on in a statement of its own.
        let altered = parse_table(
            "CREATE TABLE `a.b` (x STRING);\nALTER TABLE `a.b`\nSET OPTIONS (\nenable_change_history = TRUE\n);",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(altered.change_feed, Some(true));
        let other = parse_table(
            "CREATE TABLE a.b (x STRING); ALTER TABLE a.c SET OPTIONS (enable_change_history = TRUE)",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(other.change_feed, None, "another table's option");
    }
}
