/*
 * Host kernels of the element-wise nn ops (include/accelrt/nn.h): unary
 * RELU, LEAKY_RELU, SIGMOID, TANH, GELU, SQRT, EXP, LOG, NEG, ABS, ERF,
 * CLIP; binary ADD, SUB, MUL, DIV, POW with NumPy broadcasting (or
 * attr.scalar as the second operand), on f32 or, forward only, on two
 * integer operands of one type; and the reductions MEAN, SUM over one axis
 * or every axis but the batch's.  ADD with act RELU (f32) fuses a relu:
 * y = max(a + b, 0), its backward g masked by y > 0 (the graph engine's
 * fusion pass, runtime/engine/net_fuse.c, makes it from add + relu).
 *
 * Broadcasting.  The output's dims are walked as a "view": dims of extent 1
 * are dropped and neighbours that every operand treats alike (both present,
 * or both broadcast) are merged, so (N,C)+(C) becomes rows x columns and
 * (N,1,D)*(1,T,D) three dims whose innermost, D, is contiguous in every
 * operand.  The innermost dim of a view is then walked by one vectorised
 * loop with operand strides 0 or 1.  The gradient of a broadcast operand is
 * the product computed over the whole output (into the workspace), then
 * summed over the broadcast dims: threads own slices of a dim the operand
 * keeps, so each gradient element is summed by one thread, in one order.
 */
#include "host/nn_math_impl.h"
#include "nn/nn_elem.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ---- views of broadcast shapes ------------------------------------------- */

typedef struct bview {
  int nd;                         /* >= 1 */
  int64_t e[AR_NN_MAX_DIMS];      /* extents of the merged output dims */
  int64_t s[2][AR_NN_MAX_DIMS];   /* element strides of the operands, 0 where broadcast */
  int64_t so[AR_NN_MAX_DIMS];     /* the output's (contiguous) strides */
} bview;

/* The view of output shape `out` over nops (1 or 2) operands, each aligned
 * to out's last dims (a 0-d operand is a broadcast scalar). */
static void bview_make(const ar_shape *out, int nops, const ar_shape *const *ops, bview *v) {
  int64_t stride[2][AR_NN_MAX_DIMS];
  for (int i = 0; i < nops; i++) {
    int64_t st = 1;
    for (int k = out->nd - 1; k >= 0; k--) {
      int kk = k - (out->nd - ops[i]->nd);
      int64_t ext = kk >= 0 ? ops[i]->d[kk] : 1;
      stride[i][k] = ext == out->d[k] ? st : 0;
      st *= ext;
    }
  }
  v->nd = 0;
  for (int k = 0; k < out->nd; k++) {
    if (out->d[k] == 1)
      continue;
    bool same = v->nd > 0;
    for (int i = 0; i < nops && same; i++)
      same = (stride[i][k] != 0) == (v->s[i][v->nd - 1] != 0);
    if (same) {
      v->e[v->nd - 1] *= out->d[k];
      for (int i = 0; i < nops; i++)
        v->s[i][v->nd - 1] = stride[i][k];
    } else {
      v->e[v->nd] = out->d[k];
      for (int i = 0; i < nops; i++)
        v->s[i][v->nd] = stride[i][k];
      v->nd++;
    }
  }
  if (v->nd == 0) { /* one element */
    v->nd = 1;
    v->e[0] = 1;
    for (int i = 0; i < 2; i++)
      v->s[i][0] = 0;
  }
  for (int i = nops; i < 2; i++)
    for (int k = 0; k < v->nd; k++)
      v->s[i][k] = 0;
  int64_t st = 1;
  for (int k = v->nd - 1; k >= 0; k--) {
    v->so[k] = st;
    st *= v->e[k];
  }
}

/* Called for each run of the innermost dim: len elements starting at
 * element offsets oa, ob (operands) and oo (output). */
typedef void (*run_fn)(void *ctx, const bview *v, int64_t len, int64_t oa, int64_t ob,
                       int64_t oo);

/* Walks the part of v whose index in dim p lies in [lo, hi). */
static void walk(const bview *v, int p, int64_t lo, int64_t hi, run_fn f, void *ctx) {
  const int in = v->nd - 1;
  int64_t idx[AR_NN_MAX_DIMS], b0[AR_NN_MAX_DIMS], b1[AR_NN_MAX_DIMS];
  for (int k = 0; k < v->nd; k++) {
    b0[k] = k == p ? lo : 0;
    b1[k] = k == p ? hi : v->e[k];
    idx[k] = b0[k];
    if (b0[k] >= b1[k]) /* nothing to walk (or an empty tensor) */
      return;
  }
  for (;;) {
    int64_t oa = b0[in] * v->s[0][in], ob = b0[in] * v->s[1][in], oo = b0[in];
    for (int k = 0; k < in; k++) {
      oa += idx[k] * v->s[0][k];
      ob += idx[k] * v->s[1][k];
      oo += idx[k] * v->so[k];
    }
    f(ctx, v, b1[in] - b0[in], oa, ob, oo);
    int k = in - 1;
    while (k >= 0 && ++idx[k] == b1[k]) {
      idx[k] = b0[k];
      k--;
    }
    if (k < 0)
      break;
  }
}

/* Walks all of v on nt threads, each owning a slice of dim p. */
static void walk_team(const bview *v, int p, int nt, run_fn f, void *ctx) {
  if (nt <= 1 || v->e[p] < 2) {
    walk(v, p, 0, v->e[p], f, ctx);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), nth = omp_get_num_threads();
    walk(v, p, v->e[p] * t / nth, v->e[p] * (t + 1) / nth, f, ctx);
  }
}

/* The dim to split an element-wise walk over nt threads: the outermost
 * with at least nt indices, else the longest. */
static int split_dim(const bview *v, int nt) {
  int best = 0;
  for (int k = 0; k < v->nd; k++) {
    if (v->e[k] >= nt)
      return k;
    if (v->e[k] > v->e[best])
      best = k;
  }
  return best;
}

/* ---- binary ops ------------------------------------------------------------ */

/* What a binary run computes, one element of the output at a time, from
 * x (operand a), z (operand b), y (the output) and g (its gradient). */
typedef enum bin_code {
  F_ADD,
  F_ADD_RELU, /* max(x + z, 0): ADD with act RELU */
  F_SUB,
  F_MUL,
  F_DIV,
  F_POW,
  G_ONE,    /* g: ADD's both, SUB's a */
  G_RELU,   /* g where y > 0, else 0: ADD's both with act RELU */
  G_NEG,    /* -g: SUB's b */
  G_MUL_A,  /* g z */
  G_MUL_B,  /* g x */
  G_DIV_A,  /* g / z */
  G_DIV_B,  /* -g x / z^2 */
  G_POW_A,  /* g z x^(z-1) */
  G_POW_B   /* g y log x */
} bin_code;

typedef struct bin_ctx {
  bin_code code;
  const float *a, *b, *y, *g;
  float *dst; /* output-shaped */
} bin_ctx;

/* One run, with the operands' innermost strides (0 or 1) as four loops so
 * that each is a plain vectorisable loop. */
#define BIN_LOOPS(EXPR)                                                        \
  do {                                                                         \
    if (sa && sb) {                                                            \
      _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                    \
        const float x = A[j], z = B[j];                                        \
        D[j] = (EXPR);                                                         \
      }                                                                        \
    } else if (sa) {                                                           \
      const float z = B[0];                                                    \
      _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                    \
        const float x = A[j];                                                  \
        D[j] = (EXPR);                                                         \
      }                                                                        \
    } else if (sb) {                                                           \
      const float x = A[0];                                                    \
      _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                    \
        const float z = B[j];                                                  \
        D[j] = (EXPR);                                                         \
      }                                                                        \
    } else {                                                                   \
      const float x = A[0], z = B[0];                                          \
      for (int64_t j = 0; j < n; j++)                                          \
        D[j] = (EXPR);                                                         \
    }                                                                          \
  } while (0)

/* The same for gradients that read operand b only (and not a at all: the
 * op told the engine it may free a before the backward). */
#define Z_LOOPS(EXPR)                                                          \
  do {                                                                         \
    if (sb) {                                                                  \
      _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                    \
        const float z = B[j];                                                  \
        D[j] = (EXPR);                                                         \
      }                                                                        \
    } else {                                                                   \
      const float z = B[0];                                                    \
      _Pragma("omp simd") for (int64_t j = 0; j < n; j++)                      \
        D[j] = (EXPR);                                                         \
    }                                                                          \
  } while (0)

static void bin_run(void *vctx, const bview *v, int64_t n, int64_t oa, int64_t ob, int64_t oo) {
  const bin_ctx *c = vctx;
  const bool sa = v->s[0][v->nd - 1] != 0, sb = v->s[1][v->nd - 1] != 0;
  const float *restrict A = c->a + oa, *restrict B = c->b + ob;
  const float *restrict G = c->g ? c->g + oo : NULL, *restrict Y = c->y ? c->y + oo : NULL;
  float *restrict D = c->dst + oo;
  switch (c->code) {
  case F_ADD:
    BIN_LOOPS(x + z);
    break;
  case F_ADD_RELU: /* the standalone relu's expression, on x + z */
    BIN_LOOPS((x + z) > 0.0f ? (x + z) : 0.0f);
    break;
  case F_SUB:
    BIN_LOOPS(x - z);
    break;
  case F_MUL:
    BIN_LOOPS(x * z);
    break;
  case F_DIV:
    BIN_LOOPS(x / z);
    break;
  case F_POW:
    BIN_LOOPS(powf(x, z));
    break;
  case G_ONE: /* neither operand is read (ADD's and SUB's in_needed: 0) */
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      D[j] = G[j];
    break;
  case G_RELU: /* y > 0 exactly where x + z > 0 (the relu's own rule) */
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      D[j] = Y[j] > 0.0f ? G[j] : 0.0f;
    break;
  case G_NEG:
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      D[j] = -G[j];
    break;
  case G_MUL_A:
    Z_LOOPS(G[j] * z);
    break;
  case G_MUL_B:
    BIN_LOOPS(((void)z, G[j] * x));
    break;
  case G_DIV_A:
    Z_LOOPS(G[j] / z);
    break;
  case G_DIV_B:
    BIN_LOOPS(-G[j] * x / (z * z));
    break;
  case G_POW_A:
    BIN_LOOPS(G[j] * z * powf(x, z - 1.0f));
    break;
  case G_POW_B:
    BIN_LOOPS(((void)z, G[j] * Y[j] * logf(x)));
    break;
  }
}

/* Sums a gradient computed over the whole output (w) into gin, the shape
 * of one operand: v is the view of the output over that operand alone. */
typedef struct red_ctx {
  const float *w;
  float *gin;
} red_ctx;

static void red_run(void *vctx, const bview *v, int64_t n, int64_t oa, int64_t ob, int64_t oo) {
  (void)ob;
  const red_ctx *c = vctx;
  const float *restrict w = c->w + oo;
  float *restrict g = c->gin + oa;
  if (v->s[0][v->nd - 1]) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      g[j] += w[j];
  } else {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++)
      s += w[j];
    g[0] += s;
  }
}

void ar__nn_reduce_to(const ar_nn_args *a, const ar_shape *out, const ar_shape *shape,
                      const float *w, float *gin) {
  bview v;
  bview_make(out, 1, &shape, &v);
  memset(gin, 0, (size_t)ar_shape_count(shape) * sizeof(float));
  int p = -1; /* a dim the operand keeps: its slices are disjoint in gin */
  for (int k = 0; k < v.nd && p < 0; k++)
    if (v.s[0][k])
      p = k;
  red_ctx c = {w, gin};
  walk_team(&v, p < 0 ? 0 : p, p < 0 ? 1 : ar__nn_team(a, ar_shape_count(out)), red_run, &c);
}

static ar_status bin_infer(ar_nn_op op, const ar_nn_attr *attr, int n_in, const ar_shape *in,
                           const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  AR_CHECK(ar__nn_want_inputs(op, n_in, 1, 2, err));
  /* ADD fuses a relu (the graph engine's fusion pass, net_fuse.c, sets
   * it); every other op and act is computed as before, act ignored. */
  const bool relu = op == AR_NN_ADD && attr->act == AR_ACT_RELU;
  const bool ints = in_dtype[0] == AR_DT_I64 || in_dtype[0] == AR_DT_I32 ||
                    in_dtype[0] == AR_DT_U8;
  if (ints && (n_in != 2 || in_dtype[1] != in_dtype[0]))
    return ar_errf(err, AR_INVALID,
                   "%s: input 0 is %s; integer arithmetic takes two inputs of one type (input "
                   "1 is %s)",
                   ar_nn_op_name(op), ar_dtype_name(in_dtype[0]),
                   n_in == 2 ? ar_dtype_name(in_dtype[1]) : "missing");
  if (!ints)
    AR_CHECK(ar__nn_want_f32(op, n_in, in_dtype, 3u, err));
  if (ints && relu)
    return ar_errf(err, AR_INVALID, "add: a fused relu takes f32 inputs, not %s",
                   ar_dtype_name(in_dtype[0]));
  ar_shape out = in[0];
  if (n_in == 2) {
    const ar_shape *x = &in[0], *y = &in[1];
    out.nd = x->nd > y->nd ? x->nd : y->nd;
    for (int k = 0; k < out.nd; k++) {
      int kx = k - (out.nd - x->nd), ky = k - (out.nd - y->nd);
      int64_t dx = kx >= 0 ? x->d[kx] : 1, dy = ky >= 0 ? y->d[ky] : 1;
      if (dx != dy && dx != 1 && dy != 1) {
        char sx[64], sy[64];
        return ar_errf(err, AR_INVALID,
                       "%s: inputs %s and %s cannot be broadcast: dim %d is %lld and %lld "
                       "(dims of the result, the inputs aligned at their last)",
                       ar_nn_op_name(op), ar_shape_str(x, sx, sizeof sx),
                       ar_shape_str(y, sy, sizeof sy), k, (long long)dx, (long long)dy);
      }
      out.d[k] = dx == 1 ? dy : dx;
    }
  }
  ar__nn_sig_init(sig, n_in);
  ar__nn_sig_out(sig, &out, in_dtype[0]);
  if (ints) {
    sig->no_grad = 3u;
    sig->in_needed = 0;
    sig->out_needed = false;
    sig->flops = (double)ar_shape_count(&out);
    return AR_OK;
  }
  const bool two = n_in == 2;
  switch (op) {
  case AR_NN_ADD:
  case AR_NN_SUB:
    sig->in_needed = 0;
    sig->out_needed = relu; /* the relu's mask is y > 0 */
    break;
  case AR_NN_MUL:
  case AR_NN_DIV:
    sig->in_needed = two ? 3u : 0u; /* the scalar forms scale g by a constant */
    sig->out_needed = false;
    break;
  default: /* POW: x^(z-1) for a, y log x for b */
    sig->in_needed = two ? 3u : 1u;
    sig->out_needed = two;
    break;
  }
  sig->flops = (double)ar_shape_count(&out);
  return AR_OK;
}

#define BIN_INFER(NAME, OP)                                                    \
  static ar_status NAME(const ar_nn_attr *attr, int n_in, const ar_shape *in,  \
                        const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) { \
    return bin_infer(OP, attr, n_in, in, in_dtype, sig, err);                  \
  }
BIN_INFER(add_infer, AR_NN_ADD)
BIN_INFER(sub_infer, AR_NN_SUB)
BIN_INFER(mul_infer, AR_NN_MUL)
BIN_INFER(div_infer, AR_NN_DIV)
BIN_INFER(pow_infer, AR_NN_POW)

/* The workspace: one output-shaped buffer when an operand that takes a
 * gradient is broadcast (its gradient is summed from it). */
static ar_status bin_prepare(const ar_nn_args *a, bool training, void **state, size_t *work_bytes,
                             ar_err *err) {
  (void)err;
  *state = NULL;
  *work_bytes = 0;
  const int64_t n = ar_shape_count(&a->out[0].shape);
  for (int i = 0; training && i < a->n_in; i++)
    if (ar_shape_count(&a->in[i].shape) != n)
      *work_bytes = (size_t)n * sizeof(float);
  return AR_OK;
}

/* The second operand: input 1, or attr.scalar as a 0-d tensor. */
static const float *bin_b(const ar_nn_args *a, const ar_shape **shape) {
  static const ar_shape scalar = {0};
  if (a->n_in == 2) {
    *shape = &a->in[1].shape;
    return a->in[1].p;
  }
  *shape = &scalar;
  return &a->attr->scalar;
}

/* ---- integer operands ------------------------------------------------------
 * Forward only, one element at a time through int64 (values wrap to the
 * type on the store, as NumPy's do); no division traps: x / 0 is 0 and
 * INT64_MIN / -1 wraps. */

typedef struct int_ctx {
  ar_nn_op op;
  ar_dtype t;
  const void *a, *b;
  void *dst;
} int_ctx;

static void int_run(void *vctx, const bview *v, int64_t n, int64_t oa, int64_t ob, int64_t oo) {
  const int_ctx *c = vctx;
  const int64_t sa = v->s[0][v->nd - 1] != 0, sb = v->s[1][v->nd - 1] != 0;
  for (int64_t j = 0; j < n; j++)
    nn_int_store(c->t, c->dst, oo + j,
                 nn_int_apply(c->op, nn_int_load(c->t, c->a, oa + j * sa),
                              nn_int_load(c->t, c->b, ob + j * sb)));
}

static void bin_forward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->in[0].dtype != AR_DT_F32) {
    const ar_shape *shapes[2] = {&a->in[0].shape, &a->in[1].shape};
    bview v;
    bview_make(&a->out[0].shape, 2, shapes, &v);
    int_ctx c = {a->op, a->in[0].dtype, a->in[0].p, a->in[1].p, a->out[0].p};
    walk(&v, 0, 0, v.e[0], int_run, &c);
    return;
  }
  static const bin_code fwd[] = {
      [AR_NN_ADD] = F_ADD, [AR_NN_SUB] = F_SUB, [AR_NN_MUL] = F_MUL,
      [AR_NN_DIV] = F_DIV, [AR_NN_POW] = F_POW};
  const ar_shape *shapes[2] = {&a->in[0].shape, NULL};
  const float *b = bin_b(a, &shapes[1]);
  bview v;
  bview_make(&a->out[0].shape, 2, shapes, &v);
  const bool relu = a->op == AR_NN_ADD && a->attr->act == AR_ACT_RELU;
  bin_ctx c = {relu ? F_ADD_RELU : fwd[a->op], a->in[0].p, b, NULL, NULL, a->out[0].p};
  const int nt = ar__nn_team(a, ar_shape_count(&a->out[0].shape));
  walk_team(&v, split_dim(&v, nt), nt, bin_run, &c);
}

static void bin_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *shapes[2] = {&a->in[0].shape, NULL};
  const float *b = bin_b(a, &shapes[1]);
  const ar_shape *out = &a->out[0].shape;
  const int64_t n = ar_shape_count(out);
  bview v;
  bview_make(out, 2, shapes, &v);
  const int nt = ar__nn_team(a, n);
  for (int i = 0; i < a->n_in; i++) {
    if (!a->gin[i].p)
      continue;
    bin_code code = G_ONE;
    switch (a->op) {
    case AR_NN_ADD:
      code = a->attr->act == AR_ACT_RELU ? G_RELU : G_ONE;
      break;
    case AR_NN_SUB:
      code = i ? G_NEG : G_ONE;
      break;
    case AR_NN_MUL:
      code = i ? G_MUL_B : G_MUL_A;
      break;
    case AR_NN_DIV:
      code = i ? G_DIV_B : G_DIV_A;
      break;
    default:
      code = i ? G_POW_B : G_POW_A;
      break;
    }
    const bool direct = ar_shape_count(shapes[i]) == n;
    AR_ASSERT(direct || n == 0 || (a->work && a->work_bytes >= (size_t)n * sizeof(float)));
    bin_ctx c = {code, a->in[0].p, b, a->out[0].p, a->gout[0].p,
                 direct ? a->gin[i].p : a->work};
    walk_team(&v, split_dim(&v, nt), nt, bin_run, &c);
    if (!direct)
      ar__nn_reduce_to(a, out, shapes[i], a->work, a->gin[i].p);
  }
}

/* ---- unary ops ------------------------------------------------------------- */

static ar_status unary_infer(ar_nn_op op, int n_in, const ar_shape *in, const ar_dtype *in_dtype,
                             ar_nn_sig *sig, ar_err *err) {
  AR_CHECK(ar__nn_want_inputs(op, n_in, 1, 1, err));
  AR_CHECK(ar__nn_want_f32(op, n_in, in_dtype, 1u, err));
  ar__nn_sig_init(sig, n_in);
  ar__nn_sig_out(sig, &in[0], AR_DT_F32);
  /* The backward reads the output where the derivative is a function of
   * it, else the input. */
  const bool from_x = op == AR_NN_LEAKY_RELU || op == AR_NN_GELU || op == AR_NN_LOG ||
                      op == AR_NN_ABS || op == AR_NN_ERF || op == AR_NN_CLIP;
  sig->in_needed = from_x ? 1u : 0u;
  sig->out_needed = !from_x && op != AR_NN_NEG;
  const double per = op == AR_NN_GELU || op == AR_NN_TANH || op == AR_NN_SIGMOID ? 4.0 : 1.0;
  sig->flops = per * (double)ar_shape_count(&in[0]);
  return AR_OK;
}

#define UNARY_INFER(NAME, OP)                                                  \
  static ar_status NAME(const ar_nn_attr *attr, int n_in, const ar_shape *in,  \
                        const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) { \
    (void)attr;                                                                \
    return unary_infer(OP, n_in, in, in_dtype, sig, err);                      \
  }
UNARY_INFER(relu_infer, AR_NN_RELU)
UNARY_INFER(leaky_infer, AR_NN_LEAKY_RELU)
UNARY_INFER(sigmoid_infer, AR_NN_SIGMOID)
UNARY_INFER(tanh_infer, AR_NN_TANH)
UNARY_INFER(gelu_infer, AR_NN_GELU)
UNARY_INFER(sqrt_infer, AR_NN_SQRT)
UNARY_INFER(exp_infer, AR_NN_EXP)
UNARY_INFER(log_infer, AR_NN_LOG)
UNARY_INFER(neg_infer, AR_NN_NEG)
UNARY_INFER(abs_infer, AR_NN_ABS)
UNARY_INFER(erf_infer, AR_NN_ERF)

static ar_status clip_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                            const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  if (isnan(attr->lo) || isnan(attr->hi))
    return ar_errf(err, AR_INVALID, "clip: the bounds are %g and %g; give numbers",
                   (double)attr->lo, (double)attr->hi);
  return unary_infer(AR_NN_CLIP, n_in, in, in_dtype, sig, err);
}

/* One element-wise loop over [0, n) on the team.  The if clause names
 * `parallel`: a bare if (nt > 1) on a combined parallel for simd applies to
 * the simd construct too (OpenMP 5.0), and GCC then kept every loop of a
 * one-thread team (every tensor under AR__NN_PAR_MIN elements) scalar. */
#define EW_LOOP(BODY)                                                          \
  _Pragma("omp parallel for simd schedule(static) num_threads(nt) if (parallel: nt > 1)") \
  for (int64_t i = 0; i < n; i++) {                                            \
    BODY;                                                                      \
  }

/* The same without the simd request, for bodies that call libm functions
 * no vector library provides here (tanhf, erff): clang reports a simd loop
 * it could not vectorise as a warning. */
#define EW_LOOP_CALL(BODY)                                                     \
  _Pragma("omp parallel for schedule(static) num_threads(nt) if (nt > 1)")     \
  for (int64_t i = 0; i < n; i++) {                                            \
    BODY;                                                                      \
  }

#define INV_SQRT2 0.70710678118654752f
#define INV_SQRT_2PI 0.39894228040143268f
#define TWO_OVER_SQRT_PI 1.12837916709551257f

static void unary_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  const float *restrict x = a->in[0].p;
  float *restrict y = a->out[0].p;
  const float alpha = a->attr->alpha;
  const int nt = ar__nn_team(a, n);
  switch (a->op) {
  case AR_NN_RELU:
    EW_LOOP(y[i] = x[i] > 0.0f ? x[i] : 0.0f)
    break;
  case AR_NN_LEAKY_RELU:
    EW_LOOP(y[i] = x[i] > 0.0f ? x[i] : alpha * x[i])
    break;
  case AR_NN_SIGMOID:
    /* exp of -|x|: no overflow on either side. */
    EW_LOOP(const float e = expf(-fabsf(x[i])); const float inv = 1.0f / (1.0f + e);
            y[i] = x[i] >= 0.0f ? inv : e * inv)
    break;
  case AR_NN_TANH:
    EW_LOOP_CALL(y[i] = tanhf(x[i]))
    break;
  case AR_NN_GELU:
    EW_LOOP_CALL(y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * INV_SQRT2)))
    break;
  case AR_NN_SQRT:
    EW_LOOP(y[i] = sqrtf(x[i]))
    break;
  case AR_NN_EXP:
    EW_LOOP(y[i] = expf(x[i]))
    break;
  case AR_NN_LOG:
    EW_LOOP(y[i] = logf(x[i]))
    break;
  case AR_NN_NEG:
    EW_LOOP(y[i] = -x[i])
    break;
  case AR_NN_ABS:
    EW_LOOP(y[i] = fabsf(x[i]))
    break;
  case AR_NN_ERF:
    EW_LOOP_CALL(y[i] = erff(x[i]))
    break;
  case AR_NN_CLIP: {
    /* NumPy's clip: max with lo first, then min with hi (hi wins when
     * lo > hi); a NaN fails both tests and stays. */
    const float lo = a->attr->lo, hi = a->attr->hi;
    EW_LOOP(const float v = x[i] < lo ? lo : x[i]; y[i] = v > hi ? hi : v)
    break;
  }
  default:
    AR_ASSERT(!"not a unary op");
  }
}

static void unary_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  const float *restrict x = a->in[0].p, *restrict y = a->out[0].p, *restrict g = a->gout[0].p;
  float *restrict d = a->gin[0].p;
  const float alpha = a->attr->alpha;
  const int nt = ar__nn_team(a, n);
  switch (a->op) {
  case AR_NN_RELU:
    EW_LOOP(const float gi = g[i]; d[i] = y[i] > 0.0f ? gi : 0.0f)
    break;
  case AR_NN_LEAKY_RELU:
    EW_LOOP(const float gi = g[i]; d[i] = x[i] > 0.0f ? gi : alpha * gi)
    break;
  case AR_NN_SIGMOID:
    EW_LOOP(d[i] = g[i] * y[i] * (1.0f - y[i]))
    break;
  case AR_NN_TANH:
    EW_LOOP(d[i] = g[i] * (1.0f - y[i] * y[i]))
    break;
  case AR_NN_GELU:
    EW_LOOP_CALL(const float v = x[i];
            d[i] = g[i] * (0.5f * (1.0f + erff(v * INV_SQRT2)) +
                           v * INV_SQRT_2PI * expf(-0.5f * v * v)))
    break;
  case AR_NN_SQRT:
    EW_LOOP(d[i] = 0.5f * g[i] / y[i])
    break;
  case AR_NN_EXP:
    EW_LOOP(d[i] = g[i] * y[i])
    break;
  case AR_NN_LOG:
    EW_LOOP(d[i] = g[i] / x[i])
    break;
  case AR_NN_NEG:
    EW_LOOP(d[i] = -g[i])
    break;
  case AR_NN_ABS:
    EW_LOOP(const float gi = g[i]; d[i] = x[i] > 0.0f ? gi : x[i] < 0.0f ? -gi : 0.0f)
    break;
  case AR_NN_ERF:
    EW_LOOP(d[i] = g[i] * TWO_OVER_SQRT_PI * expf(-x[i] * x[i]))
    break;
  case AR_NN_CLIP: {
    const float lo = a->attr->lo, hi = a->attr->hi;
    EW_LOOP(d[i] = x[i] >= lo && x[i] <= hi ? g[i] : 0.0f)
    break;
  }
  default:
    AR_ASSERT(!"not a unary op");
  }
}

/* ---- MEAN, SUM ----------------------------------------------------------------
 * The input as (outer, r, inner): the reduced axes are the r in the middle
 * (one axis, or every axis after the first). */

typedef struct red_dims {
  int64_t outer, r, inner;
} red_dims;

static red_dims red_dims_of(const ar_nn_attr *at, const ar_shape *s) {
  red_dims d = {1, 1, 1};
  if (at->axis_all) {
    d.outer = s->d[0];
    d.r = ar_shape_count(s) / (s->d[0] > 0 ? s->d[0] : 1);
    if (s->d[0] == 0)
      d.r = 0;
    return d;
  }
  const int ax = at->axis < 0 ? at->axis + s->nd : at->axis;
  for (int k = 0; k < s->nd; k++) {
    if (k < ax)
      d.outer *= s->d[k];
    else if (k == ax)
      d.r = s->d[k];
    else
      d.inner *= s->d[k];
  }
  return d;
}

static ar_status reduce_infer(ar_nn_op op, const ar_nn_attr *attr, int n_in, const ar_shape *in,
                              const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  char b[64];
  AR_CHECK(ar__nn_want_inputs(op, n_in, 1, 1, err));
  AR_CHECK(ar__nn_want_f32(op, n_in, in_dtype, 1u, err));
  const ar_shape *s = &in[0];
  if (s->nd < 1)
    return ar_errf(err, AR_INVALID, "%s: input is a scalar; there is no axis to reduce",
                   ar_nn_op_name(op));
  ar_shape out = *s;
  if (attr->axis_all) {
    for (int k = 1; k < s->nd; k++)
      out.d[k] = 1;
    if (!attr->keepdims)
      out.nd = 1;
  } else {
    if (attr->axis < -s->nd || attr->axis >= s->nd)
      return ar_errf(err, AR_INVALID, "%s: axis %d is outside input %s (%d dims)",
                     ar_nn_op_name(op), attr->axis, ar_shape_str(s, b, sizeof b), s->nd);
    const int ax = attr->axis < 0 ? attr->axis + s->nd : attr->axis;
    if (attr->keepdims) {
      out.d[ax] = 1;
    } else {
      for (int k = ax; k + 1 < s->nd; k++)
        out.d[k] = s->d[k + 1];
      out.nd--;
    }
  }
  ar__nn_sig_init(sig, n_in);
  ar__nn_sig_out(sig, &out, AR_DT_F32);
  sig->in_needed = 0;
  sig->out_needed = false;
  sig->flops = (double)ar_shape_count(s);
  return AR_OK;
}

static ar_status mean_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                            const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  return reduce_infer(AR_NN_MEAN, attr, n_in, in, in_dtype, sig, err);
}
static ar_status sum_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                           const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  return reduce_infer(AR_NN_SUM, attr, n_in, in, in_dtype, sig, err);
}

/* Column block of the (outer, inner) tiles: a block of the output stays in
 * L1 while the r rows stream past. */
#define RED_BLOCK 1024

static void reduce_forward(void *state, ar_nn_args *a) {
  (void)state;
  const red_dims d = red_dims_of(a->attr, &a->in[0].shape);
  const float *x = a->in[0].p;
  float *y = a->out[0].p;
  const float f = a->op == AR_NN_MEAN ? (d.r > 0 ? 1.0f / (float)d.r : NAN) : 1.0f;
  const int64_t nb = (d.inner + RED_BLOCK - 1) / RED_BLOCK, tiles = d.outer * nb;
  const int nt = ar__nn_team(a, d.outer * d.r * d.inner);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < tiles; t++) {
    const int64_t o = t / nb, c0 = t % nb * RED_BLOCK;
    const int64_t w = d.inner - c0 < RED_BLOCK ? d.inner - c0 : RED_BLOCK;
    const float *xo = x + o * d.r * d.inner + c0;
    float *restrict yo = y + o * d.inner + c0;
    if (d.inner == 1) {
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < d.r; j++)
        s += xo[j];
      yo[0] = s * f;
      continue;
    }
    for (int64_t j = 0; j < w; j++)
      yo[j] = 0.0f;
    for (int64_t j = 0; j < d.r; j++) {
      const float *restrict xr = xo + j * d.inner;
#pragma omp simd
      for (int64_t q = 0; q < w; q++)
        yo[q] += xr[q];
    }
    if (f != 1.0f) {
#pragma omp simd
      for (int64_t q = 0; q < w; q++)
        yo[q] *= f;
    }
  }
}

static void reduce_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const red_dims d = red_dims_of(a->attr, &a->in[0].shape);
  const float *g = a->gout[0].p;
  float *gx = a->gin[0].p;
  const float f = a->op == AR_NN_MEAN ? (d.r > 0 ? 1.0f / (float)d.r : 0.0f) : 1.0f;
  const int64_t rows = d.outer * d.r;
  const int nt = ar__nn_team(a, rows * d.inner);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < rows; t++) {
    const float *restrict go = g + t / d.r * d.inner;
    float *restrict gr = gx + t * d.inner;
#pragma omp simd
    for (int64_t q = 0; q < d.inner; q++)
      gr[q] = go[q] * f;
  }
}

void ar__nn_host_eltwise_register(ar_nn_kernel *table) {
  static const struct {
    ar_nn_op op;
    ar_status (*infer)(const ar_nn_attr *, int, const ar_shape *, const ar_dtype *,
                       ar_nn_sig *, ar_err *);
  } unary[] = {{AR_NN_RELU, relu_infer}, {AR_NN_LEAKY_RELU, leaky_infer},
               {AR_NN_SIGMOID, sigmoid_infer}, {AR_NN_TANH, tanh_infer},
               {AR_NN_GELU, gelu_infer}, {AR_NN_SQRT, sqrt_infer},
               {AR_NN_EXP, exp_infer}, {AR_NN_LOG, log_infer},
               {AR_NN_NEG, neg_infer}, {AR_NN_ABS, abs_infer},
               {AR_NN_ERF, erf_infer}, {AR_NN_CLIP, clip_infer}},
    binary[] = {{AR_NN_ADD, add_infer}, {AR_NN_SUB, sub_infer}, {AR_NN_MUL, mul_infer},
                {AR_NN_DIV, div_infer}, {AR_NN_POW, pow_infer}};
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++)
    table[unary[i].op] = (ar_nn_kernel){
        .infer = unary[i].infer, .forward = unary_forward, .backward = unary_backward};
  for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++)
    table[binary[i].op] = (ar_nn_kernel){.infer = binary[i].infer,
                                         .prepare = bin_prepare,
                                         .forward = bin_forward,
                                         .backward = bin_backward};
  table[AR_NN_MEAN] =
      (ar_nn_kernel){.infer = mean_infer, .forward = reduce_forward, .backward = reduce_backward};
  table[AR_NN_SUM] =
      (ar_nn_kernel){.infer = sum_infer, .forward = reduce_forward, .backward = reduce_backward};
}
