/* accelrt onnx-test DIR...: runs ONNX backend-test folders (model.onnx
 * and test_data_set_N/input_K.pb, output_K.pb) through the importer
 * (runtime/onnx) and the graph engine's kernels, one line per folder:
 * pass NAME, fail NAME: what differed, skip NAME: why; then the counts.
 * Outputs are compared as ONNX's own backend runner does
 * (onnx/backend/test/runner: numpy.testing.assert_allclose with rtol 1e-3
 * and atol 1e-7, NaN equal to NaN, element types and shapes equal). */
#define _GNU_SOURCE
#include "accelrt/device.h"
#include "accelrt/net.h"
#include "accelrt/onnx.h"
#include "cli/cli.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RTOL 1e-3
#define ATOL 1e-7

enum { PASS, FAIL, SKIP };

typedef struct run_opts {
  int threads;
  bool verbose;
} run_opts;

static bool is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of dir (sorted) whose name starts with prefix and for which
 * keep(path) holds; *n of them, each "dir/name" (free with free_list). */
static char **list(const char *dir, const char *prefix, bool (*keep)(const char *), int *n) {
  *n = 0;
  DIR *d = opendir(dir);
  if (!d)
    return NULL;
  char **out = NULL;
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || strncmp(e->d_name, prefix, strlen(prefix)))
      continue;
    char *p = ar_path_join(dir, e->d_name);
    if (!p || !keep(p)) {
      ar_free(p);
      continue;
    }
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      char **o = ar_realloc(out, (size_t)cap * sizeof *o);
      if (!o) {
        ar_free(p);
        break;
      }
      out = o;
    }
    out[(*n)++] = p;
  }
  closedir(d);
  if (*n)
    qsort(out, (size_t)*n, sizeof *out, by_name);
  return out;
}

static void free_list(char **l, int n) {
  for (int i = 0; i < n; i++)
    ar_free(l[i]);
  ar_free(l);
}

/* Compares one output with its reference; 0 when within tolerance, else
 * what differed in msg. */
static int compare(const char *what, const ar_nn_gtensor *gt, const void *got,
                   const ar_onnx_tensor *want, char *msg, size_t size) {
  char a[64], b[64];
  if (gt->dtype != want->dtype) {
    snprintf(msg, size, "%s is %s, expected %s", what, ar_dtype_name(gt->dtype),
             ar_dtype_name(want->dtype));
    return 1;
  }
  if (!ar_shape_eq(&gt->shape, &want->shape)) {
    snprintf(msg, size, "%s is %s, expected %s", what, ar_shape_str(&gt->shape, a, sizeof a),
             ar_shape_str(&want->shape, b, sizeof b));
    return 1;
  }
  const int64_t n = ar_shape_count(&want->shape);
  double max_abs = 0, max_rel = 0;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++) {
    double x, y;
    if (want->dtype == AR_DT_F32) {
      x = ((const float *)got)[i];
      y = ((const float *)want->data)[i];
    } else if (want->dtype == AR_DT_I64) {
      x = (double)((const int64_t *)got)[i];
      y = (double)((const int64_t *)want->data)[i];
    } else if (want->dtype == AR_DT_I32) {
      x = ((const int32_t *)got)[i];
      y = ((const int32_t *)want->data)[i];
    } else {
      x = ((const uint8_t *)got)[i];
      y = ((const uint8_t *)want->data)[i];
    }
    if ((isnan(x) && isnan(y)) || x == y)
      continue;
    const double d = fabs(x - y), r = y != 0 ? d / fabs(y) : INFINITY;
    if (!(d <= max_abs))
      max_abs = d;
    if (!(r <= max_rel))
      max_rel = r;
    if (!(d <= ATOL + RTOL * fabs(y))) {
      if (first < 0)
        first = i;
      bad++;
    }
  }
  if (!bad)
    return 0;
  const double fx = want->dtype == AR_DT_F32 ? ((const float *)got)[first] : 0,
               fy = want->dtype == AR_DT_F32 ? ((const float *)want->data)[first] : 0;
  if (want->dtype == AR_DT_F32)
    snprintf(msg, size,
             "%s: %lld of %lld elements differ (max abs error %.3g, max rel error %.3g; first "
             "at %lld: %.7g, expected %.7g)",
             what, (long long)bad, (long long)n, max_abs, max_rel, (long long)first, fx, fy);
  else
    snprintf(msg, size, "%s: %lld of %lld %s elements differ (max abs error %.3g; first at %lld)",
             what, (long long)bad, (long long)n, ar_dtype_name(want->dtype), max_abs,
             (long long)first);
  return 1;
}

/* Runs one data set of the model; PASS, FAIL or SKIP with msg. */
static int run_set(const ar_onnx_model *m, const char *set, ar_device *dev, const run_opts *o,
                   char *msg, size_t size) {
  const int ni = ar_onnx_n_inputs(m), no = ar_onnx_n_outputs(m);
  ar_onnx_tensor *in = ar_calloc((size_t)ni + 1, sizeof *in);
  ar_onnx_tensor *want = ar_calloc((size_t)no + 1, sizeof *want);
  const ar_onnx_tensor **known = ar_calloc((size_t)ni + 1, sizeof *known);
  ar_shape *shapes = ar_calloc((size_t)ni + 1, sizeof *shapes);
  void **outs = ar_calloc((size_t)no + 1, sizeof *outs);
  const void **feeds = ar_calloc((size_t)ni + 1, sizeof *feeds);
  ar_nn_graph *g = NULL;
  ar_net *net = NULL;
  ar_err err = AR_ERR_INIT;
  int res = FAIL;
  char path[4096];
  if (!in || !want || !known || !shapes || !outs || !feeds) {
    snprintf(msg, size, "out of memory");
    goto done;
  }
  for (int i = 0; i < ni; i++) {
    const ar_onnx_io *io = ar_onnx_input(m, i);
    snprintf(path, sizeof path, "%s/input_%d.pb", set, io->position);
    if (ar_onnx_read_tensor(path, NULL, NULL, &in[i], &err) != AR_OK) {
      snprintf(msg, size, "%s", err.msg);
      goto done;
    }
    if (in[i].dtype != io->dtype) {
      snprintf(msg, size, "%.1000s is %s, but input '%.200s' is %s", path,
               ar_dtype_name(in[i].dtype), io->name, ar_dtype_name(io->dtype));
      goto done;
    }
    shapes[i] = in[i].shape;
    known[i] = &in[i];
  }
  for (int i = 0; i < no; i++) {
    snprintf(path, sizeof path, "%s/output_%d.pb", set, i);
    if (ar_onnx_read_tensor(path, NULL, NULL, &want[i], &err) != AR_OK) {
      snprintf(msg, size, "%s", err.msg);
      goto done;
    }
  }
  ar_onnx_lower_opts lo = AR_ONNX_LOWER_OPTS_INIT;
  lo.input_shapes = shapes;
  lo.known = known;
  ar_status st = ar_onnx_lower(m, &lo, &g, &err);
  ar_net_graph_opts go = AR_NET_GRAPH_OPTS_INIT;
  go.threads = o->threads;
  if (st == AR_OK)
    st = ar_net_build_graph(g, &go, &net, &err);
  if (st == AR_OK)
    st = ar_net_start(net, dev, NULL, NULL, &err);
  if (st != AR_OK) {
    res = st == AR_UNSUPPORTED ? SKIP : FAIL;
    snprintf(msg, size, "%s", err.msg);
    goto done;
  }
  for (int i = 0; i < g->n_inputs; i++) {
    const char *nm = g->tensors[g->inputs[i]].name;
    for (int k = 0; k < ni; k++)
      if (!strcmp(ar_onnx_input(m, k)->name, nm))
        feeds[i] = in[k].data;
  }
  for (int i = 0; i < no; i++) {
    const ar_nn_gtensor *t = &g->tensors[g->outputs[i]];
    outs[i] = ar_malloc((size_t)ar_shape_count(&t->shape) * ar_dtype_size(t->dtype) + 1);
    if (!outs[i]) {
      snprintf(msg, size, "out of memory");
      goto done;
    }
  }
  if (ar_net_infer(net, feeds, outs, &err) != AR_OK) {
    snprintf(msg, size, "%s", err.msg);
    goto done;
  }
  res = PASS;
  for (int i = 0; i < no && res == PASS; i++) {
    char what[300];
    snprintf(what, sizeof what, "output %d '%.200s'", i, ar_onnx_output(m, i)->name);
    if (compare(what, &g->tensors[g->outputs[i]], outs[i], &want[i], msg, size))
      res = FAIL;
  }
  if (o->verbose && res == PASS)
    ar_net_print(net, stdout);
done:
  ar_net_destroy(net);
  ar_nn_graph_destroy(g);
  for (int i = 0; in && i < ni; i++)
    ar_onnx_tensor_fini(&in[i]);
  for (int i = 0; want && i < no; i++)
    ar_onnx_tensor_fini(&want[i]);
  for (int i = 0; outs && i < no; i++)
    ar_free(outs[i]);
  ar_free(in);
  ar_free(want);
  ar_free(known);
  ar_free(shapes);
  ar_free(outs);
  ar_free(feeds);
  return res;
}

/* One folder: every data set must pass. */
static int run_case(const char *dir, ar_device *dev, const run_opts *o, char *msg, size_t size) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_onnx_load(path, NULL, NULL, &m, &err);
  if (st != AR_OK) {
    snprintf(msg, size, "%s", err.msg);
    return st == AR_UNSUPPORTED ? SKIP : FAIL;
  }
  int n = 0;
  char **sets = list(dir, "test_data_set_", is_dir, &n);
  int res = n ? PASS : SKIP;
  if (!n)
    snprintf(msg, size, "no test_data_set_N folders");
  for (int i = 0; i < n && res == PASS; i++) {
    char m2[1800];
    res = run_set(m, sets[i], dev, o, m2, sizeof m2);
    if (res != PASS)
      snprintf(msg, size, "%.100s%s%s", n > 1 ? strrchr(sets[i], '/') + 1 : "", n > 1 ? ": " : "",
               m2);
  }
  free_list(sets, n);
  ar_onnx_destroy(m);
  return res;
}

static bool has_model(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  return is_dir(dir) && is_file(path);
}

static void usage(FILE *to) {
  fprintf(to,
          "usage: accelrt onnx-test [--threads N] [--verbose] DIR...\n"
          "  Runs ONNX backend-test folders (model.onnx, test_data_set_N/input_K.pb and\n"
          "  output_K.pb) through the importer and the engine's kernels.  DIR is one such\n"
          "  folder or a folder of them (e.g. /usr/share/libonnx-testdata/data/node).\n"
          "  Prints pass NAME, fail NAME: what differed, or skip NAME: why, one line per\n"
          "  folder, then the counts.  Tolerances are ONNX's backend runner's: rtol %g,\n"
          "  atol %g.  --verbose also prints each passing folder's imported graph.\n"
          "  Exit status: 0 when none failed, 1 when any failed, 2 for usage errors.\n",
          RTOL, ATOL);
}

int cli_onnx_test(int argc, char **argv) {
  run_opts o = {1, false};
  int first = 1;
  for (; first < argc && argv[first][0] == '-'; first++) {
    if (!strcmp(argv[first], "--threads") && first + 1 < argc) {
      o.threads = atoi(argv[++first]);
      if (o.threads < 1 || o.threads > 1024) {
        fprintf(stderr, "accelrt onnx-test: --threads takes 1 to 1024\n");
        return CLI_USAGE;
      }
    } else if (!strcmp(argv[first], "--verbose")) {
      o.verbose = true;
    } else if (!strcmp(argv[first], "--help") || !strcmp(argv[first], "-h")) {
      usage(stdout);
      return CLI_OK;
    } else {
      fprintf(stderr, "accelrt onnx-test: unknown option '%s'\n", argv[first]);
      usage(stderr);
      return CLI_USAGE;
    }
  }
  if (first >= argc) {
    usage(stderr);
    return CLI_USAGE;
  }
  ar_device_opts dopts = AR_DEVICE_OPTS_INIT;
  dopts.threads = o.threads;
  dopts.pin = false;
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_device_open("host", &dopts, &dev, &err) != AR_OK) {
    fprintf(stderr, "accelrt onnx-test: %s\n", err.msg);
    return CLI_FAIL;
  }
  int counts[3] = {0, 0, 0}, status = CLI_OK;
  for (int a = first; a < argc; a++) {
    int n = 0;
    char **cases = NULL;
    if (has_model(argv[a])) {
      cases = ar_malloc(sizeof *cases);
      if (cases && (cases[0] = ar_strdup(argv[a])))
        n = 1;
    } else if (is_dir(argv[a])) {
      cases = list(argv[a], "", has_model, &n);
    }
    if (!n) {
      fprintf(stderr,
              "accelrt onnx-test: %s is not a folder with model.onnx, nor a folder of "
              "them\n",
              argv[a]);
      status = CLI_USAGE;
    }
    for (int i = 0; i < n; i++) {
      char msg[2048] = "";
      const char *name = strrchr(cases[i], '/') ? strrchr(cases[i], '/') + 1 : cases[i];
      int r = run_case(cases[i], dev, &o, msg, sizeof msg);
      counts[r]++;
      if (r == PASS)
        printf("pass %s\n", name);
      else
        printf("%s %s: %s\n", r == FAIL ? "fail" : "skip", name, msg);
      fflush(stdout);
    }
    free_list(cases, n);
  }
  ar_device_close(dev);
  printf("%d passed, %d failed, %d skipped\n", counts[PASS], counts[FAIL], counts[SKIP]);
  if (status == CLI_USAGE)
    return status;
  return counts[FAIL] ? CLI_FAIL : CLI_OK;
}
