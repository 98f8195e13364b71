# Sourced by the examples' run.sh: builds smelt (debug) where cargo builds by default — the
# workspace's `target/`, or `$CARGO_TARGET_DIR` when set — and defines `smelt` to run it.
# It builds the whole workspace, as `cargo test --workspace` does, so that both resolve the
# same features of every shared crate and either command reuses the other's compiled
# dependencies (.ci/check-target-dir checks it).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/target-dir.sh"
cargo build --quiet --workspace
smelt() { "$SMELT_TARGET_DIR/debug/smelt" "$@"; }
