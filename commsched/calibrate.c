/* The simulator's calibration from a traced run: median compute times and
 * a robust fit of the per-message cost.  See commsched.h. */
#include "accelrt/commsched.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The fit keeps at most this many samples (a long trace is plenty). */
#define FIT_CAP (1 << 16)

struct ar_commsched_calib {
  size_t nops;
  double *dur;    /* (ndur) compute durations */
  uint32_t *opof; /* (ndur) their ops */
  size_t ndur, capdur;
  double *fx, *fy; /* (FIT_CAP) bytes and times of the fit's samples */
  long k;
  double sx, sy, sxx, sxy;
};

ar_status ar_commsched_calib_create(const ar_commsched_graph *g, ar_commsched_calib **out,
                                    ar_err *err) {
  *out = NULL;
  ar_commsched_calib *c = ar_calloc(1, sizeof *c);
  if (c) {
    c->nops = ar_commsched_graph_op_count(g);
    c->fx = ar_malloc(2 * FIT_CAP * sizeof *c->fx);
    c->fy = c->fx ? c->fx + FIT_CAP : NULL;
  }
  if (!c || !c->fx) {
    ar_commsched_calib_destroy(c);
    return ar_errf(err, AR_NOMEM, "out of memory for the calibration");
  }
  *out = c;
  return AR_OK;
}

void ar_commsched_calib_destroy(ar_commsched_calib *c) {
  if (!c)
    return;
  ar_free(c->dur);
  ar_free(c->opof);
  ar_free(c->fx);
  ar_free(c);
}

static ar_status push_duration(ar_commsched_calib *c, ar_commsched_op op, double d, ar_err *err) {
  if (c->ndur == c->capdur) {
    size_t cap = c->capdur ? 2 * c->capdur : 1024;
    double *d2 = ar_realloc(c->dur, cap * sizeof *d2);
    if (d2)
      c->dur = d2;
    uint32_t *o2 = d2 ? ar_realloc(c->opof, cap * sizeof *o2) : NULL;
    if (!o2)
      return ar_errf(err, AR_NOMEM, "out of memory for the calibration");
    c->opof = o2;
    c->capdur = cap;
  }
  c->dur[c->ndur] = d;
  c->opof[c->ndur++] = (uint32_t)op;
  return AR_OK;
}

/* Whether a compute op of the iteration overlaps (a, b). */
static bool busy(const ar_commsched_trace_event *ev, size_t n, double a, double b) {
  for (size_t j = 0; j < n; j++)
    if (ev[j].kind == AR_COMMSCHED_COMPUTE && ev[j].start < b && ev[j].end > a)
      return true;
  return false;
}

ar_status ar_commsched_calib_add(ar_commsched_calib *c, const ar_commsched_trace_event *ev,
                                 size_t n, ar_err *err) {
  for (size_t i = 0; i < n; i++) {
    const ar_commsched_trace_event *e = &ev[i];
    if (e->kind == AR_COMMSCHED_COMPUTE) {
      if (e->op == AR_COMMSCHED_NONE || !(e->end >= e->start))
        continue;
      if (e->op >= c->nops)
        return ar_errf(err, AR_INVALID, "calibration: op %u is not in the graph (%zu ops)",
                       (unsigned)e->op, c->nops);
      AR_CHECK(push_duration(c, e->op, e->end - e->start, err));
      continue;
    }
    double a = e->link, b = e->end;
    if (!isfinite(a) || !isfinite(b) || b < a || c->k >= FIT_CAP || busy(ev, n, a, b))
      continue;
    double x = e->bytes, y = b - a;
    c->fx[c->k] = x;
    c->fy[c->k] = y;
    c->sx += x;
    c->sy += y;
    c->sxx += x * x;
    c->sxy += x * y;
    c->k++;
  }
  return AR_OK;
}

static int cmp_dbl(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static double median(double *v, size_t m) {
  qsort(v, m, sizeof *v, cmp_dbl);
  return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

ar_status ar_commsched_calib_apply(ar_commsched_calib *c, ar_commsched_graph *g,
                                   ar_commsched_calib_result *out, ar_err *err) {
  memset(out, 0, sizeof *out);
  out->message_s = out->byte_s = NAN;
  out->mean_scale = 1.0;
  if (ar_commsched_graph_op_count(g) < c->nops)
    return ar_errf(err, AR_INVALID, "calibration: the graph has fewer ops than traced");
  double *v = ar_malloc((c->ndur + 1) * sizeof *v);
  if (!v)
    return ar_errf(err, AR_NOMEM, "out of memory for the calibration");
  ar_status st = AR_OK;
  double sum_mean = 0.0, sum_median = 0.0;
  for (size_t op = 0; op < c->nops && st == AR_OK; op++) {
    size_t m = 0;
    double sum = 0.0;
    for (size_t i = 0; i < c->ndur; i++)
      if (c->opof[i] == op) {
        v[m++] = c->dur[i];
        sum += c->dur[i];
      }
    if (m == 0)
      continue;
    double med = median(v, m);
    st = ar_commsched_graph_set_time(g, (ar_commsched_op)op, med, err);
    out->ops_set++;
    sum_mean += sum / (double)m;
    sum_median += med;
  }
  ar_free(v);
  if (sum_median > 0 && sum_mean > sum_median)
    out->mean_scale = sum_mean / sum_median;
  out->samples = c->k;
  if (st != AR_OK || c->k < 3)
    return st;
  double k = (double)c->k, den = k * c->sxx - c->sx * c->sx;
  double b = den > 0 ? (k * c->sxy - c->sx * c->sy) / den : 0.0;
  if (b < 0)
    b = 0;
  /* The intercept: the median residual (see commsched.h). */
  double *res = ar_malloc((size_t)c->k * sizeof *res);
  if (!res)
    return ar_errf(err, AR_NOMEM, "out of memory for the calibration");
  for (long i = 0; i < c->k; i++)
    res[i] = c->fy[i] - b * c->fx[i];
  double a = median(res, (size_t)c->k);
  ar_free(res);
  out->message_s = a < 0 ? 0 : a;
  out->byte_s = b;
  return AR_OK;
}
