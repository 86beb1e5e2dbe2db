/* The model: allocation by the plan, initialisation, and one iteration as
 * forward, loss, backward and optimizer step through the device table. */
#include "engine_impl.h"

#include <math.h>
#include <string.h>

void *ar__plan_ptr(ar_model *m, const char *layer, const char *what) {
  char name[64];
  snprintf(name, sizeof name, "%s%s%s", layer, what ? "." : "", what ? what : "");
  for (int i = 0; i < m->plan.count; i++) {
    const ar_plan_entry *e = &m->plan.entries[i];
    if (e->cls != AR_MEM_HOST && strcmp(e->name, name) == 0) {
      char *base = e->cls == AR_MEM_PERSISTENT ? m->persistent : m->ephemeral;
      return base + e->offset;
    }
  }
  return NULL;
}

/* Fills n parameters on the device from a host staging buffer, chunk by
 * chunk, so initialisation needs little host memory for huge layers. */
static ar_status init_tensor(ar_model *m, float *dst, int64_t n, int kind, double scale,
                             ar_rng *rng, float *stage, int64_t stage_n) {
  for (int64_t off = 0; off < n; off += stage_n) {
    int64_t c = n - off < stage_n ? n - off : stage_n;
    for (int64_t i = 0; i < c; i++) {
      if (kind == 0)
        stage[i] = (float)(ar_rng_normal(rng) * scale);
      else
        stage[i] = (float)((2.0 * ar_rng_uniform(rng) - 1.0) * scale);
    }
    AR_CHECK(ar_device_copy_in(m->dev, dst + off, stage, (size_t)c * sizeof(float)));
  }
  return AR_OK;
}

static ar_status init_params(ar_model *m) {
  const ar_spec *spec = m->spec;
  const int64_t stage_n = 1 << 16;
  float *stage = ar_malloc((size_t)stage_n * sizeof(float));
  if (!stage)
    return ar_errf(&m->err, AR_NOMEM, "out of host memory initialising parameters");
  ar_status st = AR_OK;
  for (int l = 0; l < m->n_layers && st == AR_OK; l++) {
    ar_layer *L = &m->layers[l];
    ar_init_kind kind = spec->train.init;
    if (kind == AR_INIT_AUTO)
      kind = L->act == AR_ACT_RELU ? AR_INIT_HE : AR_INIT_XAVIER;
    ar_rng rng;
    /* One stream per layer: a layer's initial values do not depend on the
     * shapes of the layers before it. */
    ar_rng_seed(&rng, spec->seed, 1000 + (uint64_t)l);
    if (kind == AR_INIT_HE)
      st = init_tensor(m, L->w, L->in * L->out, 0, sqrt(2.0 / (double)L->in), &rng, stage,
                       stage_n);
    else
      st = init_tensor(m, L->w, L->in * L->out, 1, sqrt(6.0 / (double)(L->in + L->out)), &rng,
                       stage, stage_n);
    if (st == AR_OK)
      ar_device_fill(m->dev, L->b, L->out, 0.0f);
    if (L->s1w) {
      ar_device_fill(m->dev, L->s1w, L->in * L->out, 0.0f);
      ar_device_fill(m->dev, L->s1b, L->out, 0.0f);
    }
    if (L->s2w) {
      ar_device_fill(m->dev, L->s2w, L->in * L->out, 0.0f);
      ar_device_fill(m->dev, L->s2b, L->out, 0.0f);
    }
  }
  ar_free(stage);
  return st;
}

/* Points every tensor of the model into the two blocks. */
static void bind(ar_model *m) {
  const ar_spec *spec = m->spec;
  for (int l = 0; l < m->n_layers; l++) {
    const ar_layer_spec *ls = &spec->layers[l];
    ar_layer *L = &m->layers[l];
    L->w = ar__plan_ptr(m, ls->name, "w");
    L->b = ar__plan_ptr(m, ls->name, "b");
    L->s1w = ar__plan_ptr(m, ls->name, "state1.w");
    L->s1b = ar__plan_ptr(m, ls->name, "state1.b");
    L->s2w = ar__plan_ptr(m, ls->name, "state2.w");
    L->s2b = ar__plan_ptr(m, ls->name, "state2.b");
    L->gw = ar__plan_ptr(m, ls->name, "grad.w");
    L->gb = ar__plan_ptr(m, ls->name, "grad.b");
    L->y = ar__plan_ptr(m, ls->name, "y");
    L->dy = ar__plan_ptr(m, ls->name, "grad.y");
    AR_ASSERT(L->w && L->b && L->gw && L->gb && L->y);
  }
  m->row_ptr = ar__plan_ptr(m, "batch", "row_ptr");
  m->idx = ar__plan_ptr(m, "batch", "idx");
  m->val = ar__plan_ptr(m, "batch", "val");
  m->lab_ptr = ar__plan_ptr(m, "batch", "lab_ptr");
  m->lab = ar__plan_ptr(m, "batch", "lab");
  m->x = ar__plan_ptr(m, "batch", "x");
  m->loss_rows = ar__plan_ptr(m, "loss", "rows");
  m->topk = ar__plan_ptr(m, "eval", "topk");
  ar__sampled_bind(m);
}

ar_status ar_model_create(ar_device *dev, const ar_spec *spec, int64_t max_nnz,
                          int64_t max_labels, ar_model **out, ar_err *err) {
  return ar_model_create_in(dev, spec, max_nnz, max_labels, NULL, NULL, out, err);
}

/* The model's own blocks (no lane gave it any): refused before
 * allocating when the device cannot hold the plan -- a failed allocation
 * would say less, and an overcommitting host could grant it and let the
 * OOM killer end the job later. */
static ar_status own_blocks(ar_model *m, ar_err *err) {
  ar_device *dev = m->dev;
  ar_mem_limit lim;
  ar_mem_limit_get(m->spec, dev, &lim);
  AR_CHECK(ar_plan_fit(&m->plan, m->spec, &lim, err));
  ar_status st = ar_device_alloc(dev, m->plan.persistent_bytes, &m->persistent);
  if (st != AR_OK)
    return ar_errf(err, st, "cannot allocate %zu bytes of persistent memory (parameters and "
                   "optimizer state) on %s: %s; use a smaller model", m->plan.persistent_bytes,
                   ar_device_name(dev), ar_device_errmsg(dev));
  st = ar_device_alloc(dev, m->plan.ephemeral_bytes, &m->ephemeral);
  if (st != AR_OK)
    return ar_errf(err, st, "cannot allocate %zu bytes of ephemeral memory (one iteration) on "
                   "%s: %s; lower train.batch", m->plan.ephemeral_bytes, ar_device_name(dev),
                   ar_device_errmsg(dev));
  /* First touch through the device: on the host its fill runs on the
   * pinned team in static chunks, so each page lands on the NUMA node of
   * the thread that will mostly use that part of the rows, not all on the
   * node of the thread that created the model. */
  ar_device_fill(dev, m->persistent, (int64_t)(m->plan.persistent_bytes / sizeof(float)), 0.0f);
  ar_device_fill(dev, m->ephemeral, (int64_t)(m->plan.ephemeral_bytes / sizeof(float)), 0.0f);
  return AR_OK;
}

ar_status ar_model_create_in(ar_device *dev, const ar_spec *spec, int64_t max_nnz,
                             int64_t max_labels, void *persistent, void *ephemeral,
                             ar_model **out, ar_err *err) {
  *out = NULL;
  ar_model *m = ar_calloc(1, sizeof *m);
  if (!m)
    return ar_errf(err, AR_NOMEM, "out of host memory creating the model");
  m->dev = dev;
  m->spec = spec;
  m->batch = spec->train.batch;
  m->max_nnz = max_nnz < 1 ? 1 : max_nnz;
  m->max_labels = max_labels < 1 ? 1 : max_labels;
  const bool host = !strcmp(ar_device_name(dev), "host");
  ar_status st = ar_plan_compute_on(spec, m->max_nnz, m->max_labels, host, &m->plan, err);
  if (st != AR_OK)
    goto fail;
  m->blocks_given = persistent != NULL;
  if (persistent) {
    m->persistent = persistent;
    m->ephemeral = ephemeral;
  } else if ((st = own_blocks(m, err)) != AR_OK) {
    goto fail;
  }
  m->n_layers = spec->n_layers;
  m->layers = ar_calloc((size_t)m->n_layers, sizeof *m->layers);
  if (!m->layers) {
    st = ar_errf(err, AR_NOMEM, "out of host memory creating the model");
    goto fail;
  }
  int64_t in = spec->input.features;
  for (int l = 0; l < m->n_layers; l++) {
    const ar_layer_spec *ls = &spec->layers[l];
    ar_layer *L = &m->layers[l];
    L->name = ls->name;
    L->in = in;
    L->out = ls->width;
    L->act = ls->act;
    L->sparse_in = l == 0 && spec->input.sparse;
    in = ls->width;
  }
  bind(m);
  for (int l = 0; l < m->n_layers; l++) {
    if (!ar_layer_sampled(spec, l, host))
      continue;
    m->n_sampled++;
    /* Sampled rows are (out, in) even behind the sparse input. */
    m->layers[l].sparse_in = false;
    st = ar__sampled_create(m, l);
    if (st != AR_OK) {
      ar_errf(err, st, "%s", m->err.msg);
      goto fail;
    }
  }
  if (!spec->input.sparse) {
    m->host_scratch = ar_malloc((size_t)m->batch * (size_t)spec->input.features * sizeof(float));
    if (!m->host_scratch) {
      st = ar_errf(err, AR_NOMEM, "out of host memory for the dense input staging buffer");
      goto fail;
    }
  }
  st = init_params(m);
  if (st == AR_OK)
    st = ar__sampled_init(m);
  if (st != AR_OK) {
    ar_errf(err, st, "initialising parameters: %s",
            m->err.msg[0] ? m->err.msg : ar_device_errmsg(dev));
    goto fail;
  }
  *out = m;
  return AR_OK;
fail:
  ar_model_destroy(m);
  return st;
}

void ar_model_rebase(ar_model *m, void *persistent, void *ephemeral) {
  if (persistent)
    m->persistent = persistent;
  if (ephemeral)
    m->ephemeral = ephemeral;
  bind(m);
}

void ar_model_destroy(ar_model *m) {
  if (!m)
    return;
  if (m->ephemeral && !m->blocks_given)
    ar_device_free(m->dev, m->ephemeral, m->plan.ephemeral_bytes);
  if (m->persistent && !m->blocks_given)
    ar_device_free(m->dev, m->persistent, m->plan.persistent_bytes);
  ar_free(m->host_scratch);
  for (int l = 0; m->layers && l < m->n_layers; l++)
    ar__sampled_destroy(m->layers[l].smp);
  ar_free(m->layers);
  ar_plan_fini(&m->plan);
  ar_free(m);
}

ar_status ar_model_load(ar_model *m, const ar_batch *b) {
  ar_device *d = m->dev;
  int64_t rows = b->rows;
  int64_t nnz = b->row_ptr[rows], nlab = b->lab_ptr[rows];
  if (rows > m->batch || nnz > m->batch * m->max_nnz || nlab > m->batch * m->max_labels)
    return ar_errf(&m->err, AR_RANGE,
                   "batch of %lld rows, %lld features, %lld labels exceeds the planned "
                   "shape (%lld rows of at most %lld features and %lld labels)",
                   (long long)rows, (long long)nnz, (long long)nlab, (long long)m->batch,
                   (long long)m->max_nnz, (long long)m->max_labels);
  m->rows = rows;
  AR_CHECK(ar_device_copy_in(d, m->row_ptr, b->row_ptr, (size_t)(rows + 1) * sizeof(int64_t)));
  AR_CHECK(ar_device_copy_in(d, m->idx, b->idx, (size_t)nnz * sizeof(int32_t)));
  AR_CHECK(ar_device_copy_in(d, m->val, b->val, (size_t)nnz * sizeof(float)));
  AR_CHECK(ar_device_copy_in(d, m->lab_ptr, b->lab_ptr, (size_t)(rows + 1) * sizeof(int64_t)));
  AR_CHECK(ar_device_copy_in(d, m->lab, b->lab, (size_t)nlab * sizeof(int32_t)));
  if (m->x) {
    /* Dense input: scatter the sparse rows into (rows, features). */
    int64_t F = m->spec->input.features;
    memset(m->host_scratch, 0, (size_t)rows * (size_t)F * sizeof(float));
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = b->row_ptr[r]; j < b->row_ptr[r + 1]; j++)
        m->host_scratch[r * F + b->idx[j]] += b->val[j];
    AR_CHECK(ar_device_copy_in(d, m->x, m->host_scratch, (size_t)rows * (size_t)F * sizeof(float)));
  }
  return AR_OK;
}

void ar_model_forward_layer(ar_model *m, int l) {
  ar_device *d = m->dev;
  ar_layer *L = &m->layers[l];
  const float *x = l == 0 ? m->x : m->layers[l - 1].y;
  if (L->sparse_in)
    ar_device_spmm(d, m->rows, m->row_ptr, m->idx, m->val, L->w, L->out, L->y);
  else
    ar_device_gemm(d, false, true, m->rows, L->out, L->in, 1.0f, x, L->in, L->w, L->in, 0.0f,
                   L->y, L->out);
  bool last = l + 1 == m->n_layers;
  ar_device_bias_act(d, m->rows, L->out, L->b, last ? AR_ACT_NONE : L->act, L->y);
}

void ar_model_forward(ar_model *m) {
  for (int l = 0; l < m->n_layers; l++)
    ar_model_forward_layer(m, l);
}

float ar_model_loss(ar_model *m, bool want_grad) {
  ar_device *d = m->dev;
  ar_layer *L = &m->layers[m->n_layers - 1];
  if (m->rows == 0)
    return 0.0f;
  float scale = 1.0f / (float)(m->grad_rows > 0 ? m->grad_rows : m->rows);
  float *grad = want_grad ? L->y : NULL;
  if (L->act == AR_ACT_SIGMOID)
    ar_device_sigmoid_bce(d, m->rows, L->out, L->y, m->lab_ptr, m->lab, scale, grad, m->loss_rows);
  else
    ar_device_softmax_xent(d, m->rows, L->out, L->y, m->lab_ptr, m->lab, scale, grad,
                           m->loss_rows);
  /* The row losses are tiny (batch floats): sum them on the host. */
  float rows_loss[4096];
  double sum = 0.0;
  for (int64_t off = 0; off < m->rows; off += 4096) {
    int64_t c = m->rows - off < 4096 ? m->rows - off : 4096;
    ar_status st = ar_device_copy_out(d, rows_loss, m->loss_rows + off, (size_t)c * sizeof(float));
    if (st != AR_OK) {
      /* A device failure (an asynchronous op's, reported here): NaN makes
       * the caller stop, and m->loss_status says why. */
      m->loss_status = st;
      ar_errf(&m->err, st, "reading the loss from the device: %s", ar_device_errmsg(d));
      return NAN;
    }
    for (int64_t i = 0; i < c; i++)
      sum += rows_loss[i];
  }
  return (float)(sum / (double)m->rows);
}

void ar_model_backward_layer(ar_model *m, int l) {
  ar_device *d = m->dev;
  ar_layer *L = &m->layers[l];
  /* G: gradient wrt this layer's pre-activation output (rows, out). */
  const float *g = l + 1 == m->n_layers ? L->y : L->dy;
  ar_device_col_sum(d, m->rows, L->out, g, false, L->gb);
  if (L->sparse_in) {
    ar_device_fill(d, L->gw, L->in * L->out, 0.0f);
    ar_device_spmm_t(d, m->rows, m->row_ptr, m->idx, m->val, g, L->out, L->gw);
  } else {
    const float *x = l == 0 ? m->x : m->layers[l - 1].y;
    /* gw (out, in) = G^T X */
    ar_device_gemm(d, true, false, L->out, L->in, m->rows, 1.0f, g, L->out, x, L->in, 0.0f,
                   L->gw, L->in);
  }
  if (l > 0) {
    ar_layer *P = &m->layers[l - 1];
    /* dY_prev (rows, in) = G W, then through the previous activation. */
    ar_device_gemm(d, false, false, m->rows, L->in, L->out, 1.0f, g, L->out, L->w, L->in, 0.0f,
                   P->dy, P->out);
    ar_device_act_grad(d, m->rows * P->out, P->act, P->y, P->dy);
  }
}

void ar_model_backward(ar_model *m) {
  for (int l = m->n_layers - 1; l >= 0; l--)
    ar_model_backward_layer(m, l);
}

void ar_model_step_layer(ar_model *m, int l) {
  ar_device *d = m->dev;
  const ar_spec *s = m->spec;
  ar_layer *L = &m->layers[l];
  int64_t nw = L->in * L->out;
  if (s->train.optimizer == AR_OPT_ADAM) {
    ar_device_adam(d, nw, L->w, L->gw, L->s1w, L->s2w, (float)s->train.lr, (float)s->train.beta1,
                   (float)s->train.beta2, (float)s->train.eps, (float)s->train.weight_decay,
                   m->step);
    ar_device_adam(d, L->out, L->b, L->gb, L->s1b, L->s2b, (float)s->train.lr,
                   (float)s->train.beta1, (float)s->train.beta2, (float)s->train.eps,
                   (float)s->train.weight_decay, m->step);
  } else {
    ar_device_sgd(d, nw, L->w, L->gw, L->s1w, (float)s->train.lr, (float)s->train.momentum,
                  (float)s->train.weight_decay);
    ar_device_sgd(d, L->out, L->b, L->gb, L->s1b, (float)s->train.lr, (float)s->train.momentum,
                  (float)s->train.weight_decay);
  }
}

void ar_model_advance_step(ar_model *m) {
  m->step++;
}

void ar_model_set_step(ar_model *m, int64_t step) {
  AR_ASSERT(step >= 0);
  m->step = step;
}

void ar_model_step(ar_model *m) {
  ar_model_advance_step(m);
  for (int l = 0; l < m->n_layers; l++)
    ar_model_step_layer(m, l);
}

void ar__count_hits(ar_eval_acc *acc, const int32_t *top, int k, const int32_t *lab,
                    int64_t nl) {
  int hits = 0;
  for (int j = 0; j < 5; j++) {
    if (j < k)
      for (int64_t q = 0; q < nl; q++)
        if (lab[q] == top[j]) {
          hits++;
          break;
        }
    if (j == 0)
      acc->hits[0] += hits;
    else if (j == 2)
      acc->hits[1] += hits;
    else if (j == 4)
      acc->hits[2] += hits;
  }
}

ar_status ar_model_eval_batch(ar_model *m, const ar_batch *b, ar_eval_acc *acc) {
  AR_CHECK(ar_model_load(m, b));
  if (m->rows == 0)
    return AR_OK;
  if (m->n_sampled)
    AR_CHECK(ar__model_forward_eval(m));
  else
    ar_model_forward(m);
  ar_layer *L = &m->layers[m->n_layers - 1];
  int k = L->out < 5 ? (int)L->out : 5;
  /* Top-k of the logits (softmax and sigmoid are monotonic) before the loss
   * op reads them; the loss op leaves the logits in place without grad. */
  ar_device_topk(m->dev, m->rows, L->out, L->y, k, m->topk);
  double loss = ar_model_loss(m, false);
  int32_t top[4096 * 5];
  for (int64_t off = 0; off < m->rows; off += 4096) {
    int64_t c = m->rows - off < 4096 ? m->rows - off : 4096;
    AR_CHECK(ar_device_copy_out(m->dev, top, m->topk + off * k,
                                (size_t)(c * k) * sizeof(int32_t)));
    for (int64_t r = 0; r < c; r++) {
      const int32_t *lab = b->lab + b->lab_ptr[off + r];
      ar__count_hits(acc, top + r * k, k, lab, b->lab_ptr[off + r + 1] - b->lab_ptr[off + r]);
    }
  }
  acc->loss_sum += loss * (double)m->rows;
  acc->rows += m->rows;
  return AR_OK;
}

/* Layer l's w is (out, in), or (in, out) when the sparse input feeds it
 * densely (ar_layer); b and every optimizer slot have their parameter's
 * shape; lsh.last holds a u64 step per neuron. */
void ar__model_tensor_shapes(const ar_model *m, ar__ckpt_shape *shapes, int max) {
  int n = 0;
  for (int i = 0; i < m->plan.count && n < max; i++) {
    const ar_plan_entry *e = &m->plan.entries[i];
    if (e->cls != AR_MEM_PERSISTENT || e->zero_between)
      continue;
    ar__ckpt_shape *s = &shapes[n++];
    memset(s, 0, sizeof *s);
    s->dtype = AR__CKPT_F32;
    s->nd = 1;
    s->d[0] = (int64_t)(e->bytes / sizeof(float));
    for (int l = 0; l < m->n_layers; l++) {
      const ar_layer *L = &m->layers[l];
      size_t k = strlen(L->name);
      if (strncmp(e->name, L->name, k) != 0 || e->name[k] != '.')
        continue;
      const char *sfx = e->name + k + 1;
      size_t sl = strlen(sfx);
      if (!strcmp(sfx, "lsh.last")) {
        s->dtype = AR__CKPT_U64;
        s->d[0] = L->out;
      } else if (sfx[sl - 1] == 'w' && (sl == 1 || sfx[sl - 2] == '.')) {
        bool in_major = L->sparse_in && !L->smp;
        s->nd = 2;
        s->d[0] = in_major ? L->in : L->out;
        s->d[1] = in_major ? L->out : L->in;
      }
      break;
    }
    int64_t elems = 1;
    for (int d = 0; d < s->nd; d++)
      elems *= s->d[d];
    if (elems * (s->dtype == AR__CKPT_U64 ? 8 : 4) != (int64_t)e->bytes) {
      s->dtype = AR__CKPT_F32; /* a name this rule misreads: its floats */
      s->nd = 1;
      s->d[0] = (int64_t)(e->bytes / sizeof(float));
    }
  }
}

int ar_model_tensors(const ar_model *m, const char **names, float **ptrs, int64_t *counts,
                     int max) {
  int n = 0;
  for (int i = 0; i < m->plan.count; i++) {
    const ar_plan_entry *e = &m->plan.entries[i];
    if (e->cls != AR_MEM_PERSISTENT)
      continue;
    /* Zero between iterations and in a new model (a sampled layer's
     * gradient rows): not state, so not saved (343 MB at 670K x 128). */
    if (e->zero_between)
      continue;
    if (n < max) {
      names[n] = e->name;
      ptrs[n] = (float *)((char *)m->persistent + e->offset);
      counts[n] = (int64_t)(e->bytes / sizeof(float));
    }
    n++;
  }
  return n;
}
