#!/usr/bin/env bash
# Chains lowered onto the graph engine (label e2e; runtime/engine/net_lower.c,
# docs/graph.md "Lowered chains"): the same job file run with
# ACCELRT_CHAIN_ENGINE=chain and =graph, on one thread.
#   lower_chain.sh ACCELRT SRC CASE
# configs_generated, configs_real: chain job files of the repository
#   (configs/quickstart.yaml made smaller with its head LSH-sampled,
#   configs/shared-device.yaml's two lanes, and configs/bibtex.yaml /
#   delicious.yaml over the shared data when it is there) give the same
#   metrics lines and summary under both: the same keys (the sampled
#   layer's LAYER.lsh_* too), every value equal but the timings and the
#   plan's ephemeral/host bytes (the graph plans its batch differently),
#   an epoch's short last batch included.
#   tests/jobs/small.yaml's shape is e2e.graph_sparse's.
# resume: a chain with a hidden LSH-sampled layer and a sampled head:
#   the same records and checkpoints (every tensor, the rows' last steps
#   LAYER.lsh.last too), a checkpoint of either engine resumes on the
#   other as on its own, ONNX export byte-equal, eval's P@k (LSH
#   inference) equal; a dense chain under SGD with momentum (the velocity
#   slots' names) resumes from a version 1 file.
# shapes: the chain shapes lowered later, each straight and in halves that
#   resume the other engine's checkpoint (records and checkpoints equal):
#   train.weight_decay under Adam and under SGD with momentum (the chain
#   decays biases too, and so does its lowered graph); model.input.dense
#   over XC data (the rows scattered into a dense batch, a dense first
#   layer).
# sampled_first: so, an LSH-sampled first layer reading the sparse input
#   (the sampled kernels on the CSR rows, in training and evaluation; its
#   plan without a dense batch.x) and one reading model.input.dense; with
#   a sampled head too.
# sampled_after: so, a hidden LSH-sampled layer after another (reading its
#   active set, as the chain), the first reading a dense layer or the
#   sparse input; a sampled head after them (the chain's scoring without
#   shared negatives), and a one-layer chain, a sampled head over the
#   sparse input.
# route: accelrt check's engine line (graph by default, chain under
#   ACCELRT_CHAIN_ENGINE=chain), the lowered plan's persistent lines equal
#   to the chain's, what stays on the chain engine and why, a bad
#   ACCELRT_CHAIN_ENGINE.
set -uo pipefail
bin=$1
src=$2
case_=$3
py=${ACCELRT_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$work" || exit 1

# Runs FILE under both engines into c/ and g/ with the extra --set options.
both() {
  local file=$1
  shift
  ACCELRT_CHAIN_ENGINE=chain "$bin" run "$file" --quiet --set output.dir=c "$@" \
    || fail "$file: chain run"
  ACCELRT_CHAIN_ENGINE=graph "$bin" run "$file" --quiet --set output.dir=g "$@" 2> graph.err \
    || { cat graph.err; fail "$file: graph run"; }
}

# Every metrics line and summary under c/ and g/ (a jobs: file: its jobs'
# folders; the lanes' own log holds each plan's bytes and the switches
# that timing decides) alike but for the timings and the plan's figures.
same_records() {
  "$py" - "$1" "${2:-.}" <<'PY' || fail "$1: the lowered run's records differ from the chain's"
import glob, json, os, sys
skip = {"samples_per_s", "train_s", "eval_s", "wall_s", "peak_rss_bytes", "ephemeral_bytes",
        "host_bytes", "seconds", "switches", "switch_latency_ms_p50", "switch_latency_ms_p99",
        "persistent_bytes", "lane"}
def strip(d):
    if isinstance(d, dict):
        return [(k, None if k in skip or k.endswith("_s") else strip(v)) for k, v in d.items()]
    if isinstance(d, list):
        return [strip(v) for v in d]
    return d
files = 0
top = sys.argv[2] == "jobs" and "c/*/" or "c/"
for cf in sorted(glob.glob(top + "metrics.jsonl") + glob.glob(top + "summary.json")):
    gf = "g" + cf[1:]
    assert os.path.exists(gf), gf + " missing"
    if cf.endswith(".jsonl"):
        cl = [strip(json.loads(l)) for l in open(cf)]
        gl = [strip(json.loads(l)) for l in open(gf)]
    else:
        cl, gl = strip(json.load(open(cf))), strip(json.load(open(gf)))
    assert len(cl) > 0, cf + " empty"
    if cl != gl:
        print(sys.argv[1], cf, "\n chain", cl, "\n graph", gl)
        sys.exit(1)
    files += 1
assert files >= 2, "no records compared"
print(sys.argv[1] + ": %d record files equal" % files)
PY
  rm -rf c g
}

delicious_job() { # $1: output folder; a delicious-shaped generated set in xc/
  [ -d xc ] || "$bin" gen-data --out xc --shape delicious --train-points 1024 --test-points 256 \
    --seed 1 > /dev/null || fail "gen-data"
  cat > chain.yaml <<YAML
name: dc
device: host
seed: 1
model:
  input: {sparse: 500}
  layers:
    - {name: hidden, dense: 128, activation: relu}
    - {name: out, dense: 983, activation: softmax}
data: {train: xc/train.txt, test: xc/test.txt, format: xc}
train: {batch: 128, iterations: 8, threads: 1, optimizer: {adam: {lr: 0.001}},
        eval_every: 4, eval_points: 256, checkpoint_every: 4}
output: {dir: $1}
YAML
  # A hidden LSH-sampled layer (reading a dense one) and a sampled head
  # (reading a dense one, shared negatives without the chain's default
  # correction): what the graph engine samples.
  sed -e '/name: hidden, dense: 128/c\
    - {name: h0, dense: 32, activation: relu}\
    - {name: h1, dense: 256, activation: relu, sparse: {mode: lsh}}\
    - {name: hidden, dense: 64, activation: relu}' \
    -e 's/softmax}/softmax, sparse: {mode: lsh, negatives: 32}}/' chain.yaml > lsh.yaml
}

# The tensors (after the header's training seconds, before the CRC) and
# the positions of two checkpoints are the same.
same_ckpt() {
  "$py" - "$1" "$2" <<'PY' || fail "checkpoints $1 and $2 differ"
import sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
assert len(a) == len(b), (len(a), len(b))
assert a[:56] == b[:56], "headers differ"
assert a[64:-4] == b[64:-4], "tensors differ"
PY
}

# FILE (8 iterations, a checkpoint every 4), which check says is lowered,
# under both engines: the same checkpoints after 4, each engine resumes
# the other's to 8, and every record and the final checkpoints are equal
# (and the records match the pattern KEYS when given).
cross() {
  # (check's whole output first: grep -q would close the pipe early, and
  # pipefail would count check's SIGPIPE as a failure)
  ACCELRT_CHAIN_ENGINE=graph "$bin" check "$1" > cross-check.txt || fail "$1: check"
  grep -q "^engine: graph (job 'dc'" cross-check.txt || fail "$1: not lowered"
  both "$1" --set train.iterations=4
  same_ckpt c/checkpoint.bin g/checkpoint.bin
  ACCELRT_CHAIN_ENGINE=graph "$bin" run "$1" --quiet --resume --set output.dir=c \
    || fail "$1: graph resuming the chain's checkpoint"
  ACCELRT_CHAIN_ENGINE=chain "$bin" run "$1" --quiet --resume --set output.dir=g \
    || fail "$1: chain resuming the graph's"
  same_ckpt c/checkpoint.bin g/checkpoint.bin
  [ -z "${2:-}" ] || grep -q "$2" g/metrics.jsonl || fail "$1: no $2 in the records"
  same_records "$1"
}

# Each NAME.yaml crosses (above).
lowered_cross() {
  local f
  for f in "$@"; do
    cross $f.yaml
  done
}

case $case_ in
configs_generated)
  # quickstart's shape, sparse -> dense relu -> LSH-sampled softmax head
  # (its out layer samples at wider widths), in a smaller slice.
  both "$src/configs/quickstart.yaml" --set device=host --set train.threads=1 \
    --set train.epochs=0 --set train.iterations=4 --set train.eval_every=2 \
    --set data.generate.train_points=512 --set data.generate.test_points=64 \
    --set data.generate.features=2000 --set model.input.sparse=2000 \
    --set data.generate.labels=3000 --set 'model.layers[1].dense=3000' \
    --set 'model.layers[1].sparse.mode=lsh' --set train.checkpoint_every=2
  grep -q '"out.lsh_active_mean"' g/metrics.jsonl || fail "quickstart: no sampled head"
  same_records quickstart
  # Past an epoch's short last batch (700 points in batches of 128: the
  # 6th has 60 rows; 500 in batches of 64: the 8th has 52) and short
  # evaluation batches (200 test points): the graph runs them padded, its
  # dense items on the real rows only, so the records and the checkpoints
  # stay equal, byte for byte.
  both "$src/configs/shared-device.yaml" --set 'jobs[0].train.iterations=8' \
    --set 'jobs[1].train.iterations=10' --set 'jobs[1].arrival=0' \
    --set 'jobs[0].data.generate.train_points=700' \
    --set 'jobs[1].data.generate.train_points=500' \
    --set 'jobs[0].train.checkpoint_every=4' --set 'jobs[1].train.checkpoint_every=5'
  n=0
  for f in c/*/checkpoint.bin; do
    same_ckpt "$f" "g${f#c}"
    n=$((n + 1))
  done
  [ "$n" = 2 ] || fail "shared-device: $n checkpoints, 2 expected"
  same_records shared-device jobs
  ;;
configs_real)
  data=$src/../shared/data
  [ -d "$data" ] || data=/work/shared/data
  for d in bibtex:Bibtex delicious:Delicious; do
    name=${d%%:*}
    dir=${d#*:}
    [ -f "$data/$dir/${name}_train.txt" ] || { echo "skipped: no $dir data"; exit 77; }
    both "$src/configs/$name.yaml" --set train.threads=1 --set train.epochs=0 \
      --set train.iterations=4 --set train.eval_every=2 --set train.eval_points=128 \
      --set data.train="$data/$dir/${name}_train.txt" --set data.test="$data/$dir/${name}_test.txt"
    same_records "$name"
  done
  ;;
resume)
  # Halves: each engine's first half, then each resumes the other's file.
  delicious_job c
  both lsh.yaml --set train.iterations=4
  same_ckpt c/checkpoint.bin g/checkpoint.bin
  ACCELRT_CHAIN_ENGINE=graph "$bin" run lsh.yaml --quiet --resume --set output.dir=c \
    || fail "graph resuming the chain's checkpoint"
  "$bin" run lsh.yaml --quiet --resume --set output.dir=g || fail "chain resuming the graph's"
  grep -q '"h1.lsh_active_mean".*"out.lsh_active_mean"' g/metrics.jsonl \
    || fail "the lowered run's records lack a sampled layer's statistics"
  same_ckpt c/checkpoint.bin g/checkpoint.bin
  # Export: the same ONNX file from either engine's checkpoint.
  "$bin" export lsh.yaml --onnx c.onnx --checkpoint c/checkpoint.bin > /dev/null \
    || fail "chain export"
  ACCELRT_CHAIN_ENGINE=graph "$bin" export lsh.yaml --onnx g.onnx \
    --checkpoint g/checkpoint.bin > /dev/null || fail "lowered export"
  cmp c.onnx g.onnx || fail "the lowered chain's ONNX file differs from the chain's"
  # eval of the lowered job reads its checkpoint: the chain's LSH
  # inference, its P@k.
  "$bin" eval lsh.yaml --set output.dir=c > /dev/null || fail "chain eval"
  ACCELRT_CHAIN_ENGINE=graph "$bin" eval lsh.yaml --set output.dir=g > /dev/null \
    || fail "lowered eval"
  "$py" - <<'PY' || fail "eval's P@k differ"
import json
c, g = (json.load(open(d + "/eval.json")) for d in "cg")
for k in ("p_at_1", "p_at_3", "p_at_5", "points"):
    assert c[k] == g[k], (k, c[k], g[k])
PY
  rm c/eval.json g/eval.json
  # Every metrics line (the chain's half then the graph's, and the other
  # way round) and the summary.
  same_records lsh
  # A dense chain under SGD with momentum (the velocity slots' names): a
  # version 1 file (names and counts, no shapes) of the chain's half
  # resumes on the graph, which writes the chain's straight file.
  sed -e 's/adam: {lr: 0.001}/sgd: {lr: 0.05, momentum: 0.9}/' chain.yaml > sgd.yaml
  "$bin" run sgd.yaml --quiet --set train.iterations=4 || fail "chain sgd"
  "$bin" run sgd.yaml --quiet --set train.iterations=2 --set output.dir=h3 || fail "chain half (v1)"
  "$py" - h3/checkpoint.bin <<'PY' || fail "rewriting as version 1"
import struct, sys, zlib
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack_from("<I", b, 12)[0]
out = bytearray(b[:8] + struct.pack("<II", 1, n) + b[16:64])
at = 64
for _ in range(n):
    ln = struct.unpack_from("<I", b, at)[0]; at += 4
    name = b[at:at + ln]; at += ln
    dt, nd = b[at], b[at + 1]; at += 4
    dims = struct.unpack_from("<%dq" % nd, b, at); at += 8 * nd
    cnt = 1
    for d in dims:
        cnt *= d
    assert dt == 0, "f32 only"
    out += struct.pack("<I", ln) + name + struct.pack("<q", cnt) + b[at:at + 4 * cnt]
    at += 4 * cnt
assert at == len(b) - 4
out += struct.pack("<I", zlib.crc32(bytes(out)) & 0xffffffff)
open(p, "wb").write(out)
PY
  ACCELRT_CHAIN_ENGINE=graph "$bin" run sgd.yaml --quiet --resume --set output.dir=h3 \
    --set train.iterations=4 || fail "graph resuming a version 1 SGD checkpoint"
  same_ckpt c/checkpoint.bin h3/checkpoint.bin
  ;;
shapes)
  delicious_job c
  sed -e 's/adam: {lr: 0.001}/adam: {lr: 0.001, weight_decay: 0.01}/' chain.yaml > wd.yaml
  sed -e 's/adam: {lr: 0.001}/sgd: {lr: 0.05, momentum: 0.9, weight_decay: 0.01}/' \
    chain.yaml > wdsgd.yaml
  sed -e 's/{sparse: 500}/{dense: 500}/' chain.yaml > dense.yaml
  lowered_cross wd wdsgd dense
  ACCELRT_CHAIN_ENGINE=graph "$bin" check dense.yaml > dense-check.txt || fail "check dense.yaml"
  grep -q "hidden  *dense  *128x128" dense-check.txt \
    || fail "dense.yaml: the lowered first layer is not a dense node"
  ;;
sampled_first)
  delicious_job c
  sed -e 's/name: hidden, dense: 128, activation: relu}/name: h0, dense: 256, activation: relu, sparse: {mode: lsh}}\
    - {name: hidden, dense: 64, activation: relu}/' chain.yaml > first.yaml
  sed -e 's/{sparse: 500}/{dense: 500}/' first.yaml > dfirst.yaml
  lowered_cross dfirst
  # A sampled first layer over the sparse input and a sampled head (h0's
  # LAYER.lsh_* in the records too; the head's loss is its rows' double
  # sum, as the chain's).
  sed -e 's/softmax}/softmax, sparse: {mode: lsh, negatives: 32}}/' first.yaml > first2.yaml
  cross first2.yaml '"h0.lsh_active_mean".*"out.lsh_active_mean"'
  # h0 reads the CSR rows: the lowered plan holds no (batch, features)
  # batch.x (128 x 500 floats, never filled); over model.input.dense it
  # is the batch, planned.
  grep -q "^  ephemeral  batch\.idx " cross-check.txt || fail "first2: no CSR batch in the plan"
  ! grep -q " batch\.x " cross-check.txt || fail "first2: the plan holds batch.x, never filled"
  ACCELRT_CHAIN_ENGINE=graph "$bin" check dfirst.yaml > dcheck.txt || fail "dfirst: check"
  grep -q "^  ephemeral  batch\.x  *256000 B" dcheck.txt || fail "dfirst: no dense batch.x"
  ;;
sampled_after)
  delicious_job c
  # h0 dense, h1 and hidden sampled; then h1 over the sparse input.
  sed -e 's/dense: 64, activation: relu}/dense: 64, activation: relu, sparse: {mode: lsh}}/' \
    -e 's/softmax, sparse: {mode: lsh, negatives: 32}}/softmax}/' lsh.yaml > two.yaml
  sed -e '/name: h0, dense: 32/d' two.yaml > two0.yaml
  sed -e 's/softmax}/softmax, sparse: {mode: lsh, negatives: 32}}/' two.yaml > twoh.yaml
  sed -e '/name: h[01], dense: /d' -e '/name: hidden, dense: /d' twoh.yaml > one.yaml
  lowered_cross two0
  cross twoh.yaml '"h1.lsh_active_mean".*"hidden.lsh_active_mean".*"out.lsh_active_mean"'
  lowered_cross one
  ;;
route)
  delicious_job c
  ACCELRT_CHAIN_ENGINE=graph "$bin" check chain.yaml > check.txt || fail "check"
  grep -q "^engine: graph (job 'dc'" check.txt || { cat check.txt; fail "no graph engine line"; }
  grep -q "hidden  *sparse_dense" check.txt || fail "the lowered plan shows no sparse_dense"
  "$bin" check chain.yaml > d.txt || fail "check (default)"
  grep -q "^engine: graph (job 'dc', a chain lowered" d.txt || { cat d.txt; fail "default: graph expected"; }
  ACCELRT_CHAIN_ENGINE=chain "$bin" check chain.yaml > k.txt || fail "check (chain)"
  grep -q "^engine: chain (job 'dc', kept there by ACCELRT_CHAIN_ENGINE=chain" k.txt \
    || { cat k.txt; fail "ACCELRT_CHAIN_ENGINE=chain: the chain engine expected"; }
  # The lowered plan's per-tensor lines read as the chain's: its persistent
  # tensors under the checkpoint's names, in its order, the same bytes.
  for f in chain lsh; do
    "$bin" check $f.yaml > d.txt && ACCELRT_CHAIN_ENGINE=chain "$bin" check $f.yaml > k.txt \
      || fail "check $f.yaml"
    diff <(grep "^  persistent " d.txt) <(grep "^  persistent " k.txt) \
      || fail "$f.yaml: the lowered plan's persistent lines differ from the chain's"
    grep -q "^total: " d.txt || fail "$f.yaml: no total line"
  done
  # Sampled layers are lowered; what stays on the chain engine, and why
  # (check's line; run's note, once): a sampled layer under SGD, which
  # check and run then refuse at the layer's item.
  ACCELRT_CHAIN_ENGINE=graph "$bin" check lsh.yaml > c.txt || { cat c.txt; fail "check lsh"; }
  grep -q "^engine: graph (job 'dc'" c.txt || { cat c.txt; fail "lsh.yaml: not lowered"; }
  sed -e 's/adam: {lr: 0.001}/sgd: {lr: 0.05}/' lsh.yaml > lsgd.yaml
  ACCELRT_CHAIN_ENGINE=graph "$bin" check lsgd.yaml > c.txt 2> c.err &&
    fail "check lsgd.yaml: the chain trains no sampled layer under SGD"
  grep -q "^engine: chain (job 'dc' stays on it: layer h1 is LSH-sampled and train.optimizer" \
    c.txt || { cat c.txt; fail "lsgd: no reason"; }
  grep -q "lsgd.yaml:8:7: error: model.layers\[1\]: layer h1 is LSH-sampled, which trains with Adam only" \
    c.err || { cat c.err; fail "check lsgd.yaml: the refusal"; }
  ACCELRT_CHAIN_ENGINE=graph "$bin" run lsgd.yaml --set train.iterations=2 --quiet 2> lsgd.err \
    && fail "run lsgd.yaml: the chain trains no sampled layer under SGD"
  [ "$(grep -c "stays on the chain engine: layer h1 is LSH-sampled" lsgd.err)" = 1 ] \
    || { cat lsgd.err; fail "run's note, once"; }
  ACCELRT_CHAIN_ENGINE=gpu "$bin" check chain.yaml > bad.txt 2>&1
  [ $? = 2 ] || fail "a bad ACCELRT_CHAIN_ENGINE: exit 2 expected"
  grep -q "ACCELRT_CHAIN_ENGINE=gpu: use \`graph\`" bad.txt || { cat bad.txt; fail "message"; }
  ;;
*)
  fail "unknown case $case_"
  ;;
esac
exit 0
