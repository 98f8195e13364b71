"""Runs smelt and its peers on identical copies of the product2 bronze table and compares.

Called by bench/run.sh; see BENCHMARKS.md. Writes <out>/results.json and <out>/results.md.
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

SCALES = {"small": (100_000, 10_000), "medium": (2_000_000, 200_000), "large": (10_000_000, 1_000_000)}
HERE = os.path.dirname(os.path.abspath(__file__))
TS_COLS = ["CreatedDate", "LastModifiedDate", "SystemModstamp", "LastViewedDate", "LastReferencedDate", "_ingest_timestamp"]
BOOL_COLS = ["IsActive", "IsDeleted", "IsArchived"]
COLUMNS = [
    "Id", "Name", "ProductCode", "Description", "IsActive", "CreatedDate", "CreatedById",
    "LastModifiedDate", "LastModifiedById", "SystemModstamp", "Family", "ExternalDataSourceId",
    "ExternalId", "DisplayUrl", "QuantityUnitOfMeasure", "IsDeleted", "IsArchived",
    "LastViewedDate", "LastReferencedDate", "StockKeepingUnit", "_ingest_timestamp",
]


def log_versions(table):
    log = os.path.join(table, "_delta_log")
    if not os.path.isdir(log):
        return []
    return sorted(int(f[:20]) for f in os.listdir(log) if f.endswith(".json"))


def commit_adds(table, version):
    """(files, bytes) written by one commit: its new data files, and the deletion vectors
    of the files it adds again (same path as a remove) with a new vector — those data files
    are not written again."""
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json")) as f:
        actions = [json.loads(line) for line in f]
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    files = size = 0
    dv_files = set()
    for a in actions:
        if "add" not in a:
            continue
        add = a["add"]
        dv = add.get("deletionVector")
        if add["path"] in removed and dv:
            # The vector's bytes, its size and checksum; the file's version byte once.
            size += dv["sizeInBytes"] + 8
            dv_files.add(dv["pathOrInlineDv"])
            continue
        files += 1
        size += add["size"]
    return files + len(dv_files), size + len(dv_files)


def timed(cmd, env=None):
    """Runs cmd under /usr/bin/time; returns (stdout, wall seconds, peak RSS bytes, CPU
    seconds: user and system, all threads)."""
    stats = os.path.join("/tmp", f"smelt-bench-time-{os.getpid()}")
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", stats] + cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    with open(stats) as f:
        rss_kb, user, system = f.read().strip().splitlines()[-1].split()
    return p.stdout, wall, int(rss_kb) * 1024, float(user) + float(system)


def reveal(src_table, dst_table, version):
    """Makes bronze version `version` visible in a copy: its log entry is copied last, with
    its modification time, which is the commit's time where the table has no in-commit
    timestamps (every copy then has the source's commit times)."""
    name = f"{version:020d}.json"
    shutil.copy2(os.path.join(src_table, "_delta_log", name), os.path.join(dst_table, "_delta_log", name))


def prepare_copy(src_table, dst_table):
    """Hard-links the bronze data files and copies log entries 0 and 1 (create + initial load)."""
    os.makedirs(os.path.join(dst_table, "_delta_log"))
    for f in os.listdir(src_table):
        if f.endswith(".parquet"):
            os.link(os.path.join(src_table, f), os.path.join(dst_table, f))
    for v in (0, 1):
        reveal(src_table, dst_table, v)


ICEBERG_TOOLS = ("smelt-iceberg", "smelt-iceberg-mor", "pyiceberg")
# smelt's own tools writing a Delta silver at <lake>/bench/product2_silver.
SMELT_DELTA_TOOLS = ("smelt", "smelt-cdf", "smelt-mor", "smelt-mor-cdf", "smelt-mor-derived", "smelt-spark")
# smelt's merge-on-read Delta configurations: without a change feed (`smelt-mor`), with one and
# its pre-images written (`smelt-mor-cdf`), with one derived by readers (`smelt-mor-derived`).
SMELT_MOR_TOOLS = ("smelt-mor", "smelt-mor-cdf", "smelt-mor-derived")
# smelt's silvers whose DDL asks for the change feed (nothing reads the bench's silver).
SMELT_FEED_TOOLS = ("smelt-cdf", "smelt-mor-cdf", "smelt-mor-derived")
# The tools that run on the Spark cluster: smelt's Spark engine, and seed 000's logic written
# by hand as Spark SQL (spark_peer.py).
SPARK_TOOLS = ("smelt-spark", "spark-sql")


def smelt_project(lake, tool, args):
    """smelt's pipeline: Delta bronze into Delta silver (`smelt`), or into an Iceberg silver in
    a SQL catalog (`catalog.db`, warehouse `silver/`, as the pyiceberg peer keeps it), written
    copy-on-write (`smelt`, `smelt-iceberg`) or merge-on-read (`smelt-mor`: deletion vectors,
    `smelt-iceberg-mor`: position deletes), or run on the Spark cluster (`smelt-spark`).
    Beside a Spark tool every smelt pipeline casts with Spark's rules (`cast_dialect: spark`,
    the one the Spark engine runs) and names its sequence (`_commit_timestamp`, the default),
    so that all of them are comparable."""
    silver_sql = open(os.path.join(HERE, "..", "examples", "product2", "silver.sql")).read()
    # The seed's `ALTER TABLE … SET OPTIONS (enable_change_history = TRUE)` left out: the
    # change feed is the configuration's (SMELT_FEED_TOOLS).
    silver_sql = silver_sql.split("ALTER TABLE")[0]
    silver_sql = silver_sql.replace("medallion_demo.product2__silver", "bench.product2_silver")
    if tool in SMELT_FEED_TOOLS:
        head, tail = silver_sql.rsplit(")", 1)
        silver_sql = f"{head}) OPTIONS (enable_change_history = TRUE){tail}"
    with open(os.path.join(lake, "silver.sql"), "w") as f:
        f.write(silver_sql)
    catalogs, into, mode = "", "bench.product2_silver", ""
    if tool in ICEBERG_TOOLS:
        catalogs = "catalogs:\n  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./silver}\n"
        into = "ice." + into
    if tool in SMELT_MOR_TOOLS or tool == "smelt-iceberg-mor":
        mode = "      write_mode: merge_on_read\n"
    if tool == "smelt-mor-derived":
        mode += "      change_data: derived\n"
    if spark_dialect(args):
        mode += "      sequence_by: [_commit_timestamp]\n      cast_dialect: spark\n"
    engine = f"engine: spark\nconnect: {args.spark}\n" if tool == "smelt-spark" else ""
    with open(os.path.join(lake, "smelt.yaml"), "w") as f:
        f.write(
            f"lake: .\n{engine}{catalogs}flows:\n  product2:\n    apply:\n      from: bench.product2_bronze\n"
            f"      into: {into}\n      schema: silver.sql\n{mode}"
        )


def spark_dialect(args):
    return any(t in SPARK_TOOLS for t in args.tools.split(","))


def iceberg_silver(lake):
    """The Iceberg silver of an Iceberg tool, `None` before its first run."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    db = os.path.abspath(os.path.join(lake, "catalog.db"))
    if not os.path.exists(db):
        return None
    catalog = SqlCatalog("ice", uri=f"sqlite:///{db}", warehouse=f"file://{os.path.abspath(os.path.join(lake, 'silver'))}")
    try:
        return catalog.load_table("bench.product2_silver")
    except NoSuchTableError:
        return None


def iceberg_sequence(lake):
    table = iceberg_silver(lake)
    snapshot = table.current_snapshot() if table else None
    return snapshot.sequence_number if snapshot else 0


def iceberg_written(lake, after):
    """(data files, bytes) added by the Iceberg silver's snapshots after sequence `after`,
    from their summaries."""
    files = size = 0
    for s in iceberg_silver(lake).snapshots():
        if s.sequence_number > after:
            summary = s.summary.additional_properties
            files += int(summary.get("added-data-files", 0))
            size += int(summary.get("added-files-size", 0))
    return files, size


def canonical(tool, lake, kernel_read):
    """The final silver in canonical form: all columns but _update_timestamp, timestamps as
    microseconds, booleans as 0/1, sorted by Id."""
    import polars as pl

    if tool == "duckdb":
        import duckdb

        con = duckdb.connect(os.path.join(lake, "silver", "silver.duckdb"), read_only=True)
        df = pl.from_arrow(con.sql("SELECT * FROM silver").to_arrow_table())
        con.close()
    elif tool in ICEBERG_TOOLS:
        df = pl.from_arrow(iceberg_silver(lake).scan().to_arrow())
    elif tool in SMELT_MOR_TOOLS or tool in SPARK_TOOLS:
        # delta-rs' Python reader refuses deletion vectors (and Spark may write them): the
        # kernel's scan reads them.
        path = os.path.join(lake, "bench", "product2_silver") if tool in SMELT_DELTA_TOOLS else os.path.join(lake, "silver")
        out = os.path.join(lake, "silver-kernel.parquet")
        subprocess.run([kernel_read, path, out], check=True)
        df = pl.read_parquet(out)
    else:
        path = os.path.join(lake, "bench", "product2_silver") if tool in SMELT_DELTA_TOOLS else os.path.join(lake, "silver")
        df = pl.read_delta(path)
    return df.select(COLUMNS).with_columns(
        [pl.col(c).dt.replace_time_zone("UTC") if df.schema[c].time_zone is None else pl.col(c) for c in TS_COLS]
    ).with_columns(
        [pl.col(c).dt.convert_time_zone("UTC").dt.epoch("us") for c in TS_COLS]
        + [pl.col(c).cast(pl.Int8) for c in BOOL_COLS]
    ).sort("Id")


def digest(df):
    """(rows, sha256) of a canonical silver."""
    return df.height, hashlib.sha256(df.write_csv().encode()).hexdigest()


def differing_rows(df, ref):
    """Ids whose row differs between two canonical silvers, or that only one of them has."""
    import polars as pl

    joined = df.join(ref, on="Id", how="full", suffix="_ref", nulls_equal=True, coalesce=True)
    same = pl.lit(True)
    for c in COLUMNS[1:]:
        same = same & pl.col(c).eq_missing(pl.col(f"{c}_ref"))
    return joined.filter(~same).height


def run_tool(tool, args, src_table, work, bronze_bytes, increments):
    lake = os.path.join(work, tool)
    table = os.path.join(lake, "bench", "product2_bronze")
    prepare_copy(src_table, table)
    silver = os.path.join(lake, "bench", "product2_silver") if tool in SMELT_DELTA_TOOLS else os.path.join(lake, "silver")
    steps = []
    for step in range(increments + 1):
        version = step + 1
        if step > 0:
            reveal(src_table, table, version)
        before = set(log_versions(silver))
        seq_before = iceberg_sequence(lake) if tool in ICEBERG_TOOLS else 0
        db_before = os.path.getsize(os.path.join(silver, "silver.duckdb")) if tool == "duckdb" and step > 0 else 0
        if tool == "spark-sql":
            out, wall, rss, _ = timed([args.spark_python, os.path.join(HERE, "spark_peer.py"), args.spark, table, silver, os.path.join(lake, "state.json")])
            r = json.loads(out.strip().splitlines()[-1])
            work_s, rows, phases, cpu = r["work_s"], r["rows"], None, r["work_cpu_s"]
        elif tool.startswith("smelt"):
            cmd = [args.smelt, "-q", "--json", "-p", os.path.join(lake, "smelt.yaml"), "run"]
            if args.memory_limit:
                cmd += ["--memory-limit", args.memory_limit]
            out, wall, rss, cpu = timed(cmd)
            report = json.loads(out)["flows"][0]
            work_s = wall
            phases = dict(report["phases_ms"])
            rows = report["changes_read"]
        else:
            out, wall, rss, _ = timed([args.python, os.path.join(HERE, "peers.py"), tool, table, silver, os.path.join(lake, "state.json")])
            r = json.loads(out.strip().splitlines()[-1])
            # The peer's own CPU over the timed work (not the interpreter's start).
            work_s, rows, phases, cpu = r["work_s"], r["rows"], None, r["work_cpu_s"]
        new = [v for v in log_versions(silver) if v not in before]
        files = written = 0
        for v in new:
            f, b = commit_adds(silver, v)
            files += f
            written += b
        if tool == "duckdb":
            written = os.path.getsize(os.path.join(silver, "silver.duckdb")) - db_before
        if tool in ICEBERG_TOOLS:
            files, written = iceberg_written(lake, seq_before)
        steps.append({
            "step": "initial" if step == 0 else f"increment {step}",
            "bronze_version": version,
            "rows": rows,
            "seconds": round(work_s, 3),
            "process_seconds": round(wall, 3),
            "cpu_seconds": round(cpu, 3),
            "peak_rss_bytes": rss,
            "silver_files_written": files if tool != "duckdb" else None,
            "silver_bytes_written": written,
            "write_amplification": round(written / bronze_bytes[version], 2) if bronze_bytes[version] else None,
            "phases_ms": phases,
        })
        print(f"  {tool:11} {steps[-1]['step']:>12}: {work_s:8.2f} s  rss {rss / 2**20:7.0f} MiB", flush=True)
    optimize = None
    if tool in SMELT_MOR_TOOLS:
        # The compaction a merge-on-read silver needs sooner or later, timed after the
        # increments (its silver is hashed after it).
        before = set(log_versions(silver))
        out, wall, rss, _ = timed([args.smelt, "-q", "--json", "-p", os.path.join(lake, "smelt.yaml"), "optimize"])
        done = json.loads(out)
        written = sum(commit_adds(silver, v)[1] for v in log_versions(silver) if v not in before)
        optimize = {
            "seconds": round(wall, 3),
            "peak_rss_bytes": rss,
            "files_rewritten": sum(t.get("files_removed", 0) for t in done),
            "rows_purged": sum(t.get("rows_purged", 0) for t in done),
            "bytes_written": written,
        }
        print(f"  {tool:11} {'optimize':>12}: {wall:8.2f} s  rss {rss / 2**20:7.0f} MiB", flush=True)
    kernel_read = os.path.join(os.path.dirname(args.gen), "smelt-bench-kernel-read")
    df = canonical(tool, lake, kernel_read)
    rows, sha = digest(df)
    df.write_parquet(os.path.join(lake, "silver-canonical.parquet"))
    return {"tool": tool, "steps": steps, "optimize": optimize, "final_rows": rows, "final_hash": sha}


def summarize(result):
    init = result["steps"][0]
    inc = result["steps"][1:]
    secs = [s["seconds"] for s in inc]
    return {
        "initial_s": init["seconds"],
        "increment_mean_s": round(statistics.mean(secs), 3) if secs else None,
        "increment_median_s": round(statistics.median(secs), 3) if secs else None,
        "increment_cpu_mean_s": round(statistics.mean(s["cpu_seconds"] for s in inc), 3) if inc else None,
        "increment_rows_per_s": round(statistics.mean(s["rows"] / s["seconds"] for s in inc)) if secs else None,
        "peak_rss_mib": round(max(s["peak_rss_bytes"] for s in result["steps"]) / 2**20),
        "increment_bytes_written_mean": round(statistics.mean(s["silver_bytes_written"] for s in inc)) if inc else None,
        "increment_files_written_mean": (
            round(statistics.mean(s["silver_files_written"] for s in inc), 1) if inc and inc[0]["silver_files_written"] is not None else None
        ),
        "write_amplification_mean": round(statistics.mean(s["write_amplification"] for s in inc), 2) if inc else None,
    }


def reference(results):
    """The result the others are compared with: smelt's (Delta silver), else smelt-iceberg's,
    else the first tool's (a run of one tool, e.g. `--tools smelt-spark`)."""
    return next((r for r in results if r["tool"] in ("smelt", "smelt-iceberg")), results[0])


def markdown(meta, results):
    smelt = reference(results)["summary"]
    lines = [
        f"## product2, scale `{meta['scale']}` (N={meta['rows']:,}, M={meta['increment']:,}, K={meta['increments']})",
        "",
        f"Machine: {meta['machine']}. Command: `{meta['command']}`. Date: {meta['date']}.",
        "",
        "| tool | initial load s | increment s (mean / median) | CPU s / increment | rows/s per increment | peak RSS MiB | bytes written / increment | files / increment | write amp. | initial vs smelt | increment vs smelt | silver = smelt's |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r["summary"]
        same = "—" if r is reference(results) else ("yes" if r["matches_smelt"] else f"**no** ({r['differing_rows']:,} rows differ)")
        lines.append(
            f"| {r['tool']} | {s['initial_s']:.2f} | {s['increment_mean_s']:.2f} / {s['increment_median_s']:.2f} | "
            f"{s['increment_cpu_mean_s']:.2f} | {s['increment_rows_per_s']:,} | {s['peak_rss_mib']:,} | {s['increment_bytes_written_mean']:,} | "
            f"{s['increment_files_written_mean'] if s['increment_files_written_mean'] is not None else 'n/a'} | "
            f"{s['write_amplification_mean']} | {s['initial_s'] / smelt['initial_s']:.2f}× | "
            f"{s['increment_mean_s'] / smelt['increment_mean_s']:.2f}× | {same} |"
        )
    for r in results:
        if not r["tool"].startswith("smelt"):
            continue
        steps = r["steps"]
        phases = list(dict.fromkeys(k for s in steps for k in s["phases_ms"]))
        if not phases:
            continue
        lines += ["", f"{r['tool']} per phase (ms):", "", "| step | " + " | ".join(phases) + " |",
                  "|---|" + "---|" * len(phases)]
        for s in steps:
            lines.append(f"| {s['step']} | " + " | ".join(str(s["phases_ms"].get(k, "")) for k in phases) + " |")
        if r.get("optimize"):
            o = r["optimize"]
            lines += ["", f"{r['tool']}: `smelt optimize` after the increments: {o['seconds']:.2f} s, "
                      f"peak RSS {o['peak_rss_bytes'] / 2**20:,.0f} MiB, {o['files_rewritten']} files rewritten, "
                      f"{o['rows_purged']:,} deleted rows purged, {o['bytes_written']:,} bytes written."]
    if any(r["tool"] in SPARK_TOOLS for r in results):
        lines += ["", f"Spark tools ({', '.join(r['tool'] for r in results if r['tool'] in SPARK_TOOLS)}): "
                  "CPU seconds and peak RSS are the client's (smelt, or the Python job) only; the "
                  f"work runs on the local Spark cluster ({meta.get('spark', 'see testenv/spark')}). "
                  "Every smelt pipeline of this run casts with `cast_dialect: spark` and sequences by "
                  "`_commit_timestamp`; the bronze has the change data feed on (`table_changes` needs it)."]
    lines += ["", f"Final silver: {results[0]['final_rows']:,} rows; sha256 of the canonical form {results[0]['final_hash'][:16]}…"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scale", choices=SCALES)
    ap.add_argument("--smelt", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", required=True)
    ap.add_argument("--increments", type=int, default=5)
    ap.add_argument("--tools", default="smelt,smelt-mor,deltars,polars,duckdb", help="smelt-cdf: copy-on-write silver with the change feed on (its DDL asks for it); smelt-mor: Delta silver with deletion vectors, no change feed; smelt-mor-cdf: the same with the feed on and pre-images written; smelt-mor-derived: the same with the feed derived by readers (`change_data: derived`); deltars-cdf: delta-rs with the change data feed on, as smelt's silver has it; also smelt-iceberg, smelt-iceberg-mor, pyiceberg (Iceberg silver); smelt-spark (smelt on the Spark cluster), spark-sql (seed 000 by hand as Spark SQL)")
    ap.add_argument("--spark", default=None, help="sc:// URL of the Spark cluster the Spark tools run on (bench/run.sh starts one)")
    ap.add_argument("--spark-python", default=None, help="the Python with PySpark's Connect client, for spark-sql")
    ap.add_argument("--memory-limit", default=None, help="passed to `smelt run --memory-limit`, e.g. 2GiB")
    ap.add_argument("--keys", choices=("spread", "recent"), default="spread",
                    help="which Ids the increments re-send: any (spread) or the newest tenth (recent)")
    args = ap.parse_args()
    rows, increment = SCALES[args.scale]
    work = os.path.join(args.out, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src_table = os.path.join(work, "source", "bench", "product2_bronze")
    t0 = time.perf_counter()
    if spark_dialect(args) and not (args.spark and args.spark_python):
        sys.exit("the Spark tools need --spark and --spark-python (bench/run.sh gives them)")
    gen = [args.gen, "--table", src_table, "--rows", str(rows), "--increment", str(increment),
           "--increments", str(args.increments), "--keys", args.keys]
    if spark_dialect(args):
        gen.append("--change-data-feed")
    subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
    print(f"generated bronze in {time.perf_counter() - t0:.1f} s", flush=True)
    # Let the generator's writes reach the disk before anything is timed.
    os.sync()
    time.sleep(5)
    bronze_bytes = {v: commit_adds(src_table, v)[1] for v in log_versions(src_table)}
    tools = args.tools.split(",")
    results = []
    for tool in tools:
        os.makedirs(os.path.join(work, tool))
        if tool.startswith("smelt"):
            smelt_project(os.path.join(work, tool), tool, args)
        r = run_tool(tool, args, src_table, work, bronze_bytes, args.increments)
        r["summary"] = summarize(r)
        results.append(r)
    ref = reference(results)
    import polars as pl

    ref_df = pl.read_parquet(os.path.join(work, ref["tool"], "silver-canonical.parquet"))
    for r in results:
        r["matches_smelt"] = (r["final_rows"], r["final_hash"]) == (ref["final_rows"], ref["final_hash"])
        if not r["matches_smelt"]:
            df = pl.read_parquet(os.path.join(work, r["tool"], "silver-canonical.parquet"))
            r["differing_rows"] = differing_rows(df, ref_df)
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    meta = {
        "scale": args.scale, "rows": rows, "increment": increment, "increments": args.increments,
        "machine": f"{os.cpu_count()} cores ({cpu}), {round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB, {platform.platform()}",
        "command": os.environ.get("SMELT_BENCH_COMMAND", f"bench/run.sh {args.scale}"),
        "date": time.strftime("%Y-%m-%d"),
        "versions": subprocess.run([args.python, "-c", "import deltalake, polars, duckdb, pyarrow, pyiceberg; print(f'deltalake {deltalake.__version__}, polars {polars.__version__}, duckdb {duckdb.__version__}, pyarrow {pyarrow.__version__}, pyiceberg {pyiceberg.__version__}')"], capture_output=True, text=True).stdout.strip(),
    }
    if spark_dialect(args):
        meta["spark"] = subprocess.run([args.spark_python, "-c", "import pyspark; print(f'Spark {pyspark.__version__}, standalone master + 2 workers of 1 core and 1536 MiB, Connect driver')"], capture_output=True, text=True).stdout.strip()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2)
    md = markdown(meta, results) + f"\nPeers: {meta['versions']}.\n"
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print(md)
    # The hand-written Spark job differs where an Id is sent twice in one commit (see
    # spark_peer.py): reported, not a failure. Every other tool must match.
    if not all(r["matches_smelt"] for r in results if r["tool"] != "spark-sql"):
        sys.exit("some peer's final silver differs from smelt's (see results.md)")


if __name__ == "__main__":
    main()
