/* Shared by the graph engine's tests (test_net*.c): a job file's text
 * parsed, edited, and built into a started model on a one-thread host
 * device; inputs filled from a seed. */
#ifndef ACCELRT_TEST_NET_FIXTURE_H
#define ACCELRT_TEST_NET_FIXTURE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream */
#endif
#include "accelrt/net.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* yaml parsed (a graph model or a chain). */
static inline ar_spec *net_parse_any(const char *yaml) {
  ar_spec *spec = NULL;
  ar_diags d;
  ar_status st = ar_spec_parse(yaml, strlen(yaml), "net.yaml", NULL, NULL, 0, false, &spec, &d);
  if (st != AR_OK)
    ar_diags_print(&d, "net.yaml", stdout);
  ar_diags_fini(&d);
  assert_int_equal(st, AR_OK);
  return spec;
}

static inline ar_spec *net_parse(const char *yaml) {
  ar_spec *spec = net_parse_any(yaml);
  assert_true(spec->graph);
  return spec;
}

/* yaml with the first `from` replaced by `to` (free it). */
static inline char *net_edit(const char *yaml, const char *from, const char *to) {
  const char *at = strstr(yaml, from);
  assert_non_null(at);
  size_t n = strlen(yaml) - strlen(from) + strlen(to) + 1;
  char *out = malloc(n);
  snprintf(out, n, "%.*s%s%s", (int)(at - yaml), yaml, to, at + strlen(from));
  return out;
}

typedef struct net_fix {
  ar_spec *spec;
  ar_net *net;
  ar_device *dev;
} net_fix;

/* A new host device of `threads` threads, unpinned. */
static inline ar_device *net_host(int threads) {
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = threads;
  o.pin = false;
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", &o, &dev, &err), AR_OK);
  return dev;
}

/* Parses yaml, builds its model and starts it on a new host device. */
static inline void net_start(net_fix *f, const char *yaml) {
  ar_err err = AR_ERR_INIT;
  f->spec = net_parse(yaml);
  ar_status st = ar_net_build(f->spec, f->spec->train.batch, &f->net, &err);
  if (st != AR_OK)
    printf("# %s\n", err.msg);
  assert_int_equal(st, AR_OK);
  f->dev = net_host(1);
  st = ar_net_start(f->net, f->dev, NULL, NULL, &err);
  if (st != AR_OK)
    printf("# %s\n", err.msg);
  assert_int_equal(st, AR_OK);
}

/* The net's dense input x filled with values in [-1, 1) drawn from seed
 * (the labels are each test's own). */
static inline void net_fill_x(ar_net *n, unsigned seed) {
  int64_t cnt = ar_shape_count(ar_net_input_shape(n));
  float *x = ar_net_x(n);
  unsigned s = seed;
  for (int64_t i = 0; i < cnt; i++) {
    s = s * 1103515245u + 12345u;
    x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}

/* The shape of the random sparse multi-label batches below: rows of
 * 1..max_nnz features and 1..max_labels labels, label_step apart, except
 * row empty_row, which has none (as XC data may have). */
typedef struct net_sparse_shape {
  int features, classes, max_nnz, max_labels, empty_row, label_step;
} net_sparse_shape;

/* A random batch of `rows` rows of shape sh, drawn from *seed: each row's
 * features every third from a random first, its labels from a random
 * first. */
static inline void net_fill_sparse_batch(ar_batch *b, int64_t rows, unsigned *seed,
                                         const net_sparse_shape *sh) {
  int64_t f = 0, l = 0;
  b->rows = rows;
  for (int64_t r = 0; r < rows; r++) {
    b->row_ptr[r] = f;
    b->lab_ptr[r] = l;
    int nf = 1 + (int)(rand_r(seed) % sh->max_nnz);
    int nl = r == sh->empty_row ? 0 : 1 + (int)(rand_r(seed) % sh->max_labels);
    int f0 = rand_r(seed) % sh->features, l0 = rand_r(seed) % sh->classes;
    for (int k = 0; k < nf; k++) {
      b->idx[f] = (f0 + 3 * k) % sh->features;
      b->val[f++] = (float)(rand_r(seed) % 1000) / 500.0f - 0.5f;
    }
    for (int k = 0; k < nl; k++)
      b->lab[l++] = (l0 + sh->label_step * k) % sh->classes;
  }
  b->row_ptr[rows] = f;
  b->lab_ptr[rows] = l;
}

/* `steps` training steps on the staged batch halve its loss. */
static inline void net_train_halves(ar_net *n, int steps) {
  ar_err err = AR_ERR_INIT;
  double first = 0, loss = 0, lr = 0;
  for (int i = 0; i < steps; i++) {
    assert_int_equal(ar_net_train(n, &loss, &lr, &err), AR_OK);
    if (i == 0)
      first = loss;
  }
  if (!(loss < 0.5 * first))
    printf("# loss %g after %d steps, %g at the first\n", loss, steps, first);
  assert_true(loss < 0.5 * first);
}

/* yaml is refused with `want` in the message: by the parser (its located
 * diagnostics), or else by the graph's build (AR_SPEC, no model). */
static inline void net_expect_error(const char *yaml, const char *want) {
  ar_spec *spec = NULL;
  ar_diags d;
  ar_status st = ar_spec_parse(yaml, strlen(yaml), "net.yaml", NULL, NULL, 0, false, &spec, &d);
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  ar_diags_print(&d, "net.yaml", m);
  fclose(m);
  ar_diags_fini(&d);
  if (st == AR_OK) {
    ar_net *net = NULL;
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_net_build(spec, spec->train.batch, &net, &err), AR_SPEC);
    assert_null(net);
    free(text);
    text = strdup(err.msg);
    ar_spec_destroy(spec);
  }
  if (!strstr(text, want))
    printf("# got: %s\n# want: %s\n", text, want);
  assert_non_null(strstr(text, want));
  free(text);
}

/* dst's parameters, state and optimizer state set to src's, by name
 * (every tensor of dst has one in src, of the same size). */
static inline void net_copy_tensors(ar_net *dst, ar_net *src) {
  int cs = ar_net_tensors(src, NULL, NULL, NULL, NULL);
  int cd = ar_net_tensors(dst, NULL, NULL, NULL, NULL);
  const char **ns = calloc((size_t)cs, sizeof *ns), **nd = calloc((size_t)cd, sizeof *nd);
  float **ps = calloc((size_t)cs, sizeof *ps), **pd = calloc((size_t)cd, sizeof *pd);
  int64_t *ks = calloc((size_t)cs, sizeof *ks), *kd = calloc((size_t)cd, sizeof *kd);
  ar_net_tensors(src, ns, ps, ks, NULL);
  ar_net_tensors(dst, nd, pd, kd, NULL);
  for (int i = 0; i < cd; i++) {
    int j = 0;
    while (j < cs && strcmp(ns[j], nd[i]))
      j++;
    assert_true(j < cs);
    assert_int_equal(ks[j], kd[i]);
    memcpy(pd[i], ps[j], (size_t)kd[i] * sizeof(float));
  }
  free(ns), free(nd), free(ps), free(pd), free(ks), free(kd);
}

static inline void net_close(net_fix *f) {
  ar_net_destroy(f->net);
  ar_device_close(f->dev);
  ar_spec_destroy(f->spec);
}

#endif
