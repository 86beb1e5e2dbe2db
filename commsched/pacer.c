/*
 * Link emulation: a token bucket pacing one channel at its sender (issue
 * 5, `link: {gbps, latency_us}`; the model is stated in commsched.h).  The
 * pacer never reads a clock: the caller passes `now`, so the runtime can
 * drive it with ar_now() and the tests with made-up times.
 *
 * State: the channel is busy until t_last, and at t_last the bucket holds
 * `level` tokens (bytes).  Tokens accrue at `rate` from t_last on, capped
 * at `burst`.  Invariant: 0 <= level <= burst, and t_last never decreases,
 * so a caller whose clock steps back only queues its send.
 */
#include <math.h>

#include "commsched_impl.h"

struct ar_commsched_pacer {
  double rate; /* bytes/s, INFINITY when unpaced */
  double latency_s;
  double burst;   /* bucket depth, bytes */
  double t_last;  /* the channel is busy until then */
  double level;   /* tokens at t_last */
  uint64_t bytes; /* committed so far */
};

ar_status ar_commsched_pacer_create(const ar_commsched_link_opts *opts,
                                    double now_s, ar_commsched_pacer **out,
                                    ar_err *err) {
  ar_commsched_link_opts o = AR_COMMSCHED_LINK_OPTS_INIT;
  if (opts)
    o = *opts;
  if (!(o.gbps > 0.0))
    return ar_errf(err, AR_INVALID,
                   "commsched pacer: link.gbps is %g; give a rate > 0 (or "
                   "switch link emulation off)",
                   o.gbps);
  if (!isfinite(o.latency_us) || o.latency_us < 0.0)
    return ar_errf(err, AR_INVALID,
                   "commsched pacer: link.latency_us is %g; give a finite "
                   "value >= 0",
                   o.latency_us);
  if (!isfinite(now_s))
    return ar_errf(err, AR_INVALID,
                   "commsched pacer: start time %g is not finite", now_s);
  ar_commsched_pacer *p = ar_calloc(1, sizeof *p);
  if (!p)
    return ar_errf(err, AR_NOMEM, "commsched pacer: out of memory");
  p->rate = isinf(o.gbps) ? INFINITY : o.gbps * 1e9 / 8.0;
  p->latency_s = o.latency_us * 1e-6;
  p->burst = (double)o.burst_bytes;
  p->t_last = now_s;
  p->level = p->burst;
  *out = p;
  return AR_OK;
}

void ar_commsched_pacer_destroy(ar_commsched_pacer *p) { ar_free(p); }

/* The tokens at time t >= t_last. */
static double level_at(const ar_commsched_pacer *p, double t) {
  double l = p->level + p->rate * (t - p->t_last);
  return l < p->burst ? l : p->burst;
}

void ar_commsched_pacer_earliest(const ar_commsched_pacer *p, double now_s,
                                 size_t bytes, ar_commsched_pace *out) {
  double start = now_s > p->t_last ? now_s : p->t_last;
  double done = start;
  if (!isinf(p->rate)) {
    double l = level_at(p, start), b = (double)bytes;
    if (b > l)
      done = start + (b - l) / p->rate;
  }
  out->start_s = start;
  out->done_s = done;
  out->arrive_s = done + p->latency_s;
}

void ar_commsched_pacer_consume(ar_commsched_pacer *p, double now_s,
                                size_t bytes, ar_commsched_pace *out) {
  ar_commsched_pace pc;
  ar_commsched_pacer_earliest(p, now_s, bytes, &pc);
  if (isinf(p->rate)) {
    p->t_last = pc.start_s;
  } else {
    double l = level_at(p, pc.start_s), b = (double)bytes;
    if (b <= l) {
      /* The whole send fits in the bucket: it leaves as a burst. */
      p->level = l - b;
      p->t_last = pc.start_s;
    } else {
      /* The bucket empties and every token that accrues until done is
       * spent on the rest of the send. */
      p->level = 0.0;
      p->t_last = pc.done_s;
    }
  }
  p->bytes += bytes;
  if (out)
    *out = pc;
}

uint64_t ar_commsched_pacer_bytes(const ar_commsched_pacer *p) {
  return p->bytes;
}

double ar_commsched_pacer_tokens(const ar_commsched_pacer *p, double now_s) {
  if (isinf(p->rate))
    return p->burst;
  return now_s > p->t_last ? level_at(p, now_s) : p->level;
}
