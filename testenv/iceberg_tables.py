"""The Iceberg oracle of the tests: pyiceberg (a SQL catalog on SQLite) writes the tables
smelt reads, and reads the tables smelt writes.

    iceberg_tables.py --uri sqlite:////abs/catalog.db --warehouse /abs/wh|s3://b/wh --catalog ice
        [--prop s3.endpoint=http://127.0.0.1:9000 ...] < steps

`steps` is one JSON object per line:

    {"create": "ns.t", "columns": ["id", "status"]}      all-string columns (bronze)
    {"create": "ns.t", "schema": [["id", "long"], ["ts", "timestamptz"], ["amount", "decimal(10,2)"]]}
    {"create": "ns.t", "columns": [...], "partition_by": "status"}   identity-partitioned
    {"append": "ns.t", "rows": [{"id": "1", "status": "active"}]}
    {"overwrite": "ns.t", "where": "id = '1'", "rows": [...]}   copy-on-write
    {"delete": "ns.t", "where": "id = '2'"}                     copy-on-write
    {"mor_delete": "ns.t", "column": "id", "values": ["2"], "rows": [...]}
        merge-on-read, as Spark, Flink and Trino write it: one position-delete file marks the live
        rows whose `column` is one of `values`, and `rows` (optional) go to a new data file, in
        one snapshot (`delete`, or `overwrite` with rows: an update). pyiceberg 0.12 writes
        deletes copy-on-write only, so this builds the snapshot from its manifest writers.
        "own": true also marks matching rows of the snapshot's new data file (as Flink deletes
        rows within one checkpoint); "repeat": true lists again the positions earlier delete
        files removed in each file it touches (as Spark's file-scoped delete files do).
    {"eq_delete": "ns.t", "column": "id", "values": ["2"], "rows": [...]}
        the same with an equality-delete file, as Flink writes upserts: every row written before
        whose `column` is one of `values` is deleted. pyiceberg 0.12 cannot read such tables.
    {"expire": "ns.t", "sequences": [1, 2]}   expires the snapshots with those sequence numbers
    {"rename": "ns.t", "from": "amount", "to": "total"}
    {"add_column": "ns.t", "name": "note"}      a string column
    {"scan": "ns.t"}           prints {"rows": [...]} (sorted by every column)
    {"scan": "ns.t", "snapshot_id": id}    the same, as of that snapshot
    {"scan": "ns.t", "as_of_ms": ms}       the same, as of the snapshot current at that time
    {"snapshots": "ns.t"}      prints {"snapshots": [{"id", "parent", "sequence", "timestamp_ms",
                               "operation", "summary"}]}, oldest first
    {"schema": "ns.t"}         prints {"columns": [[name, type, required], ...]}
    {"properties": "ns.t"}     prints {"properties": {...}}

Each printed result is one JSON line on stdout.
"""

import argparse
import datetime
import decimal
import json
import sys

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.types import StringType


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--uri", required=True, help="sqlite:///… (SQL catalog) or http://… (REST catalog)")
    p.add_argument("--warehouse", required=True)
    p.add_argument("--catalog", default="ice")
    p.add_argument("--prop", action="append", default=[], help="catalog property key=value")
    args = p.parse_args()
    warehouse = args.warehouse if "://" in args.warehouse else f"file://{args.warehouse}"
    props = dict(kv.split("=", 1) for kv in args.prop)
    if "s3.endpoint" in props:
        # pyarrow's S3 client gives up on a request that moves no byte for 3 s (the AWS SDK's
        # default): a loopback server on a CI machine busy with a Spark cluster can stall
        # longer than that (CI, 2026-12-05: `UploadPart ... Timeout was reached`).
        props.setdefault("s3.connect-timeout", "60")
        props.setdefault("s3.request-timeout", "300")
    if args.uri.startswith("http"):
        catalog = RestCatalog(args.catalog, uri=args.uri, warehouse=warehouse, **props)
    else:
        catalog = SqlCatalog(args.catalog, uri=args.uri, warehouse=warehouse, **props)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        step = json.loads(line)
        if "create" in step:
            name = step["create"]
            ns = name.split(".")[0]
            catalog.create_namespace_if_not_exists(ns)
            if "schema" in step:
                schema = pa.schema([pa.field(c, arrow_type(t)) for c, t in step["schema"]])
            else:
                schema = pa.schema([pa.field(c, pa.string()) for c in step["columns"]])
            table = catalog.create_table(name, schema=schema)
            if "partition_by" in step:
                from pyiceberg.transforms import IdentityTransform

                with table.update_spec() as spec:
                    spec.add_field(step["partition_by"], IdentityTransform(), step["partition_by"])
        elif "append" in step:
            t = catalog.load_table(step["append"])
            t.append(arrow_rows(t, step["rows"]))
        elif "overwrite" in step:
            t = catalog.load_table(step["overwrite"])
            t.overwrite(arrow_rows(t, step["rows"]), overwrite_filter=parse_filter(step["where"]))
        elif "delete" in step:
            t = catalog.load_table(step["delete"])
            t.delete(delete_filter=parse_filter(step["where"]))
        elif "mor_delete" in step:
            mor_delete(catalog, step)
        elif "eq_delete" in step:
            eq_delete(catalog, step)
        elif "expire" in step:
            t = catalog.load_table(step["expire"])
            ids = [s.snapshot_id for s in t.snapshots() if s.sequence_number in step["sequences"]]
            t.maintenance.expire_snapshots().by_ids(ids).commit()
        elif "rename" in step:
            t = catalog.load_table(step["rename"])
            with t.update_schema() as u:
                u.rename_column(step["from"], step["to"])
        elif "add_column" in step:
            t = catalog.load_table(step["add_column"])
            with t.update_schema() as u:
                u.add_column(step["name"], StringType())
        elif "scan" in step:
            t = catalog.load_table(step["scan"])
            snapshot_id = step.get("snapshot_id")
            if "as_of_ms" in step:
                snapshot_id = t.snapshot_as_of_timestamp(step["as_of_ms"]).snapshot_id
            rows = t.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
            rows.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))
            print(json.dumps({"rows": rows}, default=str), flush=True)
        elif "snapshots" in step:
            t = catalog.load_table(step["snapshots"])
            out = []
            current = t.current_snapshot()
            chain = []
            while current is not None:
                chain.append(current)
                current = t.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
            for s in reversed(chain):
                out.append({
                    "id": s.snapshot_id,
                    "parent": s.parent_snapshot_id,
                    "sequence": s.sequence_number,
                    "timestamp_ms": s.timestamp_ms,
                    "operation": s.summary.operation.value if s.summary else None,
                    "summary": dict(s.summary.additional_properties) if s.summary else {},
                })
            print(json.dumps({"snapshots": out}), flush=True)
        elif "schema" in step:
            t = catalog.load_table(step["schema"])
            columns = [[f.name, str(f.field_type), f.required] for f in t.schema().fields]
            print(json.dumps({"columns": columns}), flush=True)
        elif "properties" in step:
            t = catalog.load_table(step["properties"])
            print(json.dumps({"properties": dict(t.properties)}), flush=True)
        else:
            raise SystemExit(f"unknown step: {line}")


# The reserved field ids of a position-delete file's columns (Iceberg spec).
FILE_PATH_ID, POS_ID = 2147483546, 2147483545


def mor_delete(catalog, step):
    import uuid

    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    t = catalog.load_table(step["mor_delete"])
    column, values = step["column"], set(step["values"])
    rows = step.get("rows") or []
    data_files = list(_dataframe_to_data_files(t.metadata, arrow_rows(t, rows), t.io)) if rows else []
    # The positions of the live rows to delete, file by file (positions already deleted skipped).
    marks = []
    for task in t.scan().plan_files():
        path = task.file.file_path
        gone = set()
        for d in task.delete_files:
            with t.io.new_input(d.file_path).open() as f:
                dt = pq.read_table(f)
            gone |= {p for fp, p in zip(dt["file_path"].to_pylist(), dt["pos"].to_pylist()) if fp == path}
        with t.io.new_input(path).open() as f:
            data = pq.read_table(f, columns=[column])
        new = [(path, pos) for pos, v in enumerate(data[column].to_pylist()) if v in values and pos not in gone]
        marks += new
        if new and step.get("repeat"):
            marks += [(path, pos) for pos in gone]
    if step.get("own"):
        for df in data_files:
            with t.io.new_input(df.file_path).open() as f:
                data = pq.read_table(f, columns=[column])
            marks += [(df.file_path, pos) for pos, v in enumerate(data[column].to_pylist()) if v in values]
    marks.sort()
    schema = pa.schema([
        pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_ID)}),
    ])
    deletes = pa.table([pa.array([m[0] for m in marks]), pa.array([m[1] for m in marks], pa.int64())], schema=schema)
    location = f"{t.location().rstrip('/')}/data/{uuid.uuid4()}-deletes.parquet"
    with t.io.new_output(location).create() as f:
        pq.write_table(deletes, f)
    size = len(t.io.new_input(location))
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(marks),
        file_size_in_bytes=size,
        sort_order_id=None,
        spec_id=t.metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
    )
    commit_deletes(t, delete_file, data_files, {"added-position-deletes": str(len(marks))})


def eq_delete(catalog, step):
    import uuid

    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    t = catalog.load_table(step["eq_delete"])
    column = step["column"]
    field = t.schema().find_field(column)
    arrow_field = t.schema().as_arrow().field(column)
    schema = pa.schema([arrow_field.with_metadata({"PARQUET:field_id": str(field.field_id)})])
    deletes = pa.table([pa.array(step["values"], arrow_field.type)], schema=schema)
    location = f"{t.location().rstrip('/')}/data/{uuid.uuid4()}-eq-deletes.parquet"
    with t.io.new_output(location).create() as f:
        pq.write_table(deletes, f)
    delete_file = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=deletes.num_rows,
        file_size_in_bytes=len(t.io.new_input(location)),
        sort_order_id=None,
        spec_id=t.metadata.default_spec_id,
        equality_ids=[field.field_id],
        key_metadata=None,
    )
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    rows = step.get("rows") or []
    data_files = list(_dataframe_to_data_files(t.metadata, arrow_rows(t, rows), t.io)) if rows else []
    commit_deletes(t, delete_file, data_files, {"added-equality-deletes": str(deletes.num_rows)})


def commit_deletes(t, delete_file, data_files, summary):
    """Commits one snapshot that adds `delete_file` (in a delete manifest) and `data_files`:
    `delete`, or `overwrite` with data files."""
    from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestWriterV2
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self):
            return ManifestContent.DELETES

        @property
        def _meta(self):
            return {**super()._meta, "content": "deletes"}

    class MergeOnRead(_FastAppendFiles):
        def _manifests(self):
            manifests = super()._manifests()
            writer = DeleteManifestWriter(
                self._transaction.table_metadata.spec(), self.schema(), self.new_manifest_output(),
                self._snapshot_id, self._compression,
            )
            with writer:
                writer.add(ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                    sequence_number=None, file_sequence_number=None, data_file=delete_file,
                ))
            return [writer.to_manifest_file()] + manifests

    with t.transaction() as tx:
        producer = MergeOnRead(
            operation=Operation.OVERWRITE if data_files else Operation.DELETE,
            transaction=tx,
            io=t.io,
            snapshot_properties={"added-delete-files": "1", **summary},
        )
        for data_file in data_files:
            producer.append_data_file(data_file)
        producer.commit()


def arrow_type(name):
    if name == "string":
        return pa.string()
    if name == "long":
        return pa.int64()
    if name == "timestamptz":
        return pa.timestamp("us", tz="UTC")
    if name.startswith("decimal("):
        p, s = name[len("decimal("):-1].split(",")
        return pa.decimal128(int(p), int(s))
    raise SystemExit(f"unknown type {name}")


def arrow_rows(table, rows):
    schema = table.schema().as_arrow()
    converted = []
    for r in rows:
        out = {}
        for field in schema:
            v = r.get(field.name)
            if v is not None and pa.types.is_timestamp(field.type):
                v = datetime.datetime.fromisoformat(v)
            elif v is not None and pa.types.is_decimal(field.type):
                v = decimal.Decimal(v)
            out[field.name] = v
        converted.append(out)
    return pa.Table.from_pylist(converted, schema=schema)


if __name__ == "__main__":
    main()
