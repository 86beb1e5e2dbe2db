#!/usr/bin/env bash
# Distributed chains lowered onto the graph engine (label mpi;
# runtime/dist/lowered.c): a chain run under mpiexec with
# ACCELRT_CHAIN_ENGINE=chain and =graph gives the same run:
#   - every metrics line's losses and P@k, equal as logged;
#   - the final checkpoint, byte for byte but its training seconds;
#   - the schedule the servers enforce (distributed.schedule writes it)
#     and, per worker and iteration after warm-up, the same transfers of
#     the same bytes (trace.tsv).  The order a worker matches them in,
#     as trace.tsv records it, moves with the timing under either engine
#     (chain runs differ among themselves too), so it is not compared.
# CASE base (dist.lowered), a sparse-input chain of three dense layers:
#   - -np 4: 2 servers (the shards gathered for the checkpoint) under TIC,
#     2 workers taking uneven slices (16 and 17 of 33 rows); -np 2: one
#     worker; -np 3: 1 server under TAC with a sampled layer (22 and 23 of
#     45 rows);
#   - the chain's checkpoint of 4 iterations resumed by the lowered job to
#     8 ends where the chain's 8 straight iterations end;
#   - an LSH-sampled head (issue 17), and a hidden sampled layer: the
#     same, their rows' bytes too (summary.json), the rows' last steps in
#     the checkpoint;
#   - accelrt check names the engine.
# The other cases (dist.lowered_CASE) are the chains that stayed on the
# chain engine under distributed: until issue 14's last part, under -np 3
# and -np 2 (one server; two workers, then one: a worker computing a layer
# dense is the only one under -np 2, so nothing samples there and
# dense_worker's sampled head and dense-input cases run -np 3 only), check
# naming the graph engine for each:
#   dense_input   model.input.dense (the XC rows scattered into a dense
#                 batch, each worker's slice);
#   decay         train.weight_decay: Adam's and SGD with momentum's L2
#                 penalty applied by the server to every tensor, biases too
#                 (as the chain's ar_model_step_layer);
#   dense_worker  a hidden sampled layer, then a sampled head, that
#                 distributed.workers[0] computes dense (its gradients go
#                 as whole rows sets, the server's sparse Adam updates every
#                 row), and a sampled first layer over model.input.dense
#                 one worker computes dense;
#   sampled_first a sampled first layer reading the sparse input (its rows
#                 (width, features)), then a sampled hidden layer after it;
#                 accelrt simulate times the first;
#   sampled_after a sampled head after a sampled hidden layer.
# The batches are whole (330 training and 66 test points, batch 33; 450
# and 90, batch 45): a short batch runs padded on the graph engine, after
# which the parameters, or an evaluation's test loss, can differ from the
# chain's in the last bits, on one process too (docs/graph.md, Lowered
# chains).
#   lowered.sh MPIEXEC ACCELRT PYTHON [CASE]
set -uo pipefail
MPIEXEC=$1 bin=$2 py=$3 case=${4:-base}
work=$(mktemp -d /tmp/accelrt_dlower_XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$work"/out*.txt 2>/dev/null | tail -30 >&2; exit 1; }
export ACCELRT_DIST_TIMEOUT=30
cd "$work" || exit 1
cat > job.yaml <<'YAML'
name: dlow
seed: 3
device: host
model:
  input: {sparse: 600}
  layers:
    - {name: h1, dense: 40, activation: relu}
    - {name: h2, dense: 24, activation: relu}
    - {name: out, dense: 50, activation: softmax}
data: {generate: {train_points: 330, test_points: 66, features: 600, labels: 50, nnz: 8,
                  labels_per_point: 2}}
train: {batch: 33, iterations: 8, threads: 1, optimizer: {adam: {lr: 0.01}}, eval_every: 4,
        eval_points: 66}
output: {dir: run}
distributed: {servers: 1, order: tac, trace_iterations: 2}
YAML

# both NAME NP JOB ARGS...: JOB under each engine into NAME-chain/ and
# NAME-graph/ (schedules NAME-ENGINE.sched).
both() {
  local name=$1 np=$2 job=$3; shift 3
  for e in chain graph; do
    ACCELRT_CHAIN_ENGINE=$e timeout 120 "$MPIEXEC" --oversubscribe -n "$np" "$bin" run "$job" \
      --quiet --set output.dir="$name-$e" --set distributed.schedule="$work/$name-$e.sched" "$@" \
      > "out-$name-$e.txt" 2>&1 || fail "$name: mpiexec -n $np under $e"
  done
  cmp -s "$name-chain.sched" "$name-graph.sched" || fail "$name: the schedules differ"
  "$py" - "$name-chain" "$name-graph" <<'PY' || fail "$name: the runs differ"
import json, sys
a, b = sys.argv[1:3]
# Each run says its engine in run.json (rank 0's folder).
def engine(d):
    return json.load(open(d + "/run.json")).get("engine")
assert engine(a) == "chain" and engine(b) == "graph", \
    "engines %r and %r, want chain and graph" % (engine(a), engine(b))
def lines(d):
    keys = ("kind", "iteration", "epoch", "train_loss", "test_loss", "p_at_1", "p_at_3", "p_at_5")
    return [tuple(json.loads(l).get(k) for k in keys) for l in open(d + "/metrics.jsonl")]
la, lb = lines(a), lines(b)
assert len(la) >= 8 and la == lb, [x for x in zip(la, lb) if x[0] != x[1]][:3]
ca, cb = (open(d + "/checkpoint.bin", "rb").read() for d in (a, b))
assert len(ca) == len(cb) and ca[:56] == cb[:56] and ca[64:-4] == cb[64:-4], "checkpoints differ"
def recvs(d):  # (iteration, worker) -> [(op, bytes)], after warm-up
    out = {}
    rows = [l.rstrip("\n").split("\t") for l in open(d + "/trace.tsv") if not l.startswith("#")]
    head = rows[0]
    for r in rows[1:]:
        x = dict(zip(head, r))
        if x["kind"] == "recv" and x["warmup"] == "0":
            out.setdefault((x["iteration"], x["worker"]), []).append((x["op"], x["bytes"]))
    return {k: sorted(v) for k, v in out.items()}
ra, rb = recvs(a), recvs(b)
assert len(ra) >= 6 and ra == rb, "the transfers or their bytes differ"
def rows_keys(d):  # the rows tensors' bytes (sampled layers)
    s = json.load(open(d + "/summary.json"))
    return {k: v for k, v in s.items() if "bytes_median" in k or k.startswith("graph_bytes")
            or k in ("sampled_workers", "rows_dense_bytes", "rows_dense_steps")}
assert rows_keys(a) == rows_keys(b), (rows_keys(a), rows_keys(b))
PY
}

# lowered JOB ARGS...: accelrt check of JOB names the graph engine (no
# reason to keep it on the chain's).
lowered() {
  local job=$1; shift
  ACCELRT_CHAIN_ENGINE=graph "$bin" check "$job" "$@" > "check-$job.txt" 2>&1 ||
    fail "check $job: exit $?"
  grep -q "^engine: graph (job '[a-z]*', a chain lowered onto the graph engine)" \
    "check-$job.txt" || { cat "check-$job.txt" >&2; fail "check $job: not lowered"; }
}
# pair NAME JOB ARGS...: check lowers JOB; both engines under -np 3 (into
# NAME3-ENGINE/) and -np 2 (NAME2-ENGINE/).
pair() {
  local name=$1 job=$2; shift 2
  lowered "$job" "$@"
  both "${name}3" 3 "$job" "$@"
  both "${name}2" 2 "$job" "$@"
}
# sampled NAME WIDTH ACTIVATION ACTIVE: an LSH-sampled layer's item.
sampled() {
  echo "{name: $1, dense: $2, activation: $3, sparse: {mode: lsh, active: $4, rehash: {every: 3}}}"
}
h1=$(sampled h1 1024 relu 0.05) h2=$(sampled h2 1024 relu 0.05)
head=$(sampled out 2048 softmax 0.02)
# head.yaml: job.yaml with a sampled head over 2048 labels, 45 rows a batch
# (22 and 23 on two workers).
sed -e 's/dlow/dsmp/' -e 's/train_points: 330/train_points: 450/' -e 's/batch: 33/batch: 45/' \
  -e 's/test_points: 66/test_points: 90/' -e 's/eval_points: 66/eval_points: 90/' \
  -e "s/{name: out, dense: 50, activation: softmax}/$head/" -e 's/labels: 50/labels: 2048/' \
  job.yaml > head.yaml
dense_worker=(--set 'distributed.workers=[{sparse: dense}]')

case $case in
base)
  both tic 4 job.yaml --set distributed.servers=2 --set distributed.order=tic
  # One worker (-np 2): its loss is the chain's too, not its mean in double.
  both one 2 job.yaml
  # An LSH-sampled head (issue 17): its tensors travel as rows, the server
  # applies sparse Adam to the rows the workers touched, the tables rebuild
  # every 3 steps; the workers take 22 and 23 of 45 rows.
  sed -e 's/dlow/dsmp/' -e 's/train_points: 330/train_points: 450/' -e 's/batch: 33/batch: 45/' \
    -e 's/test_points: 66/test_points: 90/' -e 's/eval_points: 66/eval_points: 90/' \
    -e 's/{name: out, dense: 50, activation: softmax}/{name: out, dense: 4096, activation: softmax, sparse: {mode: lsh, active: 0.02, rehash: {every: 3}}}/' \
    -e 's/labels: 50/labels: 4096/' job.yaml > smp.yaml
  both smp 3 smp.yaml
  grep -q '"sampled_workers": 2' smp-graph/summary.json || fail "smp: the head was not sampled"
  # A hidden LSH-sampled layer (dense on either side).
  sed -e 's/dlow/dhid/' \
    -e 's/{name: h2, dense: 24, activation: relu}/{name: h2, dense: 2048, activation: relu, sparse: {mode: lsh, active: 0.05, rehash: {every: 3}}}/' \
    job.yaml > hid.yaml
  both hid 3 hid.yaml
  grep -q '"sampled_workers": 2' hid-graph/summary.json || fail "hid: h2 was not sampled"

  # The chain's checkpoint after 4 iterations, resumed lowered to 8 (rank 0
  # moves its state to the other server).
  two=(--set distributed.servers=2 --set distributed.order=tic)
  ACCELRT_CHAIN_ENGINE=chain timeout 120 "$MPIEXEC" --oversubscribe -n 4 "$bin" run job.yaml \
    --quiet --set output.dir=half --set train.iterations=4 "${two[@]}" > out-half.txt 2>&1 ||
    fail "the chain's first half"
  ACCELRT_CHAIN_ENGINE=graph timeout 120 "$MPIEXEC" --oversubscribe -n 4 "$bin" run job.yaml \
    --quiet --set output.dir=half --resume "${two[@]}" > out-resume.txt 2>&1 ||
    fail "the lowered resume"
  "$py" - half/checkpoint.bin tic-chain/checkpoint.bin <<'PY' || fail "the resumed run differs"
import sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
assert len(a) == len(b) and a[:56] == b[:56] and a[64:-4] == b[64:-4]
PY

  # The engine line.
  lowered job.yaml
  ;;
dense_input)
  sed -e 's/input: {sparse: 600}/input: {dense: 600}/' job.yaml > din.yaml
  pair din din.yaml
  ;;
decay)
  pair adam job.yaml --set 'train.optimizer={adam: {lr: 0.01, weight_decay: 0.05}}'
  pair sgd job.yaml --set 'train.optimizer={sgd: {lr: 0.05, momentum: 0.9, weight_decay: 0.05}}'
  ;;
dense_worker)
  sed -e "s/{name: h2, dense: 24, activation: relu}/$h2/" job.yaml > hid.yaml
  pair hid hid.yaml "${dense_worker[@]}"
  grep -q '"rows_dense_steps": 8' hid3-graph/summary.json || fail "hid3: no dense worker's rows"
  lowered head.yaml "${dense_worker[@]}"
  both head3 3 head.yaml "${dense_worker[@]}"
  grep -q '"sampled_workers": 1' head3-graph/summary.json || fail "head3: not one sampling worker"
  sed -e 's/input: {sparse: 600}/input: {dense: 600}/' \
    -e "s/{name: h1, dense: 40, activation: relu}/$h1/" job.yaml > dfirst.yaml
  lowered dfirst.yaml "${dense_worker[@]}"
  both dfirst3 3 dfirst.yaml "${dense_worker[@]}"
  ;;
sampled_first)
  sed -e "s/{name: h1, dense: 40, activation: relu}/$h1/" job.yaml > first.yaml
  pair first first.yaml
  grep -q '"sampled_workers": 2' first3-graph/summary.json || fail "first3: h1 was not sampled"
  # simulate times the job (the sampled first layer on its per-sample
  # kernels: timed dense, its missing dense input failed an assertion).
  "$bin" simulate first.yaml --workers 2 --servers 1 --gbps 1 > sim.txt 2>&1 ||
    { rc=$?; cat sim.txt >&2; fail "simulate: exit $rc"; }
  grep -q "^tac " sim.txt || { cat sim.txt >&2; fail "simulate printed no row for tac"; }
  sed -e "s/{name: h2, dense: 24, activation: relu}/$h2/" first.yaml > first_h2.yaml
  pair first_h2_ first_h2.yaml
  ;;
sampled_after)
  sed -e "s/{name: h2, dense: 24, activation: relu}/$h2/" head.yaml > after.yaml
  pair after after.yaml
  grep -q '"sampled_workers": 2' after3-graph/summary.json || fail "after3: not sampled"
  ;;
*)
  fail "unknown case '$case'"
  ;;
esac
echo "ok"
