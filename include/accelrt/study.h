/*
 * accelrt study: factorial experiments over job files, for the questions
 * of how the three techniques interact (`accelrt study STUDY.yaml`).
 *
 * A study names a base job, factors (any `--set` path of the job) with
 * levels, a response read from each run's summary or metrics, replicates
 * and a seed.  The runner executes the full factorial (or a regular
 * 2^(k-p) fraction) in an order randomised by the seed, one child process
 * per run, appending one durable row per finished run to OUT/runs.csv so
 * that a stopped study resumes without redoing finished runs.  The
 * analysis (effects.c) estimates main effects and every two- and three-way
 * interaction with 95% confidence intervals from the replicates and gives
 * each interaction a verdict (additive, synergistic, antagonistic); the
 * report (report.c) is one self-contained report.html.
 *
 * With an `eval:` block each run that trained is followed by `accelrt eval`
 * on its checkpoint (same overrides, same folder), and the response may be
 * read from that eval.json (SLIDE inference against exact scoring).
 *
 * Three layers, usable apart:
 *  - ar_fx_*: the statistics on plain numbers (no files, no processes);
 *    tests/study/test_effects.c checks them on synthetic responses.
 *  - ar_study_load / ar_study_run / ar_study_analyze: the study file, the
 *    runner and the outputs; tests/study/study.sh runs them end to end.
 *  - docs/study.md: the study file reference and how to read the report.
 *
 * Errors follow accelrt/base.h: a status, the details in an ar_err.  A
 * study file's problems are ar_diags ("FILE:LINE:COL: error: KEY: ...").
 */
#ifndef ACCELRT_STUDY_H
#define ACCELRT_STUDY_H

#include "accelrt/base.h"
#include "accelrt/spec.h"

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- analysis of a factorial experiment (runtime/study/effects.c) ------- */

#define AR_FX_MAX_FACTORS 12 /* at most 4096 cells of two-level factors */
#define AR_FX_MAX_CELLS 4096

/* The scale the response is analysed on.  AR_FX_LOG fits ln(y): effects
 * are then log-ratios, reported as factors (ar_fx_ratio), which is how
 * speed responses (samples/s, seconds) compare; an observation y <= 0
 * cannot be analysed there and is left out (counted in n_nonpositive). */
typedef enum ar_fx_scale {
  AR_FX_LINEAR = 0, /* y itself: effects are differences */
  AR_FX_LOG         /* ln(y): effects are ratios */
} ar_fx_scale;

/* The design the observations come from.  Cells are numbered in standard
 * (Yates) order: factor 0 changes fastest, cell = sum(level_f * stride_f)
 * with stride_0 = 1 and stride_f = stride_{f-1} * levels[f-1].  A two-level
 * factor's first level is coded -1 and its second +1, so an effect is
 * "mean at the second level minus mean at the first". */
typedef struct ar_fx_design {
  int k;                                 /* factors, 1..AR_FX_MAX_FACTORS */
  const int *levels;                     /* (k) levels of each factor, >= 2 */
  const char *const *names;              /* (k) factor names, for sentences */
  const char *const *const *level_names; /* (k)(levels[f]) level labels */
  const unsigned char *planned;          /* (cells) 1 when the design runs the
                                            cell (a fraction); NULL: every cell */
  int better;                            /* +1 higher is better, -1 lower */
  const char *response;                  /* response name, for sentences */
  const char *unit;                      /* its unit ("samples/s", "s"); may be "" */
  double confidence;                     /* of the intervals; 0 means 0.95 */
  ar_fx_scale scale;                     /* AR_FX_LINEAR (0) or AR_FX_LOG */
  /* > 0: the variance s2_given with df_given degrees of freedom stands
   * for the replicates' own (a part of a larger study, whose pooled
   * variance is the better estimate: ar_fx_split); 0: the replicates'. */
  int df_given;
  double s2_given;
} ar_fx_design;

typedef enum ar_fx_verdict {
  AR_FX_MAIN = 0,        /* a main effect: no verdict */
  AR_FX_ADDITIVE,        /* the interval contains 0 */
  AR_FX_SYNERGISTIC,     /* works with the main effects */
  AR_FX_ANTAGONISTIC,    /* works against them */
  AR_FX_NO_INTERVAL,     /* one replicate: no interval, no verdict */
  AR_FX_ALIASED,         /* confounded with a lower-order term (a fraction) */
  AR_FX_NOT_ESTIMABLE    /* missing cells leave it undetermined */
} ar_fx_verdict;

/* An effect of two-level factors: a main effect (order 1) or an
 * interaction (order 2 or 3). */
typedef struct ar_fx_term {
  unsigned mask;      /* bit f set: factor f takes part */
  int order;          /* number of factors */
  int alias_of;       /* index of the estimated term it is confounded with
                         (a fraction), -2 for the overall mean, -1 none */
  int alias_sign;     /* +1 or -1: effect = alias_sign * that term's effect */
  double effect;      /* mean(+) - mean(-); NaN when not estimable */
  double se;          /* standard error; NaN when not estimable */
  double lo, hi;      /* confidence interval; NaN without replicates */
  ar_fx_verdict verdict;
} ar_fx_term;

typedef struct ar_fx_cell {
  bool planned;       /* the design runs it */
  int n;              /* observations */
  double mean, sd;    /* NaN when n = 0 (sd: when n < 2) */
} ar_fx_cell;

typedef struct ar_fx_result {
  int k, n_cells;
  int levels[AR_FX_MAX_FACTORS];
  ar_fx_cell *cells;    /* (n_cells) */
  int n_terms;
  ar_fx_term *terms;    /* (n_terms): main effects, then 2-way, then 3-way, of
                           the two-level factors, each group by mask */
  int n_obs;            /* observations used */
  int n_nonpositive;    /* AR_FX_LOG: observations y <= 0, left out */
  int n_missing;        /* planned cells without any observation */
  int df;               /* pure-error degrees of freedom: n_obs - observed cells */
  double s2;            /* pooled within-cell variance (NaN when df = 0) */
  double t;             /* the Student t quantile of the intervals (NaN: df 0) */
  double grand_mean;
  /* The defining relation of a fraction: words (masks) whose product
   * column is constant over the planned cells, with that constant. */
  int n_words;
  unsigned *words;      /* (n_words) */
  int *word_sign;       /* (n_words) +1 or -1 */
  /* Per-level means of every factor (averaged over the observed cells at
   * that level), with intervals. */
  double *level_mean, *level_lo, *level_hi; /* (sum of levels), factor-major */
  int level_off[AR_FX_MAX_FACTORS];         /* factor f's first entry */
} ar_fx_result;

/* Estimates the effects from n_obs observations y[i] of cell cell[i].
 * Method: weighted least squares on the cell means (weights: replicates)
 * with the overall mean, the effect-coded main effects of factors with
 * more than two levels, and the main effects and all two- and three-way
 * interactions of the two-level factors, a term confounded by a fraction
 * with an earlier one left out and reported as its alias.  With every
 * planned cell observed and equal replicates this is the classic 2^k
 * contrast; with cells missing it assumes interactions of four and more
 * factors are zero.  Standard errors come from the pooled within-cell
 * (replicate) variance, intervals from Student's t with n_obs - cells
 * degrees of freedom.  Observations whose cell is not planned or whose
 * value is not finite are ignored.
 *
 * With d->scale AR_FX_LOG every number of the result (cell means and sds,
 * effects, se, intervals, s2, grand and level means, ar_fx_slice) is on
 * the ln(y) scale; observations y <= 0 are left out and counted in
 * n_nonpositive.  ar_fx_ratio turns an effect into its factor.
 *
 * Returns AR_OK and *out (free with ar_fx_result_destroy); AR_INVALID for
 * a design outside the limits; AR_NOMEM.  Pure, reentrant. */
ar_status ar_fx_analyze(const ar_fx_design *d, const int *cell, const double *y, int n_obs,
                        ar_fx_result **out, ar_err *err);
void ar_fx_result_destroy(ar_fx_result *r);

/* The mean of the cell means over the observed cells matching fix[f]
 * (a level, or -1 for any), and the half-width of its interval (NaN
 * without replicates).  Returns the number of cells averaged (0: none,
 * then *mean is NaN). */
int ar_fx_slice(const ar_fx_result *r, const int *fix, double *mean, double *half);

/* A term's effect (or interval end) v on the ln scale as a ratio: exp(v)
 * for a main effect (moving from the first level to the second multiplies
 * y by it); for an interaction of order o, exp(2^(o-1) v), the ratio of
 * ratios: how much more (or less) the change of all its factors together
 * multiplies y than the product of the lower-order effects predicts (for
 * a x b: y(a2,b2) y(a1,b1) / (y(a2,b1) y(a1,b2))).  1 means independent. */
double ar_fx_ratio(const ar_fx_term *t, double v);

/* The term's name from the design's factor names ("a x b"), or from
 * letters when letters is true ("AB").  Writes at most cap bytes. */
void ar_fx_term_name(const ar_fx_result *r, const ar_fx_design *d, int term, bool letters,
                     char *buf, size_t cap);

/* One plain-language sentence on the term: for an interaction, its verdict
 * with the numbers ("... is synergistic: with a at x and b at y, each
 * factor's better level, the response is 3.1 samples/s better than the
 * main effects add up to (interaction +6.2, 95% CI 2.0 to 10.4).").  On the
 * log scale in ratios ("moving from x to y multiplies y by 3.52x (95% CI
 * 3.40x to 3.65x)"). */
void ar_fx_sentence(const ar_fx_result *r, const ar_fx_design *d, int term, char *buf,
                    size_t cap);

/* ---- within the levels of a factor (runtime/study/split.c) -------------- */

/* How a term estimated within each level of a factor compares across
 * those levels.  No level is "better": the question is only whether the
 * levels differ. */
typedef enum ar_fx_across {
  AR_FX_SAME = 0,           /* every pair's interval of the difference holds 0 */
  AR_FX_DIFFERS,            /* some pair's does not */
  AR_FX_ACROSS_NO_INTERVAL, /* no replicates: no intervals */
  AR_FX_ACROSS_NOT_ESTIMABLE /* missing in some level */
} ar_fx_across;

/* Level a's estimate minus level b's (a < b), with its interval; on the
 * log scale a log-ratio (ar_fx_ratio of the term gives the ratio of the
 * two levels' ratios). */
typedef struct ar_fx_pair {
  int a, b;
  double diff, lo, hi;
  bool differs;       /* the interval excludes 0 */
} ar_fx_pair;

/* One term of the other factors, within each level. */
typedef struct ar_fx_split_term {
  unsigned mask;      /* its factors, numbered as in the whole design */
  int order;
  ar_fx_term *in;     /* (n_levels) the term within each level (effect,
                         interval, verdict as ar_fx_analyze gives them) */
  ar_fx_pair *pairs;  /* (n_pairs) */
  ar_fx_across verdict;
} ar_fx_split_term;

/* A study seen within each level of one factor (a model family): the
 * other factors' main effects and interactions estimated from that
 * level's cells alone, with the whole study's pooled replicate variance,
 * and each compared across the levels by pairwise differences whose
 * intervals are Bonferroni-widened (confidence 1 - (1 - c) / n_pairs
 * each, so that all pairs together hold c). */
typedef struct ar_fx_split {
  int factor;         /* split on this factor of the whole design */
  int n_levels, n_pairs;
  ar_fx_design sub;   /* the other factors (k - 1) in their order; its
                         arrays live in this struct */
  ar_fx_result **within; /* (n_levels) the analysis of sub at each level */
  int n_terms;
  ar_fx_split_term *terms; /* (n_terms) the terms of within[0], in order */
  ar_fx_pair *level_pairs; /* (n_pairs) differences of the level means */
  ar_fx_across level_verdict;
  double t_pair;      /* the t quantile of the pairs' intervals */
  int df;             /* its degrees of freedom (the whole study's) */
  /* storage of sub */
  int levels_[AR_FX_MAX_FACTORS];
  const char *names_[AR_FX_MAX_FACTORS];
  const char *const *lnames_[AR_FX_MAX_FACTORS];
} ar_fx_split;

/* Splits the study (design d, observations cell[i], y[i], analysed as a
 * whole in whole) on factor f, which needs at least two factors in d.
 * AR_OK and *out (free with ar_fx_split_destroy); AR_INVALID; AR_NOMEM.
 * The strings of d stay borrowed.  Pure, reentrant. */
ar_status ar_fx_split_analyze(const ar_fx_design *d, const ar_fx_result *whole, int f,
                              const int *cell, const double *y, int n_obs, ar_fx_split **out,
                              ar_err *err);
void ar_fx_split_destroy(ar_fx_split *s);

/* The name of split term t in the whole design ("a x b"). */
void ar_fx_split_term_name(const ar_fx_split *s, const ar_fx_design *d, int t, char *buf,
                           size_t cap);

/* One sentence on split term t: its estimate in each level with
 * intervals, and whether it differs across the levels (which pairs, by
 * how much).  d is the whole design. */
void ar_fx_split_sentence(const ar_fx_split *s, const ar_fx_design *d, int t, char *buf,
                          size_t cap);

/* One sentence on the levels' means (whole: the whole study's result):
 * each with its interval and which pairs differ, no level called better. */
void ar_fx_split_level_sentence(const ar_fx_split *s, const ar_fx_design *d,
                                const ar_fx_result *whole, char *buf, size_t cap);

const char *ar_fx_across_name(ar_fx_across v);

/* The p-quantile of Student's t distribution with df degrees of freedom
 * (df >= 1; 0 < p < 1), to about 1e-10. */
double ar_fx_t_quantile(double p, double df);

/* A number for people: four significant digits without an exponent from
 * 0.001 to 1e7 ("87142", "2.776", "0.01234"), a leading + when sign. */
void ar_fx_format(double v, bool sign, char *buf, size_t cap);

/* A ratio for people: three significant digits and an "x" ("3.52x",
 * "20.0x", "0.284x", "1234x"); "n/a" when not finite. */
void ar_fx_format_ratio(double r, char *buf, size_t cap);

/* Names for files and messages. */
const char *ar_fx_verdict_name(ar_fx_verdict v);

/* ---- studies (runtime/study/: study_file.c, runner.c, analyze.c) ------ */

typedef struct ar_study ar_study;

/* What is measured of each run. */
typedef enum ar_study_response_kind {
  AR_RESP_SAMPLES_PER_S = 0, /* summary.json samples_per_s (single, distributed) */
  AR_RESP_ITERATION_S,       /* train_s / iterations; distributed: iteration_s_median */
  AR_RESP_MAKESPAN_S,        /* jobs: makespan_s; distributed: makespan_s_median */
  AR_RESP_JCT_S,             /* jobs: avg_jct_s */
  AR_RESP_TIME_TO_P1,        /* training seconds until an evaluation reached P@1 >= x */
  AR_RESP_P_AT_1,            /* summary.json p_at_1 */
  AR_RESP_WALL_S,            /* wall_s (single, distributed), makespan_s (jobs) */
  AR_RESP_KEY,               /* any number of summary.json, by key */
  AR_RESP_EVAL_KEY,          /* a number of the run's eval.json, by key (needs eval:) */
  AR_RESP_INFERENCE_SAMPLES_PER_S, /* eval.json: lsh_samples_per_s when the output
                                      layer is sampled, else samples_per_s */
  AR_RESP_INFERENCE_P_AT_1   /* eval.json: lsh_p_at_1 when sampled, else p_at_1 */
} ar_study_response_kind;

typedef struct ar_study_opts {
  const char *out_dir;   /* overrides the study's output; NULL: keep */
  bool resume;           /* require an existing output to resume */
  bool retry_failed;     /* rerun every run whose row is not ok */
  bool quiet;            /* no line per run */
  FILE *log;             /* where run lines go; NULL: stdout */
} ar_study_opts;
#define AR_STUDY_OPTS_INIT {NULL, false, false, false, NULL}

/* Parses and validates the study file at path: its keys, the base job, and
 * every level of every factor against the job (by loading the base with
 * the level as an override, then every planned cell's combination).
 * AR_OK and *out (free with ar_study_destroy); AR_SPEC with every problem
 * in diags (FILE:LINE:COL, KEY, what to do) and *out NULL; AR_IO; AR_NOMEM. */
ar_status ar_study_load(const char *path, const ar_study_opts *opts, ar_study **out,
                        ar_diags *diags);
void ar_study_destroy(ar_study *s);

/* Prints the design: factors and letters, the fraction's alias structure,
 * the cells and the randomised run order. */
void ar_study_print_design(const ar_study *s, FILE *to);

/* Runs the runs not yet recorded in OUT/runs.csv (see the header comment),
 * then analyses and writes effects.csv and report.html.  SIGINT and
 * SIGTERM stop the running child and return AR_INTERRUPTED (runs.csv stays
 * valid; rerunning resumes).  Failed runs are recorded and the study goes
 * on: AR_OK as long as the outputs were written.  AR_STATE when the output
 * folder holds a different study; AR_IO. */
ar_status ar_study_run(ar_study *s, const ar_study_opts *opts, ar_err *err);

/* Only the analysis and the report, from what OUT/runs.csv holds now. */
ar_status ar_study_analyze(ar_study *s, const ar_study_opts *opts, ar_err *err);

/* The output folder (borrowed). */
const char *ar_study_out_dir(const ar_study *s);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_STUDY_H */
