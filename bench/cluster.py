"""What `smelt optimize --cluster` buys the next increment (issue 45, item 3): smelt's
merge-on-read silver with `change_data: derived` (bench.py's `smelt-mor-derived`) is loaded
and given increments 1..K-1 of a generated product2 bronze; from that state, increment K is
run as it is and after `smelt optimize --cluster`, each `--repeat` times on a fresh copy.
Prints and writes results.{json,md}. bench/cluster.sh builds, generates and calls it."""

import argparse
import json
import os
import shutil
import statistics
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def run(smelt, lake, *args):
    cmd = [smelt, "-q", "--json", "-p", os.path.join(lake, "smelt.yaml"), *args]
    out, wall, rss, cpu = bench.timed(cmd)
    return json.loads(out), wall, rss, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smelt", required=True)
    ap.add_argument("--source", required=True, help="the generated bronze table (all versions)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--increments", type=int, default=5, help="K: the bronze's increments")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    work = os.path.join(args.out, "work")
    shutil.rmtree(work, ignore_errors=True)
    base = os.path.join(work, "base")
    os.makedirs(base)
    bench.smelt_project(base, "smelt-mor-derived", types.SimpleNamespace(tools="smelt-mor-derived", spark=None))
    table = os.path.join(base, "bench", "product2_bronze")
    bench.prepare_copy(args.source, table)
    run(args.smelt, base, "run")
    for v in range(2, args.increments + 1):
        bench.reveal(args.source, table, v)
        run(args.smelt, base, "run")
    last = args.increments + 1
    results = {}
    for mode in ("as written", "after optimize --cluster"):
        steps = []
        for i in range(args.repeat):
            lake = os.path.join(work, f"try-{i}")
            shutil.rmtree(lake, ignore_errors=True)
            shutil.copytree(base, lake)
            optimize = None
            if mode != "as written":
                out, wall, rss, cpu = run(args.smelt, lake, "optimize", "--cluster", "product2")
                silver = next(t for t in out if t["table"] == "bench.product2_silver")
                optimize = {"seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), "peak_rss_bytes": rss,
                            "files_removed": silver["files_removed"], "files_added": silver["files_added"],
                            "rows_purged": silver["rows_purged"], "bytes_spilled": silver["bytes_spilled"]}
            bench.reveal(args.source, os.path.join(lake, "bench", "product2_bronze"), last)
            out, wall, rss, cpu = run(args.smelt, lake, "run")
            flow = out["flows"][0]
            steps.append({"seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), "peak_rss_bytes": rss,
                          "phases_ms": dict(flow["phases_ms"]), "optimize": optimize})
            shutil.rmtree(lake)
        results[mode] = steps
    lines = [f"### `smelt optimize --cluster` before increment {args.increments} {args.label}".rstrip(), "",
             "| silver | increment s (runs) | median | CPU s (median) | guard ms (median) | optimize s | files rewritten → written | rows purged |",
             "|---|---|---|---|---|---|---|---|"]
    for mode, steps in results.items():
        secs = [s["seconds"] for s in steps]
        o = steps[0]["optimize"]
        opt = (f"{statistics.median(s['optimize']['seconds'] for s in steps):.2f}",
               f"{o['files_removed']} → {o['files_added']}", f"{o['rows_purged']:,}") if o else ("—", "—", "—")
        lines.append(f"| {mode} | {' '.join(f'{s:.2f}' for s in secs)} | {statistics.median(secs):.2f} | "
                     f"{statistics.median(s['cpu_seconds'] for s in steps):.2f} | "
                     f"{statistics.median(s['phases_ms'].get('guard', 0) for s in steps):.0f} | {' | '.join(opt)} |")
    md = "\n".join(lines) + "\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    shutil.rmtree(work)
    print(md)


if __name__ == "__main__":
    main()
