"""Writes seed 004's input with pyiceberg, as a Foundry transform or any Iceberg writer would,
and prints the outputs.

    python input.py build1|build2|build3|show
"""

import datetime
import decimal
import sys

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo

HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
catalog = SqlCatalog("foundry", uri=f"sqlite:///{HERE}/catalog.db", warehouse=f"file://{HERE}/warehouse")
SCHEMA = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("status", pa.string()),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("amount", pa.decimal128(10, 2)),
])


def rows(*values):
    return pa.Table.from_pylist(
        [
            {
                "id": i,
                "status": s,
                "ts": datetime.datetime.fromisoformat(t),
                "amount": decimal.Decimal(a),
            }
            for i, s, t, a in values
        ],
        schema=SCHEMA,
    )


def show(name):
    table = catalog.load_table(f"demo.{name}").scan().to_arrow().sort_by("id")
    print(f"-- demo.{name}")
    for r in table.select(["id", "status", "ts", "amount"]).to_pylist():
        print(f"   {r['id']:>3}  {r['status']:<9} {r['ts']:%Y-%m-%d %H:%M}  {r['amount']}")


step = sys.argv[1]
if step == "build1":
    catalog.create_namespace_if_not_exists("demo")
    table = catalog.create_table("demo.input", schema=SCHEMA)
    table.append(rows(
        (1, "active", "2026-07-01T09:00:00+00:00", "10.00"),
        (2, "inactive", "2026-07-01T09:05:00+00:00", "20.00"),
        (3, "active", "2026-07-01T09:10:00+00:00", "30.00"),
    ))
elif step == "build2":
    # New rows, and a status change of id 1 appended as a new row (a changelog).
    catalog.load_table("demo.input").append(rows(
        (4, "active", "2026-07-02T09:00:00+00:00", "40.00"),
        (5, "inactive", "2026-07-02T09:05:00+00:00", "50.00"),
        (1, "inactive", "2026-07-02T09:10:00+00:00", "10.00"),
    ))
elif step == "build3":
    # id 3 deleted from the input (pyiceberg rewrites the file, copy-on-write).
    catalog.load_table("demo.input").delete(delete_filter=EqualTo("id", 3))
elif step == "show":
    show("active")
    show("current")
else:
    raise SystemExit(f"unknown step {step}")
