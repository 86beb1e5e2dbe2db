#!/usr/bin/env bash
# Job files with model.onnx that must be refused as job-file errors (exit
# 2) naming the file, the node and the op, or the key (label e2e; 77 when
# python3-onnx, which writes the models, is missing):
#   - an op the importer does not import (Hardmax);
#   - a model whose input does not take model.input's shape;
#   - both layers and onnx; a model file that does not exist.
#   job_errors.sh ACCELRT PYTHON
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$@"
need_python onnx
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
expect() { # expect NAME TEXT... : exit 2 and each TEXT in the message
  local name=$1; shift
  "$bin" check "$work/$name.yaml" > "$work/out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, expected 2: $(cat "$work/out")"
  for t in "$@"; do
    grep -qF -- "$t" "$work/out" || fail "$name: no '$t' in: $(cat "$work/out")"
  done
  echo "$name: $(tail -1 "$work/out")"
}
job hardmax "{input: {dense: 12}, onnx: hardmax.onnx}"
expect hardmax "$work/hardmax.onnx" "node 'hm' (Hardmax)" "not imported" "model.onnx"
job narrow "{input: {dense: 12}, onnx: narrow.onnx}"
expect narrow "input 'x'" "$work/narrow.onnx" "model.input"
job both "{input: {dense: 12}, onnx: narrow.onnx, layers: [{dense: 2, activation: softmax}]}"
expect both "model.layers" "not both"
job missing "{input: {dense: 12}, onnx: nope.onnx}"
expect missing "model.onnx" "nope.onnx" "does not exist"
