/* Sparse kernels of a SLIDE layer (Chen et al., MLSys 2020, §3 and §4.1):
 * forward and backward of one sample over its active neurons, softmax over
 * the active outputs, the set of rows touched in a batch, and Adam over
 * those rows only.  Portable C: the inner loops are `#pragma omp simd`
 * over a row (dense input) or over the input's non-zeros (sparse input).
 *
 * Departure from SLIDE: SLIDE applies Adam densely to every weight after
 * each batch (the largest cost in its optimized code's profile); here only
 * the touched rows are updated, with their moments decayed for the steps
 * they missed and, with catch_up, the moves dense Adam made on those steps
 * applied at once (see ar_lsh_adam_create in the header for the rule). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "lsh_impl.h"

#if defined(__GNUC__)
#define AR__PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define AR__PREFETCH(p) ((void)(p))
#endif

/* Rows ahead of the current one whose start is prefetched: active rows are
 * scattered over a large matrix, so each row is a cache miss otherwise. */
#define AR__AHEAD 4

/* ---- argument checks ------------------------------------------------------
 */

static ar_status check_rows(const ar_lsh_rows *r, const char *what,
                            ar_err *err) {
  if (!r || !r->w)
    return ar_errf(err, AR_INVALID, "lsh kernels: %s has no weight array",
                   what);
  if (r->neurons == 0 || r->in == 0 || r->ld < r->in)
    return ar_errf(err, AR_INVALID,
                   "lsh kernels: %s has neurons %u, in %u, ld %zu; need "
                   "neurons > 0, in > 0 and ld >= in",
                   what, r->neurons, r->in, r->ld);
  return AR_OK;
}

static ar_status check_input(const ar_lsh_input *x, uint32_t in, ar_err *err) {
  if (!x)
    return ar_errf(err, AR_INVALID, "lsh kernels: input is NULL");
  if (x->dense)
    return AR_OK;
  if (x->nnz && (!x->idx || !x->val))
    return ar_errf(err, AR_INVALID,
                   "lsh kernels: sparse input of %zu non-zeros has no idx or "
                   "val array",
                   x->nnz);
  for (size_t k = 0; k < x->nnz; k++)
    if (x->idx[k] >= in)
      return ar_errf(err, AR_RANGE,
                     "lsh kernels: input index %u at position %zu is >= the "
                     "layer's %u inputs",
                     x->idx[k], k, in);
  return AR_OK;
}

static ar_status check_active(const uint32_t *active, size_t n,
                              uint32_t neurons, ar_err *err) {
  if (n && !active)
    return ar_errf(err, AR_INVALID, "lsh kernels: active set is NULL");
  for (size_t i = 0; i < n; i++)
    if (active[i] >= neurons)
      return ar_errf(err, AR_RANGE,
                     "lsh kernels: active id %u at position %zu is >= the "
                     "layer's %u neurons",
                     active[i], i, neurons);
  return AR_OK;
}

/* ---- instruction sets ------------------------------------------------------
 * The inner loops come in three builds (kernels_isa.h); the first call of
 * a kernel picks the widest the CPU has, unless ar_lsh_isa_set or the
 * ACCELRT_LSH_ISA environment variable chose one. */

static const ar__lsh_isa *isa_table(ar_lsh_isa isa) {
  switch (isa) {
  case AR_LSH_ISA_AVX512:
    return &ar__lsh_isa_avx512;
  case AR_LSH_ISA_AVX2:
    return &ar__lsh_isa_avx2;
  default:
    return &ar__lsh_isa_portable;
  }
}

int ar_lsh_isa_supported(ar_lsh_isa isa) {
  switch (isa) {
  case AR_LSH_ISA_PORTABLE:
    return 1;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  case AR_LSH_ISA_AVX2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case AR_LSH_ISA_AVX512:
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  default:
    return 0;
  }
}

static const ar__lsh_isa *_Atomic isa_now;

static const ar__lsh_isa *isa(void) {
  const ar__lsh_isa *t = isa_now;
  if (t)
    return t;
  ar_lsh_isa pick = AR_LSH_ISA_PORTABLE;
  if (ar_lsh_isa_supported(AR_LSH_ISA_AVX512))
    pick = AR_LSH_ISA_AVX512;
  else if (ar_lsh_isa_supported(AR_LSH_ISA_AVX2))
    pick = AR_LSH_ISA_AVX2;
  const char *env = getenv("ACCELRT_LSH_ISA");
  if (env && *env) {
    ar_lsh_isa want = !strcmp(env, "avx512") ? AR_LSH_ISA_AVX512
                      : !strcmp(env, "avx2") ? AR_LSH_ISA_AVX2
                      : !strcmp(env, "portable") ? AR_LSH_ISA_PORTABLE
                                               : (ar_lsh_isa)-1;
    if ((int)want < 0)
      ar_log(AR_LOG_WARN, "ACCELRT_LSH_ISA=%s is not portable, avx2 or avx512; using %s",
             env, isa_table(pick)->name);
    else if (!ar_lsh_isa_supported(want))
      ar_log(AR_LOG_WARN, "ACCELRT_LSH_ISA=%s: this CPU lacks it; using %s", env,
             isa_table(pick)->name);
    else
      pick = want;
  }
  isa_now = isa_table(pick);
  return isa_now;
}

ar_status ar_lsh_isa_set(ar_lsh_isa which) {
  if (!ar_lsh_isa_supported(which))
    return AR_UNSUPPORTED;
  isa_now = isa_table(which);
  return AR_OK;
}

const char *ar_lsh_isa_name(void) { return isa()->name; }

/* ---- forward --------------------------------------------------------------
 */

ar_status ar_lsh_forward(const ar_lsh_rows *layer, const ar_lsh_input *x,
                         const uint32_t *active, size_t n, ar_lsh_act act,
                         float *out, ar_err *err) {
  AR_CHECK(check_rows(layer, "layer", err));
  AR_CHECK(check_input(x, layer->in, err));
  AR_CHECK(check_active(active, n, layer->neurons, err));
  if (n && !out)
    return ar_errf(err, AR_INVALID, "lsh forward: out is NULL");
  const float *w = layer->w;
  const size_t ld = layer->ld;
  const ar__lsh_isa *k = isa();
  for (size_t i = 0; i < n; i++) {
    if (i + AR__AHEAD < n) {
      AR__PREFETCH(w + (size_t)active[i + AR__AHEAD] * ld);
      if (layer->b) /* a bias read a row's time after its id is known missed */
        AR__PREFETCH(layer->b + active[i + AR__AHEAD]);
    }
    const float *row = w + (size_t)active[i] * ld;
    float z = x->dense ? k->dot_dense(row, x->dense, layer->in)
                       : k->dot_sparse(row, x->idx, x->val, x->nnz);
    if (layer->b)
      z += layer->b[active[i]];
    if (act == AR_LSH_ACT_RELU && !(z > 0.0f))
      z = 0.0f;
    out[i] = z;
  }
  return AR_OK;
}

/* ---- softmax over the active set ----------------------------------------- */

static size_t find_pos(const uint32_t *active, size_t n, uint32_t id) {
  for (size_t i = 0; i < n; i++)
    if (active[i] == id)
      return i;
  return n;
}

ar_status ar_lsh_softmax_active(const float *logit, const uint32_t *active,
                                size_t n, const uint32_t *labels, size_t nlab,
                                float *dlogit, double *loss, ar_err *err) {
  if (n == 0 || nlab == 0 || !logit || !active || !labels || !dlogit)
    return ar_errf(err, AR_INVALID,
                   "lsh softmax: need n > 0 active outputs (got %zu), nlab > "
                   "0 labels (got %zu) and non-NULL arrays",
                   n, nlab);
  for (size_t l = 0; l < nlab; l++)
    if (find_pos(active, n, labels[l]) == n)
      return ar_errf(err, AR_NOTFOUND,
                     "lsh softmax: label %u is not in the active set; add "
                     "the true labels to it (ar_lsh_sample's always list)",
                     labels[l]);
  float mx = logit[0];
  for (size_t i = 1; i < n; i++)
    mx = logit[i] > mx ? logit[i] : mx;
  double sum = 0.0;
  for (size_t i = 0; i < n; i++)
    sum += exp((double)logit[i] - (double)mx);
  const double lse = log(sum);
  /* Loss first: dlogit may alias logit. */
  double ce = 0.0;
  for (size_t l = 0; l < nlab; l++) {
    size_t p = find_pos(active, n, labels[l]);
    ce -= ((double)logit[p] - (double)mx - lse);
  }
  ce /= (double)nlab;
  const double inv = 1.0 / sum;
  for (size_t i = 0; i < n; i++)
    dlogit[i] = (float)(exp((double)logit[i] - (double)mx) * inv);
  const float t = (float)(1.0 / (double)nlab);
  for (size_t l = 0; l < nlab; l++)
    dlogit[find_pos(active, n, labels[l])] -= t;
  if (loss)
    *loss = ce;
  return AR_OK;
}

/* ---- backward -------------------------------------------------------------
 */

ar_status ar_lsh_backward(const ar_lsh_rows *layer, const ar_lsh_input *x,
                          const uint32_t *active, size_t n, ar_lsh_act act,
                          const float *out, const float *dout,
                          const ar_lsh_rows *grad, float *dx,
                          ar_lsh_touched *touched, ar_err *err) {
  AR_CHECK(check_rows(layer, "layer", err));
  AR_CHECK(check_rows(grad, "gradient", err));
  if (grad->neurons != layer->neurons || grad->in != layer->in)
    return ar_errf(err, AR_INVALID,
                   "lsh backward: gradient rows are (%u, %u) but the layer is "
                   "(%u, %u); give the gradient the layer's shape",
                   grad->neurons, grad->in, layer->neurons, layer->in);
  AR_CHECK(check_input(x, layer->in, err));
  AR_CHECK(check_active(active, n, layer->neurons, err));
  if (n && (!dout || (act == AR_LSH_ACT_RELU && !out)))
    return ar_errf(err, AR_INVALID,
                   "lsh backward: dout is NULL, or out is NULL with RELU");
  const float *w = layer->w;
  const ar__lsh_isa *k = isa();
  for (size_t i = 0; i < n; i++) {
    const uint32_t r = active[i];
    if (touched)
      ar_lsh_touched_mark(touched, r);
    float g = dout[i];
    if (act == AR_LSH_ACT_RELU && !(out[i] > 0.0f))
      g = 0.0f;
    if (g == 0.0f)
      continue;
    if (i + AR__AHEAD < n) {
      AR__PREFETCH(w + (size_t)active[i + AR__AHEAD] * layer->ld);
      AR__PREFETCH(grad->w + (size_t)active[i + AR__AHEAD] * grad->ld);
    }
    const float *row = w + (size_t)r * layer->ld;
    float *grow = grad->w + (size_t)r * grad->ld;
    if (x->dense)
      k->axpy_dense(g, x->dense, row, grow, dx, layer->in);
    else
      k->axpy_sparse(g, x->idx, x->val, row, grow, dx, x->nnz);
    if (grad->b)
      grad->b[r] += g;
  }
  return AR_OK;
}

/* ---- touched rows ----------------------------------------------------------
 */

struct ar_lsh_touched {
  uint32_t neurons;
  uint64_t *bits; /* (ceil(neurons / 64)) one bit per row */
  uint32_t *ids;  /* (neurons) marked ids, first marked first */
  size_t count;   /* marked ids; advanced atomically */
};

size_t ar_lsh_touched_bytes(uint32_t neurons) {
  return sizeof(ar_lsh_touched) + ((size_t)neurons + 63) / 64 * sizeof(uint64_t) +
         (size_t)neurons * sizeof(uint32_t);
}

ar_status ar_lsh_touched_create(uint32_t neurons, ar_lsh_touched **out,
                                ar_err *err) {
  if (!out || neurons == 0)
    return ar_errf(err, AR_INVALID, "lsh touched: need neurons > 0");
  ar_lsh_touched *t = ar_calloc(1, sizeof *t);
  if (!t)
    goto nomem;
  t->neurons = neurons;
  t->bits = ar_calloc(((size_t)neurons + 63) / 64, sizeof *t->bits);
  if (!t->bits)
    goto nomem_t;
  t->ids = ar_malloc((size_t)neurons * sizeof *t->ids);
  if (!t->ids)
    goto nomem_bits;
  *out = t;
  return AR_OK;
nomem_bits:
  ar_free(t->bits);
nomem_t:
  ar_free(t);
nomem:
  return ar_errf(err, AR_NOMEM, "lsh touched: no memory for %u rows", neurons);
}

void ar_lsh_touched_destroy(ar_lsh_touched *t) {
  if (!t)
    return;
  ar_free(t->ids);
  ar_free(t->bits);
  ar_free(t);
}

void ar_lsh_touched_mark(ar_lsh_touched *t, uint32_t id) {
  AR_ASSERT(id < t->neurons);
  uint64_t *word = &t->bits[id >> 6];
  const uint64_t bit = 1ull << (id & 63);
  /* An atomic read first: most marks in a batch hit rows already marked, and
   * a set bit never clears while marks run. */
  uint64_t old;
#pragma omp atomic read
  old = *word;
  if (old & bit)
    return;
#pragma omp atomic capture
  {
    old = *word;
    *word |= bit;
  }
  if (old & bit)
    return; /* another thread won the race and lists it */
  size_t slot;
#pragma omp atomic capture
  slot = t->count++;
  t->ids[slot] = id;
}

int ar_lsh_touched_has(const ar_lsh_touched *t, uint32_t id) {
  return id < t->neurons && (t->bits[id >> 6] >> (id & 63)) & 1u;
}

const uint32_t *ar_lsh_touched_ids(const ar_lsh_touched *t, size_t *count) {
  *count = t->count;
  return t->ids;
}

void ar_lsh_touched_clear(ar_lsh_touched *t) {
  /* Every set bit belongs to a listed id, so zeroing the listed ids' words
   * whole clears the bitmap. */
  for (size_t k = 0; k < t->count; k++)
    t->bits[t->ids[k] >> 6] = 0;
  t->count = 0;
}

/* ---- sparse Adam ------------------------------------------------------------
 */

struct ar_lsh_adam {
  ar_lsh_adam_opts o;
  uint32_t neurons, in;
  int owned;      /* the arrays are ours to free (create, not attach) */
  uint64_t t;     /* steps taken */
  float *m, *v;   /* (neurons, in) */
  float *mb, *vb; /* (neurons) or NULL without bias */
  uint64_t *last; /* (neurons) step of the row's last update, 0 never */
};

static ar_status check_adam(uint32_t neurons, uint32_t in,
                            const ar_lsh_adam_opts *opts, ar_err *err) {
  if (!opts || neurons == 0 || in == 0)
    return ar_errf(err, AR_INVALID, "lsh adam: need neurons > 0 and in > 0");
  if (!(opts->lr > 0.0f) || !(opts->beta1 >= 0.0f && opts->beta1 < 1.0f) ||
      !(opts->beta2 >= 0.0f && opts->beta2 < 1.0f) || !(opts->eps >= 0.0f))
    return ar_errf(err, AR_INVALID,
                   "lsh adam: lr %g, beta1 %g, beta2 %g, eps %g; need lr > 0, "
                   "betas in [0, 1) and eps >= 0",
                   (double)opts->lr, (double)opts->beta1, (double)opts->beta2,
                   (double)opts->eps);
  if (opts->catch_up && !((double)opts->beta1 < sqrt((double)opts->beta2)))
    return ar_errf(err, AR_INVALID,
                   "lsh adam: catching up skipped steps needs beta1 < sqrt(beta2) "
                   "(beta1 %g, beta2 %g), where dense Adam's moves on them shrink; "
                   "lower beta1 or raise beta2, or keep the lazy step (catch_up 0)",
                   (double)opts->beta1, (double)opts->beta2);
  return AR_OK;
}

ar_status ar_lsh_adam_attach(uint32_t neurons, uint32_t in,
                             const ar_lsh_adam_opts *opts, float *m, float *v,
                             float *mb, float *vb, uint64_t *last,
                             ar_lsh_adam **out, ar_err *err) {
  if (!out || !m || !v || !last || (!mb) != (!vb))
    return ar_errf(err, AR_INVALID,
                   "lsh adam: attach needs m, v and last, and both or neither "
                   "of mb and vb");
  AR_CHECK(check_adam(neurons, in, opts, err));
  ar_lsh_adam *a = ar_calloc(1, sizeof *a);
  if (!a)
    return ar_errf(err, AR_NOMEM, "lsh adam: no memory for the handle");
  a->o = *opts;
  a->neurons = neurons;
  a->in = in;
  a->m = m;
  a->v = v;
  a->mb = mb;
  a->vb = vb;
  a->last = last;
  *out = a;
  return AR_OK;
}

/* The state arrays of create: zeroed, freed with the handle. */
ar_status ar_lsh_adam_create(uint32_t neurons, uint32_t in, int has_bias,
                             const ar_lsh_adam_opts *opts, ar_lsh_adam **out,
                             ar_err *err) {
  if (!out)
    return ar_errf(err, AR_INVALID, "lsh adam: out is NULL");
  AR_CHECK(check_adam(neurons, in, opts, err));
  const size_t cells = (size_t)neurons * in;
  float *m = ar_calloc(cells, sizeof *m), *v = ar_calloc(cells, sizeof *v);
  float *mb = has_bias ? ar_calloc(neurons, sizeof *mb) : NULL;
  float *vb = has_bias ? ar_calloc(neurons, sizeof *vb) : NULL;
  uint64_t *last = ar_calloc(neurons, sizeof *last);
  ar_status st = AR_NOMEM;
  if (m && v && last && (!has_bias || (mb && vb)))
    st = ar_lsh_adam_attach(neurons, in, opts, m, v, mb, vb, last, out, err);
  if (st != AR_OK) {
    ar_free(m);
    ar_free(v);
    ar_free(mb);
    ar_free(vb);
    ar_free(last);
    if (st == AR_NOMEM)
      return ar_errf(err, AR_NOMEM, "lsh adam: no memory for moments of %u x %u (%zu MiB)",
                     neurons, in, 2 * cells * sizeof(float) >> 20);
    return st;
  }
  (*out)->owned = 1;
  return AR_OK;
}

void ar_lsh_adam_set_t(ar_lsh_adam *a, uint64_t t) { a->t = t; }

void ar_lsh_adam_destroy(ar_lsh_adam *a) {
  if (!a)
    return;
  if (!a->owned) {
    ar_free(a);
    return;
  }
  ar_free(a->last);
  ar_free(a->vb);
  ar_free(a->mb);
  ar_free(a->v);
  ar_free(a->m);
  ar_free(a);
}

uint64_t ar_lsh_adam_t(const ar_lsh_adam *a) { return a->t; }

void ar_lsh_adam_state(const ar_lsh_adam *a, const float **m, const float **v,
                       const float **mb, const float **vb,
                       const uint64_t **last) {
  if (m)
    *m = a->m;
  if (v)
    *v = a->v;
  if (mb)
    *mb = a->mb;
  if (vb)
    *vb = a->vb;
  if (last)
    *last = a->last;
}

/* Rows ahead of the one being updated whose lines the sparse Adam step
 * prefetches: about the rows a core updates in the time a miss to DRAM
 * takes (a 64-float row is 16 lines over its four arrays). */
#define ADAM_PREFETCH 4

/* beta^k for the k skipped steps, in double so long gaps lose nothing. */
static inline float decay(float beta, uint64_t k) {
  return k ? (float)pow((double)beta, (double)k) : 1.0f;
}

/* lr_t times the sum of q^j for j = 1..k: the skipped steps' moves of
 * dense Adam as a multiple of one move with the row's moments (q < 1). */
static inline float catch_up_step(float lr_t, double q, uint64_t k) {
  return k ? (float)((double)lr_t * q * (1.0 - pow(q, (double)k)) / (1.0 - q)) : 0.0f;
}

/* Skips below this take their decays from a table made once a step (a
 * pow per touched row and moment was 2.5% of a 100,000-class head's
 * iteration); the same values, so the same bits. */
#define DECAY_TABLE 256

ar_status ar_lsh_adam_step(ar_lsh_adam *a, const ar_lsh_rows *layer,
                           const ar_lsh_rows *grad, ar_lsh_touched *touched,
                           ar_err *err) {
  if (!a || !touched)
    return ar_errf(err, AR_INVALID, "lsh adam: state or touched set is NULL");
  AR_CHECK(check_rows(layer, "layer", err));
  AR_CHECK(check_rows(grad, "gradient", err));
  if (layer->neurons != a->neurons || layer->in != a->in ||
      grad->neurons != a->neurons || grad->in != a->in ||
      touched->neurons != a->neurons)
    return ar_errf(err, AR_INVALID,
                   "lsh adam: state is (%u, %u) but layer is (%u, %u), "
                   "gradient (%u, %u) and touched set %u rows",
                   a->neurons, a->in, layer->neurons, layer->in, grad->neurons,
                   grad->in, touched->neurons);
  const uint64_t t = ++a->t;
  const float b1 = a->o.beta1, b2 = a->o.beta2, eps = a->o.eps;
  /* Bias corrections of the global step, folded into a step size and a
   * scale of sqrt(v): lr * (m/c1) / (sqrt(v/c2) + eps). */
  const double c1 = 1.0 - pow((double)b1, (double)t);
  const double c2 = 1.0 - pow((double)b2, (double)t);
  const float lr_t = (float)((double)a->o.lr / c1);
  const float isq2 = (float)(1.0 / sqrt(c2));
  const int bias = layer->b && grad->b && a->mb;
  const uint32_t in = a->in;
  const long count = (long)touched->count;
  /* A skip is below t: the first steps fill only that much. */
  float dec1[DECAY_TABLE], dec2[DECAY_TABLE], cu[DECAY_TABLE];
  /* catch_up: lr_t * S_k for k skipped steps, S_k = q (1 - q^k) / (1 - q). */
  const double q = (double)b1 / sqrt((double)b2);
  const int catch_up = a->o.catch_up >= t; /* this step catches up */
  for (uint64_t k = 0; k < DECAY_TABLE && k < t; k++) {
    dec1[k] = b1 * decay(b1, k);
    dec2[k] = b2 * decay(b2, k);
    cu[k] = catch_up ? catch_up_step(lr_t, q, k) : 0.0f;
  }
  /* Rows in ascending order, read off the bitmap (the list holds them in
   * the order they were first marked): a batch touches thousands of rows
   * scattered over arrays far larger than the caches, and in address
   * order each thread's rows stream forward, which the prefetch below and
   * the hardware's own can follow.  Every row's update is independent, so
   * the order changes no bit. */
  uint32_t *ids = touched->ids;
  if (count > 1) {
    size_t n = 0;
    const size_t words = ((size_t)touched->neurons + 63) / 64;
    for (size_t wi = 0; wi < words; wi++)
      for (uint64_t b = touched->bits[wi]; b; b &= b - 1)
        ids[n++] = (uint32_t)(wi * 64 + (size_t)__builtin_ctzll(b));
    AR_ASSERT(n == touched->count);
  }
  const int nt = a->o.threads > 0 ? a->o.threads : omp_get_max_threads();
  const ar__lsh_isa *isa_k = isa();
  const size_t row_bytes = (size_t)in * sizeof(float);
#pragma omp parallel for num_threads(nt) schedule(static) if (count > 256)
  for (long k = 0; k < count; k++) {
    const uint32_t r = ids[k];
    if (k + ADAM_PREFETCH < count) { /* the rows a few steps ahead */
      const size_t q = ids[k + ADAM_PREFETCH];
      const char *pw = (const char *)(layer->w + q * layer->ld),
                 *pg = (const char *)(grad->w + q * grad->ld),
                 *pm = (const char *)(a->m + q * in), *pv = (const char *)(a->v + q * in);
      for (size_t o = 0; o < row_bytes; o += 64) {
        __builtin_prefetch(pw + o, 1);
        __builtin_prefetch(pg + o, 1);
        __builtin_prefetch(pm + o, 1);
        __builtin_prefetch(pv + o, 1);
      }
      __builtin_prefetch(a->last + q, 1);
    }
    const uint64_t skip = t - a->last[r] - 1;
    /* m = b1 * (b1^skip * m) + (1 - b1) g: the skipped steps' decay and
     * this step's in one factor. */
    const float d1 = skip < DECAY_TABLE ? dec1[skip] : b1 * decay(b1, skip),
                d2 = skip < DECAY_TABLE ? dec2[skip] : b2 * decay(b2, skip);
    /* A row never updated (last 0) has no moments to move by. */
    const float c = !catch_up || !a->last[r] ? 0.0f
                    : skip < DECAY_TABLE     ? cu[skip]
                                             : catch_up_step(lr_t, q, skip);
    isa_k->adam_row(layer->w + (size_t)r * layer->ld, grad->w + (size_t)r * grad->ld,
                a->m + (size_t)r * in, a->v + (size_t)r * in, in, d1, d2, b1, b2, lr_t, isq2,
                eps, c);
    if (bias) {
      const float gb = grad->b[r];
      if (c != 0.0f)
        layer->b[r] -= c * a->mb[r] / (sqrtf(a->vb[r]) * isq2 + eps);
      const float mj = d1 * a->mb[r] + (1.0f - b1) * gb;
      const float vj = d2 * a->vb[r] + (1.0f - b2) * gb * gb;
      a->mb[r] = mj;
      a->vb[r] = vj;
      layer->b[r] -= lr_t * mj / (sqrtf(vj) * isq2 + eps);
      grad->b[r] = 0.0f;
    }
    a->last[r] = t;
  }
  ar_lsh_touched_clear(touched);
  return AR_OK;
}
