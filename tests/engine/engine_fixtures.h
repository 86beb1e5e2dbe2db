/* Shared by the engine tests: a spec from YAML text, a random batch. */
#ifndef ACCELRT_TEST_ENGINE_FIXTURES_H
#define ACCELRT_TEST_ENGINE_FIXTURES_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "accelrt/graph.h"

static inline ar_spec *parse(const char *yaml) {
  ar_spec *spec = NULL;
  ar_diags d = {0, NULL};
  ar_status st = ar_spec_parse(yaml, strlen(yaml), "<test>", NULL, NULL, 0, false, &spec, &d);
  if (st != AR_OK)
    ar_diags_print(&d, "<test>", stderr);
  ar_diags_fini(&d);
  assert_int_equal(st, AR_OK);
  return spec;
}

/* A random batch of `rows` rows over `features` features and `labels`
 * labels; some rows have several labels and one has none. */
static inline void make_batch(ar_batch *b, int rows, int features, int labels, ar_rng *rng) {
  assert_int_equal(ar_batch_init(b, rows, 6, 3), AR_OK);
  b->rows = rows;
  b->row_ptr[0] = 0;
  b->lab_ptr[0] = 0;
  for (int r = 0; r < rows; r++) {
    int64_t p = b->row_ptr[r];
    int nnz = 1 + (int)ar_rng_below(rng, 6);
    for (int j = 0; j < nnz; j++) {
      /* Distinct, increasing feature ids. */
      int f = (int)((j * features) / nnz + ar_rng_below(rng, (uint64_t)(features / nnz)));
      b->idx[p + j] = f;
      b->val[p + j] = (float)(0.5 + ar_rng_uniform(rng));
    }
    b->row_ptr[r + 1] = p + nnz;
    int64_t q = b->lab_ptr[r];
    int nl = r == 1 ? 0 : 1 + (int)ar_rng_below(rng, 3);
    for (int j = 0; j < nl; j++)
      b->lab[q + j] = (int)((j * labels) / 3 + ar_rng_below(rng, (uint64_t)(labels / 3)));
    b->lab_ptr[r + 1] = q + nl;
  }
}

#endif
