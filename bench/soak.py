"""The soak: many small increments through one apply flow, runs SIGKILLed at random moments,
silver checked against a model after every run, the time per run recorded as the logs grow.

    python bench/soak.py --smelt <binary> --out <dir> [--increments 1000] [--kill 0.15] [--seed 7]

The pipeline: bronze `raw.events (id, v, seq, op)` (all STRING, as bronze is), silver
`clean.events` keyed by `id`, sequenced by `seq`, `op = 'D'` a delete (SCD type 1 with
tombstones). Each increment is one bronze commit of `--changes` changes over `--keys` keys:
upserts and deletes, a fifth of them late (a `seq` below ones already applied). After each
increment `smelt run`; with probability `--kill` that run is SIGKILLed after a random part
of a typical run's time, and run again. After every completed run, silver must equal the
model (written here, apart from smelt): per key the change with the greatest `seq`, a delete
leaving the key out, a change older than the key's last delete ignored.

Writes `<out>/runs.csv` (one line per completed run) and `<out>/results.{json,md}`; exits 1 on
the first difference from the model.
"""

import argparse
import csv
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

PIPELINE = """lake: ./lake
flows:
  events:
    apply:
      from: raw.events
      into: clean.events
      schema: clean.sql
      sequence_by: [seq]
      apply_as_deletes: op = 'D'
"""

SILVER = "CREATE TABLE clean.events (id STRING NOT NULL, v STRING, seq BIGINT, op STRING, PRIMARY KEY (id))"

BRONZE = """CREATE TABLE raw.events (id STRING, v STRING, seq STRING, op STRING);
ALTER TABLE raw.events SET OPTIONS (enable_change_history = TRUE);
"""


class Model:
    """SCD type 1 with tombstones, sequenced by `seq` (unique here: no ties)."""

    def __init__(self):
        self.state = {}  # id -> (seq, alive, v)

    def apply(self, changes):
        for key, v, seq, op in changes:
            old = self.state.get(key)
            if old is not None and seq <= old[0]:
                continue
            self.state[key] = (seq, op != "D", v)

    def rows(self):
        return sorted((k, s[2]) for k, s in self.state.items() if s[1])


def smelt(binary, project, *args, check=True):
    out = subprocess.run([binary, *args], cwd=project, capture_output=True, text=True)
    if check and out.returncode != 0:
        sys.exit(f"smelt {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out


def silver(binary, project):
    out = smelt(binary, project, "--json", "sql", "SELECT id, v FROM clean.events")
    return sorted((r["id"], r.get("v")) for r in json.loads(out.stdout))


def log_files(table):
    log = table / "_delta_log"
    names = os.listdir(log) if log.is_dir() else []
    return (
        sum(1 for n in names if n.endswith(".json") and n[:20].isdigit()),
        sum(1 for n in names if ".checkpoint." in n),
    )


def increment(rng, n, keys, changes, used):
    """The changes of increment `n`: unique sequences, a fifth of them late."""
    out = []
    for i in range(changes):
        key = f"k{rng.randrange(keys):05d}"
        base = n * changes * 10 + i * 10
        seq = base - rng.randrange(1, 2000) * 10 if rng.random() < 0.2 else base
        while seq in used or seq < 0:
            seq += 1
        used.add(seq)
        op = "D" if rng.random() < 0.1 else "U"
        out.append((key, f"v{n}.{i}", seq, op))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smelt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--increments", type=int, default=1000)
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--keys", type=int, default=500)
    ap.add_argument("--kill", type=float, default=0.15)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--command", default=" ".join(sys.argv))
    a = ap.parse_args()
    binary = str(Path(a.smelt).resolve())
    out = Path(a.out)
    project = out / "project"
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    (project / "smelt.yaml").write_text(PIPELINE)
    (project / "clean.sql").write_text(SILVER)
    (project / "bronze.sql").write_text(BRONZE)
    smelt(binary, project, "sql", "-f", "bronze.sql")
    rng = random.Random(a.seed)
    model = Model()
    used = set()
    runs = []
    kills = killed_mid = 0
    typical = 1.0
    started = time.time()
    for n in range(1, a.increments + 1):
        changes = increment(rng, n, a.keys, a.changes, used)
        values = ", ".join(f"('{k}', '{v}', '{s}', '{o}')" for k, v, s, o in changes)
        (project / "increment.sql").write_text(
            f"INSERT INTO raw.events (id, v, seq, op) VALUES {values}"
        )
        smelt(binary, project, "sql", "-f", "increment.sql")
        model.apply(changes)
        if rng.random() < a.kill:
            delay = rng.uniform(0.0, 1.2) * typical
            child = subprocess.Popen(
                [binary, "run"], cwd=project,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            time.sleep(delay)
            kills += 1
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                killed_mid += 1
            child.wait()
        t0 = time.perf_counter()
        done = smelt(binary, project, "--json", "run", check=False)
        took = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"increment {n}: the run failed:\n{done.stderr}")
        typical = took
        got, want = silver(binary, project), model.rows()
        if got != want:
            only_got = sorted(set(got) - set(want))[:10]
            only_want = sorted(set(want) - set(got))[:10]
            sys.exit(
                f"increment {n}: silver differs from the model\n"
                f"  only in silver: {only_got}\n  only in the model: {only_want}"
            )
        bronze_log = log_files(project / "lake/raw/events")
        silver_log = log_files(project / "lake/clean/events")
        runs.append({
            "increment": n, "seconds": round(took, 4), "rows": len(want),
            "bronze_commits": bronze_log[0], "bronze_checkpoints": bronze_log[1],
            "silver_commits": silver_log[0], "silver_checkpoints": silver_log[1],
        })
        if n % 50 == 0:
            print(f"{n} increments, {kills} runs killed ({killed_mid} mid-run), "
                  f"last run {took:.3f} s, {len(want)} rows", flush=True)
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(runs[0]))
        w.writeheader()
        w.writerows(runs)
    windows = []
    for start in range(0, len(runs), 100):
        part = [r["seconds"] for r in runs[start:start + 100]]
        windows.append({
            "increments": f"{start + 1}–{start + len(part)}",
            "median_s": round(statistics.median(part), 3),
            "p90_s": round(sorted(part)[int(0.9 * (len(part) - 1))], 3),
        })
    last = runs[-1]
    results = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}",
        "command": a.command,
        "increments": a.increments, "changes_per_increment": a.changes, "keys": a.keys,
        "runs_killed": kills, "killed_mid_run": killed_mid,
        "differences_from_model": 0,
        "wall_minutes": round((time.time() - started) / 60, 1),
        "windows": windows,
        "final": last,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    lines = [
        f"Soak, {results['date']}: `{a.command}` ({results['machine']}).",
        "",
        f"{a.increments} increments of {a.changes} changes over {a.keys} keys; "
        f"{kills} runs SIGKILLed ({killed_mid} before they finished) and run again; "
        f"silver equal to the model after every run. {results['wall_minutes']} minutes in all.",
        "",
        "| increments | median run (s) | p90 run (s) |",
        "|---|---|---|",
        *[f"| {w['increments']} | {w['median_s']} | {w['p90_s']} |" for w in windows],
        "",
        f"At the end: bronze {last['bronze_commits']} commit files and "
        f"{last['bronze_checkpoints']} checkpoint(s) in its log; silver "
        f"{last['silver_commits']} and {last['silver_checkpoints']}; {last['rows']} rows.",
    ]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
