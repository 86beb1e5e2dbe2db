"""The files tests/device/nn_check.h exchanges with the PyTorch scripts.

load(folder) -> (meta, ins, params, states, gouts): torch tensors read from
in<i>.bin, param<i>.bin, state<i>.bin, gout<i>.bin as meta.json describes
them (f32 ones with requires_grad for inputs and parameters).
save(folder, name, i, tensor): writes <name><i>.bin (float32, or the
tensor's own integer type).  A script writes out<i>, gin<i> (the inputs
that have a .grad), gparam<i> and newstate<i> (state after the forward).
compute(folder, ops): ops maps the op name to f(meta, ins, params,
states) -> list of outputs; writes the outputs, the state and the
gradients, which come from backward with gout (xent: the summed loss
times meta['scale']).  Each script names its table OPS.

run(ops): a script's main, `python3 SCRIPT FOLDER` (one case, by hand).
serve(): `python3 nn_torch_io.py --serve`, what nn_check.h starts once per
test program, so torch starts once and not once a case: says "ready" (or
"no torch: WHY" and exits when torch does not import), then reads lines
"SCRIPT<TAB>FOLDER", computes that case with SCRIPT's OPS and answers "ok",
or "error" after the traceback on stderr.  It ends at end of input.
"""
import importlib.util
import json
import os
import sys
import traceback

import numpy as np

try:
    import torch
except ImportError as e:  # serve() says so; a script by hand fails here
    torch = None
    _NO_TORCH = str(e)

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


def compute(folder, ops):
    meta, ins, params, states, gouts = load(folder)
    f = ops[meta["op"]]
    outs = f(meta, ins, params, states)
    for i, o in enumerate(outs):
        save(folder, "out", i, o)
    for i, s in enumerate(states):
        save(folder, "newstate", i, s)
    if meta["training"]:
        if meta["op"] in ("xent", "xent_multi"):
            total = outs[0].sum() * meta["scale"]
        else:
            total = sum((o * g).sum() for o, g in zip(outs, gouts) if o.is_floating_point())
        total.backward()
        for i, t in enumerate(ins):
            if t.is_floating_point() and t.grad is not None:
                save(folder, "gin", i, t.grad)
        for i, p in enumerate(params):
            save(folder, "gparam", i, p.grad if p.grad is not None else torch.zeros_like(p))


def run(ops):
    compute(sys.argv[1], ops)


def _ops(script, cache={}):
    if script not in cache:
        name = "nn_torch_case_%d" % len(cache)
        spec = importlib.util.spec_from_file_location(name, script)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        cache[script] = mod.OPS
    return cache[script]


def serve():
    if torch is None:
        print("no torch: %s" % _NO_TORCH, flush=True)
        return
    print("ready", flush=True)
    for line in sys.stdin:
        script, _, folder = line.rstrip("\n").partition("\t")
        try:
            compute(folder, _ops(script))
            print("ok", flush=True)
        except Exception:  # the case fails, the next ones still run
            traceback.print_exc()
            sys.stderr.flush()
            print("error", flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
