/* The workers' op graph for commsched and the schedule the servers
 * enforce: TicTac's pipeline (Hashemi et al., MLSys 2019, §3-§4) of
 * tracing the first iterations, a time oracle (minimum over the traced
 * runs), then the TIC or TAC wizard.  Every rank builds the same graph;
 * rank 0 owns the oracle and broadcasts the op times, and every rank runs
 * the (deterministic) wizard itself, so no schedule has to be shipped. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static bool file_exists(const char *p) {
  struct stat sb;
  return p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Graph node names must be free of whitespace and '#' (schedule files). */
static void clean_name(char *s) {
  for (; *s; s++)
    if (*s == ' ' || *s == '\t' || *s == '#' || *s == '\n' || *s == '\r')
      *s = '_';
}

void ar__dist_shard(const size_t *size, int n, int servers, uint32_t *chan, int *ord,
                    size_t *load) {
  for (int i = 0; i < n; i++)
    ord[i] = i;
  for (int i = 1; i < n; i++) /* insertion sort: bytes desc, id asc */
    for (int j = i; j > 0 && size[ord[j]] > size[ord[j - 1]]; j--) {
      int x = ord[j];
      ord[j] = ord[j - 1];
      ord[j - 1] = x;
    }
  for (int i = 0; i < n; i++) {
    int best = 0;
    for (int k = 1; k < servers; k++)
      if (load[k] < load[best])
        best = k;
    chan[ord[i]] = (uint32_t)best;
    load[best] += size[ord[i]];
  }
}

/* Each layer's w and b bytes (bytes[2l], bytes[2l+1]) and server
 * (chan[2l] = chan[2l+1]): whole layers go to one server, so that the
 * server that updates a sampled layer's rows holds both and its per-row
 * Adam state (runtime/dist/rows.c); each goes to the server with the
 * fewest bytes so far, largest layers first.  ord, load and the layers'
 * sizes and servers (size, lchan) are scratch of n, `servers`, n and n
 * entries. */
static void shard_layers(const ar_spec *spec, int servers, size_t *bytes, uint32_t *chan,
                         int *ord, size_t *load, size_t *size, uint32_t *lchan) {
  int n = spec->n_layers;
  for (int l = 0; l < n; l++) {
    int64_t in = l == 0 ? spec->input.features : spec->layers[l - 1].width;
    bytes[2 * l] = (size_t)(in * spec->layers[l].width) * sizeof(float);
    bytes[2 * l + 1] = (size_t)spec->layers[l].width * sizeof(float);
    size[l] = bytes[2 * l] + bytes[2 * l + 1];
  }
  ar__dist_shard(size, n, servers, lchan, ord, load);
  for (int l = 0; l < n; l++)
    chan[2 * l] = chan[2 * l + 1] = lchan[l];
}

/* The ops and edges of the graph (see ar_dist_op_graph) into g. */
static ar_status add_ops(const ar_spec *spec, const size_t *bytes, const uint32_t *chan,
                         ar_commsched_graph *g, ar_err *err) {
  int n = spec->n_layers;
  char name[96];
  ar_commsched_op op, prev = AR_COMMSCHED_NONE;
  for (int t = 0; t < 2 * n; t++) {
    snprintf(name, sizeof name, "%s.%s", spec->layers[t / 2].name, t % 2 ? "b" : "w");
    clean_name(name);
    /* A first guess (10 Gbit/s) until the oracle has measured it. */
    AR_CHECK(ar_commsched_graph_add_recv(g, name, bytes[t], chan[t], (double)bytes[t] / 1.25e9,
                                         &op, err));
  }
  for (int l = 0; l < n; l++) {
    snprintf(name, sizeof name, "fwd.%s", spec->layers[l].name);
    clean_name(name);
    AR_CHECK(ar_commsched_graph_add_compute(g, name, 1e-3, &op, err));
    AR_ASSERT(op == ar_dist_op_fwd(n, l));
    AR_CHECK(ar_commsched_graph_add_edge(g, ar_dist_op_recv_w(l), op, err));
    AR_CHECK(ar_commsched_graph_add_edge(g, ar_dist_op_recv_b(l), op, err));
    if (prev != AR_COMMSCHED_NONE)
      AR_CHECK(ar_commsched_graph_add_edge(g, prev, op, err));
    prev = op;
  }
  AR_CHECK(ar_commsched_graph_add_compute(g, "loss", 1e-4, &op, err));
  AR_ASSERT(op == ar_dist_op_loss(n));
  AR_CHECK(ar_commsched_graph_add_edge(g, prev, op, err));
  prev = op;
  for (int l = n - 1; l >= 0; l--) {
    snprintf(name, sizeof name, "bwd.%s", spec->layers[l].name);
    clean_name(name);
    AR_CHECK(ar_commsched_graph_add_compute(g, name, 2e-3, &op, err));
    AR_ASSERT(op == ar_dist_op_bwd(n, l));
    AR_CHECK(ar_commsched_graph_add_edge(g, prev, op, err));
    AR_CHECK(ar_commsched_graph_add_edge(g, ar_dist_op_recv_w(l), op, err));
    AR_CHECK(ar_commsched_graph_add_edge(g, ar_dist_op_recv_b(l), op, err));
    prev = op;
  }
  return ar_commsched_graph_seal(g, err);
}

/* The graph of TicTac §3.1 for a chain of dense layers, built from the
 * job's shapes alone (so `accelrt simulate` builds the very graph the
 * runtime schedules):
 *   recv w_l, recv b_l -> fwd_l;  fwd_{l-1} -> fwd_l;  fwd_{n-1} -> loss;
 *   loss -> bwd_{n-1};  bwd_{l+1} -> bwd_l;  recv w_l, recv b_l -> bwd_l.
 * The recv -> bwd edges say that a parameter's gradient is ready when the
 * backward op of its layer has run (the simulator reads them that way).
 * Op ids: see ar_dist_op_recv_w and the others in dist.h.  Channels: each
 * layer (its w and b) goes to the server with the fewest bytes so far,
 * largest layers first (ties: lower layer, lower server), the classic
 * greedy balance. */
ar_status ar_dist_op_graph(const ar_spec *spec, int servers, ar_commsched_graph **out,
                           ar_err *err) {
  int n = spec->n_layers, nt = 2 * n;
  if (servers < 1 || n < 1)
    return ar_errf(err, AR_INVALID, "op graph: %d servers, %d layers", servers, n);
  size_t *bytes = ar_calloc((size_t)nt, sizeof *bytes), *load = ar_calloc((size_t)servers,
                                                                         sizeof *load);
  uint32_t *chan = ar_calloc((size_t)nt, sizeof *chan);
  int *ord = ar_calloc((size_t)nt, sizeof *ord);
  size_t *size = ar_calloc((size_t)n, sizeof *size);
  uint32_t *lchan = ar_calloc((size_t)n, sizeof *lchan);
  ar_commsched_graph *g = NULL;
  ar_status st = AR_OK;
  if (!bytes || !load || !chan || !ord || !size || !lchan) {
    st = ar_errf(err, AR_NOMEM, "out of memory for the op graph");
  } else {
    shard_layers(spec, servers, bytes, chan, ord, load, size, lchan);
    st = ar_commsched_graph_create(&g, err);
    if (st == AR_OK)
      st = add_ops(spec, bytes, chan, g, err);
    if (st == AR_OK) {
      *out = g;
      g = NULL;
    } else {
      ar_err_wrap(err, "building the op graph");
    }
  }
  ar_commsched_graph_destroy(g);
  ar_free(bytes);
  ar_free(load);
  ar_free(chan);
  ar_free(ord);
  ar_free(size);
  ar_free(lchan);
  return st;
}

ar_status ar__dist_graph_build(ar__dist *c) {
  int n = c->spec->n_layers;
  AR_CHECK(ar_dist_op_graph(c->spec, c->S, &c->g, c->err));
  c->fwd = ar_calloc((size_t)n, sizeof *c->fwd);
  c->bwd = ar_calloc((size_t)n, sizeof *c->bwd);
  if (!c->fwd || !c->bwd)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the op graph");
  for (int l = 0; l < n; l++) {
    c->fwd[l] = ar_dist_op_fwd(n, l);
    c->bwd[l] = ar_dist_op_bwd(n, l);
  }
  c->loss_op = ar_dist_op_loss(n);
  for (int t = 0; t < c->nt; t++) {
    c->t[t].server = (int)ar_commsched_graph_channel(c->g, (uint32_t)t);
    AR_ASSERT(ar_commsched_graph_bytes(c->g, (uint32_t)t) == c->t[t].bytes);
  }
  c->nops = ar_commsched_graph_op_count(c->g);
  return AR_OK;
}

static ar_commsched_order to_cs_order(ar_order_kind k) {
  switch (k) {
  case AR_ORDER_RANDOM:
    return AR_COMMSCHED_ORDER_RANDOM;
  case AR_ORDER_TIC:
    return AR_COMMSCHED_ORDER_TIC;
  case AR_ORDER_TAC:
    return AR_COMMSCHED_ORDER_TAC;
  default:
    return AR_COMMSCHED_ORDER_NONE;
  }
}

ar_status ar__dist_schedule_for(ar__dist *c, int64_t iter, ar_commsched_schedule **out,
                                bool *owned) {
  *owned = false;
  *out = c->sched;
  if (c->sched || c->order != AR_COMMSCHED_ORDER_RANDOM)
    return AR_OK;
  /* TicTac §2: stock TensorFlow's order was a different permutation every
   * iteration; random reproduces that with a seeded shuffle. */
  ar_commsched_schedule_opts so = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
  so.order = AR_COMMSCHED_ORDER_RANDOM;
  so.seed = c->spec->seed;
  so.iteration = (uint64_t)iter;
  AR_CHECK(ar_commsched_schedule_create(c->g, &so, out, c->err));
  *owned = true;
  return AR_OK;
}

/* Writes the op times the wizard used, one "name<TAB>kind<TAB>seconds"
 * line per op, for `accelrt simulate --oracle`. */
static void write_oracle(ar__dist *c) {
  FILE *f = fopen(c->oracle_path, "w");
  if (!f) {
    ar_log(AR_LOG_WARN, "cannot write '%s': %s", c->oracle_path, strerror(errno));
    return;
  }
  fprintf(f, "# accelrt time oracle: minimum over %lld traced iterations of %d workers\n",
          (long long)c->warmup, c->W);
  fprintf(f, "# op\tkind\tseconds\n");
  for (size_t i = 0; i < c->nops; i++)
    fprintf(f, "%s\t%s\t%.9g\n", ar_commsched_graph_name(c->g, (ar_commsched_op)i),
            ar_commsched_graph_kind(c->g, (ar_commsched_op)i) == AR_COMMSCHED_RECV ? "recv"
                                                                                  : "compute",
            ar_commsched_graph_time(c->g, (ar_commsched_op)i));
  if (fclose(f) != 0)
    ar_log(AR_LOG_WARN, "writing '%s' failed", c->oracle_path);
}

/* The rows tensors' bytes in the graph: the means rank 0 measured during
 * warm-up (rows vary with the batch; the dense size overstates them). */
static ar_status set_rows_bytes(ar__dist *c) {
  if (c->rows_dense_bytes == 0)
    return AR_OK;
  uint64_t *bytes = ar_malloc((size_t)c->nt * sizeof *bytes);
  if (!bytes)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the transfer sizes");
  for (int t = 0; t < c->nt; t++)
    bytes[t] = c->rank == 0 ? (uint64_t)ar__dist_rows_mean_bytes(c, t) : 0;
  ar_status st = ar__dist_bcast(c, bytes, c->nt, MPI_UINT64_T, "the measured transfer sizes");
  for (int t = 0; t < c->nt && st == AR_OK; t++)
    if (c->t[t].rows)
      st = ar_commsched_graph_set_bytes(c->g, (uint32_t)t, (size_t)bytes[t], c->err);
  ar_free(bytes);
  return st;
}

ar_status ar__dist_schedule_setup(ar__dist *c) {
  AR_CHECK(set_rows_bytes(c));
  if (c->from_file || (c->order != AR_COMMSCHED_ORDER_TIC && c->order != AR_COMMSCHED_ORDER_TAC))
    return AR_OK;
  double *times = ar_malloc(c->nops * sizeof *times);
  if (!times)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the op times");
  ar_status st = AR_OK;
  if (c->rank == 0) {
    st = ar_commsched_oracle_apply(c->oracle, c->g, c->err);
    for (size_t i = 0; i < c->nops; i++)
      times[i] = ar_commsched_graph_time(c->g, (ar_commsched_op)i);
  }
  if (st == AR_OK)
    st = ar__dist_bcast(c, times, (int)c->nops, MPI_DOUBLE, "the time oracle");
  for (size_t i = 0; i < c->nops && st == AR_OK; i++)
    st = ar_commsched_graph_set_time(c->g, (ar_commsched_op)i, times[i], c->err);
  ar_free(times);
  if (st != AR_OK)
    return st;
  ar_commsched_schedule_opts so = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
  so.order = c->order;
  so.seed = c->spec->seed;
  AR_CHECK(ar_commsched_schedule_create(c->g, &so, &c->sched, c->err));
  c->schedule_ms = 1e3 * ar_commsched_schedule_compute_s(c->sched);
  if (c->rank == 0) {
    write_oracle(c);
    const char *path = c->spec->distributed.schedule_file;
    if (path)
      AR_CHECK(ar_commsched_schedule_write(c->sched, path, c->err));
  }
  if (c->o.on_schedule)
    c->o.on_schedule(c->o.ctx, c->sched);
  return AR_OK;
}

ar_status ar__dist_schedule_from_file(ar__dist *c) {
  const char *path = c->spec->distributed.schedule_file;
  if (!path)
    return AR_OK;
  /* head = {status, order}; then one priority per transfer. */
  size_t n = (size_t)c->nt;
  int32_t head[2] = {0, 0};
  uint32_t *prio = ar_malloc((n + 1) * sizeof *prio);
  if (!prio)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the schedule");
  ar_status st = AR_OK;
  if (c->rank == 0) {
    head[0] = file_exists(path) ? 1 : 0;
    ar_commsched_schedule *s = NULL;
    if (head[0]) {
      st = ar_commsched_schedule_read(path, &s, c->err);
      if (st == AR_OK)
        st = ar_commsched_schedule_check(s, c->g, c->err);
      if (st != AR_OK) {
        ar_err_wrap(c->err, "distributed.schedule '%s' does not fit this job (delete it to "
                    "recompute it)", path);
        head[0] = -1;
      }
    }
    if (s) {
      head[1] = (int32_t)ar_commsched_schedule_order(s);
      for (size_t t = 0; t < n; t++) {
        const ar_commsched_entry *e = ar_commsched_schedule_find(s, (uint32_t)t);
        prio[t] = e ? e->priority : UINT32_MAX;
      }
    }
    ar_commsched_schedule_destroy(s);
  }
  ar_status bst = ar__dist_bcast(c, head, 2, MPI_INT32_T, "the schedule file's status");
  if (bst == AR_OK && head[0] == 1)
    bst = ar__dist_bcast(c, prio, (int)n, MPI_UINT32_T, "the schedule");
  if (st == AR_OK && bst != AR_OK)
    st = bst;
  if (st == AR_OK && head[0] < 0)
    st = ar_errf(c->err, AR_SPEC, "rank 0 could not use distributed.schedule '%s'", path);
  if (st == AR_OK && head[0] == 1) {
    st = ar_commsched_schedule_from_priorities(c->g, (ar_commsched_order)head[1], prio,
                                               &c->sched, c->err);
    if (st == AR_OK) {
      c->from_file = true;
      c->order = (ar_commsched_order)head[1];
      if (c->o.on_schedule)
        c->o.on_schedule(c->o.ctx, c->sched);
    }
  }
  ar_free(prio);
  return st;
}

ar_commsched_order ar__dist_order_of(ar_order_kind k) { return to_cs_order(k); }
