/*
 * srtf: shortest remaining time first (Salus SRTF).  The job of the
 * lane with the least remaining time (remaining iterations x the median of
 * its last measured iteration times, sched.c) runs next, so a shorter job
 * that arrives preempts a longer one at its next iteration boundary.  A
 * job with fewer than AR__LANES_PROBE measured iterations (and iterations
 * left) goes first: its estimate is not yet worth trusting, and the median
 * of three outvotes one iteration the operating system descheduled.
 * Ties: earlier arrival, then lower id.
 *
 * Lanes: Salus ran SRTF with a single lane.  Here a job joins the
 * best-fitting existing lane first, and opens a new lane only when no lane
 * holds its peak; with jobs of similar peaks that is Salus's single lane,
 * and a larger job runs beside the others instead of waiting.  The order
 * is per lane: lanes run concurrently.
 */
#include "lanes_impl.h"

static int place(ar_lanes *l, const ar__job *j, ar__placement *pl) {
  return ar__place_shared(l, j, pl) || ar__place_new_lane(l, j, pl);
}

static int probing(const ar__job *j) {
  return j->measured < AR__LANES_PROBE;
}

static int shortest(const ar_lanes *l, const ar__job *a, const ar__job *b) {
  if (probing(a) != probing(b))
    return probing(a);
  double ra = ar__lanes_remaining(l, a), rb = ar__lanes_remaining(l, b);
  if (ra != rb)
    return ra < rb;
  if (a->arrival != b->arrival)
    return a->arrival < b->arrival;
  return a->id < b->id;
}

const ar__lanes_policy ar__policy_srtf = {
    .name = "srtf",
    .place = place,
    .pick_before = shortest,
};
