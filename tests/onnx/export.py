"""accelrt export on written graph models (tests/onnx/CMakeLists.txt runs it):

    /usr/bin/python3 export.py ACCELRT [WORKDIR]

Two small models written in job files are trained for a few steps, then
exported at opsets 13 and 17: a CNN (conv, batch norm with a fused relu,
dropout, max pool, average pool, flatten, dense) on images, and a token
model (mask, embedding, positions, layer norm, gelu, a residual add, a
reshape and a broadcast product, mean, dense).  Each export must pass onnx.checker.check_model (full check, shape
inference included), hold the checkpoint's parameters and running
statistics exactly as initializers of their names, have a symbolic batch
axis, no Dropout and batch norm in its evaluation form; and `accelrt
onnx-test` over the folder `--test-data` writes (the first batch and
accelrt's own logits for it) must pass, also for a second data set of 3
rows cut from it (another batch size through the symbolic axis).  The
import tolerance is onnx-test's, ONNX's backend runner's (rtol 1e-3,
atol 1e-7).

A chain model (sparse input, dense layers) exports as Gemm layers on dense
rows: onnx-test of the export against NumPy's forward with the checkpoint's
weights on 5 rows.

Then the errors: no checkpoint, another model's checkpoint, an unwritable
path, an opset outside 13..17, a model with the fused attention op: each
exits 2 with a message and leaves no file at OUT.onnx (nor a temporary
beside it).  Exit 0, 1 on a failure, 77 without python3-onnx.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as e:  # pragma: no cover
    print("skipped: %s (install python3-onnx: ci/setup --tests)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import accelrt as accelrt_py  # noqa: E402  (the checkpoint reader)

CNN = """name: export-cnn
device: host
seed: 2
model:
  input: {image: [1, 8, 8]}
  layers:
    - {name: c1, conv: 4, kernel: 3, padding: 1}
    - {name: bn1, op: batchnorm, activation: relu}
    - {name: drop, op: dropout, p: 0.25}
    - {name: p1, op: maxpool, kernel: 2}
    - {name: c2, conv: 4, kernel: 3, padding: 1, activation: relu}
    - {name: p2, op: avgpool, kernel: 2}
    - {op: flatten}
    - {name: out, dense: 3, activation: softmax}
data: {format: npy, train: data, shuffle_window: 0, normalize: false}
train: {batch: 8, iterations: 6, threads: 1, optimizer: {sgd: {lr: 0.1, momentum: 0.9}}}
output: {dir: out}
"""

TOKENS = """name: export-tokens
device: host
seed: 2
model:
  input: {tokens: 5, vocab: 11}
  layers:
    - {name: m, op: mask, inputs: [input]}
    - {name: emb, op: embedding, width: 8, inputs: [input]}
    - {name: pos, op: posembed}
    - {name: n1, op: layernorm}
    - {name: ff, dense: 8, activation: none}
    - {name: g, op: gelu}
    - {name: r, op: add, inputs: [n1, g]}
    - {name: m3, op: reshape, shape: [5, 1], inputs: [m]}
    - {name: mm, op: mul, inputs: [r, m3]}
    - {name: avg, op: mean, axis: 1}
    - {name: out, dense: 3, activation: softmax}
data: {format: npy, train: data, shuffle_window: 0}
train: {batch: 8, iterations: 6, threads: 1, optimizer: {adam: {lr: 0.01}}}
output: {dir: out}
"""

ATTENTION = """name: export-attention
device: host
model:
  input: {tokens: 5, vocab: 11}
  layers:
    - {name: emb, op: embedding, width: 8}
    - {name: att, op: attention, heads: 2}
    - {op: flatten}
    - {name: out, dense: 3, activation: softmax}
data: {format: npy, train: data, shuffle_window: 0}
train: {batch: 8, iterations: 2, threads: 1, optimizer: {sgd: {lr: 0.1}}}
output: {dir: out}
"""


CHAIN = """name: export-chain
device: host
model:
  input: {sparse: 200}
  layers:
    - {name: hidden, dense: 16, activation: relu}
    - {name: out, dense: 30, activation: softmax}
data:
  generate: {train_points: 300, test_points: 0, features: 200, labels: 30,
             nnz: 10, labels_per_point: 2, noise: 0.2}
train: {batch: 32, iterations: 10, threads: 1, optimizer: {adam: {lr: 0.01}}}
output: {dir: out}
"""


def check_chain(accelrt, work):
    """A chain model (sparse input, dense layers): exported as Gemm layers on
    dense rows; the ONNX graph must compute what the checkpoint's weights
    compute (NumPy, accelrt's layouts: the layer behind the sparse input
    keeps (in, out)) on 5 random rows, through accelrt onnx-test."""
    d = os.path.join(work, "chain")
    os.makedirs(d)
    with open(os.path.join(d, "job.yaml"), "w") as f:
        f.write(CHAIN)
    run([accelrt, "run", "job.yaml", "--quiet"], d)
    tdir = os.path.join(d, "t")
    os.makedirs(os.path.join(tdir, "test_data_set_0"))
    out = os.path.join(tdir, "model.onnx")
    run([accelrt, "export", "job.yaml", "--onnx", out], d)
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    ck = accelrt_py.read_checkpoint(os.path.join(d, "out", "checkpoint.bin"), numpy=True)
    x = np.random.default_rng(2).random((5, 200)).astype(np.float32)
    h = np.maximum(x @ ck["hidden.w"] + ck["hidden.b"], 0)
    y = (h @ ck["out.w"].T + ck["out.b"]).astype(np.float32)
    for name, a in (("input_0.pb", x), ("output_0.pb", y)):
        with open(os.path.join(tdir, "test_data_set_0", name), "wb") as fh:
            fh.write(numpy_helper.from_array(a).SerializeToString())
    p = run([accelrt, "onnx-test", tdir], d, want=None)
    print(p.stdout.strip())
    bad = 0
    if p.returncode != 0 or "1 passed" not in p.stdout:
        print("FAIL: the chain model's export does not compute its checkpoint's function")
        bad += 1
    if [n.op_type for n in m.graph.node] != ["Gemm", "Relu", "Gemm"]:
        print("FAIL: the chain model's nodes: %s" % [n.op_type for n in m.graph.node])
        bad += 1
    return bad + expect_refused(accelrt, d, ["--test-data", os.path.join(d, "td")],
                                "--test-data of a chain model")


def run(args, cwd, want=0):
    p = subprocess.run(args, capture_output=True, text=True, cwd=cwd)
    if want is not None and p.returncode != want:
        raise SystemExit("FAIL: %s exited %d, expected %d:\n%s%s"
                         % (" ".join(args), p.returncode, want, p.stdout, p.stderr))
    return p


def write_job(work, name, text, x, y):
    d = os.path.join(work, name)
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    np.save(os.path.join(d, "data", "x.npy"), x)
    np.save(os.path.join(d, "data", "y.npy"), y)
    with open(os.path.join(d, "job.yaml"), "w") as f:
        f.write(text)
    return d


def check_export(accelrt, d, opset):
    """Exports d's model at `opset` and checks it; returns the failures."""
    out = os.path.join(d, "m%d.onnx" % opset)
    tdir = os.path.join(d, "t%d" % opset)
    run([accelrt, "export", "job.yaml", "--onnx", out, "--opset", str(opset),
         "--test-data", tdir], d)
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    bad = 0
    ops = [n.op_type for n in m.graph.node]
    if m.opset_import[0].version != opset:
        print("FAIL: opset %d written as %d" % (opset, m.opset_import[0].version))
        bad += 1
    if "Dropout" in ops:
        print("FAIL: a Dropout is left in the inference graph")
        bad += 1
    for n in m.graph.node:
        if n.op_type == "BatchNormalization" and (len(n.output) != 1 or any(
                a.name == "training_mode" and a.i for a in n.attribute)):
            print("FAIL: batch norm %s is not in its evaluation form" % n.name)
            bad += 1
    for v in list(m.graph.input) + list(m.graph.output):
        d0 = v.type.tensor_type.shape.dim[0]
        if not d0.dim_param:
            print("FAIL: %s's batch axis is fixed (%d)" % (v.name, d0.dim_value))
            bad += 1
    ck = accelrt_py.read_checkpoint(os.path.join(d, "out", "checkpoint.bin"), numpy=True)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    trained = [k for k in ck if not k.endswith((".m", ".v", ".mom")) and "." in k]
    for k in trained:
        if k in inits and not np.array_equal(inits[k].ravel(), ck[k].ravel()):
            print("FAIL: initializer %s differs from the checkpoint" % k)
            bad += 1
    missing = [k for k in ("out.w", "out.b") if k not in inits]
    if missing:
        print("FAIL: initializers %s missing (have %s)" % (missing, sorted(inits)))
        bad += 1
    # A second data set of 3 rows: another batch size through the symbolic axis.
    s0 = os.path.join(tdir, "test_data_set_0")
    s1 = os.path.join(tdir, "test_data_set_1")
    os.makedirs(s1, exist_ok=True)
    for f in ("input_0.pb", "output_0.pb"):
        t = onnx.TensorProto()
        with open(os.path.join(s0, f), "rb") as fh:
            t.ParseFromString(fh.read())
        a = numpy_helper.to_array(t)[:3]
        with open(os.path.join(s1, f), "wb") as fh:
            fh.write(numpy_helper.from_array(a, t.name).SerializeToString())
    p = run([accelrt, "onnx-test", tdir], d, want=None)
    print(p.stdout.strip())
    if p.returncode != 0 or "1 passed, 0 failed, 0 skipped" not in p.stdout:
        print("FAIL: accelrt onnx-test of the export (opset %d):\n%s%s"
              % (opset, p.stdout, p.stderr))
        bad += 1
    return bad


def expect_refused(accelrt, d, args, what):
    out = os.path.join(d, "refused.onnx")
    p = run([accelrt, "export", "job.yaml", "--onnx", out] + args, d, want=None)
    left = [f for f in os.listdir(d) if f.startswith("refused") or f.startswith(".refused")]
    if p.returncode != 2 or left or not p.stderr.strip():
        print("FAIL: %s: exit %d (want 2), files left %s, stderr: %s"
              % (what, p.returncode, left, p.stderr))
        return 1
    print("refused (%s): %s" % (what, p.stderr.strip().splitlines()[-1]))
    return 0


def main(accelrt, work):
    rng = np.random.default_rng(5)
    n = 48
    cnn = write_job(work, "cnn", CNN, rng.standard_normal((n, 1, 8, 8)).astype(np.float32),
                    rng.integers(0, 3, n).astype(np.int64))
    toks = rng.integers(0, 11, (n, 5)).astype(np.int64)
    toks[::3, 3:] = 0  # padding, so that the mask is not all ones
    tok = write_job(work, "tokens", TOKENS,
                    toks, rng.integers(0, 3, n).astype(np.int64))
    att = write_job(work, "attention", ATTENTION, toks, rng.integers(0, 3, n).astype(np.int64))
    bad = 0
    # No checkpoint yet: refused before anything is written.
    bad += expect_refused(accelrt, cnn, [], "no checkpoint")
    for d in (cnn, tok, att):
        run([accelrt, "run", "job.yaml", "--quiet"], d)
    for d in (cnn, tok):
        for opset in (13, 17):
            bad += check_export(accelrt, d, opset)
    bad += expect_refused(accelrt, cnn, ["--checkpoint", os.path.join(tok, "out",
                                                                      "checkpoint.bin")],
                          "another model's checkpoint")
    bad += expect_refused(accelrt, cnn, ["--opset", "12"], "opset 12")
    bad += expect_refused(accelrt, att, [], "fused attention")
    bad += check_chain(accelrt, work)
    p = run([accelrt, "export", "job.yaml", "--onnx", "/nonexistent-dir/m.onnx"], cnn, want=None)
    if p.returncode != 2:
        print("FAIL: an unwritable path exited %d:\n%s" % (p.returncode, p.stderr))
        bad += 1
    else:
        print("refused (unwritable path): %s" % p.stderr.strip())
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(main(sys.argv[1], sys.argv[2]))
    with tempfile.TemporaryDirectory() as w:
        sys.exit(main(sys.argv[1], w))
