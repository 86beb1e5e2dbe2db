"""PyTorch references of the nn ops in group "conv" for tests/device/test_nn_conv.c
(nn_check_torch): conv, maxpool, avgpool, global_avgpool, batchnorm, in float64.

Padding is given as (top, left, bottom, right); PyTorch pads symmetrically,
so the scripts pad explicitly with F.pad first (zeros for conv and average
pooling, where the divisor then counts the padding as count_include_pad
does; -inf for max pooling).
"""
import torch
import torch.nn.functional as F

import nn_torch_io

RELU = 1


def _pad(x, a, value=0.0):
    t, l, b, r = a["pad"]
    if t == l == b == r == 0:
        return x
    return F.pad(x, (l, r, t, b), value=value)


def conv(meta, ins, params, states):
    a = meta["attr"]
    b = params[1] if a["bias"] else None
    y = F.conv2d(_pad(ins[0], a), params[0], b, stride=a["stride"],
                 dilation=a["dilation"], groups=a["groups"])
    return [F.relu(y) if a["act"] == RELU else y]


def maxpool(meta, ins, params, states):
    a = meta["attr"]
    return [F.max_pool2d(_pad(ins[0], a, float("-inf")), a["kernel"], a["stride"])]


def avgpool(meta, ins, params, states):
    a = meta["attr"]
    return [F.avg_pool2d(_pad(ins[0], a), a["kernel"], a["stride"])]


def global_avgpool(meta, ins, params, states):
    return [ins[0].mean(dim=(2, 3))]


def batchnorm(meta, ins, params, states):
    a = meta["attr"]
    y = F.batch_norm(ins[0], states[0], states[1], params[0], params[1],
                     training=meta["training"], momentum=a["momentum"], eps=a["eps"])
    return [F.relu(y) if a["act"] == RELU else y]


OPS = {"conv": conv, "maxpool": maxpool, "avgpool": avgpool,
       "global_avgpool": global_avgpool, "batchnorm": batchnorm}

if __name__ == "__main__":
    nn_torch_io.run(OPS)
