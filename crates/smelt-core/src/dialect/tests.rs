//! The value tables of docs/pipeline.md ("Cast dialects"): BigQuery's SAFE_CAST and
//! Spark's try_cast, from their documentation and reference implementations.

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::{Date32Type, Float64Type, Int64Type, TimestampMicrosecondType};

use super::*;

fn cast(values: &[&str], target: DataType, dialect: CastDialect) -> ArrayRef {
    let input: ArrayRef = Arc::new(StringArray::from(values.to_vec()));
    cast_strings(&input, &target, None, dialect)
        .unwrap()
        .unwrap()
}

/// `(input, BigQuery, Spark)`, `None` for NULL.
fn check<T: PartialEq + std::fmt::Debug>(
    rows: &[(&str, Option<T>, Option<T>)],
    target: DataType,
    get: impl Fn(&ArrayRef, usize) -> T,
) {
    let inputs: Vec<&str> = rows.iter().map(|r| r.0).collect();
    for (dialect, pick) in [(CastDialect::BigQuery, 1), (CastDialect::Spark, 2)] {
        let out = cast(&inputs, target.clone(), dialect);
        for (i, row) in rows.iter().enumerate() {
            let want = if pick == 1 { &row.1 } else { &row.2 };
            let got = (!out.is_null(i)).then(|| get(&out, i));
            assert_eq!(&got, want, "{dialect:?} {:?} as {target}", row.0);
        }
    }
}

#[test]
fn booleans() {
    check(
        &[
            ("true", Some(true), Some(true)),
            ("TrUe", Some(true), Some(true)),
            (" true", None, Some(true)),
            ("true ", None, Some(true)),
            ("yes", None, Some(true)),
            ("y", None, Some(true)),
            ("1", None, Some(true)),
            ("0", None, Some(false)),
            ("no", None, Some(false)),
            ("FALSE", Some(false), Some(false)),
            ("on", None, None),
            ("2", None, None),
            ("tru", None, None),
        ],
        DataType::Boolean,
        |a, i| a.as_boolean().value(i),
    );
}

#[test]
fn integers() {
    check(
        &[
            ("42", Some(42), Some(42)),
            (" 42", Some(42), Some(42)),
            ("\t42\n", Some(42), Some(42)),
            ("+42", Some(42), Some(42)),
            ("0x1A", Some(26), None),
            ("-0x1A", Some(-26), None),
            ("   +0x121   ", Some(289), None),
            ("42.0", None, None),
            ("4.2", None, None),
            ("1e3", None, None),
            ("9223372036854775807", Some(i64::MAX), Some(i64::MAX)),
            ("9223372036854775808", None, None),
            ("-9223372036854775808", Some(i64::MIN), Some(i64::MIN)),
            ("1,000", None, None),
            ("- 42", None, None),
        ],
        DataType::Int64,
        |a, i| a.as_primitive::<Int64Type>().value(i),
    );
    // Out of a narrower column's range: NULL.
    let out = cast(&["2147483648", "7"], DataType::Int32, CastDialect::Spark);
    assert!(out.is_null(0) && !out.is_null(1));
}

#[test]
fn floats() {
    check(
        &[
            ("4.2", Some(4.2), Some(4.2)),
            ("1e3", Some(1000.0), Some(1000.0)),
            (" 42 ", Some(42.0), Some(42.0)),
            ("inf", Some(f64::INFINITY), Some(f64::INFINITY)),
            ("-inf", Some(f64::NEG_INFINITY), Some(f64::NEG_INFINITY)),
            ("INFINITY", Some(f64::INFINITY), Some(f64::INFINITY)),
            ("Infinity", Some(f64::INFINITY), Some(f64::INFINITY)),
            ("0x1A", None, None),
            ("1.5d", None, Some(1.5)),
            ("1e400", Some(f64::INFINITY), Some(f64::INFINITY)),
        ],
        DataType::Float64,
        |a, i| a.as_primitive::<Float64Type>().value(i),
    );
    // NaN is not equal to itself: checked apart.
    for (dialect, minus_nan) in [(CastDialect::BigQuery, true), (CastDialect::Spark, false)] {
        let out = cast(&["NaN", "nan", "-nan"], DataType::Float64, dialect);
        let f = out.as_primitive::<Float64Type>();
        assert!(f.value(0).is_nan() && f.value(1).is_nan(), "{dialect:?}");
        assert_eq!(!out.is_null(2), minus_nan, "{dialect:?} -nan");
    }
}

#[test]
fn decimals() {
    let s = |v: &str| Some(v.to_string());
    check(
        &[
            ("1.5", s("1.500000000"), s("1.500000000")),
            (" 42 ", s("42.000000000"), s("42.000000000")),
            ("1e3", s("1000.000000000"), s("1000.000000000")),
            (".5", s("0.500000000"), s("0.500000000")),
            ("1.0123456789", s("1.012345679"), s("1.012345679")),
            ("-0.0000000005", s("-0.000000001"), s("-0.000000001")),
            ("1e29", None, None),
            ("NaN", None, None),
            ("0x1A", None, None),
            ("1,000", None, None),
        ],
        DataType::Decimal128(38, 9),
        |a, i| {
            a.as_primitive::<arrow::datatypes::Decimal128Type>()
                .value_as_string(i)
        },
    );
    assert_eq!(decimal_text("1.005", 2).as_deref(), Some("1.01"));
    assert_eq!(
        decimal_text("12345678.999", 2).as_deref(),
        Some("12345679.00")
    );
    assert_eq!(decimal_text("-0.004", 2).as_deref(), Some("0.00"));
    assert_eq!(decimal_text("9.995", 2).as_deref(), Some("10.00"));
    let out = cast(
        &["123456789"],
        DataType::Decimal128(10, 2),
        CastDialect::Spark,
    );
    assert!(out.is_null(0), "9 integer digits do not fit DECIMAL(10,2)");
}

#[test]
fn dates() {
    let ymd = |y, m, d| {
        let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
        Some((NaiveDate::from_ymd_opt(y, m, d).unwrap() - epoch).num_days() as i32)
    };
    check(
        &[
            ("2026-07-01", ymd(2026, 7, 1), ymd(2026, 7, 1)),
            ("2026-7-1", ymd(2026, 7, 1), ymd(2026, 7, 1)),
            (" 2026-07-01 ", None, ymd(2026, 7, 1)),
            ("2026", None, ymd(2026, 1, 1)),
            ("2026-07", None, ymd(2026, 7, 1)),
            ("20260701", None, None),
            ("2026/07/01", None, None),
            ("2026-07-01T09:00:00.000+0000", None, ymd(2026, 7, 1)),
            ("2026-07-01 Trash", None, ymd(2026, 7, 1)),
            ("2026-07-01x", None, None),
            ("2026-02-30", None, None),
            ("0000-12-31", None, ymd(0, 12, 31)),
        ],
        DataType::Date32,
        |a, i| a.as_primitive::<Date32Type>().value(i),
    );
}

fn at(text: &str) -> Option<i64> {
    Some(
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_micros(),
    )
}

#[test]
fn timestamps() {
    check(
        &[
            (
                "2026-07-01 09:00:00",
                at("2026-07-01T09:00:00Z"),
                at("2026-07-01T09:00:00Z"),
            ),
            (
                "2026-07-01",
                at("2026-07-01T00:00:00Z"),
                at("2026-07-01T00:00:00Z"),
            ),
            (
                "2026-07-01T09:00:00.000+0000",
                at("2026-07-01T09:00:00Z"),
                at("2026-07-01T09:00:00Z"),
            ),
            (
                "2026-07-01T09:00:00Z",
                at("2026-07-01T09:00:00Z"),
                at("2026-07-01T09:00:00Z"),
            ),
            ("2026-07-01T09:00:00z", at("2026-07-01T09:00:00Z"), None),
            (
                "2026-07-01 09:00:00+09",
                at("2026-07-01T00:00:00Z"),
                at("2026-07-01T00:00:00Z"),
            ),
            (
                "2026-07-01 09:00:00+09:00",
                at("2026-07-01T00:00:00Z"),
                at("2026-07-01T00:00:00Z"),
            ),
            (
                "2026-07-01 09:00:00+0900",
                at("2026-07-01T00:00:00Z"),
                at("2026-07-01T00:00:00Z"),
            ),
            (
                "2026-07-01 09:00:00 +09:00",
                None,
                at("2026-07-01T00:00:00Z"),
            ),
            (
                "2026-07-01 09:00:00 Asia/Tokyo",
                at("2026-07-01T00:00:00Z"),
                at("2026-07-01T00:00:00Z"),
            ),
            (
                "2026-07-01 09:00:00Asia/Tokyo",
                None,
                at("2026-07-01T00:00:00Z"),
            ),
            (
                "2026-07-01 09:00:00 UTC",
                at("2026-07-01T09:00:00Z"),
                at("2026-07-01T09:00:00Z"),
            ),
            (
                "2026-07-01 09:00:00 America/Los_Angeles",
                at("2026-07-01T16:00:00Z"),
                at("2026-07-01T16:00:00Z"),
            ),
            ("2026-07-01 09:00:00+15", None, at("2026-06-30T18:00:00Z")),
            ("2026-07-01 09:00", None, at("2026-07-01T09:00:00Z")),
            ("2026-07-01T09:00Z", None, None),
            (
                "2026-07-01 09:00:00.1234567",
                None,
                at("2026-07-01T09:00:00.123456Z"),
            ),
            (
                "2026-07-01 09:00:00.123456",
                at("2026-07-01T09:00:00.123456Z"),
                at("2026-07-01T09:00:00.123456Z"),
            ),
            (" 2026-07-01 09:00:00", None, at("2026-07-01T09:00:00Z")),
            ("2015-11-06 23:59:60", at("2015-11-07T00:00:00Z"), None),
            ("09:00:00", None, None),
        ],
        DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into())),
        |a, i| a.as_primitive::<TimestampMicrosecondType>().value(i),
    );
}

#[test]
fn datetimes_without_a_zone() {
    let naive = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None);
    check(
        &[
            (
                "2026-07-01 09:00:00",
                at("2026-07-01T09:00:00Z"),
                at("2026-07-01T09:00:00Z"),
            ),
            ("2026-07-01t09:00:00", at("2026-07-01T09:00:00Z"), None),
            (
                "2026-07-01 9:0:0",
                at("2026-07-01T09:00:00Z"),
                at("2026-07-01T09:00:00Z"),
            ),
            // BigQuery's DATETIME takes no zone; Spark's TIMESTAMP_NTZ drops it.
            (
                "2026-07-01T09:00:00.000+0000",
                None,
                at("2026-07-01T09:00:00Z"),
            ),
            (
                "2026-07-01 09:00:00 Asia/Tokyo",
                None,
                at("2026-07-01T09:00:00Z"),
            ),
        ],
        naive,
        |a, i| a.as_primitive::<TimestampMicrosecondType>().value(i),
    );
}

#[test]
fn a_flow_zone_reads_strings_without_one() {
    let input: ArrayRef = Arc::new(StringArray::from(vec![
        "2026-07-01 09:00:00",
        "2026-07-01 09:00:00Z",
    ]));
    let target = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
    let out = cast_strings(&input, &target, Some("Asia/Tokyo"), CastDialect::BigQuery)
        .unwrap()
        .unwrap();
    let t = out.as_primitive::<TimestampMicrosecondType>();
    assert_eq!(Some(t.value(0)), at("2026-07-01T00:00:00Z"));
    assert_eq!(Some(t.value(1)), at("2026-07-01T09:00:00Z"));
}

#[test]
fn odd_input_is_null_not_a_panic() {
    let odd = [
        "2éé6-07-01",
        "1é1",
        "2026-07-01 09:00:00+1é1",
        "+1é12",
        "1e999999",
        "-1e-999999",
        "262143-12-31 23:59:59-18:00",
        "9999-12-31 23:59:60",
        "０１２",
        "",
        "💥",
    ];
    let targets = [
        DataType::Boolean,
        DataType::Int64,
        DataType::Float64,
        DataType::Decimal128(38, 9),
        DataType::Date32,
        DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into())),
        DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
    ];
    for dialect in [CastDialect::BigQuery, CastDialect::Spark] {
        for target in &targets {
            let out = cast(&odd, target.clone(), dialect);
            assert_eq!(out.len(), odd.len());
        }
    }
    assert_eq!(decimal_text("1e999999", 9), None);
    assert_eq!(decimal_text("-1e-999999", 2).as_deref(), Some("0.00"));
}

#[test]
fn a_time_in_a_dst_gap_takes_the_offset_before_it() {
    // 02:30 does not exist in Los Angeles on 2026-03-08: read at PST (-8).
    let input: ArrayRef = Arc::new(StringArray::from(vec![
        "2026-03-08 02:30:00 America/Los_Angeles",
        "0001-01-01 00:00:00+01",
        "0000000000000000000000000000000000000000000000000000000000000000000000000000000001",
    ]));
    let utc = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
    for dialect in [CastDialect::BigQuery, CastDialect::Spark] {
        let out = cast_strings(&input, &utc, None, dialect).unwrap().unwrap();
        let t = out.as_primitive::<TimestampMicrosecondType>();
        assert_eq!(Some(t.value(0)), at("2026-03-08T10:30:00Z"), "{dialect:?}");
    }
    // Before year 1 in UTC: out of BigQuery's range.
    let bq = cast_strings(&input, &utc, None, CastDialect::BigQuery)
        .unwrap()
        .unwrap();
    assert!(bq.is_null(1));
    // Leading zeros do not count against the digits a decimal holds.
    let n = cast_strings(
        &input,
        &DataType::Decimal128(38, 9),
        None,
        CastDialect::BigQuery,
    )
    .unwrap()
    .unwrap();
    assert!(!n.is_null(2));
}
