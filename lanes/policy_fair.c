/*
 * fair: equal device time among the active jobs of a lane (Salus FAIR:
 * least used time first).  Lanes as in srtf (shared first).
 *
 * Departure from Salus: ordering uses a virtual time, not the raw used
 * time.  A job joining a lane starts at the smallest virtual time of the
 * jobs already there (as CFS does with min_vruntime), so a newcomer gets
 * its share from now on instead of running alone until it has caught up
 * with jobs that have been running for hours.  Ties: least recently
 * picked, then earlier admission.
 */
#include "lanes_impl.h"

static int place(ar_lanes *l, const ar__job *j, ar__placement *pl) {
  return ar__place_shared(l, j, pl) || ar__place_new_lane(l, j, pl);
}

static void on_admit(ar_lanes *l, ar__job *j, ar__lane *lane) {
  int have = 0;
  double min_v = 0;
  for (size_t i = 0; i < l->nlive; i++) {
    const ar__job *o = l->live[i];
    if (o == j || o->state != AR_LANES_ADMITTED || o->lane != lane->id)
      continue;
    if (!have || o->vtime_s < min_v)
      min_v = o->vtime_s;
    have = 1;
  }
  j->vtime_s = have ? min_v : 0;
}

static int least_used(const ar_lanes *l, const ar__job *a, const ar__job *b) {
  (void)l;
  if (a->vtime_s != b->vtime_s)
    return a->vtime_s < b->vtime_s;
  if (a->last_pick != b->last_pick)
    return a->last_pick < b->last_pick;
  return a->admit_seq < b->admit_seq;
}

const ar__lanes_policy ar__policy_fair = {
    .name = "fair",
    .place = place,
    .on_admit = on_admit,
    .pick_before = least_used,
};
