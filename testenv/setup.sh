#!/usr/bin/env bash
# Installs the services the tests start (an S3-compatible server: moto) into
# testenv/.venv, from PyPI. Idempotent: does nothing when the pinned versions are there.
set -euo pipefail
cd "$(dirname "$0")"
if [ -x .venv/bin/python ] && cmp -s requirements.txt .venv/requirements.txt; then
  exit 0
fi
python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
cp requirements.txt .venv/requirements.txt
