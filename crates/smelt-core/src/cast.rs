//! String → typed casts with SAFE_CAST semantics (DESIGN §5).
//!
//! Parsing is Arrow's (`arrow::compute::cast` with `safe = true`); this module adds what
//! the contract needs on top:
//! * surrounding whitespace is trimmed before a typed cast (never for `STRING` targets);
//! * an empty or all-blank string becomes NULL and does not count as a failure;
//! * timestamps without an offset are read in the flow's time zone, then stored as UTC;
//! * every value that was present but could not be cast is reported, by row, so the caller
//!   can count, quarantine or fail.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StringArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::DataType;

use crate::Result;
use crate::dialect::CastDialect;

/// The outcome of casting one column.
#[derive(Debug, Clone)]
pub struct ColumnCast {
    /// The cast values; a failed value is NULL.
    pub array: ArrayRef,
    /// Row numbers (within the input) whose present value could not be cast, ascending.
    pub failed_rows: Vec<usize>,
}

/// Casts `input` to `target`.
///
/// `tz` is the IANA zone or fixed offset that timestamps without an explicit offset are
/// read in (`None` = UTC). A `Timestamp(_, Some(_))` target always comes back labelled
/// `"UTC"`: the instant is what is stored, not the zone it was written in.
pub fn cast_column(input: &ArrayRef, target: &DataType, tz: Option<&str>) -> Result<ColumnCast> {
    cast_column_in(input, target, tz, CastDialect::Lenient)
}

/// [`cast_column`] by `dialect`'s rules (BigQuery's `SAFE_CAST`, Spark's `try_cast`, or
/// smelt's lenient ones; [`crate::dialect`]).
pub fn cast_column_in(
    input: &ArrayRef,
    target: &DataType,
    tz: Option<&str>,
    dialect: CastDialect,
) -> Result<ColumnCast> {
    let is_string = matches!(
        input.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    if is_string
        && input.data_type() != target
        && let Some(array) = crate::dialect::cast_strings(input, target, tz, dialect)?
    {
        let present = normalize_strings(input)?;
        let failed_rows = failed_rows(&present, &array);
        return Ok(ColumnCast { array, failed_rows });
    }
    if input.data_type() == target {
        return Ok(ColumnCast {
            array: Arc::clone(input),
            failed_rows: Vec::new(),
        });
    }
    let options = CastOptions {
        safe: true,
        ..CastOptions::default()
    };
    let is_string = matches!(
        input.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    let present: ArrayRef = if is_string
        && !matches!(
            target,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
        normalize_strings(input)?
    } else {
        Arc::clone(input)
    };

    let array = match target {
        DataType::Boolean if is_string => parse_booleans(&present),
        DataType::Timestamp(unit, Some(_)) => {
            // A fixed offset is cheaper to apply per value than a named zone.
            let zone: Arc<str> = Arc::from(match tz {
                None | Some("UTC") | Some("Z") => "+00:00",
                Some(zone) => zone,
            });
            let local = DataType::Timestamp(*unit, Some(zone));
            let cast = cast_with_options(&present, &local, &options)?;
            // Same instants, labelled UTC.
            cast_with_options(&cast, target, &options)?
        }
        DataType::Timestamp(unit, None) if is_string => {
            // Naive target: parse as naive; strings with an offset are normalised to UTC.
            cast_with_options(&present, &DataType::Timestamp(*unit, None), &options)?
        }
        _ => cast_with_options(&present, target, &options)?,
    };

    let failed_rows = failed_rows(&present, &array);
    Ok(ColumnCast { array, failed_rows })
}

/// Casts many columns, spread over the machine's cores (a scoped thread per core; the
/// columns are independent). Results come back in input order.
pub fn cast_columns(inputs: &[(ArrayRef, DataType)], tz: Option<&str>) -> Result<Vec<ColumnCast>> {
    cast_columns_in(inputs, tz, CastDialect::Lenient)
}

/// [`cast_columns`] by `dialect`'s rules.
pub fn cast_columns_in(
    inputs: &[(ArrayRef, DataType)],
    tz: Option<&str>,
    dialect: CastDialect,
) -> Result<Vec<ColumnCast>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(inputs.len())
        .max(1);
    // Only typed columns cost anything; deal them round-robin so each thread gets a share.
    let typed: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].0.data_type() != &inputs[i].1)
        .collect();
    if threads == 1 || typed.len() < 2 {
        return inputs
            .iter()
            .map(|(a, t)| cast_column_in(a, t, tz, dialect))
            .collect();
    }
    let mut results: Vec<Option<Result<ColumnCast>>> = (0..inputs.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<usize> = typed.iter().copied().skip(t).step_by(threads).collect();
                scope.spawn(move || {
                    mine.into_iter()
                        .map(|i| (i, cast_column_in(&inputs[i].0, &inputs[i].1, tz, dialect)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (i, r) in h.join().expect("cast thread panicked") {
                results[i] = Some(r);
            }
        }
    });
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|| cast_column_in(&inputs[i].0, &inputs[i].1, tz, dialect)))
        .collect()
}

/// Booleans from (already trimmed) strings: exactly true/false/t/f/1/0/yes/no/y/n in any
/// case. Arrow's own cast also takes prefixes such as `"tr"` and `"of"`, which would turn
/// typos into data, so this one is stricter.
fn parse_booleans(strings: &ArrayRef) -> ArrayRef {
    let strings = strings.as_string::<i32>();
    let out: BooleanArray = strings
        .iter()
        .map(|v| {
            v.and_then(|s| {
                if s.len() > 5 {
                    return None;
                }
                match s.to_ascii_lowercase().as_str() {
                    "true" | "t" | "1" | "yes" | "y" => Some(true),
                    "false" | "f" | "0" | "no" | "n" => Some(false),
                    _ => None,
                }
            })
        })
        .collect();
    Arc::new(out)
}

/// Rows where `before` had a value and `after` is NULL (vectorised over the null bitmaps).
fn failed_rows(before: &ArrayRef, after: &ArrayRef) -> Vec<usize> {
    if after.null_count() == before.null_count() {
        return Vec::new();
    }
    let Some(after_valid) = after.logical_nulls() else {
        return Vec::new();
    };
    let before_valid = match before.logical_nulls() {
        Some(nulls) => nulls.inner().clone(),
        None => BooleanBuffer::new_set(before.len()),
    };
    let lost = &before_valid & &!after_valid.inner();
    lost.set_indices().collect()
}

/// Converts any string array to `Utf8`, trims surrounding whitespace and turns blank
/// strings into NULL. Allocates only when some value needs it.
fn normalize_strings(input: &ArrayRef) -> Result<ArrayRef> {
    let utf8: ArrayRef = if input.data_type() == &DataType::Utf8 {
        Arc::clone(input)
    } else {
        cast_with_options(input, &DataType::Utf8, &CastOptions::default())?
    };
    let strings = utf8.as_string::<i32>();
    let needs_work = strings
        .iter()
        .flatten()
        .any(|s| s.is_empty() || s.trim() != s);
    if !needs_work {
        return Ok(utf8);
    }
    let out: StringArray = strings
        .iter()
        .map(|v| v.map(str::trim).filter(|s| !s.is_empty()))
        .collect();
    Ok(Arc::new(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, Date32Array, Decimal128Array, Float64Array, Int16Array, Int32Array,
        Int64Array, TimestampMicrosecondArray,
    };
    use arrow::datatypes::{DataType, TimeUnit};

    fn strings(values: &[Option<&str>]) -> ArrayRef {
        Arc::new(StringArray::from(values.to_vec()))
    }

    fn utc() -> DataType {
        crate::change::timestamp_utc()
    }

    /// Microseconds since the epoch of a UTC wall-clock time.
    fn micros(s: &str) -> i64 {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
            .unwrap()
            .and_utc()
            .timestamp_micros()
    }

    #[test]
    fn timestamps_accept_every_documented_format() {
        // (input, expected UTC wall clock)
        let cases: &[(&str, &str)] = &[
            ("2026-07-01T09:00:00.000+0000", "2026-07-01 09:00:00"), // Salesforce
            ("2026-07-01T09:00:00Z", "2026-07-01 09:00:00"),
            ("2026-07-01T09:00:00z", "2026-07-01 09:00:00"),
            ("2026-07-01 09:00:00", "2026-07-01 09:00:00"),
            ("2026-07-01T09:00:00", "2026-07-01 09:00:00"),
            ("2026-07-01T18:00:00+09:00", "2026-07-01 09:00:00"),
            ("2026-07-01T18:00:00+0900", "2026-07-01 09:00:00"),
            ("2026-07-01T18:00:00+09", "2026-07-01 09:00:00"),
            ("2026-07-01T04:00:00-05:00", "2026-07-01 09:00:00"),
            ("2026-07-01T09:00:00.1Z", "2026-07-01 09:00:00.1"),
            ("2026-07-01T09:00:00.123456Z", "2026-07-01 09:00:00.123456"),
            (
                "2026-07-01T09:00:00.123456789Z",
                "2026-07-01 09:00:00.123456",
            ),
            ("  2026-07-01T09:00:00Z  ", "2026-07-01 09:00:00"),
            ("2026-07-01", "2026-07-01 00:00:00"),
        ];
        let input = strings(&cases.iter().map(|c| Some(c.0)).collect::<Vec<_>>());
        let out = cast_column(&input, &utc(), None).unwrap();
        assert!(out.failed_rows.is_empty(), "failed: {:?}", out.failed_rows);
        let ts = out
            .array
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(out.array.data_type(), &utc());
        for (i, (raw, want)) in cases.iter().enumerate() {
            assert_eq!(
                ts.value(i),
                micros(&format!(
                    "{want}{}",
                    if want.contains('.') { "" } else { ".0" }
                )),
                "{raw}"
            );
        }
    }

    #[test]
    fn timestamps_without_offset_use_the_flow_zone() {
        let input = strings(&[Some("2026-07-01 18:00:00"), Some("2026-07-01T09:00:00Z")]);
        let out = cast_column(&input, &utc(), Some("Asia/Tokyo")).unwrap();
        let ts = out
            .array
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), micros("2026-07-01 09:00:00.0"));
        assert_eq!(
            ts.value(1),
            micros("2026-07-01 09:00:00.0"),
            "explicit offset wins"
        );
        let fixed = cast_column(&input, &utc(), Some("+09:00")).unwrap();
        assert_eq!(
            fixed
                .array
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .unwrap()
                .value(0),
            micros("2026-07-01 09:00:00.0")
        );
    }

    #[test]
    fn timestamp_failures_are_reported_by_row() {
        let input = strings(&[
            Some("garbage"),
            None,
            Some("2026-13-01T00:00:00Z"),
            Some(""),
            Some("2026-07-01T09:00:00Z"),
            Some("2026-07-01X09:00:00"),
        ]);
        let out = cast_column(&input, &utc(), None).unwrap();
        assert_eq!(out.failed_rows, vec![0, 2, 5]);
        assert!(out.array.is_null(1), "NULL stays NULL");
        assert!(out.array.is_null(3), "blank is NULL, not a failure");
        assert!(out.array.is_valid(4));
    }

    #[test]
    fn booleans() {
        let trues = [
            "true", "TRUE", "True", "t", "T", "1", "yes", "YES", "y", "Y", " true ",
        ];
        let falses = [
            "of", "false", "FALSE", "f", "F", "0", "no", "NO", "n", "N", "'false'",
        ];
        let input = strings(
            &trues
                .iter()
                .chain(falses.iter())
                .map(|s| Some(*s))
                .collect::<Vec<_>>(),
        );
        let out = cast_column(&input, &DataType::Boolean, None).unwrap();
        let b = out.array.as_any().downcast_ref::<BooleanArray>().unwrap();
        for (i, raw) in trues.iter().enumerate() {
            assert!(b.value(i), "{raw}");
        }
        assert_eq!(out.failed_rows.len(), 2);
        for (j, raw) in falses.iter().enumerate() {
            let i = trues.len() + j;
            if *raw == "'false'" || *raw == "of" {
                // Quoted text and prefixes are not booleans: counted failures, never a guess.
                assert!(out.failed_rows.contains(&i), "{raw}");
                assert!(b.is_null(i));
            } else {
                assert!(!b.value(i), "{raw}");
            }
        }
    }

    #[test]
    fn integers() {
        let input = strings(&[
            Some("42"),
            Some(" -7 "),
            Some("1.5"),
            Some("abc"),
            Some("99999999999"),
            None,
        ]);
        let out64 = cast_column(&input, &DataType::Int64, None).unwrap();
        let a = out64.array.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(
            (a.value(0), a.value(1), a.value(4)),
            (42, -7, 99_999_999_999)
        );
        assert_eq!(out64.failed_rows, vec![2, 3]);
        let out32 = cast_column(&input, &DataType::Int32, None).unwrap();
        assert_eq!(out32.failed_rows, vec![2, 3, 4], "overflow is a failure");
        assert_eq!(
            out32
                .array
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap()
                .value(1),
            -7
        );
        let out16 = cast_column(
            &strings(&[Some("40000"), Some("123")]),
            &DataType::Int16,
            None,
        )
        .unwrap();
        assert_eq!(out16.failed_rows, vec![0]);
        assert_eq!(
            out16
                .array
                .as_any()
                .downcast_ref::<Int16Array>()
                .unwrap()
                .value(1),
            123
        );
    }

    #[test]
    fn floats() {
        let input = strings(&[Some("1.5"), Some("-2e3"), Some("x1"), Some(" 3 ")]);
        let out = cast_column(&input, &DataType::Float64, None).unwrap();
        let f = out.array.as_any().downcast_ref::<Float64Array>().unwrap();
        assert_eq!((f.value(0), f.value(1), f.value(3)), (1.5, -2000.0, 3.0));
        assert_eq!(out.failed_rows, vec![2]);
    }

    #[test]
    fn decimals_round_half_away_from_zero_and_fail_on_overflow() {
        let input = strings(&[
            Some("12.345"),
            Some("12.344"),
            Some("-12.345"),
            Some("0.005"),
            Some("1234567890.12"),
            Some("1e3"),
            Some("12"),
            Some("abc"),
        ]);
        let out = cast_column(&input, &DataType::Decimal128(12, 2), None).unwrap();
        let d = out
            .array
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .unwrap();
        assert_eq!(d.value(0), 1235);
        assert_eq!(d.value(1), 1234);
        assert_eq!(d.value(2), -1235);
        assert_eq!(d.value(3), 1);
        assert_eq!(d.value(6), 1200);
        // 1234567890.12 needs 12 digits before rounding plus 2 = 12 precision: fits exactly.
        assert_eq!(d.value(4), 123_456_789_012);
        assert_eq!(out.failed_rows, vec![5, 7]);
        let narrow = cast_column(
            &strings(&[Some("12345.6")]),
            &DataType::Decimal128(5, 2),
            None,
        )
        .unwrap();
        assert_eq!(
            narrow.failed_rows,
            vec![0],
            "overflow of DECIMAL(5,2) is a failure"
        );
    }

    #[test]
    fn dates() {
        let input = strings(&[Some("2026-07-01"), Some("2026-02-30"), Some(" 2026-12-31 ")]);
        let out = cast_column(&input, &DataType::Date32, None).unwrap();
        let d = out.array.as_any().downcast_ref::<Date32Array>().unwrap();
        assert_eq!(d.value(0), 20635);
        assert_eq!(out.failed_rows, vec![1]);
        assert!(d.is_valid(2));
    }

    #[test]
    fn strings_are_kept_verbatim() {
        let input = strings(&[Some("  padded  "), Some(""), None]);
        let out = cast_column(&input, &DataType::Utf8, None).unwrap();
        let s = out.array.as_string::<i32>();
        assert_eq!(s.value(0), "  padded  ");
        assert_eq!(s.value(1), "");
        assert!(out.failed_rows.is_empty());
    }

    #[test]
    fn cast_columns_keeps_order_and_matches_single_casts() {
        let ts = strings(&[Some("2026-07-01T09:00:00Z"), Some("x")]);
        let b = strings(&[Some("true"), Some("nope")]);
        let s = strings(&[Some("a"), None]);
        let inputs = vec![
            (ts.clone(), utc()),
            (s.clone(), DataType::Utf8),
            (b.clone(), DataType::Boolean),
        ];
        let many = cast_columns(&inputs, None).unwrap();
        for ((input, target), got) in inputs.iter().zip(&many) {
            let one = cast_column(input, target, None).unwrap();
            assert_eq!(got.array.as_ref(), one.array.as_ref());
            assert_eq!(got.failed_rows, one.failed_rows);
        }
    }

    #[test]
    fn naive_timestamps() {
        let input = strings(&[Some("2026-07-01 09:00:00"), Some("nope")]);
        let out = cast_column(
            &input,
            &DataType::Timestamp(TimeUnit::Microsecond, None),
            None,
        )
        .unwrap();
        let ts = out
            .array
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), micros("2026-07-01 09:00:00.0"));
        assert_eq!(out.failed_rows, vec![1]);
    }
}
