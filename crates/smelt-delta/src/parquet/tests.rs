//! Tests of reading rows of Parquet files (selections, deletion vectors, batches), and of
//! writing change data files.

use deltalake::parquet::arrow::ArrowWriter;
use deltalake::parquet::file::reader::{FileReader as _, SerializedFileReader};
use object_store::ObjectStoreExt;

use super::*;

/// The row numbers a selection keeps.
fn kept(s: &RowSelection) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    for run in s.iter() {
        if !run.skip {
            out.extend(at..at + run.row_count);
        }
        at += run.row_count;
    }
    out
}

#[test]
fn deletion_vectors_select_the_rows_they_leave_or_delete() {
    let left = except(&[0, 3, 4, 9], 10, "t/f").unwrap();
    assert_eq!(kept(&left), [1, 2, 5, 6, 7, 8]);
    assert_eq!(kept(&except_all(&[0, 1, 2])), Vec::<usize>::new());
    let only = selection([2u64, 3, 7].into_iter(), 10);
    assert_eq!(kept(&only), [2, 3, 7]);
    let err = except(&[10], 10, "t/f").unwrap_err().to_string();
    assert!(
        err.contains("deletes row 10, but the file has 10 rows"),
        "{err}"
    );
    assert!(check_rows(&[11], 5, "t/f").is_err());
}

/// A file of `n` rows whose columns hold each row's number (`n`, and as text in `s`,
/// `t` and `u`, and as bytes in `b`, NULL every 11th row), in one row group. `u` is longer
/// than a string view holds inline.
async fn numbered_file(n: usize) -> (ObjectStoreRef, FileRef) {
    use arrow::array::Int64Array;
    let store: ObjectStoreRef = Arc::new(object_store::memory::InMemory::new());
    let batch = RecordBatch::try_from_iter([
        (
            "n",
            Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
        ),
        (
            "s",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("s{i}")),
            )),
        ),
        (
            "t",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("{}", i % 97)),
            )),
        ),
        (
            "u",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("the text of row number {i}")),
            )),
        ),
        (
            "b",
            Arc::new(arrow::array::BinaryArray::from_iter((0..n).map(|i| {
                (i % 11 != 0).then(|| format!("bytes of {i}").into_bytes())
            }))),
        ),
    ])
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let size = bytes.len() as i64;
    store
        .put(&object_store::path::Path::from("f.parquet"), bytes.into())
        .await
        .unwrap();
    let file = FileRef::from_log("f.parquet".into(), size, HashMap::new(), FileRows::All);
    (store, file)
}

/// The row numbers a read returned, checking every column agrees with `n`.
fn numbers(batches: &[RecordBatch]) -> Vec<u64> {
    use arrow::array::{Array, AsArray, Int64Array};
    let mut out = Vec::new();
    for b in batches {
        let n = b.column_by_name("n").unwrap();
        let n = n.as_any().downcast_ref::<Int64Array>().unwrap();
        let s = b.column_by_name("s").unwrap().as_string::<i32>();
        let t = b.column_by_name("t").unwrap().as_string::<i32>();
        let u = b.column_by_name("u").unwrap().as_string::<i32>();
        let bytes = b.column_by_name("b").unwrap().as_binary::<i32>();
        for i in 0..b.num_rows() {
            let v = n.value(i);
            assert_eq!(s.value(i), format!("s{v}"));
            assert_eq!(t.value(i), format!("{}", v % 97));
            assert_eq!(u.value(i), format!("the text of row number {v}"));
            match v % 11 {
                0 => assert!(bytes.is_null(i), "row {v}"),
                _ => assert_eq!(bytes.value(i), format!("bytes of {v}").as_bytes()),
            }
            out.push(v as u64);
        }
    }
    out
}

/// Scattered rows are read in batches of a few thousand: more rows than one batch
/// holds come back whole and in order, with and without a deletion vector, with the
/// columns decoded on one core or split over several, and strings and bytes as the
/// file's types (they are decoded as views first).
#[tokio::test]
async fn scattered_rows_read_across_many_batches_come_back_whole_and_in_order() {
    let total = 120_000;
    let (store, file) = numbered_file(total).await;
    let picked: Vec<u32> = (0..total as u32)
        .filter(|r| r % 7 == 3 || r % 13 == 0)
        .collect();
    assert!(picked.len() > 2 * SELECTED_BATCH_ROWS);
    for split in [false, true] {
        let batches = read(Arc::clone(&store), "t", &file, None, Some(&picked), split)
            .await
            .unwrap();
        let expected: Vec<u64> = picked.iter().map(|&r| r as u64).collect();
        assert_eq!(numbers(&batches), expected, "split columns: {split}");
        assert!(batches.len() >= 3, "{} batches", batches.len());
    }
    // Sparse rows (long runs skipped rather than decoded and filtered).
    let sparse: Vec<u32> = (0..total as u32).filter(|r| r % 101 == 50).collect();
    let batches = read(Arc::clone(&store), "t", &file, None, Some(&sparse), true)
        .await
        .unwrap();
    let expected: Vec<u64> = sparse.iter().map(|&r| r as u64).collect();
    assert_eq!(numbers(&batches), expected);
    // Under a deletion vector, rows are numbered among those it leaves.
    let deleted: Vec<u64> = (0..total as u64).filter(|r| r % 5 == 0).collect();
    let left: Vec<u64> = (0..total as u64).filter(|r| r % 5 != 0).collect();
    let file = FileRef {
        rows: FileRows::Except(deleted.into()),
        ..file
    };
    let relative: Vec<u32> = (0..left.len() as u32).filter(|r| r % 3 == 1).collect();
    let expected: Vec<u64> = relative.iter().map(|&r| left[r as usize]).collect();
    let batches = read(Arc::clone(&store), "t", &file, None, Some(&relative), true)
        .await
        .unwrap();
    assert_eq!(numbers(&batches), expected);
    let every = read(Arc::clone(&store), "t", &file, None, None, true)
        .await
        .unwrap();
    assert_eq!(numbers(&every), left);
    // A vector of a few rows.
    let file = FileRef {
        rows: FileRows::Except(vec![0, 7, 119_999].into()),
        ..file
    };
    let every = read(store, "t", &file, None, None, true).await.unwrap();
    let left: Vec<u64> = (1..119_999).filter(|&r| r != 7).collect();
    assert_eq!(numbers(&every), left);
}

fn except_all(rows: &[u64]) -> RowSelection {
    except(rows, rows.len(), "t/f").unwrap()
}

/// A change data file larger than a row group is streamed out in row groups and reads
/// back whole; its action's size is the stored object's. Parquet's own reader is the
/// oracle.
#[tokio::test]
async fn change_data_files_are_written_a_row_group_at_a_time() {
    use arrow::array::Int64Array;
    let n = 2 * CHANGE_DATA_ROW_GROUP + 5;
    let store: ObjectStoreRef = Arc::new(object_store::memory::InMemory::new());
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
        ),
        (
            "_change_type",
            Arc::new(StringArray::from_iter_values((0..n).map(|i| {
                if i % 2 == 0 {
                    "insert"
                } else {
                    "update_postimage"
                }
            }))),
        ),
    ])
    .unwrap();
    let cdc = write_change_data(Arc::clone(&store), "t", &batch, &["id".into()])
        .await
        .unwrap();
    assert!(cdc.path.starts_with("_change_data/cdc-"), "{}", cdc.path);
    let location = object_store::path::Path::from(cdc.path.as_str());
    let bytes = store.get(&location).await.unwrap().bytes().await.unwrap();
    assert_eq!(cdc.size, bytes.len() as i64);
    let reader = SerializedFileReader::new(bytes.clone()).unwrap();
    let groups: Vec<i64> = reader
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows())
        .collect();
    let full = CHANGE_DATA_ROW_GROUP as i64;
    assert_eq!(groups, [full, full, 5]);
    let read: Vec<RecordBatch> =
        deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1 << 20)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    let read = arrow::compute::concat_batches(&read[0].schema(), &read).unwrap();
    assert_eq!(read.columns(), batch.columns());
}
