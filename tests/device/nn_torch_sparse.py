"""PyTorch reference of the nn ops in group "sparse" for tests/device/test_nn_sparse.c
(nn_check_torch): python3 nn_torch_sparse.py FOLDER (tests/device/nn_torch_io.py
describes the files).  Computes in double; the CSR batch becomes a torch.sparse
matrix."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nn_torch_io  # noqa: E402

ACT = {0: lambda y: y, 1: torch.relu, 2: torch.sigmoid}


def csr_rows(ptr, idx, n_rows):
    """(row, column) of each stored entry of a CSR batch, in order."""
    rows, cols = [], []
    for r in range(n_rows):
        for e in range(int(ptr[r]), int(ptr[r + 1])):
            rows.append(r)
            cols.append(int(idx[e]))
    return rows, cols


def sparse_dense(m, ins, params, states):
    a = m["attr"]
    ptr, idx, val = ins
    n = ptr.shape[0] - 1
    rows, cols = csr_rows(ptr, idx, n)
    x = torch.sparse_coo_tensor([rows, cols], val[: len(rows)].detach(), (n, a["vocab"]))
    y = torch.sparse.mm(x, params[0])
    if a["bias"]:
        y = y + params[1]
    return [ACT[a["act"]](y)]


def xent_multi(m, ins, params, states):
    z, ptr, lab = ins
    n, c = z.shape
    t = torch.zeros(n, c, dtype=torch.float64)
    for r in range(n):
        k = int(ptr[r + 1]) - int(ptr[r])
        for e in range(int(ptr[r]), int(ptr[r + 1])):
            t[r, int(lab[e])] = 1.0 if m["attr"]["act"] == 2 else 1.0 / k
    if m["attr"]["act"] == 2:  # sigmoid: summed over the classes
        return [F.binary_cross_entropy_with_logits(z, t, reduction="none").sum(1)]
    return [-(t * F.log_softmax(z, 1)).sum(1)]


OPS = {"sparse_dense": sparse_dense, "xent_multi": xent_multi}

if __name__ == "__main__":
    nn_torch_io.run(OPS)
