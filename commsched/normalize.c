/*
 * Priority normalisation per server channel (TicTac, enforcement: each
 * channel has its own counter, so priorities are renumbered per channel).
 * A transfer's number is how many transfers of its channel have a strictly
 * smaller priority: priorities 4,4,7,9,9,12 give 0,0,2,3,3,5.  Transfers
 * sharing a priority share a number, and a number k always means "k
 * transfers of this channel go before me", which is what the gate's
 * counter relies on.
 */
#include <stdlib.h>

#include "commsched_impl.h"

typedef struct {
  uint32_t channel, priority;
  size_t i;
} norm_key;

static int cmp_norm(const void *a, const void *b) {
  const norm_key *x = a, *y = b;
  if (x->channel != y->channel)
    return x->channel < y->channel ? -1 : 1;
  if (x->priority != y->priority)
    return x->priority < y->priority ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

ar_status ar__cs_normalize(ar_commsched_entry *e, size_t n, ar_err *err) {
  norm_key *k = ar_malloc((n + 1) * sizeof *k);
  if (!k)
    return ar_errf(err, AR_NOMEM, "commsched normalise: out of memory");
  for (size_t i = 0; i < n; i++) {
    k[i].channel = e[i].channel;
    k[i].priority = e[i].priority;
    k[i].i = i;
  }
  qsort(k, n, sizeof *k, cmp_norm);
  size_t first = 0; /* index in k of the channel's first transfer */
  uint32_t number = 0;
  for (size_t j = 0; j < n; j++) {
    if (j == 0 || k[j].channel != k[j - 1].channel) {
      first = j;
      number = 0;
    } else if (k[j].priority != k[j - 1].priority) {
      number = (uint32_t)(j - first);
    }
    e[k[j].i].number = number;
  }
  ar_free(k);
  return AR_OK;
}
