//! `smelt-bench-gen`: writes the "product2" bronze table of the benchmark (seed 000's
//! 20 STRING columns) as a Delta table: version 0 creates it, version 1 is the initial
//! load of `--rows` distinct Ids, versions 2..=K+1 append `--increment` rows each —
//! ~80% re-sent existing Ids with changed fields (some several times in one commit),
//! ~20% new Ids (`--keys spread`, the default: re-sent Ids drawn from every Id so far;
//! `--keys recent`: from the newest tenth of them). Salesforce timestamps, 'true'/'false', some NULLs, Japanese text, and
//! ~0.5% unparseable values. The same arguments always give the same rows.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use clap::Parser;
use deltalake::DeltaTable;
use deltalake::protocol::SaveMode;

/// Generate the benchmark's bronze table.
#[derive(Debug, Parser)]
struct Args {
    /// Folder of the Delta table to create (must not exist).
    #[arg(long)]
    table: PathBuf,
    /// Distinct Ids in the initial load (N).
    #[arg(long)]
    rows: u64,
    /// Rows per increment commit (M).
    #[arg(long)]
    increment: u64,
    /// Number of increment commits (K).
    #[arg(long, default_value_t = 5)]
    increments: u64,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Rows per written batch.
    #[arg(long, default_value_t = 200_000)]
    batch_rows: u64,
    /// Which existing Ids an increment re-sends.
    #[arg(long, value_enum, default_value_t = Keys::Spread)]
    keys: Keys,
    /// Create the table with Delta's change data feed on (`delta.enableChangeDataFeed`), as
    /// seed 000's bronze has it: what a peer reading `table_changes` needs. Appends write no
    /// change files either way, so the rows every reader sees are the same.
    #[arg(long)]
    change_data_feed: bool,
}

/// Which existing Ids an increment re-sends.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Keys {
    /// Any Id so far, uniformly: every silver file holds some.
    Spread,
    /// The newest tenth of the Ids so far (recent records change): clustered keys.
    Recent,
}

/// SplitMix64: tiny, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

const COLUMNS: [&str; 20] = [
    "Id",
    "Name",
    "ProductCode",
    "Description",
    "IsActive",
    "CreatedDate",
    "CreatedById",
    "LastModifiedDate",
    "LastModifiedById",
    "SystemModstamp",
    "Family",
    "ExternalDataSourceId",
    "ExternalId",
    "DisplayUrl",
    "QuantityUnitOfMeasure",
    "IsDeleted",
    "IsArchived",
    "LastViewedDate",
    "LastReferencedDate",
    "StockKeepingUnit",
];

const NAMES: [&str; 6] = [
    "ノートパソコン",
    "クラウドサービス",
    "デスクトップ",
    "モニター",
    "ライセンス",
    "サポート契約",
];
const TIERS: [&str; 4] = ["Standard", "Premium", "Basic", "Enterprise"];
const FAMILIES: [&str; 4] = ["Hardware", "Service", "Software", "Support"];
const UNITS: [&str; 3] = ["台", "ライセンス", "式"];
const GARBAGE: [&str; 4] = ["N/A", "2026-13-45T99:00:00.000+0000", "maybe", "--"];

fn schema() -> SchemaRef {
    Arc::new(Schema::new(
        COLUMNS
            .iter()
            .map(|c| Field::new(*c, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ))
}

/// Salesforce-style timestamp `base + minutes`.
fn ts(minutes: u64) -> String {
    // 2026-01-01T00:00:00Z plus minutes.
    let (d, m) = (minutes / 1440, minutes % 1440);
    let (month, day) = {
        let days = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        let mut rest = d % 365;
        let mut month = 0;
        while rest >= days[month] {
            rest -= days[month];
            month += 1;
        }
        (month + 1, rest + 1)
    };
    format!(
        "2026-{month:02}-{day:02}T{:02}:{:02}:00.000+0000",
        m / 60,
        m % 60
    )
}

/// One row of product `id` in `version` (0 = initial load).
fn row(rng: &mut Rng, id: u64, version: u64, out: &mut [StringBuilder]) {
    let mut put = |col: usize, v: Option<String>, rng: &mut Rng| {
        // ~0.5% of values of typed columns are unparseable.
        let typed = matches!(col, 4 | 5 | 7 | 9 | 15 | 16 | 17 | 18);
        if typed && v.is_some() && rng.chance(5) {
            out[col].append_value(GARBAGE[rng.below(GARBAGE.len() as u64) as usize]);
        } else {
            match v {
                Some(s) => out[col].append_value(s),
                None => out[col].append_null(),
            }
        }
    };
    let name = NAMES[(id % NAMES.len() as u64) as usize];
    let tier = TIERS[rng.below(TIERS.len() as u64) as usize];
    let created = id % 100_000;
    let modified = 200_000 + version * 10_000 + rng.below(9_000);
    put(0, Some(format!("01t{id:012}AAA")), rng);
    put(1, Some(format!("{name} {tier}")), rng);
    put(2, Some(format!("PC-{id:08}")), rng);
    put(
        3,
        rng.chance(900)
            .then(|| format!("{name}の説明 ({tier}) 第{version}版")),
        rng,
    );
    put(
        4,
        Some(if rng.chance(800) { "true" } else { "false" }.to_string()),
        rng,
    );
    put(5, Some(ts(created)), rng);
    put(6, Some(format!("005{:012}AAA", id % 97)), rng);
    put(7, Some(ts(modified)), rng);
    put(8, Some(format!("005{:012}AAA", rng.below(50))), rng);
    put(9, Some(ts(modified)), rng);
    put(
        10,
        Some(FAMILIES[rng.below(FAMILIES.len() as u64) as usize].to_string()),
        rng,
    );
    put(11, None, rng);
    put(12, Some(format!("EXT-PRODUCT-{id}")), rng);
    put(13, Some(format!("https://example.com/products/{id}")), rng);
    put(
        14,
        Some(UNITS[rng.below(UNITS.len() as u64) as usize].to_string()),
        rng,
    );
    put(15, Some("false".to_string()), rng);
    put(
        16,
        Some(if rng.chance(50) { "true" } else { "false" }.to_string()),
        rng,
    );
    put(17, rng.chance(700).then(|| ts(modified + 60)), rng);
    put(18, rng.chance(700).then(|| ts(modified + 65)), rng);
    put(19, Some(format!("SKU-{id:08}")), rng);
}

fn batch(rng: &mut Rng, ids: &[u64], version: u64) -> RecordBatch {
    let mut builders: Vec<StringBuilder> = (0..COLUMNS.len())
        .map(|_| StringBuilder::with_capacity(ids.len(), ids.len() * 24))
        .collect();
    for &id in ids {
        row(rng, id, version, &mut builders);
    }
    let columns: Vec<ArrayRef> = builders
        .iter_mut()
        .map(|b| Arc::new(b.finish()) as ArrayRef)
        .collect();
    RecordBatch::try_new(schema(), columns).expect("schema matches")
}

async fn append(table: DeltaTable, batches: Vec<RecordBatch>) -> DeltaTable {
    table
        .write(batches)
        .with_save_mode(SaveMode::Append)
        .await
        .expect("append to bronze")
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let mut rng = Rng(args.seed);
    std::fs::create_dir_all(&args.table).expect("create table folder");
    let url = deltalake::ensure_table_uri(args.table.to_string_lossy()).expect("table url");
    let table = DeltaTable::try_from_url(url)
        .await
        .expect("open table location");
    let delta_schema: deltalake::kernel::StructType = {
        use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
        schema().as_ref().try_into_kernel().expect("schema")
    };
    let mut create = table
        .create()
        .with_table_name("product2_bronze")
        .with_columns(delta_schema.fields().cloned());
    if args.change_data_feed {
        create = create.with_configuration_property(
            deltalake::TableProperty::EnableChangeDataFeed,
            Some("true"),
        );
    }
    let mut table = create.await.expect("create bronze");

    // Version 1: the initial load, Ids 0..N.
    let mut batches = Vec::new();
    let mut next_id = 0u64;
    while next_id < args.rows {
        let end = (next_id + args.batch_rows).min(args.rows);
        let ids: Vec<u64> = (next_id..end).collect();
        batches.push(batch(&mut rng, &ids, 0));
        next_id = end;
    }
    table = append(table, batches).await;

    // Versions 2..: increments.
    for k in 1..=args.increments {
        let mut ids = Vec::with_capacity(args.increment as usize);
        for _ in 0..args.increment {
            if rng.chance(800) {
                // Existing Id; every 20th re-sent twice in the same commit.
                let id = match args.keys {
                    Keys::Spread => rng.below(next_id),
                    Keys::Recent => next_id - 1 - rng.below((next_id / 10).max(1)),
                };
                ids.push(id);
                if rng.chance(50) {
                    ids.push(id);
                }
            } else {
                ids.push(next_id);
                next_id += 1;
            }
        }
        ids.truncate(args.increment as usize);
        let batches: Vec<RecordBatch> = ids
            .chunks(args.batch_rows as usize)
            .map(|c| batch(&mut rng, c, k))
            .collect();
        table = append(table, batches).await;
    }
    let summary = serde_json::json!({
        "table": args.table,
        "version": table.version(),
        "initial_rows": args.rows,
        "increment_rows": args.increment,
        "increments": args.increments,
        "distinct_ids": next_id,
        "seed": args.seed,
        "keys": format!("{:?}", args.keys).to_lowercase(),
        "change_data_feed": args.change_data_feed,
    });
    println!("{summary}");
}
