"""The Spark cluster's own account of a benchmark run, from its driver's REST API: per SQL
execution its wall time and, over the stages of its jobs, the executor time, bytes read,
shuffled and written, and the tasks; per executor the totals. Saves all of it as JSON and
prints the 25 longest executions.

    python bench/spark_metrics.py http://127.0.0.1:<driver UI port> out.json

(`testenv/spark/start.sh` writes the driver UI's URL to `cluster.env` as SPARK_DRIVER_UI.)
"""
import json, sys, urllib.request, re
U = sys.argv[1] + "/api/v1"
get = lambda p: json.load(urllib.request.urlopen(U + p))
app = get("/applications")[0]["id"]
A = f"/applications/{app}"
stages = {s["stageId"]: s for s in get(A + "/stages?status=complete")}
jobs = {j["jobId"]: j for j in get(A + "/jobs")}
sqls = get(A + "/sql?details=false&length=10000")
out = []
for q in sqls:
    m = re.search(r'query: "((?:[^"\\]|\\.)*)"', q["description"])
    text = m.group(1) if m else q["description"][:60]
    text = text.replace("\\n", " ")[:90]
    st = [s for j in q.get("successJobIds", []) + q.get("failedJobIds", []) for s in jobs.get(j, {}).get("stageIds", []) if s in stages]
    agg = {k: sum(stages[s].get(k, 0) for s in st) for k in ("executorRunTime", "inputBytes", "inputRecords", "shuffleReadBytes", "shuffleWriteBytes", "outputBytes", "numTasks")}
    out.append(dict(id=q["id"], submitted=q["submissionTime"], ms=q["duration"], text=text, **agg))
json.dump({"app": app, "executors": get(A + "/executors"), "sql": out}, open(sys.argv[2], "w"), indent=1)
big = sorted(out, key=lambda x: -x["ms"])[:25]
for x in sorted(big, key=lambda x: x["id"]):
    print(f'{x["id"]:>4} {x["ms"]/1000:8.1f}s run {x["executorRunTime"]/1000:8.1f}s in {x["inputBytes"]/2**20:8.0f}MiB shR {x["shuffleReadBytes"]/2**20:8.0f}MiB shW {x["shuffleWriteBytes"]/2**20:8.0f}MiB out {x["outputBytes"]/2**20:7.0f}MiB t{x["numTasks"]:>4} {x["text"]}')
for e in get(A + "/executors"):
    print(e["id"], "tasks", e["totalTasks"], "dur s", e["totalDuration"]/1000, "gc s", e["totalGCTime"]/1000, "in MiB", e["totalInputBytes"]//2**20, "shR MiB", e["totalShuffleRead"]//2**20, "shW MiB", e["totalShuffleWrite"]//2**20)
