/* Graph models: the fusion pass (docs/graph.md, "Fusion").  A rewrite of
 * a job's graph made once, at planning time, before differentiation, so
 * that the plan `accelrt check` prints and the engine allocates is the
 * fused graph's:
 *
 *   - training and evaluation: a relu whose input is read by it alone and
 *     made by a conv, a batch norm or a two-input f32 add
 *     becomes that op's fused activation (act RELU): one node and one
 *     activation tensor (and its gradient) fewer, one pass over memory
 *     fewer each way.  Legal in training because each op's backward takes
 *     the relu's mask from what it keeps anyway (conv and add: y > 0; batch
 *     norm: the pre-activation recomputed from x);
 *   - evaluation only: a conv whose output is read by a batch norm alone is
 *     folded with it.  Running statistics are constants in evaluation, so
 *     BN(conv(x, w) + b) = conv(x, w s) + (b - mean) s + beta with s = gamma
 *     / sqrt(var + eps) per output channel, and the batch norm's relu (if
 *     any) is the folded conv's post-op.  The folded weights and bias are
 *     ephemeral tensors of the plan (live at the conv's step), computed
 *     before each evaluation batch from the current parameters, and the
 *     conv writes straight into the batch norm's output, which therefore
 *     lives from the conv's step.  In training the batch norm needs the
 *     conv output's batch statistics: nothing is folded there.
 *
 * ACCELRT_FUSE=0 in the environment turns the pass off (the unfused graph,
 * for tests and measurements).  Graphs built by a program for inference
 * (ar_net_infer, no job spec) are left as they are.
 * Tests: tests/engine/test_net_fuse.c. */
#include "net_impl.h"

#include <stdlib.h>
#include <string.h>

struct net_fold {
  int conv, bn;   /* nodes */
  int wf, bf;     /* the folded weights (the conv's w's shape) and bias (out) */
  ar_nn_attr attr; /* the conv's, with bias and the batch norm's act */
  ar_nn_sig sig;
  ar_nn_args args;
  ar_nn_prim *prim; /* evaluation only */
};

static bool fuse_enabled(void) {
  const char *e = getenv("ACCELRT_FUSE");
  return !(e && !strcmp(e, "0"));
}

/* The nodes reading tensor t: their count, the last one in *who. */
static int readers(const ar_net *n, int t, int *who) {
  int c = 0;
  for (int i = 0; i < n->n_nodes; i++)
    for (int k = 0; k < n->nodes[i].n_in; k++)
      if (n->nodes[i].in[k] == t) {
        c++;
        *who = i;
      }
  return c;
}

/* Whether tensor t may disappear or change producer: no graph output, the
 * logits, the batch, or the loss. */
static bool internal(const ar_net *n, int t) {
  return !n->tensors[t].keep && t != n->logits && t != n->loss && t != n->x && t != n->y &&
         t != n->xd;
}

static void shift(int *v, int t) {
  if (*v > t)
    (*v)--;
}

/* Removes tensor t, which nothing references any more, renumbering the
 * rest (the pass runs before gradients, optimizer state and the
 * workspace exist). */
static void drop_tensor(ar_net *n, int t) {
  memmove(&n->tensors[t], &n->tensors[t + 1], (size_t)(n->n_tensors - t - 1) * sizeof *n->tensors);
  n->n_tensors--;
  for (int i = 0; i < n->n_nodes; i++) {
    nnode *d = &n->nodes[i];
    for (int k = 0; k < d->n_in; k++)
      shift(&d->in[k], t);
    for (int k = 0; k < d->sig.n_param; k++)
      shift(&d->param[k], t);
    for (int k = 0; k < d->sig.n_state; k++)
      shift(&d->state[k], t);
    for (int k = 0; k < d->sig.n_out; k++)
      shift(&d->out[k], t);
    for (int k = 0; k < d->sig.n_aux; k++)
      shift(&d->aux[k], t);
  }
  int *one[] = {&n->x, &n->y, &n->xd, &n->logits, &n->loss, &n->head_last};
  for (size_t k = 0; k < sizeof one / sizeof one[0]; k++)
    shift(one[k], t);
  for (int k = 0; k < HS_COUNT; k++)
    shift(&n->hs[k], t);
  for (int k = 0; k < n->n_inputs; k++)
    shift(&n->inputs[k], t);
  for (int k = 0; k < n->n_outputs; k++)
    shift(&n->outputs[k], t);
}

/* Removes node i, which no tensor names as its producer any more. */
static void drop_node(ar_net *n, int i) {
  memmove(&n->nodes[i], &n->nodes[i + 1], (size_t)(n->n_nodes - i - 1) * sizeof *n->nodes);
  n->n_nodes--;
  for (int t = 0; t < n->n_tensors; t++)
    shift(&n->tensors[t].producer, i);
  shift(&n->head, i);
}

/* d's signature with attributes a (its inputs as they are). */
static ar_status reinfer(const ar_net *n, const nnode *d, const ar_nn_attr *a, ar_nn_sig *sig) {
  ar_shape s[AR_NN_MAX_IO];
  ar_dtype t[AR_NN_MAX_IO];
  for (int k = 0; k < d->n_in; k++) {
    s[k] = n->tensors[d->in[k]].shape;
    t[k] = n->tensors[d->in[k]].dtype;
  }
  ar_err e = AR_ERR_INIT;
  return ar_nn_infer(d->op, a, d->n_in, s, t, sig, &e);
}

/* Whether node p can take a relu as its activation. */
static bool takes_relu(const ar_net *n, int p) {
  const nnode *d = &n->nodes[p];
  if (d->attr.act != AR_ACT_NONE || d->mode != AR_NN_MODE_RUN || d->sig.n_out != 1 ||
      p == n->head || d->after_head)
    return false;
  if (d->op == AR_NN_CONV2D || d->op == AR_NN_BATCHNORM)
    return true;
  return d->op == AR_NN_ADD && d->n_in == 2 && n->tensors[d->in[0]].dtype == AR_DT_F32;
}

/* Relu nodes into their producers; *count: how many. */
static ar_status fuse_relus(ar_net *n, int *count) {
  for (int i = 0; i < n->n_nodes; i++) {
    const nnode *r = &n->nodes[i];
    if (r->op != AR_NN_RELU || r->n_in != 1 || r->mode != AR_NN_MODE_RUN || r->after_head)
      continue;
    const int t = r->in[0], p = n->tensors[t].producer;
    int who = -1;
    if (p < 0 || !takes_relu(n, p) || !internal(n, t) || readers(n, t, &who) != 1)
      continue;
    nnode *d = &n->nodes[p];
    ar_nn_attr a = d->attr;
    a.act = AR_ACT_RELU;
    ar_nn_sig sig;
    if (reinfer(n, d, &a, &sig) != AR_OK)
      continue; /* the op refuses it: left unfused */
    n->flops += sig.flops - d->sig.flops - r->sig.flops;
    d->attr = a;
    d->sig = sig;
    for (int k = 0; k < d->sig.n_param; k++)
      n->tensors[d->param[k]].relu = true;
    const int u = r->out[0];
    d->out[0] = u; /* the relu's output (and name) is now the op's */
    n->tensors[u].producer = p;
    drop_node(n, i);
    drop_tensor(n, t);
    (*count)++;
    i--;
  }
  return AR_OK;
}

/* conv -> batch norm pairs, folded for evaluation. */
static ar_status find_folds(ar_net *n, ar_err *err) {
  int convs = 0;
  for (int i = 0; i < n->n_nodes; i++)
    convs += n->nodes[i].op == AR_NN_CONV2D;
  if (!convs)
    return AR_OK;
  n->folds = ar_calloc((size_t)convs, sizeof *n->folds);
  if (!n->folds)
    return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
  char tn[400];
  for (int i = 0; i < n->n_nodes; i++) {
    const nnode *c = &n->nodes[i];
    int b = -1;
    if (c->op != AR_NN_CONV2D || c->attr.act != AR_ACT_NONE || c->mode != AR_NN_MODE_RUN ||
        c->sig.n_out != 1 || !internal(n, c->out[0]) || readers(n, c->out[0], &b) != 1)
      continue;
    const nnode *bn = &n->nodes[b];
    if (bn->op != AR_NN_BATCHNORM || bn->mode != AR_NN_MODE_RUN || bn->n_in != 1 ||
        bn->in[0] != c->out[0] || n->tensors[c->out[0]].shape.nd != 4)
      continue;
    struct net_fold *f = &n->folds[n->n_folds];
    f->conv = i;
    f->bn = b;
    f->attr = c->attr;
    f->attr.bias = true;
    f->attr.act = bn->attr.act;
    if (reinfer(n, c, &f->attr, &f->sig) != AR_OK)
      continue;
    snprintf(tn, sizeof tn, "%.190s.w.folded", c->name);
    f->wf = ar__net_tensor(n, tn, &f->sig.param[0], AR_DT_F32, T_AUX);
    snprintf(tn, sizeof tn, "%.190s.b.folded", c->name);
    f->bf = ar__net_tensor(n, tn, &f->sig.param[1], AR_DT_F32, T_AUX);
    if (f->wf < 0 || f->bf < 0)
      return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
    n->n_folds++;
  }
  return AR_OK;
}

ar_status ar__net_fuse(ar_net *n, ar_err *err) {
  n->fuse_off = !fuse_enabled();
  if (!n->spec || n->fuse_off)
    return AR_OK;
  AR_CHECK(fuse_relus(n, &n->fused_relus));
  return find_folds(n, err);
}

static void live_at(ntensor *t, int64_t step) {
  if (t->first < 0 || step < t->first)
    t->first = step;
  if (step > t->last)
    t->last = step;
}

void ar__net_fuse_lifetimes(ar_net *n) {
  for (int k = 0; k < n->n_folds; k++) {
    const struct net_fold *f = &n->folds[k];
    const int64_t step = ar__net_fstep(n, f->conv);
    live_at(&n->tensors[f->wf], step);
    live_at(&n->tensors[f->bf], step);
    /* The folded conv writes the batch norm's output at its own step. */
    live_at(&n->tensors[n->nodes[f->bn].out[0]], step);
  }
}

/* The folded conv's args (pointers NULL before the blocks exist). */
static void fold_args(ar_net *n, struct net_fold *f) {
  const nnode *c = &n->nodes[f->conv], *bn = &n->nodes[f->bn];
  ar_nn_args *a = &f->args;
  ar_nn_args_from_sig(a, AR_NN_CONV2D, &f->attr, &f->sig);
  const ntensor *x = &n->tensors[c->in[0]];
  a->in[0] = (ar_tref){x->p, x->shape, x->dtype};
  a->param[0].p = n->tensors[f->wf].p;
  a->param[1].p = n->tensors[f->bf].p;
  a->out[0].p = n->tensors[bn->out[0]].p;
  a->training = false;
  a->work = c->work[0] >= 0 ? n->tensors[c->work[0]].p : NULL;
  a->work_bytes = c->work_bytes;
}

ar_status ar__net_fuse_prepare(ar_net *n, ar_device *host, ar_err *err) {
  for (int k = 0; k < n->n_folds; k++) {
    struct net_fold *f = &n->folds[k];
    fold_args(n, f);
    size_t w = 0;
    ar_status st = ar_device_nn_prepare(host, &f->args, false, &f->prim, &w, err);
    if (st != AR_OK)
      return ar_err_wrap(err, "%s (folded with its batch norm)", n->nodes[f->conv].path);
    nnode *c = &n->nodes[f->conv];
    c->work_bytes = w > c->work_bytes ? w : c->work_bytes;
  }
  return AR_OK;
}

ar_status ar__net_fuse_prepare_device(ar_net *n, ar_err *err) {
  for (int k = 0; k < n->n_folds; k++) {
    struct net_fold *f = &n->folds[k];
    ar_nn_prim *p = NULL;
    size_t w = 0;
    ar_status st = ar_device_nn_prepare(n->dev, &f->args, false, &p, &w, err);
    size_t planned = n->nodes[f->conv].work_bytes;
    if (st == AR_OK && w > planned) {
      ar_device_nn_release(n->dev, p);
      st = ar_errf(err, AR_UNSUPPORTED,
                   "the %s kernel of the folded conv asks for a workspace of %zu bytes, more "
                   "than the %zu the plan holds for it (a bug: run the job with device: host)",
                   ar_device_name(n->dev), w, planned);
    }
    if (st != AR_OK)
      return ar_err_wrap(err, "%s (folded with its batch norm)", n->nodes[f->conv].path);
    ar_device_nn_release(n->dev, f->prim);
    f->prim = p;
  }
  return AR_OK;
}

void ar__net_fuse_bind(ar_net *n) {
  for (int k = 0; k < n->n_folds; k++)
    fold_args(n, &n->folds[k]);
}

void ar__net_fuse_release(ar_net *n) {
  for (int k = 0; k < n->n_folds; k++) {
    ar_device_nn_release(n->dev, n->folds[k].prim);
    n->folds[k].prim = NULL;
  }
}

void ar__net_fuse_free(ar_net *n) {
  ar_free(n->folds);
  n->folds = NULL;
  n->n_folds = 0;
}

/* w s and (b - mean) s + beta from the current parameters and running
 * statistics, s as the batch norm computes its scale, on the net's device
 * (ar_device_bn_fold: the host's loop, or a CUDA kernel). */
static void fold_weights(ar_net *n, const struct net_fold *f) {
  const nnode *c = &n->nodes[f->conv], *bn = &n->nodes[f->bn];
  const int64_t out = f->sig.param[0].d[0], per = ar_shape_count(&f->sig.param[0]) / out;
  ar_device_bn_fold(n->dev, out, per, n->tensors[c->param[0]].p,
                    c->attr.bias ? n->tensors[c->param[1]].p : NULL,
                    n->tensors[bn->param[0]].p, n->tensors[bn->param[1]].p,
                    n->tensors[bn->state[0]].p, n->tensors[bn->state[1]].p, bn->attr.eps,
                    n->tensors[f->wf].p, n->tensors[f->bf].p);
}

bool ar__net_fold_forward(ar_net *n, int node) {
  for (int k = 0; k < n->n_folds; k++) {
    struct net_fold *f = &n->folds[k];
    if (f->conv == node) {
      fold_weights(n, f);
      ar_device_nn_forward(n->dev, f->prim, &f->args);
      return true;
    }
    if (f->bn == node)
      return true; /* its output was written by the folded conv */
  }
  return false;
}

void ar__net_fuse_print(const ar_net *n, FILE *to) {
  if (!n->fused_relus && !n->n_folds) {
    fprintf(to, "  fusion: none%s\n", n->fuse_off ? " (ACCELRT_FUSE=0)" : "");
    return;
  }
  fprintf(to, "  fusion: %d relu%s into the op before (training and evaluation); %d conv%s "
              "folded with the batch norm after (evaluation):",
          n->fused_relus, n->fused_relus == 1 ? "" : "s", n->n_folds,
          n->n_folds == 1 ? "" : "s");
  for (int k = 0; k < n->n_folds; k++)
    fprintf(to, "%s %s+%s", k ? "," : "", n->nodes[n->folds[k].conv].name,
            n->nodes[n->folds[k].bn].name);
  fprintf(to, "\n");
}
