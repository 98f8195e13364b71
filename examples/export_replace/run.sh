#!/usr/bin/env bash
# Seed 003 end to end: export the rows updated since 2026-07-21 as Parquet under
# export_timestamp=<Tokyo time>/, then replace that period of a typed table with them.
# The lake and the export folder are recreated each time.
set -euo pipefail
cd "$(dirname "$0")"
source ../smelt.sh

show() {
  smelt sql "SELECT sale_id, product_name, quantity, unit_price, sale_date, updated_at,
                    export_timestamp IS NOT NULL AND export_timestamp > '2026-07-22' AS exported_now
             FROM demo.sales ORDER BY sale_id"
}

rm -rf lake exports
echo "== the source table (BigQuery side) and the target with its initial rows (Databricks side)"
smelt sql -f source.sql
smelt sql -f target.sql
show

echo "== export the rows updated since 2026-07-21, and replace that period of the target"
smelt run
find exports -name '*.parquet' | sed 's/-[0-9a-f]\{8\}\.parquet$/-<run>.parquet/' | sort
show

echo "== nothing changed: nothing to export, no new batch"
smelt run
smelt status
