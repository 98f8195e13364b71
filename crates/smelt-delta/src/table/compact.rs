//! Compaction policy: the size of the data files smelt writes (`ROWS_PER_FILE`) and the
//! folding of small files into the commits that write data (`compact`,
//! `SMALL_FILES_TO_COMPACT`).

use std::collections::HashSet;
use std::sync::Arc;

use deltalake::kernel::Action;

use super::batches::read_whole;
use super::{ActiveFile, DeltaLakeTable};
use crate::error::{Context, Result};

/// Rows per data file smelt writes (about 10 MB of Parquet for seed 000's 20 columns):
/// small enough that a rewrite spreads over all cores and holds only a few files in
/// memory, large enough to keep the file count low.
pub const ROWS_PER_FILE: usize = 256 * 1024;

/// Small files (under a quarter of the target rows) that trigger a compaction in the next
/// commit that writes data.
pub const SMALL_FILES_TO_COMPACT: usize = 8;

impl DeltaLakeTable {
    /// Folds small data files (under a quarter of `rows_per_file` rows) into one, once at
    /// least [`SMALL_FILES_TO_COMPACT`] of them exist, so that many small runs do not leave
    /// many small files behind. At most `rows_per_file` rows per commit, smallest files
    /// first, none of `skip` (files this commit rewrites anyway). The actions do not change
    /// data (`dataChange: false`): change feed readers skip them.
    pub(super) async fn compact(
        &self,
        skip: &HashSet<String>,
        keys: &[String],
    ) -> Result<Vec<Action>> {
        let table = self.table()?;
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        if !snapshot.metadata().partition_columns().is_empty() {
            return Ok(Vec::new());
        }
        let schema = snapshot.snapshot().arrow_schema();
        let small_rows = (self.rows_per_file / 4).max(1);
        let mut small: Vec<(usize, ActiveFile)> = self
            .active_files(table)
            .await?
            .into_iter()
            .filter(|f| !skip.contains(&f.file.path))
            .filter_map(|f| f.rows.filter(|&r| r < small_rows).map(|r| (r, f)))
            .collect();
        if small.len() < SMALL_FILES_TO_COMPACT {
            return Ok(Vec::new());
        }
        small.sort_by_key(|(rows, _)| *rows);
        let mut total = 0;
        let mut chosen = Vec::new();
        for (rows, file) in small {
            if chosen.len() >= 2 && total + rows > self.rows_per_file {
                break;
            }
            total += rows;
            chosen.push(file);
        }
        let store = table.object_store();
        let name = self.name.to_string();
        let mut batches = Vec::with_capacity(chosen.len());
        for f in &chosen {
            batches
                .push(read_whole(Arc::clone(&store), &name, &f.file, None, None, &schema).await?);
        }
        let merged = arrow::compute::concat_batches(&schema, &batches)?;
        drop(batches);
        let mut actions = Vec::with_capacity(chosen.len() + 1);
        for mut add in self.write_data(&merged, keys).await? {
            add.data_change = false;
            actions.push(Action::Add(add));
        }
        for f in chosen {
            let mut remove = f.remove;
            remove.data_change = false;
            actions.push(Action::Remove(remove));
        }
        tracing::debug!(table = %self.name, files = actions.len() - 1, rows = total, "compacted small files");
        Ok(actions)
    }
}
