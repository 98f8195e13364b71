#!/usr/bin/env bash
# The soak (not in CI): 1,000 small increments through one apply flow, runs SIGKILLed at
# random moments, silver checked against a model after every run, the time per run recorded
# as the logs grow (bench/soak.py says how).
#   bench/soak.sh [--increments N] [--kill P] [--seed S]
# Builds the release binary (SOAK_PROFILE=debug uses the debug one), writes
# bench/out/soak/{runs.csv,results.json,results.md}. Needs only Python 3's standard library.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
profile="${SOAK_PROFILE:-release}"
if [ "$profile" = release ]; then
  cargo build --release --quiet -p smelt-cli
else
  cargo build --quiet -p smelt-cli
fi
# A copy: builds during the soak do not change the binary under test.
mkdir -p bench/out/soak
cp "$SMELT_TARGET_DIR/$profile/smelt" bench/out/soak/smelt
python3 bench/soak.py --smelt bench/out/soak/smelt --out bench/out/soak \
  --command "bench/soak.sh${*:+ $*}${SOAK_PROFILE:+ (SOAK_PROFILE=$SOAK_PROFILE)}" "$@"
