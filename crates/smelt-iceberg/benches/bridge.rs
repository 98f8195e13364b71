//! What moving batches between Arrow 59 (smelt) and Arrow 58 (the `iceberg` crate) costs:
//! the C Data Interface (what `smelt_iceberg::bridge` does) beside an Arrow IPC round trip
//! (encode on one side, decode on the other: the safe alternative), on a product2-shaped
//! batch (20 string columns).
//!
//!     cargo bench -p smelt-iceberg --bench bridge [-- ROWS]

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use smelt_iceberg::bridge;

fn batch(rows: usize) -> RecordBatch {
    let columns = 20;
    let schema = Arc::new(Schema::new(
        (0..columns)
            .map(|c| Field::new(format!("c{c}"), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = (0..columns)
        .map(|c| {
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|r| format!("value-{c}-{r:08}")),
            )) as ArrayRef
        })
        .collect();
    RecordBatch::try_new(schema, arrays).unwrap()
}

fn ipc_59_to_58(batch: &RecordBatch) -> arrow58_array::RecordBatch {
    let mut bytes = Vec::new();
    {
        let mut w =
            arrow::ipc::writer::StreamWriter::try_new(&mut bytes, batch.schema_ref()).unwrap();
        w.write(batch).unwrap();
        w.finish().unwrap();
    }
    let mut r =
        arrow58_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    r.next().unwrap().unwrap()
}

fn ipc_58_to_59(batch: &arrow58_array::RecordBatch) -> RecordBatch {
    let mut bytes = Vec::new();
    {
        let mut w =
            arrow58_ipc::writer::StreamWriter::try_new(&mut bytes, batch.schema_ref()).unwrap();
        w.write(batch).unwrap();
        w.finish().unwrap();
    }
    let mut r =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    r.next().unwrap().unwrap()
}

fn best_of(n: usize, mut f: impl FnMut()) -> f64 {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let rows: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let b = batch(rows);
    let bytes: usize = b.get_array_memory_size();
    let schema58 = Arc::new(bridge::schema_to_58(b.schema_ref()).unwrap());
    let ffi = best_of(5, || {
        let there = bridge::batch_to_58(b.clone(), &schema58).unwrap();
        let back = bridge::batch_from_58(there, b.schema_ref()).unwrap();
        assert_eq!(back.num_rows(), rows);
    });
    let ipc = best_of(5, || {
        let there = ipc_59_to_58(&b);
        let back = ipc_58_to_59(&there);
        assert_eq!(back.num_rows(), rows);
    });
    println!(
        "{rows} rows x 20 string columns ({:.0} MiB): round trip 59 -> 58 -> 59, best of 5",
        bytes as f64 / (1 << 20) as f64
    );
    println!("  C Data Interface: {:>9.3} ms", ffi * 1e3);
    println!("  Arrow IPC:        {:>9.3} ms", ipc * 1e3);
}
