"""The Iceberg oracle of the tests: pyiceberg (a SQL catalog on SQLite) writes the tables
smelt reads, and reads the tables smelt writes.

    iceberg_tables.py --uri sqlite:////abs/catalog.db --warehouse /abs/wh|s3://b/wh --catalog ice
        [--prop s3.endpoint=http://127.0.0.1:9000 ...] < steps

`steps` is one JSON object per line:

    {"create": "ns.t", "columns": ["id", "status"]}      all-string columns (bronze)
    {"create": "ns.t", "schema": [["id", "long"], ["ts", "timestamptz"], ["amount", "decimal(10,2)"]]}
    {"append": "ns.t", "rows": [{"id": "1", "status": "active"}]}
    {"overwrite": "ns.t", "where": "id = '1'", "rows": [...]}   copy-on-write
    {"delete": "ns.t", "where": "id = '2'"}                     copy-on-write
    {"expire": "ns.t", "sequences": [1, 2]}   expires the snapshots with those sequence numbers
    {"rename": "ns.t", "from": "amount", "to": "total"}
    {"add_column": "ns.t", "name": "note"}      a string column
    {"scan": "ns.t"}           prints {"rows": [...]} (sorted by every column)
    {"snapshots": "ns.t"}      prints {"snapshots": [{"id", "sequence", "operation", "summary"}]}
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
            catalog.create_table(name, schema=schema)
        elif "append" in step:
            t = catalog.load_table(step["append"])
            t.append(arrow_rows(t, step["rows"]))
        elif "overwrite" in step:
            t = catalog.load_table(step["overwrite"])
            t.overwrite(arrow_rows(t, step["rows"]), overwrite_filter=parse_filter(step["where"]))
        elif "delete" in step:
            t = catalog.load_table(step["delete"])
            t.delete(delete_filter=parse_filter(step["where"]))
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
            rows = t.scan().to_arrow().to_pylist()
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
                    "sequence": s.sequence_number,
                    "operation": s.summary.operation.value if s.summary else None,
                    "summary": dict(s.summary.additional_properties) if s.summary else {},
                })
            print(json.dumps({"snapshots": out}), flush=True)
        elif "properties" in step:
            t = catalog.load_table(step["properties"])
            print(json.dumps({"properties": dict(t.properties)}), flush=True)
        else:
            raise SystemExit(f"unknown step: {line}")


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
