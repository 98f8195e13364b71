#!/usr/bin/env bash
# Starts a test Spark cluster on 127.0.0.1, on free ports: a standalone master, two workers (1 core,
# 1536 MiB each) and a Spark Connect server with Delta Lake (jars/), whose driver runs the
# executors on the two workers. Waits until the Connect port answers and both executors have
# registered, then prints the Connect URL (sc://127.0.0.1:<port>) alone on stdout.
#   testenv/spark/start.sh DIR    (stop it with testenv/spark/stop.sh DIR)
# Everything it writes lands in DIR: logs/, the workers' work-*/ dirs, tmp/, warehouse/, the pids
# (*.pid, one process group each) and cluster.env (the ports and URLs, as shell assignments).
# Run install.sh (or testenv/setup.sh) first.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
dir=$(cd "$1" && pwd)
case $dir in *[[:space:]]*) echo "DIR must have no spaces: $dir" >&2; exit 2 ;; esac
for f in "$dir"/*.pid; do
  [ -e "$f" ] && kill -0 -- "-$(cat "$f")" 2>/dev/null && { echo "a cluster is running in $dir: $here/stop.sh $dir" >&2; exit 1; }
done
rm -f "$dir"/*.pid

py="$here/.venv/bin/python"
spark_home=$(echo "$here"/.venv/lib/python3*/site-packages/pyspark)
[ -x "$spark_home/bin/spark-submit" ] && [ -d "$here/jars" ] || { echo "not installed: run $here/install.sh" >&2; exit 1; }
started=$(date +%s.%N)

# Free loopback ports: master, master UI, 2 x (worker, worker UI), Connect, driver UI.
read -r master_port master_ui w1_port w1_ui w2_port w2_ui connect_port driver_ui < <("$py" -c '
import socket
ss = [socket.socket() for _ in range(8)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')

mkdir -p "$dir"/{conf,logs,tmp,warehouse,work-1,work-2}
# Warnings and errors only: at Spark's INFO the driver writes a line per task and block.
cat >"$dir/conf/log4j2.properties" <<'EOF'
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
# A WARN with a stack trace for every read through a glob (smelt's `…/{name,…}`): Spark
# first looks the glob up as a streaming sink's folder, which does not exist.
logger.sink.name = org.apache.spark.sql.execution.streaming.sinks.FileStreamSink
logger.sink.level = error
EOF
export SPARK_HOME="$spark_home" SPARK_CONF_DIR="$dir/conf" SPARK_LOG_DIR="$dir/logs"
export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=127.0.0.1 SPARK_LOCAL_DIRS="$dir/tmp"
# Every JVM (launchers, daemons, driver, executors, which inherit it): no files outside DIR
# (hsperfdata goes to /tmp whatever java.io.tmpdir says); on 2 cores, the quick JIT only and
# one GC thread: short-lived JVMs busy with tiny tasks spend more on compiling than running.
# The driver, which lives as long as the tests and plans every statement, compiles fully.
export JAVA_TOOL_OPTIONS="-XX:-UsePerfData -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.io.tmpdir=$dir/tmp"
# The master and the workers (not exported: spark-submit gives them to the Connect server too):
# small heaps, no ports other than the chosen ones (fail rather than drift), no REST submission
# server (it would take port 6066).
daemon_env=(env SPARK_DAEMON_MEMORY=256m
  SPARK_DAEMON_JAVA_OPTS="-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false")
master="spark://127.0.0.1:$master_port"

on_error() { echo "start failed; logs in $dir/logs:" >&2; tail -n 20 "$dir"/logs/*.log >&2 || true; "$here/stop.sh" "$dir" >&2 || true; }
trap on_error ERR

# Each in its own process group (setsid execs: the pid is the JVM's and the group's), cwd DIR.
spawn() { # name command...
  local name=$1; shift
  (cd "$dir" && exec setsid "$@" </dev/null >"$dir/logs/$name.log" 2>&1) &
  echo $! >"$dir/$name.pid"
}
spawn master "${daemon_env[@]}" "$spark_home/bin/spark-class" org.apache.spark.deploy.master.Master \
  --host 127.0.0.1 --port "$master_port" --webui-port "$master_ui"
for i in 1 2; do
  port_var=w${i}_port ui_var=w${i}_ui
  spawn "worker-$i" "${daemon_env[@]}" "$spark_home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    --host 127.0.0.1 --port "${!port_var}" --webui-port "${!ui_var}" \
    --cores 1 --memory 1536m --work-dir "$dir/work-$i" "$master"
done

# Tuned for the tests' tiny tables (measured on the 2-core test machine: seed 000's Spark
# scenario 344 s before, 73 s after): a shuffle partition per executor core, no wait for a
# task's preferred executor, no whole-stage code generation (compiling each plan's Java costs
# more than the rows it runs), Delta's log state in 2 partitions, not 50.
jars=$(ls "$here"/jars/*.jar | paste -sd, -)
spawn connect "$spark_home/bin/spark-submit" \
  --class org.apache.spark.sql.connect.service.SparkConnectServer \
  --name smelt-test --master "$master" --deploy-mode client \
  --jars "$jars" \
  --driver-memory 1g --driver-java-options "-XX:TieredStopAtLevel=4" --executor-memory 1536m --executor-cores 1 --total-executor-cores 2 \
  --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 \
  --conf spark.port.maxRetries=0 \
  --conf spark.connect.grpc.binding.address=127.0.0.1 \
  --conf spark.connect.grpc.binding.port="$connect_port" \
  --conf spark.connect.grpc.port.maxRetries=0 \
  --conf spark.ui.port="$driver_ui" --conf spark.ui.showConsoleProgress=false \
  --conf spark.local.dir="$dir/tmp" \
  --conf spark.sql.warehouse.dir="$dir/warehouse" \
  --conf spark.sql.catalogImplementation=in-memory \
  --conf spark.sql.shuffle.partitions=2 \
  --conf spark.locality.wait=0s \
  --conf spark.sql.codegen.wholeStage=false \
  --conf spark.sql.codegen.factoryMode=NO_CODEGEN \
  --conf spark.databricks.delta.snapshotPartitions=2 \
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
  spark-internal

cat >"$dir/cluster.env" <<EOF
SPARK_CONNECT_URL=sc://127.0.0.1:$connect_port
SPARK_MASTER_URL=$master
SPARK_MASTER_UI=http://127.0.0.1:$master_ui
SPARK_DRIVER_UI=http://127.0.0.1:$driver_ui
EOF

# Ready: both workers alive at the master, the Connect port open, both executors registered.
"$py" - "$dir" "$master_ui" "$connect_port" "$driver_ui" <<'EOF'
import json, os, socket, sys, time, urllib.request
d, master_ui, connect_port, driver_ui = sys.argv[1], *map(int, sys.argv[2:])
def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)
def alive():
    for f in os.listdir(d):
        if f.endswith(".pid"):
            try:
                os.kill(int(open(os.path.join(d, f)).read()), 0)
            except ProcessLookupError:
                sys.exit(f"{f[:-4]} exited")
deadline = time.monotonic() + 240
state = "master"
while True:
    if time.monotonic() > deadline:
        sys.exit(f"timed out waiting for: {state}")
    alive()
    try:
        if state == "master":
            if get(f"http://127.0.0.1:{master_ui}/json").get("aliveworkers", 0) >= 2:
                state = "connect"
        if state == "connect":
            socket.create_connection(("127.0.0.1", connect_port), timeout=2).close()
            state = "executors"
        if state == "executors":
            apps = get(f"http://127.0.0.1:{driver_ui}/api/v1/applications")
            ex = get(f"http://127.0.0.1:{driver_ui}/api/v1/applications/{apps[0]['id']}/executors")
            if sum(e["id"] != "driver" and e["isActive"] for e in ex) >= 2:
                break
    except (OSError, ValueError, IndexError, KeyError):
        pass
    time.sleep(0.5)
EOF
trap - ERR
awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "started in %.1f s\n", b - a }' >"$dir/logs/start-time"
echo "sc://127.0.0.1:$connect_port"
