"""PyTorch reference of the nn ops in group "math" for tests/device/test_nn_math.c
(nn_check_torch): python3 nn_torch_math.py FOLDER (tests/device/nn_torch_io.py
describes the files).  Computes in double."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nn_torch_io  # noqa: E402

ACT = {0: lambda y: y, 1: torch.relu, 2: torch.sigmoid}


def dense(m, ins, params, states):
    a = m["attr"]
    b = params[1] if a["bias"] else None
    return [ACT[a["act"]](F.linear(ins[0], params[0], b))]


def matmul(m, ins, params, states):
    b = ins[1].transpose(-1, -2) if m["attr"]["trans_b"] else ins[1]
    return [torch.matmul(ins[0], b)]


def binary(f):
    def op(m, ins, params, states):
        other = ins[1] if len(ins) > 1 else torch.tensor(m["attr"]["scalar"], dtype=torch.float64)
        return [f(ins[0], other)]
    return op


def reduce(f):
    def op(m, ins, params, states):
        a, x = m["attr"], ins[0]
        if a["axis_all"]:
            dims = tuple(range(1, x.dim()))
            if not dims:  # a 1-d input: nothing but the batch, the identity
                return [x * 1.0]
        else:
            dims = (a["axis"],)
        return [f(x, dim=dims, keepdim=a["keepdims"])]
    return op


def layernorm(m, ins, params, states):
    x = ins[0]
    return [F.layer_norm(x, (x.shape[-1],), params[0], params[1], m["attr"]["eps"])]


def xent(m, ins, params, states):
    return [F.cross_entropy(ins[0], ins[1].long(), reduction="none")]


def where(m, ins, params, states):
    return [torch.where(ins[0].bool(), ins[1], ins[2])]


def expand(m, ins, params, states):
    shape = m["attr"]["shape"]
    x = ins[0]
    nd = max(len(shape), x.dim())
    full = [1] * (nd - x.dim()) + list(x.shape)
    want = [1] * (nd - len(shape)) + list(shape)
    return [x.reshape(full).expand([max(a, b) for a, b in zip(full, want)])]


OPS = {
    "dense": dense,
    "matmul": matmul,
    "relu": lambda m, i, p, s: [torch.relu(i[0])],
    "leaky_relu": lambda m, i, p, s: [F.leaky_relu(i[0], m["attr"]["alpha"])],
    "sigmoid": lambda m, i, p, s: [torch.sigmoid(i[0])],
    "tanh": lambda m, i, p, s: [torch.tanh(i[0])],
    "gelu": lambda m, i, p, s: [F.gelu(i[0])],
    "softmax": lambda m, i, p, s: [torch.softmax(i[0], -1)],
    "log_softmax": lambda m, i, p, s: [torch.log_softmax(i[0], -1)],
    "layernorm": layernorm,
    "add": binary(torch.add),
    "sub": binary(torch.sub),
    "mul": binary(torch.mul),
    "div": binary(torch.div),
    "pow": binary(torch.pow),
    "sqrt": lambda m, i, p, s: [torch.sqrt(i[0])],
    "exp": lambda m, i, p, s: [torch.exp(i[0])],
    "log": lambda m, i, p, s: [torch.log(i[0])],
    "mean": reduce(torch.mean),
    "sum": reduce(torch.sum),
    "xent": xent,
    "neg": lambda m, i, p, s: [torch.neg(i[0])],
    "abs": lambda m, i, p, s: [torch.abs(i[0])],
    "erf": lambda m, i, p, s: [torch.erf(i[0])],
    "clip": lambda m, i, p, s: [torch.clamp(i[0], m["attr"]["lo"], m["attr"]["hi"])],
    "where": where,
    "expand": expand,
}

if __name__ == "__main__":
    nn_torch_io.run(OPS)
