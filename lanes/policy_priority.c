/*
 * priority: the job with the highest priority runs next; ties by arrival,
 * then id.  Waiting jobs are also retried highest priority first.  Strict:
 * a lower-priority job of a lane runs only when no higher one has
 * iterations left.  Lanes as in srtf (shared first).  Not in Salus.
 */
#include "lanes_impl.h"

static int place(ar_lanes *l, const ar__job *j, ar__placement *pl) {
  return ar__place_shared(l, j, pl) || ar__place_new_lane(l, j, pl);
}

static int higher(const ar__job *a, const ar__job *b) {
  if (a->priority != b->priority)
    return a->priority > b->priority;
  if (a->arrival != b->arrival)
    return a->arrival < b->arrival;
  return a->id < b->id;
}

static int pick_higher(const ar_lanes *l, const ar__job *a, const ar__job *b) {
  (void)l;
  return higher(a, b);
}

const ar__lanes_policy ar__policy_priority = {
    .name = "priority",
    .queue_before = higher,
    .place = place,
    .pick_before = pick_higher,
};
