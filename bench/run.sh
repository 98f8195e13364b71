#!/usr/bin/env bash
# Benchmark smelt (copy-on-write, and merge-on-read with deletion vectors: `smelt-mor`) against
# delta-rs (Python), polars and DuckDB on the product2 workload, and smelt's Iceberg silver
# (copy-on-write, merge-on-read) against pyiceberg's `upsert`
# (`--tools smelt-iceberg,smelt-iceberg-mor,pyiceberg`).
#   bench/run.sh [small|medium|large] [--increments K] [--tools smelt,smelt-mor,deltars,deltars-cdf,polars,duckdb,smelt-iceberg,smelt-iceberg-mor,pyiceberg] [--memory-limit 2GiB] [--keys spread|recent]
# `--keys recent` re-sends only the newest tenth of the Ids (clustered keys); its results go
# to bench/out/<scale>-recent. `--tools smelt,smelt-spark,spark-sql` compares smelt embedded,
# smelt on Spark (`engine: spark`) and seed 000's logic written by hand as Spark SQL
# (bench/spark_peer.py) on the test Spark cluster, which this script installs
# (testenv/spark/install.sh), starts in bench/out/<scale>/spark and stops after.
# Builds release binaries, creates bench/.venv from bench/requirements.txt (PyPI), generates
# the bronze table, runs every tool on identical copies, checks their silver against smelt's
# and writes bench/out/<scale>/results.{json,md}.
set -euo pipefail
cd "$(dirname "$0")/.."
scale="${1:-small}"; shift || true
source scripts/target-dir.sh
cargo build --release --quiet -p smelt-cli -p smelt-bench
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
fi
bench/.venv/bin/pip install --quiet -r bench/requirements.txt
out="bench/out/$scale"
case " $* " in *" --keys recent "*) out="bench/out/$scale-recent" ;; esac
export SMELT_BENCH_COMMAND="bench/run.sh $scale${*:+ $*}"
mkdir -p "$out"
spark=()
case " $* " in *smelt-spark*|*spark-sql*)
  testenv/spark/install.sh
  cluster="$out/spark"
  url=$(testenv/spark/start.sh "$cluster")
  trap 'testenv/spark/stop.sh "$cluster"' EXIT
  spark=(--spark "$url" --spark-python testenv/spark/.venv/bin/python)
  ;;
esac
bench/.venv/bin/python bench/bench.py "$scale" \
  --smelt "$SMELT_TARGET_DIR/release/smelt" --gen "$SMELT_TARGET_DIR/release/smelt-bench-gen" \
  --python bench/.venv/bin/python --out "$out" "${spark[@]}" "$@"
