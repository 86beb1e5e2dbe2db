"""model.sparse on an imported model (issue 16): a PyTorch MLP with a
200-class last Linear, exported to ONNX, trained by accelrt with that Gemm
LSH-sampled (model: {onnx: ..., sparse: {NODE: {...}}}).  Checked: the plan
lists the head's hash tables, the loss falls and top-1 ends well above
chance (0.5%) on a learnable set (the class is the argmax of a fixed linear
map of the point), and job-file errors (exit 2) name the file and the node
for an unknown node and for a node that is not the Gemm producing the
logits.  Then four more heads: a Linear without a bias written as a Gemm
without C (the head's zero bias must stay zero), the Gemm with its weight
stored (in, out) and transB=0, PyTorch's Linear(bias=False) as a MatMul of
a folded (in, out) initializer, and a Linear on a 3-D input as MatMul + Add
(rows reshaped back to the logits).  Each, sampled with 10% active, learns;
sampled with every class active (active: 1.0) its logged losses follow the
dense head's (mode: dense) within 1%; for the MatMuls and the Gemm without
C, accelrt export after
the sampled run keeps the model's initializer names and shapes, and the
exported weights loaded into the PyTorch module score accelrt's top-1 (a
weight written back in the wrong layout scores chance), and for those a
run resumed from its checkpoint keeps following the uninterrupted one.  A
MatMul whose weight is a Transpose's output (exported without constant
folding) is refused, naming the node.  Every job trains on one thread:
on two the sampled head's updates interleave differently each run, and the
bounds above (top-1, the losses followed, the resumed run) would hold on
figures that move from run to run.
Skips (77) without python3-torch or python3-onnx.
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
    import onnx.numpy_helper
    import torch
except ImportError as e:
    print("skipped: %s (python3-torch and python3-onnx are needed)" % e)
    sys.exit(77)

CLASSES, FEATURES, POINTS = 200, 16, 8192


def main():
    accelrt = sys.argv[1]
    with tempfile.TemporaryDirectory() as work:
        return run(accelrt, work)


def job(work, name, node, extra="", onnx_file="model.onnx", section=None):
    path = os.path.join(work, name + ".yaml")
    if section is None:
        section = "{mode: lsh, hash: srp, K: 4, L: 10, active: 0.1%s}" % extra
    with open(path, "w") as f:
        f.write("name: %s\ndevice: host\nseed: 1\n"
                "model:\n  input: {dense: %d}\n  onnx: %s\n"
                "  sparse:\n    '%s': %s\n"
                "data: {format: npy, train: data, test: test}\n"
                "train: {batch: 64, iterations: 300, threads: 1, log_every: 50, eval_points: 1024,\n"
                "        optimizer: {adam: {lr: 0.003}}}\n"
                "output: {dir: %s}\n" % (name, FEATURES, onnx_file, node, section, name))
    return path


def train(accelrt, work, path, name):
    """Runs job path; (train losses, top-1) or None after saying why."""
    r = subprocess.run([accelrt, "run", path, "--quiet"], capture_output=True, text=True, cwd=work)
    if r.returncode != 0:
        print("FAIL: accelrt run %s: %s%s" % (name, r.stdout, r.stderr))
        return None
    lines = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
    losses = [l["train_loss"] for l in lines if l.get("kind") == "train"]
    summary = json.load(open(os.path.join(work, name, "summary.json")))
    print("%s: train losses %s, top-1 %.2f" % (name, ["%.4f" % v for v in losses], summary["top1"]))
    return losses, summary["top1"]


def learns(res, name):
    """The loss fell and top-1 is well above chance (0.5%)."""
    if res is None:
        return False
    losses, top1 = res
    if not (len(losses) >= 4 and losses[-1] < 0.7 * losses[0]):
        print("FAIL: %s: the loss did not fall: %s" % (name, losses))
        return False
    if not top1 > 10:
        print("FAIL: %s: top-1 %.2f is not well above chance (0.5)" % (name, top1))
        return False
    return True


def follows(res, dense, name):
    """Every class active: the logged losses follow the dense head's."""
    if res is None or dense is None:
        return False
    a, b = res[0], dense[0]
    worst = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) and a else None
    if worst is None or worst > 0.01:
        print("FAIL: %s: losses %s do not follow the dense head's %s (worst rel %s)"
              % (name, a, b, worst))
        return False
    print("%s follows the dense head: worst relative difference %.2e" % (name, worst))
    return True


def nobias_gemm(work):
    """The MLP with a last Linear(bias=False), its Transpose+MatMul (as
    PyTorch writes it) replaced by a Gemm(transB=1) without C, as other
    exporters write that layer.  Returns the file name, the node and the
    module."""
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, CLASSES, bias=False))
    path = os.path.join(work, "nobias.onnx")
    torch.onnx.export(model, torch.randn(64, FEATURES), path, opset_version=13,
                      do_constant_folding=False, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    m = onnx.load(path)
    g = m.graph
    tr = [nd for nd in g.node if nd.op_type == "Transpose"]
    mm = [nd for nd in g.node if nd.op_type == "MatMul"]
    if len(tr) != 1 or len(mm) != 1 or mm[0].input[1] != tr[0].output[0]:
        raise RuntimeError("unexpected export %s" % [nd.op_type for nd in g.node])
    gemm = onnx.helper.make_node("Gemm", [mm[0].input[0], tr[0].input[0]], [mm[0].output[0]],
                                 name="/2/Gemm", transB=1)
    nodes = [nd for nd in g.node if nd.op_type not in ("Transpose", "MatMul")] + [gemm]
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return "nobias.onnx", "/2/Gemm", model


def export(model, path, fold):
    torch.onnx.export(model, torch.randn(64, FEATURES), path, opset_version=13,
                      do_constant_folding=fold, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})


def last_node(path, op):
    return [nd.name for nd in onnx.load(path).graph.node if nd.op_type == op][-1]


class Seq(torch.nn.Module):
    """Each point as 4 rows of 4 features, a Linear on those rows, then
    the last Linear on a 3-D (N, 1, 32) input: PyTorch writes both as
    MatMul (the weight a transposed initializer when folded) + Add."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(32, CLASSES)

    def forward(self, x):
        h = torch.relu(self.a(x.reshape(-1, 4, 4)))
        return self.b(h.reshape(-1, 1, 32)).reshape(-1, CLASSES)


def matmul_models(work):
    """(name, file, node, torch module, {initializer: (state_dict key,
    transposed)}) for a no-bias last Linear (MatMul alone) and the Seq
    model (MatMul + Add on a 3-D input), exported with the weights folded;
    and the Seq model unfolded (its MatMul's weight is a Transpose's
    output, not an initializer: refused)."""
    torch.manual_seed(7)
    nobias = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
                                 torch.nn.Linear(64, CLASSES, bias=False))
    seq = Seq()
    export(nobias, os.path.join(work, "mm.onnx"), True)
    export(seq, os.path.join(work, "seq.onnx"), True)
    export(seq, os.path.join(work, "seq_unfolded.onnx"), False)
    return [("mm", "mm.onnx", last_node(os.path.join(work, "mm.onnx"), "MatMul"), nobias),
            ("seq", "seq.onnx", last_node(os.path.join(work, "seq.onnx"), "MatMul"), seq)]


def gemm_tb0(work):
    """model.onnx with its last Gemm's weight stored (in, out), transB=0."""
    m = onnx.load(os.path.join(work, "model.onnx"))
    g = m.graph
    gemm = [nd for nd in g.node if nd.op_type == "Gemm"][-1]
    for a in gemm.attribute:
        if a.name == "transB":
            a.i = 0
    w = [i for i in g.initializer if i.name == gemm.input[1]][0]
    w.CopyFrom(onnx.numpy_helper.from_array(
        np.ascontiguousarray(onnx.numpy_helper.to_array(w).T), w.name))
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(work, "tb0.onnx"))
    return "tb0.onnx", gemm.name


def exported_matches(accelrt, work, name, onnx_file, module):
    """accelrt export after the sampled run keeps the model's initializer
    names and shapes; the exported weights loaded into the PyTorch module
    (by name, a MatMul's (in, out) weight transposed back) give accelrt's
    own test top-1."""
    out = os.path.join(work, name + ".out.onnx")
    r = subprocess.run([accelrt, "export", os.path.join(work, name + ".yaml"), "--onnx", out],
                       capture_output=True, text=True, cwd=work)
    if r.returncode != 0:
        print("FAIL: export %s: %s%s" % (name, r.stdout, r.stderr))
        return False
    m = onnx.load(out)
    onnx.checker.check_model(m)
    orig = {i.name: list(i.dims) for i in onnx.load(os.path.join(work, onnx_file)).graph.initializer}
    got = {i.name: list(i.dims) for i in m.graph.initializer if i.name in orig}
    if got != orig:
        print("FAIL: %s: exported initializers %s, the model's %s" % (name, got, orig))
        return False
    vals = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    sd = module.state_dict()
    new = {}
    for key, t in sd.items():  # PyTorch's names, or the MatMul's folded (in, out) weight
        if key in vals:
            new[key] = torch.from_numpy(vals[key].copy())
        else:
            cands = [v for n, v in vals.items() if n.startswith("onnx::MatMul") and
                     tuple(v.shape) == tuple(t.shape[::-1])]
            if len(cands) != 1:
                print("FAIL: %s: no exported weight for %s" % (name, key))
                return False
            new[key] = torch.from_numpy(np.ascontiguousarray(cands[0].T))
    module.load_state_dict(new)
    x = torch.from_numpy(np.load(os.path.join(work, "test", "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(work, "test", "y.npy")))
    with torch.no_grad():
        top1 = 100.0 * float((module(x).argmax(1) == y).float().mean())
    want = json.load(open(os.path.join(work, name, "summary.json")))["top1"]
    print("%s: exported weights in PyTorch: top-1 %.2f, accelrt's %.2f" % (name, top1, want))
    if abs(top1 - want) > 0.5:
        print("FAIL: %s: PyTorch with the exported weights scores %.2f, accelrt %.2f"
              % (name, top1, want))
        return False
    return True


def resumes(accelrt, work, name):
    """The sampled run stopped at step 150 and resumed from its checkpoint
    (the (in, out) weight and its moments read back into (out, in) rows):
    the losses after the resume stay near the uninterrupted run's (a
    weight read back in the wrong layout would start from scrambled rows,
    near log(200) = 5.3).  Resuming is not bit-exact for a sampled head
    (also the Gemm's: its tables are rebuilt), hence the margin, on the mean
    of the logged losses after the resume."""
    path = os.path.join(work, name + ".yaml")
    whole = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
    whole = {l["iteration"]: l["train_loss"] for l in whole if l.get("kind") == "train"}
    for args in (["--overwrite", "--set", "train.iterations=150"], ["--resume"]):
        r = subprocess.run([accelrt, "run", path, "--quiet"] + args, capture_output=True,
                           text=True, cwd=work)
        if r.returncode != 0:
            print("FAIL: %s %s: %s%s" % (name, args, r.stdout, r.stderr))
            return False
    lines = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
    after = {l["iteration"]: l["train_loss"] for l in lines if l.get("kind") == "train" and
             l["iteration"] > 150 and l["iteration"] in whole}
    # One batch's loss moves by 15% between two runs whose tables differ;
    # the mean over the logged steps after the resume does not.
    mean = sum(after.values()) / len(after) if after else None
    base = sum(whole[k] for k in after) / len(after) if after else None
    print("%s: resumed at 150, losses %s against %s" % (name, after, whole))
    if mean is None or abs(mean - base) / base > 0.15:
        print("FAIL: %s: the resumed losses do not follow the uninterrupted run's" % name)
        return False
    return True


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
    if not learns(train(accelrt, work, good, "good"), "good"):
        return 1

    bad = 0
    # Heads without a bias, and (later) MatMul heads: each sampled with
    # 10% active (learns), with all active and dense (the losses agree).
    cases = [("nobias",) + nobias_gemm(work), ("tb0",) + gemm_tb0(work) + (None,)]
    cases += matmul_models(work)
    for name, onnx_file, node, module in cases:
        ok = learns(train(accelrt, work, job(work, name, node, onnx_file=onnx_file), name), name)
        all_job = job(work, name + "_all", node, onnx_file=onnx_file,
                      section="{mode: lsh, hash: srp, K: 4, L: 10, active: 1.0}")
        check = subprocess.run([accelrt, "check", all_job], capture_output=True, text=True)
        if check.returncode != 0 or (node + ".lsh.tables") not in check.stdout:
            print("FAIL: %s_all is not sampled:\n%s%s" % (name, check.stdout, check.stderr))
            bad += 1
        full = train(accelrt, work, all_job, name + "_all")
        dense = train(accelrt, work, job(work, name + "_dense", node, onnx_file=onnx_file,
                                         section="{mode: dense}"), name + "_dense")
        if not (ok and follows(full, dense, name + "_all")):
            bad += 1
        elif module is not None and not (exported_matches(accelrt, work, name, onnx_file, module)
                                         and resumes(accelrt, work, name)):
            bad += 1
    unfolded = last_node(os.path.join(work, "seq_unfolded.onnx"), "MatMul")
    for name, node, want, onnx_file in (
            ("unknown", "no_such_node", ["has no node 'no_such_node'", last], "model.onnx"),
            ("first", first, ["node '%s'" % first, "not a Gemm", last], "model.onnx"),
            ("badk", last, ["model.sparse.%s.K" % last], "model.onnx"),
            # a MatMul whose weight is a Transpose's output, not an initializer
            ("unfolded", unfolded, ["node '%s'" % unfolded, "initializer", "seq_unfolded.onnx",
                                    "do_constant_folding"], "seq_unfolded.onnx")):
        path = job(work, name, node, ", K: 0" if name == "badk" else "", onnx_file=onnx_file)
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
