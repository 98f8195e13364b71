//! The Spark SQL of a replace_where run: the batch cast and cached (`smelt_replace`), its
//! bounds, its counts against the predicate, the row outside it, the first value that does
//! not cast, and the `INSERT INTO … REPLACE WHERE`.

use super::VIEW;
use crate::flow::tables::{Column, first_failed, typed};
use crate::sql::ident;
use smelt_spec::ColumnType;

/// `smelt_replace`: each row of `source` (a table at a version) as the target's columns
/// (named as in the target), and whether each cast failed (`__f<i>`).
pub(super) fn cache(source: &str, columns: &[Column]) -> String {
    let mut cols = Vec::new();
    for (i, c) in columns.iter().enumerate() {
        let (value, failed) = typed(c);
        cols.push(format!("{value} AS {}", ident(&c.name)));
        cols.push(format!("{failed} AS __f{i}"));
    }
    format!(
        "CACHE TABLE {VIEW} AS\nSELECT {}\nFROM {source} r",
        cols.join(",\n  ")
    )
}

/// The least or greatest value of each of `bounds` (column, max) in the batch, as text
/// (`b<i>`): Spark's own rendering, which its cast reads back exactly.
pub(super) fn bounds(bounds: &[(&Column, bool)]) -> String {
    let cols: Vec<String> = bounds
        .iter()
        .enumerate()
        .map(|(i, (c, max))| {
            let f = if *max { "max" } else { "min" };
            format!("CAST({f}({}) AS STRING) AS b{i}", ident(&c.name))
        })
        .collect();
    format!("SELECT {} FROM {VIEW}", cols.join(", "))
}

/// Whether a batch row passes the predicate (NULL does not).
fn passes(predicate: &str) -> String {
    format!("coalesce(({predicate}), false)")
}

/// The batch's counts: rows, rows outside `predicate`, and per cast column the values that
/// do not cast (`f<i>`).
pub(super) fn counts(columns: &[Column], predicate: &str) -> String {
    let mut cols = vec![
        "count(*) AS batch".to_string(),
        format!("count_if(NOT {}) AS outside", passes(predicate)),
    ];
    for (i, _) in columns.iter().enumerate().filter(|(_, c)| c.cast) {
        cols.push(format!("count_if(__f{i}) AS f{i}"));
    }
    format!("SELECT {} FROM {VIEW}", cols.join(", "))
}

/// The target rows `predicate` matches: those the write replaces.
pub(super) fn matched(target: &str, predicate: &str) -> String {
    format!(
        "SELECT count(*) AS matched FROM {target} WHERE {}",
        passes(predicate)
    )
}

/// A batch row outside `predicate`, its values as text (`v<i>`) as the embedded engine
/// prints them (a `TIMESTAMP_NTZ` with a `T`: `2026-07-20T01:00:00`).
pub(super) fn outside(columns: &[Column], predicate: &str) -> String {
    let cols: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let text = format!("CAST({} AS STRING)", ident(&c.name));
            match c.ty {
                ColumnType::TimestampNtz => format!("replace({text}, ' ', 'T') AS v{i}"),
                _ => format!("{text} AS v{i}"),
            }
        })
        .collect();
    format!(
        "SELECT {} FROM {VIEW} WHERE NOT {} LIMIT 1",
        cols.join(", "),
        passes(predicate)
    )
}

/// A source row with a value that does not cast: the first such column (`i`) and its raw
/// value.
pub(super) fn first_failure(source: &str, columns: &[Column]) -> String {
    let (which, any) = first_failed(columns);
    format!("SELECT w.i, w.raw FROM (SELECT {which} AS w FROM {source} r WHERE {any}) LIMIT 1")
}

/// The batch written over the target rows `predicate` matches, in one commit.
pub(super) fn replace(target: &str, columns: &[Column], predicate: &str) -> String {
    let cols: Vec<String> = columns.iter().map(|c| ident(&c.name)).collect();
    format!(
        "INSERT INTO {target} REPLACE WHERE {predicate}\nSELECT {} FROM {VIEW}",
        cols.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use smelt_spec::ColumnType;

    use super::*;
    use crate::sql::typed_literal as literal;

    fn column(name: &str, ty: ColumnType, cast: bool) -> Column {
        Column {
            name: name.into(),
            ty,
            nullable: true,
            cast,
        }
    }

    #[test]
    fn bounds_come_back_as_literals_of_their_exact_type() {
        assert_eq!(literal("42", ColumnType::Int64), "CAST(42 AS BIGINT)");
        assert_eq!(literal("it's", ColumnType::String), r"'it\'s'");
        assert_eq!(
            literal("2026-07-20 01:00:00", ColumnType::TimestampNtz),
            "CAST('2026-07-20 01:00:00' AS TIMESTAMP_NTZ)"
        );
        assert_eq!(
            literal("500.00", ColumnType::Decimal(18, 2)),
            "CAST('500.00' AS DECIMAL(18,2))"
        );
        let d = column("d", ColumnType::Date, false);
        assert_eq!(
            bounds(&[(&d, false), (&d, true)]),
            format!(
                "SELECT CAST(min(`d`) AS STRING) AS b0, CAST(max(`d`) AS STRING) AS b1 FROM {VIEW}"
            )
        );
    }

    #[test]
    fn the_batch_is_cast_checked_and_written_under_the_predicate() {
        let cols = [
            column("id", ColumnType::Int64, false),
            column("amt", ColumnType::Decimal(18, 2), true),
        ];
        let sql = cache("delta.`/s` VERSION AS OF 3", &cols);
        assert!(sql.contains("r.`id` AS `id`"), "{sql}");
        assert!(
            sql.contains("try_cast(r.`amt` AS DECIMAL(18,2)) AS `amt`"),
            "{sql}"
        );
        assert!(sql.ends_with("FROM delta.`/s` VERSION AS OF 3 r"), "{sql}");
        let sql = counts(&cols, "id > 1");
        assert!(
            sql.contains("count_if(NOT coalesce((id > 1), false)) AS outside"),
            "{sql}"
        );
        assert!(sql.contains("count_if(__f1) AS f1"), "{sql}");
        assert!(!sql.contains("__f0"), "{sql}");
        assert_eq!(
            replace("delta.`/t`", &cols, "id > 1"),
            format!("INSERT INTO delta.`/t` REPLACE WHERE id > 1\nSELECT `id`, `amt` FROM {VIEW}")
        );
        let sql = first_failure("delta.`/s` VERSION AS OF 3", &cols);
        assert!(sql.contains("WHEN (r.`amt` IS NOT NULL"), "{sql}");
        assert!(sql.contains("'i', 1,"), "{sql}");
    }
}
