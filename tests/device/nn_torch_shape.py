"""PyTorch references of the nn group "shape" for tests/device/test_nn_shape.c
(nn_check_torch): python3 nn_torch_shape.py FOLDER.

Attention is written out as the math nn.h states (projections as Linear,
per-head softmax(q k^T / sqrt(dk)), masked keys excluded), and that
composition is itself checked against torch's multi_head_attention_forward
with the same weights, so the reference is torch's own convention.
"""
import math

import torch
import torch.nn.functional as F

import nn_torch_io


def _axis(meta, nd):
    a = meta["attr"]["axis"]
    return a + nd if a < 0 else a


def concat(meta, ins, params, states):
    return [torch.cat(ins, dim=_axis(meta, ins[0].dim()))]


def split(meta, ins, params, states):
    a = meta["attr"]
    return list(torch.split(ins[0], a["sizes"], dim=_axis(meta, ins[0].dim())))


def slice_(meta, ins, params, states):
    a, x = meta["attr"], ins[0]
    idx = [slice(None)] * x.dim()
    idx[_axis(meta, x.dim())] = slice(a["begin"], a["end"])
    return [x[tuple(idx)]]


def pad(meta, ins, params, states):
    a, x = meta["attr"], ins[0]
    nd = x.dim()
    pads = []
    for i in reversed(range(nd)):  # F.pad starts from the last dim
        pads += [a["pad_nd"][i], a["pad_nd"][6 + i]]
    return [F.pad(x, pads, value=a["scalar"])]


def reshape(meta, ins, params, states):
    x = ins[0]
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(meta["attr"]["shape"])]
    return [x.reshape(shape)]


def flatten(meta, ins, params, states):
    return [torch.flatten(ins[0], 1)]


def transpose(meta, ins, params, states):
    x = ins[0]
    return [x.permute(meta["attr"]["perm"][: x.dim()])]


def embedding(meta, ins, params, states):
    return [F.embedding(ins[0].long(), params[0])]


def posembed(meta, ins, params, states):
    return [ins[0] + params[0]]


def mask(meta, ins, params, states):
    return [(ins[0] != meta["attr"]["pad_id"]).double()]


def _allowed(meta, ins, n, t):
    """(N, 1, T, T) bool: key j allowed for query i."""
    ok = torch.ones(n, 1, t, t, dtype=torch.bool)
    if meta["attr"]["causal"]:
        ok = ok & torch.ones(t, t, dtype=torch.bool).tril()
    if len(ins) > 1:
        ok = ok & (ins[1].detach() != 0)[:, None, None, :]
    return ok


def attention(meta, ins, params, states):
    x = ins[0]
    n, t, d = x.shape
    h = meta["attr"]["heads"]
    dk = d // h
    wq, wk, wv, wo, bq, bk, bv, bo = params

    def heads(z):
        return z.reshape(n, t, h, dk).transpose(1, 2)

    q, k, v = heads(x @ wq.T + bq), heads(x @ wk.T + bk), heads(x @ wv.T + bv)
    s = q @ k.transpose(-1, -2) / math.sqrt(dk)
    s = s.masked_fill(~_allowed(meta, ins, n, t), float("-inf"))
    p = torch.softmax(s, dim=-1)
    ctx = (p @ v).transpose(1, 2).reshape(n, t, d)
    y = ctx @ wo.T + bo

    # The same with torch's own multi-head attention (sequence-first).
    with torch.no_grad():
        kpm = (ins[1] == 0) if len(ins) > 1 else None
        am = None
        if meta["attr"]["causal"]:
            am = ~torch.ones(t, t, dtype=torch.bool).tril()
        xt = x.detach().transpose(0, 1)
        ref, _ = F.multi_head_attention_forward(
            xt, xt, xt, d, h, torch.cat([wq, wk, wv]).detach(), torch.cat([bq, bk, bv]).detach(),
            None, None, False, 0.0, wo.detach(), bo.detach(), training=False,
            key_padding_mask=kpm, need_weights=False, attn_mask=am)
        err = (ref.transpose(0, 1) - y.detach()).abs().max().item()
        assert err < 1e-9, "the reference disagrees with torch's attention by %g" % err
    return [y]


def gather(meta, ins, params, states):
    x, idx = ins[0], ins[1].long()
    ax = _axis(meta, x.dim())
    idx = torch.where(idx < 0, idx + x.shape[ax], idx)
    out = torch.index_select(x, ax, idx.reshape(-1))
    shape = list(x.shape[:ax]) + list(idx.shape) + list(x.shape[ax + 1:])
    return [out.reshape(shape)]


OPS = {
    "concat": concat, "split": split, "slice": slice_, "pad": pad, "reshape": reshape,
    "flatten": flatten, "transpose": transpose, "embedding": embedding,
    "posembed": posembed, "mask": mask, "attention": attention, "gather": gather,
}

if __name__ == "__main__":
    nn_torch_io.run(OPS)
