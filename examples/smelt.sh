# Sourced by the examples' run.sh: builds smelt (debug, into the shared target dir) and
# defines `smelt` to run it. The build resolves the same features as `cargo test --workspace`
# (no dev-dependency adds a feature to a shared crate), so either command reuses the other's
# compiled dependencies.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/smelt-target}"
cargo build --quiet --package smelt-cli
smelt() { "$CARGO_TARGET_DIR/debug/smelt" "$@"; }
