/* LSH-sampled layers (SLIDE, Chen et al., MLSys 2020) inside the model.
 *
 * A sampled layer keeps its weights as (out, in) rows in the model's
 * planned memory, like a dense hidden layer, plus hash tables over those
 * rows (lsh/).  One training iteration, per sample of the batch and in
 * parallel over samples (SLIDE §4.1: one sample per thread, HOGWILD adds
 * into shared gradient rows): hash the layer's input, retrieve the active
 * set from the tables (the output layer's true labels always included),
 * compute only those neurons, then backward into only their gradient
 * rows.  The optimizer then updates only the rows touched in the batch
 * (sparse Adam with the skipped steps' decay, lsh/kernels.c), and the
 * tables are rebuilt on SLIDE's growing schedule.
 *
 * Dense layers before and after a sampled layer keep their batched device
 * ops: a sampled layer reads a dense input row (the previous dense layer's
 * y, the dense input), a sparse input row (the job's sparse input), or the
 * previous sampled layer's active set; it writes its activations into y
 * (zeros elsewhere) when a dense layer follows, and its input gradient
 * into the previous layer's gradient rows.
 *
 * Evaluation scores every neuron (exact P@k, comparable with the dense
 * path); LSH inference builds its own tables (lsh_infer.c).
 *
 * Both engines use this code: a chain model's layers through the
 * ar_model_* functions below, a graph model's sampled head (net_sampled.c)
 * through ar__sampled_new and the output layer's shared path on an
 * ar__sbatch (ar__sampled_head_forward/backward, engine_impl.h); the layer
 * keeps pointers to the rows and buffers its engine planned.
 *
 * Determinism: each sample draws from its own stream (seed, layer,
 * iteration, row), so the active sets do not depend on the thread count;
 * with one thread a run repeats bit for bit.  With several threads the
 * HOGWILD gradient adds are unordered, as in SLIDE.
 */
#include "engine_impl.h"

#include "accelrt/lsh.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct ar_sampled {
  int l;                /* its index in spec->layers: settings and seeds */
  const ar_spec *spec;  /* borrowed */
  const char *name;     /* borrowed, for messages */
  ar_device *dev;       /* borrowed: the shared negatives' GEMMs */
  float *w, *b, *gw, *gb; /* (neurons, in), (neurons): the layer's rows and
                             their gradients, bound by the engine */
  uint32_t neurons, in;
  uint32_t cap;     /* active ids per sample, room */
  uint32_t budget;  /* ids retrieved per sample */
  uint32_t generation; /* hash functions drawn so far - 1 */
  int64_t rehash_step; /* the last step the rebuild schedule was checked at */
  ar_lsh_hash_opts hopts;
  ar_lsh_hash *hash;
  ar_lsh_tables *tables;
  ar_lsh_adam *adam;
  ar_lsh_touched *touched;
  ar_lsh_touched *changed; /* rows updated since the tables were last built */
  ar_lsh_rehash sched;
  ar_lsh_sample_opts so;
  int nt;                   /* threads an iteration uses, <= nscratch */
  int nscratch;             /* scratch sets: the plan's threads */
  ar_lsh_scratch **scratch; /* (nscratch) */
  uint32_t *buckets;        /* (nscratch, L) */
  uint32_t *active;         /* (batch, cap), planned ephemeral */
  uint32_t *n_active;       /* (batch) */
  float *out, *dout;        /* (batch, cap) */
  uint64_t *last;           /* (neurons), planned persistent */
  /* The shared negatives of a batch (output layer with a dense input):
   * planned ephemeral. */
  uint32_t scap;            /* room: ar_layer_shared_cap */
  uint32_t ns;              /* ids drawn for this batch */
  uint32_t negatives;       /* ids the batch draws at least (ar_layer_negatives) */
  bool logq;                /* correct their logits by log(neurons / ns) */
  uint32_t *sids;           /* (scap) */
  float *sw, *sgw;          /* (scap, in) their weight rows, gradient rows */
  float *sb, *sgb;          /* (scap) biases, bias gradients */
  float *sz;                /* (batch, scap) logits, then dL/dlogit */
  int32_t *spos;            /* (neurons) host: position in sids or -1 */
  ar_lsh_sample_opts so_own; /* retrieval only, no random top-up */
  ar_lsh_sample_opts so_wide; /* so_own's rescore x budget candidates */
  uint32_t rescore;         /* sparse.rescore > 1, else 0 */
  uint32_t *all;            /* 0..neurons-1 for full scoring of sparse inputs
                               (layer 0 behind the sparse input; else NULL) */
  ar_sampled_stats st;
};

/* The layer's rows as the lsh kernels see them. */
static ar_lsh_rows rows_of(const ar_sampled *s, bool grad) {
  ar_lsh_rows r = {grad ? s->gw : s->w, grad ? s->gb : s->b, s->neurons, s->in, (size_t)s->in};
  return r;
}

void ar__sampled_set_mem(ar_sampled *s, const ar__sampled_ptrs *p) {
  AR_ASSERT(p->w && p->b && p->gw && p->gb && p->active && p->n_active && p->out && p->dout);
  s->w = p->w;
  s->b = p->b;
  s->gw = p->gw;
  s->gb = p->gb;
  s->active = p->active;
  s->n_active = p->n_active;
  s->out = p->out;
  s->dout = p->dout;
  s->sids = p->sids;
  s->sw = p->sw;
  s->sgw = p->sgw;
  s->sb = p->sb;
  s->sgb = p->sgb;
  s->sz = p->sz;
}

/* Chain models: the layer's planned entries by name (plan.c). */
static void chain_ptrs(ar_model *m, int l, ar__sampled_ptrs *p) {
  const ar_layer *L = &m->layers[l];
  const char *n = L->name;
  *p = (ar__sampled_ptrs){L->w, L->b, L->gw, L->gb,
                          ar__plan_ptr(m, n, "lsh.active"), ar__plan_ptr(m, n, "lsh.n"),
                          ar__plan_ptr(m, n, "lsh.out"), ar__plan_ptr(m, n, "lsh.dout"),
                          ar__plan_ptr(m, n, "lsh.shared_ids"), ar__plan_ptr(m, n, "lsh.shared_w"),
                          ar__plan_ptr(m, n, "lsh.shared_gw"), ar__plan_ptr(m, n, "lsh.shared_b"),
                          ar__plan_ptr(m, n, "lsh.shared_gb"), ar__plan_ptr(m, n, "lsh.shared_z")};
}

void ar__sampled_bind(ar_model *m) {
  for (int l = 0; l < m->n_layers; l++) {
    ar_sampled *s = m->layers[l].smp;
    if (!s)
      continue;
    ar__sampled_ptrs p;
    chain_ptrs(m, l, &p);
    ar__sampled_set_mem(s, &p);
    s->last = ar__plan_ptr(m, m->layers[l].name, "lsh.last");
    AR_ASSERT(s->last);
  }
}

static ar_status make_hash(ar_sampled *s, ar_err *err) {
  ar_lsh_hash_destroy(s->hash);
  s->hash = NULL;
  s->hopts.seed = s->spec->seed * 1000003u + (uint64_t)s->l * 7919u + s->generation;
  return ar_lsh_hash_create(&s->hopts, &s->hash, err);
}

void ar__sampled_opts(const ar_spec *spec, int l, int64_t in, int K, ar_lsh_hash_opts *ho,
                      ar_lsh_tables_opts *to) {
  const ar_sparse_spec *sp = &spec->layers[l].sparse;
  const int64_t width = spec->layers[l].width;
  static const ar_lsh_family fam[] = {AR_LSH_SRP, AR_LSH_WTA, AR_LSH_DWTA, AR_LSH_DOPH};
  *ho = (ar_lsh_hash_opts)AR_LSH_HASH_OPTS_INIT;
  ho->family = fam[sp->hash];
  ho->dim = (uint32_t)in;
  ho->K = (uint32_t)(K > 0 ? K : sp->K > 0 ? sp->K : ar_sparse_auto_K(sp->hash, width));
  ho->L = (uint32_t)sp->L;
  *to = (ar_lsh_tables_opts)AR_LSH_TABLES_OPTS_INIT;
  to->neurons = (uint32_t)width;
  to->capacity = (uint32_t)sp->bucket;
  to->policy = sp->reservoir ? AR_LSH_RESERVOIR : AR_LSH_FIFO;
  to->seed = spec->seed + 31u * (uint64_t)l;
}

ar_status ar__sampled_bytes(const ar_spec *spec, int l, int64_t in, int K, int threads,
                            int64_t shared_cap, ar__sampled_mem *out, ar_err *err) {
  memset(out, 0, sizeof *out);
  const ar_layer_spec *ls = &spec->layers[l];
  if (ls->width > UINT32_MAX || in > UINT32_MAX)
    return ar_errf(err, AR_RANGE, "layer %s (%lld inputs, %lld outputs) is too large to "
                   "sample (at most 2^32 - 1 each); set its sparse.mode to dense", ls->name,
                   (long long)in, (long long)ls->width);
  ar_lsh_hash_opts ho, res;
  ar_lsh_tables_opts to;
  ar__sampled_opts(spec, l, in, K, &ho, &to);
  ar_err e = AR_ERR_INIT;
  ar_status st = ar_lsh_hash_opts_resolve(&ho, &res, &e);
  if (st == AR_OK)
    st = ar_lsh_hash_bytes(&res, &out->hash, &e);
  if (st == AR_OK)
    st = ar_lsh_tables_bytes(res.L, (uint32_t)1 << res.bits, &to, &out->tables, &e);
  if (st != AR_OK)
    return ar_errf(err, st, "layer %s's hash tables: %s", ls->name, e.msg);
  /* Below 2^32 neurons, 2^16 codes and the plan's thread count, none of
   * these products overflows 64 bits. */
  const uint64_t n = (uint64_t)ls->width, T = (uint64_t)(threads > 0 ? threads : 1);
  uint64_t scratch = T * (ar_lsh_scratch_bytes(res.K * res.L, (uint32_t)n) +
                          (uint64_t)res.L * sizeof(uint32_t));
  uint64_t ids = (shared_cap != 0 ? n * sizeof(int32_t) : 0) +
                 (l == 0 && spec->input.sparse ? n * sizeof(uint32_t) : 0);
  if (scratch > SIZE_MAX)
    return ar_errf(err, AR_RANGE, "layer %s: scratch for %llu threads does not fit in memory; "
                   "lower train.threads", ls->name, (unsigned long long)T);
  out->scratch = (size_t)scratch;
  out->touched = 2 * ar_lsh_touched_bytes((uint32_t)n);
  out->ids = (size_t)ids;
  return AR_OK;
}

static ar_lsh_tables_opts tables_opts(const ar_sampled *s) {
  ar_lsh_hash_opts ho;
  ar_lsh_tables_opts to;
  ar__sampled_opts(s->spec, s->l, s->in, (int)s->hopts.K, &ho, &to);
  to.threads = s->nt;
  return to;
}

/* Brings the tables up to date with the weights.  Only the rows updated
 * since the last build can have moved: when they are fewer than half the
 * layer (and the hash functions are the same), just they are re-hashed and
 * moved (ar_lsh_tables_reinsert); otherwise every row is.  (Re-hashing
 * only the most-updated tenth was tried: on Delicious the tables went stale
 * and P@1 fell from 66 to 38.) */
static ar_status rebuild(ar_sampled *s, bool full, bool first, ar_trace *trace, ar_err *err) {
  double t0 = ar_now();
  size_t n = 0;
  const uint32_t *ids = ar_lsh_touched_ids(s->changed, &n);
  ar_status st;
  ar_lsh_tables_stats ts;
  ar_lsh_tables_stats_get(s->tables, &ts);
  bool in_place = !full && ts.neurons_built == s->neurons && n < s->neurons / 2;
  if (in_place) {
    st = ar_lsh_tables_reinsert(s->tables, s->hash, s->w, (size_t)s->in, ids, n);
    s->st.reinserted += (int64_t)n;
  } else {
    st = ar_lsh_tables_build(s->tables, s->hash, s->w, s->neurons, (size_t)s->in);
  }
  ar_lsh_touched_clear(s->changed);
  if (st != AR_OK)
    return ar_errf(err, st, "layer %s: rebuilding the hash tables: %s", s->name,
                   ar_lsh_tables_errmsg(s->tables));
  double t1 = ar_now();
  if (first)
    s->st.first_build_s += t1 - t0;
  else {
    s->st.rehash_s += t1 - t0;
    s->st.rehashes++;
  }
  if (trace) {
    static const char *const keys[] = {"rows"};
    ar_trace_span sp = {AR_TRACE_LSH, "lsh", in_place ? "lsh reinsert" : "lsh rebuild", s->name,
                        t0, t1, false, keys, {in_place ? (int64_t)n : s->neurons}, 1};
    ar_trace_add(trace, &sp);
  }
  return AR_OK;
}

/* Replays the rebuild schedule up to the model's step (after a resume) so
 * later rebuilds fall where they would have, and the hash generation
 * matches. */
static ar_status schedule_to(ar_sampled *s, int64_t step, ar_err *err) {
  const ar_sparse_spec *sp = &s->spec->layers[s->l].sparse;
  ar_lsh_rehash_opts ro = {(uint64_t)sp->rehash_every, sp->rehash_growth,
                           (uint64_t)sp->new_hash_every};
  AR_CHECK(ar_lsh_rehash_init(&s->sched, &ro, err));
  s->generation = 0;
  for (int64_t it = 1; it <= step; it++)
    if (ar_lsh_rehash_check(&s->sched, (uint64_t)it) == AR_LSH_REHASH_NEW_HASH)
      s->generation++;
  return AR_OK;
}

/* A sampled layer's settings refused at its item in the job file
 * (FILE:LINE:COL: error: model.layers[l]: ...), as a graph's items are. */
ar_status ar__sampled_check_train(const ar_spec *spec, int l, const char *name, ar_err *err) {
  char path[32];
  snprintf(path, sizeof path, "model.layers[%d]", l);
  const ar_srcpos *at = &spec->layers[l].pos;
  if (spec->train.optimizer != AR_OPT_ADAM)
    return ar_spec_item_errf(spec, at, path, err, AR_UNSUPPORTED,
                             "layer %s is LSH-sampled, which trains with Adam only; set "
                             "train.optimizer to adam or the layer's sparse.mode to dense",
                             name);
  if (spec->train.weight_decay > 0)
    return ar_spec_item_errf(spec, at, path, err, AR_UNSUPPORTED,
                             "layer %s is LSH-sampled, whose sparse Adam has no weight decay; "
                             "set train.optimizer's weight_decay to 0 or the layer's "
                             "sparse.mode to dense",
                             name);
  if (ar_layer_catch_up_refused(spec, l))
    return ar_spec_item_errf(spec, at, path, err, AR_UNSUPPORTED,
                             "layer %s: sparse.catch_up needs the Adam betas' beta1 < "
                             "sqrt(beta2) (beta1 %g, beta2 %g: dense Adam's moves on the "
                             "skipped steps would not shrink); lower beta1, raise beta2 or set "
                             "the layer's sparse.catch_up to 0",
                             name, spec->train.beta1, spec->train.beta2);
  return AR_OK;
}

ar_status ar__sampled_new(const ar__sampled_cfg *c, ar_sampled **out, ar_err *err) {
  *out = NULL;
  const ar_spec *spec = c->spec;
  const int l = c->l;
  const ar_sparse_spec *sp = &spec->layers[l].sparse;
  AR_CHECK(ar__sampled_check_train(spec, l, c->name, err));
  if (c->neurons > UINT32_MAX || c->in > UINT32_MAX)
    return ar_errf(err, AR_RANGE, "layer %s is too large to sample", c->name);
  ar_sampled *s = ar_calloc(1, sizeof *s);
  if (!s)
    return ar_errf(err, AR_NOMEM, "out of host memory for layer %s's hash tables", c->name);
  *out = s;
  s->l = l;
  s->spec = spec;
  s->name = c->name;
  s->dev = c->dev;
  s->neurons = (uint32_t)c->neurons;
  s->in = (uint32_t)c->in;
  s->last = c->last;
  ar__sampled_set_mem(s, &c->ptrs);
  s->budget = (uint32_t)ar_layer_budget(spec, l);
  s->cap = (uint32_t)ar_layer_active_cap(spec, l, c->max_labels);
  /* Scratch for the plan's threads (what it counts); iterations use at
   * most the device's. */
  s->nscratch = ar_plan_threads(spec);
  const int dev_threads = ar_device_threads(c->dev);
  s->nt = dev_threads > 0 && dev_threads < s->nscratch ? dev_threads : s->nscratch;
  ar_lsh_tables_opts to;
  ar__sampled_opts(spec, l, c->in, 0, &s->hopts, &to);
  AR_CHECK(schedule_to(s, c->step, err));
  AR_CHECK(make_hash(s, err));
  to = tables_opts(s);
  AR_CHECK(ar_lsh_tables_create(s->hash, &to, &s->tables, err));
  static const ar_lsh_strategy strat[] = {AR_LSH_UNION, AR_LSH_TOPK, AR_LSH_THRESHOLD};
  s->so.strategy = strat[sp->sampling];
  s->so.budget = s->budget;
  s->so.threshold = (uint32_t)sp->threshold;
  s->so.min_active = sp->min_active < 0 ? s->budget : (uint32_t)sp->min_active;
  s->so.max_active = s->cap;
  s->so_own = s->so;
  s->so_own.min_active = 0;
  s->scap = (uint32_t)ar_layer_shared_cap(spec, l, c->max_labels);
  if (sp->rescore > 1) {
    if (!s->scap && !c->shared)
      return ar_errf(err, AR_UNSUPPORTED, "layer %s: sparse.rescore works on an output "
                     "layer whose input is dense (a graph model's head, a chain's output "
                     "layer after a dense one); remove it from this layer", c->name);
    s->rescore = (uint32_t)sp->rescore;
    s->so_wide = s->so_own;
    const uint64_t wide = (uint64_t)s->budget * s->rescore;
    s->so_wide.budget = wide < s->neurons ? (uint32_t)wide : s->neurons;
  }
  s->negatives = (uint32_t)ar_layer_negatives(spec, l);
  s->logq = sp->correction < 0 ? spec->graph && !spec->lowered : sp->correction == 1;
  if (s->scap || c->shared) {
    s->spos = ar_malloc((size_t)s->neurons * sizeof *s->spos);
    if (!s->spos)
      return ar_errf(err, AR_NOMEM, "out of host memory for layer %s", c->name);
    for (uint32_t i = 0; i < s->neurons; i++)
      s->spos[i] = -1;
  }
  if (c->all_ids) {
    /* Every id, for scoring all neurons from the sparse input (sampled_full). */
    s->all = ar_malloc((size_t)s->neurons * sizeof *s->all);
    if (!s->all)
      return ar_errf(err, AR_NOMEM, "out of host memory for layer %s", c->name);
    for (uint32_t i = 0; i < s->neurons; i++)
      s->all[i] = i;
  }
  ar_lsh_adam_opts ao = {(float)spec->train.lr, (float)spec->train.beta1,
                         (float)spec->train.beta2, (float)spec->train.eps, s->nt,
                         (uint64_t)sp->catch_up};
  AR_CHECK(ar_lsh_adam_attach(s->neurons, s->in, &ao, c->s1w, c->s2w, c->s1b, c->s2b, s->last,
                              &s->adam, err));
  AR_CHECK(ar_lsh_touched_create(s->neurons, &s->touched, err));
  AR_CHECK(ar_lsh_touched_create(s->neurons, &s->changed, err));

  s->scratch = ar_calloc((size_t)s->nscratch, sizeof *s->scratch);
  s->buckets = ar_malloc((size_t)s->nscratch * (size_t)sp->L * sizeof *s->buckets);
  if (!s->scratch || !s->buckets)
    return ar_errf(err, AR_NOMEM, "out of host memory for layer %s's scratch", c->name);
  for (int t = 0; t < s->nscratch; t++)
    AR_CHECK(ar_lsh_scratch_create(s->hash, s->tables, &s->scratch[t], err));
  return AR_OK;
}

ar_status ar__sampled_create(ar_model *m, int l) {
  const ar_spec *spec = m->spec;
  ar_layer *L = &m->layers[l];
  AR_CHECK(ar__sampled_check_train(spec, l, L->name, &m->err));
  ar__sampled_cfg c = {spec, l, L->name, m->dev, L->in, L->out, m->max_labels, m->step,
                       false, l == 0 && spec->input.sparse, {0},
                       L->s1w, L->s2w, L->s1b, L->s2b,
                       ar__plan_ptr(m, L->name, "lsh.last")};
  chain_ptrs(m, l, &c.ptrs);
  AR_ASSERT(c.last);
  return ar__sampled_new(&c, &L->smp, &m->err);
}

int ar_model_sampled_K(const ar_model *m, int l) {
  const ar_sampled *s = m->layers[l].smp;
  AR_ASSERT(s);
  return (int)s->hopts.K;
}

ar_status ar_model_sampled_set_K(ar_model *m, int l, int K) {
  ar_sampled *s = m->layers[l].smp;
  AR_ASSERT(s && K > 0);
  if ((uint32_t)K == s->hopts.K)
    return AR_OK;
  /* The plan holds the tables, hash functions and scratch of the layer's
   * K; a K that needs more would leave it. */
  const ar_layer *L = &m->layers[l];
  ar__sampled_mem now, want;
  AR_CHECK(ar__sampled_bytes(m->spec, l, L->in, 0, s->nscratch, s->scap, &now, &m->err));
  AR_CHECK(ar__sampled_bytes(m->spec, l, L->in, K, s->nscratch, s->scap, &want, &m->err));
  if (want.tables + want.hash + want.scratch > now.tables + now.hash + now.scratch)
    return ar_errf(&m->err, AR_RANGE, "layer %s: tables with K=%d need %zu bytes, more than "
                   "the %zu its memory plan holds (K=%u); use a K of at most %u", L->name, K,
                   want.tables + want.hash + want.scratch, now.tables + now.hash + now.scratch,
                   s->hopts.K, s->hopts.K);
  s->hopts.K = (uint32_t)K;
  AR_CHECK(make_hash(s, &m->err));
  ar_lsh_tables_opts to = tables_opts(s);
  ar_lsh_tables *t = NULL;
  AR_CHECK(ar_lsh_tables_create(s->hash, &to, &t, &m->err));
  ar_lsh_tables_destroy(s->tables);
  s->tables = t;
  for (int i = 0; i < s->nscratch; i++) {
    ar_lsh_scratch_destroy(s->scratch[i]);
    s->scratch[i] = NULL;
    AR_CHECK(ar_lsh_scratch_create(s->hash, s->tables, &s->scratch[i], &m->err));
  }
  return rebuild(s, true, true, m->trace, &m->err);
}

ar_status ar__sampled_init(ar_model *m) {
  for (int l = 0; l < m->n_layers; l++) {
    ar_sampled *s = m->layers[l].smp;
    if (!s)
      continue;
    ar_layer *L = &m->layers[l];
    memset(L->gw, 0, (size_t)L->in * (size_t)L->out * sizeof(float));
    memset(L->gb, 0, (size_t)L->out * sizeof(float));
    memset(s->last, 0, (size_t)L->out * sizeof(uint64_t));
  }
  return ar_model_sampled_rebuild(m);
}

ar_status ar__sampled_reset(ar_sampled *s, int64_t step, ar_trace *trace, ar_err *err) {
  AR_CHECK(schedule_to(s, step, err));
  AR_CHECK(make_hash(s, err));
  AR_CHECK(rebuild(s, true, true, trace, err));
  ar_lsh_adam_set_t(s->adam, (uint64_t)step);
  s->rehash_step = step;
  return AR_OK;
}

ar_status ar_model_sampled_rebuild(ar_model *m) {
  for (int l = 0; l < m->n_layers; l++)
    if (m->layers[l].smp)
      AR_CHECK(ar__sampled_reset(m->layers[l].smp, m->step, m->trace, &m->err));
  return AR_OK;
}

void ar__sampled_destroy(ar_sampled *s) {
  if (!s)
    return;
  for (int t = 0; s->scratch && t < s->nscratch; t++)
    ar_lsh_scratch_destroy(s->scratch[t]);
  ar_free(s->scratch);
  ar_free(s->buckets);
  ar_free(s->all);
  ar_free(s->spos);
  ar_lsh_touched_destroy(s->touched);
  ar_lsh_touched_destroy(s->changed);

  ar_lsh_adam_destroy(s->adam);
  ar_lsh_tables_destroy(s->tables);
  ar_lsh_hash_destroy(s->hash);
  ar_free(s);
}

/* The input of layer l for row r of the batch.  prev_dense: the previous
 * layer was scored in full into its y (evaluation, inference). */
static ar_lsh_input input_of(const ar_model *m, int l, int64_t r, bool prev_dense) {
  ar_lsh_input x = {NULL, NULL, NULL, 0};
  const ar_layer *L = &m->layers[l];
  if (l == 0 && m->spec->input.sparse) {
    int64_t a = m->row_ptr[r], b = m->row_ptr[r + 1];
    x.idx = (const uint32_t *)(m->idx + a); /* ids are >= 0: same bits */
    x.val = m->val + a;
    x.nnz = (size_t)(b - a);
  } else if (l == 0) {
    x.dense = m->x + r * L->in;
  } else if (m->layers[l - 1].smp && !prev_dense) {
    const ar_sampled *p = m->layers[l - 1].smp;
    x.idx = p->active + (size_t)r * p->cap;
    x.val = p->out + (size_t)r * p->cap;
    x.nnz = p->n_active[r];
  } else {
    x.dense = m->layers[l - 1].y + r * L->in;
  }
  return x;
}

static ar_status hash_input(const ar_sampled *s, const ar_lsh_input *x, ar_lsh_scratch *scr,
                            uint32_t *buckets) {
  if (x->dense)
    return ar_lsh_hash_dense(s->hash, x->dense, scr, buckets);
  return ar_lsh_hash_sparse(s->hash, x->idx, x->val, x->nnz, scr, buckets);
}

static ar_lsh_act lsh_act(const ar_layer *L, bool last) {
  return !last && L->act == AR_ACT_RELU ? AR_LSH_ACT_RELU : AR_LSH_ACT_NONE;
}

/* Per-thread error capture: the first failing sample's message wins. */
typedef struct fail_box {
  ar_status st;
  char msg[sizeof(((ar_err *)0)->msg)];
} fail_box;

static void fail_note(fail_box *f, ar_status st, const char *msg) {
#pragma omp critical(ar_sampled_fail)
  if (f->st == AR_OK) {
    f->st = st;
    snprintf(f->msg, sizeof f->msg, "%s", msg);
  }
}

/* A per-row forward's seconds (summed over threads) and active ids into
 * the layer's statistics. */
static void count_forward(ar_sampled *s, double tq, double tc, int64_t asum, int64_t rows) {
  s->st.query_s += tq;
  s->st.compute_s += tc;
  s->st.active_sum += asum;
  s->st.samples += rows;
}

/* The random top-up's stream of row r at step (iterations done).  In
 * training every row of the batch draws from the same stream (r 0): the
 * rows share their random negatives (less those they retrieved), so a
 * step touches the retrieved rows plus one budget, not one budget per
 * row, and the sparse update costs what the retrieval costs.  The stream
 * does not depend on the threads. */
static void row_stream(const ar_sampled *s, int64_t step, uint64_t r, ar_rng *rng) {
  ar_rng_seed3(rng, s->spec->seed ^ 0x5a3d1e5bu, (uint64_t)step * 4096u + (uint64_t)s->l, r);
}

/* Row r's active set and its values, as every per-row forward computes
 * them (SLIDE §4.1): x hashed with this thread's scratch, the tables
 * sampled under so (the labels lab first; rng the random top-up's stream,
 * NULL: none), the active neurons scored (act) into the row of s->out.
 * The ids' count (in s->active's row and s->n_active[r] too), or -1 with
 * the failure noted in fb.  Query and compute seconds add to *tq, *tc. */
static int64_t row_forward(ar_sampled *s, const ar_lsh_input *x, int64_t r,
                           const ar_lsh_sample_opts *so, const uint32_t *lab, size_t nlab,
                           ar_rng *rng, ar_lsh_act act, double *tq, double *tc, fail_box *fb) {
  const int t = omp_get_thread_num();
  ar_lsh_scratch *scr = s->scratch[t];
  uint32_t *buckets = s->buckets + (size_t)t * ar_lsh_hash_L(s->hash);
  uint32_t *active = s->active + (size_t)r * s->cap;
  const ar_lsh_rows W = rows_of(s, false);
  double t0 = ar_now();
  size_t n = 0;
  ar_status st = hash_input(s, x, scr, buckets);
  if (st == AR_OK)
    st = ar_lsh_sample(s->tables, buckets, so, lab, nlab, scr, rng, active, s->cap, &n);
  if (st != AR_OK) {
    fail_note(fb, st, ar_lsh_scratch_errmsg(scr));
    return -1;
  }
  double t1 = ar_now();
  ar_err e = AR_ERR_INIT;
  st = ar_lsh_forward(&W, x, active, n, act, s->out + (size_t)r * s->cap, &e);
  if (st != AR_OK) {
    fail_note(fb, st, e.msg);
    return -1;
  }
  s->n_active[r] = (uint32_t)n;
  *tq += t1 - t0;
  *tc += ar_now() - t1;
  return (int64_t)n;
}

/* Row r's softmax loss over its n active outputs (the labels lab first)
 * into *loss, and their gradients into the row of s->dout, times inv_rows
 * (the batch loss is the mean over rows); a row without labels has no
 * loss and a zero gradient.  false with the failure noted in fb. */
static bool row_softmax(ar_sampled *s, int64_t r, size_t n, const uint32_t *lab, size_t nlab,
                        float inv_rows, double *loss, fail_box *fb) {
  const uint32_t *active = s->active + (size_t)r * s->cap;
  float *dout = s->dout + (size_t)r * s->cap;
  *loss = 0;
  if (nlab == 0) {
    memset(dout, 0, n * sizeof(float)); /* no labels: no loss */
    return true;
  }
  ar_err e = AR_ERR_INIT;
  ar_status st = ar_lsh_softmax_active(s->out + (size_t)r * s->cap, active, n, lab, nlab, dout,
                                       loss, &e);
  for (size_t i = 0; i < n; i++)
    dout[i] *= inv_rows;
  if (st != AR_OK)
    fail_note(fb, st, e.msg);
  return st == AR_OK;
}

/* Row r's n active values into its dense row y (zeros elsewhere, set by
 * the caller), where a dense layer reads them. */
static void row_scatter(const ar_sampled *s, int64_t r, int64_t n, float *y) {
  const uint32_t *active = s->active + (size_t)r * s->cap;
  const float *out = s->out + (size_t)r * s->cap;
  for (int64_t i = 0; i < n; i++)
    y[active[i]] = out[i];
}

/* Forward of sampled layer l over the batch.  training: labels join the
 * output layer's active set and its softmax loss and gradient are
 * computed here (loss_rows).  *loss_sum gets the summed row losses. */
static ar_status sampled_forward(ar_model *m, int l, bool training, double *loss_sum) {
  ar_layer *L = &m->layers[l];
  ar_sampled *s = L->smp;
  const bool last = l + 1 == m->n_layers;
  const bool scatter = training && !last && !m->layers[l + 1].smp;
  const ar_lsh_act act = lsh_act(L, last);
  const int64_t rows = m->rows;
  const float inv_rows = 1.0f / (float)(m->grad_rows > 0 ? m->grad_rows : rows);
  fail_box fb = {AR_OK, ""};
  double tq = 0, tc = 0, lsum = 0;
  int64_t asum = 0;
  if (scatter)
    memset(L->y, 0, (size_t)rows * (size_t)L->out * sizeof(float));
#pragma omp parallel for num_threads(s->nt) schedule(static) reduction(+ : tq, tc, lsum, asum)
  for (int64_t r = 0; r < rows; r++) {
    ar_lsh_input x = input_of(m, l, r, !training);
    const uint32_t *lab = NULL;
    size_t nlab = 0;
    if (last && training) {
      lab = (const uint32_t *)(m->lab + m->lab_ptr[r]);
      nlab = (size_t)(m->lab_ptr[r + 1] - m->lab_ptr[r]);
    }
    ar_rng rng;
    row_stream(s, m->step, training ? 0 : (uint64_t)r, &rng);
    const int64_t n = row_forward(s, &x, r, training ? &s->so : &s->so_own, lab, nlab, &rng, act,
                                  &tq, &tc, &fb);
    if (n < 0)
      continue;
    double t0 = ar_now(), loss = 0;
    if (last && training && !row_softmax(s, r, (size_t)n, lab, nlab, inv_rows, &loss, &fb))
      continue;
    lsum += loss;
    if (scatter)
      row_scatter(s, r, n, L->y + r * L->out);
    asum += n;
    tc += ar_now() - t0;
  }
  if (fb.st != AR_OK)
    return ar_errf(&m->err, fb.st, "layer %s: %s", L->name, fb.msg);
  count_forward(s, tq, tc, asum, rows);
  if (loss_sum)
    *loss_sum = lsum;
  return AR_OK;
}

/* Row r's backward over its active set (dout gathered first from the
 * output's dense gradient row dy when given), into the touched gradient
 * rows and dx (or NULL); a failure noted in fb. */
static void row_backward(ar_sampled *s, const ar_lsh_rows *W, const ar_lsh_rows *G,
                         ar_lsh_act act, const ar_lsh_input *x, int64_t r, const float *dy,
                         float *dx, fail_box *fb) {
  const uint32_t *active = s->active + (size_t)r * s->cap;
  const size_t n = s->n_active[r];
  float *dout = s->dout + (size_t)r * s->cap;
  for (size_t i = 0; dy && i < n; i++)
    dout[i] = dy[active[i]];
  ar_err e = AR_ERR_INIT;
  ar_status st = ar_lsh_backward(W, x, active, n, act, s->out + (size_t)r * s->cap, dout, G, dx,
                                 s->touched, &e);
  if (st != AR_OK)
    fail_note(fb, st, e.msg);
}

/* Backward of sampled layer l: its dout rows are ready (the loss for the
 * output layer, the next sampled layer's dx, or gathered here from the
 * next dense layer's dy). */
static ar_status sampled_backward(ar_model *m, int l) {
  ar_layer *L = &m->layers[l];
  ar_sampled *s = L->smp;
  const bool last = l + 1 == m->n_layers;
  const ar_lsh_act act = lsh_act(L, last);
  const int64_t rows = m->rows;
  const ar_lsh_rows W = rows_of(s, false), G = rows_of(s, true);
  ar_layer *P = l > 0 ? &m->layers[l - 1] : NULL;
  ar_sampled *ps = P ? P->smp : NULL;
  if (P && !ps)
    memset(P->dy, 0, (size_t)rows * (size_t)P->out * sizeof(float));
  if (ps)
    memset(ps->dout, 0, (size_t)rows * ps->cap * sizeof(float));
  const bool gather = !last && !m->layers[l + 1].smp;
  fail_box fb = {AR_OK, ""};
  double tc = 0;
#pragma omp parallel for num_threads(s->nt) schedule(static) reduction(+ : tc)
  for (int64_t r = 0; r < rows; r++) {
    double t0 = ar_now();
    ar_lsh_input x = input_of(m, l, r, false);
    float *dx = NULL;
    if (ps)
      dx = ps->dout + (size_t)r * ps->cap;
    else if (P)
      dx = P->dy + r * P->out;
    row_backward(s, &W, &G, act, &x, r, gather ? L->dy + r * L->out : NULL, dx, &fb);
    tc += ar_now() - t0;
  }
  if (fb.st != AR_OK)
    return ar_errf(&m->err, fb.st, "layer %s: %s", L->name, fb.msg);
  s->st.compute_s += tc;
  if (P && !ps)
    ar_device_act_grad(m->dev, rows * P->out, P->act, P->y, P->dy);
  return AR_OK;
}

/* ---- the output layer with shared negatives ---------------------------------
 * The random top-up is drawn once per batch (the rows share the stream,
 * see sampled_forward), so for an output layer whose input is a dense
 * batch it is computed as a batch: the shared ids' rows are gathered into a
 * small matrix and their logits for every row come from one GEMM, their
 * gradients from two more; only each row's own ids (its labels and what
 * the tables retrieved) go through the per-row kernels.  Each row's active
 * set is its own ids plus the shared ones it did not retrieve; the batch
 * draws max(negatives, min_active - mean own) shared ids uniformly
 * (ar_layer_negatives: by default the budget, at least 256 or an eighth
 * of the width), and when the room for them is half the layer or more,
 * the whole layer is shared (dense softmax with the labels' and retrieved
 * rows through the kernels).  Without the negatives, inputs that look
 * alike (a transformer's class tokens at the start) retrieve the same few
 * neurons and the others are never pushed down.  With sparse.correction:
 * logq each drawn id a row did not retrieve has its logit raised by
 * log(neurons / drawn), its chance of being drawn inverted, so the
 * normaliser estimates the full softmax's (the retrieved ids count as
 * sure, weight 1). */

static bool shared_path(const ar_model *m, int l) {
  const ar_sampled *s = m->layers[l].smp;
  if (!s || !s->scap || l + 1 != m->n_layers)
    return false;
  return l == 0 ? !m->spec->input.sparse : m->layers[l - 1].smp == NULL;
}

/* Draws this batch's shared ids: want distinct ids from the batch stream,
 * or the whole layer when want reaches the room (ar_layer_shared_cap is the
 * width when the top-up target is half the layer or more). */
static void draw_shared(ar_sampled *s, int64_t step, uint32_t want) {
  /* spos is all -1 here: shared_backward resets it while sids (ephemeral,
   * its bytes reused between iterations) still holds this batch's ids. */
  s->ns = 0;
  if (want > s->scap)
    want = s->scap;
  if (s->scap == s->neurons && want == s->scap) {
    for (uint32_t i = 0; i < s->scap; i++)
      s->sids[i] = i;
    s->ns = s->scap;
  } else {
    ar_rng rng;
    row_stream(s, step, 1u << 20, &rng);
    while (s->ns < want) {
      uint32_t id = (uint32_t)ar_rng_below(&rng, s->neurons);
      if (s->spos[id] < 0) {
        s->spos[id] = (int32_t)s->ns;
        s->sids[s->ns++] = id;
      }
    }
  }
  for (uint32_t k = 0; k < s->ns; k++)
    s->spos[s->sids[k]] = (int32_t)k;
}

/* Labels in lab[nlab] that are distinct: the sampler puts each once, first. */
static size_t distinct_labels(const int32_t *lab, size_t nlab) {
  size_t d = 0;
  for (size_t i = 0; i < nlab; i++) {
    bool again = false;
    for (size_t q = 0; q < i; q++)
      again |= lab[q] == lab[i];
    d += !again;
  }
  return d;
}

/* sparse.rescore: of row r's n candidates (its nlab labels first, then the
 * rescore x budget the tables ranked highest, their logits computed), the
 * labels and the budget with the highest logits stay.  The new count. */
static int64_t rescore_row(ar_sampled *s, int64_t r, int64_t n, const int32_t *lab,
                           size_t nlab) {
  const size_t fixed = distinct_labels(lab, nlab);
  const size_t kept = ar_lsh_keep_top(s->active + (size_t)r * s->cap, s->out + (size_t)r * s->cap,
                                      fixed, (size_t)n, s->budget);
  s->n_active[r] = (uint32_t)kept;
  return (int64_t)kept;
}

/* Step 1 of shared_forward: each row's own ids -- its labels, then what
 * the tables retrieve (sparse.rescore: the budget with the highest logits
 * among rescore x budget) -- and their logits.  Query and compute seconds
 * (summed over threads) and the ids' total go to *tq, *tc, *own_sum. */
static ar_status own_ids(ar_sampled *s, const ar__sbatch *b, double *tq_out, double *tc_out,
                         int64_t *own_out, ar_err *err) {
  const int64_t rows = b->rows, in = s->in;
  fail_box fb = {AR_OK, ""};
  double tq = 0, tc = 0;
  int64_t own_sum = 0;
#pragma omp parallel for num_threads(s->nt) schedule(static) reduction(+ : tq, tc, own_sum)
  for (int64_t r = 0; r < rows; r++) {
    ar_lsh_input x = {b->X + r * in, NULL, NULL, 0};
    const uint32_t *lab = (const uint32_t *)(b->lab + b->lab_ptr[r]);
    const size_t nlab = (size_t)(b->lab_ptr[r + 1] - b->lab_ptr[r]);
    int64_t n = row_forward(s, &x, r, s->rescore ? &s->so_wide : &s->so_own, lab, nlab, NULL,
                            AR_LSH_ACT_NONE, &tq, &tc, &fb);
    if (n > 0 && s->rescore) {
      const double t0 = ar_now();
      n = rescore_row(s, r, n, b->lab + b->lab_ptr[r], nlab);
      tc += ar_now() - t0;
    }
    own_sum += n > 0 ? n : 0;
  }
  *tq_out = tq;
  *tc_out = tc;
  *own_out = own_sum;
  if (fb.st != AR_OK)
    return ar_errf(err, fb.st, "layer %s: %s", s->name, fb.msg);
  return AR_OK;
}

/* Step 3 of shared_forward: softmax over each row's own ids and the
 * shared ids it did not retrieve (those are masked out of the shared
 * part); the loss summed over rows to *loss (each row's to b->row_loss
 * when given), the ids scored to *scored. */
static void shared_softmax(ar_sampled *s, const ar__sbatch *b, double *loss, int64_t *scored) {
  const int64_t rows = b->rows;
  const uint32_t ns = s->ns;
  const float inv_rows = b->inv_rows;
  /* Each shared id a row did not retrieve stands for neurons / ns of the
   * ids it did not retrieve (the batch drew ns of the neurons uniformly):
   * with the log-Q correction its logit carries that weight into the
   * softmax's normaliser, so the loss estimates the full softmax's. */
  const float corr = s->logq && ns < s->neurons ? (float)log((double)s->neurons / ns) : 0.0f;
  double lsum = 0;
  int64_t asum = 0;
#pragma omp parallel for num_threads(s->nt) schedule(static) reduction(+ : lsum, asum)
  for (int64_t r = 0; r < rows; r++) {
    const uint32_t *own = s->active + (size_t)r * s->cap;
    const size_t n = s->n_active[r];
    float *out = s->out + (size_t)r * s->cap, *dout = s->dout + (size_t)r * s->cap;
    float *z = s->sz + (size_t)r * ns;
    /* The sampler put the distinct labels first. */
    const size_t nlab = distinct_labels(b->lab + b->lab_ptr[r],
                                        (size_t)(b->lab_ptr[r + 1] - b->lab_ptr[r]));
    size_t dup = 0;
    if (corr != 0.0f)
      for (uint32_t j = 0; j < ns; j++)
        z[j] += corr;
    for (size_t i = 0; i < n; i++) {
      int32_t p = s->spos[own[i]];
      if (p >= 0) {
        z[p] = -INFINITY; /* counted once: as its own */
        dup++;
      }
    }
    asum += (int64_t)(n + ns - dup);
    if (b->row_loss)
      b->row_loss[r] = 0.0f;
    if (nlab == 0) { /* no labels: no loss, no gradient */
      memset(dout, 0, n * sizeof(float));
      for (uint32_t j = 0; j < ns; j++)
        z[j] = 0.0f;
      continue;
    }
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
      mx = out[i] > mx ? out[i] : mx;
    for (uint32_t j = 0; j < ns; j++)
      mx = z[j] > mx ? z[j] : mx;
    /* Each exponential once, kept where its gradient goes (dout, z). */
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
      dout[i] = expf(out[i] - mx);
      sum += dout[i];
    }
    for (uint32_t j = 0; j < ns; j++) {
      z[j] = expf(z[j] - mx); /* exp(-inf) = 0 for the masked */
      sum += z[j];
    }
    const double lse = log(sum) + mx, inv = 1.0 / sum;
    /* The labels come first among the own ids (always-include list). */
    double ce = 0.0;
    for (size_t i = 0; i < nlab && i < n; i++)
      ce -= (double)out[i] - lse;
    lsum += ce / (double)nlab;
    if (b->row_loss)
      b->row_loss[r] = (float)(ce / (double)nlab);
    const float tgt = (float)(1.0 / (double)nlab);
    for (size_t i = 0; i < n; i++)
      dout[i] = ((float)(dout[i] * inv) - (i < nlab ? tgt : 0.0f)) * inv_rows;
    for (uint32_t j = 0; j < ns; j++)
      z[j] = (float)(z[j] * inv) * inv_rows;
  }
  *loss = lsum;
  *scored = asum;
}

ar_status ar__sampled_head_forward(ar_sampled *s, const ar__sbatch *b, double *loss_sum,
                                   ar_err *err) {
  const int64_t rows = b->rows, in = s->in;
  double tq = 0, tc = 0, lsum = 0;
  int64_t own_sum = 0, asum = 0;
  AR_CHECK(own_ids(s, b, &tq, &tc, &own_sum, err));
  /* 2. The shared ids and their logits for every row: one GEMM. */
  double t0 = ar_now();
  uint32_t target = s->so.min_active, mean_own = (uint32_t)(own_sum / rows);
  uint32_t want = target > mean_own ? target - mean_own : 0;
  draw_shared(s, b->step, s->scap == s->neurons ? s->neurons
                          : want > s->negatives ? want
                                                : s->negatives);
  const uint32_t ns = s->ns;
  for (uint32_t k = 0; k < ns; k++) {
    memcpy(s->sw + (size_t)k * in, s->w + (size_t)s->sids[k] * in, (size_t)in * sizeof(float));
    s->sb[k] = s->b[s->sids[k]];
  }
  if (ns) {
    ar_device_gemm(s->dev, false, true, rows, ns, in, 1.0f, b->X, in, s->sw, in, 0.0f, s->sz,
                   ns);
    ar_device_bias_act(s->dev, rows, ns, s->sb, AR_ACT_NONE, s->sz);
  }
  shared_softmax(s, b, &lsum, &asum);
  s->st.compute_s += (ar_now() - t0) * s->nt + tc;
  s->st.query_s += tq;
  s->st.active_sum += asum;
  s->st.samples += rows;
  *loss_sum = lsum;
  return AR_OK;
}

ar_status ar__sampled_head_backward(ar_sampled *s, const ar__sbatch *b, ar_err *err) {
  const int64_t rows = b->rows, in = s->in;
  const ar_lsh_rows W = rows_of(s, false), G = rows_of(s, true);
  float *dX = b->dX;
  if (dX)
    memset(dX, 0, (size_t)rows * (size_t)in * sizeof(float));
  fail_box fb = {AR_OK, ""};
  double tc = 0;
  /* Own ids: per row, into the shared gradient rows (HOGWILD) and dX. */
#pragma omp parallel for num_threads(s->nt) schedule(static) reduction(+ : tc)
  for (int64_t r = 0; r < rows; r++) {
    double t0 = ar_now();
    ar_lsh_input x = {b->X + r * in, NULL, NULL, 0};
    ar_err e = AR_ERR_INIT;
    ar_status st = ar_lsh_backward(&W, &x, s->active + (size_t)r * s->cap, s->n_active[r],
                                   AR_LSH_ACT_NONE, s->out + (size_t)r * s->cap,
                                   s->dout + (size_t)r * s->cap, &G, dX ? dX + r * in : NULL,
                                   s->touched, &e);
    if (st != AR_OK)
      fail_note(&fb, st, e.msg);
    tc += ar_now() - t0;
  }
  if (fb.st != AR_OK)
    return ar_errf(err, fb.st, "layer %s: %s", s->name, fb.msg);
  /* Shared ids: gW_S = G^T X, gb_S = column sums, dX += G W_S. */
  double t0 = ar_now();
  const uint32_t ns = s->ns;
  if (ns) {
    ar_device_gemm(s->dev, true, false, ns, in, rows, 1.0f, s->sz, ns, b->X, in, 0.0f, s->sgw,
                   in);
    ar_device_col_sum(s->dev, rows, ns, s->sz, false, s->sgb);
    if (dX)
      ar_device_gemm(s->dev, false, false, rows, in, ns, 1.0f, s->sz, ns, s->sw, in, 1.0f, dX,
                     in);
  }
#pragma omp parallel for num_threads(s->nt) schedule(static)
  for (uint32_t k = 0; k < ns; k++) {
    const uint32_t id = s->sids[k];
    float *g = s->gw + (size_t)id * in;
    const float *sg = s->sgw + (size_t)k * in;
    for (int64_t j = 0; j < in; j++)
      g[j] += sg[j];
    s->gb[id] += s->sgb[k];
    ar_lsh_touched_mark(s->touched, id);
    s->spos[id] = -1;
  }
  s->ns = 0;
  s->st.compute_s += (ar_now() - t0) * s->nt + tc;
  return AR_OK;
}

/* The chain model's batch as the shared path reads it: layer l's dense
 * input, the previous layer's gradient rows. */
static ar__sbatch chain_batch(ar_model *m, int l) {
  ar__sbatch b = {m->rows, 1.0f / (float)(m->grad_rows > 0 ? m->grad_rows : m->rows),
                  l == 0 ? m->x : m->layers[l - 1].y, l > 0 ? m->layers[l - 1].dy : NULL,
                  m->lab, m->lab_ptr, m->step, NULL, NULL, NULL, NULL, NULL};
  return b;
}

static ar_status shared_forward(ar_model *m, int l, double *loss_sum) {
  ar__sbatch b = chain_batch(m, l);
  return ar__sampled_head_forward(m->layers[l].smp, &b, loss_sum, &m->err);
}

static ar_status shared_backward(ar_model *m, int l) {
  ar__sbatch b = chain_batch(m, l);
  AR_CHECK(ar__sampled_head_backward(m->layers[l].smp, &b, &m->err));
  if (l > 0) {
    ar_layer *P = &m->layers[l - 1];
    ar_device_act_grad(m->dev, m->rows * P->out, P->act, P->y, P->dy);
  }
  return AR_OK;
}

ar_status ar_model_train_forward_layer(ar_model *m, int l, double *loss_sum) {
  if (shared_path(m, l))
    return shared_forward(m, l, loss_sum);
  if (m->layers[l].smp)
    return sampled_forward(m, l, true, loss_sum);
  ar_model_forward_layer(m, l);
  return AR_OK;
}

ar_status ar_model_train_backward_layer(ar_model *m, int l) {
  if (shared_path(m, l))
    return shared_backward(m, l);
  if (m->layers[l].smp)
    return sampled_backward(m, l);
  ar_model_backward_layer(m, l);
  return AR_OK;
}

size_t ar__sampled_row(const ar_sampled *s, int64_t r, const uint32_t **ids, const float **out) {
  *ids = s->active + (size_t)r * s->cap;
  *out = s->out + (size_t)r * s->cap;
  return s->n_active[r];
}

const uint32_t *ar__sampled_grad_rows(const ar_sampled *s, size_t *n) {
  return ar_lsh_touched_ids(s->touched, n);
}

void ar__sampled_grad_rows_mark(ar_sampled *s, uint32_t id) {
  AR_ASSERT(id < s->neurons);
  ar_lsh_touched_mark(s->touched, id);
}

void ar__sampled_grad_rows_clear(ar_sampled *s) {
  size_t n = 0;
  const uint32_t *ids = ar_lsh_touched_ids(s->touched, &n);
  for (size_t k = 0; k < n; k++) {
    memset(s->gw + (size_t)ids[k] * (size_t)s->in, 0, (size_t)s->in * sizeof(float));
    s->gb[ids[k]] = 0.0f;
  }
  ar_lsh_touched_clear(s->touched);
}

void ar__sampled_rows_changed(ar_sampled *s, const uint32_t *ids, size_t n) {
  if (!ids) {
    for (uint32_t i = 0; i < s->neurons; i++)
      ar_lsh_touched_mark(s->changed, i);
    return;
  }
  for (size_t k = 0; k < n; k++)
    ar_lsh_touched_mark(s->changed, ids[k]);
}

const uint32_t *ar_model_grad_rows(const ar_model *m, int l, size_t *n) {
  AR_ASSERT(m->layers[l].smp);
  return ar__sampled_grad_rows(m->layers[l].smp, n);
}

void ar_model_grad_rows_mark(ar_model *m, int l, uint32_t id) {
  AR_ASSERT(m->layers[l].smp);
  ar__sampled_grad_rows_mark(m->layers[l].smp, id);
}

void ar_model_grad_rows_clear(ar_model *m, int l) {
  AR_ASSERT(m->layers[l].smp);
  ar__sampled_grad_rows_clear(m->layers[l].smp);
}

void ar_model_rows_changed(ar_model *m, int l, const uint32_t *ids, size_t n) {
  AR_ASSERT(m->layers[l].smp);
  ar__sampled_rows_changed(m->layers[l].smp, ids, n);
}

ar_status ar__sampled_step(ar_sampled *s, int64_t step, ar_err *err) {
  double t0 = ar_now();
  ar_lsh_rows W = rows_of(s, false), G = rows_of(s, true);
  size_t touched = 0;
  const uint32_t *tids = ar_lsh_touched_ids(s->touched, &touched);
  s->st.touched_sum += (int64_t)touched;
  s->st.steps++;
  for (size_t k = 0; k < touched; k++)
    ar_lsh_touched_mark(s->changed, tids[k]);
  ar_lsh_adam_set_t(s->adam, (uint64_t)step - 1);
  AR_CHECK(ar_lsh_adam_step(s->adam, &W, &G, s->touched, err));
  s->st.update_s += ar_now() - t0;
  return AR_OK;
}

ar_status ar_model_sampled_step(ar_model *m, int l) {
  AR_ASSERT(m->layers[l].smp);
  return ar__sampled_step(m->layers[l].smp, m->step, &m->err);
}

ar_status ar__sampled_rehash(ar_sampled *s, int64_t step, ar_trace *trace, ar_err *err) {
  if (step <= s->rehash_step)
    return AR_OK; /* this step's point of the schedule is already checked */
  s->rehash_step = step;
  ar_lsh_rehash_action a = ar_lsh_rehash_check(&s->sched, (uint64_t)step);
  if (a == AR_LSH_REHASH_NEW_HASH) {
    s->generation++;
    AR_CHECK(make_hash(s, err));
  }
  if (a != AR_LSH_REHASH_NONE)
    AR_CHECK(rebuild(s, a == AR_LSH_REHASH_NEW_HASH, false, trace, err));
  return AR_OK;
}

ar_status ar_model_sampled_rehash(ar_model *m, int l) {
  AR_ASSERT(m->layers[l].smp);
  return ar__sampled_rehash(m->layers[l].smp, m->step, m->trace, &m->err);
}

ar_status ar_model_train_batch(ar_model *m, const ar_batch *b, float *loss_out) {
  AR_CHECK(ar_model_load(m, b));
  if (m->rows == 0) {
    *loss_out = 0.0f;
    return AR_OK;
  }
  if (!m->n_sampled) {
    ar_model_forward(m);
    *loss_out = ar_model_loss(m, true);
    if (m->loss_status != AR_OK)
      return m->loss_status;
    ar_model_backward(m);
    ar_model_step(m);
    return AR_OK;
  }
  /* Forward: dense layers batched, sampled layers per sample. */
  double loss_sum = 0;
  for (int l = 0; l < m->n_layers; l++)
    AR_CHECK(ar_model_train_forward_layer(m, l, &loss_sum));
  ar_layer *last = &m->layers[m->n_layers - 1];
  *loss_out = last->smp ? (float)(loss_sum / (double)m->rows) : ar_model_loss(m, true);
  if (m->loss_status != AR_OK)
    return m->loss_status;
  for (int l = m->n_layers - 1; l >= 0; l--)
    AR_CHECK(ar_model_train_backward_layer(m, l));
  /* Step: dense layers as usual, sampled ones only on touched rows, then
   * their tables on SLIDE's schedule. */
  m->step++;
  for (int l = 0; l < m->n_layers; l++) {
    if (!m->layers[l].smp) {
      ar_model_step_layer(m, l);
      continue;
    }
    AR_CHECK(ar_model_sampled_step(m, l));
    AR_CHECK(ar_model_sampled_rehash(m, l));
  }
  return AR_OK;
}

/* Full scoring of a sampled layer for evaluation: y (rows, out) for every
 * neuron.  Dense inputs go through the device GEMM like a dense layer;
 * sparse inputs (the job's sparse input, a previous sampled layer in
 * sampled mode never happens here) use the kernels with every neuron
 * active. */
static ar_status sampled_full(ar_model *m, int l) {
  ar_layer *L = &m->layers[l];
  ar_sampled *s = L->smp;
  if (l > 0 || !m->spec->input.sparse) {
    ar_model_forward_layer(m, l); /* (out, in) rows: the dense layout */
    return AR_OK;
  }
  const bool last = l + 1 == m->n_layers;
  const ar_lsh_rows W = rows_of(s, false);
  fail_box fb = {AR_OK, ""};
#pragma omp parallel for num_threads(s->nt) schedule(dynamic, 4)
  for (int64_t r = 0; r < m->rows; r++) {
    ar_lsh_input x = input_of(m, l, r, true);
    ar_err e = AR_ERR_INIT;
    ar_status st = ar_lsh_forward(&W, &x, s->all, s->neurons, lsh_act(L, last),
                                  L->y + r * L->out, &e);
    if (st != AR_OK)
      fail_note(&fb, st, e.msg);
  }
  if (fb.st != AR_OK)
    return ar_errf(&m->err, fb.st, "layer %s: %s", L->name, fb.msg);
  return AR_OK;
}

ar_status ar__model_forward_eval(ar_model *m) {
  for (int l = 0; l < m->n_layers; l++) {
    if (m->layers[l].smp)
      AR_CHECK(sampled_full(m, l));
    else
      ar_model_forward_layer(m, l);
  }
  return AR_OK;
}

void ar_model_sampled_stats(const ar_model *m, int l, ar_sampled_stats *out) {
  memset(out, 0, sizeof *out);
  if (m->layers[l].smp)
    ar__sampled_stats(m->layers[l].smp, out);
}

void ar__sampled_stats(const ar_sampled *s, ar_sampled_stats *out) {
  *out = s->st;
  ar_lsh_tables_stats ts;
  ar_lsh_tables_stats_get(s->tables, &ts);
  out->tables_bytes = ts.total_bytes;
}

void ar_model_sampled_stats_reset(ar_model *m) {
  for (int l = 0; l < m->n_layers; l++)
    if (m->layers[l].smp) {
      double first = m->layers[l].smp->st.first_build_s;
      memset(&m->layers[l].smp->st, 0, sizeof m->layers[l].smp->st);
      m->layers[l].smp->st.first_build_s = first;
    }
}

/* Layer l with every neuron scored, for LSH inference (lsh_infer.c). */
ar_status ar__sampled_full(ar_model *m, int l) { return sampled_full(m, l); }

/* ---- a hidden layer of a graph model ----------------------------------------
 * A graph model's sampled dense node that is not its head
 * (net_sampled_hidden.c): the chain's sampled_forward and sampled_backward
 * for a hidden layer with a dense input whose output a dense layer reads
 * (the scatter into y, the gather from dy), on the graph's tensors.  The
 * per-row draws are the chain's (seed, layer, step), so a graph written
 * from a chain samples what the chain samples. */
/* Row r of b: its dense row, or its sparse features (input_of's rule for
 * the sparse input). */
static ar_lsh_input sbatch_row(const ar_sampled *s, const ar__sbatch *b, int64_t r) {
  ar_lsh_input x = {NULL, NULL, NULL, 0};
  if (b->from) {
    const ar_sampled *p = b->from;
    x.idx = p->active + (size_t)r * p->cap;
    x.val = p->out + (size_t)r * p->cap;
    x.nnz = p->n_active[r];
  } else if (b->row_ptr) {
    const int64_t a = b->row_ptr[r], e = b->row_ptr[r + 1];
    x.idx = (const uint32_t *)(b->idx + a); /* ids are >= 0: same bits */
    x.val = b->val + a;
    x.nnz = (size_t)(e - a);
  } else {
    x.dense = b->X + r * s->in;
  }
  return x;
}

ar_status ar__sampled_hidden_full(ar_sampled *s, const ar__sbatch *b, bool relu, float *Y,
                                  ar_err *err) {
  AR_ASSERT(s->all && b->row_ptr);
  const ar_lsh_rows W = rows_of(s, false);
  const ar_lsh_act act = relu ? AR_LSH_ACT_RELU : AR_LSH_ACT_NONE;
  fail_box fb = {AR_OK, ""};
#pragma omp parallel for num_threads(s->nt) schedule(dynamic, 4)
  for (int64_t r = 0; r < b->rows; r++) {
    ar_lsh_input x = sbatch_row(s, b, r);
    ar_err e = AR_ERR_INIT;
    ar_status st = ar_lsh_forward(&W, &x, s->all, s->neurons, act, Y + r * (int64_t)s->neurons,
                                  &e);
    if (st != AR_OK)
      fail_note(&fb, st, e.msg);
  }
  if (fb.st != AR_OK)
    return ar_errf(err, fb.st, "layer %s: %s", s->name, fb.msg);
  return AR_OK;
}

ar_status ar__sampled_head_rows_forward(ar_sampled *s, const ar__sbatch *b, double *loss_sum,
                                        ar_err *err) {
  fail_box fb = {AR_OK, ""};
  double tq = 0, tc = 0, lsum = 0;
  int64_t asum = 0;
#pragma omp parallel for num_threads(s->nt) schedule(static) reduction(+ : tq, tc, lsum, asum)
  for (int64_t r = 0; r < b->rows; r++) {
    ar_lsh_input x = sbatch_row(s, b, r);
    const uint32_t *lab = (const uint32_t *)(b->lab + b->lab_ptr[r]);
    const size_t nlab = (size_t)(b->lab_ptr[r + 1] - b->lab_ptr[r]);
    ar_rng rng; /* the batch's shared stream, as sampled_forward's */
    row_stream(s, b->step, 0, &rng);
    const int64_t n = row_forward(s, &x, r, &s->so, lab, nlab, &rng, AR_LSH_ACT_NONE, &tq, &tc,
                                  &fb);
    double t0 = ar_now(), loss = 0;
    if (n < 0 || !row_softmax(s, r, (size_t)n, lab, nlab, b->inv_rows, &loss, &fb))
      continue;
    lsum += loss;
    if (b->row_loss)
      b->row_loss[r] = (float)loss;
    asum += n;
    tc += ar_now() - t0;
  }
  if (fb.st != AR_OK)
    return ar_errf(err, fb.st, "layer %s: %s", s->name, fb.msg);
  count_forward(s, tq, tc, asum, b->rows);
  *loss_sum = lsum;
  return AR_OK;
}

ar_status ar__sampled_hidden_forward(ar_sampled *s, const ar__sbatch *b, bool relu, float *Y,
                                     ar_err *err) {
  const int64_t rows = b->rows;
  const ar_lsh_act act = relu ? AR_LSH_ACT_RELU : AR_LSH_ACT_NONE;
  fail_box fb = {AR_OK, ""};
  double tq = 0, tc = 0;
  int64_t asum = 0;
  memset(Y, 0, (size_t)rows * s->neurons * sizeof(float));
#pragma omp parallel for num_threads(s->nt) schedule(static) reduction(+ : tq, tc, asum)
  for (int64_t r = 0; r < rows; r++) {
    ar_lsh_input x = sbatch_row(s, b, r);
    ar_rng rng; /* the batch's shared stream, as sampled_forward's */
    row_stream(s, b->step, 0, &rng);
    const int64_t n = row_forward(s, &x, r, &s->so, NULL, 0, &rng, act, &tq, &tc, &fb);
    row_scatter(s, r, n, Y + r * (int64_t)s->neurons);
    asum += n > 0 ? n : 0;
  }
  if (fb.st != AR_OK)
    return ar_errf(err, fb.st, "layer %s: %s", s->name, fb.msg);
  count_forward(s, tq, tc, asum, rows);
  return AR_OK;
}

ar_status ar__sampled_hidden_backward(ar_sampled *s, const ar__sbatch *b, bool relu,
                                      const float *dY, ar_err *err) {
  const int64_t rows = b->rows, in = s->in;
  const ar_lsh_rows W = rows_of(s, false), G = rows_of(s, true);
  const ar_lsh_act act = relu ? AR_LSH_ACT_RELU : AR_LSH_ACT_NONE;
  if (b->dX)
    memset(b->dX, 0, (size_t)rows * (size_t)in * sizeof(float));
  ar_sampled *p = b->from;
  if (p) /* the gradient of p's active values, as sampled_backward's */
    memset(p->dout, 0, (size_t)rows * p->cap * sizeof(float));
  fail_box fb = {AR_OK, ""};
  double tc = 0;
#pragma omp parallel for num_threads(s->nt) schedule(static) reduction(+ : tc)
  for (int64_t r = 0; r < rows; r++) {
    double t0 = ar_now();
    ar_lsh_input x = sbatch_row(s, b, r);
    float *dx = p ? p->dout + (size_t)r * p->cap : b->dX ? b->dX + r * in : NULL;
    row_backward(s, &W, &G, act, &x, r, dY ? dY + r * (int64_t)s->neurons : NULL, dx, &fb);
    if (p && b->dX) /* the graph's dense gradient: p gathers it back at its ids */
      for (size_t k = 0; k < x.nnz; k++)
        b->dX[r * in + x.idx[k]] = dx[k];
    tc += ar_now() - t0;
  }
  if (fb.st != AR_OK)
    return ar_errf(err, fb.st, "layer %s: %s", s->name, fb.msg);
  s->st.compute_s += tc;
  return AR_OK;
}
