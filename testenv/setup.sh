#!/usr/bin/env bash
# Installs the services the tests start, from the registries: an S3-compatible server (moto,
# PyPI), pyiceberg (the Iceberg tests' oracle) and SeaweedFS (their REST catalog) into
# testenv/.venv, the Azure Blob emulator (Azurite, npm) and playwright-core into
# testenv/node_modules, headless Chromium (Debian's `chromium`, apt) for the docs page, and the test
# Spark cluster (Spark with Delta Lake, PyPI and Maven Central) into testenv/spark (spark/install.sh).
# Idempotent: does nothing when the pinned versions are there.
set -euo pipefail
cd "$(dirname "$0")"
if ! { [ -x .venv/bin/python ] && cmp -s requirements.txt .venv/requirements.txt; }; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  cp requirements.txt .venv/requirements.txt
fi
if ! { [ -x node_modules/.bin/azurite-blob ] && cmp -s package.json node_modules/.package.json.installed; }; then
  npm install --silent --no-audit --no-fund --no-package-lock
  cp package.json node_modules/.package.json.installed
fi
# Headless Chromium for the `smelt docs` page's browser tests (Debian's package; playwright-core,
# in package.json, drives it).
if ! command -v chromium >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
spark/install.sh
