"""A small model exported by torch.onnx.export and trained by accelrt from a job
file (`model: {onnx: ...}`), against PyTorch's own training of the same model
(tests/onnx/torch_train.sh runs it):

    /usr/bin/python3 torch_train.py ACCELRT MODEL [WORKDIR]

MODEL is `cnn` (conv, batch norm in training mode, relu, max pool, a residual
add, flatten, linear), `mlp` (linear, tanh, layer norm, linear), `bce` (the
mlp trained with `model.loss: sigmoid_bce` on multi-hot u8 targets, against
PyTorch's BCEWithLogitsLoss), `bnmlp` (linear, batch norm over rows, relu,
linear), `resnet` (a
small ResNet: two residual blocks of conv and batch norm, global average
pooling) or `transformer` (a token embedding, learned positions, one
encoder layer with multi-head attention, gelu and layer norm, dropout 0,
mean pooling, a linear head).
The script writes the model (training mode, opset 13, a dynamic batch axis),
the data as an npy folder and the job (plain SGD, the data in file order, no
normalisation), runs `accelrt check` (the imported graph and its plan must be
printed) and `accelrt run`, and compares accelrt's per-step training loss
with PyTorch's on the same batches: the first step's within 1e-4 relative
(the same initial parameters, exactly), each of 20 steps within 1%; and every
parameter and running mean after 5 steps (the checkpoint of a second, 5-step
run) within 1e-3 of PyTorch's, relative to the tensor's largest value, so that
a parameter that does not train (or trains wrongly) fails even when the loss
stays close.
Exit 0 when they agree, 1 when not, 77 when torch or onnx is missing.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import onnx  # noqa: F401  (torch.onnx.export needs it)
except ImportError as e:  # pragma: no cover
    print("skipped: %s (install python3-torch and python3-onnx: ci/setup --tests)" % e)
    sys.exit(77)

STEPS, BATCH, CLASSES, LR = 20, 16, 5, 0.05
# Parameters are compared after this many steps: later, a relu whose input
# sits at 0 may flip on a last-bit difference (the ResNet's do by step 20),
# and the runs drift apart by a little, as two runs of PyTorch on different
# BLAS builds would.
CHECKED = 5
SEQ, VOCAB = 6, 16


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, CLASSES)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        h = h + self.conv2(h)  # a residual add
        h = self.pool(h)
        return self.fc(torch.flatten(h, 1))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.ln = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.fc2(self.ln(torch.tanh(self.fc1(x))))


class BnMlp(nn.Module):
    """Batch norm over (N, C) rows: 16 values per channel in a batch, so
    the running variance's rule (unbiased, PyTorch's; biased, ONNX's)
    shows as 1/15 of each step's update."""
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.blocks = nn.Sequential(Block(4), Block(4))
        self.fc = nn.Linear(4, CLASSES)

    def forward(self, x):
        h = self.blocks(torch.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.pos = nn.Parameter(torch.randn(1, SEQ, 8) * 0.1)
        self.enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu",
                                              batch_first=True)
        self.fc = nn.Linear(8, CLASSES)

    def forward(self, x):
        return self.fc(self.enc(self.emb(x) + self.pos).mean(1))


MODELS = {"cnn": (Cnn, (1, 8, 8), "{image: [1, 8, 8]}"),
          "mlp": (Mlp, (12,), "{dense: 12}"),
          "bnmlp": (BnMlp, (12,), "{dense: 12}"),
          "bce": (Mlp, (12,), "{dense: 12}"),
          "resnet": (ResNet, (1, 8, 8), "{image: [1, 8, 8]}"),
          "transformer": (Transformer, None, "{tokens: 6, vocab: 16}")}


def read_checkpoint(path):
    """The tensors of an accelrt checkpoint, name -> array of its shape, by
    the project's own reader (python/accelrt, docs/checkpoint.md)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    import accelrt
    return accelrt.read_checkpoint(path, numpy=True)


def compare_parameters(path, model):
    """Every parameter after the run and the running statistics against
    PyTorch's: within 1e-3 of the tensor's largest value.  The running
    variances follow PyTorch's rule (the unbiased batch variance) for a
    model PyTorch exported; ONNX's biased one would put them off by
    m/(m-1), m the values per channel in a batch (tens of percent here)."""
    ck = read_checkpoint(path)
    bad = 0
    for name, t in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        if name not in ck:
            print("FAIL: parameter %s is not in accelrt's checkpoint (%s)" % (name, sorted(ck)))
            bad += 1
            continue
        if tuple(ck[name].shape) != tuple(t.shape):
            print("FAIL: parameter %s has shape %s in accelrt's checkpoint, %s in PyTorch"
                  % (name, tuple(ck[name].shape), tuple(t.shape)))
            bad += 1
            continue
        ref = t.detach().numpy().ravel()
        d = np.abs(ck[name].ravel() - ref).max() / max(np.abs(ref).max(), 1e-12)
        print("%-32s max diff %.2e of its largest value%s" %
              (name, d, "" if d <= 1e-3 else "  <-- more than 1e-3"))
        bad += d > 1e-3
    return bad


def read_pb(path):
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def check_export(accelrt, work, make):
    """`accelrt export` of the 5-step checkpoint: onnx.checker accepts it;
    its initializers, loaded into a fresh PyTorch module through
    onnx.numpy_helper, give accelrt's own logits for the first batch (the
    --test-data folder) within 1e-4 of their largest value in eval mode;
    and accelrt onnx-test imports the export back with the same outputs
    (ONNX's backend tolerance: rtol 1e-3, atol 1e-7)."""
    import onnx
    from onnx import numpy_helper
    out, tdir = os.path.join(work, "exported.onnx"), os.path.join(work, "exported")
    p = subprocess.run([accelrt, "export", "job.yaml", "--checkpoint",
                        os.path.join("out_params", "checkpoint.bin"), "--onnx", out,
                        "--test-data", tdir], capture_output=True, text=True, cwd=work)
    if p.returncode != 0:
        print("FAIL: accelrt export: %s%s" % (p.stdout, p.stderr))
        return 1
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    fresh = make()
    state = fresh.state_dict()
    bad = 0
    for name, t in state.items():
        if name.endswith("num_batches_tracked"):
            continue
        if name not in inits or inits[name].size != t.numel():
            print("FAIL: %s is not an initializer of the export" % name)
            bad += 1
            continue
        state[name] = torch.from_numpy(inits[name].copy()).reshape(t.shape)
    if bad:
        return bad
    fresh.load_state_dict(state)
    fresh.eval()
    x = read_pb(os.path.join(tdir, "test_data_set_0", "input_0.pb"))
    ours = read_pb(os.path.join(tdir, "test_data_set_0", "output_0.pb"))
    with torch.no_grad():
        ref = fresh(torch.from_numpy(x.copy())).numpy()
    d = np.abs(ref - ours).max() / max(np.abs(ref).max(), 1e-12)
    print("export: PyTorch with the exported weights vs accelrt's logits: max diff %.2e of "
          "the largest%s" % (d, "" if d <= 1e-4 else "  <-- more than 1e-4"))
    bad += d > 1e-4
    t = subprocess.run([accelrt, "onnx-test", tdir], capture_output=True, text=True)
    print(t.stdout.strip())
    if t.returncode != 0 or "1 passed" not in t.stdout:
        print("FAIL: accelrt onnx-test of the export:\n%s%s" % (t.stdout, t.stderr))
        bad += 1
    return bad


def main():
    accelrt, which = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        return train(accelrt, which, sys.argv[3])
    with tempfile.TemporaryDirectory() as work:
        return train(accelrt, which, work)


def train(accelrt, which, work):
    torch.manual_seed(3)
    make, point, inp = MODELS[which]
    model = make()
    n = STEPS * BATCH
    x = torch.randn(n, *point) if point else torch.randint(0, VOCAB, (n, SEQ))
    multi = which == "bce"  # multi-label: u8 multi-hot targets (N, C), sigmoid_bce
    y = (torch.rand(n, CLASSES) < 0.3).float() if multi else torch.randint(0, CLASSES, (n,))
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    np.save(os.path.join(work, "data", "x.npy"),
            x.numpy().astype(np.float32 if point else np.int64))
    np.save(os.path.join(work, "data", "y.npy"),
            y.numpy().astype(np.uint8 if multi else np.int64))

    # The export runs the model once in training mode: keep the state it
    # had, so that PyTorch trains from what the file holds.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    torch.onnx.export(model, x[:BATCH], os.path.join(work, "model.onnx"),
                      training=torch.onnx.TrainingMode.TRAINING, opset_version=13,
                      do_constant_folding=False, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    model.load_state_dict(state)
    # The running statistics are what the file holds (the export's forward
    # moved them); they do not enter a training step's outputs.
    import onnx
    from onnx import numpy_helper
    held = {i.name: numpy_helper.to_array(i) for i in
            onnx.load(os.path.join(work, "model.onnx")).graph.initializer}
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name in held and buf.dtype == torch.float32:
                buf.copy_(torch.from_numpy(held[name].copy()).reshape(buf.shape))

    job = os.path.join(work, "job.yaml")
    with open(job, "w") as f:
        f.write("name: onnx-%s\ndevice: host\nseed: 1\n"
                "model: {input: %s, onnx: model.onnx%s}\n"
                "data: {format: npy, train: data, shuffle_window: 0, normalize: false}\n"
                "train: {batch: %d, iterations: %d, threads: 1, log_every: 1,\n"
                "        optimizer: {sgd: {lr: %g, momentum: 0}}}\n"
                "output: {dir: out}\n" % (which, inp, ", loss: sigmoid_bce" if multi else "",
                                           BATCH, STEPS, LR))

    check = subprocess.run([accelrt, "check", job], capture_output=True, text=True)
    if check.returncode != 0 or "memory plan" not in check.stdout or "graph model" not in check.stdout:
        print("FAIL: accelrt check:\n%s%s" % (check.stdout, check.stderr))
        return 1
    print(check.stdout.strip())
    for steps, out in ((STEPS, "out"), (CHECKED, "out_params")):
        run = subprocess.run([accelrt, "run", job, "--quiet", "--set",
                              "train.iterations=%d" % steps, "--set", "output.dir=" + out],
                             capture_output=True, text=True, cwd=work)
        if run.returncode != 0:
            print("FAIL: accelrt run: %s%s" % (run.stdout, run.stderr))
            return 1
    ours = []
    with open(os.path.join(work, "out", "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "train":
                ours.append(r["train_loss"])

    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0)
    lossf = nn.BCEWithLogitsLoss() if multi else nn.CrossEntropyLoss()
    ref = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = lossf(model(x[s * BATCH:(s + 1) * BATCH]), y[s * BATCH:(s + 1) * BATCH])
        loss.backward()
        opt.step()
        ref.append(loss.item())
        if s + 1 == CHECKED:
            bad = compare_parameters(os.path.join(work, "out_params", "checkpoint.bin"), model)
    bad += check_export(accelrt, work, make)
    if len(ours) != STEPS:
        print("FAIL: %d train lines in metrics.jsonl, expected %d" % (len(ours), STEPS))
        return 1
    for s, (a, b) in enumerate(zip(ours, ref)):
        rel = abs(a - b) / abs(b)
        tol = 1e-4 if s == 0 else 1e-2
        flag = "" if rel <= tol else "  <-- off by more than %g" % tol
        print("step %2d: accelrt %.6f  pytorch %.6f  rel %.2e%s" % (s + 1, a, b, rel, flag))
        bad += rel > tol
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
