/*
 * Host kernel of BATCHNORM (group "conv"): oneDNN batch normalisation on
 * the caller's (N,C,H,W) or (N,C) tensors as they are, with gamma and beta
 * as oneDNN's separate scale and shift (what PyTorch's mkldnn path runs).
 *
 * Training normalises with the batch's mean and biased variance, which
 * the forward saves in the aux tensors for the backward, and moves the
 * running statistics PyTorch's way: running = (1 - momentum) running +
 * momentum batch, with the variance unbiased (times m / (m - 1), m the
 * values per channel).  Evaluation normalises with the running ones.
 *
 * Fused relu (act RELU): oneDNN's fuse_norm_relu in evaluation; in
 * training it would need a workspace of its own, so the forward applies
 * relu to y afterwards and the backward masks gout with y > 0 into a
 * workspace buffer.  The same buffer is the throw-away diff_src when the
 * input's gradient is not wanted (oneDNN computes gamma's and beta's
 * gradients only together with it; in place is allowed).
 */
#include "nn_dnnl.h"

typedef struct bnorm {
  dnnl_stream_t s;
  ar__dnnl_ws ws;
  bool relu;
  int64_t n, C; /* elements of x; channels */
  float momentum;
  double unbias;  /* m / (m - 1), m = n / C (training only) */
  size_t tmp_off; /* (n) floats: masked gout / throw-away diff_src */
  ar__dnnl_prim fwd_train, fwd_eval, bwd;
  dnnl_memory_t x, y, scale, shift, mean, var, dx, dy, dscale, dshift; /* plain */
} bnorm;

static ar_status bnorm_infer(const ar_nn_attr *t, int n_in, const ar_shape *in, const ar_dtype *dt,
                             ar_nn_sig *sig, ar_err *err) {
  char xs[96];
  if (n_in != 1)
    return ar_errf(err, AR_INVALID, "batchnorm takes one input, not %d", n_in);
  ar_shape_str(&in[0], xs, sizeof xs);
  if ((in[0].nd != 2 && in[0].nd != 4) || dt[0] != AR_DT_F32)
    return ar_errf(err, AR_INVALID,
                   "input %s %s: batchnorm takes f32 (N,C,H,W) or (N,C), not %d dimensions", xs,
                   ar_dtype_name(dt[0]), in[0].nd);
  for (int i = 0; i < in[0].nd; i++)
    if (in[0].d[i] < 1)
      return ar_errf(err, AR_INVALID, "input %s: batchnorm needs every dimension at least 1", xs);
  if (!(t->eps > 0.0f) || !(t->momentum >= 0.0f && t->momentum <= 1.0f))
    return ar_errf(err, AR_INVALID,
                   "input %s: batchnorm needs eps > 0 and momentum in [0, 1] (eps %g, momentum "
                   "%g)",
                   xs, (double)t->eps, (double)t->momentum);
  if (t->act != AR_ACT_NONE && t->act != AR_ACT_RELU)
    return ar_errf(err, AR_INVALID, "batchnorm fuses only act none or relu (got act %d)",
                   (int)t->act);
  ar__nn_sig_init(sig, 1);
  ar__nn_sig_out(sig, &in[0], AR_DT_F32);
  ar_shape cs = ar__nn_shape(1, &in[0].d[1]);
  ar__nn_sig_param(sig, "gamma", &cs, AR_NN_INIT_ONES, false);
  ar__nn_sig_param(sig, "beta", &cs, AR_NN_INIT_ZEROS, false);
  ar__nn_sig_state(sig, "running_mean", &cs, AR_NN_INIT_ZEROS);
  ar__nn_sig_state(sig, "running_var", &cs, AR_NN_INIT_ONES);
  ar__nn_sig_aux(sig, &cs, AR_DT_F32); /* the batch mean */
  ar__nn_sig_aux(sig, &cs, AR_DT_F32); /* the batch variance (biased) */
  sig->in_needed = 1u;
  sig->out_needed = t->act == AR_ACT_RELU;
  /* Statistics (two passes) and the affine normalisation, per element. */
  sig->flops = 4.0 * (double)ar_shape_count(&in[0]);
  return AR_OK;
}

static void bnorm_release(void *state) {
  bnorm *b = state;
  if (!b)
    return;
  ar__dnnl_prim_fini(&b->fwd_train);
  ar__dnnl_prim_fini(&b->fwd_eval);
  ar__dnnl_prim_fini(&b->bwd);
  dnnl_memory_t m[] = {b->x,   b->y,  b->scale, b->shift,  b->mean,
                       b->var, b->dx, b->dy,    b->dscale, b->dshift};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
    if (m[i])
      dnnl_memory_destroy(m[i]);
  if (b->s)
    dnnl_stream_destroy(b->s);
  ar_free(b);
}

/* One primitive: its descriptor from d, made into pr; *pd kept when pd is
 * not NULL (the backward's hint). */
static dnnl_status_t bnorm_prim(const dnnl_batch_normalization_desc_t *d,
                                const_dnnl_primitive_desc_t hint, ar__dnnl_prim *pr,
                                ar__dnnl_ws *ws, dnnl_primitive_desc_t *keep) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = ar__dnnl_attr(&attr);
  if (s == dnnl_success)
    s = dnnl_primitive_desc_create(&pd, d, attr, ar__dnnl_engine(), hint);
  if (s == dnnl_success)
    s = ar__dnnl_prim_init(pr, pd, ws);
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  if (keep && s == dnnl_success)
    *keep = pd;
  else if (pd)
    dnnl_primitive_desc_destroy(pd);
  return s;
}

static dnnl_status_t bnorm_build(bnorm *b, const ar_nn_args *a, bool training) {
  dnnl_engine_t e = ar__dnnl_engine();
  const ar_shape *xs = &a->in[0].shape;
  dnnl_dims_t xd = {0}, cd = {b->C};
  for (int i = 0; i < xs->nd; i++)
    xd[i] = xs->d[i];
  dnnl_memory_desc_t xm, cm;
  dnnl_batch_normalization_desc_t d;
  const unsigned affine = dnnl_use_scale | dnnl_use_shift;
  dnnl_status_t s = dnnl_stream_create(&b->s, e, dnnl_stream_default_flags);
  if (s == dnnl_success)
    s = ar__dnnl_md_plain(&xm, xs->nd, xd);
  if (s == dnnl_success)
    s = ar__dnnl_md_plain(&cm, 1, cd);
  dnnl_memory_t *data[] = {&b->x, &b->y, &b->dx, &b->dy};
  dnnl_memory_t *chan[] = {&b->scale, &b->shift, &b->mean, &b->var, &b->dscale, &b->dshift};
  for (size_t i = 0; s == dnnl_success && i < sizeof data / sizeof data[0]; i++)
    s = dnnl_memory_create(data[i], &xm, e, DNNL_MEMORY_NONE);
  for (size_t i = 0; s == dnnl_success && i < sizeof chan / sizeof chan[0]; i++)
    s = dnnl_memory_create(chan[i], &cm, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success)
    s = dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_inference, &xm, a->attr->eps,
                                                   affine | dnnl_use_global_stats |
                                                       (b->relu ? dnnl_fuse_norm_relu : 0u));
  if (s == dnnl_success)
    s = bnorm_prim(&d, NULL, &b->fwd_eval, &b->ws, NULL);
  if (s != dnnl_success || !training)
    return s;
  dnnl_primitive_desc_t fpd = NULL;
  s = dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_training, &xm, a->attr->eps,
                                                 affine);
  if (s == dnnl_success)
    s = bnorm_prim(&d, NULL, &b->fwd_train, &b->ws, &fpd);
  if (s == dnnl_success)
    s = dnnl_batch_normalization_backward_desc_init(&d, dnnl_backward, &xm, &xm, a->attr->eps,
                                                    affine);
  if (s == dnnl_success)
    s = bnorm_prim(&d, fpd, &b->bwd, &b->ws, NULL);
  if (fpd)
    dnnl_primitive_desc_destroy(fpd);
  b->tmp_off = ar__dnnl_ws_take(&b->ws, (size_t)b->n * sizeof(float));
  return s;
}

static ar_status bnorm_prepare(const ar_nn_args *a, bool training, void **state, size_t *work_bytes,
                               ar_err *err) {
  if (!ar__dnnl_engine())
    return ar_errf(err, AR_UNSUPPORTED, "oneDNN could not make a CPU engine");
  const ar_shape *xs = &a->in[0].shape;
  int64_t n = ar_shape_count(xs), C = xs->d[1], per = n / C;
  if (training && per < 2) {
    char buf[96];
    return ar_errf(err, AR_INVALID,
                   "input %s: batchnorm in training needs more than one value per channel "
                   "(the batch variance of one value is undefined); use a larger batch",
                   ar_shape_str(xs, buf, sizeof buf));
  }
  bnorm *b = ar_calloc(1, sizeof *b);
  if (!b)
    return ar_errf(err, AR_NOMEM, "out of memory preparing a batchnorm");
  b->relu = a->attr->act == AR_ACT_RELU;
  b->n = n;
  b->C = C;
  b->momentum = a->attr->momentum;
  b->unbias = per > 1 ? (double)per / (double)(per - 1) : 1.0;
  int prev = ar__dnnl_threads_enter(a->threads);
  dnnl_status_t s = bnorm_build(b, a, training);
  ar__dnnl_threads_leave(prev);
  if (s != dnnl_success) {
    bnorm_release(b);
    return ar__dnnl_err(err, s, "batch normalisation");
  }
  *work_bytes = ar__dnnl_ws_bytes(&b->ws);
  *state = b;
  return AR_OK;
}

static void set(dnnl_memory_t m, void *p) {
  AR_ASSERT(dnnl_memory_set_data_handle(m, p) == dnnl_success);
}

static void bnorm_forward(void *state, ar_nn_args *a) {
  bnorm *b = state;
  int prev = ar__dnnl_threads_enter(a->threads);
  set(b->x, a->in[0].p);
  set(b->y, a->out[0].p);
  set(b->scale, a->param[0].p);
  set(b->shift, a->param[1].p);
  bool train = a->training;
  AR_ASSERT(!train || b->fwd_train.p);
  set(b->mean, train ? a->aux[0].p : a->state[0].p);
  set(b->var, train ? a->aux[1].p : a->state[1].p);
  dnnl_exec_arg_t args[7] = {{DNNL_ARG_SRC, b->x},       {DNNL_ARG_DST, b->y},
                             {DNNL_ARG_SCALE, b->scale}, {DNNL_ARG_SHIFT, b->shift},
                             {DNNL_ARG_MEAN, b->mean},   {DNNL_ARG_VARIANCE, b->var}};
  ar__dnnl_prim_run(train ? &b->fwd_train : &b->fwd_eval, b->s, &b->ws, a->work, 6, args);
  if (train) {
    float *rm = a->state[0].p, *rv = a->state[1].p;
    const float *m = a->aux[0].p, *v = a->aux[1].p, mo = b->momentum;
    for (int64_t c = 0; c < b->C; c++) {
      rm[c] = (1.0f - mo) * rm[c] + mo * m[c];
      rv[c] = (1.0f - mo) * rv[c] + mo * (float)((double)v[c] * b->unbias);
    }
    if (b->relu) {
      float *y = a->out[0].p;
      int64_t n = b->n;
#pragma omp parallel for num_threads(a->threads) schedule(static)
      for (int64_t i = 0; i < n; i++)
        y[i] = y[i] > 0.0f ? y[i] : 0.0f;
    }
  }
  ar__dnnl_threads_leave(prev);
}

static void bnorm_backward(void *state, ar_nn_args *a) {
  bnorm *b = state;
  AR_ASSERT(b->bwd.p);
  int prev = ar__dnnl_threads_enter(a->threads);
  float *tmp = (float *)(ar__dnnl_ws_base(&b->ws, a->work) + b->tmp_off);
  float *gy = a->gout[0].p;
  if (b->relu) {
    const float *y = a->out[0].p;
    int64_t n = b->n;
#pragma omp parallel for num_threads(a->threads) schedule(static)
    for (int64_t i = 0; i < n; i++)
      tmp[i] = y[i] > 0.0f ? gy[i] : 0.0f;
    gy = tmp;
  }
  set(b->x, a->in[0].p);
  set(b->mean, a->aux[0].p);
  set(b->var, a->aux[1].p);
  set(b->dy, gy);
  set(b->scale, a->param[0].p);
  set(b->shift, a->param[1].p);
  set(b->dx, a->gin[0].p ? a->gin[0].p : tmp);
  set(b->dscale, a->gparam[0].p);
  set(b->dshift, a->gparam[1].p);
  /* oneDNN counts the shift among the backward's inputs (unread): an
   * execution with fewer arguments than the descriptor's is refused. */
  dnnl_exec_arg_t args[10] = {{DNNL_ARG_SRC, b->x},
                              {DNNL_ARG_MEAN, b->mean},
                              {DNNL_ARG_VARIANCE, b->var},
                              {DNNL_ARG_DIFF_DST, b->dy},
                              {DNNL_ARG_SCALE, b->scale},
                              {DNNL_ARG_SHIFT, b->shift},
                              {DNNL_ARG_DIFF_SRC, b->dx},
                              {DNNL_ARG_DIFF_SCALE, b->dscale},
                              {DNNL_ARG_DIFF_SHIFT, b->dshift}};
  ar__dnnl_prim_run(&b->bwd, b->s, &b->ws, a->work, 9, args);
  ar__dnnl_threads_leave(prev);
}

void ar__nn_host_bnorm_register(ar_nn_kernel *table) {
  table[AR_NN_BATCHNORM] = (ar_nn_kernel){
      .infer = bnorm_infer,
      .prepare = bnorm_prepare,
      .forward = bnorm_forward,
      .backward = bnorm_backward,
      .release = bnorm_release,
  };
}
