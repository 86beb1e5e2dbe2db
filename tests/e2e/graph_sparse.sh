#!/usr/bin/env bash
# A graph model over sparse input end to end (label e2e): on a Delicious-
# shaped XC set from gen-data, the delicious network written as a graph
# (`inputs: [input]` on its first item) and as a chain, both at seed 1 on
# one thread: the same model, so the same losses (every metrics line) and
# P@k to the last digit (tests/engine/test_net_sparse.c compares the
# parameters step by step).  The splits are whole batches (short ones:
# e2e.lower_chain_configs_generated).  accelrt check plans it at the data's
# row bounds; eval reproduces the run's P@k; a resumed run ends with the
# straight run's tensors; simulate times it; export and distributed: refuse
# it with what to do.
#   graph_sparse.sh ACCELRT SRC
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }
cd "$work" || exit 1

"$bin" gen-data --out xc --shape delicious --train-points 3072 --test-points 512 --seed 1 \
  > /dev/null || fail "gen-data"
cat > graph.yaml <<YAML
name: dg
device: host
seed: 1
model:
  input: {sparse: 500}
  layers:
    - {name: hidden, dense: 128, activation: relu, inputs: [input]}
    - {name: out, dense: 983, activation: softmax}
data: {train: xc/train.txt, test: xc/test.txt, format: xc}
train: {batch: 128, iterations: 60, threads: 1, optimizer: {adam: {lr: 0.001}},
        eval_every: 0, eval_points: 512, checkpoint_every: 30}
output: {dir: g}
YAML
sed -e 's/, inputs: \[input\]//' -e 's/dir: g}/dir: c}/' graph.yaml > chain.yaml

"$bin" check graph.yaml > check.txt || fail "accelrt check of a sparse graph model"
grep -q "hidden  *sparse_dense  *128x128" check.txt || fail "check shows no sparse_dense node"
grep -q "loss  *xent_multi" check.txt || fail "check shows no xent_multi loss"
grep -q "at most [0-9]* features and [0-9]* labels a row" check.txt || fail "check: no row bounds"

"$bin" run graph.yaml --quiet || fail "training the graph model"
"$bin" run chain.yaml --quiet || fail "training the chain model"
[ "$(json g/summary.json iterations)" = 60 ] || fail "60 iterations expected"
python3 - <<'PY' || fail "the graph's run is not the chain's"
import json
g, c = (json.load(open(d + "/summary.json")) for d in ("g", "c"))
# Multi-label evaluation, as the chain's: P@1, 3, 5; the same numbers.
for k in ("train_loss", "loss", "p_at_1", "p_at_3", "p_at_5"):
    print("%s: graph %r, chain %r" % (k, g[k], c[k]))
    assert g[k] == c[k], k
assert "top1" not in g
gl = [json.loads(l)["train_loss"] for l in open("g/metrics.jsonl")]
cl = [json.loads(l)["train_loss"] for l in open("c/metrics.jsonl")]
assert gl == cl, (gl, cl)
PY

"$bin" eval graph.yaml > eval.txt || fail "accelrt eval of a sparse graph model"
[ "$(json g/eval.json p_at_1)" = "$(json g/summary.json p_at_1)" ] \
  || fail "eval P@1 $(json g/eval.json p_at_1) != the run's $(json g/summary.json p_at_1)"

# Exact resume on one thread: 60 straight (above) and 30 + 30 resumed, the
# reader's position with the checkpoint.
"$bin" run graph.yaml --quiet --set train.iterations=30 --set output.dir=halves \
  || fail "first half"
"$bin" run graph.yaml --quiet --resume --set output.dir=halves || fail "second half"
python3 - <<'PY' || fail "resumed tensors differ from the straight run's"
a = open("g/checkpoint.bin", "rb").read()
b = open("halves/checkpoint.bin", "rb").read()
assert len(a) == len(b), (len(a), len(b))
assert a[:16] == b[:16] and a[16:56] == b[16:56], "positions differ"
assert a[64:-4] == b[64:-4], "tensors differ"
PY

# accelrt simulate times its nodes on a sparse batch (the lowered chain's
# net; before, it planned the net without row bounds and stopped).
"$bin" simulate graph.yaml --workers 2 --servers 1 --gbps 1 > sim.txt 2>&1 \
  || { cat sim.txt; fail "simulate of a sparse graph model"; }
for o in none random tic tac; do
  grep -q "^$o " sim.txt || { cat sim.txt; fail "simulate printed no row for $o"; }
done

"$bin" export graph.yaml --onnx m.onnx > export.txt 2>&1 && fail "export of a sparse graph model succeeded"
grep -q "sparse input has no ONNX form" export.txt || { cat export.txt; fail "export's message"; }
# What it does not run yet is refused at the job file, with what to do.
{ cat graph.yaml; echo "distributed: {servers: 1}"; } > dist.yaml
"$bin" check dist.yaml > dist.txt 2>&1
[ $? = 2 ] || fail "a distributed sparse graph model: exit 2 expected"
grep -q "dist.yaml:[0-9]*:[0-9]*: error: distributed: a graph model over sparse input" dist.txt \
  || { cat dist.txt; fail "distributed refusal's message"; }
exit 0
