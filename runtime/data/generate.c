/*
 * ar_data_generate: synthetic XC datasets with planted structure.
 *
 * The model is described in gen_model.h.  Memory is the alias table over
 * labels (12 bytes a label), one point's scratch and one output buffer;
 * it does not grow with the number of points.  Each file is written to a
 * temporary name next to it, flushed, fsynced and renamed, so a reader
 * sees either the old file or the whole new one.
 */
#define _POSIX_C_SOURCE 200809L
#include "accelrt/data.h"

#include "gen_model.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GEN_ID_MAX 2147483647ll
#define GEN_OUT_BUF ((size_t)1 << 20)

typedef struct generator {
  const ar_gen_spec *spec;
  ar_gen_opts opts;
  uint64_t written; /* bytes of both files so far */
  uint64_t seed;
  /* Vose's alias method over label popularity (Vose, "A linear algorithm
   * for generating random numbers with a given distribution", IEEE TSE
   * 1991): draw a column i uniformly, keep it with probability prob[i],
   * otherwise take alias[i].  O(1) a draw. */
  double *prob;   /* (labels) */
  int32_t *alias; /* (labels) */
  int32_t *lab;   /* (max_k) the point's labels */
  int32_t *feat;  /* (max_m) the point's feature draws */
  int64_t max_k, max_m;
  char *out;      /* (out_cap) pending output */
  size_t out_cap, out_len;
} generator;

/* ---- alias table ----------------------------------------------------------- */

static ar_status build_alias(generator *g, ar_err *err) {
  int64_t n = g->spec->labels;
  int32_t *small = ar_malloc((size_t)n * sizeof *small);
  int32_t *large = ar_malloc((size_t)n * sizeof *large);
  ar_status st = AR_OK;
  if (!small || !large) {
    st = ar_errf(err, AR_NOMEM,
                 "data.generate: out of memory building the label table for "
                 "%lld labels (%zu bytes)",
                 (long long)n, (size_t)n * 20);
    goto done;
  }
  double total = 0.0;
  for (int64_t r = 0; r < n; r++)
    total += 1.0 / ((double)r + AR__GEN_ZIPF_OFFSET);
  int64_t ns = 0, nl = 0;
  for (int64_t r = 0; r < n; r++) {
    g->prob[r] = (1.0 / ((double)r + AR__GEN_ZIPF_OFFSET)) * (double)n / total;
    g->alias[r] = (int32_t)r;
    if (g->prob[r] < 1.0)
      small[ns++] = (int32_t)r;
    else
      large[nl++] = (int32_t)r;
  }
  while (ns > 0 && nl > 0) {
    int32_t s = small[--ns], l = large[nl - 1];
    g->alias[s] = l;
    g->prob[l] -= 1.0 - g->prob[s];
    if (g->prob[l] < 1.0) {
      nl--;
      small[ns++] = l;
    }
  }
  /* Leftovers are 1 up to rounding. */
  while (nl > 0)
    g->prob[large[--nl]] = 1.0;
  while (ns > 0)
    g->prob[small[--ns]] = 1.0;
done:
  ar_free(small);
  ar_free(large);
  return st;
}

static inline int32_t draw_label(generator *g, ar_rng *rng) {
  int32_t i = (int32_t)ar_rng_below(rng, (uint64_t)g->spec->labels);
  return ar_rng_uniform(rng) < g->prob[i] ? i : g->alias[i];
}

/* ---- one point ------------------------------------------------------------- */

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static void sort_i32(int32_t *a, int64_t n) {
  if (n > 32) {
    qsort(a, (size_t)n, sizeof *a, cmp_i32);
    return;
  }
  for (int64_t i = 1; i < n; i++) {
    int32_t v = a[i];
    int64_t j = i;
    while (j > 0 && a[j - 1] > v) {
      a[j] = a[j - 1];
      j--;
    }
    a[j] = v;
  }
}

/* Draws k distinct labels.  Rejection is fast while k is far below the
 * number of labels; when the popular labels are exhausted it stops after
 * a bounded number of tries and takes the smallest unused ids, which
 * keeps the output deterministic and the time bounded. */
static int64_t draw_labels(generator *g, ar_rng *rng, int64_t k) {
  int64_t n = 0, tries = 0;
  while (n < k && tries < 64 * k) {
    int32_t l = draw_label(g, rng);
    tries++;
    int dup = 0;
    for (int64_t i = 0; i < n && !dup; i++)
      dup = g->lab[i] == l;
    if (!dup)
      g->lab[n++] = l;
  }
  for (int32_t l = 0; n < k; l++) {
    int dup = 0;
    for (int64_t i = 0; i < n && !dup; i++)
      dup = g->lab[i] == l;
    if (!dup)
      g->lab[n++] = l;
  }
  sort_i32(g->lab, n);
  return n;
}

static char *put_u32(char *p, uint32_t v) {
  char tmp[10];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n)
    *p++ = tmp[--n];
  return p;
}

static ar_status flush_out(generator *g, FILE *f, const char *tmp,
                           ar_err *err) {
  g->written += g->out_len;
  if (g->opts.max_bytes && g->written > g->opts.max_bytes)
    return ar_errf(err, AR_RANGE,
                   "data.generate: the data would take more than %llu bytes, the most "
                   "allowed here; lower data.generate.train_points or test_points",
                   (unsigned long long)g->opts.max_bytes);
  if (g->out_len && fwrite(g->out, 1, g->out_len, f) != g->out_len)
    return ar_errf(err, AR_IO, "%s: write failed: %s (check free disk space)",
                   tmp, strerror(errno));
  g->out_len = 0;
  return AR_OK;
}

/* Draws point `i` of split `split`: its *k labels into g->lab (distinct,
 * increasing) and *m feature draws into g->feat (increasing, repeats
 * possible); *distinct is how many different features they are, what its
 * line holds. */
static void draw_point(generator *g, int split, int64_t i, int64_t *k_out, int64_t *m_out,
                       int64_t *distinct) {
  const ar_gen_spec *s = g->spec;
  ar_rng rng;
  ar_rng_seed3(&rng, g->seed, (uint64_t)split + 1, (uint64_t)i);

  int64_t k = 1 + (int64_t)ar_rng_below(&rng, (uint64_t)(2 * s->labels_per_point - 1));
  if (k > s->labels)
    k = s->labels;
  k = draw_labels(g, &rng, k);

  int64_t m = 0;
  if (s->nnz > 0) {
    int64_t lo = s->nnz - s->nnz / 2, hi = s->nnz + s->nnz / 2;
    m = lo + (int64_t)ar_rng_below(&rng, (uint64_t)(hi - lo + 1));
  }
  int64_t protos = ar__gen_prototypes(s->nnz);
  for (int64_t d = 0; d < m; d++) {
    if (ar_rng_uniform(&rng) < s->noise) {
      g->feat[d] = (int32_t)ar_rng_below(&rng, (uint64_t)s->features);
    } else {
      int32_t l = g->lab[ar_rng_below(&rng, (uint64_t)k)];
      int64_t j = (int64_t)ar_rng_below(&rng, (uint64_t)protos);
      g->feat[d] = ar__gen_prototype(g->seed, s->features, l, j);
    }
  }
  sort_i32(g->feat, m);
  int64_t nd = 0;
  for (int64_t d = 0; d < m; d++)
    nd += !d || g->feat[d] != g->feat[d - 1];
  *k_out = k;
  *m_out = m;
  *distinct = nd;
}

/* Generates point `i` of split `split` and appends its line. */
static ar_status emit_point(generator *g, int split, int64_t i, FILE *f,
                            const char *tmp, ar_err *err) {
  int64_t k, m, nd;
  draw_point(g, split, i, &k, &m, &nd);

  /* Worst case: 11 bytes a label, 13 a feature, newline. */
  size_t need = (size_t)k * 11 + (size_t)m * 13 + 2;
  if (g->out_cap - g->out_len < need)
    AR_CHECK(flush_out(g, f, tmp, err));
  char *p = g->out + g->out_len;
  for (int64_t j = 0; j < k; j++) {
    if (j)
      *p++ = ',';
    p = put_u32(p, (uint32_t)g->lab[j]);
  }
  for (int64_t d = 0; d < m; d++) {
    if (d && g->feat[d] == g->feat[d - 1])
      continue;
    *p++ = ' ';
    p = put_u32(p, (uint32_t)g->feat[d]);
    *p++ = ':';
    *p++ = '1';
  }
  *p++ = '\n';
  g->out_len = (size_t)(p - g->out);
  return AR_OK;
}

/* ---- files ----------------------------------------------------------------- */

static ar_status write_split(generator *g, int split, int64_t points,
                             const char *path, ar_err *err) {
  const ar_gen_spec *s = g->spec;
  ar_fs_atomic a;
  AR_CHECK(ar_fs_atomic_begin(g->opts.fs, path, &a, err));
  const char *tmp = a.tmp;
  ar_status st = AR_OK;
  g->out_len = (size_t)snprintf(g->out, g->out_cap, "%lld %lld %lld\n",
                                (long long)points, (long long)s->features,
                                (long long)s->labels);
  for (int64_t i = 0; i < points && st == AR_OK; i++)
    st = emit_point(g, split, i, a.f, tmp, err);
  if (st == AR_OK)
    st = flush_out(g, a.f, tmp, err);
  if (st != AR_OK) {
    ar_fs_atomic_abort(&a);
    return st;
  }
  return ar_fs_atomic_commit(&a, err);
}

static ar_status check_spec(const ar_gen_spec *s, const char *train_path,
                            const char *test_path, ar_err *err) {
  if (!s || !train_path)
    return ar_errf(err, AR_INVALID, "data.generate: a spec and a train path are required");
  if (s->train_points < 0 || (test_path && s->test_points < 0))
    return ar_errf(err, AR_INVALID,
                   "data.generate: point counts must not be negative (train %lld, test %lld)",
                   (long long)s->train_points, (long long)s->test_points);
  if (s->features < 1 || s->features > GEN_ID_MAX)
    return ar_errf(err, AR_INVALID,
                   "data.generate.features is %lld; it must be between 1 and 2^31-1",
                   (long long)s->features);
  if (s->labels < 1 || s->labels > GEN_ID_MAX)
    return ar_errf(err, AR_INVALID,
                   "data.generate.labels is %lld; it must be between 1 and 2^31-1",
                   (long long)s->labels);
  if (s->nnz < 0 || s->nnz > (1 << 24))
    return ar_errf(err, AR_INVALID,
                   "data.generate.nnz is %d; it must be between 0 and 2^24",
                   (int)s->nnz);
  if (s->labels_per_point < 1 || s->labels_per_point > (1 << 20))
    return ar_errf(err, AR_INVALID,
                   "data.generate.labels_per_point is %d; it must be between 1 and 2^20",
                   (int)s->labels_per_point);
  if (!(s->noise >= 0.0 && s->noise <= 1.0))
    return ar_errf(err, AR_INVALID,
                   "data.generate.noise is %g; it must be between 0 and 1", s->noise);
  return AR_OK;
}

static void gen_fini(generator *g) {
  ar_free(g->out);
  ar_free(g->feat);
  ar_free(g->lab);
  ar_free(g->alias);
  ar_free(g->prob);
}

/* The label table and one point's scratch (and, with out, the output
 * buffer). */
static ar_status gen_init(generator *g, const ar_gen_spec *gen, uint64_t seed,
                          const ar_gen_opts *opts, bool out, ar_err *err) {
  memset(g, 0, sizeof *g);
  g->opts = opts ? *opts : (ar_gen_opts)AR_GEN_OPTS_INIT;
  g->spec = gen;
  g->seed = seed;
  g->max_k = 2 * (int64_t)gen->labels_per_point;
  g->max_m = (int64_t)gen->nnz + gen->nnz / 2 + 1;
  size_t line_max = (size_t)g->max_k * 11 + (size_t)g->max_m * 13 + 64;
  g->out_cap = out ? (GEN_OUT_BUF > 2 * line_max ? GEN_OUT_BUF : 2 * line_max) : 0;
  g->prob = ar_malloc((size_t)gen->labels * sizeof *g->prob);
  g->alias = ar_malloc((size_t)gen->labels * sizeof *g->alias);
  g->lab = ar_malloc((size_t)g->max_k * sizeof *g->lab);
  g->feat = ar_malloc((size_t)g->max_m * sizeof *g->feat);
  g->out = out ? ar_malloc(g->out_cap) : NULL;
  if (!g->prob || !g->alias || !g->lab || !g->feat || (out && !g->out)) {
    gen_fini(g);
    return ar_errf(err, AR_NOMEM,
                   "data.generate: out of memory for %lld labels (about %lld MiB); "
                   "lower data.generate.labels",
                   (long long)gen->labels, (long long)(gen->labels * 12 >> 20));
  }
  ar_status st = build_alias(g, err);
  if (st != AR_OK)
    gen_fini(g);
  return st;
}

ar_status ar_data_generate(const ar_gen_spec *gen, uint64_t seed,
                           const char *train_path, const char *test_path,
                           const ar_gen_opts *opts, ar_err *err) {
  AR_CHECK(check_spec(gen, train_path, test_path, err));
  generator g;
  AR_CHECK(gen_init(&g, gen, seed, opts, true, err));
  ar_status st = write_split(&g, 0, gen->train_points, train_path, err);
  if (st == AR_OK && test_path)
    st = write_split(&g, 1, gen->test_points, test_path, err);
  if (st == AR_RANGE && test_path) {
    /* Over the bound: the train file written first goes too. */
    ar_fs_unlink(g.opts.fs, train_path, false, NULL);
  }
  gen_fini(&g);
  return st;
}

/* The stats a reader's scan of split `split` would give. */
static void split_stats(generator *g, int split, int64_t points, ar_data_stats *out) {
  memset(out, 0, sizeof *out);
  out->points = points;
  out->features = g->spec->features;
  out->labels = g->spec->labels;
  for (int64_t i = 0; i < points; i++) {
    int64_t k, m, nd;
    draw_point(g, split, i, &k, &m, &nd);
    out->max_nnz = nd > out->max_nnz ? nd : out->max_nnz;
    out->max_labels = k > out->max_labels ? k : out->max_labels;
    out->total_nnz += nd;
    out->total_labels += k;
  }
}

ar_status ar_data_generate_stats(const ar_gen_spec *gen, uint64_t seed, ar_data_stats *train,
                                 ar_data_stats *test, ar_err *err) {
  AR_CHECK(check_spec(gen, "(in memory)", test ? "(in memory)" : NULL, err));
  generator g;
  AR_CHECK(gen_init(&g, gen, seed, NULL, false, err));
  if (train)
    split_stats(&g, 0, gen->train_points, train);
  if (test)
    split_stats(&g, 1, gen->test_points, test);
  gen_fini(&g);
  return AR_OK;
}
