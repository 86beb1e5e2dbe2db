/*
 * TicTac's op properties over the set R of outstanding recvs (TicTac,
 * definitions of P, M and M+), kept incrementally so that TAC, which
 * recomputes them after every pick, stays fast.
 *
 * For a dependency class c (compute ops with the same upstream recvs
 * deps(c)): M(c) = sum Time(r) over deps(c) ∩ R, cnt(c) = |deps(c) ∩ R|.
 * For a recv r:
 *   P(r)  = sum Time(op) over compute ops whose only outstanding dependency
 *           is r, i.e. over classes with cnt == 1 whose remaining recv is r;
 *   M+(r) = min M(c) over classes c that contain r and have cnt >= 2;
 *           +inf when there is none.
 * A recv's own M is Time(r) (its only dependency is itself).
 *
 * Removing r from R touches only the classes that contain r: their M drops
 * by Time(r), their cnt by one, and a class whose cnt falls to one adds its
 * time to the P of its last recv (found as the xor of the recvs left).  The
 * classes with cnt >= 2 are kept sorted by M: the touched ones all drop by
 * the same amount, so they stay sorted among themselves, as do the
 * untouched ones, and one merge restores the order.  M+ is then found by
 * painting: walk the classes in ascending M and give every recv of a class
 * not painted yet that class's M; bitsets make each class cost
 * words = ceil(transfers / 64) operations.
 */
#include <stdlib.h>
#include <string.h>

#include "commsched_impl.h"

typedef struct {
  int64_t M;
  uint32_t c;
} cls_key;

static int cmp_key(const void *a, const void *b) {
  const cls_key *x = a, *y = b;
  if (x->M != y->M)
    return x->M < y->M ? -1 : 1;
  return x->c < y->c ? -1 : x->c > y->c;
}

void ar__cs_props_fini(ar__cs_props *p) {
  ar_free(p->R);
  ar_free(p->rtime);
  ar_free(p->ctime);
  ar_free(p->M);
  ar_free(p->cnt);
  ar_free(p->x);
  ar_free(p->P);
  ar_free(p->Mplus);
  ar_free(p->order);
  ar_free(p->tmp);
  ar_free(p->stamp);
  ar_free(p->painted);
  memset(p, 0, sizeof *p);
}

ar_status ar__cs_props_init(ar__cs_props *p, const ar_commsched_graph *g,
                            int unit, ar_err *err) {
  memset(p, 0, sizeof *p);
  size_t n = g->nrecv, W = g->words, nc = g->nclass;
  p->n = n;
  p->words = W;
  p->nclass = nc;
  p->R = ar_calloc(W + 1, sizeof *p->R);
  p->painted = ar_calloc(W + 1, sizeof *p->painted);
  p->rtime = ar_calloc(n + 1, sizeof *p->rtime);
  p->P = ar_calloc(n + 1, sizeof *p->P);
  p->Mplus = ar_calloc(n + 1, sizeof *p->Mplus);
  p->ctime = ar_calloc(nc + 1, sizeof *p->ctime);
  p->M = ar_calloc(nc + 1, sizeof *p->M);
  p->cnt = ar_calloc(nc + 1, sizeof *p->cnt);
  p->x = ar_calloc(nc + 1, sizeof *p->x);
  p->order = ar_calloc(nc + 1, sizeof *p->order);
  p->tmp = ar_calloc(nc + 1, sizeof *p->tmp);
  p->stamp = ar_calloc(nc + 1, sizeof *p->stamp);
  cls_key *keys = ar_calloc(nc + 1, sizeof *keys);
  if (!p->R || !p->painted || !p->rtime || !p->P || !p->Mplus || !p->ctime ||
      !p->M || !p->cnt || !p->x || !p->order || !p->tmp || !p->stamp ||
      !keys) {
    ar_free(keys);
    ar__cs_props_fini(p);
    return ar_errf(err, AR_NOMEM,
                   "commsched wizard: out of memory for %zu transfers", n);
  }
  for (size_t r = 0; r < n; r++) {
    p->R[r / 64] |= 1ull << (r % 64);
    p->rtime[r] = unit ? 1 : ar__cs_ns(g->ops[g->recvs[r].op].time_s);
  }
  p->nR = n;
  if (!unit)
    for (size_t i = 0; i < g->nops; i++)
      if (g->ops[i].cls != AR_COMMSCHED_NONE)
        p->ctime[g->ops[i].cls] += ar__cs_ns(g->ops[i].time_s);
  for (size_t c = 0; c < nc; c++) {
    const uint64_t *b = g->cls_bits + c * W;
    for (size_t w = 0; w < W; w++)
      for (uint64_t m = b[w]; m; m &= m - 1) {
        uint32_t r = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(m));
        p->M[c] += p->rtime[r];
        p->cnt[c]++;
        p->x[c] ^= r;
      }
    if (p->cnt[c] == 1)
      p->P[p->x[c]] += p->ctime[c];
  }
  size_t k = 0;
  for (size_t c = 0; c < nc; c++)
    if (p->cnt[c] >= 2) {
      keys[k].M = p->M[c];
      keys[k].c = (uint32_t)c;
      k++;
    }
  qsort(keys, k, sizeof *keys, cmp_key);
  for (size_t i = 0; i < k; i++)
    p->order[i] = keys[i].c;
  p->norder = k;
  ar_free(keys);
  return AR_OK;
}

void ar__cs_props_mplus(ar__cs_props *p, const ar_commsched_graph *g) {
  size_t W = p->words;
  for (size_t r = 0; r < p->n; r++)
    p->Mplus[r] = AR__CS_INF;
  memset(p->painted, 0, W * sizeof *p->painted);
  size_t left = p->nR;
  for (size_t i = 0; i < p->norder && left > 0; i++) {
    uint32_t c = p->order[i];
    const uint64_t *b = g->cls_bits + (size_t)c * W;
    int64_t M = p->M[c];
    for (size_t w = 0; w < W; w++) {
      uint64_t fresh = b[w] & p->R[w] & ~p->painted[w];
      if (!fresh)
        continue;
      p->painted[w] |= fresh;
      for (uint64_t m = fresh; m; m &= m - 1) {
        p->Mplus[w * 64 + (size_t)__builtin_ctzll(m)] = M;
        left--;
      }
    }
  }
}

static int key_less(const ar__cs_props *p, uint32_t a, uint32_t b) {
  return p->M[a] < p->M[b] || (p->M[a] == p->M[b] && a < b);
}

void ar__cs_props_remove(ar__cs_props *p, const ar_commsched_graph *g,
                         uint32_t r) {
  AR_ASSERT(p->R[r / 64] & (1ull << (r % 64)));
  p->R[r / 64] &= ~(1ull << (r % 64));
  p->nR--;
  uint64_t step = ++p->step;
  for (uint32_t k = g->user_off[r]; k < g->user_off[r + 1]; k++) {
    uint32_t c = g->users[k];
    p->M[c] -= p->rtime[r];
    p->cnt[c]--;
    p->x[c] ^= r;
    p->stamp[c] = step;
    if (p->cnt[c] == 1)
      p->P[p->x[c]] += p->ctime[c];
  }
  /* Merge the touched classes that still have cnt >= 2 with the untouched
   * ones; each subsequence is already in (M, id) order. */
  size_t na = 0, nb = 0;
  uint32_t *A = p->tmp, *B = p->order;
  for (size_t i = 0; i < p->norder; i++) {
    uint32_t c = p->order[i];
    if (p->stamp[c] != step)
      B[nb++] = c; /* in place: nb <= i */
    else if (p->cnt[c] >= 2)
      A[na++] = c;
  }
  /* B occupies order[0..nb); merge from the back so nothing is overwritten
   * before it is read. */
  size_t i = na, j = nb, out = na + nb;
  while (i > 0 && j > 0) {
    if (key_less(p, A[i - 1], B[j - 1]))
      p->order[--out] = B[--j];
    else
      p->order[--out] = A[--i];
  }
  while (i > 0)
    p->order[--out] = A[--i];
  p->norder = na + nb;
}
