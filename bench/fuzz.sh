#!/usr/bin/env bash
# Fuzzes every target of fuzz/ (or those named) for SECONDS each (default 300) with
# libFuzzer through `cargo fuzz`, installing what it needs (a nightly toolchain, cargo-fuzz)
# on a machine that lacks them. New inputs go to $OUT/<target> (default /tmp/smelt-fuzz),
# crashes to fuzz/artifacts/<target>/; the committed seeds (fuzz/corpus/<target>) are read,
# not written. A crash becomes a regression: fix it, then copy its input into
# fuzz/corpus/<target>/ (the test suite replays every file there).
#
#   bench/fuzz.sh                 # every target, 300 s each
#   SECONDS_PER_TARGET=60 bench/fuzz.sh cast sql
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/smelt-target}"
seconds="${SECONDS_PER_TARGET:-300}"
out="${OUT:-/tmp/smelt-fuzz}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(pipeline sql cast delta_log csv json_lines)
fi

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo +nightly fuzz --version >/dev/null 2>&1 || cargo +stable install cargo-fuzz --locked

# The whole stack instrumented (long the first time; each further target only links).
for t in "${targets[@]}"; do cargo +nightly fuzz build --features libfuzzer "$t"; done

summary=()
for t in "${targets[@]}"; do
  mkdir -p "$out/$t"
  log="$out/$t.log"
  status=0
  cargo +nightly fuzz run --features libfuzzer "$t" "$out/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 >"$log" 2>&1 || status=$?
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  crashes=$(ls "fuzz/artifacts/$t" 2>/dev/null | wc -l)
  summary+=("$t: ${seconds} s, ${execs} executions, exit ${status}, ${crashes} crash file(s) in fuzz/artifacts/$t")
done
printf '%s\n' "${summary[@]}"
