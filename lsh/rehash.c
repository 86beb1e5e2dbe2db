/* The rebuild schedule of SLIDE: rebuild the tables every N iterations with
 * N growing by a factor (the gaps are every, every*g, every*g^2, ...,
 * rounded), and draw new hash functions every M iterations. */
#include <math.h>

#include "lsh_impl.h"

ar_status ar_lsh_rehash_init(ar_lsh_rehash *r, const ar_lsh_rehash_opts *o,
                             ar_err *err) {
  if (!r || !o || o->every < 1 || !(o->growth >= 1.0) || o->growth > 100.0)
    return ar_errf(err, AR_INVALID,
                   "lsh rehash: every must be >= 1 and growth in [1, 100]");
  r->o = *o;
  r->gap = (double)o->every;
  r->next = o->every;
  return AR_OK;
}

ar_lsh_rehash_action ar_lsh_rehash_check(ar_lsh_rehash *r, uint64_t iter) {
  ar_lsh_rehash_action a = AR_LSH_REHASH_NONE;
  if (iter >= r->next) {
    a = AR_LSH_REHASH_REBUILD;
    while (r->next <= iter) { /* catch up over skipped points at once */
      r->gap *= r->o.growth;
      double step = floor(r->gap + 0.5);
      if (step > 1e15)
        step = 1e15;
      r->next += step < 1.0 ? 1 : (uint64_t)step;
    }
  }
  if (r->o.new_hash_every && iter > 0 && iter % r->o.new_hash_every == 0)
    a = AR_LSH_REHASH_NEW_HASH;
  return a;
}
