/* The op graph: ops, edges, sealing (cycle check, dependency classes). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "commsched_impl.h"

int64_t ar__cs_ns(double seconds) { return (int64_t)llround(seconds * 1e9); }

ar_status ar_commsched_graph_create(ar_commsched_graph **out, ar_err *err) {
  ar_commsched_graph *g = ar_calloc(1, sizeof *g);
  if (!g)
    return ar_errf(err, AR_NOMEM, "commsched graph: out of memory");
  *out = g;
  return AR_OK;
}

void ar_commsched_graph_destroy(ar_commsched_graph *g) {
  if (!g)
    return;
  for (size_t i = 0; i < g->nops; i++)
    ar_free(g->ops[i].name);
  ar_free(g->ops);
  ar_free(g->recvs);
  ar_free(g->edges);
  ar_free(g->cls_bits);
  ar_free(g->user_off);
  ar_free(g->users);
  ar_free(g);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 1;
  size_t c = *cap ? *cap * 2 : 16;
  while (c < need)
    c *= 2;
  void *q = ar_realloc(*p, c * elem);
  if (!q)
    return 0;
  *p = q;
  *cap = c;
  return 1;
}

static int valid_time(double t) { return isfinite(t) && t >= 0.0; }

static ar_status add_op(ar_commsched_graph *g, const char *name,
                        ar_commsched_op_kind kind, double t,
                        ar_commsched_op *out, ar_err *err) {
  if (g->sealed)
    return ar_errf(err, AR_STATE,
                   "commsched graph: cannot add op '%s' after seal; build the "
                   "whole graph first",
                   name ? name : "(unnamed)");
  if (!valid_time(t))
    return ar_errf(err, AR_INVALID,
                   "commsched graph: op '%s' has time %g s; times must be "
                   "finite and >= 0",
                   name ? name : "(unnamed)", t);
  if (g->nops >= AR_COMMSCHED_NONE - 1)
    return ar_errf(err, AR_RANGE, "commsched graph: too many ops");
  if (!grow((void **)&g->ops, &g->cap_ops, g->nops + 1, sizeof *g->ops))
    return ar_errf(err, AR_NOMEM, "commsched graph: out of memory");
  char buf[32];
  if (!name) {
    snprintf(buf, sizeof buf, kind == AR_COMMSCHED_RECV ? "t%zu" : "op%zu",
             kind == AR_COMMSCHED_RECV ? g->nrecv : g->nops);
    name = buf;
  }
  char *copy = ar_strdup(name);
  if (!copy)
    return ar_errf(err, AR_NOMEM, "commsched graph: out of memory");
  ar__cs_op *op = &g->ops[g->nops];
  op->name = copy;
  op->kind = kind;
  op->time_s = t;
  op->transfer = AR_COMMSCHED_NONE;
  op->cls = AR_COMMSCHED_NONE;
  *out = (ar_commsched_op)g->nops++;
  return AR_OK;
}

ar_status ar_commsched_graph_add_compute(ar_commsched_graph *g,
                                         const char *name, double time_s,
                                         ar_commsched_op *out, ar_err *err) {
  ar_commsched_op id = 0;
  AR_CHECK(add_op(g, name, AR_COMMSCHED_COMPUTE, time_s, &id, err));
  if (out)
    *out = id;
  return AR_OK;
}

ar_status ar_commsched_graph_add_recv(ar_commsched_graph *g, const char *name,
                                      size_t bytes, uint32_t channel,
                                      double time_s, ar_commsched_op *out,
                                      ar_err *err) {
  if (name) {
    if (!*name)
      return ar_errf(err, AR_INVALID,
                     "commsched graph: empty transfer name; give each "
                     "transfer a name or pass NULL");
    for (const char *c = name; *c; c++)
      if (isspace((unsigned char)*c) || *c == '#')
        return ar_errf(err, AR_INVALID,
                       "commsched graph: transfer name '%s' holds whitespace "
                       "or '#', which schedule files cannot store",
                       name);
    /* Linear: graphs are built once, and uniqueness keeps files usable. */
    for (size_t r = 0; r < g->nrecv; r++)
      if (strcmp(g->ops[g->recvs[r].op].name, name) == 0)
        return ar_errf(err, AR_INVALID,
                       "commsched graph: transfer name '%s' used twice "
                       "(transfers %zu and %zu)",
                       name, r, g->nrecv);
  }
  if (!grow((void **)&g->recvs, &g->cap_recv, g->nrecv + 1, sizeof *g->recvs))
    return ar_errf(err, AR_NOMEM, "commsched graph: out of memory");
  ar_commsched_op id = 0;
  AR_CHECK(add_op(g, name, AR_COMMSCHED_RECV, time_s, &id, err));
  g->ops[id].transfer = (uint32_t)g->nrecv;
  g->recvs[g->nrecv].op = id;
  g->recvs[g->nrecv].bytes = bytes;
  g->recvs[g->nrecv].channel = channel;
  g->nrecv++;
  if (out)
    *out = id;
  return AR_OK;
}

ar_status ar_commsched_graph_add_edge(ar_commsched_graph *g,
                                      ar_commsched_op from, ar_commsched_op to,
                                      ar_err *err) {
  if (g->sealed)
    return ar_errf(err, AR_STATE,
                   "commsched graph: cannot add an edge after seal");
  if (from >= g->nops || to >= g->nops)
    return ar_errf(err, AR_INVALID,
                   "commsched graph: edge %u -> %u names an unknown op (the "
                   "graph has %zu ops)",
                   from, to, g->nops);
  if (g->ops[to].kind == AR_COMMSCHED_RECV)
    return ar_errf(err, AR_INVALID,
                   "commsched graph: edge '%s' -> '%s' points into a recv op; "
                   "recv ops are sources of the DAG",
                   g->ops[from].name, g->ops[to].name);
  if (!grow((void **)&g->edges, &g->cap_edges, g->nedges + 1,
            2 * sizeof *g->edges))
    return ar_errf(err, AR_NOMEM, "commsched graph: out of memory");
  g->edges[2 * g->nedges] = from;
  g->edges[2 * g->nedges + 1] = to;
  g->nedges++;
  return AR_OK;
}

/* Describes one cycle among the ops Kahn's algorithm could not order: each
 * of them has an unordered predecessor, so walking predecessors must
 * revisit an op. */
static ar_status report_cycle(const ar_commsched_graph *g,
                              const uint32_t *indeg, const uint32_t *pred_off,
                              const uint32_t *pred, uint32_t *mark,
                              ar_err *err) {
  uint32_t v = 0;
  while (indeg[v] == 0)
    v++;
  for (size_t i = 0; i < g->nops; i++)
    mark[i] = 0;
  uint32_t step = 1;
  while (!mark[v]) {
    mark[v] = step++;
    for (uint32_t k = pred_off[v]; k < pred_off[v + 1]; k++)
      if (indeg[pred[k]] > 0) {
        v = pred[k];
        break;
      }
  }
  /* v is on the cycle; walk it once more, forwards in dependency order. */
  char msg[600];
  size_t len = 0;
  uint32_t path[32];
  size_t np = 0;
  uint32_t u = v;
  do {
    if (np < 32)
      path[np++] = u;
    for (uint32_t k = pred_off[u]; k < pred_off[u + 1]; k++)
      if (indeg[pred[k]] > 0) {
        u = pred[k];
        break;
      }
  } while (u != v && np < 32);
  /* path holds the cycle against the edge direction. */
  for (size_t i = np; i-- > 0 && len < sizeof msg - 80;)
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s -> ",
                            g->ops[path[i]].name);
  snprintf(msg + len, sizeof msg - len, "%s", g->ops[path[np - 1]].name);
  return ar_errf(err, AR_INVALID,
                 "commsched graph: the dependencies form a cycle: %s; a "
                 "worker's op graph must be a DAG",
                 msg);
}

/* Hash of a bitset, for deduplicating classes. */
static uint64_t hash_bits(const uint64_t *b, size_t words) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (size_t w = 0; w < words; w++)
    h = ar_mix64(h ^ b[w]);
  return h;
}

ar_status ar_commsched_graph_seal(ar_commsched_graph *g, ar_err *err) {
  if (g->sealed)
    return ar_errf(err, AR_STATE, "commsched graph: already sealed");
  size_t n = g->nops, W = (g->nrecv + 63) / 64;
  ar_status st = AR_NOMEM;
  uint32_t *indeg = ar_calloc(n + 1, sizeof *indeg);
  uint32_t *pred_off = ar_calloc(n + 1, sizeof *pred_off);
  uint32_t *pred = ar_malloc((g->nedges + 1) * sizeof *pred);
  uint32_t *succ_off = ar_calloc(n + 1, sizeof *succ_off);
  uint32_t *succ = ar_malloc((g->nedges + 1) * sizeof *succ);
  uint32_t *queue = ar_malloc((n + 1) * sizeof *queue);
  uint64_t *bits = ar_calloc(n * W + 1, sizeof *bits);
  size_t hcap = 16;
  while (hcap < 2 * n)
    hcap *= 2;
  uint32_t *htab = ar_malloc(hcap * sizeof *htab);
  uint32_t *cls_op = ar_malloc((n + 1) * sizeof *cls_op);
  uint64_t *cbits = NULL;
  uint32_t *user_off = NULL, *users = NULL;
  if (!indeg || !pred_off || !pred || !succ_off || !succ || !queue || !bits ||
      !htab || !cls_op)
    goto fail_nomem;

  /* CSR of predecessors and successors. */
  for (size_t e = 0; e < g->nedges; e++) {
    pred_off[g->edges[2 * e + 1] + 1]++;
    succ_off[g->edges[2 * e] + 1]++;
  }
  for (size_t i = 0; i < n; i++) {
    pred_off[i + 1] += pred_off[i];
    succ_off[i + 1] += succ_off[i];
  }
  for (size_t i = 0; i < n; i++)
    indeg[i] = 0;
  for (size_t e = 0; e < g->nedges; e++) {
    uint32_t f = g->edges[2 * e], t = g->edges[2 * e + 1];
    pred[pred_off[t] + indeg[t]++] = f;
  }
  for (size_t i = 0; i < n; i++)
    queue[i] = 0; /* reuse as fill counters */
  for (size_t e = 0; e < g->nedges; e++) {
    uint32_t f = g->edges[2 * e], t = g->edges[2 * e + 1];
    succ[succ_off[f] + queue[f]++] = t;
  }

  /* Kahn's algorithm; deps bitsets flow along the topological order. */
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < n; i++)
    if (indeg[i] == 0)
      queue[tail++] = (uint32_t)i;
  while (head < tail) {
    uint32_t v = queue[head++];
    uint64_t *bv = bits + (size_t)v * W;
    if (g->ops[v].kind == AR_COMMSCHED_RECV)
      bv[g->ops[v].transfer / 64] |= 1ull << (g->ops[v].transfer % 64);
    for (uint32_t k = succ_off[v]; k < succ_off[v + 1]; k++) {
      uint32_t s = succ[k];
      uint64_t *bs = bits + (size_t)s * W;
      for (size_t w = 0; w < W; w++)
        bs[w] |= bv[w];
      if (--indeg[s] == 0)
        queue[tail++] = s;
    }
  }
  if (tail < n) {
    st = report_cycle(g, indeg, pred_off, pred, queue, err);
    goto fail;
  }

  /* Group compute ops with equal, non-empty deps into classes. */
  for (size_t h = 0; h < hcap; h++)
    htab[h] = AR_COMMSCHED_NONE;
  size_t nclass = 0;
  for (size_t i = 0; i < n; i++) {
    cls_op[i] = AR_COMMSCHED_NONE;
    if (g->ops[i].kind != AR_COMMSCHED_COMPUTE)
      continue;
    const uint64_t *b = bits + i * W;
    int empty = 1;
    for (size_t w = 0; w < W && empty; w++)
      empty = b[w] == 0;
    if (empty)
      continue;
    size_t h = hash_bits(b, W) & (hcap - 1);
    while (htab[h] != AR_COMMSCHED_NONE &&
           memcmp(bits + (size_t)cls_op[htab[h]] * W, b, W * 8) != 0)
      h = (h + 1) & (hcap - 1);
    if (htab[h] == AR_COMMSCHED_NONE) {
      htab[h] = (uint32_t)i; /* the op that founded the class */
      cls_op[i] = (uint32_t)i;
      g->ops[i].cls = (uint32_t)nclass++;
    } else {
      g->ops[i].cls = g->ops[htab[h]].cls;
    }
  }
  cbits = ar_malloc((nclass * W + 1) * sizeof *cbits);
  user_off = ar_calloc(g->nrecv + 1, sizeof *user_off);
  if (!cbits || !user_off)
    goto fail_nomem;
  for (size_t i = 0; i < n; i++)
    if (cls_op[i] == i)
      memcpy(cbits + (size_t)g->ops[i].cls * W, bits + i * W, W * 8);
  size_t nusers = 0;
  for (size_t c = 0; c < nclass; c++)
    for (size_t w = 0; w < W; w++)
      for (uint64_t m = cbits[c * W + w]; m; m &= m - 1) {
        user_off[w * 64 + (size_t)__builtin_ctzll(m) + 1]++;
        nusers++;
      }
  if (nusers >= UINT32_MAX) {
    st = ar_errf(err, AR_RANGE,
                 "commsched graph: %zu op-transfer dependencies exceed the "
                 "2^32 this library indexes",
                 nusers);
    goto fail;
  }
  users = ar_malloc((nusers + 1) * sizeof *users);
  if (!users)
    goto fail_nomem;
  for (size_t r = 0; r < g->nrecv; r++)
    user_off[r + 1] += user_off[r];
  for (size_t r = 0; r < g->nrecv; r++)
    queue[r] = user_off[r];
  for (size_t c = 0; c < nclass; c++)
    for (size_t w = 0; w < W; w++)
      for (uint64_t m = cbits[c * W + w]; m; m &= m - 1)
        users[queue[w * 64 + (size_t)__builtin_ctzll(m)]++] = (uint32_t)c;

  g->words = W;
  g->nclass = nclass;
  g->cls_bits = cbits;
  g->user_off = user_off;
  g->users = users;
  g->sealed = 1;
  st = AR_OK;
  goto done;

fail_nomem:
  st = ar_errf(err, AR_NOMEM, "commsched graph: out of memory sealing %zu ops",
               n);
fail:
  for (size_t i = 0; i < n; i++)
    g->ops[i].cls = AR_COMMSCHED_NONE;
  ar_free(users);
  ar_free(user_off);
  ar_free(cbits);
done:
  ar_free(cls_op);
  ar_free(htab);
  ar_free(bits);
  ar_free(queue);
  ar_free(succ);
  ar_free(succ_off);
  ar_free(pred);
  ar_free(pred_off);
  ar_free(indeg);
  return st;
}

int ar_commsched_graph_sealed(const ar_commsched_graph *g) { return g->sealed; }

ar_status ar_commsched_graph_set_time(ar_commsched_graph *g,
                                      ar_commsched_op op, double time_s,
                                      ar_err *err) {
  if (op >= g->nops)
    return ar_errf(err, AR_INVALID, "commsched graph: unknown op %u", op);
  if (!valid_time(time_s))
    return ar_errf(err, AR_INVALID,
                   "commsched graph: op '%s' given time %g s; times must be "
                   "finite and >= 0",
                   g->ops[op].name, time_s);
  g->ops[op].time_s = time_s;
  return AR_OK;
}

ar_status ar_commsched_graph_set_bytes(ar_commsched_graph *g,
                                       uint32_t transfer, size_t bytes,
                                       ar_err *err) {
  if (transfer >= g->nrecv)
    return ar_errf(err, AR_INVALID, "commsched graph: unknown transfer %u",
                   transfer);
  g->recvs[transfer].bytes = bytes;
  return AR_OK;
}

size_t ar_commsched_graph_op_count(const ar_commsched_graph *g) {
  return g->nops;
}
size_t ar_commsched_graph_transfer_count(const ar_commsched_graph *g) {
  return g->nrecv;
}
ar_commsched_op_kind ar_commsched_graph_kind(const ar_commsched_graph *g,
                                             ar_commsched_op op) {
  return op < g->nops ? g->ops[op].kind : AR_COMMSCHED_COMPUTE;
}
const char *ar_commsched_graph_name(const ar_commsched_graph *g,
                                    ar_commsched_op op) {
  return op < g->nops ? g->ops[op].name : NULL;
}
double ar_commsched_graph_time(const ar_commsched_graph *g,
                               ar_commsched_op op) {
  return op < g->nops ? g->ops[op].time_s : 0.0;
}
ar_commsched_op ar_commsched_graph_recv_op(const ar_commsched_graph *g,
                                           uint32_t transfer) {
  return transfer < g->nrecv ? g->recvs[transfer].op : AR_COMMSCHED_NONE;
}
uint32_t ar_commsched_graph_transfer(const ar_commsched_graph *g,
                                     ar_commsched_op op) {
  return op < g->nops ? g->ops[op].transfer : AR_COMMSCHED_NONE;
}
size_t ar_commsched_graph_bytes(const ar_commsched_graph *g,
                                uint32_t transfer) {
  return transfer < g->nrecv ? g->recvs[transfer].bytes : 0;
}
uint32_t ar_commsched_graph_channel(const ar_commsched_graph *g,
                                    uint32_t transfer) {
  return transfer < g->nrecv ? g->recvs[transfer].channel : AR_COMMSCHED_NONE;
}
