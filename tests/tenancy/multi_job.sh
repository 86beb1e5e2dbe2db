#!/usr/bin/env bash
# tests/tenancy/multi_job.sh ACCELRT: `accelrt run` of a `jobs:` file end to
# end: three jobs share the host under srtf; one diverges (NaN) and must end
# alone while the others finish; the run's summary.json, metrics.jsonl and
# trace.json and each job's own folder hold what the issue promises.
set -euo pipefail
bin=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
# Two jobs of tests/jobs/small.yaml's model and data (indented under jobs:).
small=$(sed 's/^/    /' "$(dirname "$0")/../jobs/small.yaml")
cat >"$t/mj.yaml" <<YAML
name: mj
device: host
runtime: {policy: srtf, memory: 256MiB}
output: {dir: $t/out}
jobs:
  - name: ok
$small
    train: {batch: 32, iterations: 40, optimizer: {adam: {lr: 0.001}}}
    repeat: 2
  - name: diverges
$small
    train: {batch: 32, iterations: 40, optimizer: {sgd: {lr: 1.0e+30, momentum: 0.9}}}
    arrival: 0.01
YAML
rc=0
"$bin" run "$t/mj.yaml" >"$t/stdout" 2>"$t/stderr" || rc=$?
fail() { echo "FAIL: $*"; cat "$t/stdout" "$t/stderr"; exit 1; }
[ "$rc" -eq 1 ] || fail "exit status $rc, expected 1 (one job failed)"
python3 - "$t/out" <<'PY' || fail "records"
import json, sys
out = sys.argv[1]
s = json.load(open(f"{out}/summary.json"))
for k in ["policy", "makespan_s", "avg_jct_s", "p95_jct_s", "avg_queue_s",
          "switch_latency_ms_p50", "switch_latency_ms_p99", "max_memory_bytes",
          "capacity_bytes", "jobs"]:
    assert k in s, k
assert s["policy"] == "srtf"
jobs = {j["name"]: j for j in s["jobs"]}
assert jobs["ok-1"]["status"] == "done" and jobs["ok-1"]["iterations"] == 40, jobs
assert jobs["ok-2"]["status"] == "done" and jobs["ok-2"]["iterations"] == 40, jobs
assert jobs["diverges"]["status"] == "failed" and "loss" in jobs["diverges"]["error"], jobs
for j in s["jobs"]:
    for k in ["name", "jct_s", "queue_s", "iterations", "lane"]:
        assert k in j, k
assert 0 < s["max_memory_bytes"] <= s["capacity_bytes"] == 256 << 20
lines = [json.loads(l) for l in open(f"{out}/metrics.jsonl")]
assert any(l.get("event") == "memory" and "persistent_bytes" in l and "lane_bytes" in l
           for l in lines)
assert sum(l.get("event") == "job" for l in lines) == 3
t = json.load(open(f"{out}/trace.json"))
ev = t["traceEvents"]
assert any(e.get("ph") == "M" and e.get("name") == "thread_name" and
           e["args"]["name"].startswith("lane") for e in ev)
assert sum(e.get("cat") == "iteration" for e in ev) == 40 + 40 + 2
# Each job's own folder: the engine's summary and its tenancy line.
for name in ["ok-1", "ok-2"]:
    js = json.load(open(f"{out}/{name}/summary.json"))
    assert js["iterations"] == 40
    last = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")][-1]
    assert last["event"] == "job" and "queue_s" in last and "switch_latency_ms_p50" in last
PY
# The structure every accelrt trace.json has (tests/e2e/trace_check.py):
# events complete, tracks named, no overlap on a lane.
"${ACCELRT_PYTHON:-/usr/bin/python3}" "$(dirname "$0")/../e2e/trace_check.py" jobs \
  "$t/out/trace.json" jobs=3 || fail "trace.json"
echo "ok"
