"""A small model exported by torch.onnx.export and trained by accelrt from a job
file (`model: {onnx: ...}`), against PyTorch's own training of the same model
(tests/onnx/torch_train.sh runs it):

    /usr/bin/python3 torch_train.py ACCELRT MODEL [WORKDIR]

MODEL is `cnn` (conv, batch norm in training mode, relu, max pool, a residual
add, flatten, linear) or `mlp` (linear, gelu-free tanh, layer norm, linear).
The script writes the model (training mode, opset 13, a dynamic batch axis),
the data as an npy folder and the job (plain SGD, the data in file order, no
normalisation), runs `accelrt check` (the imported graph and its plan must be
printed) and `accelrt run`, and compares accelrt's per-step training loss
with PyTorch's on the same batches: the first step's within 1e-4 relative
(the same initial parameters, exactly), each of 20 steps within 1%.
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


def main():
    accelrt, which = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        return train(accelrt, which, sys.argv[3])
    with tempfile.TemporaryDirectory() as work:
        return train(accelrt, which, work)


def train(accelrt, which, work):
    torch.manual_seed(3)
    model = Cnn() if which == "cnn" else Mlp()
    n = STEPS * BATCH
    shape = (n, 1, 8, 8) if which == "cnn" else (n, 12)
    x = torch.randn(*shape)
    y = torch.randint(0, CLASSES, (n,))
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    np.save(os.path.join(work, "data", "x.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(work, "data", "y.npy"), y.numpy().astype(np.int64))

    # The export runs the model once in training mode: keep the state it
    # had, so that PyTorch trains from what the file holds.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    torch.onnx.export(model, x[:BATCH], os.path.join(work, "model.onnx"),
                      training=torch.onnx.TrainingMode.TRAINING, opset_version=13,
                      do_constant_folding=False, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    model.load_state_dict(state)

    inp = "{image: [1, 8, 8]}" if which == "cnn" else "{dense: 12}"
    job = os.path.join(work, "job.yaml")
    with open(job, "w") as f:
        f.write("name: onnx-%s\ndevice: host\nseed: 1\n"
                "model: {input: %s, onnx: model.onnx}\n"
                "data: {format: npy, train: data, shuffle_window: 0, normalize: false}\n"
                "train: {batch: %d, iterations: %d, threads: 1, log_every: 1,\n"
                "        optimizer: {sgd: {lr: %g, momentum: 0}}}\n"
                "output: {dir: out}\n" % (which, inp, BATCH, STEPS, LR))

    check = subprocess.run([accelrt, "check", job], capture_output=True, text=True)
    if check.returncode != 0 or "memory plan" not in check.stdout or "graph model" not in check.stdout:
        print("FAIL: accelrt check:\n%s%s" % (check.stdout, check.stderr))
        return 1
    print(check.stdout.strip())
    run = subprocess.run([accelrt, "run", job, "--quiet"], capture_output=True, text=True,
                         cwd=work)
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
    lossf = nn.CrossEntropyLoss()
    ref = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = lossf(model(x[s * BATCH:(s + 1) * BATCH]), y[s * BATCH:(s + 1) * BATCH])
        loss.backward()
        opt.step()
        ref.append(loss.item())
    bad = 0
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
