# Sourced by the examples' run.sh: builds smelt (debug, into the shared target dir) and
# defines `smelt` to run it.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/smelt-target}"
cargo build --quiet --package smelt-cli
smelt() { "$CARGO_TARGET_DIR/debug/smelt" "$@"; }
