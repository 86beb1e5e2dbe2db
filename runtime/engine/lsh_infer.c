/* SLIDE inference with hash tables chosen for inference.
 *
 * Training's tables are sized for training: a small budget (1% of the
 * layer) that random negatives top up.  At inference nothing tops up, and
 * what decides P@1 is whether the label the layer scores highest (the
 * exact top-1) is among the candidates scored.  Measured on the quick-
 * start network at 10,000 labels after 2 epochs (bench/lsh/README.md):
 * training's K retrieves the exact top-1 for about half the points within
 * the 100-candidate budget; smaller K (larger buckets) and more candidates
 * both raise that, at a cost.
 *
 * So inference builds its own tables (ar_lsh_index) over the output
 * layer's weight rows, and chooses their K (codes per table), L (tables)
 * and the candidate budget B from a probe: a seeded, evenly strided sample
 * of training points (512 by default, accelrt eval --lsh-probe; their
 * labels are not read).  For each probe point the exact top-1 is computed
 * once; then for each (K, L) tried the tables are built and every probe
 * point retrieves its candidates with no budget, ordered as the job's
 * sampling strategy orders them (top-k: by the number of tables an id was
 * found in), so that the candidates a budget B scores are the first B of
 * that list.  The rank of the exact top-1 in it gives the smallest B whose
 * recall reaches the target (the ceil(target x points)-th smallest rank),
 * and its cost per point in row dot products: the candidates scored
 * (min(B, retrieved)), the ids counted (retrieved / 8: a count is a
 * random access, not a 32nd of a row's dot product as first charged, which
 * chose 200 tables and their 9,000 retrieved ids at 100,000 labels and ran
 * at 2.8-3.3x exact scoring instead of 5.2x) and the hashing
 * (SRP adds each non-zero input coordinate to all K x L projections: K x L
 * x the probe's share of non-zero inputs; the others K x L x bin_size /
 * in).  A setting that reaches the target then takes the B of a fifth of
 * its misses (recall 0.99 for the target 0.95), within a quarter of the
 * layer, and its cost at that B: a budget set exactly at the probe's
 * target left P@1 under the best hand-set K.  The cheapest setting that
 * reaches the target with B at most a quarter of the layer wins; if none
 * does, the best recall at that quarter.  L is the job's sparse.L, 2x and 4x it; K steps down from
 * training's automatic K (at most 8 steps) and stops two K past the
 * cheapest of its L (see ar__lsh_infer_choose).  Everything is seeded, so
 * the choice repeats exactly.  K, L or B set by hand (accelrt eval
 * --lsh-K, --lsh-L, --lsh-budget; sparse.K in the job file for K) are kept
 * and only the others chosen.
 *
 * These tables are inference's alone: training and its tables are not
 * touched (memory beyond the job's plan: L tables of the layer's ids). */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include "engine_impl.h"

#include "accelrt/lsh.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

struct ar_lsh_index {
  int K, L;
  uint32_t budget; /* candidates scored per point; 0: every one retrieved */
  uint32_t neurons, in;
  ar_lsh_sample_opts so;
  ar_lsh_hash *hash;
  ar_lsh_tables *tables;
  int nt;
  ar_lsh_scratch **scr; /* (nt) */
  uint32_t *buckets;    /* (nt, L) */
  uint32_t *cand;       /* (nt, neurons) */
  float *score;         /* (nt, neurons) */
  int32_t *top;         /* (batch, 5) */
  int *ntop;            /* (batch) */
  double hash_cost;     /* hashing one point, in row dot products */
  bool srp;
  int64_t scored, points; /* candidates scored and points, since the reset */
};

void ar__lsh_index_destroy(ar_lsh_index *ix) {
  if (!ix)
    return;
  for (int t = 0; ix->scr && t < ix->nt; t++)
    ar_lsh_scratch_destroy(ix->scr[t]);
  ar_free(ix->scr);
  ar_free(ix->buckets);
  ar_free(ix->cand);
  ar_free(ix->score);
  ar_free(ix->top);
  ar_free(ix->ntop);
  ar_lsh_tables_destroy(ix->tables);
  ar_lsh_hash_destroy(ix->hash);
  ar_free(ix);
}

double ar__lsh_index_scored(ar_lsh_index *ix, bool reset) {
  double v = ix->points ? (double)ix->scored / (double)ix->points : 0;
  if (reset)
    ix->scored = ix->points = 0;
  return v;
}

static void set_budget(ar_lsh_index *ix, uint32_t budget) {
  ix->budget = budget;
  ix->so.budget = budget;
  ix->so.max_active = budget; /* 0: every id retrieved */
}

/* Tables of K codes and L tables over the output layer's rows, seeded
 * from the job's seed and K (not training's hash functions). */
static ar_status index_create(ar_model *m, int K, int L, uint32_t budget, ar_lsh_index **out,
                              ar_err *err) {
  const ar_spec *spec = m->spec;
  const int lo = m->n_layers - 1;
  const ar_layer *O = &m->layers[lo];
  const ar_sparse_spec *sp = &spec->layers[lo].sparse;
  *out = NULL;
  ar_lsh_index *ix = ar_calloc(1, sizeof *ix);
  if (!ix)
    return ar_errf(err, AR_NOMEM, "out of host memory for the inference tables");
  ix->K = K;
  ix->L = L;
  ix->neurons = (uint32_t)O->out;
  ix->in = (uint32_t)O->in;
  int nt = ar_plan_threads(spec), dt = ar_device_threads(m->dev);
  ix->nt = dt > 0 && dt < nt ? dt : nt < 1 ? 1 : nt;
  ar_lsh_hash_opts ho;
  ar_lsh_tables_opts to;
  ar__sampled_opts(spec, lo, O->in, K, &ho, &to);
  ho.L = (uint32_t)L;
  ho.seed = spec->seed * 1000003u + (uint64_t)lo * 7919u + 0x51ed27u * (uint64_t)K +
            0x2545f4u * (uint64_t)L + 17u;
  to.threads = ix->nt;
  static const ar_lsh_strategy strat[] = {AR_LSH_UNION, AR_LSH_TOPK, AR_LSH_THRESHOLD};
  ix->so = (ar_lsh_sample_opts)AR_LSH_SAMPLE_OPTS_INIT;
  ix->so.strategy = strat[sp->sampling];
  ix->so.threshold = (uint32_t)sp->threshold;
  set_budget(ix, budget);
  ar_status st = ar_lsh_hash_create(&ho, &ix->hash, err);
  if (st == AR_OK)
    st = ar_lsh_tables_create(ix->hash, &to, &ix->tables, err);
  if (st == AR_OK) {
    const ar_lsh_hash_opts *r = ar_lsh_hash_opts_get(ix->hash);
    /* SRP's share of non-zero inputs is the caller's to apply (1 here). */
    double per = r->family == AR_LSH_SRP ? 1.0 : (double)r->bin_size / (double)ix->in;
    ix->hash_cost = (double)K * (double)L * per;
    ix->srp = r->family == AR_LSH_SRP;
    ix->scr = ar_calloc((size_t)ix->nt, sizeof *ix->scr);
    ix->buckets = ar_malloc((size_t)ix->nt * (size_t)L * sizeof *ix->buckets);
    ix->cand = ar_malloc((size_t)ix->nt * ix->neurons * sizeof *ix->cand);
    ix->score = ar_malloc((size_t)ix->nt * ix->neurons * sizeof *ix->score);
    ix->top = ar_malloc((size_t)m->batch * 5 * sizeof *ix->top);
    ix->ntop = ar_malloc((size_t)m->batch * sizeof *ix->ntop);
    if (!ix->scr || !ix->buckets || !ix->cand || !ix->score || !ix->top || !ix->ntop)
      st = ar_errf(err, AR_NOMEM, "out of host memory for the inference tables");
  }
  for (int t = 0; st == AR_OK && t < ix->nt; t++)
    st = ar_lsh_scratch_create(ix->hash, ix->tables, &ix->scr[t], err);
  if (st == AR_OK && (st = ar_lsh_tables_build(ix->tables, ix->hash, O->w, ix->neurons,
                                               (size_t)O->in)) != AR_OK)
    ar_errf(err, st, "building the inference tables (K=%d, L=%d): %s", K, L,
            ar_lsh_tables_errmsg(ix->tables));
  if (st != AR_OK) {
    ar__lsh_index_destroy(ix);
    return st;
  }
  *out = ix;
  return AR_OK;
}

/* The output layer's input for row r, after the layers below it ran. */
static ar_lsh_input out_input(const ar_model *m, int64_t r) {
  const int lo = m->n_layers - 1;
  const int64_t in = m->layers[lo].in;
  ar_lsh_input x = {NULL, NULL, NULL, 0};
  if (lo == 0 && m->spec->input.sparse) {
    x.idx = (const uint32_t *)(m->idx + m->row_ptr[r]);
    x.val = m->val + m->row_ptr[r];
    x.nnz = (size_t)(m->row_ptr[r + 1] - m->row_ptr[r]);
  } else {
    x.dense = (lo == 0 ? m->x : m->layers[lo - 1].y) + r * in;
  }
  return x;
}

/* Loads b and runs every layer below the output one as evaluation does. */
static ar_status load_below(ar_model *m, const ar_batch *b) {
  AR_CHECK(ar_model_load(m, b));
  for (int l = 0; m->rows > 0 && l + 1 < m->n_layers; l++) {
    if (m->layers[l].smp)
      AR_CHECK(ar__sampled_full(m, l));
    else
      ar_model_forward_layer(m, l);
  }
  return AR_OK;
}

/* Candidates of row r by thread t's buffers, so: retrieval options.
 * *n: how many; they are ix->cand + t * neurons. */
static ar_status retrieve(const ar_model *m, const ar_lsh_index *ix, const ar_lsh_sample_opts *so,
                          int t, int64_t r, size_t *n, ar_err *e) {
  ar_lsh_input x = out_input(m, r);
  uint32_t *bk = ix->buckets + (size_t)t * (size_t)ix->L;
  ar_lsh_scratch *scr = ix->scr[t];
  ar_status st = x.dense ? ar_lsh_hash_dense(ix->hash, x.dense, scr, bk)
                         : ar_lsh_hash_sparse(ix->hash, x.idx, x.val, x.nnz, scr, bk);
  ar_rng rng; /* never drawn from: no random top-up at inference */
  ar_rng_seed(&rng, 1, 0);
  if (st == AR_OK)
    st = ar_lsh_sample(ix->tables, bk, so, NULL, 0, scr, &rng, ix->cand + (size_t)t * ix->neurons,
                       ix->neurons, n);
  if (st != AR_OK)
    ar_errf(e, st, "retrieving inference candidates: %s", ar_lsh_scratch_errmsg(scr));
  return st;
}

/* The (up to) 5 best of n scores, best first, ties to the earlier one. */
static int best5(const float *v, const uint32_t *ids, size_t n, int32_t *top) {
  size_t pick[5];
  int k = 0;
  for (; k < 5 && (size_t)k < n; k++) {
    size_t bi = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
      bool used = false;
      for (int q = 0; q < k; q++)
        used |= pick[q] == i;
      if (!used && (bi == SIZE_MAX || v[i] > v[bi]))
        bi = i;
    }
    pick[k] = bi;
    top[k] = (int32_t)ids[bi];
  }
  return k;
}

ar_status ar__lsh_index_eval_batch(ar_model *m, ar_lsh_index *ix, const ar_batch *b,
                                   ar_eval_acc *acc) {
  AR_CHECK(load_below(m, b));
  const ar_layer *O = &m->layers[m->n_layers - 1];
  const ar_lsh_rows W = {O->w, O->b, ix->neurons, ix->in, (size_t)O->in};
  ar_status fst = AR_OK;
  int64_t asum = 0;
#pragma omp parallel for num_threads(ix->nt) schedule(static) reduction(+ : asum)
  for (int64_t r = 0; r < m->rows; r++) {
    const int t = omp_get_thread_num();
    ar_err e = AR_ERR_INIT;
    size_t n = 0;
    ar_status st = retrieve(m, ix, &ix->so, t, r, &n, &e);
    uint32_t *cand = ix->cand + (size_t)t * ix->neurons;
    float *sc = ix->score + (size_t)t * ix->neurons;
    ar_lsh_input x = out_input(m, r);
    if (st == AR_OK)
      st = ar_lsh_forward(&W, &x, cand, n, AR_LSH_ACT_NONE, sc, &e);
    if (st != AR_OK) {
#pragma omp critical(ar_lsh_infer_fail)
      if (fst == AR_OK) {
        fst = st;
        m->err = e;
      }
      continue;
    }
    ix->ntop[r] = best5(sc, cand, n, ix->top + r * 5);
    asum += (int64_t)n;
  }
  if (fst != AR_OK)
    return fst;
  for (int64_t r = 0; r < m->rows; r++)
    ar__count_hits(acc, ix->top + r * 5, ix->ntop[r], b->lab + b->lab_ptr[r],
                   b->lab_ptr[r + 1] - b->lab_ptr[r]);
  acc->rows += m->rows;
  ix->scored += asum;
  ix->points += m->rows;
  return AR_OK;
}

/* Exact top-1 of each row of b into top1 (every output scored). */
static ar_status exact_top1(ar_model *m, const ar_batch *b, int32_t *top1) {
  AR_CHECK(load_below(m, b));
  if (m->rows == 0)
    return AR_OK;
  const int lo = m->n_layers - 1;
  ar_layer *O = &m->layers[lo];
  if (O->smp)
    AR_CHECK(ar__sampled_full(m, lo));
  else
    ar_model_forward_layer(m, lo);
  ar_device_topk(m->dev, m->rows, O->out, O->y, 1, m->topk);
  return ar_device_copy_out(m->dev, top1, m->topk, (size_t)m->rows * sizeof *top1);
}

/* Per-point retrieval of the rows of b (loaded by the caller): the rank
 * (1-based; UINT32_MAX: not retrieved) of top1[r] among the candidates
 * retrieved with options so, how many were retrieved, and (labels) how
 * many of the row's true labels were. */
static ar_status rank_rows(ar_model *m, const ar_lsh_index *ix, const ar_lsh_sample_opts *so,
                           const ar_batch *b, const int32_t *top1, uint32_t *rank, uint32_t *nret,
                           int64_t *labels_found, ar_err *err) {
  ar_status fst = AR_OK;
  int64_t found = 0;
#pragma omp parallel for num_threads(ix->nt) schedule(static) reduction(+ : found)
  for (int64_t r = 0; r < m->rows; r++) {
    const int t = omp_get_thread_num();
    ar_err e = AR_ERR_INIT;
    size_t n = 0;
    ar_status st = retrieve(m, ix, so, t, r, &n, &e);
    if (st != AR_OK) {
#pragma omp critical(ar_lsh_infer_fail)
      if (fst == AR_OK) {
        fst = st;
        *err = e;
      }
      continue;
    }
    const uint32_t *cand = ix->cand + (size_t)t * ix->neurons;
    rank[r] = UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
      if (cand[i] == (uint32_t)top1[r])
        rank[r] = (uint32_t)i + 1;
      for (int64_t q = b->lab_ptr[r]; q < b->lab_ptr[r + 1]; q++)
        found += cand[i] == (uint32_t)b->lab[q];
    }
    nret[r] = (uint32_t)n;
  }
  *labels_found += found;
  return fst;
}

/* ---- the probe --------------------------------------------------------- */

typedef struct probe {
  int nb;           /* batches */
  ar_batch *b;      /* (nb) the sampled training points */
  int64_t points;
  double nonzero;   /* the output layer's inputs: mean share of non-zeros */
  int32_t *top1;    /* (points) exact top-1 */
  uint32_t *rank, *nret, *sorted; /* (points) */
} probe;

static void probe_fini(probe *p) {
  for (int i = 0; p->b && i < p->nb; i++)
    ar_batch_fini(&p->b[i]);
  ar_free(p->b);
  ar_free(p->top1);
  ar_free(p->rank);
  ar_free(p->nret);
  ar_free(p->sorted);
}

/* Appends row r of s to d. */
static void put_row(ar_batch *d, const ar_batch *s, int64_t r) {
  int64_t f0 = s->row_ptr[r], f1 = s->row_ptr[r + 1], l0 = s->lab_ptr[r], l1 = s->lab_ptr[r + 1];
  int64_t fn = d->row_ptr[d->rows], ln = d->lab_ptr[d->rows];
  memcpy(d->idx + fn, s->idx + f0, (size_t)(f1 - f0) * sizeof *d->idx);
  memcpy(d->val + fn, s->val + f0, (size_t)(f1 - f0) * sizeof *d->val);
  memcpy(d->lab + ln, s->lab + l0, (size_t)(l1 - l0) * sizeof *d->lab);
  d->row_ptr[d->rows + 1] = fn + f1 - f0;
  d->lab_ptr[d->rows + 1] = ln + l1 - l0;
  d->rows++;
}

/* Every stride-th training point from a seeded offset, up to want. */
static ar_status probe_read(ar_model *m, ar_reader *tr, int64_t want, uint64_t seed, probe *p,
                            ar_err *err) {
  const ar_data_stats *ds = ar_reader_stats(tr);
  int64_t n = ds->points, stride = n / want > 1 ? n / want : 1;
  int64_t off = (int64_t)(ar_mix64(seed ^ 0x70726f6265ull) % (uint64_t)stride), seen = 0;
  int64_t B = m->batch;
  p->nb = (int)((want + B - 1) / B);
  p->b = ar_calloc((size_t)p->nb, sizeof *p->b);
  p->top1 = ar_malloc((size_t)want * sizeof *p->top1);
  p->rank = ar_malloc((size_t)want * sizeof *p->rank);
  p->nret = ar_malloc((size_t)want * sizeof *p->nret);
  p->sorted = ar_malloc((size_t)want * sizeof *p->sorted);
  if (!p->b || !p->top1 || !p->rank || !p->nret || !p->sorted)
    return ar_errf(err, AR_NOMEM, "out of host memory for the inference probe");
  for (int i = 0; i < p->nb; i++)
    if (ar_batch_init(&p->b[i], B, m->max_nnz, m->max_labels) != AR_OK)
      return ar_errf(err, AR_NOMEM, "out of host memory for the inference probe");
  ar_batch rb;
  AR_CHECK(ar_batch_init(&rb, B, ds->max_nnz < 1 ? 1 : ds->max_nnz,
                         ds->max_labels < 1 ? 1 : ds->max_labels));
  ar_status st = ar_reader_rewind(tr, 0, err);
  while (st == AR_OK && p->points < want) {
    if ((st = ar_reader_next(tr, B, &rb, err)) != AR_OK || rb.rows == 0)
      break;
    for (int64_t r = 0; r < rb.rows && p->points < want; r++, seen++)
      if (seen % stride == off) {
        put_row(&p->b[p->points / B], &rb, r);
        p->points++;
      }
  }
  ar_batch_fini(&rb);
  return st;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Builds tables of K codes and measures the probe with them: the budget
 * reaching the recall target (or the fixed one) and its recall and cost. */
static ar_status try_K(ar_model *m, int K, int L, probe *p, double target, uint32_t fixed_B,
                       uint32_t max_B, ar_lsh_index **ixo, ar_lsh_try *tr, ar_err *err) {
  ar_lsh_index *ix = NULL;
  AR_CHECK(index_create(m, K, L, 0, &ix, err));
  ar_status st = AR_OK;
  int64_t labels_found = 0;
  for (int i = 0; st == AR_OK && i < p->nb; i++) {
    const int64_t at = (int64_t)i * m->batch;
    st = load_below(m, &p->b[i]);
    if (st == AR_OK)
      st = rank_rows(m, ix, &ix->so, &p->b[i], p->top1 + at, p->rank + at, p->nret + at,
                     &labels_found, err);
  }
  if (st != AR_OK) {
    ar__lsh_index_destroy(ix);
    return st;
  }
  memcpy(p->sorted, p->rank, (size_t)p->points * sizeof *p->sorted);
  qsort(p->sorted, (size_t)p->points, sizeof *p->sorted, cmp_u32);
  int64_t need = (int64_t)ceil(target * (double)p->points - 1e-9);
  need = need < 1 ? 1 : need > p->points ? p->points : need;
  uint32_t B = fixed_B;
  tr->reached = false;
  if (!B) {
    uint32_t r = p->sorted[need - 1];
    tr->reached = r <= max_B;
    B = tr->reached ? r : max_B;
    /* Reached: the budget of a fifth of the misses (0.99 for 0.95), as far
     * as the quarter of the layer allows.  A budget set exactly at the
     * probe's target left P@1 0.2 points under a hand-set K whose budget
     * happened to reach further (bench/lsh/inference at 100,000 labels). */
    int64_t hi = (int64_t)ceil((1.0 - (1.0 - target) / 5.0) * (double)p->points - 1e-9);
    hi = hi < need ? need : hi > p->points ? p->points : hi;
    if (tr->reached && p->sorted[hi - 1] > B)
      B = p->sorted[hi - 1] <= max_B ? p->sorted[hi - 1] : max_B;
  }
  double cand = 0, counted = 0;
  int64_t hit = 0;
  for (int64_t i = 0; i < p->points; i++) {
    cand += p->nret[i] < B ? p->nret[i] : B;
    counted += p->nret[i];
    hit += p->rank[i] <= B;
  }
  if (fixed_B)
    tr->reached = (double)hit >= (double)need;
  tr->K = K;
  tr->L = L;
  tr->budget = B;
  tr->recall = (double)hit / (double)p->points;
  tr->candidates = cand / (double)p->points;
  tr->retrieved = counted / (double)p->points;
  tr->cost = tr->candidates + tr->retrieved / 8.0 + ix->hash_cost * (ix->srp ? p->nonzero : 1);
  set_budget(ix, B);
  *ixo = ix;
  return AR_OK;
}

/* Whether tables of K codes and L tables over the output layer take at
 * most 4 times its weights' bytes. */
static bool tables_fit(const ar_model *m, int K, int L) {
  const int lo = m->n_layers - 1;
  const ar_layer *O = &m->layers[lo];
  ar_lsh_hash_opts ho, r;
  ar_lsh_tables_opts to;
  ar__sampled_opts(m->spec, lo, O->in, K, &ho, &to);
  ho.L = (uint32_t)L;
  ar_err e = AR_ERR_INIT;
  size_t bytes = 0;
  if (ar_lsh_hash_opts_resolve(&ho, &r, &e) != AR_OK ||
      ar_lsh_tables_bytes((uint32_t)L, 1u << r.bits, &to, &bytes, &e) != AR_OK)
    return false;
  return (double)bytes <= 4.0 * (double)O->out * (double)O->in * sizeof(float);
}

/* Whether a beats b: reaching the target first, then the cheaper (or,
 * neither reaching it, the better recall, then the cheaper). */
static bool better(const ar_lsh_try *a, const ar_lsh_try *b) {
  if (a->reached != b->reached)
    return a->reached;
  if (!a->reached && a->recall != b->recall)
    return a->recall > b->recall;
  return a->cost < b->cost;
}

ar_status ar__lsh_infer_choose(ar_model *m, ar_reader *train, const ar_eval_opts *o,
                               ar_eval_report *out, ar_lsh_index **ixo, ar_err *err) {
  const ar_spec *spec = m->spec;
  const int lo = m->n_layers - 1;
  const ar_sparse_spec *sp = &spec->layers[lo].sparse;
  const int64_t width = spec->layers[lo].width;
  *ixo = NULL;
  int K0 = ar_model_sampled_K(m, lo);
  int L = o->lsh_L > 0 ? o->lsh_L : sp->L;
  int handK = o->lsh_K > 0 ? o->lsh_K : sp->K > 0 ? sp->K : 0;
  uint32_t fixed_B = (uint32_t)(o->lsh_budget > 0 ? (o->lsh_budget < width ? o->lsh_budget : width)
                                                  : 0);
  uint32_t max_B = (uint32_t)(width / 4 > 1 ? width / 4 : 1);
  double target = o->lsh_recall > 0 ? o->lsh_recall : AR_EVAL_LSH_RECALL;
  int64_t want = o->lsh_probe > 0 ? o->lsh_probe : 512;
  out->lsh_K_auto = K0;
  out->lsh_L = L;
  out->lsh_recall_target = target;
  out->lsh_K_hand = handK > 0;
  out->lsh_L_hand = o->lsh_L > 0;
  out->lsh_budget_hand = fixed_B > 0;
  probe p;
  memset(&p, 0, sizeof p);
  ar_status st = probe_read(m, train, want, spec->seed, &p, err);
  if (st == AR_OK && p.points == 0)
    st = ar_errf(err, AR_NOTFOUND, "the training split has no points to choose the inference "
                 "tables from");
  for (int i = 0; st == AR_OK && i < p.nb; i++) {
    st = exact_top1(m, &p.b[i], p.top1 + (int64_t)i * m->batch);
    for (int64_t r = 0; st == AR_OK && r < m->rows; r++) {
      ar_lsh_input x = out_input(m, r);
      size_t nz = x.nnz;
      for (uint32_t j = 0; x.dense && j < m->layers[m->n_layers - 1].in; j++)
        nz += x.dense[j] != 0.0f;
      p.nonzero += (double)nz / (double)m->layers[m->n_layers - 1].in;
    }
  }
  if (p.points > 0)
    p.nonzero /= (double)p.points;
  out->lsh_probe_points = p.points;
  ar_lsh_index *best = NULL;
  ar_lsh_try bt;
  memset(&bt, 0, sizeof bt);
  /* More tables order the candidates better (an id's count over L tables
   * is a finer estimate of its angle) at the cost of hashing: L, 2L and
   * 4L are tried unless L is set (while the tables take at most 4 times
   * the layer's weights), each with K from K0 downwards; with more tables
   * the cheapest K grows, so a larger L starts 2 above the previous one's
   * cheapest K. */
  int hi = handK > 0 ? handK : K0, lo_K = handK > 0 ? handK : (K0 - 8 > 1 ? K0 - 8 : 1);
  int prev_K = 0;
  for (int li = 0; st == AR_OK && li < (o->lsh_L > 0 ? 1 : 3); li++) {
    int Lt = L << li;
    if (Lt > 1024 || (li > 0 && !tables_fit(m, hi, Lt)))
      break;
    int top = prev_K > 0 && prev_K + 2 < hi ? prev_K + 2 : hi;
    double lbest = INFINITY; /* the cheapest setting reaching the target at this L */
    prev_K = 0;
    for (int K = top, worse = 0; st == AR_OK && K >= lo_K && worse < 2; K--) {
      ar_lsh_index *ix = NULL;
      ar_lsh_try t;
      if ((st = try_K(m, K, Lt, &p, target, fixed_B, max_B, &ix, &t, err)) != AR_OK)
        break;
      if (out->lsh_n_tried < AR_EVAL_LSH_TRIES)
        out->lsh_tried[out->lsh_n_tried++] = t;
      bool win = !best || better(&t, &bt);
      if (win) {
        ar__lsh_index_destroy(best);
        best = ix;
        bt = t;
      } else {
        ar__lsh_index_destroy(ix);
      }
      /* Stop two K past this L's cheapest (once one reached the target). */
      if (t.reached && t.cost < lbest) {
        lbest = t.cost;
        prev_K = K;
        worse = 0;
      } else if (lbest < INFINITY) {
        worse++;
      }
    }
  }
  probe_fini(&p);
  if (st != AR_OK && !err->msg[0] && m->err.msg[0])
    ar_errf(err, st, "%s", m->err.msg);
  if (st != AR_OK) {
    ar__lsh_index_destroy(best);
    return st;
  }
  out->lsh_K = bt.K;
  out->lsh_L = bt.L;
  out->lsh_budget = bt.budget;
  out->lsh_probe_recall = bt.recall;
  out->lsh_probe_candidates = bt.candidates;
  out->lsh_reached = bt.reached;
  *ixo = best;
  return AR_OK;
}

ar_status ar__lsh_infer_recall(ar_model *m, ar_lsh_index *ix, ar_reader *r, ar_batch *b,
                               int64_t max_points, ar_eval_report *out, ar_err *err) {
  int32_t *top1 = ar_malloc((size_t)m->batch * sizeof *top1);
  uint32_t *rank = ar_malloc((size_t)m->batch * sizeof *rank);
  uint32_t *nret = ar_malloc((size_t)m->batch * sizeof *nret);
  ar_status st = top1 && rank && nret ? ar_reader_rewind(r, 0, err)
                                      : ar_errf(err, AR_NOMEM, "out of host memory");
  int64_t points = 0, hit = 0, labels = 0, found = 0;
  while (st == AR_OK) {
    int64_t want = max_points > 0 && max_points - points < b->cap_rows ? max_points - points
                                                                        : b->cap_rows;
    if (want <= 0 || (st = ar_reader_next(r, want, b, err)) != AR_OK || b->rows == 0)
      break;
    if ((st = exact_top1(m, b, top1)) != AR_OK)
      break;
    if ((st = rank_rows(m, ix, &ix->so, b, top1, rank, nret, &found, err)) != AR_OK)
      break;
    for (int64_t i = 0; i < b->rows; i++)
      hit += rank[i] != UINT32_MAX;
    labels += b->lab_ptr[b->rows];
    points += b->rows;
  }
  if (st == AR_OK && points > 0) {
    out->lsh_recall_top1 = (double)hit / (double)points;
    out->lsh_recall_labels = labels > 0 ? (double)found / (double)labels : 0;
  }
  if (st != AR_OK && m->err.msg[0] && !err->msg[0])
    ar_errf(err, st, "%s", m->err.msg);
  ar_free(top1);
  ar_free(rank);
  ar_free(nret);
  return st;
}
