/*
 * Host kernels of the nn ops in group "conv" (AR_NN_OP_MAP's third column):
 * CONV2D here; the pooling ops in nn_pool.c, BATCHNORM in nn_bnorm.c.
 *
 * CONV2D runs oneDNN's direct convolution as PyTorch's CPU path (mkldnn)
 * does: forward (training or inference), backward data, backward weights
 * with the bias.  The primitives choose their layouts (format_tag_any:
 * nChw8c/16c and blocked weights on AVX2/AVX-512), and ports reorder the
 * caller's NCHW/OIHW tensors into workspace buffers around each call; the
 * environment variable ACCELRT_CONV_LAYOUT=plain makes them take NCHW/OIHW
 * directly (for measurements and for the tests of both paths).
 *
 * Fused relu (act RELU) is a post-op of the forward; the backward masks
 * gout with y > 0 (y = relu(z), so y > 0 exactly where z > 0) into a
 * workspace buffer before the two backward primitives.
 *
 * The workspace holds at most two activation-sized layout copies at once:
 * the forward's src and dst; the backward's gout and, one after the
 * other, the input gradient (backward data, reordered out before the
 * weights' gradient runs) and the input (backward weights) in the same
 * bytes.
 */
#include "host/nn_conv_impl.h"
#include "nn/nn_window.h"
#include "nn_dnnl.h"

#include <stdlib.h>
#include <string.h>

typedef struct conv {
  dnnl_stream_t s;
  ar__dnnl_ws ws;
  bool relu, bias;
  bool share_ddst; /* both backward primitives take gout in one layout */
  int64_t ny;      /* elements of y */
  size_t mask_off; /* (N, out, Ho, Wo) gout masked by y > 0 (relu only) */
  ar__dnnl_prim fwd, bwd_d, bwd_w;
  ar__dnnl_port f_src, f_wei, f_bias, f_dst;
  ar__dnnl_port d_ddst, d_wei, d_dsrc;
  ar__dnnl_port w_src, w_ddst, w_dwei, w_dbias;
} conv;

/* ---- shapes -------------------------------------------------------------- */

static ar_status conv_infer(const ar_nn_attr *t, int n_in, const ar_shape *in, const ar_dtype *dt,
                            ar_nn_sig *sig, ar_err *err) {
  char xs[96], ks[32], ps[64], ss[32], ds[32];
  if (n_in != 1)
    return ar_errf(err, AR_INVALID, "conv takes one input (N,C,H,W), not %d", n_in);
  ar_shape_str(&in[0], xs, sizeof xs);
  if (in[0].nd != 4 || dt[0] != AR_DT_F32)
    return ar_errf(err, AR_INVALID, "input %s %s: conv takes an f32 image batch (N,C,H,W)", xs,
                   ar_dtype_name(dt[0]));
  ar__nn_pair_str(t->kernel, ks, sizeof ks);
  ar__nn_pad_str(t->pad, ps, sizeof ps);
  ar__nn_pair_str(t->stride, ss, sizeof ss);
  ar__nn_pair_str(t->dilation, ds, sizeof ds);
  const int64_t N = in[0].d[0], C = in[0].d[1], H = in[0].d[2], W = in[0].d[3];
  if (N < 1 || C < 1 || H < 1 || W < 1)
    return ar_errf(err, AR_INVALID, "input %s: conv needs every dimension at least 1", xs);
  if (t->kernel[0] < 1 || t->kernel[1] < 1 || t->stride[0] < 1 || t->stride[1] < 1 ||
      t->dilation[0] < 1 || t->dilation[1] < 1 || t->pad[0] < 0 || t->pad[1] < 0 || t->pad[2] < 0 ||
      t->pad[3] < 0)
    return ar_errf(err, AR_INVALID,
                   "input %s, kernel %s, padding %s, stride %s, dilation %s: kernel, stride "
                   "and dilation must be at least 1 and padding at least 0",
                   xs, ks, ps, ss, ds);
  if (t->out < 1 || t->groups < 1)
    return ar_errf(err, AR_INVALID,
                   "input %s: conv needs out >= 1 and groups >= 1 (out %lld, "
                   "groups %lld)",
                   xs, (long long)t->out, (long long)t->groups);
  if (C % t->groups || t->out % t->groups)
    return ar_errf(err, AR_INVALID,
                   "input %s, out %lld, groups %lld: the input channels (%lld) and out must "
                   "both be divisible by groups",
                   xs, (long long)t->out, (long long)t->groups, (long long)C);
  if (t->act != AR_ACT_NONE && t->act != AR_ACT_RELU)
    return ar_errf(err, AR_INVALID, "conv fuses only act none or relu (got act %d)", (int)t->act);
  int64_t Ho = nn_window_out(H, t->kernel[0], t->stride[0], t->pad[0], t->pad[2], t->dilation[0]);
  int64_t Wo = nn_window_out(W, t->kernel[1], t->stride[1], t->pad[1], t->pad[3], t->dilation[1]);
  if (Ho < 1 || Wo < 1)
    return ar_errf(err, AR_INVALID,
                   "input %s, kernel %s, padding %s, stride %s, dilation %s: the output would be "
                   "empty (the dilated kernel is larger than the padded input)",
                   xs, ks, ps, ss, ds);
  ar__nn_sig_init(sig, 1);
  ar_shape ys = ar__nn_shape(4, (int64_t[]){N, t->out, Ho, Wo});
  ar__nn_sig_out(sig, &ys, AR_DT_F32);
  ar_shape ws = ar__nn_shape(4, (int64_t[]){t->out, C / t->groups, t->kernel[0], t->kernel[1]});
  ar__nn_sig_param(sig, "w", &ws, AR_NN_INIT_FAN_IN, true);
  if (t->bias) {
    ar_shape bs = ar__nn_shape(1, (int64_t[]){t->out});
    ar__nn_sig_param(sig, "b", &bs, AR_NN_INIT_ZEROS, true);
  }
  /* The weights' gradient reads x; the relu mask reads y. */
  sig->in_needed = 1u;
  sig->out_needed = t->act == AR_ACT_RELU;
  sig->flops = 2.0 * (double)N * (double)t->out * (double)Ho * (double)Wo *
               (double)(C / t->groups) * (double)t->kernel[0] * (double)t->kernel[1];
  return AR_OK;
}

/* ---- prepare ------------------------------------------------------------- */

static bool conv_plain(void) {
  const char *v = getenv("ACCELRT_CONV_LAYOUT");
  return v && !strcmp(v, "plain");
}

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t q, int i) {
  return dnnl_primitive_desc_query_md(pd, q, i);
}

/* The memory descriptors of one convolution: the caller's (u) and what the
 * primitives are offered (p: the same, or format_tag_any). */
typedef struct conv_mds {
  dnnl_memory_desc_t xu, yu, wu, bu, xp, yp, wp;
  dnnl_dims_t strides, dil, pl, pr;
  int64_t cin_per_group;
} conv_mds;

#define DN(x)                                                                                      \
  do {                                                                                             \
    dnnl_status_t ar__d = (x);                                                                     \
    if (ar__d != dnnl_success)                                                                     \
      return ar__d;                                                                                \
  } while (0)

static dnnl_status_t conv_mds_init(conv_mds *m, const ar_nn_args *a) {
  const ar_nn_attr *t = a->attr;
  const int64_t *x = a->in[0].shape.d, *y = a->out[0].shape.d, G = t->groups;
  dnnl_dims_t xd = {x[0], x[1], x[2], x[3]}, yd = {y[0], y[1], y[2], y[3]}, bd = {t->out};
  dnnl_dims_t wd4 = {t->out, x[1] / G, t->kernel[0], t->kernel[1]};
  dnnl_dims_t wd5 = {G, t->out / G, x[1] / G, t->kernel[0], t->kernel[1]};
  int wnd = G > 1 ? 5 : 4;
  m->cin_per_group = x[1] / G;
  DN(ar__dnnl_md_plain(&m->xu, 4, xd));
  DN(ar__dnnl_md_plain(&m->yu, 4, yd));
  /* (out, C/G, kh, kw) row-major is (G, out/G, C/G, kh, kw) row-major. */
  DN(ar__dnnl_md_plain(&m->wu, wnd, G > 1 ? wd5 : wd4));
  DN(ar__dnnl_md_plain(&m->bu, 1, bd));
  if (conv_plain()) {
    m->xp = m->xu;
    m->yp = m->yu;
    m->wp = m->wu;
  } else {
    DN(dnnl_memory_desc_init_by_tag(&m->xp, 4, xd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&m->yp, 4, yd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&m->wp, wnd, G > 1 ? wd5 : wd4, dnnl_f32, dnnl_format_tag_any));
  }
  for (int i = 0; i < 2; i++) {
    m->strides[i] = t->stride[i];
    m->dil[i] = t->dilation[i] - 1; /* oneDNN counts the gaps */
    m->pl[i] = t->pad[i];
    m->pr[i] = t->pad[2 + i];
  }
  return dnnl_success;
}

static dnnl_status_t conv_build_fwd(conv *c, const conv_mds *m, bool training,
                                    dnnl_primitive_desc_t *fpd) {
  dnnl_convolution_desc_t d;
  DN(dnnl_dilated_convolution_forward_desc_init(
      &d, training ? dnnl_forward_training : dnnl_forward_inference, dnnl_convolution_direct,
      &m->xp, &m->wp, c->bias ? &m->bu : NULL, &m->yp, m->strides, m->dil, m->pl, m->pr));
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_status_t s = ar__dnnl_attr(&attr);
  if (s == dnnl_success && c->relu) {
    s = dnnl_post_ops_create(&po);
    if (s == dnnl_success)
      s = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    if (s == dnnl_success)
      s = dnnl_primitive_attr_set_post_ops(attr, po);
  }
  if (s == dnnl_success)
    s = dnnl_primitive_desc_create(fpd, &d, attr, ar__dnnl_engine(), NULL);
  if (po)
    dnnl_post_ops_destroy(po);
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success)
    return s;
  const_dnnl_primitive_desc_t p = *fpd;
  DN(ar__dnnl_prim_init(&c->fwd, p, &c->ws));
  DN(ar__dnnl_port_init(&c->f_src, &m->xu, qmd(p, dnnl_query_src_md, 0), false, &c->ws));
  DN(ar__dnnl_port_init(&c->f_wei, &m->wu, qmd(p, dnnl_query_weights_md, 0), false, &c->ws));
  if (c->bias)
    DN(ar__dnnl_port_init(&c->f_bias, &m->bu, qmd(p, dnnl_query_weights_md, 1), false, &c->ws));
  DN(ar__dnnl_port_init(&c->f_dst, &m->yu, qmd(p, dnnl_query_dst_md, 0), true, &c->ws));
  return dnnl_success;
}

static dnnl_status_t conv_build_bwd(conv *c, const conv_mds *m, const_dnnl_primitive_desc_t fpd,
                                    dnnl_primitive_desc_t *dpd, dnnl_primitive_desc_t *wpd) {
  dnnl_primitive_attr_t attr = NULL;
  DN(ar__dnnl_attr(&attr));
  dnnl_convolution_desc_t dd, wd;
  /* Fewer than 8 input channels per group (a first layer): oneDNN's
   * blocked backward kernels pad the channels to a block of 8 and lose to
   * its gemm path on plain layouts (Fashion-MNIST's 1->32 3x3 on batch
   * 128, one AVX2 thread: 13-15 ms blocked against 7-10 ms plain for the
   * weights' gradient), so the backward takes plain layouts there. */
  const dnnl_memory_desc_t *xp = &m->xp, *wp = &m->wp, *yp = &m->yp;
  if (m->cin_per_group < 8) {
    xp = &m->xu;
    wp = &m->wu;
    yp = &m->yu;
  }
  dnnl_status_t s = dnnl_dilated_convolution_backward_data_desc_init(
      &dd, dnnl_convolution_direct, xp, wp, yp, m->strides, m->dil, m->pl, m->pr);
  if (s == dnnl_success)
    s = dnnl_primitive_desc_create(dpd, &dd, attr, ar__dnnl_engine(), fpd);
  if (s == dnnl_success)
    s = dnnl_dilated_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, xp, wp,
                                                            c->bias ? &m->bu : NULL, yp, m->strides,
                                                            m->dil, m->pl, m->pr);
  if (s == dnnl_success)
    s = dnnl_primitive_desc_create(wpd, &wd, attr, ar__dnnl_engine(), fpd);
  dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success)
    return s;
  ar__dnnl_ws_phase(&c->ws); /* the backward's buffers reuse the forward's */
  if (c->relu)
    c->mask_off = ar__dnnl_ws_take(&c->ws, (size_t)c->ny * sizeof(float));
  const_dnnl_primitive_desc_t p = *dpd;
  DN(ar__dnnl_prim_init(&c->bwd_d, p, &c->ws));
  DN(ar__dnnl_port_init(&c->d_ddst, &m->yu, qmd(p, dnnl_query_diff_dst_md, 0), false, &c->ws));
  /* gout (and the relu mask) stay for the weights' gradient; the rest of
   * backward data's buffers are done when it is (conv_backward). */
  size_t mark = c->ws.area;
  DN(ar__dnnl_port_init(&c->d_wei, &m->wu, qmd(p, dnnl_query_weights_md, 0), false, &c->ws));
  DN(ar__dnnl_port_init(&c->d_dsrc, &m->xu, qmd(p, dnnl_query_diff_src_md, 0), true, &c->ws));
  ar__dnnl_ws_rewind(&c->ws, mark);
  p = *wpd;
  DN(ar__dnnl_prim_init(&c->bwd_w, p, &c->ws));
  DN(ar__dnnl_port_init(&c->w_src, &m->xu, qmd(p, dnnl_query_src_md, 0), false, &c->ws));
  DN(ar__dnnl_port_init_like(&c->w_ddst, &m->yu, qmd(p, dnnl_query_diff_dst_md, 0), &c->d_ddst,
                             &c->share_ddst, &c->ws));
  DN(ar__dnnl_port_init(&c->w_dwei, &m->wu, qmd(p, dnnl_query_diff_weights_md, 0), true, &c->ws));
  if (c->bias)
    DN(ar__dnnl_port_init(&c->w_dbias, &m->bu, qmd(p, dnnl_query_diff_weights_md, 1), true,
                          &c->ws));
  return dnnl_success;
}

static void conv_release(void *state) {
  conv *c = state;
  if (!c)
    return;
  ar__dnnl_port *ports[] = {&c->f_src,  &c->f_wei, &c->f_bias, &c->f_dst,  &c->d_ddst, &c->d_wei,
                            &c->d_dsrc, &c->w_src, &c->w_ddst, &c->w_dwei, &c->w_dbias};
  for (size_t i = 0; i < sizeof ports / sizeof ports[0]; i++)
    ar__dnnl_port_fini(ports[i]);
  ar__dnnl_prim_fini(&c->fwd);
  ar__dnnl_prim_fini(&c->bwd_d);
  ar__dnnl_prim_fini(&c->bwd_w);
  if (c->s)
    dnnl_stream_destroy(c->s);
  ar_free(c);
}

static ar_status conv_prepare(const ar_nn_args *a, bool training, void **state, size_t *work_bytes,
                              ar_err *err) {
  if (!ar__dnnl_engine())
    return ar_errf(err, AR_UNSUPPORTED, "oneDNN could not make a CPU engine");
  conv *c = ar_calloc(1, sizeof *c);
  if (!c)
    return ar_errf(err, AR_NOMEM, "out of memory preparing a conv");
  c->relu = a->attr->act == AR_ACT_RELU;
  c->bias = a->attr->bias;
  c->ny = ar_shape_count(&a->out[0].shape);
  dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
  const char *what = "convolution stream";
  int prev = ar__dnnl_threads_enter(a->threads);
  conv_mds m;
  dnnl_status_t s = dnnl_stream_create(&c->s, ar__dnnl_engine(), dnnl_stream_default_flags);
  if (s == dnnl_success) {
    what = "convolution forward";
    s = conv_mds_init(&m, a);
  }
  if (s == dnnl_success)
    s = conv_build_fwd(c, &m, training, &fpd);
  if (s == dnnl_success && training) {
    what = "convolution backward";
    s = conv_build_bwd(c, &m, fpd, &dpd, &wpd);
  }
  ar__dnnl_threads_leave(prev);
  if (fpd)
    dnnl_primitive_desc_destroy(fpd);
  if (dpd)
    dnnl_primitive_desc_destroy(dpd);
  if (wpd)
    dnnl_primitive_desc_destroy(wpd);
  if (s != dnnl_success) {
    conv_release(c);
    return ar__dnnl_err(err, s, what);
  }
  *work_bytes = ar__dnnl_ws_bytes(&c->ws);
  *state = c;
  return AR_OK;
}

/* ---- forward, backward --------------------------------------------------- */

static void conv_forward(void *state, ar_nn_args *a) {
  conv *c = state;
  void *w = a->work;
  int prev = ar__dnnl_threads_enter(a->threads);
  dnnl_exec_arg_t args[5] = {
      {DNNL_ARG_SRC, ar__dnnl_port_in(&c->f_src, a->in[0].p, c->s, &c->ws, w)},
      {DNNL_ARG_WEIGHTS, ar__dnnl_port_in(&c->f_wei, a->param[0].p, c->s, &c->ws, w)},
      {DNNL_ARG_DST, ar__dnnl_port_in(&c->f_dst, a->out[0].p, c->s, &c->ws, w)},
  };
  int n = 3;
  if (c->bias)
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS,
                                  ar__dnnl_port_in(&c->f_bias, a->param[1].p, c->s, &c->ws, w)};
  ar__dnnl_prim_run(&c->fwd, c->s, &c->ws, w, n, args);
  ar__dnnl_port_done(&c->f_dst, c->s, &c->ws, w);
  ar__dnnl_threads_leave(prev);
}

/* g (n) = gout where y > 0, else 0. */
static void relu_mask(float *restrict g, const float *restrict gout, const float *restrict y, int64_t n,
                      int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; i++) {
    const float gi = gout[i]; /* loaded either way: a select, not a branch */
    g[i] = y[i] > 0.0f ? gi : 0.0f;
  }
}

static void conv_backward(void *state, ar_nn_args *a) {
  conv *c = state;
  void *w = a->work;
  int prev = ar__dnnl_threads_enter(a->threads);
  float *gy = a->gout[0].p;
  if (c->relu) {
    float *g = (float *)(ar__dnnl_ws_base(&c->ws, w) + c->mask_off);
    relu_mask(g, gy, a->out[0].p, c->ny, a->threads);
    gy = g;
  }
  if (a->gin[0].p) {
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_DIFF_DST, ar__dnnl_port_in(&c->d_ddst, gy, c->s, &c->ws, w)},
        {DNNL_ARG_WEIGHTS, ar__dnnl_port_in(&c->d_wei, a->param[0].p, c->s, &c->ws, w)},
        {DNNL_ARG_DIFF_SRC, ar__dnnl_port_in(&c->d_dsrc, a->gin[0].p, c->s, &c->ws, w)},
    };
    ar__dnnl_prim_run(&c->bwd_d, c->s, &c->ws, w, 3, args);
    ar__dnnl_port_done(&c->d_dsrc, c->s, &c->ws, w);
  }
  dnnl_exec_arg_t args[5] = {
      {DNNL_ARG_SRC, ar__dnnl_port_in(&c->w_src, a->in[0].p, c->s, &c->ws, w)},
      {DNNL_ARG_DIFF_DST, a->gin[0].p && c->share_ddst
                              ? ar__dnnl_port_bind(&c->w_ddst, gy, &c->ws, w)
                              : ar__dnnl_port_in(&c->w_ddst, gy, c->s, &c->ws, w)},
      {DNNL_ARG_DIFF_WEIGHTS, ar__dnnl_port_in(&c->w_dwei, a->gparam[0].p, c->s, &c->ws, w)},
  };
  int n = 3;
  if (c->bias)
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS,
                                  ar__dnnl_port_in(&c->w_dbias, a->gparam[1].p, c->s, &c->ws, w)};
  ar__dnnl_prim_run(&c->bwd_w, c->s, &c->ws, w, n, args);
  ar__dnnl_port_done(&c->w_dwei, c->s, &c->ws, w);
  if (c->bias)
    ar__dnnl_port_done(&c->w_dbias, c->s, &c->ws, w);
  ar__dnnl_threads_leave(prev);
}

void ar__nn_host_conv_register(ar_nn_kernel *table) {
  table[AR_NN_CONV2D] = (ar_nn_kernel){
      .infer = conv_infer,
      .prepare = conv_prepare,
      .forward = conv_forward,
      .backward = conv_backward,
      .release = conv_release,
  };
  ar__nn_host_pool_register(table);
  ar__nn_host_bnorm_register(table);
}
