//! Micro-benchmarks of the cast library and the dedupe kernel (`cargo bench -p smelt-core`).
//! For review: a regression shows up as a slower run here, not in a timed test.

use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::DataType;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use smelt_core::cast::cast_column_in;
use smelt_core::change::timestamp_utc;
use smelt_core::dedupe::latest_per_key;
use smelt_core::dialect::CastDialect;

const ROWS: usize = 1_000_000;

fn salesforce_timestamps() -> ArrayRef {
    Arc::new(StringArray::from_iter_values((0..ROWS).map(|i| {
        format!(
            "2026-07-{:02}T{:02}:{:02}:00.000+0000",
            1 + i % 28,
            i % 24,
            i % 60
        )
    })))
}

fn casts(c: &mut Criterion) {
    let mut g = c.benchmark_group("cast");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.sample_size(10);
    let ts = salesforce_timestamps();
    for (name, dialect) in [
        ("lenient", CastDialect::Lenient),
        ("bigquery", CastDialect::BigQuery),
        ("spark", CastDialect::Spark),
    ] {
        g.bench_function(format!("salesforce timestamp -> TIMESTAMP ({name})"), |b| {
            b.iter(|| cast_column_in(black_box(&ts), &timestamp_utc(), None, dialect).unwrap())
        });
    }
    let bools: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..ROWS).map(|i| if i % 3 == 0 { "true" } else { "false" }),
    ));
    for (name, dialect) in [
        ("lenient", CastDialect::Lenient),
        ("bigquery", CastDialect::BigQuery),
    ] {
        g.bench_function(format!("'true'/'false' -> BOOL ({name})"), |b| {
            b.iter(|| cast_column_in(black_box(&bools), &DataType::Boolean, None, dialect).unwrap())
        });
    }
    let decimals: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..ROWS).map(|i| format!("{}.{:03}", i, i % 1000)),
    ));
    for (name, dialect) in [
        ("lenient", CastDialect::Lenient),
        ("bigquery", CastDialect::BigQuery),
    ] {
        g.bench_function(format!("text -> DECIMAL(18,2) ({name})"), |b| {
            b.iter(|| {
                cast_column_in(
                    black_box(&decimals),
                    &DataType::Decimal128(18, 2),
                    None,
                    dialect,
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

fn dedupe(c: &mut Criterion) {
    let mut g = c.benchmark_group("dedupe");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.sample_size(10);
    // 1M changes over 200k keys (Salesforce-like Ids), sequences out of order.
    let keys: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..ROWS).map(|i| format!("01t{:012}AAA", (i * 7919) % 200_000)),
    ));
    let seq: ArrayRef = Arc::new(
        TimestampMicrosecondArray::from_iter_values(
            (0..ROWS).map(|i| ((i * 104_729) % 1_000_003) as i64),
        )
        .with_timezone("UTC"),
    );
    g.bench_function("latest_per_key 1M rows / 200k keys", |b| {
        b.iter(|| {
            latest_per_key(
                black_box(std::slice::from_ref(&keys)),
                black_box(std::slice::from_ref(&seq)),
            )
            .unwrap()
        })
    });
    let int_keys: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..ROWS).map(|i| ((i * 7919) % 200_000) as i64),
    ));
    g.bench_function("latest_per_key int keys", |b| {
        b.iter(|| {
            latest_per_key(
                black_box(std::slice::from_ref(&int_keys)),
                black_box(std::slice::from_ref(&seq)),
            )
            .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, casts, dedupe);
criterion_main!(benches);
