#!/usr/bin/env bash
# The house rules CI keeps (issue 43): no two module files of a crate import each other,
# directly or around a circle (a child module using its parent's items aside), and no
# product function is over 150 lines. Both read the sources only; a second or two.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
crates="$here/../../crates"
cycles="$(python3 "$here/cycles.py" "$crates")"
if [ "$cycles" != "no cycles" ]; then
  echo "$cycles"
  echo "error: module files import each other (above); move what they share to a module both can import"
  exit 1
fi
long="$(python3 "$here/long_functions.py" "$crates" 150)"
if [ -n "$long" ]; then
  echo "$long"
  echo "error: product functions over 150 lines (above); cut them into steps named for what they do"
  exit 1
fi
echo "house rules: ok"
