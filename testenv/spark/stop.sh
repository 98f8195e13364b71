#!/usr/bin/env bash
# Stops the test Spark cluster that start.sh started in DIR: each *.pid there names a process group
# (the Connect server's driver, a worker with its executors, the master), first asked to stop
# (TERM), then killed after 20 s. Nothing of it is left running; DIR stays (logs).
#   testenv/spark/stop.sh DIR
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
groups=()
for name in connect worker-1 worker-2 master; do
  f="$dir/$name.pid"
  [ -f "$f" ] || continue
  pgid=$(cat "$f")
  kill -TERM -- "-$pgid" 2>/dev/null && groups+=("$pgid")
done
for _ in $(seq 40); do
  left=()
  for g in "${groups[@]}"; do kill -0 -- "-$g" 2>/dev/null && left+=("$g"); done
  [ ${#left[@]} -eq 0 ] && break
  sleep 0.5
done
for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
for g in "${groups[@]}"; do
  for _ in $(seq 20); do kill -0 -- "-$g" 2>/dev/null || break; sleep 0.25; done
done
rm -f "$dir"/*.pid
