#!/usr/bin/env bash
# What `smelt optimize --cluster` buys the next increment, with spread and recent keys
# (bench/cluster.py says how). Not in CI.
#   bench/cluster.sh [small|medium|large] [--repeat N]
# Builds the release binaries, generates the product2 bronze twice (`--keys spread` and
# `--keys recent`, as bench/run.sh does) and writes bench/out/cluster-<scale>-<keys>/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scale="${1:-medium}"; shift || true
source scripts/target-dir.sh
cargo build --release --quiet -p smelt-cli -p smelt-bench
case "$scale" in
  small) rows=100000 increment=10000 ;;
  medium) rows=2000000 increment=200000 ;;
  large) rows=10000000 increment=1000000 ;;
  *) echo "error: unknown scale \`$scale\` (small, medium, large)" >&2; exit 2 ;;
esac
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
fi
bench/.venv/bin/pip install --quiet -r bench/requirements.txt
for keys in spread recent; do
  out="bench/out/cluster-$scale-$keys"
  rm -rf "$out" && mkdir -p "$out"
  "$SMELT_TARGET_DIR/release/smelt-bench-gen" --table "$out/source/bench/product2_bronze" \
    --rows "$rows" --increment "$increment" --increments 5 --keys "$keys" > /dev/null
  bench/.venv/bin/python bench/cluster.py --smelt "$SMELT_TARGET_DIR/release/smelt" \
    --source "$out/source/bench/product2_bronze" --out "$out" --label "($scale, --keys $keys)" "$@"
  rm -rf "$out/source"
done
