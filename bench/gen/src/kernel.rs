//! An independent Delta reader for checks: a table's rows as delta-rs' kernel scans them
//! (deletion vectors applied by the kernel, not by smelt). The tests and the benchmark's
//! equality check read smelt's merge-on-read silver with it.

use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use delta_kernel::engine::arrow_data::ArrowEngineData;

/// The table URL of the Delta table in `dir`, delta-rs' kernel engine over its store, and
/// the runtime the engine's reads run on (kept until they are done).
type Opened = (
    url::Url,
    Arc<dyn delta_kernel::Engine>,
    tokio::runtime::Runtime,
);

fn engine(dir: &Path) -> Result<Opened, Box<dyn std::error::Error>> {
    let dir = std::fs::canonicalize(dir)?;
    let url = url::Url::from_directory_path(&dir)
        .map_err(|()| format!("{}: not a folder", dir.display()))?;
    let rt = tokio::runtime::Runtime::new()?;
    let engine = rt.block_on(async {
        let table = deltalake::open_table(url.clone()).await?;
        Ok::<_, deltalake::DeltaTableError>(table.log_store().engine(None))
    })?;
    Ok((url, engine, rt))
}

/// The record batches of a kernel scan's results.
fn batches(
    data: impl Iterator<Item = delta_kernel::DeltaResult<Box<dyn delta_kernel::EngineData>>>,
) -> Result<Vec<RecordBatch>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for data in data {
        out.push(
            ArrowEngineData::try_from_engine_data(data?)?
                .record_batch()
                .clone(),
        );
    }
    Ok(out)
}

/// Every live row of the Delta table in `dir`, as the kernel's scan returns them.
pub fn scan(dir: &Path) -> Result<Vec<RecordBatch>, Box<dyn std::error::Error>> {
    let (url, engine, _runtime) = engine(dir)?;
    let snapshot = delta_kernel::Snapshot::builder_for(url.as_str()).build(engine.as_ref())?;
    let scan = snapshot.scan_builder().build()?;
    batches(scan.execute(Arc::clone(&engine))?)
}

/// The change feed of the Delta table in `dir` over versions `start..=end`, as the kernel's
/// change-feed scan returns it (change data files where a commit has them, else the rows
/// its removes and deletion vectors delete and its adds insert): the table's columns,
/// `_change_type`, `_commit_version`, `_commit_timestamp`.
pub fn changes(
    dir: &Path,
    start: u64,
    end: Option<u64>,
) -> Result<Vec<RecordBatch>, Box<dyn std::error::Error>> {
    let (url, engine, _runtime) = engine(dir)?;
    let changes =
        delta_kernel::table_changes::TableChanges::try_new(url, engine.as_ref(), start, end)?;
    let scan = changes.into_scan_builder().build()?;
    batches(scan.execute(Arc::clone(&engine))?)
}
