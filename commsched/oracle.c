/*
 * The time oracle (TicTac, time oracle): each op's time is the minimum over
 * the traced iterations, the minimum being the run least disturbed by
 * everything else on the machine.  A transfer's measured span includes the
 * time it spent queued behind earlier transfers of its channel, which is a
 * property of the order, not of the transfer; so a transfer is charged
 * only from when it could start, max(its start, the latest end of the
 * channel's transfers that started before it), to its end.
 */
#include <math.h>
#include <stdlib.h>

#include "commsched_impl.h"

struct ar_commsched_oracle {
  size_t nops;
  double *best;      /* (nops) minimum so far, NaN when never traced */
  size_t *samples;   /* (nops) */
};

ar_status ar_commsched_oracle_create(const ar_commsched_graph *g,
                                     ar_commsched_oracle **out, ar_err *err) {
  if (!g->sealed)
    return ar_errf(err, AR_STATE,
                   "commsched oracle: seal the graph first");
  ar_commsched_oracle *o = ar_calloc(1, sizeof *o);
  if (!o)
    return ar_errf(err, AR_NOMEM, "commsched oracle: out of memory");
  o->nops = g->nops;
  o->best = ar_malloc((g->nops + 1) * sizeof *o->best);
  o->samples = ar_calloc(g->nops + 1, sizeof *o->samples);
  if (!o->best || !o->samples) {
    ar_commsched_oracle_destroy(o);
    return ar_errf(err, AR_NOMEM, "commsched oracle: out of memory");
  }
  for (size_t i = 0; i < g->nops; i++)
    o->best[i] = NAN;
  *out = o;
  return AR_OK;
}

void ar_commsched_oracle_destroy(ar_commsched_oracle *o) {
  if (!o)
    return;
  ar_free(o->best);
  ar_free(o->samples);
  ar_free(o);
}

typedef struct {
  uint32_t channel;
  double start;
  uint32_t op;
} q_key;

static int cmp_q(const void *a, const void *b) {
  const q_key *x = a, *y = b;
  if (x->channel != y->channel)
    return x->channel < y->channel ? -1 : 1;
  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  return x->op < y->op ? -1 : x->op > y->op;
}

ar_status ar_commsched_oracle_add_run(ar_commsched_oracle *o,
                                      const ar_commsched_graph *g,
                                      const double *start, const double *end,
                                      ar_err *err) {
  if (g->nops != o->nops)
    return ar_errf(err, AR_INVALID,
                   "commsched oracle: the graph has %zu ops, the oracle was "
                   "made for %zu",
                   g->nops, o->nops);
  for (size_t i = 0; i < g->nops; i++) {
    if (isnan(start[i]) || isnan(end[i]))
      continue;
    if (isinf(start[i]) || isinf(end[i]) || end[i] < start[i])
      return ar_errf(err, AR_INVALID,
                     "commsched oracle: op '%s' traced from %g to %g s; a "
                     "span must be finite with end >= start",
                     g->ops[i].name, start[i], end[i]);
  }
  q_key *q = ar_malloc((g->nrecv + 1) * sizeof *q);
  if (!q)
    return ar_errf(err, AR_NOMEM, "commsched oracle: out of memory");
  size_t nq = 0;
  for (size_t i = 0; i < g->nops; i++) {
    if (isnan(start[i]) || isnan(end[i]))
      continue;
    if (g->ops[i].kind == AR_COMMSCHED_RECV) {
      q[nq].channel = g->recvs[g->ops[i].transfer].channel;
      q[nq].start = start[i];
      q[nq].op = (uint32_t)i;
      nq++;
      continue;
    }
    double t = end[i] - start[i];
    if (o->samples[i]++ == 0 || t < o->best[i])
      o->best[i] = t;
  }
  qsort(q, nq, sizeof *q, cmp_q);
  double chan_end = 0.0;
  for (size_t k = 0; k < nq; k++) {
    uint32_t i = q[k].op;
    double from = start[i];
    if (k > 0 && q[k - 1].channel == q[k].channel && chan_end > from)
      from = chan_end;
    if (k == 0 || q[k - 1].channel != q[k].channel || end[i] > chan_end)
      chan_end = end[i];
    double t = end[i] > from ? end[i] - from : 0.0;
    if (o->samples[i]++ == 0 || t < o->best[i])
      o->best[i] = t;
  }
  ar_free(q);
  return AR_OK;
}

size_t ar_commsched_oracle_samples(const ar_commsched_oracle *o,
                                   ar_commsched_op op) {
  return op < o->nops ? o->samples[op] : 0;
}

double ar_commsched_oracle_time(const ar_commsched_oracle *o,
                                ar_commsched_op op) {
  return op < o->nops ? o->best[op] : NAN;
}

ar_status ar_commsched_oracle_apply(const ar_commsched_oracle *o,
                                    ar_commsched_graph *g, ar_err *err) {
  if (g->nops != o->nops)
    return ar_errf(err, AR_INVALID,
                   "commsched oracle: the graph has %zu ops, the oracle was "
                   "made for %zu",
                   g->nops, o->nops);
  for (size_t i = 0; i < o->nops; i++)
    if (o->samples[i])
      g->ops[i].time_s = o->best[i];
  return AR_OK;
}
