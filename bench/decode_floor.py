"""How long decoding a Delta table's current files takes, all columns or some, on this
machine (pyarrow, 2 threads): the floor under any increment that must read the pre-images of
keys spread over every file. See bench/NOTES.md.

    bench/.venv/bin/python bench/decode_floor.py <delta table dir> [col,col,...]

Prints the best of three warm reads: its wall time and the CPU time of all its threads (user
and system). The table must have no deletion vectors (the copy-on-write silver of a bench
run: bench/out/<scale>/work/smelt/bench/product2_silver).
"""

import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

pa.set_cpu_count(2)
pa.set_io_thread_count(2)
files = [f.removeprefix("file://") for f in DeltaTable(sys.argv[1]).file_uris()]
columns = sys.argv[2].split(",") if len(sys.argv) > 2 else None
best, cpu, rows = None, None, 0
for _ in range(4):  # the first read warms the page cache
    t0, c0 = time.perf_counter(), time.process_time()
    rows = pq.ParquetDataset(files).read(columns=columns, use_threads=True).num_rows
    took, used = time.perf_counter() - t0, time.process_time() - c0
    if best is None or took < best:
        best, cpu = took, used
print(f"{len(files)} files, {rows:,} rows, columns {columns or 'all'}: best {best:.3f} s, CPU {cpu:.3f} s")
