/*
 * Defragmentation at iteration boundaries (Salus's memory section describes it; the
 * published Salus code left it as a TODO, and never resized or merged
 * lanes).
 *
 * Persistent blocks slide down towards offset 0 in increasing offset
 * order.  A block only ever moves down, to the end of the block below it,
 * so it never lands on a block that has not moved yet; its source and
 * destination may overlap, which is why the callback has memmove
 * semantics.  Lanes hold nothing between iterations, so they are shrunk to
 * the largest peak among their jobs and re-packed against the top of the
 * arena without any copy.  Afterwards all free memory is one range between
 * the two regions, and waiting jobs are retried.
 *
 * Departure from the paper: lanes are never merged into one (two lanes
 * keep two independent iteration streams); a lane whose largest job left
 * shrinks here, and its freed bytes join the common free range.
 */
#include "lanes_impl.h"

ar_status ar_lanes_defrag(ar_lanes *l, ar_lanes_move_fn move, void *ctx) {
  for (size_t i = 0; i < l->nlanes; i++)
    if (l->lanes[i].running)
      return ar_errf(&l->err, AR_STATE,
                     "cannot defragment: job '%s' is running an iteration in "
                     "lane %u; call at an iteration boundary",
                     l->lanes[i].running->name, (unsigned)l->lanes[i].id);

  /* Persistent blocks, lowest first: a selection pass over the admitted
   * jobs, each time taking the lowest block above the previous one. */
  size_t next = 0;
  int have_prev = 0;
  size_t prev_off = 0;
  for (;;) {
    ar__job *low = NULL;
    for (size_t i = 0; i < l->nlive; i++) {
      ar__job *j = l->live[i];
      if (j->state != AR_LANES_ADMITTED || (have_prev && j->poff <= prev_off))
        continue;
      if (!low || j->poff < low->poff)
        low = j;
    }
    if (!low)
      break;
    prev_off = low->poff;
    have_prev = 1;
    AR_ASSERT(low->poff >= next);
    if (low->poff != next) {
      if (move)
        move(ctx, next, low->poff, low->P);
      low->poff = next;
    }
    next += low->P;
  }

  /* Lanes, highest first, packed against the top. */
  size_t top = l->capacity;
  have_prev = 0;
  for (;;) {
    ar__lane *high = NULL;
    for (size_t i = 0; i < l->nlanes; i++) {
      ar__lane *ln = &l->lanes[i];
      if (have_prev && ln->off >= prev_off)
        continue;
      if (!high || ln->off > high->off)
        high = ln;
    }
    if (!high)
      break;
    prev_off = high->off;
    have_prev = 1;
    high->size = ar__lanes_lane_peak(l, high);
    top -= high->size;
    high->off = top;
  }
  AR_ASSERT(next <= top);
  return ar__lanes_admit_waiting(l);
}
