/*
 * pack: as many lanes as fit (Salus PACK).  A job gets a new
 * lane when free memory allows, otherwise it time-shares the best-fitting
 * existing lane, as in Salus's lane manager.  Jobs sharing a lane take
 * turns round-robin at iteration boundaries: the least recently picked job
 * runs next (Salus's PACK did not reorder; round-robin inside a shared lane
 * is ours, so that no job of a shared lane waits for another to end).
 */
#include "lanes_impl.h"

static int place(ar_lanes *l, const ar__job *j, ar__placement *pl) {
  return ar__place_new_lane(l, j, pl) || ar__place_shared(l, j, pl);
}

static int round_robin(const ar_lanes *l, const ar__job *a, const ar__job *b) {
  (void)l;
  if (a->last_pick != b->last_pick)
    return a->last_pick < b->last_pick;
  return a->admit_seq < b->admit_seq;
}

const ar__lanes_policy ar__policy_pack = {
    .name = "pack",
    .place = place,
    .pick_before = round_robin,
};
