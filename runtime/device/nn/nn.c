/*
 * The nn ops' common part: element types, shapes, the op table's names,
 * attribute defaults, ar_nn_infer, and the device wrappers that dispatch
 * to a backend's kernels (include/accelrt/nn.h states the contracts).
 */
#include "nn_impl.h"

#include "device_impl.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

size_t ar_dtype_size(ar_dtype t) {
  switch (t) {
  case AR_DT_F32:
  case AR_DT_I32:
    return 4;
  case AR_DT_I64:
    return 8;
  case AR_DT_U8:
  case AR_DT_BOOL:
    return 1;
  }
  return 0;
}

const char *ar_dtype_name(ar_dtype t) {
  static const char *const names[] = {"f32", "i64", "i32", "u8", "bool"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

int64_t ar_shape_count(const ar_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->nd; i++)
    n *= s->d[i];
  return n;
}

bool ar_shape_eq(const ar_shape *a, const ar_shape *b) {
  if (a->nd != b->nd)
    return false;
  for (int i = 0; i < a->nd; i++)
    if (a->d[i] != b->d[i])
      return false;
  return true;
}

bool ar_shape_broadcast(const ar_shape *a, const ar_shape *b, ar_shape *out) {
  ar_shape r = {0};
  r.nd = a->nd > b->nd ? a->nd : b->nd;
  for (int k = 0; k < r.nd; k++) {
    int ka = k - (r.nd - a->nd), kb = k - (r.nd - b->nd);
    int64_t da = ka >= 0 ? a->d[ka] : 1, db = kb >= 0 ? b->d[kb] : 1;
    if (da != db && da != 1 && db != 1)
      return false;
    r.d[k] = da == 1 ? db : da;
  }
  *out = r;
  return true;
}

const char *ar_shape_str(const ar_shape *s, char *buf, size_t n) {
  if (!n)
    return buf;
  buf[0] = 0;
  if (s->nd == 0) {
    snprintf(buf, n, "scalar");
    return buf;
  }
  size_t at = 0;
  for (int i = 0; i < s->nd && at < n; i++) {
    int w = snprintf(buf + at, n - at, "%s%" PRId64, i ? "x" : "", s->d[i]);
    if (w < 0)
      break;
    at += (size_t)w;
  }
  return buf;
}

ar_shape ar__nn_shape(int nd, const int64_t *d) {
  ar_shape s = {0};
  s.nd = nd;
  for (int i = 0; i < nd; i++)
    s.d[i] = d[i];
  return s;
}

static const char *const op_names[] = {
#define AR__NN_NAME(e, name, group) name,
    AR_NN_OP_MAP(AR__NN_NAME)
#undef AR__NN_NAME
};

const char *ar_nn_op_name(ar_nn_op op) {
  return (unsigned)op < AR_NN_OP_COUNT ? op_names[op] : "?";
}

int ar_nn_op_from_name(const char *name) {
  for (int i = 0; name && i < AR_NN_OP_COUNT; i++)
    if (!strcmp(op_names[i], name))
      return i;
  return -1;
}

void ar_nn_attr_defaults(ar_nn_attr *a) {
  memset(a, 0, sizeof *a);
  a->kernel[0] = a->kernel[1] = 1;
  a->stride[0] = a->stride[1] = 1;
  a->dilation[0] = a->dilation[1] = 1;
  a->groups = 1;
  a->bias = true;
  a->eps = 1e-5f;
  a->momentum = 0.1f;
  a->alpha = 0.01f;
  a->axis = -1;
  for (int i = 0; i < AR_NN_MAX_DIMS; i++)
    a->perm[i] = i;
  a->lo = -INFINITY;
  a->hi = INFINITY;
  a->to = AR_DT_F32;
}

void ar_nn_args_init(ar_nn_args *a, ar_nn_op op, const ar_nn_attr *attr) {
  memset(a, 0, sizeof *a);
  a->op = op;
  a->attr = attr;
  a->scale = 1.0f;
  a->threads = 1;
}

void ar_nn_args_from_sig(ar_nn_args *a, ar_nn_op op, const ar_nn_attr *attr,
                         const ar_nn_sig *sig) {
  ar_nn_args_init(a, op, attr);
  a->n_in = sig->n_in;
  a->n_param = sig->n_param;
  a->n_state = sig->n_state;
  a->n_out = sig->n_out;
  a->n_aux = sig->n_aux;
  for (int i = 0; i < sig->n_param; i++) {
    a->param[i] = (ar_tref){NULL, sig->param[i], AR_DT_F32};
    a->gparam[i] = a->param[i];
  }
  for (int i = 0; i < sig->n_state; i++)
    a->state[i] = (ar_tref){NULL, sig->state[i], AR_DT_F32};
  for (int i = 0; i < sig->n_out; i++) {
    a->out[i] = (ar_tref){NULL, sig->out[i], sig->out_dtype[i]};
    a->gout[i] = (ar_tref){NULL, sig->out[i], AR_DT_F32};
  }
  for (int i = 0; i < sig->n_aux; i++)
    a->aux[i] = (ar_tref){NULL, sig->aux[i], sig->aux_dtype[i]};
}

/* ---- sig helpers --------------------------------------------------------- */

void ar__nn_sig_init(ar_nn_sig *sig, int n_in) {
  memset(sig, 0, sizeof *sig);
  sig->n_in = n_in;
  sig->in_needed = ~0u;
  sig->out_needed = true;
}

void ar__nn_sig_out(ar_nn_sig *sig, const ar_shape *s, ar_dtype t) {
  AR_ASSERT(sig->n_out < AR_NN_MAX_IO);
  sig->out[sig->n_out] = *s;
  sig->out_dtype[sig->n_out++] = t;
}

void ar__nn_sig_param(ar_nn_sig *sig, const char *name, const ar_shape *s, ar_nn_init init,
                      bool decay) {
  AR_ASSERT(sig->n_param < AR_NN_MAX_IO);
  int i = sig->n_param++;
  sig->param[i] = *s;
  sig->param_name[i] = name;
  sig->param_init[i] = init;
  sig->param_std[i] = 1.0f;
  sig->param_decay[i] = decay;
}

void ar__nn_sig_state(ar_nn_sig *sig, const char *name, const ar_shape *s, ar_nn_init init) {
  AR_ASSERT(sig->n_state < AR_NN_MAX_IO);
  int i = sig->n_state++;
  sig->state[i] = *s;
  sig->state_name[i] = name;
  sig->state_init[i] = init;
}

void ar__nn_sig_aux(ar_nn_sig *sig, const ar_shape *s, ar_dtype t) {
  AR_ASSERT(sig->n_aux < AR_NN_MAX_IO);
  sig->aux[sig->n_aux] = *s;
  sig->aux_dtype[sig->n_aux++] = t;
}

/* ---- the host table ------------------------------------------------------ */

static ar_nn_kernel host_table[AR_NN_OP_COUNT];
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_fill(void) {
  ar__nn_host_conv_register(host_table);
  ar__nn_host_math_register(host_table);
  ar__nn_host_shape_register(host_table);
  ar__nn_host_sparse_register(host_table);
}

const ar_nn_kernel *ar__nn_host_table(void) {
  pthread_once(&host_once, host_fill);
  return host_table;
}

ar_status ar_nn_infer(ar_nn_op op, const ar_nn_attr *attr, int n_in, const ar_shape *in,
                      const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  if ((unsigned)op >= AR_NN_OP_COUNT || !attr || !sig || n_in < 0 || n_in > AR_NN_MAX_IO ||
      (n_in && (!in || !in_dtype)))
    return ar_errf(err, AR_INVALID, "ar_nn_infer: bad arguments");
  for (int i = 0; i < n_in; i++)
    if (in[i].nd < 0 || in[i].nd > AR_NN_MAX_DIMS)
      return ar_errf(err, AR_INVALID, "input %d has %d dimensions (at most %d)", i, in[i].nd,
                     AR_NN_MAX_DIMS);
  const ar_nn_kernel *k = &ar__nn_host_table()[op];
  if (!k->infer)
    return ar_errf(err, AR_UNSUPPORTED, "the op '%s' is not built in this version",
                   ar_nn_op_name(op));
  return k->infer(attr, n_in, in, in_dtype, sig, err);
}

/* ---- device wrappers ----------------------------------------------------- */

struct ar_nn_prim {
  const ar_nn_kernel *k;
  void *state;
  int threads; /* prepared with: a call never runs more (oneDNN's scratchpad
                  and work split are sized for them; fewer is safe) */
};

/* The threads a call runs: the handle's (the tenancy runner may lower them
 * between iterations), at most the prepared ones. */
static int call_threads(const ar_device *dev, const ar_nn_prim *p) {
  int t = dev->threads > 1 ? dev->threads : 1;
  return t < p->threads ? t : p->threads;
}

static const ar_nn_kernel *kernel_of(ar_device *dev, ar_nn_op op) {
  if (!dev->ops->nn_table)
    return NULL;
  const ar_nn_kernel *t = dev->ops->nn_table(dev);
  if (!t || !t[op].forward)
    return NULL;
  return &t[op];
}

ar_status ar_device_nn_prepare(ar_device *dev, const ar_nn_args *a, bool training,
                               ar_nn_prim **out, size_t *work_bytes, ar_err *err) {
  if (!dev || !a || !out || !work_bytes || (unsigned)a->op >= AR_NN_OP_COUNT)
    return ar_errf(err, AR_INVALID, "ar_device_nn_prepare: bad arguments");
  const ar_nn_kernel *k = kernel_of(dev, a->op);
  if (!k)
    return ar_errf(err, AR_UNSUPPORTED,
                   "the %s device has no kernel for the op '%s' in this version; run the "
                   "job with device: host",
                   ar_device_name(dev), ar_nn_op_name(a->op));
  ar_nn_prim *p = ar_calloc(1, sizeof *p);
  if (!p)
    return ar_errf(err, AR_NOMEM, "out of memory preparing the op '%s'", ar_nn_op_name(a->op));
  p->k = k;
  p->threads = dev->threads > 1 ? dev->threads : 1;
  *work_bytes = 0;
  if (k->prepare) {
    /* The threads go into prepare too: oneDNN sizes a primitive's
     * scratchpad and splits its work by the thread count at creation. */
    ar_nn_args ac = *a;
    ac.threads = dev->threads > 1 ? dev->threads : 1;
    ac.dev = dev;
    ar_status st = k->prepare(&ac, training, &p->state, work_bytes, err);
    if (st != AR_OK) {
      ar_free(p);
      return st;
    }
  }
  *out = p;
  return AR_OK;
}

void ar_device_nn_forward(ar_device *dev, ar_nn_prim *prim, ar_nn_args *a) {
  AR_ASSERT(dev && prim && a);
  if (dev->failed != AR_OK)
    return;
  a->threads = call_threads(dev, prim);
  a->dev = dev;
  prim->k->forward(prim->state, a);
}

void ar_device_nn_backward(ar_device *dev, ar_nn_prim *prim, ar_nn_args *a) {
  AR_ASSERT(dev && prim && a);
  if (dev->failed != AR_OK)
    return;
  a->threads = call_threads(dev, prim);
  a->dev = dev;
  AR_ASSERT(prim->k->backward);
  prim->k->backward(prim->state, a);
}

void ar_device_nn_release(ar_device *dev, ar_nn_prim *prim) {
  (void)dev;
  if (!prim)
    return;
  if (prim->k->release)
    prim->k->release(prim->state);
  ar_free(prim);
}
