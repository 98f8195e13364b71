#!/usr/bin/env bash
# Installs the test Spark cluster from the registries (called by testenv/setup.sh): Spark 4.1
# (the pyspark source package on PyPI carries its jars and bin/) into testenv/spark/.venv, and
# Delta Lake and the Iceberg runtime (Maven Central, pom.xml) into testenv/spark/jars/, less the
# jars Spark already ships. start.sh runs it; stop.sh stops it.
# Idempotent: does nothing when the pinned versions are there.
set -euo pipefail
cd "$(dirname "$0")"
command -v java >/dev/null && command -v mvn >/dev/null || { echo "install.sh needs java (17+) and mvn" >&2; exit 1; }
if ! { [ -x .venv/bin/python ] && cmp -s requirements.txt .venv/requirements.txt; }; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  cp requirements.txt .venv/requirements.txt
fi
spark_jars=$(echo .venv/lib/python3*/site-packages/pyspark/jars)
[ -f "$spark_jars"/spark-connect_2.13-*.jar ] || { echo "no Spark Connect server jar in $spark_jars" >&2; exit 1; }
# The jars depend on pom.xml and, through the ones dropped, on the Spark version.
if ! { [ -d jars ] && cat pom.xml requirements.txt | cmp -s - jars/.installed; }; then
  rm -rf jars.tmp
  log=$(mvn -B -q -f pom.xml dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory=jars.tmp 2>&1) || { echo "$log" >&2; exit 1; }
  # Spark's own copy of an artifact wins: drop ours (by artifact name, whatever the version).
  for jar in "$spark_jars"/*.jar; do
    name=$(basename "$jar" .jar | sed -E 's/-[0-9].*$//')
    for ours in jars.tmp/"$name"-[0-9]*.jar; do
      [ -e "$ours" ] && [ "$(basename "$ours" .jar | sed -E 's/-[0-9].*$//')" = "$name" ] && rm -f "$ours"
    done
  done
  cat pom.xml requirements.txt >jars.tmp/.installed
  rm -rf jars && mv jars.tmp jars
fi
