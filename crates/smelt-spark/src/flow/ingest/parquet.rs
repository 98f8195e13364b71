//! Parquet files on Spark, as the embedded reader loads them into all-text bronze: each
//! file's columns read in its own types (one scan per file, so that a row knows its file
//! and the files need not share a schema), every value turned into the text arrow-rs'
//! cast to UTF-8 gives it — the embedded engine's — by Spark's own functions: integers,
//! booleans, decimals and dates as Spark casts them (the same text), doubles and floats in
//! their shortest round-trip digits laid out as Rust's `ryu` lays them out (`1e20`,
//! `0.0001`, `1.0`), timestamps as RFC 3339 (`2024-01-02T03:04:05.120` without a zone,
//! `…Z` in UTC with one), bytes as text when they are UTF-8 else as hex, and structs, lists
//! and maps as Arrow displays them (`{a: 1, b: [x, y]}`).

use arrow::datatypes::{DataType, Field, Schema};
use smelt_engine::{EngineError, Result};

use super::sql::{FILES, Input, LINES, META, Own, Plan, ROWS, partition_columns, rescued_entries};
use crate::sql::{ident, string_literal};

/// One file's scan: its index, the relation reading it, its columns.
pub(crate) struct Scan<'a> {
    pub(crate) index: usize,
    pub(crate) relation: String,
    pub(crate) schema: &'a Schema,
}

/// The text of value `x` of type `dt` as the embedded engine writes it into bronze, or the
/// type Spark's reader gave that the engine has no text for. `depth` names the lambda
/// variables of nested values apart; `top`: a column's own value (bytes that are UTF-8 are
/// text there, hex inside a nested value, as Arrow displays them).
fn text(x: &str, dt: &DataType, depth: usize, top: bool) -> std::result::Result<String, String> {
    Ok(match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => x.to_string(),
        DataType::Null => "CAST(NULL AS STRING)".into(),
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Decimal128(..)
        | DataType::Decimal256(..)
        | DataType::Date32 => format!("CAST({x} AS STRING)"),
        DataType::Float64 => float_text(x, false),
        DataType::Float32 => float_text(x, true),
        DataType::Timestamp(_, None) => format!(
            "concat(date_format({x}, \"yyyy-MM-dd'T'HH:mm:ss\"), {})",
            fraction(&format!("CAST(date_format({x}, 'SSSSSS') AS INT)"))
        ),
        DataType::Timestamp(_, Some(_)) => utc_text(x),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView if top => format!(
            "CASE WHEN is_valid_utf8({x}) THEN CAST({x} AS STRING) ELSE lower(hex({x})) END"
        ),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            format!("lower(hex({x}))")
        }
        DataType::Struct(fields) => {
            let parts: Vec<String> = fields
                .iter()
                .map(|f| {
                    let name = string_literal(&format!("{}: ", f.name()));
                    let value = nested(&format!("{x}.{}", ident(f.name())), f, depth)?;
                    Ok(format!("{name}, {value}"))
                })
                .collect::<std::result::Result<_, String>>()?;
            format!("concat('{{', {}, '}}')", parts.join(", ', ', "))
        }
        DataType::List(f) | DataType::LargeList(f) => {
            let v = format!("__x{depth}");
            let item = nested(&v, f, depth + 1)?;
            format!("concat('[', array_join(transform({x}, {v} -> {item}), ', '), ']')")
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(dt.to_string());
            };
            let e = format!("__e{depth}");
            let key = nested(&format!("{e}.key"), &kv[0], depth + 1)?;
            let value = nested(&format!("{e}.value"), &kv[1], depth + 1)?;
            format!(
                "concat('{{', array_join(transform(map_entries({x}), {e} -> concat({key}, ': ', {value})), ', '), '}}')"
            )
        }
        other => return Err(other.to_string()),
    })
}

/// A nested value's text: NULL shows as nothing, as Arrow displays it.
fn nested(x: &str, f: &Field, depth: usize) -> std::result::Result<String, String> {
    Ok(format!(
        "coalesce({}, '')",
        text(x, f.data_type(), depth + 1, false)?
    ))
}

/// The fraction of a second `micros` (0–999,999) as chrono's `AutoSi` writes it: none, or
/// 3 or 6 digits.
fn fraction(micros: &str) -> String {
    format!(
        "CASE WHEN {micros} = 0 THEN '' WHEN {micros} % 1000 = 0 THEN concat('.', lpad(CAST({micros} DIV 1000 AS STRING), 3, '0')) \
         ELSE concat('.', lpad(CAST({micros} AS STRING), 6, '0')) END"
    )
}

/// An instant's text in UTC (`2024-01-02T03:04:05Z`), computed from its microseconds so
/// that the session's time zone plays no part.
fn utc_text(x: &str) -> String {
    const DAY: i64 = 86_400_000_000;
    let us = format!("unix_micros({x})");
    let of_day = format!("pmod({us}, {DAY})");
    let two = |part: String| format!("lpad(CAST({part} AS STRING), 2, '0')");
    format!(
        "concat(CAST(date_from_unix_date(CAST(({us} - {of_day}) DIV {DAY} AS INT)) AS STRING), 'T', {}, ':', {}, ':', {}, {}, 'Z')",
        two(format!("{of_day} DIV 3600000000")),
        two(format!("{of_day} DIV 60000000 % 60")),
        two(format!("{of_day} DIV 1000000 % 60")),
        fraction(&format!("{of_day} % 1000000")),
    )
}

/// A double's (a float's, `single`) text as `ryu` writes it: the fewest significant
/// digits that read back as the same number — Java's digits of the value rounded half to
/// even to 1, 2, … digits until one does (`ryu`'s choice: the nearest, ties to even) —
/// laid out plainly between 1e-5 and 1e16 (1e-6 and 1e13 for floats), else as `1.5e20`;
/// `NaN`, `inf`, `-inf`, `0.0` and `-0.0` as `ryu` spells them.
fn float_text(x: &str, single: bool) -> String {
    // Java's digits fit in WIDTH (17, or 18 where Java 17's `Double.toString` is long).
    const WIDTH: usize = 20;
    let (ty, digits, high, low) = match single {
        true => ("FLOAT", 9, 13, -6),
        false => ("DOUBLE", 17, 16, -5),
    };
    // `__j`: Java's text of the value; `__a`: its digits (`m`) and where the point goes
    // (`k`: the value is 0.m × 10^k); `__b`: the same without leading zeros (`d`).
    let java = format!("CAST(CAST({x} AS DOUBLE) AS STRING)");
    let parts = "named_struct('m', regexp_replace(regexp_extract(__j, '^-?([0-9.]+)', 1), '[.]', ''),                  'k', length(regexp_extract(__j, '^-?([0-9]*)', 1)) + coalesce(try_cast(regexp_extract(__j, 'E(-?[0-9]+)$', 1) AS INT), 0))";
    let bare = "named_struct('d', regexp_extract(__a.m, '^0*([0-9]*)$', 1), 'k', __a.k - length(regexp_extract(__a.m, '^(0*)', 1)))";
    let tries: Vec<String> = (1..=digits)
        .map(|p| {
            let rounded = format!(
                "CAST(bround(CAST(rpad(__b.d, {WIDTH}, '0') AS DECIMAL({WIDTH},0)), {}) AS STRING)",
                p as i64 - WIDTH as i64
            );
            let candidate = format!(
                "named_struct('d', regexp_replace(substr({rounded}, 1, {p}), '0+$', ''), 'k', __b.k + length({rounded}) - {WIDTH})"
            );
            format!(
                "transform(array({candidate}), __c -> IF(try_cast(concat('0.', __c.d, 'e', __c.k) AS {ty}) = abs({x}), __c, NULL))[0]"
            )
        })
        .collect();
    let shortest = format!("coalesce({})", tries.join(", "));
    let (d, k) = ("__v.d", "__v.k");
    let layout = format!(
        "CASE WHEN {k} >= length({d}) AND {k} <= {high} THEN concat({d}, repeat('0', {k} - length({d})), '.0') \
         WHEN {k} > 0 AND {k} <= {high} THEN concat(substr({d}, 1, {k}), '.', substr({d}, {k} + 1)) \
         WHEN {k} > {low} AND {k} <= 0 THEN concat('0.', repeat('0', -{k}), {d}) \
         WHEN length({d}) = 1 THEN concat({d}, 'e', {k} - 1) \
         ELSE concat(substr({d}, 1, 1), '.', substr({d}, 2), 'e', {k} - 1) END"
    );
    let bind = |value: &str, var: &str, body: &str| {
        format!("transform(array({value}), {var} -> {body})[0]")
    };
    let body = bind(
        &java,
        "__j",
        &bind(
            parts,
            "__a",
            &bind(bare, "__b", &bind(&shortest, "__v", &layout)),
        ),
    );
    format!(
        "CASE WHEN isnan({x}) THEN 'NaN' WHEN {x} = CAST('Infinity' AS {ty}) THEN 'inf' \
         WHEN {x} = CAST('-Infinity' AS {ty}) THEN '-inf' \
         WHEN {x} = 0 THEN IF(startswith(CAST({x} AS STRING), '-'), '-0.0', '0.0') \
         ELSE concat(IF({x} < 0, '-', ''), {body}) END"
    )
}

/// The select of one file's rows: its index, row number (from 1) and values as text by
/// column name (`__pm`), or the column whose type has no text here.
fn scan_select(scan: &Scan<'_>) -> std::result::Result<String, (String, String)> {
    let mut entries = Vec::new();
    for f in scan.schema.fields() {
        let value =
            text(&ident(f.name()), f.data_type(), 0, true).map_err(|ty| (f.name().clone(), ty))?;
        entries.push(format!("{}, {value}", string_literal(f.name())));
    }
    let map = match entries.is_empty() {
        true => "CAST(map() AS MAP<STRING, STRING>)".to_string(),
        false => format!("map({})", entries.join(", ")),
    };
    Ok(format!(
        "SELECT {} AS __i, _metadata.row_index + 1 AS __line, {map} AS __pm FROM {}",
        scan.index, scan.relation
    ))
}

/// The cache of the rows of the files `scans`, their values as text; `url` names a file in
/// errors.
pub(crate) fn lines_cache(scans: &[Scan<'_>], url: impl Fn(usize) -> String) -> Result<String> {
    let selects: Vec<String> = scans
        .iter()
        .map(|scan| {
            scan_select(scan).map_err(|(column, ty)| {
                EngineError::user(
                    format!(
                        "{}: column `{column}` is of type {ty}, which the Spark engine does not turn into text",
                        url(scan.index)
                    ),
                    "run this flow with `--engine embedded`; nothing was committed",
                )
            })
        })
        .collect::<Result<_>>()?;
    Ok(format!(
        "CACHE TABLE {LINES} AS\n\
         SELECT __i, __line, false AS __first, false AS __open, __pm FROM (\n{})",
        selects.join("\nUNION ALL ")
    ))
}

/// The first of the files at `files` (the files view's) whose size or time is not what
/// the listing said (`i`): one written while it was read.
pub(crate) fn changed_query(files: &str) -> String {
    format!(
        "SELECT min(v.__i) AS i FROM {files} b JOIN {FILES} v ON b.path = v.__path \
         WHERE v.__size <> b.length OR v.__mtime <> unix_micros(b.modificationTime)"
    )
}

/// The rows view: every row with its file's URL and time and its rescued data as JSON
/// (a Parquet row is never malformed).
pub(crate) fn rows_view(plan: &Plan, own: Own<'_>) -> String {
    let rescued = rescued_entries(plan, Input::Parquet);
    let row = match own.file_row {
        Some(_) => ", l.__line AS __row",
        None => "",
    };
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {ROWS} AS\n\
         SELECT *, CASE WHEN size(__e) > 0 THEN to_json(map_from_entries(array_sort(__e))) END AS __rescued\n\
         FROM (SELECT *, {rescued} AS __e\n\
         FROM (SELECT l.__i, l.__line, l.__open, l.__pm, CAST(NULL AS STRING) AS __raw, CAST(NULL AS STRING) AS __reason,\n\
           v.__url, v.__mtime, v.__g{}{row}\n\
         FROM {LINES} l JOIN {META} v ON l.__i = v.__i))",
        partition_columns(plan),
    )
}

/// Whether the Spark error `message` is its reader refusing a Parquet type (nanosecond
/// timestamps, which Spark reads only as numbers).
pub(crate) fn illegal_type(message: &str) -> Option<String> {
    let at = message.find("Illegal Parquet type: ")?;
    let rest = &message[at + "Illegal Parquet type: ".len()..];
    let end = rest
        .find(". SQLSTATE")
        .or_else(|| rest.find('\n'))
        .unwrap_or(rest.len());
    Some(rest[..end].trim_end_matches('.').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Fields, TimeUnit};
    use std::sync::Arc;

    #[test]
    fn scalar_types_have_texts_and_others_are_named() {
        assert_eq!(text("`a`", &DataType::Utf8, 0, true).unwrap(), "`a`");
        assert_eq!(
            text("`a`", &DataType::Decimal128(20, 8), 0, true).unwrap(),
            "CAST(`a` AS STRING)"
        );
        let ntz = text(
            "`t`",
            &DataType::Timestamp(TimeUnit::Microsecond, None),
            0,
            true,
        )
        .unwrap();
        assert!(
            ntz.starts_with("concat(date_format(`t`, \"yyyy-MM-dd'T'HH:mm:ss\")"),
            "{ntz}"
        );
        let utc = text(
            "`t`",
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            0,
            true,
        )
        .unwrap();
        assert!(
            utc.contains("unix_micros(`t`)") && utc.ends_with("'Z')"),
            "{utc}"
        );
        assert_eq!(
            text("`x`", &DataType::Time64(TimeUnit::Microsecond), 0, true).unwrap_err(),
            "Time64(µs)"
        );
    }

    #[test]
    fn floats_try_each_precision_and_lay_out_as_ryu() {
        let d = float_text("`d`", false);
        assert!(d.contains("AS DECIMAL(20,0)), -19)"), "{d}");
        assert!(
            d.contains("AS DECIMAL(20,0)), -3)") && !d.contains("), -2)"),
            "{d}"
        );
        assert!(d.contains("AS DOUBLE) = abs(`d`)"), "{d}");
        assert!(d.contains("__v.k <= 16") && d.contains("__v.k > -5"), "{d}");
        let f = float_text("`f`", true);
        assert!(f.contains("), -11)") && !f.contains("), -10)"), "{f}");
        assert!(
            f.contains("AS FLOAT) = abs(`f`)") && f.contains("__v.k > -6"),
            "{f}"
        );
    }

    #[test]
    fn nested_values_display_as_arrow_and_name_their_lambdas_apart() {
        let inner = Field::new(
            "item",
            DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
            true,
        );
        let dt = DataType::Struct(Fields::from(vec![
            Field::new("a", DataType::Binary, true),
            Field::new("b", DataType::List(Arc::new(inner)), true),
        ]));
        let t = text("`s`", &dt, 0, true).unwrap();
        assert!(
            t.starts_with("concat('{', 'a: ', coalesce(lower(hex(`s`.`a`)), '')"),
            "{t}"
        );
        assert!(t.contains("transform(`s`.`b`, __x1 ->"), "{t}");
        assert!(t.contains("transform(__x1, __x3 ->"), "{t}");
    }

    #[test]
    fn a_file_of_a_type_not_turned_into_text_is_refused_by_column() {
        let schema = Schema::new(vec![Field::new(
            "t",
            DataType::Time32(TimeUnit::Millisecond),
            true,
        )]);
        let scans = [Scan {
            index: 0,
            relation: "parquet.`/l/a.parquet`".into(),
            schema: &schema,
        }];
        let err = lines_cache(&scans, |_| "file:///l/a.parquet".into())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("file:///l/a.parquet: column `t` is of type Time32(ms)"),
            "{err}"
        );
        let empty = Schema::empty();
        let sql = lines_cache(
            &[Scan {
                index: 3,
                relation: "parquet.`/l/b`".into(),
                schema: &empty,
            }],
            |_| String::new(),
        )
        .unwrap();
        assert!(sql.contains("SELECT 3 AS __i, _metadata.row_index + 1 AS __line, CAST(map() AS MAP<STRING, STRING>) AS __pm FROM parquet.`/l/b`"), "{sql}");
    }

    #[test]
    fn nanosecond_timestamps_are_named_from_sparks_message() {
        let m = "[PARQUET_TYPE_ILLEGAL] Illegal Parquet type: INT64 (TIMESTAMP(NANOS,false)). SQLSTATE: 42846\n\nJVM";
        assert_eq!(illegal_type(m).unwrap(), "INT64 (TIMESTAMP(NANOS,false))");
        assert!(illegal_type("other").is_none());
    }
}
