#!/usr/bin/env bash
# Job files with model.onnx that must be refused as job-file errors (exit
# 2) naming the file, the node and the op, or the key (label e2e; 77 when
# python3-onnx, which writes the models, is missing):
#   - an op the importer does not import (Hardmax);
#   - a model whose input does not take model.input's shape;
#   - both layers and onnx; a model file that does not exist;
#   - model.loss sigmoid_bce on a written model, on class ids, or on
#     targets of another width than the output; softmax_ce on targets.
#   job_errors.sh ACCELRT PYTHON
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$@"
need_python onnx numpy
"$py" - "$work" <<'PY' || fail "could not write the models"
import sys
import onnx
from onnx import TensorProto as T, helper as h
work = sys.argv[1]
def save(name, nodes, xshape):
    g = h.make_graph(nodes, name, [h.make_tensor_value_info("x", T.FLOAT, xshape)],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 12])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), "%s/%s.onnx" % (work, name))
save("hardmax", [h.make_node("Hardmax", ["x"], ["y"], name="hm")], ["N", 12])
save("narrow", [h.make_node("Relu", ["x"], ["y"])], ["N", 7])
save("relu", [h.make_node("Relu", ["x"], ["y"])], ["N", 12])
import numpy as np, os
for name, y in (("ids", np.zeros(8, np.int64)), ("multi", np.zeros((8, 12), np.uint8)),
                ("wide", np.zeros((8, 5), np.float32))):
    os.makedirs("%s/%s" % (work, name))
    np.save("%s/%s/x.npy" % (work, name), np.zeros((8, 12), np.float32))
    np.save("%s/%s/y.npy" % (work, name), y)
PY
mkdir -p "$work/data"
job() { # job NAME MODEL-LINE
  cat > "$work/$1.yaml" <<YAML
name: $1
device: host
model: $2
data: {format: npy, train: data}
train: {batch: 4, iterations: 1}
YAML
}
said() { # said NAME RC WANT TEXT... : exit WANT and each TEXT in $work/out
  local name=$1 rc=$2 want=$3; shift 3
  [ "$rc" -eq "$want" ] || fail "$name: exit $rc, expected $want: $(cat "$work/out")"
  for t in "$@"; do
    grep -qF -- "$t" "$work/out" || fail "$name: no '$t' in: $(cat "$work/out")"
  done
  echo "$name: $(tail -1 "$work/out")"
}
expect() { # expect NAME TEXT... : exit 2 and each TEXT in the message
  local name=$1; shift
  "$bin" check "$work/$name.yaml" > "$work/out" 2>&1
  said "$name" $? 2 "$@"
}
job hardmax "{input: {dense: 12}, onnx: hardmax.onnx}"
expect hardmax "$work/hardmax.onnx" "node 'hm' (Hardmax)" "not imported" "model.onnx"
job narrow "{input: {dense: 12}, onnx: narrow.onnx}"
expect narrow "input 'x'" "$work/narrow.onnx" "model.input"
job both "{input: {dense: 12}, onnx: narrow.onnx, layers: [{dense: 2, activation: softmax}]}"
expect both "model.layers" "not both"
job missing "{input: {dense: 12}, onnx: nope.onnx}"
expect missing "model.onnx" "nope.onnx" "does not exist"
job bcewritten "{input: {dense: 12}, layers: [{dense: 2, activation: softmax}], loss: sigmoid_bce}"
expect bcewritten "model.loss" "onnx"
# Found when the data is opened: accelrt run's data errors exit 1.
runs() { # runs NAME MODEL-LINE DATA TEXT... : accelrt run fails naming each TEXT
  local name=$1 model=$2 data=$3; shift 3
  cat > "$work/$name.yaml" <<YAML
name: $name
device: host
model: $model
data: {format: npy, train: $data}
train: {batch: 4, iterations: 1}
output: {dir: out-$name}
YAML
  (cd "$work" && "$bin" run "$name.yaml" --quiet) > "$work/out" 2>&1
  said "$name" $? 1 "$@"
}
runs bceids "{input: {dense: 12}, onnx: relu.onnx, loss: sigmoid_bce}" ids \
  "sigmoid_bce" "class ids" "(N, C)"
runs bcewide "{input: {dense: 12}, onnx: relu.onnx, loss: sigmoid_bce}" wide \
  "5 targets per point" "12 classes"
runs cetargets "{input: {dense: 12}, onnx: relu.onnx}" multi "softmax_ce" "model.loss: sigmoid_bce"
