"""model.sparse on an imported model (issue 16): a PyTorch MLP with a
200-class last Linear, exported to ONNX, trained by accelrt with that Gemm
LSH-sampled (model: {onnx: ..., sparse: {NODE: {...}}}).  Checked: the plan
lists the head's hash tables, the loss falls and top-1 ends well above
chance (0.5%) on a learnable set (the class is the argmax of a fixed linear
map of the point), and job-file errors (exit 2) name the file and the node
for an unknown node and for a node that is not the Gemm producing the
logits.  Skips (77) without python3-torch or python3-onnx.
    torch_sparse.py ACCELRT
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import torch
except ImportError as e:
    print("skipped: %s (python3-torch and python3-onnx are needed)" % e)
    sys.exit(77)

CLASSES, FEATURES, POINTS = 200, 16, 8192


def main():
    accelrt = sys.argv[1]
    with tempfile.TemporaryDirectory() as work:
        return run(accelrt, work)


def job(work, name, node, extra=""):
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        f.write("name: %s\ndevice: host\nseed: 1\n"
                "model:\n  input: {dense: %d}\n  onnx: model.onnx\n"
                "  sparse:\n    '%s': {mode: lsh, hash: srp, K: 4, L: 10, active: 0.1%s}\n"
                "data: {format: npy, train: data, test: test}\n"
                "train: {batch: 64, iterations: 300, threads: 2, log_every: 50, eval_points: 1024,\n"
                "        optimizer: {adam: {lr: 0.003}}}\n"
                "output: {dir: %s}\n" % (name, FEATURES, node, extra, name))
    return path


def run(accelrt, work):
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, CLASSES))
    proj = torch.randn(FEATURES, CLASSES)
    for split, n in (("data", POINTS), ("test", 1024)):
        x = torch.randn(n, FEATURES)
        y = (x @ proj).argmax(1)
        os.makedirs(os.path.join(work, split), exist_ok=True)
        np.save(os.path.join(work, split, "x.npy"), x.numpy().astype(np.float32))
        np.save(os.path.join(work, split, "y.npy"), y.numpy().astype(np.int64))
    torch.onnx.export(model, torch.randn(64, FEATURES), os.path.join(work, "model.onnx"),
                      opset_version=13, do_constant_folding=False, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    g = onnx.load(os.path.join(work, "model.onnx")).graph
    gemms = [nd.name for nd in g.node if nd.op_type == "Gemm"]
    if len(gemms) != 2:
        print("FAIL: expected two Gemm nodes in the export, got %s" % [nd.op_type for nd in g.node])
        return 1
    first, last = gemms
    print("export: nodes %s" % [(nd.name, nd.op_type) for nd in g.node])

    good = job(work, "good", last)
    check = subprocess.run([accelrt, "check", good], capture_output=True, text=True)
    if check.returncode != 0 or (last + ".lsh.tables") not in check.stdout:
        print("FAIL: accelrt check of the sampled import:\n%s%s" % (check.stdout, check.stderr))
        return 1
    r = subprocess.run([accelrt, "run", good, "--quiet"], capture_output=True, text=True, cwd=work)
    if r.returncode != 0:
        print("FAIL: accelrt run: %s%s" % (r.stdout, r.stderr))
        return 1
    lines = [json.loads(l) for l in open(os.path.join(work, "good", "metrics.jsonl"))]
    train = [l["train_loss"] for l in lines if l.get("kind") == "train"]
    summary = json.load(open(os.path.join(work, "good", "summary.json")))
    print("train losses %s, top-1 %.2f" % (["%.3f" % v for v in train], summary["top1"]))
    if not (len(train) >= 4 and train[-1] < 0.7 * train[0]):
        print("FAIL: the loss did not fall: %s" % train)
        return 1
    if not summary["top1"] > 10:  # chance is 0.5
        print("FAIL: top-1 %.2f is not well above chance (0.5)" % summary["top1"])
        return 1

    bad = 0
    for name, node, want in (("unknown", "no_such_node", ["has no node 'no_such_node'", last]),
                             ("first", first, ["node '%s'" % first, "not a Gemm", last]),
                             ("badk", last, ["model.sparse.%s.K" % last])):
        path = job(work, name, node, ", K: 0" if name == "badk" else "")
        if name == "badk":
            with open(path) as f:
                text = f.read().replace("K: 4, ", "")
            with open(path, "w") as f:
                f.write(text)
        c = subprocess.run([accelrt, "check", path], capture_output=True, text=True)
        out = c.stdout + c.stderr
        missing = [w for w in want + [os.path.basename(path)] if w not in out]
        if c.returncode != 2 or missing:
            print("FAIL: %s: exit %d, missing %s in:\n%s" % (name, c.returncode, missing, out))
            bad += 1
        else:
            print("%s: %s" % (name, out.strip().splitlines()[-1]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
