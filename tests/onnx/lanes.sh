#!/usr/bin/env bash
# Imported models through lanes (label e2e; 77 without python3-onnx and
# numpy, which write the model and the data): a jobs: file with two jobs of
# one ONNX model (a Gemm, Relu, Gemm classifier) is admitted by accelrt check
# with their exact plans and trained by accelrt run; both jobs, the same job
# twice, log the same loss at every step, and the loss falls.
#   lanes.sh ACCELRT PYTHON
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$@"
need_python onnx numpy
"$py" - "$work" <<'PY' || fail "could not write the model and the data"
import os, sys
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh
work = sys.argv[1]
rng = np.random.default_rng(5)
w1 = nh.from_array((rng.standard_normal((16, 10)) * 0.3).astype(np.float32), "w1")
b1 = nh.from_array(np.zeros(16, np.float32), "b1")
w2 = nh.from_array((rng.standard_normal((3, 16)) * 0.3).astype(np.float32), "w2")
b2 = nh.from_array(np.zeros(3, np.float32), "b2")
g = h.make_graph([h.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
                  h.make_node("Relu", ["h"], ["r"]),
                  h.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)], "mlp",
                 [h.make_tensor_value_info("x", T.FLOAT, ["N", 10])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["N", 3])], [w1, b1, w2, b2])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), os.path.join(work, "m.onnx"))
os.makedirs(os.path.join(work, "data"))
x = rng.standard_normal((256, 10)).astype(np.float32)
np.save(os.path.join(work, "data", "x.npy"), x)
np.save(os.path.join(work, "data", "y.npy"), (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0))
PY
job() {
  cat <<YAML
  - name: $1
    arrival: 0
    model: {input: {dense: 10}, onnx: m.onnx}
    data: {format: npy, train: data, shuffle_window: 0}
    train: {batch: 32, iterations: 40, threads: 1, log_every: 1,
            optimizer: {sgd: {lr: 0.1, momentum: 0}}}
    output: {dir: out_$1}
YAML
}
{ printf 'name: two\ndevice: host\nruntime: {policy: fifo}\njobs:\n'; job a; job b; } > "$work/jobs.yaml"
"$bin" check "$work/jobs.yaml" > "$work/check.txt" 2>&1 || fail "check: $(cat "$work/check.txt")"
grep -q "every job fits at the same time" "$work/check.txt" || fail "no admission: $(cat "$work/check.txt")"
(cd "$work" && "$bin" run jobs.yaml --quiet) > "$work/run.txt" 2>&1 || fail "run: $(cat "$work/run.txt")"
losses() { grep '"kind": "train"' "$work/out_$1/metrics.jsonl" | sed 's/.*"train_loss": \([^,]*\),.*/\1/'; }
[ "$(losses a | wc -l)" -eq 40 ] || fail "job a logged $(losses a | wc -l) steps, not 40"
diff <(losses a) <(losses b) > /dev/null || fail "the two jobs' losses differ"
first=$(losses a | head -1) last=$(losses a | tail -5 | sort -g | tail -1)
"$py" -c "import sys; sys.exit(0 if $last < $first else 1)" || fail "the loss did not fall: $first to $last"
echo "two imported jobs through lanes: loss $first -> $last, the same in both"
