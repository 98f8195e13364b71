#!/usr/bin/env bash
# Seed 004 on Iceberg, end to end: pyiceberg writes the input (testenv/setup.sh installs it);
# each build runs both transforms and prints both outputs. Everything is recreated each time.
set -euo pipefail
cd "$(dirname "$0")"
source ../smelt.sh
../../testenv/setup.sh
py() { ../../testenv/.venv/bin/python input.py "$@"; }

rm -rf lake warehouse catalog.db
echo "== build 1: the input's three rows"
py build1
smelt run
py show

echo "== build 2: two rows added, and id 1 no longer active"
py build2
smelt run
py show

echo "== build 3: id 3 deleted from the input"
py build3
smelt run
py show

echo "== build 4: nothing new"
smelt run
smelt status
