//! The copy-on-write upsert of `DeltaLakeTable` against real Delta tables: only files holding
//! a written key are rewritten, nothing is duplicated or lost, the change data feed says
//! what changed, and the watermark lands in the same commit.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use futures::TryStreamExt;
use smelt_delta::Lake;
use smelt_delta::source::DeltaSource;
use smelt_delta::table::DeltaLakeTable;
use smelt_engine::ports::{
    Aligned, ChangeSource, KeyedTable, OptimizePolicy, TableSink, TableView, Watermark,
    WatermarkStore, WriteStats,
};
use smelt_spec::TableName;

const APP: &str = "smelt/test";

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("val", DataType::Utf8, true),
    ]))
}

fn rows(ids: &[i64], val: &str) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(vec![val; ids.len()])),
        ],
    )
    .unwrap()
}

fn keys(ids: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec()))]).unwrap()
}

fn watermark(version: i64) -> Watermark {
    Watermark {
        app_id: APP.into(),
        version,
        run_id: format!("run-{version}"),
        report: None,
        extra: Vec::new(),
        source: None,
    }
}

fn name() -> TableName {
    TableName::parse("s.silver").unwrap()
}

/// Stages `ids` with value `val` (`replaces[i]`: id i is stored already).
async fn stage(silver: &mut DeltaLakeTable, ids: &[i64], val: &str, replaces: &[bool]) {
    silver
        .stage(
            rows(ids, val),
            &BooleanArray::from(replaces.to_vec()),
            &["id".into()],
        )
        .await
        .unwrap();
}

/// Stages `ids` with value `val` (`replaces[i]`: id i is stored already) and commits.
async fn write(
    silver: &mut DeltaLakeTable,
    ids: &[i64],
    val: &str,
    replaces: &[bool],
    version: i64,
) -> WriteStats {
    stage(silver, ids, val, replaces).await;
    silver
        .commit(&["id".into()], &watermark(version))
        .await
        .unwrap()
}

/// A fresh lake with the silver table created but not committed yet.
async fn new_silver() -> (tempfile::TempDir, Lake, DeltaLakeTable) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::new(dir.path()).unwrap();
    let mut silver = open(&lake).await;
    silver.create(schema()).await.unwrap();
    (dir, lake, silver)
}

async fn open(lake: &Lake) -> DeltaLakeTable {
    DeltaLakeTable::open(lake, &name())
        .await
        .unwrap()
        .with_rows_per_file(100)
}

/// The table as delta-rs' own DataFusion scan sees it: id → every value stored for it.
async fn contents(lake: &Lake) -> BTreeMap<i64, Vec<String>> {
    let ctx = lake.session().await.unwrap();
    let batches = ctx
        .sql("SELECT id, val FROM s.silver")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for b in batches {
        let ids = b.column(0).as_primitive::<Int64Type>();
        let vals = arrow::compute::cast(b.column(1), &DataType::Utf8).unwrap();
        let vals = vals.as_string::<i32>();
        for i in 0..b.num_rows() {
            out.entry(ids.value(i))
                .or_default()
                .push(vals.value(i).to_string());
        }
    }
    out
}

/// `_change_type` counts of the silver commits after version `after`, read from its log.
async fn changes(lake: &Lake, after: i64) -> BTreeMap<String, Vec<(i64, String)>> {
    let source = DeltaSource::open(lake, &name()).await.unwrap();
    let batches: Vec<_> = source.read(Some(after)).try_collect().await.unwrap();
    let mut out: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for b in batches {
        let ids = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let vals = b.column_by_name("val").unwrap().as_string::<i32>();
        let kinds = b.column_by_name("_change_type").unwrap().as_string::<i32>();
        for i in 0..b.num_rows() {
            out.entry(kinds.value(i).to_string())
                .or_default()
                .push((ids.value(i), vals.value(i).to_string()));
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_rewrite_only_the_files_that_hold_written_keys() {
    // First load: 1,000 rows in files of 100 (ids 0–99 land in the first, and so on).
    let (_dir, lake, mut silver) = new_silver().await;
    let ids: Vec<i64> = (0..1000).collect();
    let stats = write(&mut silver, &ids, "a", &vec![false; ids.len()], 1).await;
    assert_eq!((stats.files_added, stats.files_removed), (10, 0));
    assert_eq!(silver.watermark(APP).await.unwrap(), Some(1));

    // Lookup then write, as a run does: ids 5 and 150 live in two files; 1005 is new.
    let mut silver = open(&lake).await;
    let found = silver
        .lookup(keys(&[5, 150, 1005]), &["id".into(), "val".into()])
        .await
        .unwrap();
    assert_eq!(found.num_rows(), 2);
    let before = silver.version().unwrap();
    let stats = write(&mut silver, &[5, 150, 1005], "b", &[true, true, false], 2).await;
    assert_eq!(
        stats.files_removed, 2,
        "only the two files holding 5 and 150"
    );
    assert_eq!(stats.files_added, 3, "two rewritten files and the new rows");
    assert_eq!(silver.watermark(APP).await.unwrap(), Some(2));

    let table = contents(&lake).await;
    assert_eq!(table.len(), 1001);
    assert!(table.values().all(|v| v.len() == 1), "one row per id");
    assert_eq!(table[&5], vec!["b"]);
    assert_eq!(table[&150], vec!["b"]);
    assert_eq!(table[&1005], vec!["b"]);
    assert_eq!(table[&6], vec!["a"]);

    // The change data feed of that commit says exactly what changed.
    let feed = changes(&lake, before).await;
    assert_eq!(
        feed["update_preimage"],
        vec![(5, "a".into()), (150, "a".into())]
    );
    assert_eq!(
        feed["update_postimage"],
        vec![(5, "b".into()), (150, "b".into())]
    );
    assert_eq!(feed["insert"], vec![(1005, "b".into())]);
    assert_eq!(feed.len(), 3);

    // Replacing keys the last lookup did not cover probes every file.
    let mut silver = open(&lake).await;
    silver.lookup(keys(&[6]), &["id".into()]).await.unwrap();
    write(&mut silver, &[999], "c", &[true], 3).await;
    // And one without any lookup.
    let mut silver = open(&lake).await;
    write(&mut silver, &[0, 500], "d", &[true, true], 4).await;
    let table = contents(&lake).await;
    assert_eq!(table.len(), 1001);
    assert!(table.values().all(|v| v.len() == 1), "one row per id");
    assert_eq!(
        (
            table[&999][0].as_str(),
            table[&0][0].as_str(),
            table[&500][0].as_str()
        ),
        ("c", "d", "d")
    );

    // Nothing staged still moves the watermark, alone.
    let stats = write(&mut silver, &[], "x", &[], 5).await;
    assert_eq!((stats.files_added, stats.files_removed), (0, 0));
    assert_eq!(silver.watermark(APP).await.unwrap(), Some(5));
    assert_eq!(contents(&lake).await.len(), 1001);
}

/// The lookup lines stored rows up with the keys from what its probe matched; with keys
/// that repeat, it matches them by key. The default of the port (matching by key) is the
/// oracle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lookup_lines_stored_rows_up_with_the_keys() {
    let (_dir, lake, mut silver) = new_silver().await;
    let ids: Vec<i64> = (0..1000).collect();
    write(&mut silver, &ids, "a", &vec![false; ids.len()], 1).await;
    // A second file, so that rows come from more than one.
    write(&mut silver, &[1500, 1600], "b", &[false, false], 2).await;

    let silver = open(&lake).await;
    let columns = ["val".to_string(), "id".to_string()];
    for wanted in [
        &[999, 1005, 5, 1600, 150, 512][..],
        &[5, 150, 5, 1500][..],
        &[2000][..],
    ] {
        let aligned = silver.lookup_aligned(keys(wanted), &columns).await.unwrap();
        let found = silver.lookup(keys(wanted), &columns).await.unwrap();
        let by_key = Aligned::by_key(&keys(wanted), &found, &columns).unwrap();
        assert_eq!(aligned.matched, by_key.matched, "{wanted:?}");
        assert_eq!(aligned.columns, by_key.columns, "{wanted:?}");
        let ids = aligned.columns[1].as_primitive::<Int64Type>();
        for (i, &id) in wanted.iter().enumerate() {
            let stored = id < 1000 || id == 1500 || id == 1600;
            assert_eq!(aligned.matched.value(i), stored, "{id}");
            assert_eq!(ids.is_valid(i).then(|| ids.value(i)), stored.then_some(id));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_whose_every_row_is_replaced_is_removed_without_a_replacement() {
    let (_dir, lake, mut silver) = new_silver().await;
    let ids: Vec<i64> = (0..150).collect();
    write(&mut silver, &ids, "a", &vec![false; ids.len()], 1).await;

    // Every id of the second file (100–149) is rewritten.
    let mut silver = open(&lake).await;
    let ids: Vec<i64> = (100..150).collect();
    let stats = write(&mut silver, &ids, "b", &vec![true; ids.len()], 2).await;
    // The new rows' files only (50 rows: one file per core while each holds a quarter of
    // the 100 rows per file), no rewrite of the replaced file.
    assert_eq!(stats.files_removed, 1);
    assert!(matches!(stats.files_added, 1 | 2), "{stats:?}");
    let table = contents(&lake).await;
    assert_eq!(table.len(), 150);
    assert!(table.values().all(|v| v.len() == 1));
    assert_eq!(table[&149], vec!["b"]);
    assert_eq!(table[&99], vec!["a"]);
    assert!(table.keys().copied().eq(0..150));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_partitions_commit_once_and_each_file_is_rewritten_once() {
    let (_dir, lake, mut silver) = new_silver().await;
    // A first load staged in two partitions lands in one commit.
    let evens: Vec<i64> = (0..300).step_by(2).collect();
    let odds: Vec<i64> = (1..300).step_by(2).collect();
    stage(&mut silver, &evens, "a", &[false; 150]).await;
    stage(&mut silver, &odds, "a", &[false; 150]).await;
    let stats = silver.commit(&["id".into()], &watermark(1)).await.unwrap();
    assert_eq!((stats.version, stats.files_added), (0, 4));

    // Two partitions each replace a key of the same file (ids 0 and 2 live together).
    let mut silver = open(&lake).await;
    for ids in [[0i64], [2]] {
        silver
            .lookup(keys(&ids), &["id".into(), "val".into()])
            .await
            .unwrap();
        stage(&mut silver, &ids, "b", &[true]).await;
    }
    let stats = silver.commit(&["id".into()], &watermark(2)).await.unwrap();
    assert_eq!(stats.files_removed, 1, "the file holding 0 and 2, once");
    let table = contents(&lake).await;
    assert_eq!(table.len(), 300);
    assert!(table.values().all(|v| v.len() == 1));
    assert_eq!(
        (
            table[&0][0].as_str(),
            table[&2][0].as_str(),
            table[&1][0].as_str()
        ),
        ("b", "b", "a")
    );
    let feed = changes(&lake, 0).await;
    assert_eq!(
        feed["update_preimage"],
        vec![(0, "a".into()), (2, "a".into())]
    );
    assert_eq!(
        feed["update_postimage"],
        vec![(0, "b".into()), (2, "b".into())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_runs_are_compacted_without_changing_data_or_the_feed() {
    let (dir, lake, mut silver) = new_silver().await;
    write(&mut silver, &[0, 1], "a", &[false, false], 1).await;
    // Twelve runs of two new ids each: one small file per run, and files under a quarter of
    // 100 rows are folded together once eight of them exist.
    let mut compacted = false;
    for run in 1..=12i64 {
        let mut silver = open(&lake).await;
        let before = silver.version().unwrap();
        let ids = [2 * run, 2 * run + 1];
        let stats = write(&mut silver, &ids, "b", &[false, false], run + 1).await;
        compacted |= stats.files_removed > 0;
        // The feed of that commit holds the two inserts and nothing of the compaction.
        let feed = changes(&lake, before).await;
        assert_eq!(feed.len(), 1, "{feed:?}");
        assert_eq!(
            feed["insert"],
            vec![(ids[0], "b".into()), (ids[1], "b".into())]
        );
    }
    assert!(compacted, "eight small files trigger a compaction");
    let table = contents(&lake).await;
    assert!(table.keys().copied().eq(0..26));
    assert!(table.values().all(|v| v.len() == 1), "one row per id");
    let silver = open(&lake).await;
    assert_eq!(silver.watermark(APP).await.unwrap(), Some(13));
    let files =
        deltalake::open_table(url::Url::from_directory_path(dir.path().join("s/silver")).unwrap())
            .await
            .unwrap()
            .snapshot()
            .unwrap()
            .log_data()
            .num_files();
    assert!(files <= 8, "{files} files after 13 small runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_remove_rows_in_the_same_commit_with_delete_change_data() {
    let (_dir, lake, mut silver) = new_silver().await;
    let ids: Vec<i64> = (0..300).collect();
    write(&mut silver, &ids, "a", &vec![false; ids.len()], 1).await;

    // One run: 5 deleted, 150 updated, 1000 inserted; 250 deleted too.
    let mut silver = open(&lake).await;
    silver
        .lookup(keys(&[5, 150, 250, 1000]), &["id".into()])
        .await
        .unwrap();
    let before = silver.version().unwrap();
    stage(&mut silver, &[150, 1000], "b", &[true, false]).await;
    silver.stage_deletes(keys(&[5, 250])).await.unwrap();
    let stats = silver.commit(&["id".into()], &watermark(2)).await.unwrap();
    assert_eq!(stats.version, before + 1, "one commit");
    assert_eq!(stats.files_removed, 3, "the files of 5, 150 and 250");
    assert_eq!(silver.watermark(APP).await.unwrap(), Some(2));

    let table = contents(&lake).await;
    assert_eq!(table.len(), 299);
    assert!(!table.contains_key(&5) && !table.contains_key(&250));
    assert_eq!(table[&150], vec!["b"]);
    assert_eq!(table[&1000], vec!["b"]);

    let feed = changes(&lake, before).await;
    assert_eq!(feed["delete"], vec![(5, "a".into()), (250, "a".into())]);
    assert_eq!(feed["update_preimage"], vec![(150, "a".into())]);
    assert_eq!(feed["update_postimage"], vec![(150, "b".into())]);
    assert_eq!(feed["insert"], vec![(1000, "b".into())]);

    // Expiring by a column the table lacks is an error naming the table.
    let err = silver.expire("no_such_column", 0).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("`s.silver` has no column `no_such_column` to expire rows by"),
        "{err}"
    );
}

/// A commit of many data files lists them in the order of its rows, so a change reader
/// (which reads a commit's files in log order) gives the rows back in the order written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_files_are_committed_in_row_order() {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::new(dir.path()).unwrap();
    let mut table = DeltaLakeTable::open(&lake, &name())
        .await
        .unwrap()
        .without_compaction()
        .with_rows_per_file(3);
    table.create(schema()).await.unwrap();
    let ids: Vec<i64> = (0..300).collect();
    stage(&mut table, &ids, "v", &vec![false; ids.len()]).await;
    table.commit(&[], &watermark(1)).await.unwrap();
    let source = DeltaSource::open(&lake, &name()).await.unwrap();
    let mut read = Vec::new();
    let batches: Vec<_> = source.read(None).try_collect().await.unwrap();
    for b in batches {
        let column = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        read.extend(column.values().iter().copied());
    }
    assert_eq!(read, ids);
}

/// The lookup skips files whose key statistics hold none of the keys: with every file that
/// holds none of them made unreadable, a lookup of stored keys and one of new keys above
/// every stored key still succeed (each read of such a file would fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lookup_does_not_read_files_whose_key_range_holds_none_of_the_keys() {
    let (dir, lake, mut silver) = new_silver().await;
    let ids: Vec<i64> = (0..1000).collect();
    write(&mut silver, &ids, "a", &vec![false; ids.len()], 1).await;

    // Which files hold 5 or 150, read from the files themselves.
    let table_dir = dir.path().join("s").join("silver");
    let mut spoiled = 0;
    for entry in std::fs::read_dir(&table_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "parquet") {
            continue;
        }
        let file = std::fs::File::open(&path).unwrap();
        let reader =
            deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(file, 1024)
                .unwrap();
        let holds = reader.into_iter().any(|b| {
            let b = b.unwrap();
            let ids = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
            ids.values().iter().any(|i| *i == 5 || *i == 150)
        });
        if !holds {
            std::fs::write(&path, b"not parquet").unwrap();
            spoiled += 1;
        }
    }
    assert_eq!(spoiled, 8, "ten files of 100 ids, two of them kept");

    let silver = open(&lake).await;
    let found = silver
        .lookup(keys(&[5, 150]), &["id".into(), "val".into()])
        .await
        .unwrap();
    assert_eq!(found.num_rows(), 2);
    let found = silver
        .lookup(keys(&[1005, 2000]), &["id".into(), "val".into()])
        .await
        .unwrap();
    assert_eq!(found.num_rows(), 0);
    // A key inside a spoiled file's range reads it, and says so.
    let err = silver
        .lookup(keys(&[300]), &["id".into()])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("s.silver"), "{err}");
}

/// A NULL key is looked up in every file: key statistics bound no NULL, so skipping by
/// them would miss a stored row with a NULL key (and write it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_key_is_looked_up_whatever_the_statistics_say() {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::new(dir.path()).unwrap();
    let nullable = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("val", DataType::Utf8, true),
    ]));
    let mut silver = open(&lake).await;
    silver.create(Arc::clone(&nullable)).await.unwrap();
    // One file with 10..20 and a NULL key, another with 100..110.
    for (v, ids) in [
        (1, (10..20).map(Some).chain([None]).collect::<Vec<_>>()),
        (2, (100..110).map(Some).collect()),
    ] {
        let n = ids.len();
        let batch = RecordBatch::try_new(
            Arc::clone(&nullable),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(vec!["a"; n])),
            ],
        )
        .unwrap();
        silver
            .stage(batch, &BooleanArray::from(vec![false; n]), &["id".into()])
            .await
            .unwrap();
        silver.commit(&["id".into()], &watermark(v)).await.unwrap();
        silver = open(&lake).await;
    }
    let key_schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
    let keys = RecordBatch::try_new(
        key_schema,
        vec![Arc::new(Int64Array::from(vec![None, Some(105)]))],
    )
    .unwrap();
    let found = silver
        .lookup(keys, &["id".into(), "val".into()])
        .await
        .unwrap();
    assert_eq!(found.num_rows(), 2, "the NULL key's row and 105");
}

/// The change data files in the folder of the silver table, and those its log references.
fn change_data_files(lake: &Lake) -> (Vec<String>, Vec<String>) {
    let root = lake.table_url(&name()).unwrap().to_file_path().unwrap();
    let mut on_disk: Vec<String> = std::fs::read_dir(root.join("_change_data"))
        .map(|d| {
            d.map(|e| format!("_change_data/{}", e.unwrap().file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    let mut in_log = Vec::new();
    for entry in std::fs::read_dir(root.join("_delta_log")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let action: serde_json::Value = serde_json::from_str(line).unwrap();
                if let Some(p) = action["cdc"]["path"].as_str() {
                    in_log.push(p.to_string());
                }
            }
        }
    }
    on_disk.sort();
    in_log.sort();
    (on_disk, in_log)
}

/// Merge-on-read marks every row a run removes once, with one pre-image each, however
/// it stages: deletes before or after the new rows, one lookup or one per partition (the
/// commit then probes the files again), the rows found kept in memory or in a temporary
/// file; and no change data file is left out of the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_on_read_marks_each_removed_row_once_however_the_run_stages() {
    let (_dir, lake, mut silver) = new_silver().await;
    let ids: Vec<i64> = (0..300).collect();
    write(&mut silver, &ids, "a", &vec![false; ids.len()], 1).await;
    let columns = ["id".to_string()];
    let key = ["id".to_string()];

    // One lookup: the pre-images are the rows it found.
    let mut silver = open(&lake).await;
    silver.write_merge_on_read().await.unwrap();
    silver
        .lookup_aligned(keys(&[5, 150, 1000]), &columns)
        .await
        .unwrap();
    silver.stage_deletes(keys(&[5])).await.unwrap();
    stage(&mut silver, &[150, 1000], "b", &[true, false]).await;
    let before = silver.version().unwrap();
    let stats = silver.commit(&key, &watermark(2)).await.unwrap();
    assert_eq!(
        stats.files_added - stats.files_removed,
        1,
        "vectors, no rewrite"
    );
    let feed = changes(&lake, before).await;
    assert_eq!(feed["delete"], vec![(5, "a".into())]);
    assert_eq!(feed["update_preimage"], vec![(150, "a".into())]);
    assert_eq!(feed["update_postimage"], vec![(150, "b".into())]);
    assert_eq!(feed["insert"], vec![(1000, "b".into())]);

    // Deletes staged after the rows.
    let mut silver = open(&lake).await;
    silver.write_merge_on_read().await.unwrap();
    silver
        .lookup_aligned(keys(&[6, 151]), &columns)
        .await
        .unwrap();
    stage(&mut silver, &[151], "b", &[true]).await;
    silver.stage_deletes(keys(&[6])).await.unwrap();
    let before = silver.version().unwrap();
    silver.commit(&key, &watermark(3)).await.unwrap();
    let feed = changes(&lake, before).await;
    assert_eq!(feed["delete"], vec![(6, "a".into())]);
    assert_eq!(feed["update_preimage"], vec![(151, "a".into())]);
    assert_eq!(feed["update_postimage"], vec![(151, "b".into())]);

    // Two partitions, each looked up and staged: the second lookup keeps no rows, so
    // marking probes the files.
    let mut silver = open(&lake).await;
    silver.write_merge_on_read().await.unwrap();
    for (id, gone) in [(7i64, 8i64), (152, 9)] {
        silver
            .lookup_aligned(keys(&[id, gone]), &columns)
            .await
            .unwrap();
        silver.stage_deletes(keys(&[gone])).await.unwrap();
        stage(&mut silver, &[id], "b", &[true]).await;
    }
    let before = silver.version().unwrap();
    silver.commit(&key, &watermark(4)).await.unwrap();
    let feed = changes(&lake, before).await;
    assert_eq!(feed["delete"], vec![(8, "a".into()), (9, "a".into())]);
    assert_eq!(
        feed["update_preimage"],
        vec![(7, "a".into()), (152, "a".into())]
    );

    // One lookup whose rows wait for the commit in a temporary file, not in memory.
    let mut silver = open(&lake).await.with_found_in_memory(0);
    silver.write_merge_on_read().await.unwrap();
    silver
        .lookup_aligned(keys(&[10, 153, 2000]), &columns)
        .await
        .unwrap();
    silver.stage_deletes(keys(&[10])).await.unwrap();
    stage(&mut silver, &[153, 2000], "b", &[true, false]).await;
    let before = silver.version().unwrap();
    silver.commit(&key, &watermark(5)).await.unwrap();
    let feed = changes(&lake, before).await;
    assert_eq!(feed["delete"], vec![(10, "a".into())]);
    assert_eq!(feed["update_preimage"], vec![(153, "a".into())]);
    assert_eq!(feed["update_postimage"], vec![(153, "b".into())]);
    assert_eq!(feed["insert"], vec![(2000, "b".into())]);

    let table = contents(&lake).await;
    assert_eq!(table.len(), 300 - 5 + 2);
    assert!(table.values().all(|v| v.len() == 1), "one row per key");
    for id in [150, 151, 152, 153, 7, 1000, 2000] {
        assert_eq!(table[&id], vec!["b"], "{id}");
    }
    let (on_disk, in_log) = change_data_files(&lake);
    assert_eq!(on_disk, in_log, "change data files outside the log");
}

/// The active data files of the silver, as delta-rs lists them, each with its ids in file
/// order, read from the Parquet files themselves.
async fn ids_per_file(lake: &Lake) -> Vec<Vec<i64>> {
    let table = deltalake::open_table(lake.table_url(&name()).unwrap())
        .await
        .unwrap();
    let mut out = Vec::new();
    for uri in table.get_file_uris().unwrap() {
        let path = url::Url::parse(&uri)
            .ok()
            .and_then(|u| u.to_file_path().ok())
            .unwrap_or_else(|| uri.clone().into());
        let file = std::fs::File::open(&path).unwrap();
        let reader =
            deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(file, 1024)
                .unwrap();
        let mut ids = Vec::new();
        for b in reader {
            let b = b.unwrap();
            let col = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
            ids.extend(col.values().iter().copied());
        }
        out.push(ids);
    }
    out
}

/// Files whose id ranges overlap (as pairs of file numbers), from the ids they hold.
fn overlapping(files: &[Vec<i64>]) -> Vec<(usize, usize)> {
    let ranges: Vec<(i64, i64)> = files
        .iter()
        .filter(|ids| !ids.is_empty())
        .map(|ids| (*ids.iter().min().unwrap(), *ids.iter().max().unwrap()))
        .collect();
    let mut out = Vec::new();
    for (i, a) in ranges.iter().enumerate() {
        for (j, b) in ranges.iter().enumerate().skip(i + 1) {
            if a.0 <= b.1 && b.0 <= a.1 {
                out.push((i, j));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimize_cluster_rewrites_overlapping_files_in_key_order_and_spills_past_its_memory() {
    let (_dir, lake, mut silver) = new_silver().await;
    // Four runs of spread ids (run r: ids ≡ r mod 4 in 0..800), two files each: every
    // file's id range overlaps others.
    for r in 0..4i64 {
        let ids: Vec<i64> = (0..800).filter(|i| i % 4 == r).collect();
        write(&mut silver, &ids, "a", &vec![false; ids.len()], r + 1).await;
        silver = open(&lake).await;
    }
    // Merge-on-read updates: rows marked deleted in the old files, a new file.
    silver.write_merge_on_read().await.unwrap();
    let updated: Vec<i64> = (0..800).step_by(7).collect();
    silver
        .lookup_aligned(keys(&updated), &["id".to_string()])
        .await
        .unwrap();
    write(&mut silver, &updated, "b", &vec![true; updated.len()], 5).await;
    let before = contents(&lake).await;
    assert_eq!(before.len(), 800);
    assert!(!overlapping(&ids_per_file(&lake).await).is_empty());

    let policy = OptimizePolicy {
        keys: vec!["id".into()],
        cluster: true,
        memory_limit: Some(16 << 10),
        ..OptimizePolicy::default()
    };
    let mut silver = open(&lake).await;
    let stats = silver.optimize(&policy).await.unwrap();
    assert!(stats.version.is_some(), "{stats:?}");
    assert_eq!(stats.partitions_clustered, 1, "{stats:?}");
    assert_eq!(stats.rows_rewritten, 800, "{stats:?}");
    assert_eq!(stats.rows_purged, updated.len() as u64, "{stats:?}");
    assert_eq!(stats.files_added, 8, "{stats:?}");
    assert!(stats.bytes_spilled > 0, "16 KiB holds few rows: {stats:?}");

    // The same rows, as delta-rs reads them; each file sorted, 100 ids, ranges apart.
    assert_eq!(contents(&lake).await, before);
    let files = ids_per_file(&lake).await;
    assert_eq!(files.len(), 8);
    for ids in &files {
        assert_eq!(ids.len(), 100);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    }
    assert_eq!(overlapping(&files), Vec::<(usize, usize)>::new());

    // Clustered: nothing more to do.
    let mut silver = open(&lake).await;
    let again = silver.optimize(&policy).await.unwrap();
    assert_eq!(again.version, None, "{again:?}");
    assert_eq!(again.partitions_clustered, 0, "{again:?}");
}
