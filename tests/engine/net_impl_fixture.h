/* Shared by the graph engine's tests that reach into the net
 * (runtime/engine/net_impl.h: its tensors, ar__net_grad): a tensor by
 * name, a copy of its values, and gradients against central differences.
 * Include after net_fixture.h. */
#ifndef ACCELRT_TEST_NET_IMPL_FIXTURE_H
#define ACCELRT_TEST_NET_IMPL_FIXTURE_H

#include "net_fixture.h"
#include "net_impl.h"

#include <math.h>
#include <stdbool.h>

/* The net's tensor `name` (fails the test when there is none). */
static inline ntensor *net_tensor(ar_net *n, const char *name) {
  for (int i = 0; i < n->n_tensors; i++)
    if (!strcmp(n->tensors[i].name, name))
      return &n->tensors[i];
  fail_msg("no tensor %s", name);
  return NULL;
}

/* A copy of a float tensor's values (free it). */
static inline float *net_copy_of(const ntensor *t) {
  size_t bytes = (size_t)ar_shape_count(&t->shape) * sizeof(float);
  float *c = malloc(bytes);
  memcpy(c, t->p, bytes);
  return c;
}

/* Central difference of the net's loss (ar__net_grad) in w[j], h = 1e-3. */
static inline double net_central_diff(ar_net *n, float *w, int64_t j) {
  ar_err err = AR_ERR_INIT;
  float keep = w[j];
  double up, dn;
  w[j] = keep + 1e-3f;
  assert_int_equal(ar__net_grad(n, &up, &err), AR_OK);
  w[j] = keep - 1e-3f;
  assert_int_equal(ar__net_grad(n, &dn, &err), AR_OK);
  w[j] = keep;
  return (up - dn) / 2e-3;
}

/* A finite difference num and an analytic gradient an agree (f32
 * forwards: 2e-3 absolute plus 5% relative). */
static inline bool net_grad_close(double num, double an) {
  return fabs(num - an) <= 2e-3 + 5e-2 * fmax(fabs(num), fabs(an));
}

#endif
