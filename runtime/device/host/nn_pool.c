/*
 * Host kernels of MAXPOOL, AVGPOOL and GAVGPOOL (group "conv"): oneDNN
 * pooling on the caller's NCHW tensors as they are (pooling keeps the
 * source's layout, so there is nothing to reorder).
 *
 * AVGPOOL divides by the whole kernel area, padding included (PyTorch's
 * count_include_pad=True; with PyTorch's symmetric padding no window
 * reaches past the padded input, so the divisor is always kh*kw).
 * GAVGPOOL is an average pool whose kernel is the whole image.
 *
 * MAXPOOL's backward needs where each maximum came from: oneDNN's
 * workspace, which the forward writes into the op's aux tensor (u8, as
 * many bytes as oneDNN asks for; infer makes a throw-away primitive
 * descriptor to learn the count, since the layout is oneDNN's own).
 */
#include "nn_dnnl.h"

typedef struct pool_geom {
  dnnl_dims_t x, y, k, s, pl, pr, dil;
  dnnl_alg_kind_t alg;
} pool_geom;

typedef struct pool {
  dnnl_stream_t s;
  ar__dnnl_ws ws;
  bool max, training;
  ar__dnnl_prim fwd, bwd;
  ar__dnnl_prim fwd_eval;                  /* max pool prepared for training: an evaluation
                                              forward, which has no workspace to write */
  dnnl_memory_t src, dst, wsp, dsrc, ddst; /* plain; wsp: the aux (max) */
} pool;

static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p0, int64_t p1) {
  int64_t span = in + p0 + p1 - k;
  return span < 0 ? 0 : span / s + 1;
}

/* The geometry of op on input x (shape checked by infer). */
static void pool_geom_of(ar_nn_op op, const ar_nn_attr *t, const ar_shape *x, pool_geom *g) {
  for (int i = 0; i < 4; i++)
    g->x[i] = x->d[i];
  g->y[0] = x->d[0];
  g->y[1] = x->d[1];
  for (int i = 0; i < 2; i++) {
    g->dil[i] = 0;
    if (op == AR_NN_GAVGPOOL) {
      g->k[i] = x->d[2 + i];
      g->s[i] = 1;
      g->pl[i] = g->pr[i] = 0;
    } else {
      g->k[i] = t->kernel[i];
      g->s[i] = t->stride[i];
      g->pl[i] = t->pad[i];
      g->pr[i] = t->pad[2 + i];
    }
    g->y[2 + i] = pool_out(g->x[2 + i], g->k[i], g->s[i], g->pl[i], g->pr[i]);
  }
  g->alg = op == AR_NN_MAXPOOL   ? dnnl_pooling_max
           : op == AR_NN_AVGPOOL ? dnnl_pooling_avg_include_padding
                                 : dnnl_pooling_avg_exclude_padding;
}

static dnnl_status_t pool_fwd_pd(const pool_geom *g, bool training, dnnl_primitive_desc_t *pd) {
  dnnl_memory_desc_t xm, ym;
  dnnl_pooling_v2_desc_t d;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_status_t s = ar__dnnl_md_plain(&xm, 4, g->x);
  if (s == dnnl_success)
    s = ar__dnnl_md_plain(&ym, 4, g->y);
  if (s == dnnl_success)
    s = dnnl_pooling_v2_forward_desc_init(&d,
                                          training ? dnnl_forward_training : dnnl_forward_inference,
                                          g->alg, &xm, &ym, g->s, g->k, g->dil, g->pl, g->pr);
  if (s == dnnl_success)
    s = ar__dnnl_attr(&attr);
  if (s == dnnl_success)
    s = dnnl_primitive_desc_create(pd, &d, attr, ar__dnnl_engine(), NULL);
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  return s;
}

/* ---- infer --------------------------------------------------------------- */

static ar_status pool_check_input(const char *op, int n_in, const ar_shape *in, const ar_dtype *dt,
                                  ar_err *err) {
  char xs[96];
  if (n_in != 1)
    return ar_errf(err, AR_INVALID, "%s takes one input (N,C,H,W), not %d", op, n_in);
  ar_shape_str(&in[0], xs, sizeof xs);
  if (in[0].nd != 4 || dt[0] != AR_DT_F32)
    return ar_errf(err, AR_INVALID, "input %s %s: %s takes an f32 image batch (N,C,H,W)", xs,
                   ar_dtype_name(dt[0]), op);
  for (int i = 0; i < 4; i++)
    if (in[0].d[i] < 1)
      return ar_errf(err, AR_INVALID, "input %s: %s needs every dimension at least 1", xs, op);
  return AR_OK;
}

static ar_status pool_infer_op(ar_nn_op op, const ar_nn_attr *t, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  const char *name = ar_nn_op_name(op);
  AR_CHECK(pool_check_input(name, n_in, in, dt, err));
  if (op != AR_NN_GAVGPOOL) {
    char xs[96], ks[32], ps[64], ss[32];
    ar_shape_str(&in[0], xs, sizeof xs);
    ar__nn_pair_str(t->kernel, ks, sizeof ks);
    ar__nn_pad_str(t->pad, ps, sizeof ps);
    ar__nn_pair_str(t->stride, ss, sizeof ss);
    if (t->kernel[0] < 1 || t->kernel[1] < 1 || t->stride[0] < 1 || t->stride[1] < 1 ||
        t->pad[0] < 0 || t->pad[1] < 0 || t->pad[2] < 0 || t->pad[3] < 0)
      return ar_errf(err, AR_INVALID,
                     "input %s, kernel %s, padding %s, stride %s: kernel and stride must be "
                     "at least 1 and padding at least 0",
                     xs, ks, ps, ss);
    /* A window entirely in the padding would have no maximum. */
    if (t->pad[0] >= t->kernel[0] || t->pad[2] >= t->kernel[0] || t->pad[1] >= t->kernel[1] ||
        t->pad[3] >= t->kernel[1])
      return ar_errf(err, AR_INVALID,
                     "input %s, kernel %s, padding %s, stride %s: the padding must be smaller "
                     "than the kernel",
                     xs, ks, ps, ss);
    if (pool_out(in[0].d[2], t->kernel[0], t->stride[0], t->pad[0], t->pad[2]) < 1 ||
        pool_out(in[0].d[3], t->kernel[1], t->stride[1], t->pad[1], t->pad[3]) < 1)
      return ar_errf(err, AR_INVALID,
                     "input %s, kernel %s, padding %s, stride %s: the output would be empty "
                     "(the kernel is larger than the padded input)",
                     xs, ks, ps, ss);
  }
  pool_geom g;
  pool_geom_of(op, t, &in[0], &g);
  ar__nn_sig_init(sig, 1);
  ar_shape ys = op == AR_NN_GAVGPOOL ? ar__nn_shape(2, g.y) : ar__nn_shape(4, g.y);
  ar__nn_sig_out(sig, &ys, AR_DT_F32);
  /* The backward reads gout only (and the aux workspace of a max pool). */
  sig->in_needed = 0;
  sig->out_needed = false;
  sig->flops = (double)ar_shape_count(&ys) * (double)g.k[0] * (double)g.k[1];
  if (op == AR_NN_MAXPOOL) {
    if (!ar__dnnl_engine())
      return ar_errf(err, AR_UNSUPPORTED, "oneDNN could not make a CPU engine");
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = pool_fwd_pd(&g, true, &pd);
    if (s != dnnl_success)
      return ar__dnnl_err(err, s, "max pooling forward");
    const dnnl_memory_desc_t *wm = dnnl_primitive_desc_query_md(pd, dnnl_query_workspace_md, 0);
    int64_t bytes = wm ? (int64_t)dnnl_memory_desc_get_size(wm) : 0;
    dnnl_primitive_desc_destroy(pd);
    if (bytes < 1)
      return ar_errf(err, AR_UNSUPPORTED, "oneDNN's max pooling asked for no workspace");
    ar_shape as = ar__nn_shape(1, &bytes);
    ar__nn_sig_aux(sig, &as, AR_DT_U8);
  }
  return AR_OK;
}

static ar_status maxpool_infer(const ar_nn_attr *t, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  return pool_infer_op(AR_NN_MAXPOOL, t, n_in, in, dt, sig, err);
}
static ar_status avgpool_infer(const ar_nn_attr *t, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  return pool_infer_op(AR_NN_AVGPOOL, t, n_in, in, dt, sig, err);
}
static ar_status gavgpool_infer(const ar_nn_attr *t, int n_in, const ar_shape *in,
                                const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  return pool_infer_op(AR_NN_GAVGPOOL, t, n_in, in, dt, sig, err);
}

/* ---- prepare, forward, backward ------------------------------------------ */

static void pool_release(void *state) {
  pool *p = state;
  if (!p)
    return;
  ar__dnnl_prim_fini(&p->fwd);
  ar__dnnl_prim_fini(&p->bwd);
  ar__dnnl_prim_fini(&p->fwd_eval);
  dnnl_memory_t m[] = {p->src, p->dst, p->wsp, p->dsrc, p->ddst};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
    if (m[i])
      dnnl_memory_destroy(m[i]);
  if (p->s)
    dnnl_stream_destroy(p->s);
  ar_free(p);
}

static dnnl_status_t pool_build(pool *p, const pool_geom *g, bool training,
                                dnnl_primitive_desc_t *fpd, dnnl_primitive_desc_t *bpd) {
  dnnl_engine_t e = ar__dnnl_engine();
  dnnl_status_t s = dnnl_stream_create(&p->s, e, dnnl_stream_default_flags);
  if (s == dnnl_success)
    s = pool_fwd_pd(g, training, fpd);
  if (s == dnnl_success)
    s = ar__dnnl_prim_init(&p->fwd, *fpd, &p->ws);
  if (s == dnnl_success)
    s = dnnl_memory_create(&p->src, dnnl_primitive_desc_query_md(*fpd, dnnl_query_src_md, 0), e,
                           DNNL_MEMORY_NONE);
  if (s == dnnl_success)
    s = dnnl_memory_create(&p->dst, dnnl_primitive_desc_query_md(*fpd, dnnl_query_dst_md, 0), e,
                           DNNL_MEMORY_NONE);
  if (s != dnnl_success || !training)
    return s;
  if (p->max) {
    s = dnnl_memory_create(&p->wsp, dnnl_primitive_desc_query_md(*fpd, dnnl_query_workspace_md, 0),
                           e, DNNL_MEMORY_NONE);
    dnnl_primitive_desc_t epd = NULL;
    if (s == dnnl_success)
      s = pool_fwd_pd(g, false, &epd);
    if (s == dnnl_success)
      s = ar__dnnl_prim_init(&p->fwd_eval, epd, &p->ws);
    if (epd)
      dnnl_primitive_desc_destroy(epd);
  }
  dnnl_memory_desc_t xm, ym;
  dnnl_pooling_v2_desc_t d;
  dnnl_primitive_attr_t attr = NULL;
  if (s == dnnl_success)
    s = ar__dnnl_md_plain(&xm, 4, g->x);
  if (s == dnnl_success)
    s = ar__dnnl_md_plain(&ym, 4, g->y);
  if (s == dnnl_success)
    s = dnnl_pooling_v2_backward_desc_init(&d, g->alg, &xm, &ym, g->s, g->k, g->dil, g->pl, g->pr);
  if (s == dnnl_success)
    s = ar__dnnl_attr(&attr);
  if (s == dnnl_success)
    s = dnnl_primitive_desc_create(bpd, &d, attr, e, *fpd);
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  if (s == dnnl_success)
    s = ar__dnnl_prim_init(&p->bwd, *bpd, &p->ws);
  if (s == dnnl_success)
    s = dnnl_memory_create(&p->dsrc, &xm, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success)
    s = dnnl_memory_create(&p->ddst, &ym, e, DNNL_MEMORY_NONE);
  return s;
}

static ar_status pool_prepare(const ar_nn_args *a, bool training, void **state, size_t *work_bytes,
                              ar_err *err) {
  const char *name = ar_nn_op_name(a->op);
  if (!ar__dnnl_engine())
    return ar_errf(err, AR_UNSUPPORTED, "oneDNN could not make a CPU engine");
  pool *p = ar_calloc(1, sizeof *p);
  if (!p)
    return ar_errf(err, AR_NOMEM, "out of memory preparing a %s", name);
  p->max = a->op == AR_NN_MAXPOOL;
  p->training = training;
  pool_geom g;
  pool_geom_of(a->op, a->attr, &a->in[0].shape, &g);
  dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
  int prev = ar__dnnl_threads_enter(a->threads);
  dnnl_status_t s = pool_build(p, &g, training, &fpd, &bpd);
  ar__dnnl_threads_leave(prev);
  size_t wbytes = 0;
  if (s == dnnl_success && p->wsp)
    wbytes =
        dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0));
  if (fpd)
    dnnl_primitive_desc_destroy(fpd);
  if (bpd)
    dnnl_primitive_desc_destroy(bpd);
  if (s != dnnl_success) {
    pool_release(p);
    return ar__dnnl_err(err, s, p->max ? "max pooling" : "average pooling");
  }
  if (p->wsp &&
      (a->n_aux != 1 ||
       (size_t)ar_shape_count(&a->aux[0].shape) * ar_dtype_size(a->aux[0].dtype) != wbytes)) {
    pool_release(p);
    return ar_errf(err, AR_INVALID,
                   "maxpool: the aux tensor is not the %zu-byte workspace infer asked for", wbytes);
  }
  *work_bytes = ar__dnnl_ws_bytes(&p->ws);
  *state = p;
  return AR_OK;
}

static void pool_forward(void *state, ar_nn_args *a) {
  pool *p = state;
  int prev = ar__dnnl_threads_enter(a->threads);
  AR_ASSERT(dnnl_memory_set_data_handle(p->src, a->in[0].p) == dnnl_success);
  AR_ASSERT(dnnl_memory_set_data_handle(p->dst, a->out[0].p) == dnnl_success);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->src}, {DNNL_ARG_DST, p->dst}};
  int n = 2;
  ar__dnnl_prim *f = &p->fwd;
  if (p->wsp && a->training) {
    AR_ASSERT(dnnl_memory_set_data_handle(p->wsp, a->aux[0].p) == dnnl_success);
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, p->wsp};
  } else if (p->wsp) {
    f = &p->fwd_eval;
  }
  ar__dnnl_prim_run(f, p->s, &p->ws, a->work, n, args);
  ar__dnnl_threads_leave(prev);
}

static void pool_backward(void *state, ar_nn_args *a) {
  pool *p = state;
  if (!a->gin[0].p)
    return; /* no parameters: nothing else to compute */
  AR_ASSERT(p->training);
  int prev = ar__dnnl_threads_enter(a->threads);
  AR_ASSERT(dnnl_memory_set_data_handle(p->ddst, a->gout[0].p) == dnnl_success);
  AR_ASSERT(dnnl_memory_set_data_handle(p->dsrc, a->gin[0].p) == dnnl_success);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, p->ddst}, {DNNL_ARG_DIFF_SRC, p->dsrc}};
  int n = 2;
  if (p->wsp) {
    AR_ASSERT(dnnl_memory_set_data_handle(p->wsp, a->aux[0].p) == dnnl_success);
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, p->wsp};
  }
  ar__dnnl_prim_run(&p->bwd, p->s, &p->ws, a->work, n, args);
  ar__dnnl_threads_leave(prev);
}

void ar__nn_host_pool_register(ar_nn_kernel *table) {
  typedef ar_status infer_fn(const ar_nn_attr *, int, const ar_shape *, const ar_dtype *,
                             ar_nn_sig *, ar_err *);
  infer_fn *const infer[] = {maxpool_infer, avgpool_infer, gavgpool_infer};
  const ar_nn_op ops[] = {AR_NN_MAXPOOL, AR_NN_AVGPOOL, AR_NN_GAVGPOOL};
  for (int i = 0; i < 3; i++)
    table[ops[i]] = (ar_nn_kernel){
        .infer = infer[i],
        .prepare = pool_prepare,
        .forward = pool_forward,
        .backward = pool_backward,
        .release = pool_release,
    };
}
