//! Parquet files ingested on both engines from one landing folder (seed 002's Auto Loader
//! over Parquet): every value of every Parquet type turned into bronze's text as the
//! embedded engine turns it (arrow-rs' cast, the reference) — doubles and floats at their
//! edges and at random, decimals, dates, timestamps with and without a zone, unsigned
//! integers, bytes that are and are not UTF-8, lists, structs and maps — files of different
//! columns (one in a `day=` folder, with a column of the flow's own name), an empty file;
//! the Spark run killed before its bronze commit and run again; a file of nanosecond
//! timestamps, which Spark does not read, refused by name.

use std::fs::File;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
    Int32Array, Int64Array, Int64Builder, ListBuilder, MapBuilder, RecordBatch, StringArray,
    StringBuilder, StructArray, TimestampMicrosecondArray, TimestampMillisecondArray,
    TimestampNanosecondArray, UInt8Array, UInt64Array,
};
use arrow::datatypes::{DataType, Field};
use serde_json::Value;

use super::{INGEST_NOT_COMPARED, Pair, abort_spark_run, same_reports_but, stamp};
use crate::common::Project;

/// The flow: Parquet files below `landing/`, with the file row audit.
const FLOW: &str = "  items:
    ingest:
      from: ./landing/**/*.parquet
      into: raw.items
      format: parquet
      audit:
        file_row: _file_row
";

/// `batch` written to `name` in `p` as one Parquet file, modified at `at`.
fn land(p: &Project, name: &str, batch: &RecordBatch, at: u64) {
    let path = p.file(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None)
            .unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    stamp(&path, at);
}

/// A fixed stream of pseudo-random bit patterns (SplitMix64).
fn bits(n: usize, seed: u64) -> impl Iterator<Item = u64> {
    let mut state = seed;
    (0..n).map(move |_| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// Doubles at the edges of `ryu`'s layouts (where it turns to exponents, ties, the
/// extremes) and `n` more drawn from every bit pattern.
fn doubles(n: usize) -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        1.5,
        -3.75,
        0.1,
        0.3,
        2.0 / 3.0,
        100.0,
        1e15,
        1e16,
        1e17,
        1e20,
        1e22,
        1e23,
        9_999_999_999_999_998.0,
        1e-4,
        1e-5,
        1e-7,
        0.000_12,
        5e-324,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        2.828_793_848_061_59e17,
        123_456_789_012_345_680.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1_462_245.25,
    ];
    v.extend(bits(n, 1).map(f64::from_bits));
    v
}

/// Floats likewise: ties of 24-bit mantissas (`1462245.25`), Java's long `Float.toString`
/// (`1e13`), the extremes and random bit patterns.
fn floats(n: usize) -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.1,
        3e-7,
        1e13,
        1_462_245.2,
        0.1,
        1e-6,
        1e-5,
        16_777_216.0,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    v.extend(bits(n, 2).map(|b| f32::from_bits(b as u32)));
    v
}

/// A file of every type the embedded engine turns into text, `n` rows (the edges repeat).
fn typed(n: usize) -> RecordBatch {
    let (d, f) = (doubles(n), floats(n));
    let at = |i: usize| 1_782_864_000_000_000 + (i as i64) * 1_234_567 * 1_001;
    let tags = {
        let mut b = ListBuilder::new(StringBuilder::new());
        for i in 0..n {
            match i % 3 {
                0 => b.append_null(),
                1 => {
                    b.values().append_value(format!("t{i}"));
                    b.values().append_null();
                    b.append(true);
                }
                _ => b.append(true),
            }
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let kv = {
        let mut b = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
        for i in 0..n {
            if i % 4 == 0 {
                b.append(false).unwrap();
                continue;
            }
            for j in 0..(i % 3) {
                b.keys().append_value(format!("k{j}"));
                b.values()
                    .append_option((j != 1).then_some(i as i64 * 10 + j as i64));
            }
            b.append(true).unwrap();
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let attrs = StructArray::from(vec![
        (
            Arc::new(Field::new("a", DataType::Int32, true)),
            Arc::new(Int32Array::from_iter(
                (0..n).map(|i| (i % 4 != 0).then_some(i as i32)),
            )) as ArrayRef,
        ),
        (
            Arc::new(Field::new("b", DataType::Float64, true)),
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|i| d[i % d.len()] / 7.0),
            )) as ArrayRef,
        ),
    ]);
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(Int64Array::from_iter_values(0..n as i64))),
        (
            "name",
            Arc::new(StringArray::from_iter((0..n).map(|i| match i % 5 {
                0 => None,
                1 => Some(String::new()),
                _ => Some(format!("名前 {i}, \"q\"")),
            }))),
        ),
        (
            "price",
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|i| d[i % d.len()]),
            )),
        ),
        (
            "ratio",
            Arc::new(Float32Array::from_iter_values(
                (0..n).map(|i| f[i % f.len()]),
            )),
        ),
        (
            "amount",
            Arc::new(
                Decimal128Array::from_iter(
                    (0..n).map(|i| (i % 7 != 0).then_some((i as i128 - 50) * 1_234_567)),
                )
                .with_precision_and_scale(18, 4)
                .unwrap(),
            ),
        ),
        (
            "day",
            Arc::new(Date32Array::from_iter_values(
                (0..n).map(|i| i as i32 * 97 - 719_162),
            )),
        ),
        (
            "at",
            Arc::new(TimestampMicrosecondArray::from_iter_values(
                (0..n).map(|i| at(i) + (i % 3) as i64 * 120_000),
            )),
        ),
        (
            "at_utc",
            Arc::new(
                TimestampMillisecondArray::from_iter(
                    (0..n).map(|i| (i % 6 != 0).then_some(at(i) / 1000)),
                )
                .with_timezone("UTC"),
            ),
        ),
        (
            "flag",
            Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| (i % 3 != 0).then_some(i % 2 == 0)),
            )),
        ),
        (
            "small",
            Arc::new(UInt8Array::from_iter_values(
                (0..n).map(|i| (i * 37 % 256) as u8),
            )),
        ),
        (
            "big",
            Arc::new(UInt64Array::from_iter_values(
                (0..n).map(|i| u64::MAX - i as u64 * 3),
            )),
        ),
        (
            "raw",
            Arc::new(BinaryArray::from_iter((0..n).map(|i| match i % 3 {
                0 => Some(b"text".to_vec()),
                1 => Some(vec![0xff, 0x00, i as u8]),
                _ => None,
            }))),
        ),
        ("tags", tags),
        ("attrs", Arc::new(attrs)),
        ("kv", kv),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

/// A file of other columns: a new one, one named as the flow's audit column, ids again.
fn other(ids: std::ops::Range<i64>) -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(ids.clone())) as ArrayRef,
        ),
        (
            "extra",
            Arc::new(StringArray::from_iter_values(
                ids.clone().map(|i| format!("x{i}")),
            )),
        ),
        (
            "_file_row",
            Arc::new(Int64Array::from_iter_values(ids.map(|i| -i))),
        ),
    ])
    .unwrap()
}

/// Bronze and the ingest reports equal in both lakes.
fn same_bronze(pair: &Pair, step: &str, reports: &(Vec<Value>, Vec<Value>)) {
    same_reports_but(step, INGEST_NOT_COMPARED, reports);
    let bronze = "SELECT * FROM raw.items ORDER BY _datasource, _file_row";
    let (e, s) = pair.rows(bronze, &[]);
    assert!(!e.is_empty(), "{step}: bronze is empty");
    for (i, (e, s)) in e.iter().zip(&s).enumerate() {
        assert_eq!(
            e, s,
            "{step}: bronze row {i} differs (left embedded, right Spark)"
        );
    }
    assert_eq!(e.len(), s.len(), "{step}: bronze's rows differ in number");
}

pub(crate) fn ingest_parquet(url: &str) {
    let p = Project::with_pipeline("lake: ./lake\nflows: {}\n");
    land(&p, "landing/a.parquet", &typed(400), 0);
    land(&p, "landing/empty.parquet", &other(0..0), 5);
    let pair = Pair::placing(p, "", FLOW, url);
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["rows_written"], 400, "{:?}", first.1);
    same_bronze(&pair, "parquet step 1", &first);

    // A file of other columns in a `day=` folder, the Spark run killed before its commit.
    land(&pair.p, "landing/day=2/b.parquet", &other(400..410), 10);
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    abort_spark_run(&pair.p, "before_spark_bronze");
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["rescued"], 10, "{rerun:?}");
    same_bronze(
        &pair,
        "parquet step 2, killed and run again",
        &(embedded, rerun),
    );
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);

    // Nanosecond timestamps: Spark reads them only as numbers, so the run stops, naming
    // the file; nothing is committed.
    let ns = RecordBatch::try_from_iter([(
        "at",
        Arc::new(TimestampNanosecondArray::from_iter_values([
            1_782_864_000_123_456_789,
        ])) as ArrayRef,
    )])
    .unwrap();
    land(&pair.p, "landing/ns.parquet", &ns, 20);
    let (_, err) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    super::pin_spark("parquet_nanosecond_timestamps", &pair.p, &err);
    let (_, bronze) = pair.rows("SELECT count(*) AS n FROM raw.items", &[]);
    assert_eq!(bronze[0]["n"], 410, "{bronze:?}");
}
