#!/usr/bin/env bash
# Seed 004 end to end: the first build appends the active rows of the whole input; the
# next build appends only the active rows added since. The lake is recreated each time.
set -euo pipefail
cd "$(dirname "$0")"
source ../smelt.sh

show() { smelt sql "SELECT id, status, ts, amount FROM foundry.output ORDER BY id"; }

rm -rf lake
echo "== build 1: the input's three rows; the active ones are appended"
smelt sql -f input.sql
smelt run
show

echo "== build 2: two rows added; only the new active one is appended"
smelt sql -f input_2.sql
smelt run
show

echo "== build 3: nothing added"
smelt run
smelt status
