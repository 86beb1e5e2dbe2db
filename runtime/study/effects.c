/*
 * Effects of a factorial experiment with replicates (see accelrt/study.h):
 * weighted least squares on the cell means, standard errors from the
 * pooled replicate variance, Student t intervals, and a verdict per
 * interaction.  The textbook this follows is Box, Hunter & Hunter,
 * "Statistics for Experimenters" (2nd ed.), ch. 5 (2^k designs, effects as
 * contrasts, their standard errors from replicates) and ch. 6 (fractions,
 * defining relation, aliases).  Departure: instead of Yates contrasts we
 * fit the cell means by least squares, which gives the same numbers for a
 * complete balanced design and still works when runs failed.
 */
#include "accelrt/study.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- Student t ----------------------------------------------------------- */

/* The continued fraction of the incomplete beta function (modified Lentz),
 * as in Numerical Recipes §6.4. */
static double betacf(double a, double b, double x) {
  const double tiny = 1e-300, eps = 1e-15;
  double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (fabs(d) < tiny)
    d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 300; m++) {
    int m2 = 2 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    d = fabs(d) < tiny ? tiny : d;
    c = 1 + aa / c;
    c = fabs(c) < tiny ? tiny : c;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    d = fabs(d) < tiny ? tiny : d;
    c = 1 + aa / c;
    c = fabs(c) < tiny ? tiny : c;
    d = 1 / d;
    double del = d * c;
    h *= del;
    if (fabs(del - 1) < eps)
      break;
  }
  return h;
}

/* The regularized incomplete beta function I_x(a, b). */
static double betai(double a, double b, double x) {
  if (x <= 0)
    return 0;
  if (x >= 1)
    return 1;
  double bt = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
  if (x < (a + 1) / (a + b + 2))
    return bt * betacf(a, b, x) / a;
  return 1 - bt * betacf(b, a, 1 - x) / b;
}

/* P(T <= t) for Student's t with df degrees of freedom. */
static double t_cdf(double t, double df) {
  double tail = 0.5 * betai(df / 2, 0.5, df / (df + t * t));
  return t >= 0 ? 1 - tail : tail;
}

double ar_fx_t_quantile(double p, double df) {
  if (!(p > 0 && p < 1) || !(df >= 1))
    return NAN;
  if (p < 0.5)
    return -ar_fx_t_quantile(1 - p, df);
  /* Bisection: the CDF is monotone; 1e7 exceeds every quantile asked for
   * (df 1, p 1 - 1e-7 is 3.2e6). */
  double lo = 0, hi = 1e7;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * (1 + lo); i++) {
    double mid = 0.5 * (lo + hi);
    if (t_cdf(mid, df) < p)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}

/* ---- the design ------------------------------------------------------------ */

const char *ar_fx_verdict_name(ar_fx_verdict v) {
  switch (v) {
  case AR_FX_MAIN: return "main";
  case AR_FX_ADDITIVE: return "additive";
  case AR_FX_SYNERGISTIC: return "synergistic";
  case AR_FX_ANTAGONISTIC: return "antagonistic";
  case AR_FX_NO_INTERVAL: return "no interval";
  case AR_FX_ALIASED: return "aliased";
  case AR_FX_NOT_ESTIMABLE: return "not estimable";
  }
  return "?";
}

/* The level of factor f in cell c. */
static int level_of(const ar_fx_result *r, int c, int f) {
  for (int g = 0; g < f; g++)
    c /= r->levels[g];
  return c % r->levels[f];
}

/* The +-1 product column of a two-level term at cell c. */
static int term_sign(const ar_fx_result *r, unsigned mask, int c) {
  int s = 1;
  for (int f = 0; f < r->k; f++) {
    int l = c % r->levels[f];
    c /= r->levels[f];
    if ((mask >> f) & 1u)
      s = l == 1 ? s : -s;
  }
  return s;
}

void ar_fx_result_destroy(ar_fx_result *r) {
  if (!r)
    return;
  ar_free(r->cells);
  ar_free(r->terms);
  ar_free(r->words);
  ar_free(r->word_sign);
  ar_free(r->level_mean);
  ar_free(r->level_lo);
  ar_free(r->level_hi);
  ar_free(r);
}

static void add_term(ar_fx_result *r, unsigned mask, int order) {
  ar_fx_term *t = &r->terms[r->n_terms++];
  t->mask = mask;
  t->order = order;
  t->alias_of = -1;
  t->alias_sign = 1;
  t->effect = t->se = t->lo = t->hi = NAN;
}

/* Lists the main effects, then the two- and three-way terms, of the k2
 * two-level factors two[]. */
static ar_status list_terms(ar_fx_result *r, const int *two, int k2) {
  int cap = k2 + k2 * (k2 - 1) / 2 + k2 * (k2 - 1) * (k2 - 2) / 6;
  r->terms = ar_calloc((size_t)(cap ? cap : 1), sizeof *r->terms);
  if (!r->terms)
    return AR_NOMEM;
  for (int a = 0; a < k2; a++)
    add_term(r, 1u << two[a], 1);
  for (int a = 0; a < k2; a++)
    for (int b = a + 1; b < k2; b++)
      add_term(r, 1u << two[a] | 1u << two[b], 2);
  for (int a = 0; a < k2; a++)
    for (int b = a + 1; b < k2; b++)
      for (int c = b + 1; c < k2; c++)
        add_term(r, 1u << two[a] | 1u << two[b] | 1u << two[c], 3);
  AR_ASSERT(r->n_terms == cap);
  return AR_OK;
}

/* The defining relation of a fraction: the products of the two-level
 * factors (submasks of all2, k2 of them) constant over the planned cells,
 * shortest words first as a defining relation is written.  A full design
 * has none. */
static ar_status defining_relation(ar_fx_result *r, unsigned all2, int k2) {
  int planned = 0;
  for (int c = 0; c < r->n_cells; c++)
    planned += r->cells[c].planned;
  if (planned == r->n_cells || k2 == 0)
    return AR_OK;
  r->words = ar_malloc(((size_t)1 << k2) * sizeof *r->words);
  r->word_sign = ar_malloc(((size_t)1 << k2) * sizeof *r->word_sign);
  if (!r->words || !r->word_sign)
    return AR_NOMEM;
  for (unsigned m = all2; m; m = (m - 1) & all2) {
    int first = 0;
    bool constant = true;
    for (int c = 0; c < r->n_cells && constant; c++) {
      if (!r->cells[c].planned)
        continue;
      int s = term_sign(r, m, c);
      if (!first)
        first = s;
      else if (s != first)
        constant = false;
    }
    if (constant && first) {
      r->words[r->n_words] = m;
      r->word_sign[r->n_words++] = first;
    }
  }
  for (int i = 1; i < r->n_words; i++)
    for (int j = i; j > 0; j--) {
      unsigned a = r->words[j - 1], b = r->words[j];
      int pa = __builtin_popcount(a), pb = __builtin_popcount(b);
      if (pa < pb || (pa == pb && a < b))
        break;
      r->words[j - 1] = b;
      r->words[j] = a;
      int s = r->word_sign[j - 1];
      r->word_sign[j - 1] = r->word_sign[j];
      r->word_sign[j] = s;
    }
  return AR_OK;
}

/* Each term a word of the defining relation confounds with the mean
 * (alias_of -2) or with an earlier term (its index). */
static void mark_aliases(ar_fx_result *r) {
  for (int t = 0; t < r->n_terms; t++) {
    ar_fx_term *T = &r->terms[t];
    for (int w = 0; w < r->n_words; w++)
      if (r->words[w] == T->mask) {
        T->alias_of = -2;
        T->alias_sign = r->word_sign[w];
      }
    for (int s = 0; s < t && T->alias_of == -1; s++)
      for (int w = 0; w < r->n_words; w++)
        if (r->words[w] == (T->mask ^ r->terms[s].mask)) {
          T->alias_of = s;
          T->alias_sign = r->word_sign[w];
          break;
        }
  }
}

/* Lists the two- and three-way terms (and main effects) of the two-level
 * factors, and finds a fraction's defining relation and aliases. */
static ar_status make_terms(ar_fx_result *r) {
  int two[AR_FX_MAX_FACTORS], k2 = 0;
  unsigned all2 = 0;
  for (int f = 0; f < r->k; f++)
    if (r->levels[f] == 2) {
      two[k2++] = f;
      all2 |= 1u << f;
    }
  AR_CHECK(list_terms(r, two, k2));
  AR_CHECK(defining_relation(r, all2, k2));
  mark_aliases(r);
  return AR_OK;
}

/* A model column: the intercept, an effect-coded level of a factor with
 * more than two levels, or a two-level term. */
typedef struct col {
  int term;          /* index into terms, or -1 */
  int factor, level; /* effect coding: +1 at level, -1 at the last; -1 unused */
} col;

static double col_value(const ar_fx_result *r, const col *k, int c) {
  if (k->term >= 0)
    return term_sign(r, r->terms[k->term].mask, c);
  if (k->factor < 0)
    return 1;
  int l = level_of(r, c, k->factor);
  return l == k->level ? 1 : l == r->levels[k->factor] - 1 ? -1 : 0;
}

/* The candidate columns of the model, in order: the intercept, the
 * effect-coded levels of factors of more than two levels, the two-level
 * terms not aliased with an earlier one.  Returns their number. */
static int candidate_columns(const ar_fx_result *r, col *cand) {
  int n = 0;
  cand[n++] = (col){-1, -1, -1};
  for (int f = 0; f < r->k; f++)
    for (int l = 0; r->levels[f] > 2 && l < r->levels[f] - 1; l++)
      cand[n++] = (col){-1, f, l};
  for (int t = 0; t < r->n_terms; t++)
    if (r->terms[t].alias_of == -1)
      cand[n++] = (col){t, -1, -1};
  return n;
}

/* Gram-Schmidt in the weighted inner product keeps the columns that are
 * independent over the observed cells oc[0..nobs), in order: lower-order
 * terms first, so missing cells cost the highest-order terms.  q is
 * scratch of ncand * nobs.  Returns the number kept, their indices in keep. */
static int independent_columns(const ar_fx_result *r, const col *cand, int ncand, const int *oc,
                               int nobs, double *q, int *keep) {
  int m = 0;
  for (int j = 0; j < ncand; j++) {
    double *v = q + (size_t)m * nobs, norm0 = 0, norm = 0;
    for (int i = 0; i < nobs; i++) {
      v[i] = col_value(r, &cand[j], oc[i]);
      norm0 += r->cells[oc[i]].n * v[i] * v[i];
    }
    for (int p = 0; p < m; p++) {
      const double *u = q + (size_t)p * nobs;
      double dot = 0;
      for (int i = 0; i < nobs; i++)
        dot += r->cells[oc[i]].n * u[i] * v[i];
      for (int i = 0; i < nobs; i++)
        v[i] -= dot * u[i];
    }
    for (int i = 0; i < nobs; i++)
      norm += r->cells[oc[i]].n * v[i] * v[i];
    if (norm0 > 0 && norm > 1e-9 * norm0) {
      for (int i = 0; i < nobs; i++)
        v[i] /= sqrt(norm);
      keep[m++] = j;
    }
  }
  return m;
}

/* Normal equations on the m kept columns: A = X'WX, b = X'W ybar, in a
 * (m x (m + 1), b last); A is positive definite by construction, so
 * Gauss-Jordan without pivoting inverts it stably enough for these sizes.
 * Ends with the coefficients in a's last column and A's inverse in inv
 * (m x m, zeroed by the caller). */
static void solve_normal(const ar_fx_result *r, const col *cand, const int *keep, int m,
                         const int *oc, int nobs, double *a, double *inv) {
  for (int i = 0; i < nobs; i++) {
    int c = oc[i];
    double w = r->cells[c].n, y = r->cells[c].mean;
    for (int p = 0; p < m; p++) {
      double xp = col_value(r, &cand[keep[p]], c);
      for (int s = 0; s < m; s++)
        a[p * (m + 1) + s] += w * xp * col_value(r, &cand[keep[s]], c);
      a[p * (m + 1) + m] += w * xp * y;
    }
  }
  for (int p = 0; p < m; p++)
    inv[p * m + p] = 1;
  for (int p = 0; p < m; p++) {
    double piv = a[p * (m + 1) + p];
    AR_ASSERT(piv > 0);
    for (int s = 0; s <= m; s++)
      a[p * (m + 1) + s] /= piv;
    for (int s = 0; s < m; s++)
      inv[p * m + s] /= piv;
    for (int o = 0; o < m; o++) {
      if (o == p)
        continue;
      double fct = a[o * (m + 1) + p];
      if (fct == 0)
        continue;
      for (int s = 0; s <= m; s++)
        a[o * (m + 1) + s] -= fct * a[p * (m + 1) + s];
      for (int s = 0; s < m; s++)
        inv[o * m + s] -= fct * inv[p * m + s];
    }
  }
}

/* Solves the weighted least squares fit; fills effect and se of the terms
 * that are estimable, and the grand mean. */
static ar_status fit(ar_fx_result *r) {
  int nobs = 0;
  int *oc = ar_malloc((size_t)r->n_cells * sizeof *oc);
  int ncand = 1 + r->n_terms;
  for (int f = 0; f < r->k; f++)
    if (r->levels[f] > 2)
      ncand += r->levels[f] - 1;
  col *cand = ar_malloc((size_t)ncand * sizeof *cand);
  double *q = NULL, *a = NULL, *inv = NULL;
  int *keep = ar_malloc((size_t)ncand * sizeof *keep);
  ar_status st = AR_NOMEM;
  if (!oc || !cand || !keep)
    goto done;
  for (int c = 0; c < r->n_cells; c++)
    if (r->cells[c].n > 0)
      oc[nobs++] = c;
  ncand = candidate_columns(r, cand);
  q = ar_calloc((size_t)ncand * (size_t)(nobs ? nobs : 1), sizeof *q);
  if (!q)
    goto done;
  int m = independent_columns(r, cand, ncand, oc, nobs, q, keep);
  a = ar_calloc((size_t)(m ? m : 1) * (size_t)(m + 1), sizeof *a);
  inv = ar_calloc((size_t)(m ? m * m : 1), sizeof *inv);
  if (!a || !inv)
    goto done;
  solve_normal(r, cand, keep, m, oc, nobs, a, inv);
  for (int p = 0; p < m; p++) {
    const col *k = &cand[keep[p]];
    double beta = a[p * (m + 1) + m];
    if (k->term < 0 && k->factor < 0)
      r->grand_mean = beta;
    if (k->term < 0)
      continue;
    ar_fx_term *t = &r->terms[k->term];
    t->effect = 2 * beta;
    t->se = r->df > 0 ? 2 * sqrt(r->s2 * inv[p * m + p]) : NAN;
  }
  st = AR_OK;
done:
  ar_free(oc);
  ar_free(cand);
  ar_free(keep);
  ar_free(q);
  ar_free(a);
  ar_free(inv);
  return st;
}

static ar_fx_term *main_term(ar_fx_result *r, int f) {
  for (int t = 0; t < r->n_terms; t++)
    if (r->terms[t].mask == 1u << f)
      return &r->terms[t];
  return NULL;
}

/* Interaction verdicts.  The sign rule: each factor's better level a_f
 * (+1 or -1) is the one its main effect favours; at those levels together
 * the interaction term adds better * effect * prod(a_f) / 2 to the
 * response beyond the lower-order terms.  Positive: synergistic. */
static void verdicts(ar_fx_result *r, int better) {
  for (int t = 0; t < r->n_terms; t++) {
    ar_fx_term *T = &r->terms[t];
    if (T->alias_of >= 0 || T->alias_of == -2) {
      const ar_fx_term *S = T->alias_of >= 0 ? &r->terms[T->alias_of] : NULL;
      T->effect = S ? T->alias_sign * S->effect : NAN;
      T->se = S ? S->se : NAN;
      if (S && r->df > 0 && isfinite(T->se)) {
        T->lo = T->effect - r->t * T->se;
        T->hi = T->effect + r->t * T->se;
      }
      T->verdict = T->order == 1 ? AR_FX_MAIN : AR_FX_ALIASED;
      continue;
    }
    if (isfinite(T->se) && r->df > 0) {
      T->lo = T->effect - r->t * T->se;
      T->hi = T->effect + r->t * T->se;
    }
    if (T->order == 1) {
      T->verdict = AR_FX_MAIN;
    } else if (!isfinite(T->effect)) {
      T->verdict = AR_FX_NOT_ESTIMABLE;
    } else if (!isfinite(T->lo)) {
      T->verdict = AR_FX_NO_INTERVAL;
    } else if (T->lo <= 0 && T->hi >= 0) {
      T->verdict = AR_FX_ADDITIVE;
    } else {
      int prod = 1;
      for (int f = 0; f < r->k; f++) {
        if (!((T->mask >> f) & 1u))
          continue;
        const ar_fx_term *M = main_term(r, f);
        double e = M && isfinite(M->effect) ? M->effect : 0;
        prod *= better * e >= 0 ? 1 : -1;
      }
      T->verdict = better * T->effect * prod > 0 ? AR_FX_SYNERGISTIC : AR_FX_ANTAGONISTIC;
    }
  }
}

/* Mean of cell means over the observed cells matching fix, with the
 * variance of that mean divided by s2. */
static int slice(const ar_fx_result *r, const int *fix, double *mean, double *vfac) {
  int m = 0;
  double sum = 0, v = 0;
  for (int c = 0; c < r->n_cells; c++) {
    if (r->cells[c].n == 0)
      continue;
    bool match = true;
    for (int f = 0; f < r->k && match; f++)
      match = fix[f] < 0 || level_of(r, c, f) == fix[f];
    if (!match)
      continue;
    m++;
    sum += r->cells[c].mean;
    v += 1.0 / r->cells[c].n;
  }
  *mean = m ? sum / m : NAN;
  *vfac = m ? v / ((double)m * m) : NAN;
  return m;
}

int ar_fx_slice(const ar_fx_result *r, const int *fix, double *mean, double *half) {
  double vfac;
  int m = slice(r, fix, mean, &vfac);
  *half = m && r->df > 0 ? r->t * sqrt(r->s2 * vfac) : NAN;
  return m;
}

/* An observation on the analysis scale: ln(y) on the log scale (NaN for
 * y <= 0, which the caller leaves out), y itself on the linear one. */
static double on_scale(const ar_fx_design *d, double y) {
  if (d->scale != AR_FX_LOG)
    return y;
  return y > 0 ? log(y) : NAN;
}

/* The observations y[i] of cell[i] (those of planned cells, finite, and on
 * the log scale positive) into the cells' counts, means and standard
 * deviations, two passes for stability; ss (n_cells, zeroed) receives the
 * within-cell sums of squares.  Then the pooled variance and its degrees
 * of freedom, and the planned cells without an observation. */
static void cell_stats(ar_fx_result *r, const ar_fx_design *d, const int *cell, const double *y,
                       int n_obs, double *ss) {
  for (int c = 0; c < r->n_cells; c++) {
    r->cells[c].planned = !d->planned || d->planned[c];
    r->cells[c].mean = 0;
  }
  for (int i = 0; i < n_obs; i++) {
    if (cell[i] < 0 || cell[i] >= r->n_cells || !r->cells[cell[i]].planned ||
        !isfinite(y[i]))
      continue;
    if (d->scale == AR_FX_LOG && y[i] <= 0) {
      r->n_nonpositive++;
      continue;
    }
    r->cells[cell[i]].n++;
    r->cells[cell[i]].mean += on_scale(d, y[i]);
    r->n_obs++;
  }
  for (int c = 0; c < r->n_cells; c++)
    r->cells[c].mean = r->cells[c].n ? r->cells[c].mean / r->cells[c].n : NAN;
  for (int i = 0; i < n_obs; i++) {
    if (cell[i] < 0 || cell[i] >= r->n_cells || !r->cells[cell[i]].planned ||
        !isfinite(y[i]) || !isfinite(on_scale(d, y[i])))
      continue;
    double e = on_scale(d, y[i]) - r->cells[cell[i]].mean;
    ss[cell[i]] += e * e;
  }
  double ss_all = 0;
  int observed = 0;
  for (int c = 0; c < r->n_cells; c++) {
    ar_fx_cell *x = &r->cells[c];
    x->sd = x->n > 1 ? sqrt(ss[c] / (x->n - 1)) : NAN;
    ss_all += ss[c];
    observed += x->n > 0;
    r->n_missing += x->planned && x->n == 0;
  }
  r->df = r->n_obs - observed;
  r->s2 = r->df > 0 ? ss_all / r->df : NAN;
}

/* Each factor's level means with their intervals (ar_fx_slice). */
static void level_means(ar_fx_result *r, const ar_fx_design *d) {
  int fix[AR_FX_MAX_FACTORS];
  for (int f = 0; f < d->k; f++) {
    for (int g = 0; g < d->k; g++)
      fix[g] = -1;
    for (int l = 0; l < d->levels[f]; l++) {
      fix[f] = l;
      double mean, half;
      ar_fx_slice(r, fix, &mean, &half);
      r->level_mean[r->level_off[f] + l] = mean;
      r->level_lo[r->level_off[f] + l] = mean - half;
      r->level_hi[r->level_off[f] + l] = mean + half;
    }
  }
}

ar_status ar_fx_analyze(const ar_fx_design *d, const int *cell, const double *y, int n_obs,
                        ar_fx_result **out, ar_err *err) {
  *out = NULL;
  if (!d || d->k < 1 || d->k > AR_FX_MAX_FACTORS || n_obs < 0 || (n_obs && (!cell || !y)))
    return ar_errf(err, AR_INVALID, "a design needs 1 to %d factors", AR_FX_MAX_FACTORS);
  long cells = 1;
  for (int f = 0; f < d->k; f++) {
    if (d->levels[f] < 2)
      return ar_errf(err, AR_INVALID, "factor %d has %d levels; a factor needs 2 or more", f,
                     d->levels[f]);
    cells *= d->levels[f];
    if (cells > AR_FX_MAX_CELLS)
      return ar_errf(err, AR_INVALID, "the design has more than %d cells", AR_FX_MAX_CELLS);
  }
  ar_fx_result *r = ar_calloc(1, sizeof *r);
  if (!r)
    return ar_errf(err, AR_NOMEM, "out of memory");
  r->k = d->k;
  r->n_cells = (int)cells;
  memcpy(r->levels, d->levels, (size_t)d->k * sizeof *d->levels);
  r->cells = ar_calloc((size_t)cells, sizeof *r->cells);
  int nl = 0;
  for (int f = 0; f < d->k; f++) {
    r->level_off[f] = nl;
    nl += d->levels[f];
  }
  r->level_mean = ar_malloc((size_t)nl * sizeof(double));
  r->level_lo = ar_malloc((size_t)nl * sizeof(double));
  r->level_hi = ar_malloc((size_t)nl * sizeof(double));
  double *ss = ar_calloc((size_t)cells, sizeof *ss);
  if (!r->cells || !r->level_mean || !r->level_lo || !r->level_hi || !ss)
    goto oom;
  cell_stats(r, d, cell, y, n_obs, ss);
  if (d->df_given > 0) {
    r->df = d->df_given;
    r->s2 = d->s2_given;
  }
  double conf = d->confidence > 0 && d->confidence < 1 ? d->confidence : 0.95;
  r->t = r->df > 0 ? ar_fx_t_quantile(1 - (1 - conf) / 2, r->df) : NAN;
  r->grand_mean = NAN;
  if (make_terms(r) != AR_OK || fit(r) != AR_OK)
    goto oom;
  verdicts(r, d->better >= 0 ? 1 : -1);
  level_means(r, d);
  ar_free(ss);
  *out = r;
  return AR_OK;
oom:
  ar_free(ss);
  ar_fx_result_destroy(r);
  return ar_errf(err, AR_NOMEM, "out of memory analysing the design");
}

/* ---- words ------------------------------------------------------------------ */

void ar_fx_term_name(const ar_fx_result *r, const ar_fx_design *d, int term, bool letters,
                     char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  unsigned mask = r->terms[term].mask;
  for (int f = 0; f < r->k && len < cap; f++) {
    if (!((mask >> f) & 1u))
      continue;
    if (letters)
      len += (size_t)snprintf(buf + len, cap - len, "%c", 'A' + f);
    else
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " x " : "", d->names[f]);
  }
}

void ar_fx_format(double v, bool sign, char *buf, size_t cap) {
  double a = fabs(v);
  if (!isfinite(v))
    snprintf(buf, cap, "n/a");
  else if (a != 0 && (a >= 1e7 || a < 1e-3))
    snprintf(buf, cap, sign ? "%+.3e" : "%.3e", v);
  else {
    int dec = a == 0 ? 0 : 3 - (int)floor(log10(a));
    dec = dec < 0 ? 0 : dec > 6 ? 6 : dec;
    snprintf(buf, cap, sign ? "%+.*f" : "%.*f", dec, v);
  }
}

double ar_fx_ratio(const ar_fx_term *t, double v) {
  return exp(ldexp(v, t->order > 1 ? t->order - 1 : 0));
}

void ar_fx_format_ratio(double r, char *buf, size_t cap) {
  if (!isfinite(r) || r <= 0) {
    snprintf(buf, cap, "n/a");
    return;
  }
  if (r < 1e-3 || r >= 1e7) {
    snprintf(buf, cap, "%.3gx", r);
    return;
  }
  /* Three significant digits; rounding may carry into a fourth (9.996). */
  int dec = 2 - (int)floor(log10(r));
  dec = dec < 0 ? 0 : dec > 5 ? 5 : dec;
  if (dec > 0 && r * pow(10, dec) >= 999.5)
    dec--;
  snprintf(buf, cap, "%.*fx", dec, r);
}

static const char *num(char *b, size_t cap, double v, bool sign) {
  ar_fx_format(v, sign, b, cap);
  return b;
}

/* The estimate or an interval end of term t as shown: a number on the
 * linear scale, a ratio on the log scale. */
static const char *shown(char *b, size_t cap, const ar_fx_design *d, const ar_fx_term *t,
                         double v, bool sign) {
  if (d->scale != AR_FX_LOG)
    return num(b, cap, v, sign);
  ar_fx_format_ratio(isfinite(v) ? ar_fx_ratio(t, v) : NAN, b, cap);
  return b;
}

/* "a at hi and b at lo": each factor of the interaction at its better
 * level by its main effect, with `word` between name and level.  Returns
 * the product of those levels' codes (+1 or -1). */
static int better_levels(const ar_fx_result *r, const ar_fx_design *d, const ar_fx_term *t,
                         const char *word, char *at, size_t cap) {
  size_t len = 0;
  int prod = 1;
  at[0] = '\0';
  for (int f = 0, i = 0; f < r->k; f++) {
    if (!((t->mask >> f) & 1u))
      continue;
    const ar_fx_term *m = NULL;
    for (int s = 0; s < r->n_terms; s++)
      if (r->terms[s].mask == 1u << f)
        m = &r->terms[s];
    double me = m && isfinite(m->effect) ? m->effect : 0;
    int lev = (d->better >= 0 ? 1 : -1) * me >= 0 ? 1 : 0;
    prod *= lev ? 1 : -1;
    len += (size_t)snprintf(at + len, cap - len, "%s%s %s %s",
                            i == 0 ? "" : (i == t->order - 1 ? " and " : ", "), d->names[f],
                            word, d->level_names[f][lev]);
    i++;
    if (len >= cap)
      break;
  }
  return prod;
}

/* The sentence of a log-scale study's interaction that has an estimate
 * and is not aliased, in ratios. */
static void log_sentence(const ar_fx_result *r, const ar_fx_design *d, int term,
                         const char *name, const char *e, const char *ci, char *buf,
                         size_t cap) {
  const ar_fx_term *t = &r->terms[term];
  const char *others = t->order == 2 ? "the other's level" : "the others' levels";
  switch (t->verdict) {
  case AR_FX_ADDITIVE:
    snprintf(buf, cap,
             "%s is additive on the log scale (multiplicatively independent): the "
             "interaction ratio is %s and its %s contains 1; each factor multiplies %s by "
             "the same factor whatever %s.",
             name, e, ci, d->response, others);
    break;
  case AR_FX_NO_INTERVAL:
    snprintf(buf, cap,
             "%s: the interaction ratio is %s, but with one replicate there is no interval "
             "and so no verdict (set replicates: 2 or more).",
             name, e);
    break;
  default: {
    char to[1024], g[32];
    int prod = better_levels(r, d, t, "to", to, sizeof to);
    bool syn = t->verdict == AR_FX_SYNERGISTIC;
    ar_fx_format_ratio(ar_fx_ratio(t, prod * t->effect), g, sizeof g);
    snprintf(buf, cap,
             "%s is %s: moving %s (each factor's better level) together multiplies %s by %s "
             "what %s multiply up to, which is %s (interaction ratio %s, %s).",
             name, syn ? "synergistic" : "antagonistic", to, d->response, g,
             t->order == 2 ? "the single moves" : "the single moves and their two-way "
                                                  "interactions",
             syn ? "better" : "worse", e, ci);
  }
  }
}

void ar_fx_sentence(const ar_fx_result *r, const ar_fx_design *d, int term, char *buf,
                    size_t cap) {
  const ar_fx_term *t = &r->terms[term];
  char name[512], e[32], lo[32], hi[32], g[32];
  ar_fx_term_name(r, d, term, false, name, sizeof name);
  bool logs = d->scale == AR_FX_LOG;
  const char *unit = d->unit && d->unit[0] && !logs ? d->unit : "";
  const char *sp = unit[0] ? " " : "";
  int conf = (int)lround(100 * (d->confidence > 0 && d->confidence < 1 ? d->confidence : 0.95));
  shown(e, sizeof e, d, t, t->effect, true);
  shown(lo, sizeof lo, d, t, t->lo, false);
  shown(hi, sizeof hi, d, t, t->hi, false);
  char ci[128] = "no interval: one replicate";
  if (isfinite(t->lo))
    snprintf(ci, sizeof ci, "%d%% CI %s to %s", conf, lo, hi);
  if (t->alias_of == -2) {
    snprintf(buf, cap,
             "%s is confounded with the overall mean by the fraction: it cannot be estimated.",
             name);
    return;
  }
  if (t->alias_of >= 0) {
    char other[512];
    ar_fx_term_name(r, d, t->alias_of, false, other, sizeof other);
    snprintf(buf, cap,
             "%s is confounded with %s by the fraction (%s = %s%s): their joint effect is "
             "%s%s%s (%s); the design cannot tell them apart.",
             name, other, name, t->alias_sign < 0 ? "-" : "", other, e, sp, unit, ci);
    return;
  }
  if (!isfinite(t->effect)) {
    snprintf(buf, cap, "%s cannot be estimated: the cells it needs are missing (failed or "
             "skipped runs; see the design table).", name);
    return;
  }
  if (logs && t->order > 1) {
    log_sentence(r, d, term, name, e, ci, buf, cap);
    return;
  }
  if (t->order == 1) {
    int f = __builtin_ctz(t->mask);
    const char *how = "no clear change";
    if (isfinite(t->lo) && (t->lo > 0 || t->hi < 0))
      how = (t->effect > 0) == (d->better >= 0) ? "better" : "worse";
    else if (!isfinite(t->lo))
      how = "no interval: one replicate";
    snprintf(buf, cap, "%s: moving from %s to %s %s %s by %s%s%s (%s): %s.", name,
             d->level_names[f][0], d->level_names[f][1], logs ? "multiplies" : "changes",
             d->response, e, sp, unit, ci, how);
    return;
  }
  /* Each factor's better level, by its main effect. */
  char at[1024];
  better_levels(r, d, t, "at", at, sizeof at);
  const char *below = t->order == 2 ? "the main effects add up to"
                                    : "the main effects and two-way interactions add up to";
  switch (t->verdict) {
  case AR_FX_ADDITIVE:
    snprintf(buf, cap,
             "%s is additive: the interaction effect is %s%s%s and its %s contains 0; each "
             "factor's effect does not depend measurably on the other%s.",
             name, e, sp, unit, ci, t->order == 3 ? "s'" : "'s level");
    break;
  case AR_FX_NO_INTERVAL:
    snprintf(buf, cap,
             "%s: the interaction effect is %s%s%s, but with one replicate there is no "
             "interval and so no verdict (set replicates: 2 or more).",
             name, e, sp, unit);
    break;
  default: {
    bool syn = t->verdict == AR_FX_SYNERGISTIC;
    num(g, sizeof g, fabs(t->effect) / 2, false);
    snprintf(buf, cap,
             "%s is %s: with %s (each factor's better level) %s is %s%s%s %s than %s "
             "(interaction effect %s, %s).",
             name, syn ? "synergistic" : "antagonistic", at, d->response, g, sp, unit,
             syn ? "better" : "worse", below, e, ci);
  }
  }
}
