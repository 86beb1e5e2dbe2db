/* study: the analysis within each level of a factor of several levels
 * (ar_fx_split) on synthetic responses with known per-level means and
 * known effects and interactions of the other factors at each level: the
 * means and the within-level effects recovered inside their intervals,
 * the comparisons across levels finding the pairs that truly differ and
 * only those, the pooled variance used, and the sentences. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "accelrt/study.h"

static const char *names[] = {"family", "order", "sharing"};
static const char *const fam[] = {"mlp", "cnn", "transformer"};
static const char *const ord[] = {"random", "tac"};
static const char *const shr[] = {"none", "shared"};
static const char *const *lnames[] = {fam, ord, shr};
static const int levels[] = {3, 2, 2};

/* The truth at one family, on the analysis scale: its mean, order's and
 * sharing's effects (second level minus first) and their interaction
 * (half the difference of one's effect between the other's levels, as
 * ar_fx_term's effect). */
typedef struct family {
  double mean, order, sharing, both;
} family;

static ar_fx_design design(ar_fx_scale scale) {
  ar_fx_design d = {0};
  d.k = 3;
  d.levels = levels;
  d.names = names;
  d.level_names = lnames;
  d.better = 1;
  d.response = "samples_per_s";
  d.unit = "samples/s";
  d.scale = scale;
  return d;
}

/* Cell (f, o, s) in Yates order: family fastest. */
static int cell_of(int f, int o, int s) { return f + 3 * (o + 2 * s); }

/* reps observations of every cell with noise sd on the analysis scale
 * (y = exp of it on the log scale); the whole analysis in *whole and the
 * split on the family in *split. */
static void simulate(const ar_fx_design *d, const family *t, int reps, double sd,
                     uint64_t seed, ar_fx_result **whole, ar_fx_split **split) {
  int n = 0, cap = 12 * reps;
  int *cell = malloc(sizeof(int) * (size_t)cap);
  double *y = malloc(sizeof(double) * (size_t)cap);
  ar_rng rng;
  ar_rng_seed(&rng, seed, 0);
  for (int f = 0; f < 3; f++)
    for (int o = 0; o < 2; o++)
      for (int s = 0; s < 2; s++)
        for (int r = 0; r < reps; r++) {
          double co = o ? 1 : -1, cs = s ? 1 : -1;
          double v = t[f].mean + t[f].order / 2 * co + t[f].sharing / 2 * cs +
                     t[f].both / 2 * co * cs + sd * ar_rng_normal(&rng);
          cell[n] = cell_of(f, o, s);
          y[n++] = d->scale == AR_FX_LOG ? exp(v) : v;
        }
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_fx_analyze(d, cell, y, n, whole, &err), AR_OK);
  assert_int_equal(ar_fx_split_analyze(d, *whole, 0, cell, y, n, split, &err), AR_OK);
  free(cell);
  free(y);
}

static const ar_fx_split_term *term(const ar_fx_split *s, unsigned mask) {
  for (int t = 0; t < s->n_terms; t++)
    if (s->terms[t].mask == mask)
      return &s->terms[t];
  fail_msg("no split term %#x", mask);
  return NULL;
}

static const ar_fx_pair *pair(const ar_fx_pair *pairs, int n, int a, int b) {
  for (int p = 0; p < n; p++)
    if (pairs[p].a == a && pairs[p].b == b)
      return &pairs[p];
  fail_msg("no pair %d-%d", a, b);
  return NULL;
}

/* A multiplicative truth: TAC gains 1.2x for the MLP and the CNN and
 * nothing for the transformer; sharing costs 0.7x, but 0.5x for the CNN,
 * whose order and sharing interact; the families' speeds differ by
 * orders of magnitude. */
static const family known[] = {
    {6.9078, 0.18232, -0.35667, 0.0},  /* mlp: 1000, 1.2x, 0.7x */
    {3.9120, 0.18232, -0.69315, 0.25}, /* cnn: 50, 1.2x, 0.5x, interacting */
    {5.7038, 0.0, -0.35667, 0.0},      /* transformer: 300, 1x, 0.7x */
};

static void test_known_split(void **state) {
  (void)state;
  ar_fx_design d = design(AR_FX_LOG);
  ar_fx_result *r = NULL;
  ar_fx_split *s = NULL;
  simulate(&d, known, 4, 0.005, 7, &r, &s);
  assert_int_equal(s->factor, 0);
  assert_int_equal(s->n_levels, 3);
  assert_int_equal(s->n_pairs, 3);
  assert_int_equal(s->n_terms, 3); /* order, sharing, order x sharing */
  /* Per-level means: each family's geometric mean, inside its interval. */
  for (int l = 0; l < 3; l++) {
    int o = r->level_off[0] + l;
    assert_true(fabs(r->level_mean[o] - known[l].mean) < 0.03);
    assert_true(r->level_lo[o] < known[l].mean && known[l].mean < r->level_hi[o]);
  }
  /* Every pair of means differs (20x, 3.3x, 6x apart). */
  assert_int_equal(s->level_verdict, AR_FX_DIFFERS);
  for (int p = 0; p < 3; p++)
    assert_true(s->level_pairs[p].differs);
  /* The within-level analyses use the whole study's variance. */
  for (int l = 0; l < 3; l++) {
    assert_int_equal(s->within[l]->df, r->df);
    assert_true(s->within[l]->s2 == r->s2);
  }
  assert_int_equal(r->df, 36);
  /* Within each family, each effect recovered inside its interval. */
  const ar_fx_split_term *to = term(s, 1u << 1), *ts = term(s, 1u << 2),
                         *tb = term(s, 1u << 1 | 1u << 2);
  for (int l = 0; l < 3; l++) {
    const double truth[] = {known[l].order, known[l].sharing, known[l].both};
    const ar_fx_split_term *T[] = {to, ts, tb};
    for (int i = 0; i < 3; i++) {
      assert_true(fabs(T[i]->in[l].effect - truth[i]) < 0.03);
      assert_true(T[i]->in[l].lo < truth[i] && truth[i] < T[i]->in[l].hi);
    }
  }
  /* Order: the same for mlp and cnn, different for the transformer. */
  assert_int_equal(to->verdict, AR_FX_DIFFERS);
  assert_false(pair(to->pairs, 3, 0, 1)->differs);
  assert_true(pair(to->pairs, 3, 0, 2)->differs);
  assert_true(pair(to->pairs, 3, 1, 2)->differs);
  /* mlp's gain over the transformer's: 1.2x / 1x, inside the interval. */
  const ar_fx_pair *p02 = pair(to->pairs, 3, 0, 2);
  assert_true(p02->lo < 0.18232 && 0.18232 < p02->hi);
  /* Sharing: the cnn's cost differs from the others', which agree. */
  assert_int_equal(ts->verdict, AR_FX_DIFFERS);
  assert_false(pair(ts->pairs, 3, 0, 2)->differs);
  assert_true(pair(ts->pairs, 3, 0, 1)->differs);
  /* The interaction: only the cnn's, antagonistic there (TAC gains more
   * on a shared device, so at each factor's better level -- tac, none --
   * the response falls short of the product of the two ratios). */
  assert_int_equal(tb->verdict, AR_FX_DIFFERS);
  assert_true(pair(tb->pairs, 3, 0, 1)->differs);
  assert_false(pair(tb->pairs, 3, 0, 2)->differs);
  assert_int_equal(tb->in[1].verdict, AR_FX_ANTAGONISTIC);
  assert_int_equal(tb->in[0].verdict, AR_FX_ADDITIVE);
  /* The words: which pairs differ, by what ratio, none called better. */
  char text[4096];
  ar_fx_split_sentence(s, &d, 0, text, sizeof text);
  assert_non_null(strstr(text, "order within each family: mlp 1.20x"));
  assert_non_null(strstr(text, "it differs between levels: mlp vs transformer ratio 1.20x"));
  assert_non_null(strstr(text, "cnn vs transformer ratio"));
  assert_null(strstr(text, "mlp vs cnn"));
  assert_null(strstr(text, "better"));
  ar_fx_split_level_sentence(s, &d, r, text, sizeof text);
  assert_non_null(strstr(text, "family: geometric means of samples_per_s mlp 99"));
  assert_non_null(strstr(text, "the means differ between levels"));
  assert_non_null(strstr(text, "mlp vs cnn ratio 20.0x"));
  assert_null(strstr(text, "better"));
  char name[256];
  ar_fx_split_term_name(s, &d, 2, name, sizeof name);
  assert_string_equal(name, "order x sharing");
  ar_fx_split_destroy(s);
  ar_fx_result_destroy(r);
}

/* The same additive effects in every level, linear scale: no pair
 * differs, and the sentence says so. */
static void test_same_everywhere(void **state) {
  (void)state;
  const family same[] = {{100, 8, -5, 0}, {40, 8, -5, 0}, {70, 8, -5, 0}};
  ar_fx_design d = design(AR_FX_LINEAR);
  ar_fx_result *r = NULL;
  ar_fx_split *s = NULL;
  simulate(&d, same, 3, 1.0, 3, &r, &s);
  for (int t = 0; t < s->n_terms; t++) {
    assert_int_equal(s->terms[t].verdict, AR_FX_SAME);
    for (int p = 0; p < s->n_pairs; p++) {
      assert_false(s->terms[t].pairs[p].differs);
      /* The Bonferroni interval is wider than a 95% one. */
      double t95 = ar_fx_t_quantile(0.975, r->df);
      assert_true(s->t_pair > t95);
    }
  }
  char text[4096];
  ar_fx_split_sentence(s, &d, 0, text, sizeof text);
  assert_non_null(strstr(text, "order within each family: mlp +"));
  assert_non_null(strstr(text, "samples/s (95% CI"));
  assert_non_null(strstr(text, "it is the same at every level of family within the noise"));
  assert_int_equal(s->level_verdict, AR_FX_DIFFERS);
  ar_fx_split_destroy(s);
  ar_fx_result_destroy(r);
}

/* One replicate: estimates, but no intervals and no comparison; a study
 * of one factor cannot be split. */
static void test_no_replicates(void **state) {
  (void)state;
  ar_fx_design d = design(AR_FX_LOG);
  ar_fx_result *r = NULL;
  ar_fx_split *s = NULL;
  simulate(&d, known, 1, 0.02, 5, &r, &s);
  for (int t = 0; t < s->n_terms; t++) {
    assert_int_equal(s->terms[t].verdict, AR_FX_ACROSS_NO_INTERVAL);
    assert_true(isfinite(s->terms[t].in[0].effect));
  }
  char text[4096];
  ar_fx_split_sentence(s, &d, 1, text, sizeof text);
  assert_non_null(strstr(text, "no intervals"));
  ar_fx_split_destroy(s);
  ar_fx_design one = d;
  one.k = 1;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_fx_split_analyze(&one, r, 0, NULL, NULL, 0, &s, &err), AR_INVALID);
  assert_null(s);
  ar_fx_result_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_split),
      cmocka_unit_test(test_same_everywhere),
      cmocka_unit_test(test_no_replicates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
