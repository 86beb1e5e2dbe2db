/*
 * Checks of one nn op (include/accelrt/nn.h) on the host device, shared by
 * tests/device/test_nn_*.c:
 *
 *   nn_case c;  nn_case_init(&c, AR_NN_CONV2D, &attr);
 *   nn_case_input(&c, shape, AR_DT_F32);            (each data input)
 *   assert_int_equal(nn_case_setup(&c), AR_OK);     (infer, prepare, fill)
 *   nn_check_grad(&c, &tol);                        (finite differences)
 *   nn_check_torch(&c, "tests/device/nn_torch_conv.py");  (PyTorch)
 *   nn_case_fini(&c);
 *
 * The gradient check: the objective is sum_i gout_i * out_i over every f32
 * output (gout random, fixed); backward gives its gradient for every f32
 * data input and parameter; a sample of their elements is perturbed by +-h
 * and the central difference compared, |num - ana| <= atol + rtol *
 * max(|num|, |ana|).  Integer inputs (ids, labels) are filled by the
 * case's fill hook or uniformly in [0, int_hi).
 *
 * The PyTorch check writes the case to a folder (meta.json: op, attributes,
 * shapes; in<i>.bin, param<i>.bin, state<i>.bin, gout<i>.bin, raw little-
 * endian), has SCRIPT's OPS compute it (one torch process for the whole
 * program, tests/device/nn_torch_io.py --serve; `python3 SCRIPT FOLDER`
 * does one case by hand), which writes out<i>.bin, gin<i>.bin,
 * gparam<i>.bin (and state<i>.bin after the forward) with torch, and
 * compares.  Skipped (returns 1, prints why) when python3 or torch is
 * missing.  The interpreter is $ACCELRT_PYTHON (CMake sets it to
 * Debian's /usr/bin/python3, where python3-torch installs), else python3.  The scripts share tests/device/nn_torch_io.py.
 */
#ifndef ACCELRT_TESTS_NN_CHECK_H
#define ACCELRT_TESTS_NN_CHECK_H

/* mkdtemp; effective when this header comes first, as in the nn tests. */
#if !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE
#endif

#include "accelrt/nn.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

typedef struct nn_case nn_case;
typedef struct nn_case {
  ar_nn_op op;
  ar_nn_attr attr;
  int n_in;
  ar_shape in_shape[AR_NN_MAX_IO];
  ar_dtype in_dtype[AR_NN_MAX_IO];
  ar_nn_sig sig;
  ar_nn_args a;
  ar_device *dev;
  ar_nn_prim *prim;
  void *work;
  size_t work_bytes;
  int64_t int_hi;            /* integer inputs in [0, int_hi); default 4 */
  float lo, hi;              /* f32 inputs uniform in [lo, hi); default -1, 1 */
  bool positive[AR_NN_MAX_IO]; /* this f32 input in [0.5, 1.5) instead */
  void (*fill)(nn_case *c, int input, void *p, int64_t n); /* optional */
  unsigned seed;
  bool training;             /* default true */
} nn_case;

typedef struct nn_tol {
  double h, atol, rtol;
  int samples; /* elements checked per tensor; default 24 */
} nn_tol;
#define NN_TOL_DEFAULT {1e-2, 2e-2, 3e-2, 24}

static inline unsigned nn__rand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (*s >> 8) & 0xffffffu;
}
static inline float nn__uniform(unsigned *s) { return (float)nn__rand(s) / 16777216.0f; }

static inline void nn_case_init(nn_case *c, ar_nn_op op, const ar_nn_attr *attr) {
  memset(c, 0, sizeof *c);
  c->op = op;
  if (attr)
    c->attr = *attr;
  else
    ar_nn_attr_defaults(&c->attr);
  c->int_hi = 4;
  c->lo = -1.0f;
  c->hi = 1.0f;
  c->seed = 12345u;
  c->training = true;
}

static inline void nn_case_input(nn_case *c, ar_shape s, ar_dtype t) {
  assert_true(c->n_in < AR_NN_MAX_IO);
  c->in_shape[c->n_in] = s;
  c->in_dtype[c->n_in++] = t;
}

/* A shape literal: NN_SHAPE(2, 3, 8, 8). */
#define NN_SHAPE(...)                                                          \
  ar__nn_test_shape(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t),        \
                    (int64_t[]){__VA_ARGS__})
static inline ar_shape ar__nn_test_shape(size_t nd, const int64_t *d) {
  ar_shape s = {0};
  s.nd = (int)nd;
  for (size_t i = 0; i < nd; i++)
    s.d[i] = d[i];
  return s;
}

static inline void *nn__alloc(const ar_shape *s, ar_dtype t) {
  size_t n = (size_t)ar_shape_count(s) * ar_dtype_size(t);
  void *p = calloc(n ? n : 1, 1);
  assert_non_null(p);
  return p;
}

static inline void nn__fill_input(nn_case *c, int i) {
  ar_tref *t = &c->a.in[i];
  int64_t n = ar_shape_count(&t->shape);
  if (c->fill) {
    c->fill(c, i, t->p, n);
    return;
  }
  for (int64_t j = 0; j < n; j++) {
    switch (t->dtype) {
    case AR_DT_F32:
      ((float *)t->p)[j] = c->positive[i] ? 0.5f + nn__uniform(&c->seed)
                                          : c->lo + (c->hi - c->lo) * nn__uniform(&c->seed);
      break;
    case AR_DT_I64:
      ((int64_t *)t->p)[j] = (int64_t)(nn__rand(&c->seed) % (unsigned)c->int_hi);
      break;
    case AR_DT_I32:
      ((int32_t *)t->p)[j] = (int32_t)(nn__rand(&c->seed) % (unsigned)c->int_hi);
      break;
    default:
      ((uint8_t *)t->p)[j] = (uint8_t)(nn__rand(&c->seed) % 2u);
    }
  }
}

static inline void nn__fill_init(nn_case *c, float *p, int64_t n, ar_nn_init init, float std,
                                 const ar_shape *s) {
  double fan = (double)(s->nd > 1 ? ar_shape_count(s) / s->d[0] : (s->nd ? s->d[0] : 1));
  for (int64_t j = 0; j < n; j++) {
    float u = 2.0f * nn__uniform(&c->seed) - 1.0f;
    switch (init) {
    case AR_NN_INIT_ZEROS:
      p[j] = 0.0f; /* perturbed below so gradients are not all at a kink */
      break;
    case AR_NN_INIT_ONES:
      p[j] = 1.0f;
      break;
    case AR_NN_INIT_FAN_IN:
      p[j] = u * (float)sqrt(3.0 / (fan > 0 ? fan : 1));
      break;
    case AR_NN_INIT_FAN_IN_ROWS:
      p[j] = u * (float)sqrt(3.0 / (double)(s->nd ? s->d[0] : 1));
      break;
    case AR_NN_INIT_NORMAL:
      p[j] = u * std * 1.7f;
      break;
    }
    /* Random values around the initial one: the test should not rely on
     * a parameter's starting value (zeros would hide a wrong gradient). */
    if (init == AR_NN_INIT_ZEROS || init == AR_NN_INIT_ONES)
      p[j] += 0.3f * u;
  }
}

/* Infers, allocates every tensor, fills inputs, parameters, state and gout,
 * prepares the op.  Returns the infer or prepare status. */
static inline ar_status nn_case_setup(nn_case *c) {
  ar_err err = AR_ERR_INIT;
  ar_status st =
      ar_nn_infer(c->op, &c->attr, c->n_in, c->in_shape, c->in_dtype, &c->sig, &err);
  if (st != AR_OK) {
    printf("# infer: %s\n", err.msg);
    return st;
  }
  ar_nn_args *a = &c->a;
  ar_nn_args_from_sig(a, c->op, &c->attr, &c->sig);
  a->training = c->training;
  a->seed = 7;
  for (int i = 0; i < a->n_in; i++) {
    a->in[i] = (ar_tref){nn__alloc(&c->in_shape[i], c->in_dtype[i]), c->in_shape[i],
                         c->in_dtype[i]};
    a->gin[i] = (ar_tref){NULL, c->in_shape[i], c->in_dtype[i]};
    if (c->in_dtype[i] == AR_DT_F32 && !(c->sig.no_grad & (1u << i)))
      a->gin[i].p = nn__alloc(&c->in_shape[i], AR_DT_F32);
    nn__fill_input(c, i);
  }
  for (int i = 0; i < a->n_param; i++) {
    a->param[i] = (ar_tref){nn__alloc(&c->sig.param[i], AR_DT_F32), c->sig.param[i], AR_DT_F32};
    a->gparam[i] =
        (ar_tref){nn__alloc(&c->sig.param[i], AR_DT_F32), c->sig.param[i], AR_DT_F32};
    nn__fill_init(c, a->param[i].p, ar_shape_count(&c->sig.param[i]), c->sig.param_init[i],
                  c->sig.param_std[i], &c->sig.param[i]);
  }
  for (int i = 0; i < a->n_state; i++) {
    a->state[i] = (ar_tref){nn__alloc(&c->sig.state[i], AR_DT_F32), c->sig.state[i], AR_DT_F32};
    float *p = a->state[i].p;
    int64_t n = ar_shape_count(&c->sig.state[i]);
    for (int64_t j = 0; j < n; j++)
      p[j] = c->sig.state_init[i] == AR_NN_INIT_ONES ? 1.0f : 0.0f;
  }
  for (int i = 0; i < a->n_out; i++) {
    a->out[i] = (ar_tref){nn__alloc(&c->sig.out[i], c->sig.out_dtype[i]), c->sig.out[i],
                          c->sig.out_dtype[i]};
    a->gout[i] = (ar_tref){nn__alloc(&c->sig.out[i], AR_DT_F32), c->sig.out[i], AR_DT_F32};
    float *g = a->gout[i].p;
    int64_t n = ar_shape_count(&c->sig.out[i]);
    for (int64_t j = 0; j < n; j++)
      g[j] = c->op == AR_NN_XENT || c->op == AR_NN_XENT_MULTI ? 1.0f : 2.0f * nn__uniform(&c->seed) - 1.0f;
  }
  for (int i = 0; i < a->n_aux; i++)
    a->aux[i] = (ar_tref){nn__alloc(&c->sig.aux[i], c->sig.aux_dtype[i]), c->sig.aux[i],
                          c->sig.aux_dtype[i]};
  if (!c->dev) {
    ar_device_opts o = AR_DEVICE_OPTS_INIT;
    o.threads = 2;
    o.pin = false;
    st = ar_device_open("host", &o, &c->dev, &err);
    assert_int_equal(st, AR_OK);
  }
  st = ar_device_nn_prepare(c->dev, a, c->training, &c->prim, &c->work_bytes, &err);
  if (st != AR_OK) {
    printf("# prepare: %s\n", err.msg);
    return st;
  }
  c->work = c->work_bytes ? malloc(c->work_bytes) : NULL;
  a->work = c->work;
  a->work_bytes = c->work_bytes;
  return AR_OK;
}

static inline void nn_case_forward(nn_case *c) { ar_device_nn_forward(c->dev, c->prim, &c->a); }
static inline void nn_case_backward(nn_case *c) {
  ar_device_nn_backward(c->dev, c->prim, &c->a);
}

static inline double nn__objective(nn_case *c) {
  /* Forward without touching the state (a training forward updates
   * running statistics: they do not enter the training outputs). */
  size_t sb[AR_NN_MAX_IO];
  void *saved[AR_NN_MAX_IO];
  for (int i = 0; i < c->a.n_state; i++) {
    sb[i] = (size_t)ar_shape_count(&c->a.state[i].shape) * 4;
    saved[i] = malloc(sb[i]);
    memcpy(saved[i], c->a.state[i].p, sb[i]);
  }
  nn_case_forward(c);
  for (int i = 0; i < c->a.n_state; i++) {
    memcpy(c->a.state[i].p, saved[i], sb[i]);
    free(saved[i]);
  }
  double s = 0;
  for (int i = 0; i < c->a.n_out; i++) {
    if (c->a.out[i].dtype != AR_DT_F32)
      continue;
    const float *o = c->a.out[i].p, *g = c->a.gout[i].p;
    int64_t n = ar_shape_count(&c->a.out[i].shape);
    for (int64_t j = 0; j < n; j++)
      s += (double)o[j] * (double)g[j];
  }
  return s * (c->op == AR_NN_XENT || c->op == AR_NN_BCE || c->op == AR_NN_XENT_MULTI ? (double)c->a.scale : 1.0);
}

/* Compares backward's gradient of one tensor with central differences;
 * returns the number of mismatches (printed). */
static inline int nn__check_tensor(nn_case *c, const char *what, int idx, float *x,
                                   const float *ana, int64_t n, const nn_tol *t) {
  int bad = 0;
  int samples = t->samples > 0 ? t->samples : 24;
  unsigned s = 99u + (unsigned)idx;
  for (int k = 0; k < samples && k < n; k++) {
    int64_t j = n <= samples ? k : (int64_t)(nn__rand(&s) % (unsigned)n);
    float keep = x[j];
    x[j] = keep + (float)t->h;
    double up = nn__objective(c);
    x[j] = keep - (float)t->h;
    double dn = nn__objective(c);
    x[j] = keep;
    double num = (up - dn) / (2.0 * t->h);
    double an = ana[j];
    double tol = t->atol + t->rtol * fmax(fabs(num), fabs(an));
    if (!(fabs(num - an) <= tol)) {
      if (bad < 5)
        printf("# %s %s[%d] element %lld: backward %.6g, finite difference %.6g\n",
               ar_nn_op_name(c->op), what, idx, (long long)j, an, num);
      bad++;
    }
  }
  return bad;
}

/* Runs forward and backward once, then checks every f32 data input that
 * takes a gradient and every parameter.  Fails the test on a mismatch. */
static inline void nn_check_grad(nn_case *c, const nn_tol *tol) {
  nn_tol t = NN_TOL_DEFAULT;
  if (tol)
    t = *tol;
  nn_case_forward(c);
  nn_case_backward(c);
  /* Copies: later forwards must not be read as this backward's. */
  int bad = 0;
  for (int i = 0; i < c->a.n_in; i++) {
    if (!c->a.gin[i].p)
      continue;
    int64_t n = ar_shape_count(&c->a.in[i].shape);
    float *g = malloc((size_t)n * 4);
    memcpy(g, c->a.gin[i].p, (size_t)n * 4);
    bad += nn__check_tensor(c, "input", i, c->a.in[i].p, g, n, &t);
    free(g);
  }
  for (int i = 0; i < c->a.n_param; i++) {
    int64_t n = ar_shape_count(&c->a.param[i].shape);
    float *g = malloc((size_t)n * 4);
    memcpy(g, c->a.gparam[i].p, (size_t)n * 4);
    bad += nn__check_tensor(c, c->sig.param_name[i], i, c->a.param[i].p, g, n, &t);
    free(g);
  }
  assert_int_equal(bad, 0);
}

/* ---- PyTorch ------------------------------------------------------------- */

static inline const char *nn_python(void) {
  const char *p = getenv("ACCELRT_PYTHON");
  return p && p[0] ? p : "python3";
}

/* The PyTorch side: one `python3 tests/device/nn_torch_io.py --serve`
 * for the whole test program (torch takes ~2 s to start), fed one case a
 * line; its stdin closes at exit, and it ends.  nn_torch.ok is 1 when it
 * said "ready", 0 when it could not (no python3, no torch). */
static struct {
  int ok; /* -1: not started */
  FILE *to, *from;
  pid_t pid;
} nn_torch = {-1, NULL, NULL, 0};

static inline void nn__torch_stop(void) {
  if (nn_torch.to)
    fclose(nn_torch.to);
  if (nn_torch.from)
    fclose(nn_torch.from);
  if (nn_torch.pid > 0)
    waitpid(nn_torch.pid, NULL, 0);
  nn_torch.to = nn_torch.from = NULL;
  nn_torch.pid = 0;
}

static inline void nn__torch_start(void) {
  nn_torch.ok = 0;
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0)
    return;
  /* Later children (system() below) must not hold the server's stdin. */
  fcntl(in[1], F_SETFD, FD_CLOEXEC);
  fcntl(out[0], F_SETFD, FD_CLOEXEC);
  pid_t pid = fork();
  if (pid < 0)
    return;
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]);
    close(out[1]);
    execlp(nn_python(), nn_python(), "tests/device/nn_torch_io.py", "--serve", (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  signal(SIGPIPE, SIG_IGN); /* a dead server reads as a failed case */
  nn_torch.pid = pid;
  nn_torch.to = fdopen(in[1], "w");
  nn_torch.from = fdopen(out[0], "r");
  atexit(nn__torch_stop);
  char line[512];
  if (nn_torch.to && nn_torch.from && fgets(line, sizeof line, nn_torch.from) &&
      !strcmp(line, "ready\n"))
    nn_torch.ok = 1;
  else
    nn__torch_stop();
}

static inline bool nn_torch_available(void) {
  const char *off = getenv("ACCELRT_TORCH_CHECKS");
  if (off && !strcmp(off, "0"))
    return false; /* ci/sanitize: the release suite compares with torch */
  if (nn_torch.ok < 0)
    nn__torch_start();
  return nn_torch.ok == 1;
}

/* SCRIPT's reference for the case in dir; false (the reason on stderr) if
 * the script failed or the server is gone. */
static inline bool nn__torch_case(const char *script, const char *dir) {
  char line[64];
  if (!nn_torch.to || fprintf(nn_torch.to, "%s\t%s\n", script, dir) < 0 ||
      fflush(nn_torch.to) != 0 || !fgets(line, sizeof line, nn_torch.from))
    return false;
  return !strcmp(line, "ok\n");
}

static inline void nn__write(const char *dir, const char *name, int i, const ar_tref *t) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s%d.bin", dir, name, i);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  size_t n = (size_t)ar_shape_count(&t->shape) * ar_dtype_size(t->dtype);
  assert_int_equal(fwrite(t->p, 1, n, f), n);
  fclose(f);
}

static inline void *nn__read(const char *dir, const char *name, int i, size_t bytes) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s%d.bin", dir, name, i);
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  void *p = malloc(bytes ? bytes : 1);
  size_t got = fread(p, 1, bytes, f);
  fclose(f);
  assert_int_equal(got, bytes);
  return p;
}

static inline void nn__shape_json(FILE *f, const ar_tref *t, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    fprintf(f, "%s{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", ar_dtype_name(t[i].dtype));
    for (int d = 0; d < t[i].shape.nd; d++)
      fprintf(f, "%s%lld", d ? "," : "", (long long)t[i].shape.d[d]);
    fputs("]}", f);
  }
  fputc(']', f);
}

static inline void nn__attr_json(FILE *f, const ar_nn_attr *a) {
  fprintf(f,
          "{\"out\":%lld,\"kernel\":[%lld,%lld],\"stride\":[%lld,%lld],"
          "\"pad\":[%lld,%lld,%lld,%lld],\"dilation\":[%lld,%lld],\"groups\":%lld,"
          "\"bias\":%s,\"act\":%d,\"eps\":%.9g,\"momentum\":%.9g,\"alpha\":%.9g,"
          "\"p\":%.9g,\"scalar\":%.9g,\"axis\":%d,\"axis_all\":%s,\"keepdims\":%s,"
          "\"begin\":%lld,\"end\":%lld,\"sizes\":[",
          (long long)a->out, (long long)a->kernel[0], (long long)a->kernel[1],
          (long long)a->stride[0], (long long)a->stride[1], (long long)a->pad[0],
          (long long)a->pad[1], (long long)a->pad[2], (long long)a->pad[3],
          (long long)a->dilation[0], (long long)a->dilation[1], (long long)a->groups,
          a->bias ? "true" : "false", (int)a->act, a->eps, a->momentum, a->alpha, a->p,
          a->scalar, a->axis, a->axis_all ? "true" : "false", a->keepdims ? "true" : "false",
          (long long)a->begin, (long long)a->end);
  for (int i = 0; i < a->n_sizes; i++)
    fprintf(f, "%s%lld", i ? "," : "", (long long)a->sizes[i]);
  fputs("],\"pad_nd\":[", f);
  for (int i = 0; i < 2 * AR_NN_MAX_DIMS; i++)
    fprintf(f, "%s%lld", i ? "," : "", (long long)a->pad_nd[i]);
  fputs("],\"shape\":[", f);
  for (int i = 0; i < a->shape.nd; i++)
    fprintf(f, "%s%lld", i ? "," : "", (long long)a->shape.d[i]);
  fputs("],\"perm\":[", f);
  for (int i = 0; i < AR_NN_MAX_DIMS; i++)
    fprintf(f, "%s%d", i ? "," : "", a->perm[i]);
  fprintf(f,
          "],\"vocab\":%lld,\"pad_id\":%lld,\"heads\":%d,\"causal\":%s,"
          "\"trans_b\":%s,",
          (long long)a->vocab, (long long)a->pad_id, a->heads, a->causal ? "true" : "false",
          a->trans_b ? "true" : "false");
  /* Python's json reads -Infinity and Infinity (C prints -inf, inf). */
  const float lohi[2] = {a->lo, a->hi};
  for (int i = 0; i < 2; i++) {
    fprintf(f, "\"%s\":", i ? "hi" : "lo");
    if (isinf(lohi[i]))
      fprintf(f, "%sInfinity,", lohi[i] < 0 ? "-" : "");
    else
      fprintf(f, "%.9g,", (double)lohi[i]);
  }
  fprintf(f,
          "\"to\":\"%s\",\"exclude_pad\":%s,\"indices\":%s,\"var_biased\":%s,"
          "\"stats\":%s}",
          ar_dtype_name(a->to), a->exclude_pad ? "true" : "false",
          a->indices ? "true" : "false", a->var_biased ? "true" : "false",
          a->stats ? "true" : "false");
}

static inline int nn__compare(const char *what, int i, const float *ours, const float *ref,
                              int64_t n, double atol, double rtol) {
  int bad = 0;
  for (int64_t j = 0; j < n; j++) {
    double d = fabs((double)ours[j] - (double)ref[j]);
    if (!(d <= atol + rtol * fabs((double)ref[j]))) {
      if (bad < 5)
        printf("# torch: %s%d[%lld]: ours %.7g, torch %.7g\n", what, i, (long long)j,
               (double)ours[j], (double)ref[j]);
      bad++;
    }
  }
  return bad;
}

/* Forward and (training) backward here and in PyTorch on the same values;
 * compares outputs, the state after the forward, input and parameter
 * gradients.  Returns 1 (skipped) without torch, else 0 (mismatches fail
 * the test). */
static inline int nn_check_torch(nn_case *c, const char *script, double atol, double rtol) {
  if (!nn_torch_available()) {
    printf("# torch check skipped: python3 with torch is not installed\n");
    return 1;
  }
  char dir[] = "/tmp/nn_torch_XXXXXX";
  assert_non_null(mkdtemp(dir));
  ar_nn_args *a = &c->a;
  for (int i = 0; i < a->n_in; i++)
    nn__write(dir, "in", i, &a->in[i]);
  for (int i = 0; i < a->n_param; i++)
    nn__write(dir, "param", i, &a->param[i]);
  for (int i = 0; i < a->n_state; i++)
    nn__write(dir, "state", i, &a->state[i]);
  for (int i = 0; i < a->n_out; i++)
    nn__write(dir, "gout", i, &a->gout[i]);
  char path[512];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "{\"op\":\"%s\",\"training\":%s,\"scale\":%.9g,\"attr\":", ar_nn_op_name(c->op),
          c->training ? "true" : "false", a->scale);
  nn__attr_json(f, &c->attr);
  fputs(",\"in\":", f);
  nn__shape_json(f, a->in, a->n_in);
  fputs(",\"param\":", f);
  nn__shape_json(f, a->param, a->n_param);
  fputs(",\"state\":", f);
  nn__shape_json(f, a->state, a->n_state);
  fputs(",\"out\":", f);
  nn__shape_json(f, a->out, a->n_out);
  fputs("}\n", f);
  fclose(f);
  nn_case_forward(c);
  if (c->training)
    nn_case_backward(c);
  if (!nn__torch_case(script, dir)) {
    printf("# torch: %s failed on %s's case in %s (kept)\n", script, ar_nn_op_name(c->op), dir);
    fail();
  }
  int bad = 0;
  for (int i = 0; i < a->n_out; i++) {
    if (a->out[i].dtype != AR_DT_F32)
      continue;
    int64_t n = ar_shape_count(&a->out[i].shape);
    float *ref = nn__read(dir, "out", i, (size_t)n * 4);
    assert_non_null(ref);
    bad += nn__compare("out", i, a->out[i].p, ref, n, atol, rtol);
    free(ref);
  }
  for (int i = 0; i < a->n_state; i++) {
    int64_t n = ar_shape_count(&a->state[i].shape);
    float *ref = nn__read(dir, "newstate", i, (size_t)n * 4);
    if (ref) {
      bad += nn__compare("state", i, a->state[i].p, ref, n, atol, rtol);
      free(ref);
    }
  }
  for (int i = 0; c->training && i < a->n_in; i++) {
    if (!a->gin[i].p)
      continue;
    int64_t n = ar_shape_count(&a->in[i].shape);
    float *ref = nn__read(dir, "gin", i, (size_t)n * 4);
    assert_non_null(ref);
    bad += nn__compare("gin", i, a->gin[i].p, ref, n, atol, rtol);
    free(ref);
  }
  for (int i = 0; c->training && i < a->n_param; i++) {
    int64_t n = ar_shape_count(&a->param[i].shape);
    float *ref = nn__read(dir, "gparam", i, (size_t)n * 4);
    assert_non_null(ref);
    bad += nn__compare("gparam", i, a->gparam[i].p, ref, n, atol, rtol);
    free(ref);
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    printf("# could not remove %s\n", dir);
  if (bad)
    printf("# torch: %d values of %s's case differ from %s's\n", bad, ar_nn_op_name(c->op),
           script);
  assert_int_equal(bad, 0);
  return 0;
}

static inline void nn_case_fini(nn_case *c) {
  ar_nn_args *a = &c->a;
  for (int i = 0; i < a->n_in; i++) {
    free(a->in[i].p);
    free(a->gin[i].p);
  }
  for (int i = 0; i < a->n_param; i++) {
    free(a->param[i].p);
    free(a->gparam[i].p);
  }
  for (int i = 0; i < a->n_state; i++)
    free(a->state[i].p);
  for (int i = 0; i < a->n_out; i++) {
    free(a->out[i].p);
    free(a->gout[i].p);
  }
  for (int i = 0; i < a->n_aux; i++)
    free(a->aux[i].p);
  free(c->work);
  ar_device_nn_release(c->dev, c->prim);
  ar_device_close(c->dev);
  memset(c, 0, sizeof *c);
}

#endif
