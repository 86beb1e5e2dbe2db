#!/usr/bin/env bash
# tests/tenancy/metrics.sh ACCELRT SRC PYTHON CASE: accelrt serve --http.
#  scrape: /metrics before and while jobs run, checked by a Prometheus text
#          parser (metrics_client.py; first shown to refuse broken texts):
#          every family typed before its samples, the switch histogram
#          cumulative to +Inf with _count equal to it, the iterations counter
#          growing between two scrapes of a running job, memory in use equal
#          to the plan sizes of the admitted jobs, a job that does not fit
#          counted as waiting; no job name, path, user or state folder in
#          /metrics, /status.json or /; bad requests (POST, unknown paths, a
#          body, a huge header, a trickled request, too many connections)
#          refused while the server goes on.
#  page:   the status page in headless Chromium: after its script ran the
#          DOM holds the figures and the lanes, and a screenshot has ink
#          (skipped, 77, without chromium).
# A build without libmicrohttpd is skipped (77) after checking that --http
# says so and exits 2.
set -euo pipefail
bin=$1
src=$2
py=$3
case=$4
. "$(dirname "$0")/lib.sh"
client="$src/tests/tenancy/metrics_client.py"
new_tmp
sock=$t/s.sock
fail() { echo "FAIL: $*"; echo "--- server log"; cat "$t/serve.log" 2>/dev/null || true; exit 1; }

# --http is parsed before --threads: a build without libmicrohttpd stops at
# it (exit 2, saying so), a build with it at the bad --threads (exit 2).
rc=0
"$bin" serve --http 1 --threads x >/dev/null 2>"$t/err" || rc=$?
[ "$rc" = 2 ] || fail "serve --http 1 --threads x exited $rc: $(cat "$t/err")"
if grep -q "built without libmicrohttpd" "$t/err"; then
  echo "skipped: this build has no libmicrohttpd (install libmicrohttpd-dev)"
  exit 77
fi
grep -q -- "--threads" "$t/err" || fail "unexpected: $(cat "$t/err")"

# The job: the quick start made small (a shared runner holds a few), with
# a name and output folders that must never show on the port.
secret=secret-job-name-q7Zp
job=$src/configs/quickstart.yaml
small=(--set name=$secret --set device=host --set model.input="{sparse: 2000}"
       --set model.layers.hidden.dense=32 --set model.layers.out.dense=300
       --set data.generate.train_points=1000 --set data.generate.test_points=0
       --set data.generate.features=2000 --set data.generate.labels=300
       --set data.generate.nnz=10
       --set train.batch=32 --set train.epochs=100000 --set train.threads=1
       --set train.eval_every=0 --set train.checkpoint_every=0)
# submit_small OUT: submits it, writing to OUT; prints its id.
submit_small() { "$bin" submit --socket "$sock" "$job" "${small[@]}" --set output.dir="$1"; }
# Memory for two persistent blocks and one and a half lanes: under pack
# the second job shares the first one's lane (so there are switches) and a
# third does not fit (so it waits).
# A job's persistent block in the lanes holds what it keeps for its whole
# life: its persistent tensors and its host memory (a graph's batch
# staging, hash tables; ar_tenancy_admit_sizes).
"$bin" check "$job" "${small[@]}" >"$t/check" || fail "check: $(cat "$t/check")"
P=$(awk '/^persistent bytes:/ {print $3}' "$t/check")
H=$(awk '/^host bytes:/ {print $3}' "$t/check")
E=$(awk '/^ephemeral peak bytes:/ {print $4}' "$t/check")
[ -n "$P" ] && [ -n "$H" ] && [ -n "$E" ] || fail "no plan sizes in: $(cat "$t/check")"
P=$((P + H))
r256() { echo $(( ($1 + 255) / 256 * 256 )); }
P=$(r256 "$P")
E=$(r256 "$E")
mem=$(( 2 * P + E + E / 2 ))

start() {
  local i
  for i in 1 2 3 4 5; do # a port taken between choosing and binding: another
    port=$("$py" "$client" free-port)
    "$bin" serve --state "$t/state" --socket "$sock" --device host --policy pack \
      --memory "$mem" --threads 2 --request-timeout 3 --max-conns-per-uid 3 \
      --http "127.0.0.1:$port" >>"$t/serve.log" 2>&1 &
    spid=$!
    for _ in $(seq 200); do
      "$bin" ps --socket "$sock" >/dev/null 2>&1 && return 0
      kill -0 "$spid" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    grep -q "Address already in use" "$t/serve.log" || fail "the server did not come up"
  done
  fail "no free port in five tries"
}
url() { echo "http://127.0.0.1:$port$1"; }
# scrape: /metrics into a new file, checked; prints its path.
scrape() {
  local f
  f=$(mktemp "$t/metrics.XXXXXX")
  ctype=$("$py" "$client" scrape "$(url /metrics)" "$f") || fail "scrape $f"
  case "$ctype" in text/plain*version=0.0.4*) ;; *) fail "/metrics is '$ctype'" ;; esac
  "$py" "$client" check "$f" >/dev/null || fail "$f is not valid: $(cat "$f")"
  echo "$f"
}
val() { "$py" "$client" value "$1" "$2" || fail "no $2 in $1"; }
# int X: the number X (a float in the text) as an integer.
int() { "$py" -c 'import sys; v = float(sys.argv[1]); assert v == int(v); print(int(v))' "$1"; }

if [ "$case" = scrape ]; then
  # The checker itself refuses what it must (else the checks below prove nothing).
  printf '# HELP a_total x\n# TYPE a_total counter\na_total 1\n' >"$t/good"
  "$py" "$client" check "$t/good" >/dev/null || fail "the checker refuses a valid text"
  h='# HELP h x\n# TYPE h histogram\n'
  for broken in 'a 1\n# HELP a x\n# TYPE a gauge\n' \
      '# HELP a x\n# TYPE a counter\na 1\n' \
      "${h}"'h_bucket{le="1"} 3\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 2\n' \
      "${h}"'h_bucket{le="1"} 1\nh_bucket{le="2"} 2\nh_sum 1\nh_count 2\n' \
      "${h}"'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n' \
      '# HELP g x\n# TYPE g gauge\ng{a="b} 1\n' \
      '# HELP g x\n# TYPE g gauge\ng 1\ng 2\n' \
      '# HELP g x\n# TYPE g gauge\ng one\n'; do
    printf "$broken" >"$t/broken"
    "$py" "$client" check "$t/broken" >/dev/null 2>&1 &&
      fail "the checker accepts: $(cat "$t/broken")"
  done

  start
  f0=$(scrape)
  [ "$(val "$f0" accelrt_iterations_total)" = 0 ] || fail "iterations before any job"
  [ "$(val "$f0" 'accelrt_jobs{state="running"}')" = 0 ] || fail "running before any job"
  cap=$(val "$f0" accelrt_memory_capacity_bytes)
  [ "$cap" = $(( mem / 256 * 256 )) ] || fail "capacity $cap, --memory $mem"
  for fam in accelrt_samples_total accelrt_samples_per_second accelrt_memory_persistent_bytes \
      accelrt_memory_lane_bytes accelrt_lanes accelrt_admission_waiting_jobs \
      accelrt_admission_waits_total accelrt_lane_switch_latency_seconds_count \
      accelrt_lanes_busy_seconds_total; do
    val "$f0" "$fam" >/dev/null
  done
  grep -q '^# TYPE accelrt_lane_switch_latency_seconds histogram$' "$f0" || fail "no histogram"
  grep -q '^# TYPE accelrt_jobs gauge$' "$f0" || fail "accelrt_jobs is not a gauge"

  A=$(submit_small "$t/out-path-marker-A") || fail "submit A"
  B=$(submit_small "$t/out-path-marker-B") || fail "submit B"
  until_state "$A" running
  until_state "$B" running
  # Two scrapes while both run: the counter grows (polled, a hang guard).
  f1=$(scrape)
  i1=$(val "$f1" accelrt_iterations_total)
  for _ in $(seq 600); do
    f2=$(scrape)
    i2=$(val "$f2" accelrt_iterations_total)
    [ "$i2" -gt "$i1" ] && break
    sleep 0.1
  done
  [ "$i2" -gt "$i1" ] || fail "iterations did not grow: $i1 then $i2"
  [ "$(val "$f2" 'accelrt_jobs{state="running"}')" = 2 ] || fail "running: $(cat "$f2")"
  [ "$(val "$f2" accelrt_memory_persistent_bytes)" = $((2 * P)) ] ||
    fail "persistent $(val "$f2" accelrt_memory_persistent_bytes), two blocks of $P"
  [ "$(val "$f2" accelrt_memory_lane_bytes)" = "$E" ] ||
    fail "lane bytes $(val "$f2" accelrt_memory_lane_bytes), one lane of $E"
  [ "$(val "$f2" accelrt_lanes)" = 1 ] || fail "lanes: $(val "$f2" accelrt_lanes)"
  # Samples: a rate once the sampler saw them train, switches once the two
  # took turns in their lane (polled).
  for _ in $(seq 600); do
    f3=$(scrape)
    rate=$(val "$f3" accelrt_samples_per_second)
    sw=$(val "$f3" accelrt_lane_switch_latency_seconds_count)
    "$py" -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "$rate" &&
      [ "$(int "$sw")" -gt 0 ] && break
    sleep 0.1
  done
  [ "$(int "$sw")" -gt 0 ] || fail "no lane switch counted: $(cat "$f3")"
  "$py" -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "$rate" ||
    fail "samples/s stays $rate"
  samples=$(int "$(val "$f3" accelrt_samples_total)")
  [ "$samples" -ge "$(int "$(val "$f3" accelrt_iterations_total)")" ] ||
    fail "fewer samples ($samples) than iterations"

  # A third job does not fit: it waits, and is counted.
  C=$(submit_small "$t/out-path-marker-C") || fail "submit C"
  until_state "$C" queued
  f4=$(scrape)
  [ "$(val "$f4" accelrt_admission_waiting_jobs)" = 1 ] || fail "waiting: $(cat "$f4")"
  [ "$(val "$f4" 'accelrt_jobs{state="queued"}')" = 1 ] || fail "queued: $(cat "$f4")"
  [ "$(val "$f4" accelrt_admission_waits_total)" -ge 1 ] || fail "waits: $(cat "$f4")"

  # Aggregates only: nothing that names a job, a user or a folder.
  "$py" "$client" scrape "$(url /status.json)" "$t/status.json" >/dev/null ||
    fail "/status.json"
  "$py" -c 'import json, sys; s = json.load(open(sys.argv[1]))
assert s["jobs"]["running"] == 2 and s["jobs"]["queued"] == 1, s["jobs"]
assert len(s["history"]["time"]) >= 1 and len(s["lanes"]) == 1, s' "$t/status.json" ||
    fail "status.json: $(cat "$t/status.json")"
  # The page is static (its figures come from /status.json).
  "$py" "$client" scrape "$(url /)" "$t/page.html" >/dev/null || fail "/"
  grep -q "<title>accelrt serve</title>" "$t/page.html" || fail "/ is not the status page"
  me=$(id -un)
  for f in "$f4" "$t/status.json"; do
    for word in "$secret" out-path-marker "$t" "uid"; do
      grep -qF -- "$word" "$f" && fail "$f shows '$word'"
    done
    grep -qwF -- "$me" "$f" && fail "$f shows the user '$me'"
  done

  # Bad requests get their errors; the server goes on.
  "$py" "$client" bad "$port" >"$t/bad" || fail "bad requests: $(cat "$t/bad")"
  "$py" "$client" conn-limit "$port" 3 >>"$t/bad" || fail "connection limit: $(cat "$t/bad")"
  cat "$t/bad"
  kill -0 "$spid" || fail "the server died"
  scrape >/dev/null
  [ "$(state_of "$A")" = running ] || fail "job A is $(state_of "$A") after the bad requests"
  for j in "$A" "$B" "$C"; do "$bin" cancel --socket "$sock" "$j" >/dev/null; done
  until_state "$A" cancelled
  kill -TERM "$spid"
  wait "$spid" || fail "the server exited with $?"
  spid=
  echo "ok: scrape"
  exit 0
fi

[ "$case" = page ] || fail "unknown case $case"
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "skipped: no chromium"; exit 77; }
start
A=$(submit_small "$t/outA") || fail "submit A"
until_state "$A" running
# Until the job has run for at least half of the history the chart shows
# (so its area is a good part of the chart; polled, a hang guard).
history_half_running() {
  "$py" "$client" scrape "$(url /status.json)" "$t/status.json" >/dev/null &&
    "$py" -c 'import json, sys; r = json.load(open(sys.argv[1]))["history"]["running"]
busy = sum(1 for x in r if x > 0); sys.exit(0 if busy >= 2 and 2 * busy >= len(r) else 1)' \
      "$t/status.json"
}
until_ok history_half_running
# The page fetches /status.json when it loads and every few seconds after:
# the DOM after a virtual time budget holds what the script drew.
HOME=$t timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --user-data-dir="$t/chrome" \
  --virtual-time-budget=7000 --dump-dom "$(url /)" >"$t/dom.html" 2>"$t/chrome.log" ||
  fail "chromium failed: $(tail -5 "$t/chrome.log")"
grep -q 'data-loaded="1"' "$t/dom.html" ||
  fail "the page never loaded its data: $(cat "$t/dom.html")"
grep -q 'id="jobs-running">1<' "$t/dom.html" || fail "the page does not show 1 running job"
grep -qE 'id="iterations">[1-9][0-9]*<' "$t/dom.html" || fail "the page shows no iterations"
grep -qE 'id="samples-rate">[0-9.]+ samples/s<' "$t/dom.html" || fail "no samples/s"
[ "$(grep -o '<tr class="lane-row">' "$t/dom.html" | wc -l)" = 1 ] || fail "not one lane row"
grep -q '<polygon id="mem-persistent-area"' "$t/dom.html" || fail "no memory chart"
grep -qF "$secret" "$t/dom.html" && fail "the page shows the job's name"
HOME=$t timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$t/chrome" --virtual-time-budget=7000 --screenshot="$t/shot.png" \
  --window-size=1200,900 "$(url /)" >"$t/chrome.log" 2>&1 ||
  fail "chromium failed: $(tail -5 "$t/chrome.log")"
"$py" "$src/tests/study/png_stats.py" "$t/shot.png" >"$t/stats" ||
  fail "cannot decode the screenshot"
read -r w h nonwhite colours <"$t/stats"
echo "screenshot: ${w}x$h, $nonwhite non-white pixels, $colours colours"
[ "$w" = 1200 ] && [ "$h" = 900 ] || fail "screenshot ${w}x$h, want 1200x900"
# Panels, figures and a filled chart: the page without data has about
# 90,000 non-white pixels (header, panels, labels), the chart's areas over
# half its width add 80,000 or more.
[ "$nonwhite" -gt 150000 ] || fail "only $nonwhite non-white pixels"
[ "$colours" -gt 50 ] || fail "only $colours colours"
"$bin" cancel --socket "$sock" "$A" >/dev/null
kill -TERM "$spid"
wait "$spid" || fail "the server exited with $?"
spid=
echo "ok: page"
