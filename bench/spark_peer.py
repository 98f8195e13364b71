"""The hand-written Spark job of the benchmark: seed 000's logic as Spark SQL, run on the same
Spark cluster as `smelt --engine spark`, over Spark Connect.

    python spark_peer.py <sc:// URL> <bronze table dir> <silver dir> <state file>

Seed 000 (BigQuery `CHANGES` + `MERGE`) written the way a Spark user writes it: the bronze
changes since the last run from Delta's change feed (`table_changes_by_path`), the latest row
per Id by `_commit_timestamp` (`ROW_NUMBER() ... = 1`, Spark's spelling of `QUALIFY`),
`try_cast` to silver's types, one `MERGE` guarded on `_ingest_timestamp` as the seed's is.
Runs in testenv/spark/.venv (PySpark's Connect client). Prints one JSON line: the time of the
work (the session's start excluded), the change rows read (counted after the clock stops) and
this process's CPU seconds (the cluster's are not counted, as for `smelt --engine spark`).

Where it differs from smelt: an Id sent twice in one commit has two rows with the same
`_commit_timestamp`, and `ROW_NUMBER` picks either of them (the seed's `QUALIFY` does the
same); smelt takes the later one in file and row order.
"""

import json
import os
import sys
import time

URL, BRONZE, SILVER, STATE = sys.argv[1:5]

from pyspark.sql import SparkSession  # noqa: E402

BOOLS = ["IsActive", "IsDeleted", "IsArchived"]
TIMESTAMPS = ["CreatedDate", "LastModifiedDate", "SystemModstamp", "LastViewedDate", "LastReferencedDate"]
COLUMNS = [
    "Id", "Name", "ProductCode", "Description", "IsActive", "CreatedDate", "CreatedById",
    "LastModifiedDate", "LastModifiedById", "SystemModstamp", "Family", "ExternalDataSourceId",
    "ExternalId", "DisplayUrl", "QuantityUnitOfMeasure", "IsDeleted", "IsArchived",
    "LastViewedDate", "LastReferencedDate", "StockKeepingUnit",
]


def spark_type(column):
    return "BOOLEAN" if column in BOOLS else "TIMESTAMP" if column in TIMESTAMPS else "STRING"


def typed(column):
    if spark_type(column) == "STRING":
        return f"`{column}`"
    return f"try_cast(`{column}` AS {spark_type(column)}) AS `{column}`"


def main():
    spark = SparkSession.builder.remote(URL).getOrCreate()
    # smelt's default zone for timestamps written without an offset.
    spark.sql("SET spark.sql.session.timeZone=UTC")
    t0, cpu0 = time.perf_counter(), time.process_time()
    state = json.load(open(STATE)) if os.path.exists(STATE) else {"version": -1}
    bronze, silver = f"delta.`{os.path.abspath(BRONZE)}`", f"delta.`{os.path.abspath(SILVER)}`"
    latest = spark.sql(f"DESCRIBE HISTORY {bronze} LIMIT 1").collect()[0]["version"]
    if state["version"] < 0:
        columns = ", ".join(f"`{c}` {spark_type(c)}" for c in COLUMNS)
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {silver} ({columns}, `_ingest_timestamp` TIMESTAMP, "
            "`_update_timestamp` TIMESTAMP) USING delta"
        ).collect()
    rows, state_before = 0, state["version"]
    if latest > state["version"]:
        changes = (
            f"SELECT * FROM table_changes_by_path('{os.path.abspath(BRONZE)}', "
            f"{state['version'] + 1}, {latest}) WHERE _change_type IN ('insert', 'update_postimage')"
        )
        latest_rows = (
            f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY `Id` "
            f"ORDER BY `_commit_timestamp` DESC) AS rn FROM ({changes})) WHERE rn = 1"
        )
        source = (
            f"SELECT {', '.join(typed(c) for c in COLUMNS)}, `_commit_timestamp` AS `_ingest_timestamp` "
            f"FROM ({latest_rows})"
        )
        sets = ", ".join(f"slv.`{c}` = brz.`{c}`" for c in COLUMNS[1:] + ["_ingest_timestamp"])
        names = COLUMNS + ["_ingest_timestamp"]
        spark.sql(
            f"MERGE INTO {silver} AS slv USING ({source}) AS brz ON slv.`Id` = brz.`Id` "
            f"WHEN MATCHED AND slv.`_ingest_timestamp` < brz.`_ingest_timestamp` THEN UPDATE SET "
            f"{sets}, slv.`_update_timestamp` = current_timestamp() "
            f"WHEN NOT MATCHED THEN INSERT ({', '.join(f'`{c}`' for c in names)}, `_update_timestamp`) "
            f"VALUES ({', '.join(f'brz.`{c}`' for c in names)}, current_timestamp())"
        ).collect()
        state["version"] = latest
        with open(STATE, "w") as f:
            json.dump(state, f)
    work_s, work_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    if latest > state_before:
        # Counted after the clock stops: the job itself has no need of the count.
        rows = spark.sql(f"SELECT count(*) AS n FROM ({changes})").collect()[0]["n"]
    print(json.dumps({"work_s": work_s, "rows": rows, "work_cpu_s": work_cpu_s}))


if __name__ == "__main__":
    main()
