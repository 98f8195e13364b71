#!/usr/bin/env bash
# The medium product2 increment with the lake on a local S3-compatible server (moto) beside
# the same run on local disk, with the requests each S3 run makes.
#   bench/s3.sh [--increments K]      # after `bench/run.sh medium --tools smelt`
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
cargo build --release --quiet -p smelt-cli
testenv/setup.sh
testenv/.venv/bin/python bench/s3.py --smelt "$SMELT_TARGET_DIR/release/smelt" "$@"
