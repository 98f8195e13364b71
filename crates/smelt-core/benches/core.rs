//! Micro-benchmarks of the cast library and the dedupe kernel (`cargo bench -p smelt-core`).
//! For review: a regression shows up as a slower run here, not in a timed test.

use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::DataType;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use smelt_core::cast::cast_column_in;
use smelt_core::change::timestamp_utc;
use smelt_core::dedupe::{KeyIndex, latest_per_key};
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

/// The guard's lookup: an index over an increment's 200k keys, probed with every key of a
/// 2.2M-row silver table (about 8% of them found), as in the product2 bench at `medium`.
fn key_index(c: &mut Criterion) {
    const STORED: usize = 2_200_000;
    let mut g = c.benchmark_group("key index");
    g.sample_size(10);
    let id = |i: usize| format!("01t{i:012}AAA");
    let keys: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..200_000).map(|i| id((i * 7919) % (STORED * 12 / 10))),
    ));
    let stored: Vec<ArrayRef> = (0..STORED)
        .step_by(262_144)
        .map(|start| -> ArrayRef {
            Arc::new(StringArray::from_iter_values(
                (start..(start + 262_144).min(STORED)).map(id),
            ))
        })
        .collect();
    g.throughput(Throughput::Elements(200_000));
    g.bench_function("build 200k keys", |b| {
        b.iter(|| KeyIndex::new(black_box(std::slice::from_ref(&keys))).unwrap())
    });
    let index = KeyIndex::new(std::slice::from_ref(&keys)).unwrap();
    g.throughput(Throughput::Elements(STORED as u64));
    g.bench_function("probe 2.2M stored keys", |b| {
        b.iter(|| {
            for file in &stored {
                black_box(index.positions(std::slice::from_ref(file)).unwrap());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, casts, dedupe, key_index);
criterion_main!(benches);
