/* Graph models (include/accelrt/net.h): preparing the kernels, the blocks,
 * initialisation, a training step, evaluation, the optimizer and the
 * learning-rate schedule.  The plan and its workspace come from the host's
 * kernels (ar__net_workspace); on another device (CUDA) start prepares
 * that device's kernels in their place, each within the planned
 * workspace, initialises the parameters in a host image of the persistent
 * block and copies it in, and the few steps the engine does itself between
 * ops (summing the gradients of a tensor with several consumers, AdamW's
 * decay) go through device ops; on the host they stay plain loops. */
#include "net_impl.h"

#include <math.h>
#include <string.h>

static void fill_args(ar_net *n, nnode *d, bool training) {
  ar_nn_args *a = &d->args;
  ar_nn_args_from_sig(a, d->op, &d->attr, &d->sig);
  a->training = training;
  for (int k = 0; k < d->n_in; k++) {
    const ntensor *t = &n->tensors[d->in[k]];
    a->in[k] = (ar_tref){t->p, t->shape, t->dtype};
    a->gin[k] = (ar_tref){NULL, t->shape, AR_DT_F32};
    if (d->trains && d->gin[k] >= 0)
      a->gin[k].p = n->tensors[d->gin[k]].p;
  }
  for (int k = 0; k < d->sig.n_param; k++) {
    a->param[k].p = n->tensors[d->param[k]].p;
    a->gparam[k].p = d->trains ? n->tensors[d->gparam[k]].p : NULL;
  }
  for (int k = 0; k < d->sig.n_state; k++)
    a->state[k].p = n->tensors[d->state[k]].p;
  for (int k = 0; k < d->sig.n_out; k++) {
    const ntensor *t = &n->tensors[d->out[k]];
    a->out[k].p = t->p;
    a->gout[k].p = t->grad >= 0 ? n->tensors[t->grad].p : NULL;
  }
  for (int k = 0; k < d->sig.n_aux; k++)
    a->aux[k].p = n->tensors[d->aux[k]].p;
  a->work = d->work[0] >= 0 ? n->tensors[d->work[0]].p : NULL;
  a->work_bytes = d->work_bytes;
  a->scale = 1.0f / (float)(n->grad_rows > 0 ? n->grad_rows : n->batch);
}

ar_status ar__net_workspace(ar_net *n, ar_err *err) {
  /* The job's threads: oneDNN sizes a primitive's scratchpad and splits
   * its work by the thread count it was made with. */
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = n->threads;
  o.pin = false;
  ar_device *host = NULL;
  AR_CHECK(ar_device_open("host", &o, &host, err));
  ar_status st = AR_OK;
  for (int i = 0; i < n->n_nodes && st == AR_OK; i++) {
    nnode *d = &n->nodes[i];
    fill_args(n, d, true);
    size_t w1 = 0, w2 = 0;
    st = ar_device_nn_prepare(host, &d->args, true, &d->ptrain, &w1, err);
    if (st == AR_OK)
      st = ar_device_nn_prepare(host, &d->args, false, &d->peval, &w2, err);
    if (st != AR_OK)
      ar_err_wrap(err, "%s", d->path);
    d->work_bytes = w1 > w2 ? w1 : w2;
  }
  if (st == AR_OK)
    st = ar__net_fuse_prepare(n, host, err);
  ar_device_close(host);
  AR_CHECK(st);
  /* Each node's workspace: a tensor for its forward step and one for its
   * backward step (lifetimes in net.c), not one buffer for the iteration.
   * A hidden LSH-sampled node trains through its sampled kernels, never the
   * dense op's: no backward workspace; nor a forward one when it reads
   * the CSR rows (its evaluation scores them too: ar__net_hid_eval). */
  char tn[400];
  for (int i = 0; i < n->n_nodes; i++) {
    nnode *d = &n->nodes[i];
    d->work[0] = d->work[1] = -1;
    ar_shape ws = {1, {(int64_t)d->work_bytes}};
    const bool hid = d->hid1 > 0, hid_csr = hid && n->hid[d->hid1 - 1].csr;
    for (int k = hid_csr ? 2 : 0; k < 2 && d->work_bytes; k++) {
      if (k == 1 && (!d->trains || hid))
        break;
      snprintf(tn, sizeof tn, "%.300s.%s", d->name, k ? "work_bwd" : "work");
      int t = ar__net_tensor(n, tn, &ws, AR_DT_U8, T_WORK);
      if (t < 0)
        return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
      n->nodes[i].work[k] = t;
    }
  }
  ar_shape ts = {2, {n->batch, 5}};
  n->topk = ar__net_tensor(n, "eval.topk", &ts, AR_DT_I32, T_WORK);
  if (n->topk < 0)
    return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
  if (n->x >= 0) /* x, y (ids or targets), the loss's rows, the top 5 */
    n->staging_bytes = n->tensors[n->x].bytes + n->tensors[n->y].bytes +
                       (size_t)n->batch * (4 + 5 * 4);
  else if (ar_net_sparse_input(n)) /* the CSR batch instead of x and y */
    n->staging_bytes = ar__net_sparse_bytes(n) + (size_t)n->batch * (4 + 5 * 4) +
                       (n->xd >= 0 && n->spec->input.kind == AR_INPUT_DENSE
                            ? n->tensors[n->xd].bytes
                            : 0); /* a dense batch's rows (net_sparse_in.c) */
  return AR_OK;
}

/* ---- start ---------------------------------------------------------------- */

static void bind(ar_net *n) {
  for (int i = 0; i < n->n_tensors; i++) {
    ntensor *t = &n->tensors[i];
    char *base = t->cls == AR_MEM_PERSISTENT ? n->persistent : n->ephemeral;
    t->p = t->kind == T_SHAPE ? NULL : base + t->offset;
  }
  for (int i = 0; i < n->n_nodes; i++)
    fill_args(n, &n->nodes[i], true);
  ar__net_fuse_bind(n);
  ar__net_head_bind(n);
  ar__net_hid_bind(n);
}

static float gauss(ar_rng *r) {
  double u1 = ((double)(ar_rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
  double u2 = (double)(ar_rng_next(r) >> 11) / 9007199254740992.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static float uniform(ar_rng *r) {
  return (float)((double)(ar_rng_next(r) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Parameters from the seed, in plan order, each its own stream; state by
 * its init; optimizer state zero; values a graph's builder gave, as given.
 * Host memory (graph models run there). */
static void init_tensors(ar_net *n, bool zeroed) {
  const int rule = n->spec ? (int)n->spec->train.init : AR_INIT_AUTO;
  if (!zeroed)
    memset(n->persistent, 0, n->plan.persistent_bytes);
  for (int i = 0; i < n->n_tensors; i++) {
    ntensor *t = &n->tensors[i];
    if (t->init_data) {
      memcpy(t->p, t->init_data, t->bytes);
      ar_free(t->init_data);
      t->init_data = NULL;
      continue;
    }
    if ((t->kind != T_PARAM && t->kind != T_STATE) || ar__net_sparse_init(n, i))
      continue;
    float *p = t->p;
    int64_t cnt = ar_shape_count(&t->shape);
    ar_rng r;
    ar_rng_seed3(&r, n->seed, 0x6e6574u, (uint64_t)t->seed_index);
    double fan_in = t->shape.nd > 1 ? (double)cnt / (double)t->shape.d[0] : (double)cnt;
    double fan_out = t->shape.nd > 1 ? (double)t->shape.d[0] * (fan_in / (double)(t->shape.nd > 2 ? t->shape.d[1] : fan_in)) : (double)cnt;
    if (t->init == AR_NN_INIT_FAN_IN_ROWS) { /* held (in, out) */
      fan_in = (double)t->shape.d[0];
      fan_out = (double)t->shape.d[1];
    }
    double bound = 1.0 / sqrt(fan_in > 0 ? fan_in : 1); /* PyTorch's default */
    if (rule == AR_INIT_HE)
      bound = sqrt(6.0 / (fan_in > 0 ? fan_in : 1));
    else if (rule == AR_INIT_XAVIER)
      bound = sqrt(6.0 / (fan_in + fan_out > 0 ? fan_in + fan_out : 1));
    for (int64_t j = 0; j < cnt; j++) {
      switch (t->init) {
      case AR_NN_INIT_ZEROS:
        p[j] = 0.0f;
        break;
      case AR_NN_INIT_ONES:
        p[j] = 1.0f;
        break;
      case AR_NN_INIT_FAN_IN:
      case AR_NN_INIT_FAN_IN_ROWS:
        p[j] = (float)bound * uniform(&r);
        break;
      case AR_NN_INIT_NORMAL:
        p[j] = t->std * gauss(&r);
        break;
      }
    }
  }
}

static bool on_host(const ar_net *n) { return !strcmp(ar_device_name(n->dev), "host"); }

/* The device's kernels in place of the host's that planned the workspace:
 * each must fit the plan's workspace (the CUDA kernels never ask for more
 * than the host's for the same op), or the plan would not be exact. */
static ar_status prepare_device(ar_net *n, ar_err *err) {
  for (int i = 0; i < n->n_nodes; i++) {
    nnode *d = &n->nodes[i];
    ar_nn_prim *pt = NULL, *pe = NULL;
    size_t w1 = 0, w2 = 0;
    ar_status st = ar_device_nn_prepare(n->dev, &d->args, true, &pt, &w1, err);
    if (st == AR_OK)
      st = ar_device_nn_prepare(n->dev, &d->args, false, &pe, &w2, err);
    if (st == AR_OK && (w1 > d->work_bytes || w2 > d->work_bytes))
      st = ar_errf(err, AR_UNSUPPORTED,
                   "the %s kernel of '%s' asks for a workspace of %zu bytes, more than the "
                   "%zu the plan holds for it (a bug: run the job with device: host)",
                   ar_device_name(n->dev), ar_nn_op_name(d->op), w1 > w2 ? w1 : w2,
                   d->work_bytes);
    if (st != AR_OK) {
      ar_device_nn_release(n->dev, pt);
      ar_device_nn_release(n->dev, pe);
      return ar_err_wrap(err, "%s", d->path);
    }
    ar_device_nn_release(n->dev, d->ptrain);
    ar_device_nn_release(n->dev, d->peval);
    d->ptrain = pt;
    d->peval = pe;
  }
  return ar__net_fuse_prepare_device(n, err);
}

/* init_tensors into a host image of the persistent block (every tensor it
 * writes is persistent), then one copy to the device. */
static ar_status init_device(ar_net *n, ar_err *err) {
  void *img = ar_malloc(n->plan.persistent_bytes ? n->plan.persistent_bytes : 1);
  if (!img)
    return ar_errf(err, AR_NOMEM, "out of host memory initialising the parameters (%zu bytes)",
                   n->plan.persistent_bytes);
  void *base = n->persistent;
  n->persistent = img;
  bind(n);
  init_tensors(n, false);
  n->persistent = base;
  bind(n);
  ar_status st = ar_device_copy_in(n->dev, base, img, n->plan.persistent_bytes);
  ar_free(img);
  if (st != AR_OK)
    return ar_errf(err, st, "copying the initial parameters to %s: %s", ar_device_name(n->dev),
                   ar_device_errmsg(n->dev));
  return AR_OK;
}

ar_status ar_net_start(ar_net *n, ar_device *dev, void *persistent, void *ephemeral,
                       ar_err *err) {
  if (n->started)
    return ar_errf(err, AR_STATE, "the model is already started");
  n->dev = dev;
  if (persistent) {
    n->persistent = persistent;
    n->ephemeral = ephemeral;
  } else {
    AR_CHECK(ar_device_alloc(dev, n->plan.persistent_bytes, &n->persistent));
    ar_status st = ar_device_alloc(dev, n->plan.ephemeral_bytes, &n->ephemeral);
    if (st != AR_OK) {
      ar_device_free(dev, n->persistent, n->plan.persistent_bytes);
      n->persistent = NULL;
      return ar_errf(err, st, "%s", ar_device_errmsg(dev));
    }
    n->own_blocks = true;
    /* First touch through the device, as a chain's model does (model.c,
     * own_blocks): on the host the pages of both blocks are faulted in
     * here by the pinned team, not by the first iteration's kernels --
     * at the Amazon-670K shape the logits and their gradient (343 MB
     * each) cost that iteration about 1.4 s of page clearing, 10% of a
     * 10-iteration run, which the chain pays before its clock starts.
     * Not a sampled job's ephemeral block: its iterations touch the
     * active rows' share of it, and faulting all of it in made the
     * Amazon-670K LSH job's peak RSS 2,232 MiB instead of 1,974. */
    ar_device_fill(dev, n->persistent, (int64_t)(n->plan.persistent_bytes / sizeof(float)), 0.0f);
    if (n->head < 0 && n->n_hid == 0)
      ar_device_fill(dev, n->ephemeral, (int64_t)(n->plan.ephemeral_bytes / sizeof(float)),
                     0.0f);
  }
  AR_CHECK(ar_device_host_alloc(dev, n->staging_bytes, &n->staging));
  n->started = true;
  bind(n);
  if (on_host(n)) {
    init_tensors(n, n->own_blocks);
  } else {
    AR_CHECK(prepare_device(n, err));
    AR_CHECK(init_device(n, err));
    AR_CHECK(ar__net_sparse_start(n, err));
  }
  AR_CHECK(ar__net_hid_start(n, err));
  return ar__net_head_start(n, err);
}

void ar_net_rebase(ar_net *n, void *persistent, void *ephemeral) {
  if (persistent)
    n->persistent = persistent;
  if (ephemeral)
    n->ephemeral = ephemeral;
  bind(n);
}

void ar__net_stop(ar_net *n) {
  ar__net_head_stop(n);
  ar__net_hid_stop(n);
  ar__net_fuse_release(n);
  for (int i = 0; i < n->n_nodes; i++) {
    ar_device_nn_release(n->dev, n->nodes[i].ptrain);
    ar_device_nn_release(n->dev, n->nodes[i].peval);
    n->nodes[i].ptrain = n->nodes[i].peval = NULL;
  }
  if (n->dev && n->own_blocks) {
    ar_device_free(n->dev, n->persistent, n->plan.persistent_bytes);
    ar_device_free(n->dev, n->ephemeral, n->plan.ephemeral_bytes);
  }
  if (n->dev && n->staging)
    ar_device_host_free(n->dev, n->staging);
  n->staging = NULL;
  ar_free(n->sparse_rows);
  n->sparse_rows = NULL;
  n->own_blocks = false;
}

/* ---- a step --------------------------------------------------------------- */

void *ar_net_x(ar_net *n) { return n->staging; }
int64_t *ar_net_y(ar_net *n) {
  return (int64_t *)((char *)n->staging + n->tensors[n->x].bytes);
}
float *ar_net_targets(ar_net *n) { return (float *)ar_net_y(n); }
static float *staged_loss(ar_net *n) {
  if (ar_net_sparse_input(n))
    return (float *)((char *)n->staging + ar__net_sparse_bytes(n));
  return (float *)((char *)ar_net_y(n) + n->tensors[n->y].bytes);
}
static bool bce(const ar_net *n) { return n->y >= 0 && n->tensors[n->y].dtype == AR_DT_F32; }
static int32_t *staged_top(ar_net *n) { return (int32_t *)(staged_loss(n) + n->batch); }

static ar_status load(ar_net *n, ar_err *err) {
  if (ar_net_sparse_input(n))
    return ar__net_sparse_load(n, err); /* checked when staged */
  const int64_t *y = ar_net_y(n);
  for (int64_t r = 0; !bce(n) && r < n->batch; r++)
    if (y[r] < 0 || y[r] >= n->classes)
      return ar_errf(err, AR_RANGE,
                     "a point has class id %lld, but the model's last layer has %lld outputs "
                     "(ids 0..%lld); make the last dense layer as wide as the classes",
                     (long long)y[r], (long long)n->classes, (long long)n->classes - 1);
  const ntensor *x = &n->tensors[n->x], *yt = &n->tensors[n->y];
  if (n->spec->input.kind == AR_INPUT_TOKENS) {
    /* An id past the vocabulary would index outside the embedding table. */
    const int64_t *ids = n->staging, v = n->spec->input.vocab;
    int64_t cnt = ar_shape_count(&x->shape);
    for (int64_t i = 0; i < cnt; i++)
      if (ids[i] < 0 || ids[i] >= v)
        return ar_errf(err, AR_RANGE,
                       "a point holds token id %lld, outside model.input.vocab %lld (ids "
                       "0..%lld); raise vocab or fix the data",
                       (long long)ids[i], (long long)v, (long long)v - 1);
  }
  ar_status st = ar_device_copy_in(n->dev, x->p, n->staging, x->bytes);
  if (st == AR_OK)
    st = ar_device_copy_in(n->dev, yt->p, y, yt->bytes);
  if (st != AR_OK)
    return ar_errf(err, st, "copying the batch to the device: %s", ar_device_errmsg(n->dev));
  return AR_OK;
}

/* A hook of a distributed worker around a node (none: AR_OK). */
static ar_status node_hook(ar_net *n, bool after, ar_job_phase ph, int i) {
  ar_status (*fn)(void *, ar_job_phase, int) = after ? n->hooks.after : n->hooks.before;
  return fn ? fn(n->hooks.ctx, ph, i) : AR_OK;
}

/* The node computing the training loss, or -1. */
static int loss_node(const ar_net *n) {
  return n->loss >= 0 ? n->tensors[n->loss].producer : -1;
}

/* The loss node's span of a detailed iteration: one `loss` span from the
 * start of its forward to the end of its backward (or of its forward when
 * no backward step follows), as a chain's loss phase is one span (the
 * loss and its gradient; train.c, train_layers).  Under a sampled head the
 * head computes the loss: the span is then empty, as the chain's. */
static void loss_span(ar_net *n, double t0) {
  ar_trace_add_span(n->trace, AR_TRACE_STEPS, "loss", "loss", NULL, t0, ar_now(), true);
}

/* A training step's forward (detailed iterations of a trace: a span per
 * op, the loss op's in the `loss` span; host ops are synchronous, so the
 * span is the op's time), with the hooks around each node when training.
 * The nodes run in the forward order (net_order.c). */
static ar_status forward(ar_net *n, bool training, ar_err *err) {
  bool det = training && ar_trace_detail(n->trace);
  const int lnode = loss_node(n);
  ar_status st = AR_OK;
  for (int s = 0; s < n->n_nodes; s++) {
    const int i = n->order ? n->order[s] : s;
    nnode *d = &n->nodes[i];
    if (training)
      AR_CHECK(node_hook(n, false, AR_JOB_FORWARD, i));
    double t0 = det ? ar_now() : 0.0;
    d->args.training = training;
    d->args.seed = n->spec->seed ^ ((uint64_t)n->step * 0x9e3779b97f4a7c15ull) ^ (uint64_t)i;
    if (training && n->smp && i == n->head) {
      AR_CHECK(ar__net_head_forward(n, d, err)); /* the loss rows too */
    } else if (training && d->hid1 && n->hid[d->hid1 - 1].smp) {
      AR_CHECK(ar__net_hid_forward(n, d, err));
    } else if (!training && d->hid1 && ar__net_hid_eval(n, d, &st, err)) {
      AR_CHECK(st); /* a sampled layer over the sparse rows: the chain's scoring */
    } else if (!training && i == n->head && ar__net_head_eval(n, d, &st, err)) {
      AR_CHECK(st);
    } else if (training && n->smp && (d->after_head || (ar__net_is_loss(d->op) && !d->trains))) {
      if (det && i == lnode)
        loss_span(n, t0);
      continue; /* computed by the sampled head */
    } else if (!training && n->n_folds && ar__net_fold_forward(n, i)) {
      ; /* a conv folded with its batch norm (net_fuse.c) */
    } else if (training && i == lnode && d->op == AR_NN_XENT_MULTI && d->trains &&
               d->args.gin[0].p) {
      ; /* its backward, next, writes the loss rows with their gradient from
           the same logits (xmulti_backward): one softmax pass, as the
           chain's loss; the rows are read after the backward (read_loss) */
    } else {
      ar_device_nn_forward(n->dev, training ? d->ptrain : d->peval, &d->args);
    }
    if (det && i == lnode && d->trains)
      n->loss_t0 = t0; /* the span ends with its backward */
    else if (det && i == lnode)
      loss_span(n, t0);
    else if (det)
      ar_trace_add_span(n->trace, AR_TRACE_STEPS, "forward", "forward", d->name, t0, ar_now(),
                        true);
    if (training)
      AR_CHECK(node_hook(n, true, AR_JOB_FORWARD, i));
  }
  return AR_OK;
}

/* dst += src (host memory). */
static void add_into(float *dst, const float *src, int64_t cnt, int threads) {
#pragma omp parallel for num_threads(threads) if (cnt > 65536) schedule(static)
  for (int64_t i = 0; i < cnt; i++)
    dst[i] += src[i];
}

static ar_status backward(ar_net *n, ar_err *err) {
  int threads = ar_device_threads(n->dev);
  bool det = ar_trace_detail(n->trace);
  const int lnode = loss_node(n);
  for (int i = n->n_nodes - 1; i >= 0; i--) {
    nnode *d = &n->nodes[i];
    if (!d->trains)
      continue;
    AR_CHECK(node_hook(n, false, AR_JOB_BACKWARD, i));
    double t0 = det ? ar_now() : 0.0;
    if (n->smp && i == n->head) {
      AR_CHECK(ar__net_head_backward(n, d, err));
    } else if (d->hid1 && n->hid[d->hid1 - 1].smp) {
      AR_CHECK(ar__net_hid_backward(n, d, err));
    } else {
      /* The backward step's workspace (its own tensor in the plan). */
      void *fwd_work = d->args.work, *fwd_in[AR_NN_MAX_IO];
      d->args.work = d->work[1] >= 0 ? n->tensors[d->work[1]].p : NULL;
      /* Inputs recomputed rather than kept (net_remat.c): their copies. */
      ar__net_recompute(n, d);
      for (int k = 0; k < d->n_in; k++) {
        fwd_in[k] = d->args.in[k].p;
        if (d->again[k] >= 0)
          d->args.in[k].p = n->tensors[d->again[k]].p;
      }
      ar_device_nn_backward(n->dev, d->ptrain, &d->args);
      for (int k = 0; k < d->n_in; k++)
        d->args.in[k].p = fwd_in[k];
      d->args.work = fwd_work;
    }
    ar__net_add_temps(n, d, threads);
    if (det && i == lnode)
      loss_span(n, n->loss_t0);
    else if (det)
      ar_trace_add_span(n->trace, AR_TRACE_STEPS, "backward", "backward", d->name, t0, ar_now(),
                        true);
    AR_CHECK(node_hook(n, true, AR_JOB_BACKWARD, i));
  }
  return AR_OK;
}

/* dst += src on the net's device: the host's loop, or the device's column
 * sum of one row (which accumulates into dst). */
static void add_on(ar_net *n, float *dst, const float *src, int64_t cnt, int threads) {
  if (on_host(n))
    add_into(dst, src, cnt, threads);
  else
    ar_device_col_sum(n->dev, 1, cnt, src, true, dst);
}

void ar__net_add_temps(ar_net *n, const nnode *d, int threads) {
  for (int k = 0; k < d->n_in; k++)
    if (d->gtmp[k] >= 0)
      add_on(n, n->tensors[d->gtmp[k]].p, n->tensors[d->gin[k]].p,
             ar_shape_count(&n->tensors[d->in[k]].shape), threads);
  for (int k = 0; k < d->sig.n_param; k++)
    if (d->gptmp[k] >= 0)
      add_on(n, n->tensors[d->gptmp[k]].p, n->tensors[d->gparam[k]].p,
             ar_shape_count(&d->sig.param[k]), threads);
}

static double schedule_lr(const ar_net *n, int64_t t) {
  const ar_spec *s = n->spec;
  double lr = s->train.lr;
  int64_t warm = s->train.schedule.warmup;
  if (warm > 0 && t <= warm)
    return lr * (double)t / (double)warm;
  switch (s->train.schedule.kind) {
  case 1:
    return lr * pow(s->train.schedule.gamma, (double)((t - 1) / s->train.schedule.step_every));
  case 2: {
    int64_t total = n->total > warm ? n->total - warm : 1;
    double f = (double)(t - warm) / (double)total;
    f = f > 1 ? 1 : f;
    double lo = s->train.schedule.min_lr;
    return lo + (lr - lo) * 0.5 * (1.0 + cos(3.141592653589793 * f));
  }
  default:
    return lr;
  }
}

/* Whether tensor t is a parameter of the started sampled head (an
 * imported graph's parameters have no producer: compared by id). */
static bool head_param(const ar_net *n, int t) {
  if (!n->smp)
    return false;
  const nnode *d = &n->nodes[n->head];
  return t == d->param[0] || t == d->param[1];
}

double ar_net_opt_begin(ar_net *n) {
  n->step++;
  return schedule_lr(n, n->step);
}

void ar_net_opt_param(ar_net *n, int tensor, double lr) {
  const ar_spec *s = n->spec;
  ntensor *t = &n->tensors[tensor];
  int64_t cnt = ar_shape_count(&t->shape);
  float wd = t->decay ? (float)s->train.weight_decay : 0.0f;
  float *g = n->tensors[t->grad].p;
  if (s->train.optimizer == AR_OPT_ADAM && s->train.decoupled) {
    /* AdamW: the weights shrink, the gradient stays the loss's.  On a
     * device: a GEMM with k = 0, which scales C (the weights, one row) by
     * beta. */
    float keep = 1.0f - (float)lr * wd, *w = t->p;
    if (on_host(n))
      for (int64_t j = 0; wd > 0 && j < cnt; j++)
        w[j] *= keep;
    else if (wd > 0)
      ar_device_gemm(n->dev, false, false, 1, cnt, 0, 1.0f, w, 1, w, cnt, keep, w, cnt);
    wd = 0.0f;
  }
  if (s->train.optimizer == AR_OPT_ADAM)
    ar_device_adam(n->dev, cnt, t->p, g, n->tensors[t->opt1].p, n->tensors[t->opt2].p,
                   (float)lr, (float)s->train.beta1, (float)s->train.beta2,
                   (float)s->train.eps, wd, n->step);
  else
    ar_device_sgd(n->dev, cnt, t->p, g, t->opt1 >= 0 ? n->tensors[t->opt1].p : NULL,
                  (float)lr, (float)s->train.momentum, wd);
}

static double optimizer(ar_net *n) {
  double lr = ar_net_opt_begin(n);
  for (int i = 0; i < n->n_tensors; i++)
    if (n->tensors[i].kind == T_PARAM && n->tensors[i].sparse)
      ar__net_opt_sparse(n, i, lr); /* an embedding's rows of the batch (net_sparse_grad.c) */
    else if (n->tensors[i].kind == T_PARAM && !head_param(n, i) && !ar__net_hid_param(n, i))
      ar_net_opt_param(n, i, lr); /* a sampled head's rows: its sparse Adam (ar__net_head_step) */
  return lr;
}

static ar_status device_status(ar_net *n, ar_err *err) {
  ar_status st = ar_device_status(n->dev);
  if (st != AR_OK)
    return ar_errf(err, st, "%s", ar_device_errmsg(n->dev));
  return AR_OK;
}

static ar_status read_loss(ar_net *n, double *loss, ar_err *err);

ar_status ar__net_grad(ar_net *n, double *loss, ar_err *err) {
  AR_CHECK(load(n, err));
  AR_CHECK(forward(n, true, err));
  AR_CHECK(backward(n, err));
  return read_loss(n, loss, err);
}

ar_status ar_net_train(ar_net *n, double *loss, double *lr, ar_err *err) {
  AR_CHECK(load(n, err));
  AR_CHECK(forward(n, true, err));
  AR_CHECK(backward(n, err));
  double t0 = n->trace ? ar_now() : 0.0;
  if (n->hooks.step) { /* the servers step: the step still counts */
    n->step++;
    *lr = schedule_lr(n, n->step);
    AR_CHECK(n->hooks.step(n->hooks.ctx));
  } else {
    *lr = optimizer(n);
    if (n->smp)
      AR_CHECK(ar__net_head_step(n, err));
    AR_CHECK(ar__net_hid_step(n, err));
  }
  if (n->trace)
    ar_trace_add_span(n->trace, AR_TRACE_STEPS, "optimizer",
                      n->hooks.step ? "remote step" : "optimizer", NULL, t0, ar_now(), false);
  return read_loss(n, loss, err);
}

static ar_status read_loss(ar_net *n, double *loss, ar_err *err) {
  const ntensor *l = &n->tensors[n->loss];
  float *rows = staged_loss(n);
  ar_status st = ar_device_copy_out(n->dev, rows, l->p, l->bytes);
  if (st != AR_OK)
    return ar_errf(err, st, "reading the loss: %s", ar_device_errmsg(n->dev));
  double sum = 0;
  for (int64_t r = 0; r < n->batch; r++) /* padding rows: 0 */
    sum += rows[r];
  if (n->smp && n->spec && n->spec->lowered) /* a chain's sampled head: its sum of the */
    sum = n->head_loss_sum;                    /* rows' double losses, as the chain's */
  const int64_t real = ar_net_sparse_input(n) ? n->rows : n->batch;
  *loss = sum / (double)(real > 0 ? real : 1);
  return device_status(n, err);
}

ar_status ar_net_eval(ar_net *n, int64_t rows, ar_eval_acc *acc, ar_err *err) {
  AR_CHECK(load(n, err));
  AR_CHECK(forward(n, false, err));
  const ntensor *l = &n->tensors[n->loss], *lg = &n->tensors[n->logits];
  int k = n->classes < 5 ? (int)n->classes : 5;
  int32_t *top_dev = n->tensors[n->topk].p;
  ar_device_topk(n->dev, n->batch, n->classes, lg->p, k, top_dev);
  float *loss = staged_loss(n);
  int32_t *top = staged_top(n);
  ar_status st = ar_device_copy_out(n->dev, loss, l->p, l->bytes);
  if (st == AR_OK)
    st = ar_device_copy_out(n->dev, top, top_dev, (size_t)n->batch * (size_t)k * 4);
  if (st != AR_OK)
    return ar_errf(err, st, "reading the evaluation: %s", ar_device_errmsg(n->dev));
  if (ar_net_sparse_input(n)) {
    ar__net_sparse_hits(n, loss, top, k, acc);
    return device_status(n, err);
  }
  const int64_t *y = ar_net_y(n);
  const float *t = ar_net_targets(n);
  for (int64_t r = 0; r < rows && r < n->batch; r++) {
    acc->loss_sum += loss[r];
    acc->rows++;
    /* A hit: the point's class, or (targets) any of its labels. */
    for (int j = 0; j < k; j++)
      if (bce(n) ? t[r * n->classes + top[r * k + j]] > 0.5f : top[r * k + j] == y[r]) {
        if (j == 0)
          acc->hits[0] += 1;
        if (j < 3)
          acc->hits[1] += 1;
        acc->hits[2] += 1;
        break;
      }
  }
  return device_status(n, err);
}

ar_status ar_net_eval_logits(ar_net *n, float *out, ar_err *err) {
  AR_CHECK(load(n, err));
  AR_CHECK(forward(n, false, err));
  const ntensor *lg = &n->tensors[n->logits];
  ar_status st = ar_device_copy_out(n->dev, out, lg->p, lg->bytes);
  if (st != AR_OK)
    return ar_errf(err, st, "reading the logits: %s", ar_device_errmsg(n->dev));
  return device_status(n, err);
}

void ar_net_set_total(ar_net *n, int64_t total) { n->total = total; }
int64_t ar_net_step(const ar_net *n) { return n->step; }
void ar_net_set_step(ar_net *n, int64_t step) { n->step = step; }

ar_status ar_net_resumed(ar_net *n, ar_err *err) {
  if (n->started)
    AR_CHECK(ar__net_hid_start(n, err));
  return n->started ? ar__net_head_start(n, err) : AR_OK;
}
ar_device *ar_net_device(const ar_net *n) { return n->dev; }
void ar_net_set_trace(ar_net *n, ar_trace *t) {
  n->trace = t;
  /* Sampled items' table rebuilds go to their own track, named as a
   * chain's (train.c, ar_job_start). */
  bool smp = n->smp != NULL;
  for (int h = 0; h < n->n_hid; h++)
    smp = smp || n->hid[h].smp != NULL;
  if (t && smp)
    ar_trace_track(t, AR_TRACE_LSH, "lsh tables", false);
}

int ar_net_tensors(const ar_net *n, const char **names, float **ptrs, int64_t *counts,
                   ar_shape *shapes) {
  int c = 0;
  for (int i = 0; i < n->n_tensors; i++) {
    const ntensor *t = &n->tensors[i];
    if (t->kind != T_PARAM && t->kind != T_STATE && t->kind != T_OPT)
      continue;
    if (names) {
      names[c] = t->name;
      ptrs[c] = t->p;
      counts[c] = ar_shape_count(&t->shape);
      if (shapes) {
        shapes[c] = t->shape;
        if (t->tr) { /* the model's shape (ar_net_model_layout) */
          shapes[c].d[0] = t->shape.d[1];
          shapes[c].d[1] = t->shape.d[0];
        }
      }
    }
    c++;
  }
  return c;
}

ar_status ar_net_model_layout(ar_net *n, bool model, ar_err *err) {
  for (int i = 0; i < n->n_tensors; i++) {
    const ntensor *t = &n->tensors[i];
    if (!t->tr || !t->p)
      continue;
    /* Held (R, C); the model's layout is (C, R). */
    const int64_t R = model ? t->shape.d[0] : t->shape.d[1];
    const int64_t C = model ? t->shape.d[1] : t->shape.d[0];
    float *a = ar_malloc(t->bytes ? t->bytes : 1), *b = ar_malloc(t->bytes ? t->bytes : 1);
    ar_status st = a && b ? ar_device_copy_out(n->dev, a, t->p, t->bytes) : AR_NOMEM;
    if (st == AR_OK) {
      for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
          b[c * R + r] = a[r * C + c];
      st = ar_device_copy_in(n->dev, t->p, b, t->bytes);
    }
    ar_free(a);
    ar_free(b);
    if (st != AR_OK)
      return ar_errf(err, st, "transposing '%s' to the %s layout: %s", t->name,
                     model ? "model's" : "run's",
                     st == AR_NOMEM ? "out of host memory" : ar_device_errmsg(n->dev));
  }
  return AR_OK;
}

/* ---- parameter servers (runtime/dist) -------------------------------------- */

void ar_net_set_grad_rows(ar_net *n, int64_t rows) {
  n->grad_rows = rows;
  if (n->started)
    for (int i = 0; i < n->n_nodes; i++)
      fill_args(n, &n->nodes[i], true);
}

void ar_net_set_hooks(ar_net *n, const ar_job_hooks *h) {
  if (h)
    n->hooks = *h;
  else
    memset(&n->hooks, 0, sizeof n->hooks);
}

int ar_net_params(const ar_net *n, ar_net_param *out) {
  int c = 0;
  for (int i = 0; i < n->n_tensors; i++) {
    const ntensor *t = &n->tensors[i];
    if (t->kind != T_PARAM)
      continue;
    if (out) {
      ar_net_param *q = &out[c];
      q->name = t->name;
      q->shape = t->shape;
      q->count = ar_shape_count(&t->shape);
      q->tensor = i;
      q->p = t->p;
      q->g = n->tensors[t->grad].p;
      q->s1 = t->opt1 >= 0 ? n->tensors[t->opt1].p : NULL;
      q->s2 = t->opt2 >= 0 ? n->tensors[t->opt2].p : NULL;
      /* The first reader in the forward order (net_order.c) waits for it;
       * the first listed reader that trains goes backward last: its
       * backward (writing or adding the last part) makes the gradient
       * final. */
      q->first = q->ready = -1;
      for (int s = 0; s < n->n_nodes && q->first < 0; s++) {
        const int j = n->order ? n->order[s] : s;
        for (int k = 0; k < n->nodes[j].sig.n_param; k++)
          if (n->nodes[j].param[k] == i)
            q->first = j;
      }
      for (int j = 0; j < n->n_nodes && q->ready < 0; j++)
        for (int k = 0; k < n->nodes[j].sig.n_param; k++)
          if (n->nodes[j].param[k] == i && n->nodes[j].trains)
            q->ready = j;
    }
    c++;
  }
  return c;
}

int ar_net_states(const ar_net *n, const char **names, float **ptrs, int64_t *counts) {
  int c = 0;
  for (int i = 0; i < n->n_tensors; i++) {
    const ntensor *t = &n->tensors[i];
    if (t->kind != T_STATE)
      continue;
    if (names) {
      names[c] = t->name;
      ptrs[c] = t->p;
      counts[c] = ar_shape_count(&t->shape);
    }
    c++;
  }
  return c;
}

int ar_net_node_count(const ar_net *n) { return n->n_nodes; }
const char *ar_net_node_name(const ar_net *n, int node) { return n->nodes[node].name; }
bool ar_net_node_trains(const ar_net *n, int node) { return n->nodes[node].trains; }

int ar_net_node_inputs(const ar_net *n, int node, int *deps, int cap) {
  const nnode *d = &n->nodes[node];
  int c = 0;
  for (int k = 0; k < d->n_in; k++) {
    int p = n->tensors[d->in[k]].producer;
    if (p >= 0 && c < cap)
      deps[c++] = p;
  }
  return c;
}

int ar_net_node_params(const ar_net *n, int node, int *tensors, int cap) {
  const nnode *d = &n->nodes[node];
  int c = 0;
  for (int k = 0; k < d->sig.n_param; k++)
    if (n->tensors[d->param[k]].kind == T_PARAM && c < cap)
      tensors[c++] = d->param[k];
  return c;
}
