/*
 * TAC, TicTac's timing-aware order.  Until no recv is outstanding: compute
 * the properties over the outstanding set R (wizard.c), pick the recv A
 * that should go before every other, give it the next priority, remove it
 * from R.
 *
 * The pairwise rule (TicTac, TAC comparator; Johnson's two-machine
 * flow-shop rule with the network and the processor as the two machines):
 * A goes before B iff min(P_B, M_A) < min(P_A, M_B); when the two sides are
 * equal, the smaller M+ goes first.  Here M of a recv is its own transfer
 * time.
 *
 * Departure, stated: the rule is not guaranteed to be transitive, so "the
 * recv that beats every other" may not exist.  We take the champion of one
 * linear scan in transfer id order: the current best is replaced only by a
 * recv that strictly beats it, and a full tie (same mins, same M+) keeps
 * the smaller id.  This is deterministic and O(|R|) per pick.  Times are
 * compared as integer nanoseconds (see ar__cs_ns), so ties are exact.
 */
#include "commsched_impl.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* 1 when B goes before A under the TAC rule (ids break nothing here: the
 * scan order does). */
static int beats(const ar__cs_props *p, uint32_t b, uint32_t a) {
  int64_t lhs = min64(p->P[a], p->rtime[b]); /* min(P_A, M_B) */
  int64_t rhs = min64(p->P[b], p->rtime[a]); /* min(P_B, M_A) */
  if (lhs != rhs)
    return lhs < rhs;
  return p->Mplus[b] < p->Mplus[a];
}

ar_status ar__cs_tac(const ar_commsched_graph *g, uint32_t *prio,
                     ar_err *err) {
  ar__cs_props p;
  AR_CHECK(ar__cs_props_init(&p, g, 0, err));
  size_t W = p.words;
  for (uint32_t step = 0; step < g->nrecv; step++) {
    ar__cs_props_mplus(&p, g);
    uint32_t best = AR_COMMSCHED_NONE;
    for (size_t w = 0; w < W; w++)
      for (uint64_t m = p.R[w]; m; m &= m - 1) {
        uint32_t r = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(m));
        if (best == AR_COMMSCHED_NONE || beats(&p, r, best))
          best = r;
      }
    prio[best] = step;
    ar__cs_props_remove(&p, g, best);
  }
  ar__cs_props_fini(&p);
  return AR_OK;
}
