"""The medium product2 increment with the lake on a local S3-compatible server (moto, from
`testenv/`) beside the same run on local disk, and the requests each S3 run makes.

    bench/s3.sh [--increments K]

Uses the bronze table `bench/run.sh medium` generated (bench/out/medium/work/source). Each
step makes one more bronze version visible (its log entry copied or uploaded last) and
times `smelt run` on both lakes; the server counts the requests of each S3 run by kind.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import boto3

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
TABLE = "bench/product2_bronze"


def start_server():
    p = subprocess.Popen(
        [os.path.join(ROOT, "testenv/.venv/bin/python"), os.path.join(ROOT, "testenv/s3_server.py"),
         "--count-requests"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    assert line.startswith("PORT "), line
    return p, int(line.split()[1])


def requests(port, reset=False):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/__requests", method="DELETE" if reset else "GET")
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def project(folder, lake):
    os.makedirs(folder, exist_ok=True)
    silver = open(os.path.join(ROOT, "examples/product2/silver.sql")).read()
    with open(os.path.join(folder, "silver.sql"), "w") as f:
        f.write(silver.replace("medallion_demo.product2__silver", "bench.product2_silver"))
    with open(os.path.join(folder, "smelt.yaml"), "w") as f:
        f.write(f"lake: {lake}\nflows:\n  product2:\n    apply:\n      from: bench.product2_bronze\n"
                "      into: bench.product2_silver\n      schema: silver.sql\n")


def run(smelt, folder, env):
    t0 = time.perf_counter()
    p = subprocess.run([smelt, "-q", "--json", "run"], cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"smelt run failed in {folder}:\n{p.stdout}\n{p.stderr}")
    report = json.loads(p.stdout)["flows"][0]
    return wall, report["changes_read"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smelt", required=True)
    ap.add_argument("--increments", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "out", "s3"))
    args = ap.parse_args()
    source = os.path.join(HERE, "out", "medium", "work", "source", TABLE)
    if not os.path.isdir(source):
        sys.exit("no generated bronze: run `bench/run.sh medium --tools smelt` first")
    shutil.rmtree(args.out, ignore_errors=True)
    server, port = start_server()
    try:
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ALLOW_HTTP="true",
                   AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1")
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
        s3.create_bucket(Bucket="bench")
        local = os.path.join(args.out, "local")
        remote = os.path.join(args.out, "s3")
        project(local, ".")
        project(remote, "s3://bench/lake")
        table = os.path.join(local, TABLE)
        os.makedirs(os.path.join(table, "_delta_log"))
        for f in os.listdir(source):
            if f.endswith(".parquet"):
                os.link(os.path.join(source, f), os.path.join(table, f))
                s3.upload_file(os.path.join(source, f), "bench", f"lake/{TABLE}/{f}")

        def reveal(version):
            name = f"{version:020d}.json"
            shutil.copy(os.path.join(source, "_delta_log", name), os.path.join(table, "_delta_log", name))
            s3.upload_file(os.path.join(source, "_delta_log", name), "bench", f"lake/{TABLE}/_delta_log/{name}")

        reveal(0)
        rows = []
        for step in range(args.increments + 1):
            reveal(step + 1)
            local_s, changes = run(args.smelt, local, env)
            requests(port, reset=True)
            s3_s, _ = run(args.smelt, remote, env)
            counts = requests(port)
            rows.append((("initial" if step == 0 else f"increment {step}"), changes, local_s, s3_s, counts))
            print(f"  {rows[-1][0]:>12}: local {local_s:6.2f} s, S3 {s3_s:6.2f} s, requests {counts}", flush=True)
    finally:
        server.kill()
    kinds = ["GET", "HEAD", "LIST", "PUT", "POST", "DELETE"]
    lines = ["| step | changes | local disk s | S3 (moto) s | S3 requests: " + " / ".join(kinds) + " | total |",
             "|---|---|---|---|---|---|"]
    for name, changes, local_s, s3_s, counts in rows:
        lines.append(f"| {name} | {changes:,} | {local_s:.2f} | {s3_s:.2f} | "
                     + " / ".join(str(counts.get(k, 0)) for k in kinds) + f" | {sum(counts.values())} |")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
