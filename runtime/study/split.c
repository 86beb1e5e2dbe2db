/*
 * A study within each level of one of its factors (see accelrt/study.h,
 * ar_fx_split): when a factor has levels that are not better or worse than
 * each other -- model families, datasets -- the question is not its main
 * effect but whether the other factors act the same at each of its levels.
 * Each level's cells are analysed alone (ar_fx_analyze on the other
 * factors) with the whole study's pooled replicate variance, and every
 * term is compared across the levels pair by pair.  This is the split-by
 * analysis of Box, Hunter & Hunter (2nd ed.) §5.10 written as contrasts;
 * the pairs' intervals are Bonferroni-widened so that a three-level factor
 * does not find differences by making three comparisons at 95% each.
 */
#include "accelrt/study.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *ar_fx_across_name(ar_fx_across v) {
  switch (v) {
  case AR_FX_SAME: return "same";
  case AR_FX_DIFFERS: return "differs";
  case AR_FX_ACROSS_NO_INTERVAL: return "no interval";
  case AR_FX_ACROSS_NOT_ESTIMABLE: return "not estimable";
  }
  return "?";
}

void ar_fx_split_destroy(ar_fx_split *s) {
  if (!s)
    return;
  for (int l = 0; s->within && l < s->n_levels; l++)
    ar_fx_result_destroy(s->within[l]);
  for (int t = 0; s->terms && t < s->n_terms; t++) {
    ar_free(s->terms[t].in);
    ar_free(s->terms[t].pairs);
  }
  ar_free(s->within);
  ar_free(s->terms);
  ar_free(s->level_pairs);
  ar_free(s);
}

/* The level of factor f of design d in cell c (Yates order). */
static int level_in(const ar_fx_design *d, int c, int f) {
  for (int g = 0; g < f; g++)
    c /= d->levels[g];
  return c % d->levels[f];
}

/* Cell c of the whole design as a cell of the design without factor f. */
static int sub_cell(const ar_fx_design *d, int f, int c) {
  int sc = 0, stride = 1;
  for (int g = 0; g < d->k; g++) {
    if (g == f)
      continue;
    sc += level_in(d, c, g) * stride;
    stride *= d->levels[g];
  }
  return sc;
}

/* The sub-design's term mask in the whole design's numbering. */
static unsigned whole_mask(int f, unsigned sub) {
  unsigned m = 0;
  for (int j = 0; j < AR_FX_MAX_FACTORS; j++)
    if ((sub >> j) & 1u)
      m |= 1u << (j < f ? j : j + 1);
  return m;
}

/* Level l's analysis: its observations mapped to the sub-design's cells,
 * its planned cells likewise.  scratch holds n_obs cells and y values and
 * the sub-design's planned flags. */
static ar_status analyze_level(ar_fx_split *s, const ar_fx_design *d, int l, const int *cell,
                               const double *y, int n_obs, int *sc, double *sy,
                               unsigned char *planned, int n_sub, ar_err *err) {
  int m = 0;
  for (int i = 0; i < n_obs; i++)
    if (cell[i] >= 0 && level_in(d, cell[i], s->factor) == l) {
      sc[m] = sub_cell(d, s->factor, cell[i]);
      sy[m++] = y[i];
    }
  memset(planned, d->planned ? 0 : 1, (size_t)n_sub);
  if (d->planned) {
    int n_cells = 1;
    for (int g = 0; g < d->k; g++)
      n_cells *= d->levels[g];
    for (int c = 0; c < n_cells; c++)
      if (level_in(d, c, s->factor) == l && d->planned[c])
        planned[sub_cell(d, s->factor, c)] = 1;
  }
  s->sub.planned = planned;
  ar_status st = ar_fx_analyze(&s->sub, sc, sy, m, &s->within[l], err);
  s->sub.planned = NULL;
  return st;
}

/* a - b with its Bonferroni interval. */
static ar_fx_pair pair(int a, int b, double ea, double sa, double eb, double sb, double t) {
  ar_fx_pair p = {a, b, ea - eb, NAN, NAN, false};
  double se = sqrt(sa * sa + sb * sb);
  if (isfinite(se) && isfinite(t)) {
    p.lo = p.diff - t * se;
    p.hi = p.diff + t * se;
    p.differs = p.lo > 0 || p.hi < 0;
  }
  return p;
}

/* Every term of the sub-design at every level, and its pairs. */
static ar_status compare_terms(ar_fx_split *s) {
  s->n_terms = s->within[0]->n_terms;
  s->terms = ar_calloc((size_t)(s->n_terms ? s->n_terms : 1), sizeof *s->terms);
  if (!s->terms)
    return AR_NOMEM;
  for (int t = 0; t < s->n_terms; t++) {
    ar_fx_split_term *T = &s->terms[t];
    T->mask = whole_mask(s->factor, s->within[0]->terms[t].mask);
    T->order = s->within[0]->terms[t].order;
    T->in = ar_calloc((size_t)s->n_levels, sizeof *T->in);
    T->pairs = ar_calloc((size_t)s->n_pairs, sizeof *T->pairs);
    if (!T->in || !T->pairs)
      return AR_NOMEM;
    /* Levels without an estimate (their cells failed) are left out of
     * the comparison; it needs two that have one. */
    int have = 0;
    bool noint = false, differs = false;
    for (int l = 0; l < s->n_levels; l++) {
      T->in[l] = s->within[l]->terms[t];
      bool est = isfinite(T->in[l].effect) && T->in[l].alias_of == -1;
      have += est;
      noint = noint || (est && !isfinite(T->in[l].se));
    }
    bool missing = have < 2;
    for (int a = 0, p = 0; a < s->n_levels; a++)
      for (int b = a + 1; b < s->n_levels; b++, p++) {
        T->pairs[p] = pair(a, b, T->in[a].effect, T->in[a].se, T->in[b].effect, T->in[b].se,
                           s->t_pair);
        differs = differs || T->pairs[p].differs;
      }
    T->verdict = missing  ? AR_FX_ACROSS_NOT_ESTIMABLE
                 : noint  ? AR_FX_ACROSS_NO_INTERVAL
                 : differs ? AR_FX_DIFFERS
                           : AR_FX_SAME;
  }
  return AR_OK;
}

/* The level means of the split factor, pair by pair (their standard
 * errors from the whole study's interval half-widths). */
static void compare_levels(ar_fx_split *s, const ar_fx_result *whole) {
  int fix[AR_FX_MAX_FACTORS];
  double mean[64], se[64];
  for (int g = 0; g < whole->k; g++)
    fix[g] = -1;
  for (int l = 0; l < s->n_levels && l < 64; l++) {
    double half;
    fix[s->factor] = l;
    ar_fx_slice(whole, fix, &mean[l], &half);
    se[l] = half / whole->t;
  }
  int have = 0;
  bool noint = false, differs = false;
  for (int a = 0, p = 0; a < s->n_levels; a++) {
    have += isfinite(mean[a]);
    noint = noint || (isfinite(mean[a]) && !isfinite(se[a]));
    for (int b = a + 1; b < s->n_levels; b++, p++) {
      s->level_pairs[p] = pair(a, b, mean[a], se[a], mean[b], se[b], s->t_pair);
      differs = differs || s->level_pairs[p].differs;
    }
  }
  s->level_verdict = have < 2 ? AR_FX_ACROSS_NOT_ESTIMABLE
                     : noint  ? AR_FX_ACROSS_NO_INTERVAL
                     : differs ? AR_FX_DIFFERS
                               : AR_FX_SAME;
}

ar_status ar_fx_split_analyze(const ar_fx_design *d, const ar_fx_result *whole, int f,
                              const int *cell, const double *y, int n_obs, ar_fx_split **out,
                              ar_err *err) {
  *out = NULL;
  if (!d || !whole || d->k < 2 || f < 0 || f >= d->k || d->levels[f] > 64)
    return ar_errf(err, AR_INVALID,
                   "splitting a study needs a factor of at most 64 levels and another factor");
  ar_fx_split *s = ar_calloc(1, sizeof *s);
  if (!s)
    return ar_errf(err, AR_NOMEM, "out of memory");
  s->factor = f;
  s->n_levels = d->levels[f];
  s->n_pairs = s->n_levels * (s->n_levels - 1) / 2;
  s->sub = *d;
  s->sub.k = d->k - 1;
  int n_sub = 1;
  for (int g = 0, j = 0; g < d->k; g++) {
    if (g == f)
      continue;
    s->levels_[j] = d->levels[g];
    s->names_[j] = d->names[g];
    s->lnames_[j++] = d->level_names[g];
    n_sub *= d->levels[g];
  }
  s->sub.levels = s->levels_;
  s->sub.names = s->names_;
  s->sub.level_names = s->lnames_;
  s->sub.planned = NULL;
  s->sub.df_given = whole->df > 0 ? whole->df : 0;
  s->sub.s2_given = whole->s2;
  s->df = whole->df;
  double conf = d->confidence > 0 && d->confidence < 1 ? d->confidence : 0.95;
  s->t_pair = whole->df > 0 ? ar_fx_t_quantile(1 - (1 - conf) / (2.0 * s->n_pairs), whole->df)
                            : NAN;
  s->within = ar_calloc((size_t)s->n_levels, sizeof *s->within);
  s->level_pairs = ar_calloc((size_t)s->n_pairs, sizeof *s->level_pairs);
  int *sc = ar_malloc((size_t)(n_obs ? n_obs : 1) * sizeof *sc);
  double *sy = ar_malloc((size_t)(n_obs ? n_obs : 1) * sizeof *sy);
  unsigned char *planned = ar_malloc((size_t)n_sub);
  ar_status st = s->within && s->level_pairs && sc && sy && planned
                     ? AR_OK
                     : ar_errf(err, AR_NOMEM, "out of memory");
  for (int l = 0; st == AR_OK && l < s->n_levels; l++)
    st = analyze_level(s, d, l, cell, y, n_obs, sc, sy, planned, n_sub, err);
  if (st == AR_OK && compare_terms(s) != AR_OK)
    st = ar_errf(err, AR_NOMEM, "out of memory");
  if (st == AR_OK)
    compare_levels(s, whole);
  ar_free(sc);
  ar_free(sy);
  ar_free(planned);
  if (st != AR_OK) {
    ar_fx_split_destroy(s);
    return st;
  }
  *out = s;
  return AR_OK;
}

/* ---- words ------------------------------------------------------------------ */

void ar_fx_split_term_name(const ar_fx_split *s, const ar_fx_design *d, int t, char *buf,
                           size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int f = 0; f < d->k && len < cap; f++)
    if ((s->terms[t].mask >> f) & 1u)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " x " : "", d->names[f]);
}

/* An estimate as shown: a number with the unit, or on the log scale the
 * ratio of a term of order `order` (order 0: a level mean, shown as its
 * geometric mean). */
static void shown(const ar_fx_design *d, int order, double v, bool sign, char *b, size_t cap) {
  if (d->scale != AR_FX_LOG) {
    ar_fx_format(v, sign, b, cap);
    return;
  }
  if (order == 0) {
    ar_fx_format(exp(v), false, b, cap);
    return;
  }
  ar_fx_term t = {.order = order};
  ar_fx_format_ratio(isfinite(v) ? ar_fx_ratio(&t, v) : NAN, b, cap);
}

/* " LEVEL e (CI lo to hi)" for each level, then the pairs that differ or
 * that none does; shared by terms (order >= 1) and level means (0). */
static void describe(const ar_fx_split *s, const ar_fx_design *d, int order, const double *e,
                     const double *lo, const double *hi, const ar_fx_pair *pairs,
                     ar_fx_across verdict, char *buf, size_t cap, size_t len) {
  const char *const *ln = d->level_names[s->factor];
  const char *unit = d->unit && d->unit[0] && (d->scale != AR_FX_LOG || order == 0) ? d->unit : "";
  const char *sp = unit[0] ? " " : "";
  int conf = (int)lround(100 * (d->confidence > 0 && d->confidence < 1 ? d->confidence : 0.95));
  char a[32], b[32], c[32];
  for (int l = 0; l < s->n_levels && len < cap; l++) {
    shown(d, order, e[l], order > 0 && d->scale != AR_FX_LOG, a, sizeof a);
    shown(d, order, lo[l], false, b, sizeof b);
    shown(d, order, hi[l], false, c, sizeof c);
    if (isfinite(lo[l]))
      len += (size_t)snprintf(buf + len, cap - len, "%s %s %s%s%s (%d%% CI %s to %s)",
                              l ? "," : "", ln[l], a, sp, unit, conf, b, c);
    else
      len += (size_t)snprintf(buf + len, cap - len, "%s %s %s%s%s", l ? "," : "", ln[l], a, sp,
                              unit);
  }
  if (len >= cap)
    return;
  double pc = 100 - (100 - conf) / (double)s->n_pairs;
  int gaps = 0;
  for (int l = 0; l < s->n_levels; l++)
    gaps += !isfinite(e[l]);
  const char *left = gaps ? "; levels without an estimate left out" : "";
  switch (verdict) {
  case AR_FX_ACROSS_NOT_ESTIMABLE:
    snprintf(buf + len, cap - len,
             "; estimated at fewer than two levels, so the levels cannot be compared.");
    return;
  case AR_FX_ACROSS_NO_INTERVAL:
    snprintf(buf + len, cap - len,
             "; with one replicate there are no intervals, so no comparison of the levels.");
    return;
  case AR_FX_SAME: {
    const char *none = d->scale == AR_FX_LOG ? "1x" : "0";
    if (order == 0)
      snprintf(buf + len, cap - len,
               "; the means do not differ measurably between levels (every pair's %.3g%% "
               "interval of the difference contains %s%s).",
               pc, none, left);
    else
      snprintf(buf + len, cap - len,
               "; it is the same at every level of %s within the noise (every pair's %.3g%% "
               "interval of the difference contains %s%s).",
               d->names[s->factor], pc, none, left);
    return;
  }
  default:
    break;
  }
  ar_fx_term t = {.order = order > 0 ? order : 1};
  len += (size_t)snprintf(buf + len, cap - len, "; %s between levels:",
                          order == 0 ? "the means differ" : "it differs");
  for (int p = 0, n = 0; p < s->n_pairs && len < cap; p++) {
    const ar_fx_pair *x = &pairs[p];
    if (!x->differs)
      continue;
    if (d->scale == AR_FX_LOG) {
      ar_fx_format_ratio(ar_fx_ratio(&t, x->diff), a, sizeof a);
      ar_fx_format_ratio(ar_fx_ratio(&t, x->lo), b, sizeof b);
      ar_fx_format_ratio(ar_fx_ratio(&t, x->hi), c, sizeof c);
    } else {
      ar_fx_format(x->diff, true, a, sizeof a);
      ar_fx_format(x->lo, false, b, sizeof b);
      ar_fx_format(x->hi, false, c, sizeof c);
    }
    len += (size_t)snprintf(buf + len, cap - len, "%s %s vs %s %s %s%s%s (%.3g%% CI %s to %s)",
                            n++ ? ";" : "", ln[x->a], ln[x->b],
                            d->scale == AR_FX_LOG ? "ratio" : "by", a,
                            d->scale == AR_FX_LOG ? "" : sp, d->scale == AR_FX_LOG ? "" : unit,
                            pc, b, c);
  }
  if (len < cap)
    snprintf(buf + len, cap - len, ".");
}

void ar_fx_split_sentence(const ar_fx_split *s, const ar_fx_design *d, int t, char *buf,
                          size_t cap) {
  const ar_fx_split_term *T = &s->terms[t];
  double e[64], lo[64], hi[64];
  for (int l = 0; l < s->n_levels && l < 64; l++) {
    e[l] = T->in[l].effect;
    lo[l] = T->in[l].lo;
    hi[l] = T->in[l].hi;
  }
  char name[512];
  ar_fx_split_term_name(s, d, t, name, sizeof name);
  size_t len = (size_t)snprintf(buf, cap, "%s within each %s:", name, d->names[s->factor]);
  if (len < cap)
    describe(s, d, T->order, e, lo, hi, T->pairs, T->verdict, buf, cap, len);
}

void ar_fx_split_level_sentence(const ar_fx_split *s, const ar_fx_design *d,
                                const ar_fx_result *whole, char *buf, size_t cap) {
  double e[64], lo[64], hi[64];
  for (int l = 0; l < s->n_levels && l < 64; l++) {
    int o = whole->level_off[s->factor] + l;
    e[l] = whole->level_mean[o];
    lo[l] = whole->level_lo[o];
    hi[l] = whole->level_hi[o];
  }
  size_t len = (size_t)snprintf(buf, cap, "%s: %smeans of %s", d->names[s->factor],
                                d->scale == AR_FX_LOG ? "geometric " : "", d->response);
  if (len < cap)
    describe(s, d, 0, e, lo, hi, s->level_pairs, s->level_verdict, buf, cap, len);
}
