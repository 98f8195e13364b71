#!/usr/bin/env bash
# Ingest throughput: one TPC-H part.tbl (header-less, `|`-separated) loaded into a bronze
# Delta table by smelt's ingest flow, and by pyarrow's streaming CSV reader + the deltalake
# Python writer (all columns as text in both).
#   bench/ingest.sh [scale]     # default 10: 2,000,000 parts, 232 MiB
set -euo pipefail
cd "$(dirname "$0")/.."
scale="${1:-10}"
source scripts/target-dir.sh
cargo build --release --quiet -p smelt-cli -p smelt-bench
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
fi
bench/.venv/bin/pip install --quiet -r bench/requirements.txt
out="bench/out/ingest-$scale"
rm -rf "$out"; mkdir -p "$out/landing"
"$SMELT_TARGET_DIR/release/smelt-tpch-part" --scale "$scale" --out "$out/landing/part.tbl"
cat > "$out/smelt.yaml" <<'YAML'
lake: ./lake
flows:
  part_raw:
    ingest:
      from: ./landing/*.tbl
      into: tpch.part_raw
      format: csv
      header: false
      sep: "|"
      columns: [p_partkey, p_name, p_mfgr, p_brand, p_type, p_size, p_container, p_retailprice, p_comment]
YAML
echo "== smelt"
(cd "$out" && /usr/bin/time -f "wall %e s, peak RSS %M KiB" "$SMELT_TARGET_DIR/release/smelt" -q run)
echo "== pyarrow CSV reader + deltalake writer"
(cd "$out" && /usr/bin/time -f "wall %e s, peak RSS %M KiB" ../../.venv/bin/python ../../ingest_peer.py)
