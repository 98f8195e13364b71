#!/usr/bin/env bash
# Seed 000 end to end: bronze DDL + first INSERT -> run -> second INSERT -> run -> replay.
# Builds smelt as needed; the lake is recreated under examples/product2/lake each time.
set -euo pipefail
cd "$(dirname "$0")"
source ../smelt.sh

show_silver() {
  smelt sql "SELECT Id, Name, IsActive, IsArchived, CreatedDate, LastViewedDate, LastReferencedDate,
                    _ingest_timestamp, _update_timestamp
             FROM medallion_demo.product2__silver ORDER BY Id"
}

rm -rf lake
echo "== step 1: bronze table and the first three rows"
smelt sql -f bronze.sql
smelt sql -f insert_1.sql
smelt run
show_silver

echo "== step 2: Id ...001 re-sent with new LastViewedDate/LastReferencedDate, Id ...004 new"
smelt sql -f insert_2.sql
smelt run
show_silver

echo "== step 3: no new bronze data: nothing to do"
smelt run
smelt status
