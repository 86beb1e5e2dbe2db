#!/usr/bin/env bash
# tests/onnx/serve.sh ACCELRT PYTHON: an ONNX job through `accelrt serve`.
# The model is one accelrt itself exported (a written graph model trained
# a few steps as root, then `accelrt export`), so neither PyTorch nor ONNX's
# Python package is needed.  As `nobody` (setpriv):
#  1. an ONNX job submitted to root's server trains to its end, its outputs
#     the submitter's, and logs the same losses as `accelrt run` of the same
#     job (the model's initializers are its initial parameters there too);
#  2. a model file the submitter cannot read (0600 root's, or behind a 0700
#     folder) is refused at submit, naming the file, by the server, which
#     (root) could read it but opens the model as the submitter (through
#     its file broker, as data files; the job's model is read when it is
#     submitted).
# Skipped (77) when not root, without setpriv or without numpy.
set -euo pipefail
bin=$(readlink -f "$1")
py=$2
. "$(dirname "$0")/../tenancy/lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root to act as a second user"
command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
"$py" -c "import numpy" 2>/dev/null || skip "numpy missing for $py (python3-numpy)"
new_tmp
sock=$t/s.sock
st=$t/state
fail() { echo "FAIL: $*"; echo "--- server log"; cat "$t/serve.log" 2>/dev/null || true; exit 1; }
mkdir -p "$t/pub" "$t/nob"
chown nobody:nogroup "$t/nob"
as_nobody() { (cd "$t/nob" && setpriv --reuid nobody --regid nogroup --clear-groups "$@"); }

"$py" - "$t/pub/data" <<'PY'
import os, sys, numpy as np
d = sys.argv[1]
os.makedirs(d)
r = np.random.default_rng(1)
np.save(os.path.join(d, "x.npy"), r.standard_normal((64, 12)).astype(np.float32))
np.save(os.path.join(d, "y.npy"), r.integers(0, 4, 64).astype(np.int64))
PY
cat >"$t/pub/written.yaml" <<'YAML'
name: written
device: host
model:
  input: {dense: 12}
  layers:
    - {name: fc1, dense: 16, activation: none}
    - {name: bn, op: batchnorm, activation: relu}
    - {name: out, dense: 4, activation: softmax}
data: {format: npy, train: data, shuffle_window: 0}
train: {batch: 16, iterations: 4, threads: 1, optimizer: {sgd: {lr: 0.1}}}
output: {dir: written-out}
YAML
(cd "$t/pub" && "$bin" run written.yaml --quiet && "$bin" export written.yaml --onnx model.onnx) \
  >"$t/export.log" 2>&1 || fail "making the model: $(cat "$t/export.log")"
onnx_job() { # FILE MODEL OUTDIR
  cat >"$1" <<YAML
name: onnx-svc
device: host
seed: 3
model: {input: {dense: 12}, onnx: $2}
data: {format: npy, train: $t/pub/data, shuffle_window: 0}
train: {batch: 16, iterations: 12, threads: 1, log_every: 1, optimizer: {sgd: {lr: 0.05}}}
output: {dir: $3}
YAML
  chmod 644 "$1"
}
chmod -R a+rX "$t/pub"
onnx_job "$t/pub/job.yaml" "$t/pub/model.onnx" "$t/nob/out"

"$bin" serve --state "$st" --socket "$sock" --device host --policy fifo --memory 256MiB \
  --threads 1 >>"$t/serve.log" 2>&1 &
spid=$!
up() { "$bin" ps --socket "$sock" >/dev/null 2>&1; }
until_ok up

# 1. nobody's ONNX job runs to its end, as `accelrt run` runs it.
A=$(as_nobody "$bin" submit --socket "$sock" "$t/pub/job.yaml") || fail "submit: $A"
until_state "$A" done
[ "$(stat -c %U "$t/nob/out/checkpoint.bin")" = nobody ] || fail "the checkpoint is not nobody's"
(cd "$t/pub" && "$bin" run job.yaml --quiet --set output.dir="$t/direct") >/dev/null 2>&1 ||
  fail "accelrt run of the same job"
losses() { grep '"kind": *"train"' "$1/metrics.jsonl" | sed 's/.*"train_loss": *\([^,}]*\).*/\1/'; }
[ "$(losses "$t/nob/out" | wc -l)" -eq 12 ] || fail "12 train lines: $(cat "$t/nob/out/metrics.jsonl")"
[ "$(losses "$t/nob/out")" = "$(losses "$t/direct")" ] ||
  fail "the service's losses differ from accelrt run's: $(losses "$t/nob/out") vs $(losses "$t/direct")"

# 2. Models the submitter cannot read.
cp "$t/pub/model.onnx" "$t/rootonly.onnx"
chmod 600 "$t/rootonly.onnx"
mkdir -m 700 "$t/private"
cp "$t/pub/model.onnx" "$t/private/model.onnx"
chmod 644 "$t/private/model.onnx"
for m in "$t/rootonly.onnx" "$t/private/model.onnx"; do
  onnx_job "$t/pub/bad.yaml" "$m" "$t/nob/bad"
  rc=0
  as_nobody "$bin" submit --socket "$sock" "$t/pub/bad.yaml" >"$t/bad.txt" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || fail "nobody submitted a job on $m"
  grep -q "Permission denied" "$t/bad.txt" && grep -q "$m" "$t/bad.txt" ||
    fail "the refusal does not say why or which file: $(cat "$t/bad.txt")"
  # The server (root, which could read it) refused: it opened the model as
  # the submitter.
  grep -q "refused: cannot open '$m' (opened as uid 65534): Permission denied" "$t/serve.log" ||
    fail "the server did not open $m as the submitter"
done

kill -TERM "$spid"
wait "$spid" || fail "the server exited with $?"
spid=
echo "ok"
