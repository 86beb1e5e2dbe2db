/*
 * Per-iteration scheduling metrics (TicTac, scheduling efficiency).  With
 * N the communication busy time and C the computation busy time, no order
 * finishes before U_min = max(N, C) (full overlap) and a sequential one
 * takes U_max = N + C; E = (U_max - makespan) / (U_max - U_min) says where
 * the iteration lies between the two.  Departure, stated: busy times are
 * lengths of unions of spans, so concurrent transfers on two channels are
 * busy time once; E is clamped to [0, 1] (idle gaps can push the makespan
 * beyond U_max) and undefined when U_max - U_min is negligible, i.e. when
 * one side is idle and no order can matter.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commsched_impl.h"

static int cmp_span(const void *a, const void *b) {
  const ar_commsched_span *x = a, *y = b;
  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

/* Sorts s in place and returns the length of the union. */
static double union_len(ar_commsched_span *s, size_t n) {
  if (n == 0)
    return 0.0;
  qsort(s, n, sizeof *s, cmp_span);
  double total = 0.0, a = s[0].start, b = s[0].end;
  for (size_t i = 1; i < n; i++) {
    if (s[i].start > b) {
      total += b - a;
      a = s[i].start;
      b = s[i].end;
    } else if (s[i].end > b) {
      b = s[i].end;
    }
  }
  return total + (b - a);
}

static ar_status check_spans(const ar_commsched_span *s, size_t n,
                             const char *what, ar_err *err) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(s[i].start) || !isfinite(s[i].end) || s[i].end < s[i].start)
      return ar_errf(err, AR_INVALID,
                     "commsched metrics: %s span %zu is [%g, %g]; spans must "
                     "be finite with end >= start",
                     what, i, s[i].start, s[i].end);
  return AR_OK;
}

ar_status ar_commsched_metrics_compute(const ar_commsched_span *comm,
                                       size_t ncomm,
                                       const ar_commsched_span *comp,
                                       size_t ncomp, ar_commsched_metrics *out,
                                       ar_err *err) {
  if (ncomm + ncomp == 0)
    return ar_errf(err, AR_INVALID,
                   "commsched metrics: an iteration with no spans at all");
  AR_CHECK(check_spans(comm, ncomm, "communication", err));
  AR_CHECK(check_spans(comp, ncomp, "computation", err));
  ar_commsched_span *s = ar_malloc((ncomm + ncomp) * sizeof *s);
  if (!s)
    return ar_errf(err, AR_NOMEM, "commsched metrics: out of memory");
  if (ncomm)
    memcpy(s, comm, ncomm * sizeof *s);
  if (ncomp)
    memcpy(s + ncomm, comp, ncomp * sizeof *s);
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < ncomm + ncomp; i++) {
    lo = s[i].start < lo ? s[i].start : lo;
    hi = s[i].end > hi ? s[i].end : hi;
  }
  ar_commsched_metrics m;
  memset(&m, 0, sizeof m);
  m.makespan_s = hi - lo;
  m.comm_busy_s = union_len(s, ncomm);
  m.comp_busy_s = union_len(s + ncomm, ncomp);
  ar_free(s);
  double N = m.comm_busy_s, C = m.comp_busy_s;
  m.u_min_s = N > C ? N : C;
  m.u_max_s = N + C;
  double gap = m.u_max_s - m.u_min_s;
  if (gap > 1e-9 * (m.u_max_s > 1.0 ? m.u_max_s : 1.0)) {
    m.efficiency_raw = (m.u_max_s - m.makespan_s) / gap;
    m.efficiency = m.efficiency_raw < 0.0   ? 0.0
                   : m.efficiency_raw > 1.0 ? 1.0
                                            : m.efficiency_raw;
    m.efficiency_defined = 1;
  } else {
    m.efficiency = m.efficiency_raw = NAN;
    m.efficiency_defined = 0;
  }
  m.max_speedup = m.u_min_s > 0.0 ? gap / m.u_min_s : 0.0;
  *out = m;
  return AR_OK;
}

double ar_commsched_straggler_spread(const double *finish, size_t n) {
  if (!finish || n <= 1)
    return 0.0;
  double lo = finish[0], hi = finish[0];
  for (size_t i = 1; i < n; i++) {
    lo = finish[i] < lo ? finish[i] : lo;
    hi = finish[i] > hi ? finish[i] : hi;
  }
  return hi - lo;
}
