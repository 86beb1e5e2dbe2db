"""The files tests/device/nn_check.h exchanges with the PyTorch scripts.

load(folder) -> (meta, ins, params, states, gouts): torch tensors read from
in<i>.bin, param<i>.bin, state<i>.bin, gout<i>.bin as meta.json describes
them (f32 ones with requires_grad for inputs and parameters).
save(folder, name, i, tensor): writes <name><i>.bin (float32, or the
tensor's own integer type).  A script writes out<i>, gin<i> (the inputs
that have a .grad), gparam<i> and newstate<i> (state after the forward).
run(ops): the usual main: ops maps the op name to f(meta, ins, params,
states) -> list of outputs; the script's gradients come from
backward with gout (xent: the summed loss times meta['scale']).
"""
import json
import os
import sys

import numpy as np
import torch

DT = {"f32": np.float32, "i64": np.int64, "i32": np.int32, "u8": np.uint8, "bool": np.uint8}


def _read(folder, name, i, desc, grad):
    a = np.fromfile(os.path.join(folder, "%s%d.bin" % (name, i)), dtype=DT[desc["dtype"]])
    a = a.reshape(desc["shape"])
    t = torch.from_numpy(a.copy())
    if desc["dtype"] == "f32":
        t = t.double()
        if grad:
            t.requires_grad_(True)
    return t


def load(folder):
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    ins = [_read(folder, "in", i, d, True) for i, d in enumerate(meta["in"])]
    params = [_read(folder, "param", i, d, True) for i, d in enumerate(meta["param"])]
    states = [_read(folder, "state", i, d, False) for i, d in enumerate(meta["state"])]
    gouts = [_read(folder, "gout", i, dict(d, dtype="f32"), False)
             for i, d in enumerate(meta["out"])]
    return meta, ins, params, states, gouts


def save(folder, name, i, t):
    a = t.detach().cpu().numpy()
    if a.dtype.kind == "f":
        a = a.astype(np.float32)
    a.tofile(os.path.join(folder, "%s%d.bin" % (name, i)))


def run(ops):
    folder = sys.argv[1]
    meta, ins, params, states, gouts = load(folder)
    f = ops[meta["op"]]
    outs = f(meta, ins, params, states)
    for i, o in enumerate(outs):
        save(folder, "out", i, o)
    for i, s in enumerate(states):
        save(folder, "newstate", i, s)
    if meta["training"]:
        if meta["op"] == "xent":
            total = outs[0].sum() * meta["scale"]
        else:
            total = sum((o * g).sum() for o, g in zip(outs, gouts) if o.is_floating_point())
        total.backward()
        for i, t in enumerate(ins):
            if t.is_floating_point() and t.grad is not None:
                save(folder, "gin", i, t.grad)
        for i, p in enumerate(params):
            save(folder, "gparam", i, p.grad if p.grad is not None else torch.zeros_like(p))
