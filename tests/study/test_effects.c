/* study: the effects analysis on synthetic responses with known main and
 * interaction effects, fractions and their aliases, missing cells,
 * multi-level factors, the t quantile, and multiplicative responses on
 * the log scale (ratios). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "accelrt/study.h"

static const char *names[] = {"a", "b", "c", "d", "e", "f"};
static const char *const lv2[] = {"lo", "hi"};
static const char *const lv3[] = {"x", "y", "z"};
static const char *const *lnames[] = {lv2, lv2, lv2, lv2, lv2, lv2};

static ar_fx_design design(int k, const int *levels) {
  ar_fx_design d = {0};
  d.k = k;
  d.levels = levels;
  d.names = names;
  d.level_names = lnames;
  d.better = 1;
  d.response = "y";
  d.unit = "u";
  return d;
}

/* The coded level (-1/+1) of two-level factor f in cell c (all two-level). */
static int code(int c, int f) { return (c >> f) & 1 ? 1 : -1; }

/* A response: mean + sum over terms of effect/2 * product of codes. */
typedef struct truth {
  unsigned mask;
  double effect;
} truth;

static double response(int c, const truth *t, int nt) {
  double y = 100;
  for (int i = 0; i < nt; i++) {
    int s = 1;
    for (int f = 0; f < 16; f++)
      if ((t[i].mask >> f) & 1u)
        s *= code(c, f);
    y += t[i].effect / 2 * s;
  }
  return y;
}

static int find_term(const ar_fx_result *r, unsigned mask) {
  for (int i = 0; i < r->n_terms; i++)
    if (r->terms[i].mask == mask)
      return i;
  fail_msg("no term %#x", mask);
  return -1;
}

static double true_effect(const truth *t, int nt, unsigned mask) {
  for (int i = 0; i < nt; i++)
    if (t[i].mask == mask)
      return t[i].effect;
  return 0;
}

/* Simulates reps replicates of every planned cell with noise sd and
 * analyses them; caller destroys. */
static ar_fx_result *simulate(const ar_fx_design *d, const truth *t, int nt, int reps,
                              double sd, uint64_t seed) {
  int cells = 1 << d->k;
  int *cell = malloc(sizeof(int) * (size_t)(cells * reps));
  double *y = malloc(sizeof(double) * (size_t)(cells * reps));
  int n = 0;
  ar_rng rng;
  ar_rng_seed(&rng, seed, 0);
  for (int c = 0; c < cells; c++) {
    if (d->planned && !d->planned[c])
      continue;
    for (int r = 0; r < reps; r++) {
      cell[n] = c;
      y[n++] = response(c, t, nt) + sd * ar_rng_normal(&rng);
    }
  }
  ar_fx_result *res = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_fx_analyze(d, cell, y, n, &res, &err), AR_OK);
  free(cell);
  free(y);
  return res;
}

static void test_t_quantile(void **state) {
  (void)state;
  /* Reference values from the t table (Box, Hunter & Hunter, Table B1). */
  const struct {
    double df, t;
  } ref[] = {{1, 12.7062}, {2, 4.3027}, {3, 3.1824}, {5, 2.5706}, {10, 2.2281},
             {16, 2.1199}, {30, 2.0423}, {120, 1.9799}, {1e6, 1.95997}};
  for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++)
    assert_true(fabs(ar_fx_t_quantile(0.975, ref[i].df) - ref[i].t) < 1e-4);
  assert_true(fabs(ar_fx_t_quantile(0.025, 10) + 2.2281) < 1e-4);
  assert_true(fabs(ar_fx_t_quantile(0.95, 4) - 2.1318) < 1e-4);
  assert_true(isnan(ar_fx_t_quantile(0.5, 0)));
}

/* Known main effects and interactions, moderate noise: every true effect
 * inside its interval, and the verdicts that follow from the signs. */
static const truth known[] = {
    {1u << 0, 10},                 /* A helps (higher is better) */
    {1u << 1, 6},                  /* B helps */
    {1u << 2, -4},                 /* C hurts: its better level is "lo" */
    {1u << 0 | 1u << 1, 5},        /* AB pushes A+ B+ further: synergistic */
    {1u << 0 | 1u << 2, 5},        /* AC: better levels A+ C-, 5 * (+1)(-1) < 0: antagonistic */
    {1u << 0 | 1u << 1 | 1u << 2, 0.0}, /* ABC: none */
};

static void test_known_effects(void **state) {
  (void)state;
  int levels[] = {2, 2, 2};
  ar_fx_design d = design(3, levels);
  ar_fx_result *r = simulate(&d, known, 6, 4, 0.8, 11);
  assert_int_equal(r->n_terms, 7);
  assert_int_equal(r->df, 8 * 3);
  for (int i = 0; i < r->n_terms; i++) {
    double tr = true_effect(known, 6, r->terms[i].mask);
    if (!(r->terms[i].lo <= tr && tr <= r->terms[i].hi))
      fail_msg("term %#x: true %g outside [%g, %g]", r->terms[i].mask, tr, r->terms[i].lo,
               r->terms[i].hi);
  }
  assert_int_equal(r->terms[find_term(r, 3)].verdict, AR_FX_SYNERGISTIC);
  assert_int_equal(r->terms[find_term(r, 5)].verdict, AR_FX_ANTAGONISTIC);
  assert_int_equal(r->terms[find_term(r, 6)].verdict, AR_FX_ADDITIVE);
  assert_int_equal(r->terms[find_term(r, 7)].verdict, AR_FX_ADDITIVE);
  char buf[1024];
  ar_fx_sentence(r, &d, find_term(r, 3), buf, sizeof buf);
  assert_non_null(strstr(buf, "a x b is synergistic: with a at hi and b at hi"));
  ar_fx_sentence(r, &d, find_term(r, 5), buf, sizeof buf);
  assert_non_null(strstr(buf, "a x c is antagonistic: with a at hi and c at lo"));
  assert_non_null(strstr(buf, "worse than the main effects add up to"));
  ar_fx_sentence(r, &d, find_term(r, 6), buf, sizeof buf);
  assert_non_null(strstr(buf, "additive"));
  /* Lower is better flips which levels are better and so the verdicts,
   * not the numbers: at A and B low the AB term adds +2.5, which is worse. */
  d.better = -1;
  ar_fx_result *r2 = simulate(&d, known, 6, 4, 0.8, 11);
  assert_true(r2->terms[find_term(r2, 3)].effect == r->terms[find_term(r, 3)].effect);
  assert_int_equal(r2->terms[find_term(r2, 3)].verdict, AR_FX_ANTAGONISTIC);
  ar_fx_sentence(r2, &d, find_term(r2, 3), buf, sizeof buf);
  assert_non_null(strstr(buf, "with a at lo and b at lo"));
  /* The level means of A: 100 -+ 5, within their intervals. */
  assert_true(r->level_lo[0] <= 95 && 95 <= r->level_hi[0]);
  assert_true(r->level_lo[1] <= 105 && 105 <= r->level_hi[1]);
  ar_fx_result_destroy(r);
  ar_fx_result_destroy(r2);
}

/* Over many seeds the 95% intervals cover the true effects about 95% of
 * the time: a check of the standard errors and the t quantile together
 * (2 replicates: df = 8, where a normal quantile would under-cover). */
static void test_coverage(void **state) {
  (void)state;
  int levels[] = {2, 2, 2};
  ar_fx_design d = design(3, levels);
  int covered = 0, total = 0;
  for (uint64_t seed = 1; seed <= 600; seed++) {
    ar_fx_result *r = simulate(&d, known, 6, 2, 3.0, seed);
    for (int i = 0; i < r->n_terms; i++) {
      double tr = true_effect(known, 6, r->terms[i].mask);
      covered += r->terms[i].lo <= tr && tr <= r->terms[i].hi;
      total++;
    }
    ar_fx_result_destroy(r);
  }
  double cov = (double)covered / total;
  print_message("coverage %.4f over %d intervals\n", cov, total);
  assert_true(cov > 0.93 && cov < 0.97);
}

/* A half fraction 2^(4-1) with D = ABC: I = ABCD, so D = ABC, AB = CD,
 * AC = BD, AD = BC; main effects and two-way groups still recovered.
 * (Each interval misses its truth 5% of the time: the seed is fixed, and
 * test_coverage checks the rate.) */
static void test_fraction_aliases(void **state) {
  (void)state;
  int levels[] = {2, 2, 2, 2};
  unsigned char planned[16];
  for (int c = 0; c < 16; c++)
    planned[c] = code(c, 3) == code(c, 0) * code(c, 1) * code(c, 2);
  ar_fx_design d = design(4, levels);
  d.planned = planned;
  truth t[] = {{1u, 8}, {2u, -3}, {8u, 5}, {1u | 2u, 4}};
  ar_fx_result *r = simulate(&d, t, 4, 3, 0.5, 1);
  assert_int_equal(r->n_words, 1);
  assert_int_equal(r->words[0], 15u);
  assert_int_equal(r->word_sign[0], 1);
  int abc = find_term(r, 7), dd = find_term(r, 8);
  assert_int_equal(r->terms[abc].alias_of, dd);
  assert_int_equal(r->terms[abc].verdict, AR_FX_ALIASED);
  int cd = find_term(r, 12), ab = find_term(r, 3);
  assert_int_equal(r->terms[cd].alias_of, ab);
  assert_int_equal(r->terms[find_term(r, 10)].alias_of, find_term(r, 5)); /* BD = AC */
  assert_int_equal(r->terms[find_term(r, 6)].alias_of, find_term(r, 9));  /* BC = AD */
  assert_int_equal(r->terms[ab].alias_of, -1);
  for (unsigned m = 1; m <= 8; m <<= 1) {
    int i = find_term(r, m);
    double tr = true_effect(t, 4, m);
    assert_true(r->terms[i].lo <= tr && tr <= r->terms[i].hi);
  }
  assert_true(r->terms[ab].lo <= 4 && 4 <= r->terms[ab].hi);
  char buf[1024];
  ar_fx_sentence(r, &d, cd, buf, sizeof buf);
  assert_non_null(strstr(buf, "c x d is confounded with a x b"));
  ar_fx_result_destroy(r);

  /* 2^(5-2), D = AB, E = -AC: I = ABD = -ACE = -BCDE; resolution III. */
  int l5[] = {2, 2, 2, 2, 2};
  unsigned char p5[32];
  for (int c = 0; c < 32; c++)
    p5[c] = code(c, 3) == code(c, 0) * code(c, 1) && code(c, 4) == -code(c, 0) * code(c, 2);
  ar_fx_design d5 = design(5, l5);
  d5.planned = p5;
  truth t5[] = {{1u, 2}};
  r = simulate(&d5, t5, 1, 2, 0.1, 5);
  assert_int_equal(r->n_words, 3);
  assert_int_equal(r->words[0], 1u | 2u | 8u);
  assert_int_equal(r->word_sign[0], 1);
  assert_int_equal(r->words[1], 1u | 4u | 16u);
  assert_int_equal(r->word_sign[1], -1);
  assert_int_equal(r->words[2], 2u | 4u | 8u | 16u);
  assert_int_equal(r->word_sign[2], -1);
  /* BD is aliased with A (A = BD), CE with -A. */
  assert_int_equal(r->terms[find_term(r, 2u | 8u)].alias_of, find_term(r, 1u));
  int ce = find_term(r, 4u | 16u);
  assert_int_equal(r->terms[ce].alias_of, find_term(r, 1u));
  assert_int_equal(r->terms[ce].alias_sign, -1);
  assert_true(fabs(r->terms[ce].effect + r->terms[find_term(r, 1u)].effect) < 1e-12);
  ar_fx_result_destroy(r);
}

/* A missing cell: effects up to two-way still estimated (three-way
 * assumed zero), the three-way one reported not estimable. */
static void test_missing_cell(void **state) {
  (void)state;
  int levels[] = {2, 2, 2};
  unsigned char planned[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  ar_fx_design d = design(3, levels);
  int cell[40];
  double y[40];
  int n = 0;
  ar_rng rng;
  ar_rng_seed(&rng, 9, 0);
  for (int c = 0; c < 8; c++)
    for (int r = 0; c != 6 && r < 3; r++) {
      cell[n] = c;
      y[n++] = response(c, known, 5) + 0.5 * ar_rng_normal(&rng);
    }
  d.planned = planned;
  ar_fx_result *r = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_fx_analyze(&d, cell, y, n, &r, &err), AR_OK);
  assert_int_equal(r->n_missing, 1);
  assert_int_equal(r->terms[find_term(r, 7)].verdict, AR_FX_NOT_ESTIMABLE);
  for (unsigned m = 1; m < 7; m++) {
    int i = find_term(r, m);
    double tr = true_effect(known, 5, m);
    assert_true(r->terms[i].lo <= tr && tr <= r->terms[i].hi);
  }
  ar_fx_result_destroy(r);
}

/* A three-level factor with a two-level one: level means recovered, the
 * two-level main effect estimated, interactions only of two-level factors. */
static void test_three_levels(void **state) {
  (void)state;
  int levels[] = {3, 2};
  const char *const *ln[] = {lv3, lv2};
  ar_fx_design d = design(2, levels);
  d.level_names = ln;
  const double lmean[3] = {10, 20, 40};
  int cell[60];
  double y[60];
  int n = 0;
  ar_rng rng;
  ar_rng_seed(&rng, 4, 0);
  for (int c = 0; c < 6; c++)
    for (int r = 0; r < 5; r++) {
      cell[n] = c;
      y[n++] = lmean[c % 3] + (c / 3 ? 3 : -3) + ar_rng_normal(&rng);
    }
  ar_fx_result *r = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_fx_analyze(&d, cell, y, n, &r, &err), AR_OK);
  assert_int_equal(r->n_terms, 1);
  assert_int_equal(r->terms[0].mask, 2u);
  assert_true(r->terms[0].lo <= 6 && 6 <= r->terms[0].hi);
  for (int l = 0; l < 3; l++)
    assert_true(r->level_lo[l] <= lmean[l] && lmean[l] <= r->level_hi[l]);
  ar_fx_result_destroy(r);
}

/* One replicate: estimates but no intervals and no verdicts. */
static void test_one_replicate(void **state) {
  (void)state;
  int levels[] = {2, 2};
  ar_fx_design d = design(2, levels);
  ar_fx_result *r = simulate(&d, known, 4, 1, 0.1, 1);
  assert_int_equal(r->df, 0);
  assert_true(isnan(r->terms[0].lo));
  assert_true(fabs(r->terms[0].effect - 10) < 1);
  assert_int_equal(r->terms[find_term(r, 3)].verdict, AR_FX_NO_INTERVAL);
  char buf[512];
  ar_fx_sentence(r, &d, find_term(r, 3), buf, sizeof buf);
  assert_non_null(strstr(buf, "no interval"));
  ar_fx_result_destroy(r);
}

/* ---- the log scale -------------------------------------------------------- */

/* A multiplicative response over three two-level factors, x_f = 0 or 1:
 * y = base * a^x1 * b^x2 * c^(x1 x2) * g^(x1 x2 x3) * noise, noise
 * log-normal with sd s of ln.  The shape of SLIDE inference: LSH (A)
 * 3.85x faster at 10,000 labels, wider output (B) 10x slower, LSH's gain
 * 5.77x larger at the wider width (c). */
static const double mul_a = 3.85, mul_b = 0.097, mul_c = 5.77;

static double mul_response(int c, double g) {
  int x1 = c & 1, x2 = (c >> 1) & 1, x3 = (c >> 2) & 1;
  return 20400 * pow(mul_a, x1) * pow(mul_b, x2) * pow(mul_c, x1 * x2) *
         pow(g, x1 * x2 * x3) * (x3 ? 1.1 : 1);
}

static ar_fx_result *simulate_mul(const ar_fx_design *d, double g, int reps, double s,
                                  uint64_t seed) {
  int cell[8 * 8];
  double y[8 * 8];
  int n = 0;
  ar_rng rng;
  ar_rng_seed(&rng, seed, 0);
  for (int c = 0; c < 8; c++)
    for (int r = 0; r < reps; r++) {
      cell[n] = c;
      y[n++] = mul_response(c, g) * exp(s * ar_rng_normal(&rng));
    }
  ar_fx_result *res = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_fx_analyze(d, cell, y, n, &res, &err), AR_OK);
  return res;
}

/* The true ratio of each term of mul_response: a main effect is the
 * geometric mean of its simple ratios over the other factors, an
 * interaction the ratio of ratios (ar_fx_ratio).  A: a c^1/2 g^1/4,
 * B: b c^1/2 g^1/4, C: 1.1 g^1/4, AB: c g^1/2, AC, BC: g^1/2, ABC: g. */
static double true_ratio(unsigned mask, double g) {
  switch (mask) {
  case 1: return mul_a * sqrt(mul_c) * pow(g, 0.25);
  case 2: return mul_b * sqrt(mul_c) * pow(g, 0.25);
  case 4: return 1.1 * pow(g, 0.25);
  case 3: return mul_c * sqrt(g);
  case 5:
  case 6: return sqrt(g);
  default: return g;
  }
}

static void test_log_scale(void **state) {
  (void)state;
  int levels[] = {2, 2, 2};
  ar_fx_design d = design(3, levels);
  d.scale = AR_FX_LOG;
  d.response = "samples_per_s";
  const double g = 1.6;
  ar_fx_result *r = simulate_mul(&d, g, 3, 0.04, 7);
  assert_int_equal(r->n_nonpositive, 0);
  assert_int_equal(r->df, 16);
  for (int i = 0; i < r->n_terms; i++) {
    const ar_fx_term *t = &r->terms[i];
    double want = true_ratio(t->mask, g), lo = ar_fx_ratio(t, t->lo), hi = ar_fx_ratio(t, t->hi);
    if (!(lo <= want && want <= hi))
      fail_msg("term %#x: true ratio %g outside [%g, %g]", t->mask, want, lo, hi);
    assert_true(fabs(ar_fx_ratio(t, t->effect) / want - 1) < 0.1);
  }
  /* Higher is better: A's better level is hi, B's lo; AB's ratio above 1
   * works against that pair (LSH gains most at the slow width), ABC's
   * too; AC at A hi, C hi is pushed further: synergistic. */
  assert_int_equal(r->terms[find_term(r, 3)].verdict, AR_FX_ANTAGONISTIC);
  assert_int_equal(r->terms[find_term(r, 5)].verdict, AR_FX_SYNERGISTIC);
  char buf[1024];
  ar_fx_sentence(r, &d, find_term(r, 1), buf, sizeof buf);
  assert_non_null(strstr(buf, "a: moving from lo to hi multiplies samples_per_s by "));
  assert_non_null(strstr(buf, "x (95% CI "));
  assert_non_null(strstr(buf, "x): better."));
  assert_null(strstr(buf, " u "));
  ar_fx_sentence(r, &d, find_term(r, 3), buf, sizeof buf);
  assert_non_null(strstr(buf, "a x b is antagonistic: moving a to hi and b to lo (each "
                              "factor's better level) together multiplies samples_per_s by 0.1"));
  assert_non_null(strstr(buf, "which is worse (interaction ratio "));
  print_message("%s\n", buf);
  ar_fx_result_destroy(r);

  /* With g = 1, C acts independently of A and B: AC, BC and ABC have
   * ratio 1, are additive, and their intervals contain 1. */
  r = simulate_mul(&d, 1.0, 3, 0.04, 8);
  for (unsigned m = 5; m <= 7; m++) {
    const ar_fx_term *t = &r->terms[find_term(r, m)];
    assert_int_equal(t->verdict, AR_FX_ADDITIVE);
    assert_true(ar_fx_ratio(t, t->lo) <= 1 && 1 <= ar_fx_ratio(t, t->hi));
  }
  ar_fx_sentence(r, &d, find_term(r, 5), buf, sizeof buf);
  assert_non_null(strstr(buf, "a x c is additive on the log scale (multiplicatively "
                              "independent): the interaction ratio is "));
  assert_non_null(strstr(buf, "contains 1"));
  ar_fx_result_destroy(r);

  /* The same data on the linear scale: the interaction of A and B is
   * there only because the absolute numbers shrink with B. */
  d.scale = AR_FX_LINEAR;
  r = simulate_mul(&d, 1.0, 3, 0.04, 8);
  assert_true(r->terms[find_term(r, 3)].hi < 0);
  ar_fx_result_destroy(r);
}

/* The log-scale intervals cover the true ratios about 95% of the time. */
static void test_log_coverage(void **state) {
  (void)state;
  int levels[] = {2, 2, 2};
  ar_fx_design d = design(3, levels);
  d.scale = AR_FX_LOG;
  int covered = 0, total = 0;
  for (uint64_t seed = 1; seed <= 400; seed++) {
    ar_fx_result *r = simulate_mul(&d, 1.3, 2, 0.2, seed);
    for (int i = 0; i < r->n_terms; i++) {
      const ar_fx_term *t = &r->terms[i];
      double want = true_ratio(t->mask, 1.3);
      covered += ar_fx_ratio(t, t->lo) <= want && want <= ar_fx_ratio(t, t->hi);
      total++;
    }
    ar_fx_result_destroy(r);
  }
  double cov = (double)covered / total;
  print_message("log coverage %.4f over %d intervals\n", cov, total);
  assert_true(cov > 0.93 && cov < 0.97);
}

/* Responses of 0 or less have no logarithm: left out and counted, the
 * others analysed as if those runs had failed; the linear scale keeps
 * them. */
static void test_log_nonpositive(void **state) {
  (void)state;
  int levels[] = {2, 2};
  ar_fx_design d = design(2, levels);
  d.scale = AR_FX_LOG;
  int cell[] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3};
  double y[] = {10, 11, 0, 40, 44, 42, 5, 5.5, -1, 20, 21, 22};
  ar_fx_result *r = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_fx_analyze(&d, cell, y, 12, &r, &err), AR_OK);
  assert_int_equal(r->n_nonpositive, 2);
  assert_int_equal(r->n_obs, 10);
  assert_int_equal(r->cells[0].n, 2);
  assert_true(fabs(r->cells[0].mean - (log(10) + log(11)) / 2) < 1e-12);
  double ra = ar_fx_ratio(&r->terms[0], r->terms[0].effect);
  assert_true(ra > 3.7 && ra < 4.3);
  for (int i = 0; i < r->n_terms; i++)
    assert_true(isfinite(r->terms[i].effect));
  ar_fx_result_destroy(r);
  d.scale = AR_FX_LINEAR;
  assert_int_equal(ar_fx_analyze(&d, cell, y, 12, &r, &err), AR_OK);
  assert_int_equal(r->n_nonpositive, 0);
  assert_int_equal(r->n_obs, 12);
  ar_fx_result_destroy(r);
}

static void test_format_ratio(void **state) {
  (void)state;
  const struct {
    double v;
    const char *want;
  } ref[] = {{3.5234, "3.52x"}, {20.04, "20.0x"}, {0.28391, "0.284x"}, {1234.4, "1234x"},
             {9.996, "10.0x"},  {1, "1.00x"},     {99.96, "100x"},    {NAN, "n/a"}};
  char b[32];
  for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
    ar_fx_format_ratio(ref[i].v, b, sizeof b);
    assert_string_equal(b, ref[i].want);
  }
  ar_fx_term t = {.order = 2};
  assert_true(fabs(ar_fx_ratio(&t, log(2)) - 4) < 1e-12);
  t.order = 1;
  assert_true(fabs(ar_fx_ratio(&t, log(2)) - 2) < 1e-12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_t_quantile),      cmocka_unit_test(test_known_effects),
      cmocka_unit_test(test_coverage),        cmocka_unit_test(test_fraction_aliases),
      cmocka_unit_test(test_missing_cell),    cmocka_unit_test(test_three_levels),
      cmocka_unit_test(test_one_replicate),   cmocka_unit_test(test_log_scale),
      cmocka_unit_test(test_log_coverage),    cmocka_unit_test(test_log_nonpositive),
      cmocka_unit_test(test_format_ratio),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
