/*
 * The iteration scheduler (Salus, iteration-granularity scheduling): each lane runs at most one
 * iteration at a time, lanes run concurrently, and the policy chooses
 * which of a lane's jobs runs next whenever the lane is free, so a switch
 * (or a preemption) happens only at an iteration boundary.
 *
 * Remaining time = remaining iterations x the median of the job's last
 * AR__LANES_RECENT measured iteration times.  Salus used the declared total
 * time minus used time; accelrt measures instead, and before the first
 * measurement assumes the handle's default_iteration_s.  The median, not
 * the mean: on a shared machine an iteration that lost the processor for
 * a few milliseconds is common, and with a mean that one sample would make
 * a short job look long for the rest of its life.
 */
#include <math.h>

#include "lanes_impl.h"

double ar__lanes_iter_estimate(const ar_lanes *l, const ar__job *j) {
  if (!j->measured)
    return l->default_iter_s;
  size_t n = j->measured < AR__LANES_RECENT ? (size_t)j->measured : AR__LANES_RECENT;
  double v[AR__LANES_RECENT];
  for (size_t i = 0; i < n; i++) { /* insertion sort: n <= 5 */
    double x = j->recent_s[i];
    size_t k = i;
    for (; k > 0 && v[k - 1] > x; k--)
      v[k] = v[k - 1];
    v[k] = x;
  }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double ar__lanes_remaining(const ar_lanes *l, const ar__job *j) {
  return (double)(j->iters - j->done) * ar__lanes_iter_estimate(l, j);
}

ar_status ar_lanes_pick(ar_lanes *l, ar_lanes_lane_id id, ar_lanes_job_id *out) {
  ar__lane *lane = ar__lanes_lane_get(l, id);
  if (!lane)
    return ar_errf(&l->err, AR_NOTFOUND, "no lane %u", (unsigned)id);
  if (lane->running)
    return ar_errf(&l->err, AR_STATE,
                   "lane %u is running an iteration of '%s'; one iteration "
                   "per lane at a time",
                   (unsigned)id, lane->running->name);
  ar__job *best = NULL;
  for (size_t i = 0; i < l->nlive; i++) {
    ar__job *j = l->live[i];
    if (j->state != AR_LANES_ADMITTED || j->lane != id || j->done >= j->iters)
      continue;
    if (!best || l->policy->pick_before(l, j, best))
      best = j;
  }
  if (!best)
    return ar_errf(&l->err, AR_NOTFOUND,
                   "lane %u has no job with iterations left", (unsigned)id);
  best->running = 1;
  best->last_pick = ++l->pick_seq;
  lane->running = best;
  *out = best->id;
  return AR_OK;
}

ar_status ar_lanes_iteration_done(ar_lanes *l, ar_lanes_job_id id,
                                  double seconds) {
  ar__job *j = ar__lanes_job_get(l, id);
  if (!j)
    return ar_errf(&l->err, AR_NOTFOUND, "no job %llu", (unsigned long long)id);
  if (!j->running)
    return ar_errf(&l->err, AR_STATE,
                   "job '%s' is not running an iteration; call ar_lanes_pick "
                   "first",
                   j->name);
  if (!(seconds >= 0) || !isfinite(seconds))
    return ar_errf(&l->err, AR_INVALID,
                   "iteration time %g s of job '%s' must be finite and >= 0",
                   seconds, j->name);
  ar__lane *lane = ar__lanes_lane_get(l, j->lane);
  AR_ASSERT(lane && lane->running == j);
  lane->running = NULL;
  j->running = 0;
  j->done++;
  j->recent_s[j->measured % AR__LANES_RECENT] = seconds;
  j->measured++;
  j->used_s += seconds;
  j->vtime_s += seconds;
  return AR_OK;
}
