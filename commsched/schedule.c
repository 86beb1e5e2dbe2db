/* Schedules: the orders none, random, tic and tac, and their storage. */
#include <stdlib.h>
#include <string.h>

#include "commsched_impl.h"

static const char *order_names[] = {"none", "random", "tic", "tac"};

const char *ar_commsched_order_name(ar_commsched_order order) {
  return (unsigned)order < 4 ? order_names[order] : "?";
}

ar_status ar_commsched_order_parse(const char *name, ar_commsched_order *out,
                                   ar_err *err) {
  for (unsigned i = 0; i < 4; i++)
    if (name && strcmp(name, order_names[i]) == 0) {
      *out = (ar_commsched_order)i;
      return AR_OK;
    }
  return ar_errf(err, AR_INVALID,
                 "commsched: unknown order '%s'; use none, random, tic or tac",
                 name ? name : "(null)");
}

void ar_commsched_schedule_destroy(ar_commsched_schedule *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->n; i++)
    ar_free(s->names[i]);
  ar_free(s->names);
  ar_free(s->e);
  ar_free(s->by_id);
  ar_free(s);
}

static int cmp_entry(const void *a, const void *b) {
  const ar_commsched_entry *x = a, *y = b;
  if (x->priority != y->priority)
    return x->priority < y->priority ? -1 : 1;
  return x->transfer < y->transfer ? -1 : x->transfer > y->transfer;
}

ar_status ar__cs_schedule_build(ar_commsched_order order, size_t n,
                                const uint32_t *transfer,
                                const char *const *names,
                                const uint32_t *channel,
                                const uint32_t *priority,
                                ar_commsched_schedule **out, ar_err *err) {
  ar_commsched_schedule *s = ar_calloc(1, sizeof *s);
  if (!s)
    return ar_errf(err, AR_NOMEM, "commsched schedule: out of memory");
  s->order = order;
  s->e = ar_calloc(n + 1, sizeof *s->e);
  s->names = ar_calloc(n + 1, sizeof *s->names);
  if (!s->e || !s->names)
    goto nomem;
  uint32_t maxt = 0;
  for (size_t i = 0; i < n; i++) {
    s->names[i] = ar_strdup(names[i]);
    if (!s->names[i])
      goto nomem;
    s->n = i + 1; /* destroy frees the names copied so far */
    s->e[i].transfer = transfer[i];
    s->e[i].channel = channel[i];
    s->e[i].priority = priority[i];
    s->e[i].name = s->names[i];
    if (transfer[i] >= maxt)
      maxt = transfer[i] + 1;
  }
  s->n = n;
  /* Sort entries and keep the names array parallel to them. */
  qsort(s->e, n, sizeof *s->e, cmp_entry);
  for (size_t i = 0; i < n; i++)
    s->names[i] = (char *)s->e[i].name;
  s->max_transfer = maxt;
  s->by_id = ar_malloc(((size_t)maxt + 1) * sizeof *s->by_id);
  if (!s->by_id)
    goto nomem;
  for (uint32_t t = 0; t < maxt; t++)
    s->by_id[t] = AR_COMMSCHED_NONE;
  for (size_t i = 0; i < n; i++) {
    uint32_t t = s->e[i].transfer;
    if (s->by_id[t] != AR_COMMSCHED_NONE) {
      ar_status st = ar_errf(err, AR_INVALID,
                             "commsched schedule: transfer %u ('%s') listed "
                             "twice",
                             t, s->e[i].name);
      ar_commsched_schedule_destroy(s);
      return st;
    }
    s->by_id[t] = (uint32_t)i;
  }
  ar_status st = ar__cs_normalize(s->e, n, err);
  if (st != AR_OK) {
    ar_commsched_schedule_destroy(s);
    return st;
  }
  *out = s;
  return AR_OK;
nomem:
  ar_commsched_schedule_destroy(s);
  return ar_errf(err, AR_NOMEM, "commsched schedule: out of memory for %zu "
                                "transfers",
                 n);
}

/* random: Fisher-Yates over the transfer ids, from a stream keyed by the
 * job's seed and the iteration, so each iteration has its own order (as
 * TicTac measured stock TensorFlow doing) and reruns repeat it. */
static void random_prio(size_t n, uint64_t seed, uint64_t iteration,
                        uint32_t *prio, uint32_t *perm) {
  ar_rng r;
  ar_rng_seed3(&r, seed, iteration, 0x5eedc0115c4edull);
  for (size_t i = 0; i < n; i++)
    perm[i] = (uint32_t)i;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)ar_rng_below(&r, i);
    uint32_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
  for (size_t i = 0; i < n; i++)
    prio[perm[i]] = (uint32_t)i;
}

ar_status ar_commsched_schedule_create(const ar_commsched_graph *g,
                                       const ar_commsched_schedule_opts *opts,
                                       ar_commsched_schedule **out,
                                       ar_err *err) {
  ar_commsched_schedule_opts o = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
  if (opts)
    o = *opts;
  if ((unsigned)o.order > AR_COMMSCHED_ORDER_TAC)
    return ar_errf(err, AR_INVALID, "commsched schedule: unknown order %d",
                   (int)o.order);
  if (!g->sealed)
    return ar_errf(err, AR_STATE,
                   "commsched schedule: seal the graph first "
                   "(ar_commsched_graph_seal)");
  double t0 = ar_now();
  size_t n = o.order == AR_COMMSCHED_ORDER_NONE ? 0 : g->nrecv;
  uint32_t *prio = ar_malloc((n + 1) * sizeof *prio);
  uint32_t *ids = ar_malloc((n + 1) * sizeof *ids);
  uint32_t *chan = ar_malloc((n + 1) * sizeof *chan);
  const char **names = ar_malloc((n + 1) * sizeof *names);
  ar_status st = AR_OK;
  if (!prio || !ids || !chan || !names) {
    st = ar_errf(err, AR_NOMEM, "commsched schedule: out of memory");
    goto done;
  }
  if (o.order == AR_COMMSCHED_ORDER_RANDOM)
    random_prio(n, o.seed, o.iteration, prio, ids);
  else if (o.order == AR_COMMSCHED_ORDER_TIC)
    st = ar__cs_tic(g, prio, err);
  else if (o.order == AR_COMMSCHED_ORDER_TAC)
    st = ar__cs_tac(g, prio, err);
  if (st != AR_OK)
    goto done;
  for (size_t t = 0; t < n; t++) {
    ids[t] = (uint32_t)t;
    chan[t] = g->recvs[t].channel;
    names[t] = g->ops[g->recvs[t].op].name;
  }
  ar_commsched_schedule *s = NULL;
  st = ar__cs_schedule_build(o.order, n, ids, names, chan, prio, &s, err);
  if (st == AR_OK) {
    s->compute_s = ar_now() - t0;
    *out = s;
  }
done:
  ar_free(names);
  ar_free(chan);
  ar_free(ids);
  ar_free(prio);
  return st;
}

ar_commsched_order ar_commsched_schedule_order(const ar_commsched_schedule *s) {
  return s->order;
}
double ar_commsched_schedule_compute_s(const ar_commsched_schedule *s) {
  return s->compute_s;
}
size_t ar_commsched_schedule_count(const ar_commsched_schedule *s) {
  return s->n;
}
const ar_commsched_entry *ar_commsched_schedule_entry(
    const ar_commsched_schedule *s, size_t i) {
  return i < s->n ? &s->e[i] : NULL;
}
const ar_commsched_entry *ar_commsched_schedule_find(
    const ar_commsched_schedule *s, uint32_t transfer) {
  if (transfer >= s->max_transfer || s->by_id[transfer] == AR_COMMSCHED_NONE)
    return NULL;
  return &s->e[s->by_id[transfer]];
}

ar_status ar_commsched_schedule_check(const ar_commsched_schedule *s,
                                      const ar_commsched_graph *g,
                                      ar_err *err) {
  for (size_t i = 0; i < s->n; i++) {
    const ar_commsched_entry *e = &s->e[i];
    if (e->transfer >= g->nrecv)
      return ar_errf(err, AR_INVALID,
                     "commsched schedule: transfer %u ('%s') does not exist; "
                     "the graph has %zu transfers (was the schedule made for "
                     "another model?)",
                     e->transfer, e->name, g->nrecv);
    const char *gn = g->ops[g->recvs[e->transfer].op].name;
    if (strcmp(gn, e->name) != 0 || g->recvs[e->transfer].channel != e->channel)
      return ar_errf(err, AR_INVALID,
                     "commsched schedule: transfer %u is '%s' on channel %u "
                     "in the schedule but '%s' on channel %u in the graph; "
                     "recompute the schedule",
                     e->transfer, e->name, e->channel, gn,
                     g->recvs[e->transfer].channel);
  }
  return AR_OK;
}

ar_status ar_commsched_schedule_from_priorities(const ar_commsched_graph *g,
                                                ar_commsched_order order,
                                                const uint32_t *priority,
                                                ar_commsched_schedule **out,
                                                ar_err *err) {
  if ((unsigned)order > AR_COMMSCHED_ORDER_TAC)
    return ar_errf(err, AR_INVALID, "commsched schedule: unknown order %d",
                   (int)order);
  if (!g->sealed)
    return ar_errf(err, AR_STATE,
                   "commsched schedule: seal the graph first "
                   "(ar_commsched_graph_seal)");
  size_t n = g->nrecv;
  uint32_t *buf = ar_malloc((3 * n + 1) * sizeof *buf);
  const char **names = ar_malloc((n + 1) * sizeof *names);
  ar_status st = AR_OK;
  if (!buf || !names) {
    st = ar_errf(err, AR_NOMEM, "commsched schedule: out of memory");
    goto done;
  }
  uint32_t *ids = buf, *chan = buf + n, *prio = buf + 2 * n;
  size_t k = 0;
  for (size_t t = 0; t < n; t++) {
    if (priority[t] == UINT32_MAX)
      continue;
    ids[k] = (uint32_t)t;
    chan[k] = g->recvs[t].channel;
    prio[k] = priority[t];
    names[k] = g->ops[g->recvs[t].op].name;
    k++;
  }
  ar_commsched_schedule *s = NULL;
  st = ar__cs_schedule_build(order, k, ids, names, chan, prio, &s, err);
  if (st == AR_OK)
    *out = s;
done:
  ar_free(names);
  ar_free(buf);
  return st;
}
