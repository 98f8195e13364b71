//! smelt's fuzz targets: one function per parser, taking arbitrary bytes. A target fails by
//! panicking (an error returned for bad input is the right answer); where a parser has a
//! property beyond "no panic", the target asserts it.
//!
//! `cargo fuzz run <target>` (the binaries of `fuzz_targets/`, `bench/fuzz.sh`) drives them
//! with libFuzzer; `tests/corpora.rs` replays every committed input of `corpus/<target>/`
//! through them in the test suite, so a crash once found stays fixed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::util::display::array_value_to_string;
use futures::StreamExt;
use smelt_core::cast::cast_column_in;
use smelt_core::dialect::CastDialect;
use smelt_engine::ports::{Lake as _, Malformed, RawRows, SourceOptions};
use smelt_ingest::RowSink;
use smelt_spec::{CsvLayout, Pipeline, TableName};

/// A fuzz target: its name (its folder of `corpus/`) and the function fed each input.
pub type Target = (&'static str, fn(&[u8]));

/// The targets, by name (the folders of `corpus/`).
pub const TARGETS: [Target; 6] = [
    ("pipeline", pipeline),
    ("sql", sql),
    ("cast", cast),
    ("delta_log", delta_log),
    ("csv", csv),
    ("json_lines", json_lines),
];

/// A folder of this process's, for the files a target writes.
fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary folder"))
        .path()
}

/// The schema file a pipeline points to when the input gives none.
const DDL: &str = "CREATE TABLE s.t (id STRING NOT NULL, v BIGINT, at TIMESTAMP, PRIMARY KEY (id))";

/// The pipeline file loader: the input is a pipeline file, then (after a NUL byte) the
/// schema file `s.sql` it may point to. Loading it, and parsing the schema file alone,
/// either succeed or fail with an error.
pub fn pipeline(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (yaml, ddl) = text.split_once('\0').unwrap_or((&text, DDL));
    let dir = scratch().join("pipeline");
    std::fs::create_dir_all(&dir).expect("a folder");
    let schema = dir.join("s.sql");
    std::fs::write(&schema, ddl).expect("writing the schema file");
    let _ = Pipeline::from_str(yaml, &dir.join("smelt.yaml"));
    let _ = smelt_spec::ddl::parse_table(ddl, &schema);
}

/// `smelt sql`'s front end: parsing a script and its refusals, not running it.
pub fn sql(data: &[u8]) {
    let _ = smelt_delta::sql::front_end(&String::from_utf8_lossy(data));
}

/// The types a cast target picks from.
fn cast_targets() -> [DataType; 11] {
    [
        DataType::Boolean,
        DataType::Int32,
        DataType::Int64,
        DataType::Float64,
        DataType::Decimal128(10, 2),
        DataType::Decimal128(38, 9),
        DataType::Date32,
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        DataType::Timestamp(TimeUnit::Microsecond, None),
        DataType::Int8,
        DataType::Float32,
    ]
}

/// One string cast to a type by a dialect: the first byte picks the dialect, the second
/// the type, the rest is the text. No panic; and where the text casts, the value printed
/// and cast again is the same value.
pub fn cast(data: &[u8]) {
    let [d, t, text @ ..] = data else {
        return;
    };
    let dialect = [
        CastDialect::Lenient,
        CastDialect::BigQuery,
        CastDialect::Spark,
    ][*d as usize % 3];
    let targets = cast_targets();
    let target = &targets[*t as usize % targets.len()];
    let text = String::from_utf8_lossy(text);
    let input: ArrayRef = Arc::new(StringArray::from(vec![text.as_ref()]));
    let Ok(first) = cast_column_in(&input, target, None, dialect) else {
        return;
    };
    if first.array.is_null(0) {
        return;
    }
    let printed = array_value_to_string(&first.array, 0).expect("a value prints");
    let again: ArrayRef = Arc::new(StringArray::from(vec![printed.as_str()]));
    let second = cast_column_in(&again, target, None, dialect).expect("a printed value casts");
    assert_eq!(
        second.array.to_data(),
        first.array.to_data(),
        "{dialect:?} {target}: {text:?} cast, printed as {printed:?}, cast to another value"
    );
}

/// A runtime for the targets that read tables.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// Version 0 of the table the Delta log target reads: created, change feed on, empty.
const COMMIT_0: &str = concat!(
    r#"{"protocol":{"minReaderVersion":1,"minWriterVersion":4}}"#,
    "\n",
    r#"{"metaData":{"id":"5f1e2b8a-0000-4000-8000-000000000000","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[{\"name\":\"id\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}},{\"name\":\"v\",\"type\":\"long\",\"nullable\":true,\"metadata\":{}}]}","partitionColumns":[],"configuration":{"delta.enableChangeDataFeed":"true"},"createdTime":0}}"#,
    "\n",
    r#"{"commitInfo":{"timestamp":0,"operation":"CREATE TABLE"}}"#,
    "\n"
);

/// The Delta log as smelt reads it: bronze table `b.t` (version 0 created by Spark's
/// rules) whose next log file holds the input. The first byte picks the file: commit
/// `00000000000000000001.json` (even) or `_last_checkpoint` (odd). Opening the table and
/// reading its changes either succeed or fail with an error.
pub fn delta_log(data: &[u8]) {
    let _ = read_log(data);
}

/// [`delta_log`]: the rows read, or the error met.
fn read_log(data: &[u8]) -> Result<usize, String> {
    let [which, content @ ..] = data else {
        return Ok(0);
    };
    let lake_dir = scratch().join("lake");
    let log = lake_dir.join("b/t/_delta_log");
    let _ = std::fs::remove_dir_all(&lake_dir);
    std::fs::create_dir_all(&log).expect("a log folder");
    std::fs::write(log.join("00000000000000000000.json"), COMMIT_0).expect("commit 0");
    let file: PathBuf = if which % 2 == 0 {
        log.join("00000000000000000001.json")
    } else {
        log.join("_last_checkpoint")
    };
    std::fs::write(file, content).expect("the fuzzed log file");
    runtime().block_on(async {
        let lake = smelt_delta::Lake::new(&lake_dir).map_err(|e| e.to_string())?;
        let name = TableName::parse("b.t").expect("a name");
        let source = lake
            .source(&name, SourceOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        source
            .change_set(Some(0))
            .await
            .map_err(|e| e.to_string())?;
        let mut rows = source.read(Some(0));
        let mut n = 0;
        while let Some(batch) = rows.next().await {
            n += batch.map_err(|e| e.to_string())?.num_rows();
        }
        Ok(n)
    })
}

/// What a landing reader gave, checked as it comes: every batch's row numbers line up
/// with its rows; rows come in file order, and so do malformed lines (a malformed line may
/// come before the batch of rows above it). The two count differently — a CSV row by its
/// record after the header, a malformed line by its line in the file (docs/pipeline.md,
/// `file_row`) — so each kind is checked on its own; two malformed records may share a line.
#[derive(Default)]
struct Checked {
    last_row: i64,
    last_malformed: i64,
}

impl Checked {
    fn next(&mut self, number: i64, malformed: bool) {
        let last = if malformed {
            &mut self.last_malformed
        } else {
            &mut self.last_row
        };
        // Two records may share a line: the CSV reader counts lines by `\n`, and a lone
        // `\r` ends a record too.
        let in_order = if malformed {
            number >= *last
        } else {
            number > *last
        };
        assert!(in_order, "{number} after {last} (malformed: {malformed})");
        *last = number;
    }
}

impl RowSink for Checked {
    fn rows(&mut self, rows: RawRows) -> smelt_ingest::Result<()> {
        let n = rows.batch.num_rows();
        assert_eq!(rows.rows.len(), n, "a row number per row");
        if let Some(extra) = &rows.extra {
            assert_eq!(extra.len(), n, "extra fields per row");
        }
        check_text(&rows.batch);
        for &r in &rows.rows {
            self.next(r, false);
        }
        Ok(())
    }

    fn malformed(&mut self, row: Malformed) -> smelt_ingest::Result<()> {
        self.next(row.line, true);
        Ok(())
    }
}

/// Every column of a landing batch is text, one value per row.
fn check_text(batch: &RecordBatch) {
    for c in batch.columns() {
        assert_eq!(c.data_type(), &DataType::Utf8, "landing columns are text");
    }
}

/// The CSV reader: the first byte picks the layout (header, separator, encoding, NULL
/// text), the rest is the file; read in batches of 3 rows.
pub fn csv(data: &[u8]) {
    let [options, file @ ..] = data else {
        return;
    };
    let layout = CsvLayout {
        header: options & 1 == 0,
        sep: [b',', b';', b'\t', b'|'][(options >> 1) as usize % 4],
        escape: (options & 8 != 0).then_some(b'\\'),
        encoding: if options & 16 != 0 {
            "shift_jis"
        } else {
            "utf-8"
        }
        .into(),
        null_value: (options & 32 != 0).then(|| "NULL".into()),
        ..CsvLayout::default()
    };
    let _ = smelt_ingest::csv::read_csv(file, "fuzz.csv", &layout, 3, &mut Checked::default());
}

/// The JSON-lines reader, in batches of 3 rows.
pub fn json_lines(data: &[u8]) {
    let _ = smelt_ingest::json::read_json(data, "fuzz.jsonl", 3, &mut Checked::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Delta log target reaches the change reader: a commit that adds nothing reads
    /// no rows, a truncated one fails with an error.
    #[test]
    fn the_delta_log_target_reads_the_fuzzed_commit() {
        let empty = b"\0{\"commitInfo\":{\"timestamp\":1,\"operation\":\"WRITE\"}}\n";
        assert_eq!(read_log(empty), Ok(0));
        let truncated = b"\0{\"commitInfo\":{\"timest";
        let err = read_log(truncated).unwrap_err();
        assert!(err.contains("version 1"), "{err}");
    }
}
