/*
 * TIC, TicTac's timing-independent order: every recv costs 1 and every
 * compute op 0, the properties are computed once over all recvs, and the
 * recvs are ordered by M+ ascending; recvs with equal M+ share a priority.
 * With these costs M+(r) is the fewest recvs that must still arrive for
 * some op needing r and at least one other recv to run.
 *
 * Priorities are dense: 0 for the smallest M+, 1 for the next value, and
 * so on; recvs with M+ = +inf (no op needs them together with another)
 * share the last one.  Normalisation per channel later turns these into
 * the counts the gate enforces.
 */
#include <stdlib.h>

#include "commsched_impl.h"

typedef struct {
  int64_t key;
  uint32_t r;
} tic_key;

static int cmp_tic(const void *a, const void *b) {
  const tic_key *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->r < y->r ? -1 : x->r > y->r;
}

ar_status ar__cs_tic(const ar_commsched_graph *g, uint32_t *prio,
                     ar_err *err) {
  ar__cs_props p;
  AR_CHECK(ar__cs_props_init(&p, g, 1, err));
  tic_key *k = ar_malloc((g->nrecv + 1) * sizeof *k);
  if (!k) {
    ar__cs_props_fini(&p);
    return ar_errf(err, AR_NOMEM, "commsched tic: out of memory");
  }
  ar__cs_props_mplus(&p, g);
  for (size_t r = 0; r < g->nrecv; r++) {
    k[r].key = p.Mplus[r];
    k[r].r = (uint32_t)r;
  }
  qsort(k, g->nrecv, sizeof *k, cmp_tic);
  uint32_t rank = 0;
  for (size_t i = 0; i < g->nrecv; i++) {
    if (i > 0 && k[i].key != k[i - 1].key)
      rank++;
    prio[k[i].r] = rank;
  }
  ar_free(k);
  ar__cs_props_fini(&p);
  return AR_OK;
}
