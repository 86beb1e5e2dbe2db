/* The instruction-set builds of the sparse kernels agree: forward (dense
 * and sparse input), backward (weight, bias and input gradients) and
 * several sparse Adam steps (lazy, and catching up the steps a row
 * skipped) give the portable build's results to float tolerance under
 * AVX2 and AVX-512.  A build the CPU lacks is skipped
 * (reported), never faked: on a CPU without AVX-512 that case says so. */
#include "lsh_util.h"

#include <stdio.h>

enum { NEURONS = 300, IN = 77, N_ACT = 120, NNZ = 19, STEPS = 4 };

typedef struct result {
  float out_d[N_ACT], out_s[N_ACT];
  float dx_d[IN], dx_s[NNZ];
  float *w, *b; /* after the Adam steps */
} result;

static void fill(ar_rng *g, float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)ar_rng_normal(g);
}

/* Runs the kernels on fixed seeded data under the current build. */
static void run(result *r, int catch_up) {
  ar_rng g;
  ar_rng_seed(&g, 4242, 1);
  size_t nw = (size_t)NEURONS * IN;
  r->w = malloc(nw * sizeof(float));
  r->b = malloc(NEURONS * sizeof(float));
  float *gw = calloc(nw, sizeof(float)), *gb = calloc(NEURONS, sizeof(float));
  fill(&g, r->w, nw);
  fill(&g, r->b, NEURONS);
  float x[IN], val[NNZ], dout[N_ACT];
  uint32_t idx[NNZ], act[N_ACT];
  fill(&g, x, IN);
  fill(&g, val, NNZ);
  fill(&g, dout, N_ACT);
  for (int k = 0; k < NNZ; k++)
    idx[k] = (uint32_t)(k * 4 + 1); /* distinct, < IN */
  for (int i = 0; i < N_ACT; i++)
    act[i] = (uint32_t)((i * 7) % NEURONS); /* distinct: 7 and 300 coprime */
  ar_lsh_rows W = {r->w, r->b, NEURONS, IN, IN}, G = {gw, gb, NEURONS, IN, IN};
  ar_lsh_input xd = {x, NULL, NULL, 0}, xs = {NULL, idx, val, NNZ};
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lsh_forward(&W, &xd, act, N_ACT, AR_LSH_ACT_RELU, r->out_d, &err), AR_OK);
  assert_int_equal(ar_lsh_forward(&W, &xs, act, N_ACT, AR_LSH_ACT_NONE, r->out_s, &err), AR_OK);
  ar_lsh_touched *t = NULL;
  assert_int_equal(ar_lsh_touched_create(NEURONS, &t, &err), AR_OK);
  ar_lsh_adam_opts ao = AR_LSH_ADAM_OPTS_INIT;
  ao.lr = 0.01f;
  ao.threads = 1;
  ao.catch_up = catch_up ? STEPS : 0;
  ar_lsh_adam *a = NULL;
  assert_int_equal(ar_lsh_adam_create(NEURONS, IN, 1, &ao, &a, &err), AR_OK);
  for (int s = 0; s < STEPS; s++) {
    memset(r->dx_d, 0, sizeof r->dx_d);
    memset(r->dx_s, 0, sizeof r->dx_s);
    /* Step s uses a different half of the active set, so rows skip steps. */
    size_t lo = s % 2 ? N_ACT / 2 : 0;
    assert_int_equal(ar_lsh_backward(&W, &xd, act + lo, N_ACT / 2, AR_LSH_ACT_RELU, r->out_d + lo,
                                     dout + lo, &G, r->dx_d, t, &err), AR_OK);
    assert_int_equal(ar_lsh_backward(&W, &xs, act + lo, N_ACT / 2, AR_LSH_ACT_NONE, r->out_s + lo,
                                     dout + lo, &G, r->dx_s, t, &err), AR_OK);
    assert_int_equal(ar_lsh_adam_step(a, &W, &G, t, &err), AR_OK);
  }
  ar_lsh_adam_destroy(a);
  ar_lsh_touched_destroy(t);
  free(gw);
  free(gb);
}

static void close_all(const float *a, const float *b, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    double tol = 1e-5 + 1e-4 * fabs((double)a[i]);
    if (fabs((double)a[i] - b[i]) > tol)
      fail_msg("%s[%zu]: portable %.9g, other %.9g", what, i, (double)a[i], (double)b[i]);
  }
}

static void compare_with_portable(ar_lsh_isa isa, const char *name) {
  if (!ar_lsh_isa_supported(isa)) {
    printf("skipped: this CPU lacks %s; its build is compiled but cannot run here\n", name);
    skip();
  }
  for (int catch_up = 0; catch_up < 2; catch_up++) {
    result p, o;
    assert_int_equal(ar_lsh_isa_set(AR_LSH_ISA_PORTABLE), AR_OK);
    assert_string_equal(ar_lsh_isa_name(), "portable");
    run(&p, catch_up);
    assert_int_equal(ar_lsh_isa_set(isa), AR_OK);
    assert_string_equal(ar_lsh_isa_name(), name);
    run(&o, catch_up);
    close_all(p.out_d, o.out_d, N_ACT, "forward (dense input)");
    close_all(p.out_s, o.out_s, N_ACT, "forward (sparse input)");
    close_all(p.dx_d, o.dx_d, IN, "input gradient (dense)");
    close_all(p.dx_s, o.dx_s, NNZ, "input gradient (sparse)");
    close_all(p.w, o.w, (size_t)NEURONS * IN, "weights after Adam");
    close_all(p.b, o.b, NEURONS, "biases after Adam");
    /* The steps moved the weights: the comparison is not of untouched data. */
    result init;
    assert_int_equal(ar_lsh_isa_set(AR_LSH_ISA_PORTABLE), AR_OK);
    ar_rng g;
    ar_rng_seed(&g, 4242, 1);
    init.w = malloc((size_t)NEURONS * IN * sizeof(float));
    fill(&g, init.w, (size_t)NEURONS * IN);
    assert_true(memcmp(init.w, p.w, (size_t)NEURONS * IN * sizeof(float)) != 0);
    free(init.w);
    free(p.w);
    free(p.b);
    free(o.w);
    free(o.b);
  }
}

static void test_avx2_agrees(void **state) {
  (void)state;
  compare_with_portable(AR_LSH_ISA_AVX2, "avx2");
}

static void test_avx512_agrees(void **state) {
  (void)state;
  compare_with_portable(AR_LSH_ISA_AVX512, "avx512");
}

static void test_unsupported_is_refused(void **state) {
  (void)state;
  assert_true(ar_lsh_isa_supported(AR_LSH_ISA_PORTABLE));
  assert_int_equal(ar_lsh_isa_set((ar_lsh_isa)7), AR_UNSUPPORTED);
  if (!ar_lsh_isa_supported(AR_LSH_ISA_AVX512))
    assert_int_equal(ar_lsh_isa_set(AR_LSH_ISA_AVX512), AR_UNSUPPORTED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_avx2_agrees),
      cmocka_unit_test(test_avx512_agrees),
      cmocka_unit_test(test_unsupported_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
