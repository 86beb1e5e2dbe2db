#!/usr/bin/env bash
# tests/tenancy/live.sh ACCELRT: live job status through the service's
# clients (protocol version 3, docs/service.md), as whoever runs it.
#  1. ps while a job runs: --json has every key of the shared contract with
#     its type (state running, loss a number, memory above 0, a lane), the
#     iteration grows between two calls; the table has its columns;
#  2. logs: progress lines, plain and JSON, every JSON line parses; -f
#     follows a short job through its progress line to its end;
#  3. cancel ID...: two ids in one command; a failure among them is named
#     and makes the exit status 1;
#  4. after a restart, a log of plain lines (written before version 3)
#     shows as it was, and as JSON "event" objects; the journal kept the
#     ended job's figures;
#  5. the wire: a version-2 ps still gets the table, a version-2 ps asking
#     for json is refused.
# JSON is parsed with $ACCELRT_PYTHON (Debian's /usr/bin/python3).
set -euo pipefail
bin=$1
py=${ACCELRT_PYTHON:-/usr/bin/python3}
. "$(dirname "$0")/lib.sh"
[ -x "$py" ] || skip "no Python at $py to parse the JSON"
umask 022
t=$(mktemp -d)
spid=
cleanup() {
  [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null || true
  rm -rf "$t"
}
trap cleanup EXIT
sock=$t/s.sock
st=$t/state
fail() { echo "FAIL: $*"; echo "--- server log"; cat "$t/serve.log" || true; exit 1; }
start() {
  "$bin" serve --state "$st" --socket "$sock" --device host --policy fifo --memory 256MiB \
    --threads 1 >>"$t/serve.log" 2>&1 &
  spid=$!
  until_ok "$bin" ps --socket "$sock" >/dev/null 2>&1
}
# pyjson CODE: runs CODE with `d`, the JSON on stdin, and fail() at hand.
pyjson() {
  "$py" -c 'import json, math, sys
def fail(m): print("FAIL: " + m); sys.exit(1)
d = json.load(sys.stdin)
'"$1"
}

svc_job "$t/job.yaml" live
start

# 1. ps while A runs.  fifo: later jobs queue behind it.
A=$("$bin" submit --socket "$sock" "$t/job.yaml" --set output.dir="$t/outA" \
      --set train.iterations=100000000)
until_state "$A" running
# Its pace is known from its second iteration on.
a_json() { "$bin" ps --socket "$sock" --json | pyjson "
a = [j for j in d if j['id'] == $A][0]
sys.exit(0 if a['samples_per_s'] is not None else 1)"; }
until_ok a_json
"$bin" ps --socket "$sock" --json >"$t/ps1.json"
pyjson "
keys = {'id': int, 'name': str, 'uid': int, 'state': str, 'iteration': int,
        'iterations': int, 'loss': float, 'samples_per_s': float, 'eta_s': float,
        'persistent_bytes': int, 'lane_bytes': int, 'lane': int, 'submitted': float,
        'started': float, 'ended': type(None), 'error': type(None)}
if not isinstance(d, list) or len(d) != 1: fail('ps --json: %r' % d)
a = d[0]
if set(a) != set(keys): fail('keys %s' % sorted(set(a) ^ set(keys)))
for k, ty in keys.items():
  if not isinstance(a[k], ty) or isinstance(a[k], bool): fail('%s is %r' % (k, a[k]))
if a['id'] != $A or a['uid'] != $(id -u) or a['name'] != 'live': fail(repr(a))
if a['state'] != 'running' or a['iterations'] != 100000000: fail(repr(a))
if not (a['iteration'] >= 2 and math.isfinite(a['loss']) and a['samples_per_s'] > 0): fail(repr(a))
if not (a['eta_s'] > 0 and a['persistent_bytes'] > 0 and a['lane_bytes'] > 0 and a['lane'] >= 1):
  fail(repr(a))
if not (a['started'] >= a['submitted'] > 1e9): fail(repr(a))
" <"$t/ps1.json" || fail "ps --json while A runs: $(cat "$t/ps1.json")"
it1=$(pyjson 'print(d[0]["iteration"])' <"$t/ps1.json")
grows() {
  [ "$("$bin" ps --socket "$sock" --json | pyjson 'print(d[0]["iteration"])')" -gt "$it1" ]
}
until_ok grows
"$bin" ps --socket "$sock" >"$t/ps.txt"
grep -qE '^ID +USER +STATE +ITERATION +LOSS +SAMPLES/S +ETA +MEMORY +LANE +NAME$' <<<"$(head -1 "$t/ps.txt")" ||
  fail "ps header: $(cat "$t/ps.txt")"
awk -v id="$A" '$1 == id && $3 == "running" && $4 ~ /^[0-9]+\/100000000$/ &&
  $5 ~ /^[0-9.]+$/ && $6 ~ /^[0-9.]+$/ && $7 ~ /:/ && $8 ~ /^[0-9.]+[KMG]?i?B\+[0-9.]+[KMG]?i?B$/ &&
  $9 ~ /^[0-9]+$/ && $10 == "live" { ok = 1 } END { exit !ok }' "$t/ps.txt" ||
  fail "ps row of A: $(cat "$t/ps.txt")"
C=$("$bin" submit --socket "$sock" "$t/job.yaml" --set output.dir="$t/outC")
D=$("$bin" submit --socket "$sock" "$t/job.yaml" --set output.dir="$t/outD" \
      --set train.iterations=100000000)
until_state "$C" queued
"$bin" ps --socket "$sock" --json | pyjson "
c = [j for j in d if j['id'] == $C][0]
want = {'state': 'queued', 'iteration': 0, 'iterations': 30, 'loss': None, 'lane': None,
        'samples_per_s': None, 'eta_s': None, 'persistent_bytes': 0, 'lane_bytes': 0,
        'started': None}
for k, v in want.items():
  if c[k] != v: fail('queued C: %s is %r' % (k, c[k]))" || fail "ps --json of a queued job"

# 2. A's log: progress lines, plain and JSON.
"$bin" logs --socket "$sock" "$A" >"$t/logA.txt"
grep -qE '^\[[0-9]{2}:[0-9]{2}:[0-9]{2}\] iter 1/100000000 \(0%\) loss [0-9.]+$' "$t/logA.txt" ||
  fail "no progress line in A's log: $(cat "$t/logA.txt")"
"$bin" logs --socket "$sock" --json "$A" >"$t/logA.json"
"$py" -c 'import json, sys
kinds = []
for line in open(sys.argv[1]):
  o = json.loads(line)
  assert isinstance(o["time"], float) and isinstance(o["text"], str), o
  kinds.append(o["kind"])
  if o["kind"] == "progress":
    assert o["iteration"] >= 1 and o["iterations"] == 100000000, o
    assert isinstance(o["loss"], float), o
    assert set(o) == {"time", "kind", "text", "iteration", "iterations", "loss",
                      "samples_per_s", "eta_s"}, o
assert kinds[:3] == ["submitted", "queued", "started"] and "progress" in kinds, kinds
' "$t/logA.json" || fail "A's JSON log: $(cat "$t/logA.json")"

# 3. Two ids in one cancel; C then runs (fifo) and -f follows it to its end.
"$bin" cancel --socket "$sock" "$A" "$D" >"$t/cancel.out" || fail "cancel $A $D: $?"
grep -q "^job $A: cancelling" "$t/cancel.out" && grep -q "^job $D: cancelling" "$t/cancel.out" ||
  fail "cancel said: $(cat "$t/cancel.out")"
"$bin" logs --socket "$sock" -f "$C" >"$t/logC.txt"
grep -qE '\] iter 1/30 \(3%\) loss [0-9.]+$' "$t/logC.txt" && grep -q "done: 30 iterations" \
  "$t/logC.txt" || fail "logs -f of C: $(cat "$t/logC.txt")"
until_state "$A" cancelled
until_state "$D" cancelled
"$bin" logs --socket "$sock" --json -f "$C" >"$t/logC.json"
"$py" -c 'import json, sys
kinds = [json.loads(l)["kind"] for l in open(sys.argv[1])]
assert kinds[0] == "submitted" and kinds[-1] == "done" and "progress" in kinds, kinds
' "$t/logC.json" || fail "C's JSON log: $(cat "$t/logC.json")"
set +e
"$bin" cancel --socket "$sock" "$C" 999999 >"$t/cancel2.out" 2>"$t/cancel2.err"
rc=$?
set -e
[ $rc = 1 ] || fail "cancel of an ended and an unknown job exited $rc"
grep -q "job $C: the job has already ended" "$t/cancel2.err" &&
  grep -q "job 999999: no job 999999 of yours" "$t/cancel2.err" ||
  fail "cancel failures not named: $(cat "$t/cancel2.err")"
"$bin" cancel --socket "$sock" "$C" x 2>/dev/null && fail "a bad id was taken"

# 4. A log of plain lines, as servers before version 3 wrote them.
kill -TERM "$spid"
wait "$spid" || fail "the server exited with $?"
spid=
printf '%s\n' "[10:00:00] submitted by uid 0 from /x/job.yaml" "[10:00:01] queued" \
  'job.yaml:4:2: error: "quoted" \ back' "[10:00:02] done: 30 iterations" >"$st/jobs/$C/log"
start
"$bin" logs --socket "$sock" "$C" | cmp - "$st/jobs/$C/log" || fail "old log shown changed"
"$bin" logs --socket "$sock" --json "$C" | "$py" -c 'import json, sys
objs = [json.loads(l) for l in sys.stdin]
assert [o["kind"] for o in objs] == ["event"] * 4, objs
assert objs[2]["text"] == "job.yaml:4:2: error: \"quoted\" \\ back", objs
assert objs[3]["text"] == "done: 30 iterations" and objs[3]["time"] > objs[0]["time"], objs
' || fail "old log as JSON"
"$bin" ps --socket "$sock" --json | pyjson "
c = [j for j in d if j['id'] == $C][0]
if c['state'] != 'done' or c['iteration'] != 30 or c['iterations'] != 30: fail(repr(c))
if not (isinstance(c['loss'], float) and c['ended'] >= c['started'] >= c['submitted']):
  fail(repr(c))" || fail "the journal lost C's figures"

# 5. The wire, as an older client speaks it.
"$bin" logs --socket "$sock" "$A" >"$t/logA.txt"
"$py" - "$sock" "$A" "$t/logA.txt" <<'PY' || fail "protocol versions"
import socket, struct, sys
def call(fields):
    """The replies to one request, each a dict of tag -> value."""
    body = b"".join(bytes([t]) + struct.pack(">I", len(v)) + v for t, v in fields)
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.sendall(struct.pack(">I", len(body)) + body)
    replies = []
    while not replies or replies[-1][1] == b"data":
        n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
        b, out = s.recv(n, socket.MSG_WAITALL), {}
        while b:
            t, l = b[0], struct.unpack(">I", b[1:5])[0]
            out[t], b = b[5:5 + l], b[5 + l:]
        replies.append(out)
    return replies
r = call([(1, b"ps"), (12, b"2")])[-1]
assert r[1] == b"ok" and r[10].startswith(b"ID "), r
r = call([(1, b"ps"), (12, b"2"), (14, b"1")])[-1]
assert r[1] == b"error" and b"version 3" in r[10], r
# A version-1 logs (no version field) reads the new log as plain lines.
r = call([(1, b"logs"), (2, sys.argv[2].encode())])
assert r[-1][1] == b"end", r
text = b"".join(m.get(10, b"") for m in r[:-1])
assert text == open(sys.argv[3], "rb").read() and text.startswith(b"["), text
PY
kill -TERM "$spid"
wait "$spid" || fail "the server exited with $?"
spid=
echo "ok"
