#!/usr/bin/env python3
"""The PyTorch side of bench/cnn: the networks of configs/fashion-cnn.yaml
and configs/fashion-resnet.yaml, trained on the CPU the way a careful
PyTorch user would write them.

--model cnn (configs/fashion-cnn.yaml, NCHW, fp32):
  conv3x3 1->32 pad 1, BatchNorm2d, relu, maxpool 2      28x28 -> 14x14
  conv3x3 32->64 pad 1, BatchNorm2d, relu, maxpool 2     14x14 -> 7x7
  flatten (3136), Linear 3136->128, relu, Linear 128->10
  Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8) on every parameter every batch.
--model resnet (configs/fashion-resnet.yaml): the ResNet-20 of that file
  (stem conv3x3 16 + BN + relu; three stages of three basic blocks of
  16/32/64 channels, a stride-2 3x3 conv and a 1x1 stride-2 projection with
  its BN where a stage starts; convs without bias; global average pooling;
  Linear 64->10); SGD lr 0.1, momentum 0.9, weight decay 5e-4 on the
  weights only (biases and BN parameters exempt, as accelrt does).
Both: the job file's learning-rate schedule over --iters steps, computed as
  accelrt does (--schedule, --lr-warmup: the runner passes cosine for both,
  and the ResNet's 200-iteration linear warm-up).
loss: softmax cross-entropy (F.cross_entropy on the logits), batch mean.
PyTorch's default initialisation; the model stays in train mode (batch
statistics in the BN layers, running statistics updated).

Data: the idx files (gzip) read with numpy, pixels scaled to [0, 1], then
normalised per channel with the training split's mean and population
standard deviation, as accelrt's data.normalize does.  The batches are cut
from a seeded permutation of the training split and built as contiguous
(B, 1, 28, 28) tensors before the clock starts, so the timed loop does
forward, backward and the optimizer step only.  No augmentation (the
runner turns accelrt's off too).

Timed: exactly --iters iterations, each wall-clocked separately.
samples_per_s covers all of them (the first one included, as accelrt's
summary does); steady_samples_per_s leaves out the first --warmup.

Memory: peak_rss_bytes is the process's peak resident set (ru_maxrss);
tensor_peak_bytes is the most bytes of tensors alive at once during one
more, untimed, iteration: the tensors alive when it starts (parameters,
their gradients from the previous step, the optimizer's state, the batch)
plus the running sum of what each top-level operation allocated net, from
torch.autograd.profiler with profile_memory (so a temporary that an
operation allocates and frees inside itself is not seen: a lower bound of
the allocator's peak).

Prints one JSON line on stdout.  Usage: torch_cnn.py --help.
"""

import argparse
import gzip
import json
import math
import os
import resource
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="folder with train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--iters", type=int, default=50, help="timed training iterations (default 50)")
    p.add_argument("--warmup", type=int, default=3,
                   help="iterations left out of steady_samples_per_s (default 3)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--schedule", choices=("constant", "cosine"), default="constant",
                   help="the job file's train.schedule.kind (cosine: from --lr to 0 over "
                   "--iters after the warm-up, as accelrt's)")
    p.add_argument("--lr-warmup", type=int, default=0,
                   help="the job file's train.schedule.warmup: lr * t / N at step t <= N")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model", choices=("cnn", "resnet"), default="cnn")
    p.add_argument("--no-memory", action="store_true",
                   help="skip the profiled iteration (no tensor_peak_bytes)")
    a = p.parse_args(argv)
    if a.batch <= 0 or a.iters <= 0 or a.threads <= 0 or a.warmup < 0 or a.lr_warmup < 0:
        p.error("--batch, --iters and --threads must be positive, --warmup and --lr-warmup "
                "not negative")
    return a


ARGS = parse_args(sys.argv[1:])

# The OpenMP and BLAS pools size themselves when torch is loaded, so the
# thread count goes into the environment first (unless the caller did).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(ARGS.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def read_idx(path, magic):
    """An idx file (gzip) as a uint8 array of the shape its header gives."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    head = np.frombuffer(raw[:4], dtype=">u4")[0]
    if head != magic:
        raise SystemExit(f"torch_cnn.py: error: {path}: magic {head}, expected {magic}")
    nd = magic & 0xFF
    dims = [int(x) for x in np.frombuffer(raw[4:4 + 4 * nd], dtype=">u4")]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd)
    if data.size != int(np.prod(dims)):
        raise SystemExit(f"torch_cnn.py: error: {path}: {data.size} bytes for dims {dims}")
    return data.reshape(dims)


class FashionCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.c2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64 * 7 * 7, 128)
        self.out = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.c2(x))), 2)
        x = torch.flatten(x, 1)
        return self.out(F.relu(self.fc(x)))


class Block(nn.Module):
    """A basic block: conv-BN-relu-conv-BN, the shortcut (identity or a
    1x1 stride-2 conv + BN), add, relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        h = self.b2(self.c2(h))
        return F.relu(h + (self.proj(x) if self.proj is not None else x))


class ResNet20(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                blocks.append(Block(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem_bn(self.stem(x))))
        return self.out(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def tensor_peak(model, opt, step, batch):
    """Bytes of tensors alive at once over one profiled iteration (see the
    module's docstring)."""
    live = sum(t.numel() * t.element_size() for t in batch)
    for p in model.parameters():
        live += p.numel() * p.element_size()
        if p.grad is not None:
            live += p.grad.numel() * p.grad.element_size()
    for st in opt.state.values():
        live += sum(t.numel() * t.element_size() for t in st.values() if torch.is_tensor(t))
    with torch.autograd.profiler.profile(profile_memory=True, use_kineto=False) as prof:
        step(*batch)
    tops = sorted((e for e in prof.function_events if e.cpu_parent is None),
                  key=lambda e: e.time_range.start)
    cur = peak = 0
    for e in tops:
        cur += e.cpu_memory_usage
        peak = max(peak, cur)
    return live + peak


def main(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    t_load = time.perf_counter()
    images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"), 2051)
    labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"), 2049)
    n = images.shape[0]
    if labels.shape[0] != n:
        raise SystemExit(f"torch_cnn.py: error: {n} images but {labels.shape[0]} labels")
    # One channel: mean and population std of the whole training split, in
    # double, of the pixels scaled to [0, 1] (accelrt's data.normalize), two
    # passes over chunks of 4096 images so that no float64 copy of the
    # split (376 MB) inflates the peak RSS reported below.
    flat = images.reshape(n, -1)
    total = flat.size
    mean = sum(float(flat[i:i + 4096].sum(dtype=np.uint64)) for i in range(0, n, 4096)) / 255.0 / total
    sq = sum(float(np.square(flat[i:i + 4096] / 255.0 - mean).sum()) for i in range(0, n, 4096))
    std = math.sqrt(sq / total)
    if not std > 0:
        std = 1.0

    # Batches in a seeded order, reshuffled at each pass over the split and
    # dropping its tail, as accelrt does; built before the clock starts.
    rng = np.random.default_rng(a.seed)
    per_epoch = n // a.batch
    order = None
    batches = []
    for it in range(a.iters):
        if it % per_epoch == 0:
            order = rng.permutation(n)
        rows = order[(it % per_epoch) * a.batch:(it % per_epoch + 1) * a.batch]
        x = (images[rows].astype(np.float32) / 255.0 - mean) / std
        batches.append((torch.from_numpy(np.ascontiguousarray(x.reshape(a.batch, 1, 28, 28))),
                        torch.from_numpy(labels[rows].astype(np.int64))))
    t_load = time.perf_counter() - t_load

    if a.model == "cnn":
        model = FashionCNN()
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    else:
        model = ResNet20()
        decay = [p for p in model.parameters() if p.dim() > 1]
        exempt = [p for p in model.parameters() if p.dim() <= 1]
        opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                               {"params": exempt, "weight_decay": 0.0}],
                              lr=a.lr, momentum=0.9)
    # The job file's schedule, as accelrt computes it (schedule_lr in
    # runtime/engine/net_run.c): step t (1-based) of T = --iters.
    def factor(i):
        t, warm = i + 1, a.lr_warmup
        if warm > 0 and t <= warm:
            return t / warm
        if a.schedule == "cosine":
            f = min((t - warm) / (a.iters - warm if a.iters > warm else 1), 1.0)
            return 0.5 * (1.0 + math.cos(math.pi * f))
        return 1.0
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    model.train()

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        return loss

    times = []
    losses = []
    loss_sum = 0.0
    last = float("nan")
    for x, y in batches:
        t0 = time.perf_counter()
        last = step(x, y).item()
        times.append(time.perf_counter() - t0)
        loss_sum += last
        losses.append(last)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tpeak = None if a.no_memory else tensor_peak(model, opt, step, batches[-1])

    wall = sum(times)
    steady = times[a.warmup:]
    out = {
        "samples_per_s": a.iters * a.batch / wall if wall > 0 else 0.0,
        "steady_samples_per_s": (len(steady) * a.batch / sum(steady)
                                 if steady and sum(steady) > 0 else None),
        "loss": last,
        "mean_loss": loss_sum / a.iters,
        "losses": losses,
        "iterations": a.iters,
        "warmup": a.warmup,
        "batch": a.batch,
        "threads": a.threads,
        "torch_threads": torch.get_num_threads(),
        "train_s": wall,
        "first_iter_s": times[0],
        "load_s": t_load,
        "normalize_mean": mean,
        "normalize_std": std,
        "peak_rss_bytes": rss,
        "tensor_peak_bytes": tpeak,
        "model": a.model,
        "mkldnn": torch.backends.mkldnn.is_available(),
        "torch": torch.__version__,
    }
    print(json.dumps(out))
    return 0 if math.isfinite(last) else 1


if __name__ == "__main__":
    sys.exit(main(ARGS))
