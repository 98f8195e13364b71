//! Spark SQL text: literals and names as smelt inlines them into the statements it sends.
//! Values are never passed as SQL parameters: Spark 4.1 refuses parameterized SQL whenever a
//! parser extension such as Delta's is installed (SPARK-59672, DESIGN §10).

use smelt_spec::ColumnType;

/// `text` as a Spark SQL string literal: single-quoted, with backslash escapes for the quote,
/// the backslash itself and the control characters (Spark's parser reads `\'`, `\\`, `\n`,
/// `\t`, `\r`, `\b`, `\0`, `\Z`, `\%`, `\_` and `\uXXXX`; see `ParserUtils.unescapeSQLString`).
pub fn string_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Spark substitutes `${…}` (`${env:…}`, `${spark:…}`) in the SQL text before it
            // parses it: a dollar sign never reaches it as one.
            '$' => out.push_str("\\u0024"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `name` as a Spark identifier: backquoted, a backquote doubled.
pub fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// The path-based Delta table at `location`: ``delta.`<location>` ``.
pub fn delta_path(location: &str) -> String {
    format!("delta.{}", ident(location))
}

/// `table` in Spark SQL: ``​`catalog`.`namespace`.`table`​``.
pub fn table_sql(table: &smelt_spec::TableName) -> String {
    format!(
        "{}.{}.{}",
        ident(table.catalog.as_deref().unwrap_or_default()),
        ident(&table.schema),
        ident(&table.table)
    )
}

/// `SET key=value`, the value backquoted (Spark takes it verbatim; a backquote inside is
/// doubled).
pub(crate) fn set(key: &str, value: &str) -> String {
    format!("SET {key}=`{}`", value.replace('`', "``"))
}

/// `RESET key`.
pub(crate) fn reset(key: &str) -> String {
    format!("RESET {key}")
}

/// JSON `text` made safe as a backquoted `SET` value: `$` and the backquote as JSON escapes
/// (Spark would substitute `${…}` in the statement's text, and the value is backquoted).
pub(crate) fn settable_json(text: &str) -> String {
    text.replace('$', "\\u0024").replace('`', "\\u0060")
}

/// The Spark SQL type of `ty`.
pub(crate) fn spark_type(ty: ColumnType) -> String {
    match ty {
        ColumnType::String => "STRING".into(),
        ColumnType::Bool => "BOOLEAN".into(),
        ColumnType::Int64 => "BIGINT".into(),
        ColumnType::Int32 => "INT".into(),
        ColumnType::Int16 => "SMALLINT".into(),
        ColumnType::Int8 => "TINYINT".into(),
        ColumnType::Float64 => "DOUBLE".into(),
        ColumnType::Float32 => "FLOAT".into(),
        ColumnType::Decimal(p, s) => format!("DECIMAL({p},{s})"),
        ColumnType::Date => "DATE".into(),
        ColumnType::Timestamp => "TIMESTAMP".into(),
        ColumnType::TimestampNtz => "TIMESTAMP_NTZ".into(),
        ColumnType::Binary => "BINARY".into(),
    }
}

/// `raw` cast to `ty` as Spark's `try_cast` does, and whether that failed.
pub(crate) fn try_cast(raw: &str, ty: ColumnType) -> (String, String) {
    if ty == ColumnType::String {
        return (format!("CAST({raw} AS STRING)"), "false".to_string());
    }
    let typed = format!("try_cast({raw} AS {})", spark_type(ty));
    // Blank: only white space, as Unicode defines it (the embedded engine's `str::trim`).
    let failed = format!(
        "({raw} IS NOT NULL AND NOT (CAST({raw} AS STRING) RLIKE {}) AND {typed} IS NULL)",
        string_literal(r"^\p{IsWhite_Space}*$")
    );
    (typed, failed)
}

/// `text`, a value of type `ty` as Spark renders it, as a literal of that exact type.
pub(crate) fn typed_literal(text: &str, ty: ColumnType) -> String {
    match ty {
        ColumnType::Int64 | ColumnType::Int32 | ColumnType::Int16 | ColumnType::Int8 => {
            format!("CAST({text} AS {})", spark_type(ty))
        }
        ColumnType::String => string_literal(text),
        _ => format!("CAST({} AS {})", string_literal(text), spark_type(ty)),
    }
}

/// An ordering of the rules ([`smelt_rules::order`]) as the keys of Spark's `ORDER BY`.
pub(crate) fn order_by(keys: &[smelt_rules::order::SortKey]) -> String {
    keys.iter()
        .map(|k| match (k.descending, k.nulls_lowest) {
            (true, true) => format!("{} DESC NULLS LAST", k.column),
            (true, false) => format!("{} DESC NULLS FIRST", k.column),
            (false, true) => format!("{} ASC NULLS FIRST", k.column),
            (false, false) => format!("{} ASC NULLS LAST", k.column),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A side table's columns ([`smelt_rules::tables`]) as (name, Spark type, nullable).
pub(crate) fn side_table(columns: &[smelt_rules::tables::Column]) -> Vec<(String, String, bool)> {
    use smelt_rules::tables::Kind;
    columns
        .iter()
        .map(|c| {
            let ty = match c.kind {
                Kind::Text => "STRING",
                Kind::Int => "BIGINT",
                Kind::Timestamp => "TIMESTAMP",
            };
            (c.name.to_string(), ty.to_string(), c.nullable)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_what_spark_unescapes() {
        assert_eq!(string_literal("it's"), r"'it\'s'");
        assert_eq!(string_literal(r"a\b"), r"'a\\b'");
        assert_eq!(string_literal("1\t2\n"), r"'1\t2\n'");
        assert_eq!(string_literal("\u{1}"), r"'\u0001'");
        assert_eq!(string_literal("クラウド"), "'クラウド'");
        assert_eq!(string_literal("${env:HOME}"), r"'\u0024{env:HOME}'");
        assert_eq!(ident("a`b"), "`a``b`");
        assert_eq!(delta_path("/lake/raw/t"), "delta.`/lake/raw/t`");
    }
}
