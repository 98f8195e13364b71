"""Peer of bench/ingest.sh: part.tbl -> a Delta table of text columns, streamed."""
import time

import pyarrow as pa
import pyarrow.csv as pc
from deltalake import write_deltalake

# part.tbl ends every line with `|`: a tenth, empty column, dropped.
names = ["p_partkey", "p_name", "p_mfgr", "p_brand", "p_type", "p_size",
         "p_container", "p_retailprice", "p_comment", "_c9"]
started = time.time()
reader = pc.open_csv(
    "landing/part.tbl",
    read_options=pc.ReadOptions(column_names=names, block_size=64 << 20),
    parse_options=pc.ParseOptions(delimiter="|"),
    convert_options=pc.ConvertOptions(column_types={n: pa.string() for n in names}),
)
schema = reader.schema.remove(9)
batches = (b.drop_columns(["_c9"]) for b in reader)
write_deltalake("lake_py/part_raw", pa.RecordBatchReader.from_batches(schema, batches), mode="overwrite")
print(f"pyarrow csv + deltalake: {time.time() - started:.2f} s")
