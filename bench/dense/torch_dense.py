#!/usr/bin/env python3
"""The PyTorch side of bench/dense: the network accelrt's engine trains,
written the way a careful PyTorch user would write it for a CPU, or for one
GPU with --device cuda:N (model and batch tensors on the GPU; default fp32
matmuls, no TF32, as accelrt's cuBLAS GEMMs).

Network (matches accelrt's dense path, see bench/dense/README.md):
  h      = relu(sum over a row's non-zeros v_f * W1[f, :] + b1)   W1: (features, hidden)
  logits = h W2^T + b2                                            W2: (labels, hidden)
  loss   = softmax cross-entropy; each of a row's labels gets target mass
           1/|labels| (rows without labels add nothing), summed and divided
           by the number of rows in the batch
  Adam (0.9, 0.999, 1e-8) on every parameter after every batch.
  He-normal init for W1 (fan-in = features), Xavier-uniform for W2, zero biases.

The XC file is parsed into CSR arrays before the clock starts.  Timed, for
exactly --iters iterations: building the batch tensors from those arrays (in
file order, wrapping to the start of the file when it runs out), forward,
backward, optimizer step.  Evaluation (--eval) comes after and is not timed.

Prints one JSON line on stdout.  Usage: torch_dense.py --help.
"""

import argparse
import json
import math
import os
import resource
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", help="XC training file")
    p.add_argument("--test", help="XC test file (needed for --eval)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--iters", type=int, default=20,
                   help="timed training iterations (default 20)")
    p.add_argument("--epochs", type=float, default=0.0,
                   help="if > 0, train ceil(epochs * points / batch) iterations instead of --iters")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu",
                   help="cpu (or host), or cuda:N: train on that GPU")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--layer1", choices=("embbag", "spmm"), default="embbag",
                   help="embbag: nn.EmbeddingBag(mode='sum', per_sample_weights); "
                        "spmm: torch.sparse.mm(batch CSR->COO, W1)")
    p.add_argument("--loss", choices=("logsoftmax", "logsumexp"), default="logsoftmax",
                   help="logsoftmax: gather log_softmax at the labels; "
                        "logsumexp: logsumexp(logits) - weighted label logits")
    p.add_argument("--foreach", choices=("on", "off"), default="off",
                   help="torch.optim.Adam(foreach=...)")
    p.add_argument("--eval", action="store_true",
                   help="after training, P@1/3/5 on the test file (not timed)")
    p.add_argument("--eval-points", type=int, default=1000,
                   help="first N test rows with labels for --eval; 0 = all")
    p.add_argument("--gemm-bound", action="store_true",
                   help="only measure the three output-layer GEMMs of one iteration at "
                        "this PyTorch's SGEMM rate and print the samples/s they allow; "
                        "needs --labels-out")
    p.add_argument("--labels-out", type=int, default=0,
                   help="output width for --gemm-bound")
    a = p.parse_args(argv)
    if not a.gemm_bound and not a.train:
        p.error("--train is required")
    if a.gemm_bound and a.labels_out <= 0:
        p.error("--gemm-bound needs --labels-out N")
    if a.eval and not a.test:
        p.error("--eval needs --test")
    if a.batch <= 0 or a.hidden <= 0 or a.threads <= 0:
        p.error("--batch, --hidden and --threads must be positive")
    if a.device == "host":
        a.device = "cpu"
    if a.device != "cpu" and not a.device.startswith("cuda:"):
        p.error("--device must be cpu, host or cuda:N")
    return a


ARGS = parse_args(sys.argv[1:])

# The BLAS and OpenMP pools size themselves when torch is loaded, and
# torch.set_num_threads does not reach OpenBLAS's own pool, so the thread
# count is put in the environment first (unless the caller already did).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(ARGS.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class XC:
    """An XC file held as CSR arrays: features (fptr, fidx, fval) and labels
    (lptr, lidx), one entry of each ptr array per row plus one."""

    def __init__(self, path):
        with open(path, "r") as f:
            head = f.readline().split()
            if len(head) != 3:
                raise SystemExit(f"{path}:1: error: expected 'points features labels'")
            self.points, self.features, self.labels = (int(x) for x in head)
            fptr, fidx, fval, lptr, lidx = [0], [], [], [0], []
            for lineno, line in enumerate(f, start=2):
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                toks = line.split()
                # A row without labels starts with a space (so its first
                # token is already a feature).
                if line[0].isspace() or ":" in toks[0]:
                    labs, feats = [], toks
                else:
                    labs, feats = toks[0].split(","), toks[1:]
                for lab in labs:
                    if lab:
                        lidx.append(int(lab))
                for tok in feats:
                    k, _, v = tok.partition(":")
                    fidx.append(int(k))
                    fval.append(float(v) if v else 1.0)
                fptr.append(len(fidx))
                lptr.append(len(lidx))
        self.fptr = np.asarray(fptr, dtype=np.int64)
        self.fidx = np.asarray(fidx, dtype=np.int64)
        self.fval = np.asarray(fval, dtype=np.float32)
        self.lptr = np.asarray(lptr, dtype=np.int64)
        self.lidx = np.asarray(lidx, dtype=np.int64)
        self.n = len(fptr) - 1
        if self.n == 0:
            raise SystemExit(f"{path}: error: no data rows")
        if self.fidx.size and (self.fidx.min() < 0 or self.fidx.max() >= self.features):
            raise SystemExit(f"{path}: error: feature id outside 0..{self.features - 1}")
        if self.lidx.size and (self.lidx.min() < 0 or self.lidx.max() >= self.labels):
            raise SystemExit(f"{path}: error: label id outside 0..{self.labels - 1}")


def gather(ptr, rows):
    """Positions in the value arrays of `rows`' entries, in row order, and
    each row's entry count."""
    starts = ptr[rows]
    counts = ptr[rows + 1] - starts
    total = int(counts.sum())
    begin = np.cumsum(counts) - counts
    pos = np.arange(total, dtype=np.int64) - np.repeat(begin, counts) + np.repeat(starts, counts)
    return pos, counts


def make_batch(d, rows, dev=None):
    """The tensors of one batch: layer-1 input as (indices, offsets, weights)
    and the loss targets as (row, label, mass) triples, on device dev (built
    on the host, then copied, as a data loader would)."""
    fpos, fcnt = gather(d.fptr, rows)
    lpos, lcnt = gather(d.lptr, rows)
    offsets = np.cumsum(fcnt) - fcnt
    b = len(rows)
    lrow = np.repeat(np.arange(b, dtype=np.int64), lcnt)
    mass = np.repeat(1.0 / np.maximum(lcnt, 1), lcnt).astype(np.float32)
    out = (torch.from_numpy(d.fidx[fpos]), torch.from_numpy(offsets),
           torch.from_numpy(d.fval[fpos]), torch.from_numpy(lrow),
           torch.from_numpy(d.lidx[lpos]), torch.from_numpy(mass))
    if dev is not None and dev.type != "cpu":
        out = tuple(t.to(dev, non_blocking=True) for t in out)
    return out


class DenseNet(nn.Module):
    def __init__(self, features, hidden, labels, layer1, seed):
        super().__init__()
        self.layer1 = layer1
        self.features = features
        if layer1 == "embbag":
            self.emb = nn.EmbeddingBag(features, hidden, mode="sum")
            w1 = self.emb.weight
        else:
            self.w1 = nn.Parameter(torch.empty(features, hidden))
            w1 = self.w1
        self.b1 = nn.Parameter(torch.zeros(hidden))
        self.out = nn.Linear(hidden, labels)
        # Reseeded so that the draws do not depend on what the module
        # constructors consumed: both --layer1 variants start equal.
        torch.manual_seed(seed)
        with torch.no_grad():
            # He: std sqrt(2 / fan_in), fan_in = the input width.
            w1.normal_(0.0, math.sqrt(2.0 / features))
            nn.init.xavier_uniform_(self.out.weight)
            self.out.bias.zero_()

    def forward(self, idx, offsets, vals):
        if self.layer1 == "embbag":
            z = self.emb(idx, offsets, per_sample_weights=vals)
        else:
            b = offsets.numel()
            counts = torch.diff(offsets, append=torch.tensor([idx.numel()], device=idx.device))
            rows = torch.repeat_interleave(torch.arange(b, device=idx.device), counts)
            x = torch.sparse_coo_tensor(torch.stack((rows, idx)), vals, (b, self.features))
            z = torch.sparse.mm(x, self.w1)
        return self.out(F.relu(z + self.b1))


def batch_loss(logits, lrow, llab, mass, rows, kind):
    if kind == "logsoftmax":
        logp = F.log_softmax(logits, dim=1)
        return -(logp[lrow, llab] * mass).sum() / rows
    # Per labelled row the masses sum to 1, so its loss is
    # logsumexp(logits) - sum(mass * logit at label).
    labelled = torch.zeros(rows, dtype=logits.dtype, device=logits.device)
    labelled.index_fill_(0, lrow, 1.0)
    lse = torch.logsumexp(logits, dim=1)
    return ((lse * labelled).sum() - (logits[lrow, llab] * mass).sum()) / rows


def evaluate(model, d, points, batch, dev):
    """P@1, P@3, P@5 in percent over the first `points` test rows that have
    labels (0 = all of them)."""
    rows = np.nonzero(np.diff(d.lptr) > 0)[0]
    if points > 0:
        rows = rows[:points]
    hits = np.zeros(3)
    model.eval()
    with torch.no_grad():
        for s in range(0, len(rows), batch):
            r = rows[s:s + batch]
            idx, offs, vals, _, _, _ = make_batch(d, r, dev)
            top = torch.topk(model(idx, offs, vals), 5, dim=1).indices.cpu().numpy()
            for i, row in enumerate(r):
                truth = set(d.lidx[d.lptr[row]:d.lptr[row + 1]].tolist())
                for j, k in enumerate((1, 3, 5)):
                    hits[j] += sum(1 for t in top[i, :k] if t in truth) / k
    model.train()
    n = max(len(rows), 1)
    return {"p_at_1": 100 * hits[0] / n, "p_at_3": 100 * hits[1] / n,
            "p_at_5": 100 * hits[2] / n, "eval_points": len(rows)}


def gemm_bound(a):
    """Times the three GEMMs that dominate an output layer of width O:
    forward (B,H)x(H,O), weight gradient (O,B)x(B,H) and input gradient
    (B,O)x(O,H), 2*B*H*O flops each, and converts to samples/s."""
    b, h, o = a.batch, a.hidden, a.labels_out
    dev = torch.device(a.device)
    g = torch.Generator().manual_seed(a.seed)
    x = torch.randn(b, h, generator=g).to(dev)
    w = torch.randn(o, h, generator=g).to(dev)
    dy = torch.randn(b, o, generator=g).to(dev)
    ops = (lambda: x @ w.t(), lambda: dy.t() @ x, lambda: dy @ w)
    reps = 1 if dev.type == "cpu" else 20  # a GPU needs more than one to time
    for op in ops:
        op()
    sync(dev)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            for op in ops:
                op()
        sync(dev)
        best = min(best, (time.perf_counter() - t0) / reps)
    flops = 3 * 2.0 * b * h * o
    return {"gemm_gflops": flops / best / 1e9, "gemm_s_per_iter": best,
            "gemm_bound_samples_per_s": b / best, "threads": a.threads}


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"torch_dense.py: error: --device {a.device}: torch sees no CUDA device")
        torch.cuda.set_device(dev)
    if a.gemm_bound:
        print(json.dumps(gemm_bound(a)))
        return 0

    t_load = time.perf_counter()
    train = XC(a.train)
    test = XC(a.test) if a.eval else None
    t_load = time.perf_counter() - t_load

    model = DenseNet(train.features, a.hidden, train.labels, a.layer1, a.seed).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                           foreach=(a.foreach == "on"))
    iters = a.iters
    if a.epochs > 0:
        iters = math.ceil(a.epochs * train.n / a.batch)

    ar = np.arange(a.batch, dtype=np.int64)
    loss_sum = 0.0
    last = float("nan")
    t_first = 0.0
    t0 = time.perf_counter()
    for it in range(iters):
        rows = (it * a.batch + ar) % train.n
        idx, offs, vals, lrow, llab, mass = make_batch(train, rows, dev)
        logits = model(idx, offs, vals)
        loss = batch_loss(logits, lrow, llab, mass, a.batch, a.loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last = loss.item()  # on a GPU this also waits for the step
        loss_sum += last
        if it == 0:
            t_first = time.perf_counter() - t0
    sync(dev)
    wall = time.perf_counter() - t0

    out = {
        "samples_per_s": iters * a.batch / wall if wall > 0 else 0.0,
        # Iterations 2..N only: the first one also pays for creating Adam's
        # state and the allocator's first touch of every buffer.
        "steady_samples_per_s": ((iters - 1) * a.batch / (wall - t_first)
                                 if iters > 1 and wall > t_first else None),
        "loss": last,
        "mean_loss": loss_sum / max(iters, 1),
        "iterations": iters,
        "epochs": iters * a.batch / train.n,
        "batch": a.batch,
        "threads": a.threads,
        "wall_s": wall,
        "first_iter_s": t_first,
        "load_s": t_load,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "layer1": a.layer1,
        "loss_kind": a.loss,
        "adam_foreach": a.foreach == "on",
        "torch": torch.__version__,
        "device": a.device,
    }
    if dev.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(dev)
        out["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(dev)
        out["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    if a.eval:
        t_eval = time.perf_counter()
        out.update(evaluate(model, test, a.eval_points, a.batch, dev))
        out["eval_s"] = time.perf_counter() - t_eval
    print(json.dumps(out))
    return 0 if math.isfinite(last) else 1


if __name__ == "__main__":
    sys.exit(main(ARGS))
