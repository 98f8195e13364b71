"""The peers of the benchmark: the same job as `smelt run`, done the way users do it today.

    python peers.py <deltars|deltars-cdf|polars|duckdb|pyiceberg> <bronze table dir> <silver dir> <state file>

Each call applies the bronze versions after the last one recorded in <state file> (all of
them on the first call) to silver — SCD1 by Id, latest change per Id by commit time then
row order, SAFE_CAST semantics (unparseable -> NULL), guarded on `_ingest_timestamp` — and
prints one JSON line with the time of the work (imports excluded) and the rows read.

Reading changes is shared by all peers and done carefully: each new commit's added files in
log order, rows in file order (the change-feed reader does not keep row order, so a peer
built on it picks a different "latest" row for Ids sent twice in one commit).
"""

import json
import os
import sys
import time

TOOL, BRONZE, SILVER, STATE = sys.argv[1:5]
t_start = time.perf_counter()

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

TS_COLS = ["CreatedDate", "LastModifiedDate", "SystemModstamp", "LastViewedDate", "LastReferencedDate"]
BOOL_COLS = ["IsActive", "IsDeleted", "IsArchived"]
COLUMNS = [
    "Id", "Name", "ProductCode", "Description", "IsActive", "CreatedDate", "CreatedById",
    "LastModifiedDate", "LastModifiedById", "SystemModstamp", "Family", "ExternalDataSourceId",
    "ExternalId", "DisplayUrl", "QuantityUnitOfMeasure", "IsDeleted", "IsArchived",
    "LastViewedDate", "LastReferencedDate", "StockKeepingUnit",
]


def latest_version():
    log = os.path.join(BRONZE, "_delta_log")
    return max(int(f[:20]) for f in os.listdir(log) if f.endswith(".json"))


def read_changes(after, upto):
    """Rows added by bronze versions (after, upto], with _commit_version, _commit_timestamp, _row."""
    tables = []
    for v in range(after + 1, upto + 1):
        adds, ts = [], None
        with open(os.path.join(BRONZE, "_delta_log", f"{v:020d}.json")) as f:
            for line in f:
                action = json.loads(line)
                if "add" in action and action["add"].get("dataChange", True):
                    adds.append(action["add"]["path"])
                if "commitInfo" in action:
                    ts = action["commitInfo"].get("inCommitTimestamp") or action["commitInfo"]["timestamp"]
        for path in adds:
            t = pq.read_table(os.path.join(BRONZE, path), columns=COLUMNS)
            n = t.num_rows
            t = t.append_column("_commit_version", pa.array([v] * n, pa.int64()))
            t = t.append_column("_commit_timestamp", pa.array([ts * 1000] * n, pa.timestamp("us", tz="UTC")))
            tables.append(t)
    if not tables:
        return None
    t = pa.concat_tables(tables)
    return t.append_column("_row", pa.array(range(t.num_rows), pa.int64()))


def polars_transform(changes):
    """Cast + latest per Id with polars (used by the delta-rs and polars peers)."""
    import polars as pl

    df = pl.from_arrow(changes)
    casts = [
        pl.col(c).str.strip_chars().str.to_datetime("%Y-%m-%dT%H:%M:%S%.3f%z", strict=False, time_unit="us").dt.convert_time_zone("UTC")
        for c in TS_COLS
    ] + [
        pl.col(c).str.strip_chars().str.to_lowercase().replace_strict({"true": True, "false": False}, default=None, return_dtype=pl.Boolean)
        for c in BOOL_COLS
    ]
    df = (
        df.with_columns(casts)
        .sort(["_commit_timestamp", "_row"])
        .unique(subset=["Id"], keep="last", maintain_order=True)
        .with_columns(
            pl.col("_commit_timestamp").alias("_ingest_timestamp"),
            pl.lit(int(time.time() * 1_000_000)).cast(pl.Datetime("us", "UTC")).alias("_update_timestamp"),
        )
        .select(COLUMNS + ["_ingest_timestamp", "_update_timestamp"])
    )
    return df


def run_deltars(changes, first):
    """delta-rs' MERGE; `deltars-cdf` creates the silver with the change data feed on, as
    smelt's silver is, so each MERGE also writes its change data (pre- and post-images)."""
    from deltalake import DeltaTable, write_deltalake

    source = polars_transform(changes).to_arrow()
    if first:
        cdf = {"delta.enableChangeDataFeed": "true"} if TOOL == "deltars-cdf" else None
        write_deltalake(SILVER, source, mode="overwrite", configuration=cdf)
        return
    (
        DeltaTable(SILVER)
        .merge(source=source, predicate='t."Id" = s."Id"', source_alias="s", target_alias="t")
        .when_matched_update_all(predicate="s._ingest_timestamp > t._ingest_timestamp")
        .when_not_matched_insert_all()
        .execute()
    )


def run_polars(changes, first):
    df = polars_transform(changes)
    if first:
        df.write_delta(SILVER, mode="overwrite")
        return
    (
        df.write_delta(
            SILVER,
            mode="merge",
            delta_merge_options={"predicate": 't."Id" = s."Id"', "source_alias": "s", "target_alias": "t"},
        )
        .when_matched_update_all(predicate="s._ingest_timestamp > t._ingest_timestamp")
        .when_not_matched_insert_all()
        .execute()
    )


def iceberg_catalog(warehouse):
    """The SQL catalog (SQLite) of an Iceberg silver in `warehouse`: pyiceberg's and smelt's."""
    from pyiceberg.catalog.sql import SqlCatalog

    os.makedirs(warehouse, exist_ok=True)
    db = os.path.join(os.path.abspath(warehouse), "..", "catalog.db")
    return SqlCatalog("ice", uri=f"sqlite:///{os.path.normpath(db)}", warehouse=f"file://{os.path.abspath(warehouse)}")


def run_pyiceberg(changes, first):
    """pyiceberg's `upsert` into an Iceberg v2 table (copy-on-write: the files holding matched
    keys are rewritten). Its update has no guard: the bench's increments come in commit order,
    so the newer change always wins, as under the peers' guard."""
    catalog = iceberg_catalog(SILVER)
    source = polars_transform(changes).to_arrow()
    if first:
        catalog.create_namespace_if_not_exists("bench")
        table = catalog.create_table("bench.product2_silver", schema=source.schema)
        table.append(source)
        return
    table = catalog.load_table("bench.product2_silver")
    table.upsert(source, join_cols=["Id"])


DUCK_SELECT = """
SELECT
  Id, Name, ProductCode, Description,
  CASE lower(trim(IsActive)) WHEN 'true' THEN true WHEN 'false' THEN false END AS IsActive,
  try_strptime(trim(CreatedDate), '%Y-%m-%dT%H:%M:%S.%g%z') AS CreatedDate,
  CreatedById,
  try_strptime(trim(LastModifiedDate), '%Y-%m-%dT%H:%M:%S.%g%z') AS LastModifiedDate,
  LastModifiedById,
  try_strptime(trim(SystemModstamp), '%Y-%m-%dT%H:%M:%S.%g%z') AS SystemModstamp,
  Family, ExternalDataSourceId, ExternalId, DisplayUrl, QuantityUnitOfMeasure,
  CASE lower(trim(IsDeleted)) WHEN 'true' THEN true WHEN 'false' THEN false END AS IsDeleted,
  CASE lower(trim(IsArchived)) WHEN 'true' THEN true WHEN 'false' THEN false END AS IsArchived,
  try_strptime(trim(LastViewedDate), '%Y-%m-%dT%H:%M:%S.%g%z') AS LastViewedDate,
  try_strptime(trim(LastReferencedDate), '%Y-%m-%dT%H:%M:%S.%g%z') AS LastReferencedDate,
  StockKeepingUnit,
  _commit_timestamp AS _ingest_timestamp,
  now() AS _update_timestamp
FROM changes
QUALIFY row_number() OVER (PARTITION BY Id ORDER BY _commit_timestamp DESC, _row DESC) = 1
"""


def run_duckdb(changes, first):
    import duckdb

    con = duckdb.connect(os.path.join(SILVER, "silver.duckdb"))
    con.execute("SET TimeZone = 'UTC'")
    con.register("changes", changes)
    if first:
        con.execute(f"CREATE TABLE silver AS {DUCK_SELECT}")
        con.execute("ALTER TABLE silver ADD PRIMARY KEY (Id)")
    else:
        sets = ", ".join(f'"{c}" = excluded."{c}"' for c in COLUMNS[1:] + ["_ingest_timestamp", "_update_timestamp"])
        con.execute(
            f"INSERT INTO silver {DUCK_SELECT} ON CONFLICT (Id) DO UPDATE SET {sets} "
            "WHERE excluded._ingest_timestamp > silver._ingest_timestamp"
        )
    con.close()


def main():
    after = -1
    if os.path.exists(STATE):
        with open(STATE) as f:
            after = json.load(f)["version"]
    upto = latest_version()
    t0, c0 = time.perf_counter(), time.process_time()
    changes = read_changes(after, upto)
    rows = 0 if changes is None else changes.num_rows
    first = after < 0
    os.makedirs(SILVER, exist_ok=True)
    if changes is not None:
        runs = {"deltars": run_deltars, "deltars-cdf": run_deltars, "polars": run_polars, "duckdb": run_duckdb, "pyiceberg": run_pyiceberg}
        runs[TOOL](changes, first)
    t1, c1 = time.perf_counter(), time.process_time()
    with open(STATE, "w") as f:
        json.dump({"version": upto}, f)
    print(json.dumps({"tool": TOOL, "rows": rows, "work_s": t1 - t0, "work_cpu_s": c1 - c0, "process_s": t1 - t_start, "version": upto}))


main()
