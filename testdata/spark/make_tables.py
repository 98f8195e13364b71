"""Writes the Spark-made test tables of this folder, and Spark's own reading of them.

Run against the tests' Spark cluster (testenv/spark/start.sh prints its URL):

    python make_tables.py sc://127.0.0.1:PORT OUT_DIR

Each table is written under OUT_DIR/<table>, and Spark's rows of every version of it to
OUT_DIR/<table>.expected.json ({"version": [rows as text, sorted]}): the oracle the tests
compare smelt's reading with. The cluster must see OUT_DIR at the same path (it runs on
this machine).
"""

import json
import sys

from pyspark.sql import SparkSession

remote, out = sys.argv[1], sys.argv[2].rstrip("/")
spark = SparkSession.builder.remote(remote).getOrCreate()


def table(name, statements):
    path = f"{out}/{name}"
    for statement in statements:
        spark.sql(statement.replace("{t}", f"delta.`{path}`"))
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version").collect()
    expected = {}
    for (version,) in sorted(versions):
        df = spark.read.format("delta").option("versionAsOf", version).load(path)
        rows = [
            [None if v is None else str(v) for v in row]
            for row in df.collect()
        ]
        expected[str(version)] = {
            "columns": df.columns,
            "rows": sorted(rows, key=lambda r: [("" if v is None else v) for v in r]),
        }
    with open(f"{path}.expected.json", "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


# A plain table with the `vacuumProtocolCheck` reader feature: readers need do nothing.
table(
    "vacuum_protocol_check",
    [
        "CREATE TABLE {t} (id INT, name STRING) USING delta"
        " TBLPROPERTIES ('delta.feature.vacuumProtocolCheck' = 'supported')",
        "INSERT INTO {t} VALUES (1, 'ant'), (2, 'bee')",
        "INSERT INTO {t} VALUES (3, 'cat')",
    ],
)

# Column mapping in `id` mode, a renamed and a dropped column, a widened type, rows deleted
# by deletion vectors, and `vacuumProtocolCheck`: what a Databricks table that lived a
# while looks like.
table(
    "column_mapping_id",
    [
        "CREATE TABLE {t} (id INT, name STRING, price INT, note STRING) USING delta"
        " TBLPROPERTIES ('delta.columnMapping.mode' = 'id',"
        " 'delta.enableDeletionVectors' = 'true',"
        " 'delta.enableTypeWidening' = 'true',"
        " 'delta.feature.vacuumProtocolCheck' = 'supported')",
        "INSERT INTO {t} VALUES (1, 'ant', 10, 'a'), (2, 'bee', 20, 'b'), (3, 'cat', 30, 'c')",
        "ALTER TABLE {t} RENAME COLUMN name TO label",
        "ALTER TABLE {t} ALTER COLUMN price TYPE BIGINT",
        "INSERT INTO {t} VALUES (4, 'dog', 4000000000, 'd')",
        "ALTER TABLE {t} DROP COLUMN note",
        "DELETE FROM {t} WHERE id = 2",
        "INSERT INTO {t} VALUES (5, 'eel', 50)",
    ],
)
