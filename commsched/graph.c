/* The op graph: ops, edges, sealing (cycle check, dependency classes). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
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

/* Scratch of one seal. */
typedef struct seal_work {
  size_t n, W; /* ops; 64-bit words per transfer bitset */
  uint32_t *indeg, *pred_off, *pred, *succ_off, *succ, *queue;
  uint64_t *bits; /* (n, W): the recvs upstream of each op */
  size_t hcap;
  uint32_t *htab, *cls_op;
} seal_work;

static void seal_work_free(seal_work *w) {
  ar_free(w->cls_op);
  ar_free(w->htab);
  ar_free(w->bits);
  ar_free(w->queue);
  ar_free(w->succ);
  ar_free(w->succ_off);
  ar_free(w->pred);
  ar_free(w->pred_off);
  ar_free(w->indeg);
}

static bool seal_work_alloc(const ar_commsched_graph *g, seal_work *w) {
  size_t n = w->n = g->nops;
  w->W = (g->nrecv + 63) / 64;
  w->indeg = ar_calloc(n + 1, sizeof *w->indeg);
  w->pred_off = ar_calloc(n + 1, sizeof *w->pred_off);
  w->pred = ar_malloc((g->nedges + 1) * sizeof *w->pred);
  w->succ_off = ar_calloc(n + 1, sizeof *w->succ_off);
  w->succ = ar_malloc((g->nedges + 1) * sizeof *w->succ);
  w->queue = ar_malloc((n + 1) * sizeof *w->queue);
  w->bits = ar_calloc(n * w->W + 1, sizeof *w->bits);
  w->hcap = 16;
  while (w->hcap < 2 * n)
    w->hcap *= 2;
  w->htab = ar_malloc(w->hcap * sizeof *w->htab);
  w->cls_op = ar_malloc((n + 1) * sizeof *w->cls_op);
  return w->indeg && w->pred_off && w->pred && w->succ_off && w->succ && w->queue &&
         w->bits && w->htab && w->cls_op;
}

/* CSR of predecessors and successors. */
static void build_csr(const ar_commsched_graph *g, seal_work *w) {
  size_t n = w->n;
  for (size_t e = 0; e < g->nedges; e++) {
    w->pred_off[g->edges[2 * e + 1] + 1]++;
    w->succ_off[g->edges[2 * e] + 1]++;
  }
  for (size_t i = 0; i < n; i++) {
    w->pred_off[i + 1] += w->pred_off[i];
    w->succ_off[i + 1] += w->succ_off[i];
  }
  for (size_t i = 0; i < n; i++)
    w->indeg[i] = 0;
  for (size_t e = 0; e < g->nedges; e++) {
    uint32_t f = g->edges[2 * e], t = g->edges[2 * e + 1];
    w->pred[w->pred_off[t] + w->indeg[t]++] = f;
  }
  for (size_t i = 0; i < n; i++)
    w->queue[i] = 0; /* reuse as fill counters */
  for (size_t e = 0; e < g->nedges; e++) {
    uint32_t f = g->edges[2 * e], t = g->edges[2 * e + 1];
    w->succ[w->succ_off[f] + w->queue[f]++] = t;
  }
}

/* Kahn's algorithm; deps bitsets flow along the topological order.
 * Returns the number of ops ordered (fewer than n: a cycle). */
static size_t topo_deps(const ar_commsched_graph *g, seal_work *w) {
  size_t head = 0, tail = 0, W = w->W;
  for (size_t i = 0; i < w->n; i++)
    if (w->indeg[i] == 0)
      w->queue[tail++] = (uint32_t)i;
  while (head < tail) {
    uint32_t v = w->queue[head++];
    uint64_t *bv = w->bits + (size_t)v * W;
    if (g->ops[v].kind == AR_COMMSCHED_RECV)
      bv[g->ops[v].transfer / 64] |= 1ull << (g->ops[v].transfer % 64);
    for (uint32_t k = w->succ_off[v]; k < w->succ_off[v + 1]; k++) {
      uint32_t s = w->succ[k];
      uint64_t *bs = w->bits + (size_t)s * W;
      for (size_t x = 0; x < W; x++)
        bs[x] |= bv[x];
      if (--w->indeg[s] == 0)
        w->queue[tail++] = s;
    }
  }
  return tail;
}

/* Groups compute ops with equal, non-empty deps into classes (g->ops[].cls,
 * w->cls_op marks each class's founding op); returns the class count. */
static size_t group_classes(ar_commsched_graph *g, seal_work *w) {
  size_t W = w->W, nclass = 0;
  for (size_t h = 0; h < w->hcap; h++)
    w->htab[h] = AR_COMMSCHED_NONE;
  for (size_t i = 0; i < w->n; i++) {
    w->cls_op[i] = AR_COMMSCHED_NONE;
    if (g->ops[i].kind != AR_COMMSCHED_COMPUTE)
      continue;
    const uint64_t *b = w->bits + i * W;
    int empty = 1;
    for (size_t x = 0; x < W && empty; x++)
      empty = b[x] == 0;
    if (empty)
      continue;
    size_t h = hash_bits(b, W) & (w->hcap - 1);
    while (w->htab[h] != AR_COMMSCHED_NONE &&
           memcmp(w->bits + (size_t)w->cls_op[w->htab[h]] * W, b, W * 8) != 0)
      h = (h + 1) & (w->hcap - 1);
    if (w->htab[h] == AR_COMMSCHED_NONE) {
      w->htab[h] = (uint32_t)i; /* the op that founded the class */
      w->cls_op[i] = (uint32_t)i;
      g->ops[i].cls = (uint32_t)nclass++;
    } else {
      g->ops[i].cls = g->ops[w->htab[h]].cls;
    }
  }
  return nclass;
}

/* The classes' bitsets and, per transfer, the classes that use it (CSR:
 * user_off, users), stored in g.  AR_NOMEM, AR_RANGE. */
static ar_status index_users(ar_commsched_graph *g, seal_work *w, size_t nclass, ar_err *err) {
  size_t W = w->W;
  uint64_t *cbits = ar_malloc((nclass * W + 1) * sizeof *cbits);
  uint32_t *user_off = ar_calloc(g->nrecv + 1, sizeof *user_off), *users = NULL;
  ar_status st = AR_OK;
  if (!cbits || !user_off) {
    st = ar_errf(err, AR_NOMEM, "commsched graph: out of memory sealing %zu ops", w->n);
    goto fail;
  }
  for (size_t i = 0; i < w->n; i++)
    if (w->cls_op[i] == i)
      memcpy(cbits + (size_t)g->ops[i].cls * W, w->bits + i * W, W * 8);
  size_t nusers = 0;
  for (size_t c = 0; c < nclass; c++)
    for (size_t x = 0; x < W; x++)
      for (uint64_t m = cbits[c * W + x]; m; m &= m - 1) {
        user_off[x * 64 + (size_t)__builtin_ctzll(m) + 1]++;
        nusers++;
      }
  if (nusers >= UINT32_MAX) {
    st = ar_errf(err, AR_RANGE, "commsched graph: %zu op-transfer dependencies exceed the "
                 "2^32 this library indexes", nusers);
    goto fail;
  }
  users = ar_malloc((nusers + 1) * sizeof *users);
  if (!users) {
    st = ar_errf(err, AR_NOMEM, "commsched graph: out of memory sealing %zu ops", w->n);
    goto fail;
  }
  for (size_t r = 0; r < g->nrecv; r++)
    user_off[r + 1] += user_off[r];
  for (size_t r = 0; r < g->nrecv; r++)
    w->queue[r] = user_off[r];
  for (size_t c = 0; c < nclass; c++)
    for (size_t x = 0; x < W; x++)
      for (uint64_t m = cbits[c * W + x]; m; m &= m - 1)
        users[w->queue[x * 64 + (size_t)__builtin_ctzll(m)]++] = (uint32_t)c;
  g->words = W;
  g->nclass = nclass;
  g->cls_bits = cbits;
  g->user_off = user_off;
  g->users = users;
  return AR_OK;
fail:
  ar_free(users);
  ar_free(user_off);
  ar_free(cbits);
  return st;
}

ar_status ar_commsched_graph_seal(ar_commsched_graph *g, ar_err *err) {
  if (g->sealed)
    return ar_errf(err, AR_STATE, "commsched graph: already sealed");
  seal_work w;
  memset(&w, 0, sizeof w);
  ar_status st = AR_OK;
  if (!seal_work_alloc(g, &w))
    st = ar_errf(err, AR_NOMEM, "commsched graph: out of memory sealing %zu ops", g->nops);
  if (st == AR_OK) {
    build_csr(g, &w);
    if (topo_deps(g, &w) < w.n)
      st = report_cycle(g, w.indeg, w.pred_off, w.pred, w.queue, err);
  }
  if (st == AR_OK)
    st = index_users(g, &w, group_classes(g, &w), err);
  if (st == AR_OK)
    g->sealed = 1;
  else
    for (size_t i = 0; i < g->nops; i++)
      g->ops[i].cls = AR_COMMSCHED_NONE;
  seal_work_free(&w);
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

ar_commsched_op ar_commsched_graph_first_use(const ar_commsched_graph *g,
                                            uint32_t transfer) {
  ar_commsched_op first = AR_COMMSCHED_NONE;
  if (transfer >= g->nrecv)
    return first;
  ar_commsched_op r = g->recvs[transfer].op;
  for (size_t e = 0; e < g->nedges; e++)
    if (g->edges[2 * e] == r && g->edges[2 * e + 1] < first)
      first = g->edges[2 * e + 1];
  return first;
}

size_t ar_commsched_graph_edge_count(const ar_commsched_graph *g) { return g->nedges; }

void ar_commsched_graph_edge(const ar_commsched_graph *g, size_t i,
                             ar_commsched_op *from, ar_commsched_op *to) {
  *from = g->edges[2 * i];
  *to = g->edges[2 * i + 1];
}
