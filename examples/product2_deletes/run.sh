#!/usr/bin/env bash
# Seed 000 with soft deletes: a delete, late changes that must not resurrect it, a restore;
# as SCD type 1 (product2__silver) and as SCD type 2 history (product2__history).
# Uses the product2 example's bronze DDL, first INSERT and silver DDL.
set -euo pipefail
cd "$(dirname "$0")"
source ../smelt.sh
show() {
  smelt sql "SELECT Id, Name, IsDeleted, SystemModstamp FROM medallion_demo.product2__silver ORDER BY Id"
  smelt sql "SELECT Id, Name, __START_AT, __END_AT FROM medallion_demo.product2__history ORDER BY Id, __START_AT"
  if [ -d lake/medallion_demo/product2__silver__tombstones ]; then
    smelt sql "SELECT Id, SystemModstamp FROM medallion_demo.product2__silver__tombstones ORDER BY Id"
  fi
}

rm -rf lake
echo "== step 1: bronze table and the first three products"
smelt sql -f ../product2/bronze.sql
smelt sql -f ../product2/insert_1.sql
smelt run
show

echo "== step 2: ...002 deleted in Salesforce (IsDeleted = 'true'), ...003 renamed"
smelt sql -f soft_delete.sql
smelt run
show

echo "== step 3: late edits of ...002 and ...003 (older SystemModstamp) and a new ...005"
smelt sql -f late.sql
smelt run
show

echo "== step 4: ...002 restored (a newer change)"
smelt sql -f restore.sql
smelt run
show
