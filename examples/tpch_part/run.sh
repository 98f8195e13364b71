#!/usr/bin/env bash
# Seed 002 end to end: part.tbl lands -> ingest + apply -> a second file with repriced
# and new parts lands -> ingest + apply updates them. The files are made by the TPC-H
# generator (`tpchgen`, scale 0.01: 2,000 parts); lake and landing are recreated each time.
set -euo pipefail
cd "$(dirname "$0")"
source ../smelt.sh
# smelt.sh built the whole workspace, the generator (smelt-bench) included.
tpch_part() { "$SMELT_TARGET_DIR/debug/smelt-tpch-part" "$@"; }

summary() {
  smelt sql "SELECT count(*) AS parts, sum(p_retailprice) AS total_price,
                    count(DISTINCT _datasource) AS files, max(p_partkey) AS max_key
             FROM tpch.part"
  smelt sql "SELECT p_partkey, p_name, p_size, p_retailprice, p_comment,
                    regexp_replace(_datasource, '.*/', '') AS file
             FROM tpch.part WHERE p_partkey IN (1, 20, 2001) ORDER BY p_partkey"
}

rm -rf lake landing
mkdir landing
echo "== day 1: part-day1.tbl lands (the whole table)"
tpch_part --day 1 --out landing/part-day1.tbl
smelt run
summary

echo "== day 2: part-day2.tbl lands (every 20th part repriced +10%, 100 new parts)"
sleep 1   # a later modification time: day 2's rows win by sequence_by _ingest_timestamp
tpch_part --day 2 --out landing/part-day2.tbl
smelt run
summary

echo "== day 3: no new file: nothing to do"
smelt run
smelt status
