/*
 * fifo: no sharing, the baseline Salus compares against (Salus, evaluation).  One job
 * is admitted at a time, in arrival order; it gets a lane of its own peak,
 * so the device is in effect its lane.  Nothing overtakes the head of the
 * queue.
 */
#include "lanes_impl.h"

static int pick_only(const ar_lanes *l, const ar__job *a, const ar__job *b) {
  (void)l;
  return a->admit_seq < b->admit_seq;
}

const ar__lanes_policy ar__policy_fifo = {
    .name = "fifo",
    .max_admitted = 1,
    .strict_order = 1,
    .place = ar__place_new_lane,
    .pick_before = pick_only,
};
