#!/usr/bin/env bash
# The timeline of every kind of run (docs/trace.md): each writes
# output.dir/trace.json, and tests/e2e/trace_check.py loads it and checks
# its structure and what the kind promises.
#   trace.sh ACCELRT SOURCE_DIR CASE [MPIEXEC]
# Cases: single (chain model; the detail rule), lsh (table rebuilds),
# bounded (a small buffer: detail stops, iterations go on), interrupt
# (SIGTERM: the trace is written with the checkpoint), graph (per-op),
# dist (mpiexec: one process per rank, every transfer on its channel).
# The lanes runner's trace.json is checked by tests/tenancy/multi_job.sh.
# Exit 0 pass, 1 fail, 77 skipped.
set -uo pipefail
bin=$1 src=$2 case=$3 mpiexec=${4:-}
py=${ACCELRT_PYTHON:-/usr/bin/python3}
work=$(mktemp -d /tmp/accelrt-trace-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
check() { "$py" "$src/tests/e2e/trace_check.py" "$@" || fail "trace_check $*"; }
json() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }
[ -x "$py" ] || { echo "skipped: no $py"; exit 77; }

# configs/quickstart.yaml made small: 2000 sparse features, 64 hidden, 200
# labels, batches of 64; train.iterations and more with the arguments.
small=(--quiet --set model.input.sparse=2000 --set model.layers.hidden.dense=64
       --set model.layers.out.dense=200 --set data.generate.train_points=4000
       --set data.generate.test_points=500 --set data.generate.features=2000
       --set data.generate.labels=200 --set train.batch=64 --set train.eval_every=10
       --set train.checkpoint_every=15 --set train.threads=2 --set output.dir="$work/out")
quick() { "$bin" run "$src/configs/quickstart.yaml" "${small[@]}" "$@"; }

case $case in
single)
  # 24 iterations: per-layer detail in 1..10 and in 20 (every 10th), an
  # optimizer span in each.
  ACCELRT_TRACE_DETAIL=10:20 quick --set train.iterations=24 2> "$work/err" ||
    fail "run: $(cat "$work/err")"
  check single "$work/out/trace.json" layers=hidden,out iterations=24
  [ "$(json "$work/out/trace.json" otherData | grep -o "'detail_every': 20")" ] ||
    fail "otherData does not state the rule"
  # A malformed override is refused before anything is written.
  ACCELRT_TRACE_EVENTS=lots quick --set output.dir="$work/bad" 2> "$work/err" &&
    fail "ACCELRT_TRACE_EVENTS=lots was accepted"
  grep -q "ACCELRT_TRACE_EVENTS='lots'" "$work/err" || fail "message: $(cat "$work/err")"
  [ ! -e "$work/bad" ] || fail "a refused run wrote $work/bad"
  # ACCELRT_TRACE_EVENTS=0: no trace, the run as before.
  ACCELRT_TRACE_EVENTS=0 quick --set train.iterations=3 --set output.dir="$work/none" ||
    fail "run without a trace"
  [ ! -e "$work/none/trace.json" ] || fail "ACCELRT_TRACE_EVENTS=0 wrote a trace"
  ;;
lsh)
  quick --set train.iterations=30 \
    --set "model.layers.out.sparse={mode: lsh, hash: srp, active: 0.1, rehash: {every: 5}}" \
    2> "$work/err" || fail "run: $(cat "$work/err")"
  check single "$work/out/trace.json" layers=hidden,out iterations=30 lsh=1
  ;;
bounded)
  # 70 spans: detail stops when the most detailed iteration would not fit
  # in 3/4 of them, the iteration spans go on until the buffer is full,
  # and otherData says so.
  ACCELRT_TRACE_EVENTS=70 ACCELRT_TRACE_DETAIL=100 quick --set train.iterations=40 \
    2> "$work/err" || fail "run: $(cat "$work/err")"
  check single "$work/out/trace.json" layers=hidden,out iterations=40 bounded=1
  ;;
interrupt)
  # SIGTERM: the run stops at an iteration's end, checkpoints, and its
  # trace holds every iteration it ran and the checkpoint.
  "$bin" run "$src/configs/quickstart.yaml" "${small[@]}" --set train.iterations=1000000 &
  pid=$!
  for _ in $(seq 1 300); do [ -s "$work/out/checkpoint.bin" ] && break; sleep 0.1; done
  kill -TERM $pid; wait $pid; rc=$?
  [ $rc = 1 ] || fail "interrupted run exited $rc, want 1"
  it=$(json "$work/out/summary.json" iterations)
  check single "$work/out/trace.json" layers=hidden,out iterations="$it"
  "$py" -c "import json,sys; t=json.load(open(sys.argv[1])); x=[e for e in t['traceEvents'] \
if e.get('cat') == 'checkpoint']; assert x and x[-1]['args']['iteration'] == int(sys.argv[2]), x" \
    "$work/out/trace.json" "$it" || fail "no checkpoint span at iteration $it"
  ;;
graph)
  # configs/tokens-transformer.yaml, 12 iterations on a smaller set: every
  # node forward, backward all but the mask, which no gradient reaches; the
  # loss node's forward and backward one `loss` span.
  ACCELRT_TRACE_DETAIL=4:5 "$bin" run "$src/configs/tokens-transformer.yaml" --quiet \
    --set train.iterations=12 --set train.eval_every=6 --set train.eval_points=256 \
    --set data.generate.train_points=2000 --set data.generate.test_points=256 \
    --set output.dir="$work/gout" 2> "$work/err" || fail "run: $(cat "$work/err")"
  enc=""
  for b in 0 1; do
    for n in att r1 n1 ff1 ff2 r2 n2; do enc="$enc,enc.$b.$n"; done
  done
  check graph "$work/gout/trace.json" layers="m,emb,pos$enc,cls,flat,out" \
    trained=emb,pos,enc.0.att,enc.0.n1,enc.0.ff1,enc.1.ff2,enc.1.n2,out iterations=12
  ;;
dist)
  # configs/cluster.yaml (20 layers, 40 transfers) for 6 iterations, two
  # traced: 1 server and 2 workers under TAC, then 2 servers under TIC.
  [ -n "$mpiexec" ] || { echo "skipped: no mpiexec"; exit 77; }
  layers=$(echo l0{1..9} l1{0..9} out | tr ' ' ,)
  for np in 3 4; do
    servers=$((np - 2)) order=tac
    [ $np = 4 ] && order=tic
    timeout 240 "$mpiexec" --oversubscribe -n $np "$bin" run "$src/configs/cluster.yaml" --quiet \
      --set train.iterations=6 --set train.batch=64 --set distributed.servers=$servers \
      --set distributed.order=$order --set distributed.trace_iterations=2 \
      --set output.dir="$work/d$np" > "$work/out.txt" 2>&1 ||
      fail "mpiexec -n $np: $(cat "$work/out.txt")"
    [ -s "$work/d$np/trace.tsv" ] || fail "trace.tsv is no longer written"
    check dist "$work/d$np/trace.json" layers="$layers" servers=$servers ranks=$np iterations=6 \
      order=$order
  done
  ;;
*) fail "unknown case $case" ;;
esac
echo "ok: $case"
