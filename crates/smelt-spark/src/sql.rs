//! Spark SQL text: literals and names as smelt inlines them into the statements it sends.
//! Values are never passed as SQL parameters: Spark 4.1 refuses parameterized SQL whenever a
//! parser extension such as Delta's is installed (SPARK-59672, DESIGN §10).

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
