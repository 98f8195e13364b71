"""How long encoding what one merge-on-read increment must write takes on this machine
(pyarrow, the two files written at once on 2 threads): the floor under any increment that
keeps Delta's change data feed. See bench/NOTES.md.

    bench/.venv/bin/python bench/encode_floor.py <delta table dir> <new rows> <replaced rows>

Takes the first <new rows> rows of the table as the increment's new rows and the first
<replaced rows> of them as the rows they replace, and writes, as smelt does (Snappy, no
dictionary on `Id`):
* the data file: the new rows, statistics per column chunk;
* the change data: the new rows with `_change_type` (post-images and inserts), and the
  replaced rows with `_change_type` = update_preimage, without statistics.
Prints the best of three runs for the data file and change data written at once, and for
each alone: wall time and the CPU time of all threads (user and system). The table must have
no deletion vectors (the copy-on-write silver of a bench run:
bench/out/<scale>/work/smelt/bench/product2_silver).
"""

import io
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

pa.set_cpu_count(2)
pa.set_io_thread_count(2)
files = [f.removeprefix("file://") for f in DeltaTable(sys.argv[1]).file_uris()]
new_rows, replaced_rows = int(sys.argv[2]), int(sys.argv[3])
table = pq.ParquetDataset(files).read(use_threads=True)
new = table.slice(0, new_rows).combine_chunks()
replaced = new.slice(0, replaced_rows)


def with_kind(t, kinds):
    return t.append_column("_change_type", pa.array(kinds, pa.string()))


kinds = ["update_postimage"] * replaced_rows + ["insert"] * (new_rows - replaced_rows)
change_data = pa.concat_tables(
    [with_kind(new, kinds), with_kind(replaced, ["update_preimage"] * replaced_rows)]
).combine_chunks()


def write(t, statistics, row_group):
    sink = io.BytesIO()
    pq.write_table(
        t,
        sink,
        compression="snappy",
        use_dictionary=[c for c in t.column_names if c != "Id"],
        write_statistics=statistics,
        row_group_size=row_group,
    )
    return sink.tell()


def data():
    return write(new, True, 1024 * 1024)


def cdc():
    return write(change_data, False, 131_072)


def both():
    with ThreadPoolExecutor(2) as pool:
        return sum(f.result() for f in [pool.submit(data), pool.submit(cdc)])


for name, job in [("data file and change data at once", both), ("data file", data), ("change data", cdc)]:
    best, cpu, size = None, None, 0
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        size = job()
        took, used = time.perf_counter() - t0, time.process_time() - c0
        if best is None or took < best:
            best, cpu = took, used
    print(f"{name}: {size:,} bytes, best {best:.3f} s, CPU {cpu:.3f} s")
