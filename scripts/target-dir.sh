# Sourced by the examples' and the benchmarks' scripts: sets SMELT_TARGET_DIR to the
# directory cargo builds into here — `$CARGO_TARGET_DIR` when it is set, else a cargo
# config's `build.target-dir`, else the workspace's `target/` — as `cargo metadata`
# reports it, so that the scripts and `cargo test` share one build whatever the environment.
SMELT_TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
if [ -z "$SMELT_TARGET_DIR" ]; then
  echo "error: \`cargo metadata\` did not report a target directory" >&2
  exit 2
fi
export SMELT_TARGET_DIR
