//! What `smelt sql` refuses, by name and with the alternative: statements it does not run,
//! spellings sqlparser cannot parse (Databricks' `CREATE CATALOG` / `CREATE VOLUME`), and
//! Iceberg's metadata tables.

use deltalake::datafusion::sql::sqlparser::ast::Statement;
use deltalake::datafusion::sql::sqlparser::dialect::GenericDialect;
use deltalake::datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::Error;

/// What the supported statements are, for a hint.
const SUPPORTED: &str = "supported: SELECT, CREATE TABLE, ALTER TABLE, INSERT INTO, INSERT OVERWRITE, UPDATE, DELETE, MERGE, TRUNCATE TABLE, CREATE SCHEMA, SHOW TBLPROPERTIES, DESCRIBE [DETAIL | HISTORY], DECLARE, SET (docs/sql.md)";

/// The refusal of a statement `smelt sql` does not run.
pub(super) fn statement(statement: &Statement) -> Error {
    let text = statement.to_string();
    let words: Vec<String> = text
        .split_whitespace()
        .take(2)
        .map(str::to_ascii_uppercase)
        .collect();
    let head = words.join(" ");
    let (what, hint) = match words.first().map(String::as_str) {
        Some("EXECUTE") => (
            "EXECUTE IMMEDIATE",
            "smelt sql runs no dynamic SQL: write the statement itself; files are exported by an export flow (docs/pipeline.md), not EXPORT DATA",
        ),
        Some("EXPORT") => (
            "EXPORT DATA",
            "files are exported by an export flow (docs/pipeline.md)",
        ),
        Some("CALL") => (
            "CALL",
            "smelt runs no procedures (Iceberg's create_changelog_view among them): read a table's changes with table_changes('schema.table', start) or CHANGES(TABLE schema.table, start_ts, end_ts)",
        ),
        Some("DESCRIBE" | "DESC" | "EXPLAIN") => (
            "this DESCRIBE / EXPLAIN",
            "write DESCRIBE t (its columns), DESCRIBE DETAIL t or DESCRIBE HISTORY t",
        ),
        _ => {
            return Error::user(
                format!("`{head} …` statements are not supported by smelt sql"),
                SUPPORTED,
            );
        }
    };
    Error::user(format!("{what} is not supported by smelt sql"), hint)
}

/// For a script that does not parse: the first statement (1-based) that is one `smelt sql`
/// refuses by name, with its refusal.
pub(super) fn unparsed(sql: &str) -> Option<(usize, Error)> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize().ok()?;
    let mut statement = 1;
    let mut words: Vec<String> = Vec::new();
    for t in tokens {
        match t {
            Token::SemiColon => {
                if let Some(e) = refused(&words) {
                    return Some((statement, e));
                }
                statement += 1;
                words.clear();
            }
            Token::Word(w) if words.len() < 8 => words.push(w.value.to_ascii_uppercase()),
            Token::Whitespace(_) => {}
            _ if words.len() < 8 => words.push(String::new()),
            _ => {}
        }
    }
    refused(&words).map(|e| (statement, e))
}

/// The refusal of a statement starting with `words`, when smelt names it.
fn refused(words: &[String]) -> Option<Error> {
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (what, hint) = match words.as_slice() {
        ["CREATE", "CATALOG", ..] => (
            "CREATE CATALOG",
            "the lake (`--lake`, or `lake:` in the pipeline) is smelt's catalog; make its schemas with CREATE SCHEMA name",
        ),
        ["CREATE", "VOLUME", ..] => (
            "CREATE VOLUME",
            "files come into the lake through an ingest flow reading their folder or bucket (docs/pipeline.md)",
        ),
        _ => return None,
    };
    Some(Error::user(
        format!("{what} is not supported by smelt sql"),
        hint,
    ))
}

/// Iceberg's metadata tables (`t.snapshots`, …), which a Delta table does not have.
pub(super) fn metadata_table(name: &str) -> Option<Error> {
    let last = name
        .rsplit('.')
        .next()?
        .trim_matches('`')
        .to_ascii_lowercase();
    let known = [
        "snapshots",
        "history",
        "files",
        "manifests",
        "partitions",
        "entries",
        "refs",
        "metadata_log_entries",
    ];
    known.contains(&last.as_str()).then(|| {
        Error::user(
            format!("`{name}` is an Iceberg metadata table; the lake's tables are Delta tables, which have none"),
            "a Delta table's versions: table_changes('schema.table', 0) lists its changes by `_commit_version`, and `t VERSION AS OF n` reads one",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unparsed_statements_are_found_by_number() {
        let (n, e) = unparsed("SELECT 1; CREATE VOLUME IF NOT EXISTS a.b.c; SELECT 2").unwrap();
        assert_eq!(n, 2);
        assert!(
            e.to_string().contains("CREATE VOLUME is not supported"),
            "{e}"
        );
        assert!(unparsed("SELECT FROM WHERE").is_none());
    }
}
