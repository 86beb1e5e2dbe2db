/*
 * The resolved job (ar_spec.resolved, runtime/spec/resolved.c): the YAML
 * `accelrt run` keeps as job.resolved.yaml.  Parsing it must give the same
 * spec as the file and overrides it came from, from any working directory;
 * it names the defaults it used and leaves out the keys that only apply
 * together with others; writing it again changes nothing.
 */
#define _DEFAULT_SOURCE /* realpath */
#define _POSIX_C_SOURCE 200809L
/* cmocka needs these three first; keep the order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "accelrt/spec.h"
#include "configs.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers --------------------------------------------------------------- */

static ar_spec *parse_ok(const char *text, const char *file, const char *base,
                         const char *const *sets, int n) {
  ar_spec *s = NULL;
  ar_diags d;
  ar_status st = ar_spec_parse(text, strlen(text), file, base, sets, n, false, &s, &d);
  if (st != AR_OK)
    ar_diags_print(&d, file, stderr);
  ar_diags_fini(&d);
  assert_int_equal(st, AR_OK);
  assert_non_null(s->resolved);
  return s;
}

/* The text without its comment lines (they name the source file). */
static char *body(const char *text) {
  char *out = malloc(strlen(text) + 1);
  assert_non_null(out);
  size_t o = 0;
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
    if (p[0] != '#') {
      memcpy(out + o, p, n);
      o += n;
    }
    p += n;
  }
  out[o] = '\0';
  return out;
}

static void same_str(const char *a, const char *b, const char *what) {
  if ((a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0))
    fail_msg("%s: '%s' vs '%s'", what, a ? a : "(null)", b ? b : "(null)");
}

/* A path as the file system sees it: the original spec's data paths are
 * relative to the working directory and keep every "..", the resolved
 * text's are absolute. */
static void canon(const char *p, char *out, size_t cap) {
  char abs[4096];
  if (p[0] == '/') {
    snprintf(abs, sizeof abs, "%s", p);
  } else {
    char *cwd = getcwd(NULL, 0);
    assert_non_null(cwd);
    snprintf(abs, sizeof abs, "%s/%s", cwd, p);
    free(cwd);
  }
  char *r = realpath(abs, NULL);
  if (!r) { /* a file not there: its folder's real path */
    char *slash = strrchr(abs, '/');
    *slash = '\0';
    r = abs[0] ? realpath(abs, NULL) : NULL;
    if (r) {
      snprintf(out, cap, "%s/%s", r, slash + 1);
      free(r);
      return;
    }
    *slash = '/';
    /* Not even its folder is there (data that is absent on this machine):
     * "." and "PART/.." removed by the text alone. */
    char norm[4096] = "";
    size_t n = 0;
    for (char *save = NULL, *part = strtok_r(abs, "/", &save); part;
         part = strtok_r(NULL, "/", &save)) {
      if (!strcmp(part, "."))
        continue;
      if (!strcmp(part, "..")) {
        char *up = strrchr(norm, '/');
        n = up ? (size_t)(up - norm) : 0;
        norm[n] = '\0';
        continue;
      }
      n += (size_t)snprintf(norm + n, sizeof norm - n, "/%s", part);
      if (n >= sizeof norm)
        fail_msg("path too long: %s", p);
    }
    snprintf(out, cap, "%s", norm[0] ? norm : "/");
    return;
  }
  snprintf(out, cap, "%s", r);
  free(r);
}

static void same_path(const char *a, const char *b, const char *what) {
  if (!a || !b) {
    same_str(a, b, what);
    return;
  }
  char ca[4096], cb[4096];
  canon(a, ca, sizeof ca);
  canon(b, cb, sizeof cb);
  same_str(ca, cb, what);
}

#define SAME(field) assert_memory_equal(&a->field, &b->field, sizeof a->field)

static void same_layers(const ar_layer_spec *la, const ar_layer_spec *lb, int n) {
  for (int i = 0; i < n; i++) {
    const ar_layer_spec *a = &la[i], *b = &lb[i];
    same_str(a->name, b->name, "layer name");
    SAME(width);
    SAME(act);
    SAME(sparse);
    SAME(op);
    SAME(attr);
    SAME(repeat);
    SAME(graph_only);
    assert_int_equal(a->n_inputs, b->n_inputs);
    for (int k = 0; k < a->n_inputs; k++)
      same_str(a->inputs[k], b->inputs[k], "layer input");
    assert_int_equal(a->n_block, b->n_block);
    same_layers(a->block, b->block, a->n_block);
  }
}

/* Everything a run reads from a spec, but where it came from (file, line
 * numbers) and, for a job of a jobs: file, what the file shares. */
static void same_job(const ar_spec *a, const ar_spec *b) {
  same_str(a->name, b->name, "name");
  same_str(a->device, b->device, "device");
  SAME(seed);
  SAME(input);
  SAME(graph);
  assert_int_equal(a->n_layers, b->n_layers);
  same_layers(a->layers, b->layers, a->n_layers);
  same_path(a->data.train, b->data.train, "data.train");
  same_path(a->data.test, b->data.test, "data.test");
  same_path(a->data.train_labels, b->data.train_labels, "data.train_labels");
  same_path(a->data.test_labels, b->data.test_labels, "data.test_labels");
  SAME(data.format);
  SAME(data.generate);
  SAME(data.gen);
  SAME(data.shuffle_window);
  SAME(data.normalize);
  SAME(data.crop_pad);
  SAME(data.flip);
  SAME(train);
  same_str(a->output.dir, b->output.dir, "output.dir");
}

static void same_spec(const ar_spec *a, const ar_spec *b) {
  same_job(a, b);
  SAME(runtime);
  SAME(distributed.enabled);
  SAME(distributed.servers);
  SAME(distributed.order);
  SAME(distributed.trace_iterations);
  SAME(distributed.link_gbps);
  SAME(distributed.link_latency_us);
  SAME(distributed.max_bytes_in_flight);
  same_path(a->distributed.schedule_file, b->distributed.schedule_file, "schedule");
  same_path(a->distributed.share_file, b->distributed.share_file, "share");
  SAME(distributed.share_tenants);
  assert_int_equal(a->distributed.n_workers, b->distributed.n_workers);
  for (int i = 0; i < a->distributed.n_workers; i++) {
    same_str(a->distributed.workers[i].device, b->distributed.workers[i].device, "worker");
    SAME(distributed.workers[i].dense);
  }
  SAME(arrival_s);
  SAME(priority);
  assert_int_equal(a->n_jobs, b->n_jobs);
  for (int i = 0; i < a->n_jobs; i++)
    same_spec(a->jobs[i], b->jobs[i]);
}

/* Parses s's resolved text (from another folder: it must not matter) and
 * checks that it gives s again and writes itself unchanged. */
static void round_trip(const ar_spec *s) {
  char *cwd = getcwd(NULL, 0);
  assert_non_null(cwd);
  assert_int_equal(chdir("/"), 0);
  ar_spec *r = parse_ok(s->resolved, "job.resolved.yaml", NULL, NULL, 0);
  assert_int_equal(chdir(cwd), 0);
  free(cwd);
  same_spec(s, r);
  char *b1 = body(s->resolved), *b2 = body(r->resolved);
  assert_string_equal(b1, b2);
  for (int i = 0; i < s->n_jobs; i++) {
    char *j1 = body(s->jobs[i]->resolved), *j2 = body(r->jobs[i]->resolved);
    assert_string_equal(j1, j2);
    free(j1);
    free(j2);
  }
  free(b1);
  free(b2);
  ar_spec_destroy(r);
}

/* ---- tests ------------------------------------------------------------------ */

static const char JOB[] = "name: r\n"
                          "model:\n"
                          "  input: {sparse: 100}\n"
                          "  layers:\n"
                          "    - {name: hidden, dense: 32, activation: relu}\n"
                          "    - name: out\n"
                          "      dense: 10\n"
                          "      sparse: {mode: lsh, hash: dwta, K: 3}\n"
                          "data: {train: data/train.txt, test: \"../t e#st: x.txt\"}\n"
                          "train: {epochs: 2, optimizer: sgd, eval_every: 7}\n";

/* Overrides and defaults land in the text; parsed back it is the same job,
 * with data paths absolute (the file's relative to its folder, an
 * override's to the working directory). */
static void test_round_trip(void **state) {
  (void)state;
  const char *sets[] = {"train.batch=64", "model.layers.out.dense=12",
                        "data.train=here/train.txt", "output.dir=runs/x"};
  ar_spec *s = parse_ok(JOB, "dir/job.yaml", "/base/dir", sets, 4);
  const char *t = s->resolved;
  char *cwd = getcwd(NULL, 0), want[4096];
  assert_non_null(strstr(t, "  batch: 64\n"));
  assert_non_null(strstr(t, "    dense: 12\n"));
  snprintf(want, sizeof want, "  train: %s/here/train.txt\n", cwd);
  assert_non_null(strstr(t, want));
  assert_non_null(strstr(t, "  test: \"/base/dir/../t e#st: x.txt\"\n")); /* no such folder */
  free(cwd);
  /* Defaults the table gives, filled in; the optimizer as its mapping. */
  assert_non_null(strstr(t, "  shuffle_window: 65536\n"));
  assert_non_null(strstr(t, "      bucket: 128\n"));
  assert_non_null(strstr(t, "  optimizer:\n    sgd:\n      lr: 0.1\n      momentum: 0.9\n"));
  assert_non_null(strstr(t, "name: r\ndevice: auto\nseed: 1\nmodel:\n"));
  assert_non_null(strstr(t, "output:\n  dir: runs/x\n"));
  /* Computed defaults are left to be computed again (K was given). */
  assert_non_null(strstr(t, "      K: 3\n"));
  assert_null(strstr(t, "min_active"));
  /* Keys that apply only with others are not added. */
  assert_null(strstr(t, "log_every"));
  assert_null(strstr(t, "groups"));
  assert_null(strstr(t, "eps: 1e-5"));
  round_trip(s);
  ar_spec_destroy(s);
}

/* A job named after its file keeps that name; the text names no keys the
 * table lacks and survives odd names and values. */
static void test_name_and_quoting(void **state) {
  (void)state;
  const char *text = "model: {input: {dense: 4}, layers: [{name: \"null\", dense: 3}]}\n"
                     "data: {generate: {features: 4, labels: 3}}\n"
                     "train: {iterations: 1, optimizer: {adam: {lr: 2e-3}}}\n";
  const char *sets[] = {"output.dir=\"a dir/with: colon\""};
  ar_spec *s = parse_ok(text, "jobs/my-job.yaml", "jobs", sets, 1);
  assert_string_equal(s->name, "my-job");
  assert_non_null(strstr(s->resolved, "name: my-job\n"));
  assert_non_null(strstr(s->resolved, "name: \"null\"\n"));
  assert_non_null(strstr(s->resolved, "      lr: 2e-3\n")); /* the digits as written */
  ar_spec *r = parse_ok(s->resolved, "other.yaml", NULL, NULL, 0);
  assert_string_equal(r->name, "my-job");
  assert_string_equal(r->layers[0].name, "null");
  assert_string_equal(r->output.dir, "a dir/with: colon");
  ar_spec_destroy(r);
  round_trip(s);
  ar_spec_destroy(s);
}

/* A jobs: file: the whole file, and each job (each copy of a repeated
 * one) as a job file of its own with its name, seed and folder. */
static void test_jobs(void **state) {
  (void)state;
  const char *text = "name: many\n"
                     "seed: 7\n"
                     "device: host\n"
                     "runtime: {policy: srtf}\n"
                     "jobs:\n"
                     "  - name: a\n"
                     "    model: {input: {sparse: 50}, layers: [{dense: 5}]}\n"
                     "    data: {train: a.txt}\n"
                     "    train: {iterations: 3}\n"
                     "  - repeat: 2\n"
                     "    priority: 4\n"
                     "    model: {input: {sparse: 50}, layers: [{dense: 8}, {dense: 5}]}\n"
                     "    data: {train: b.txt}\n"
                     "    train: {iterations: 4, batch: 16}\n";
  ar_spec *s = parse_ok(text, "many.yaml", "/d", NULL, 0);
  assert_int_equal(s->n_jobs, 3);
  assert_non_null(strstr(s->resolved, "  policy: srtf\n"));
  assert_non_null(strstr(s->resolved, "  repeat: 2\n"));
  round_trip(s);
  for (int i = 0; i < s->n_jobs; i++) {
    const ar_spec *j = s->jobs[i];
    ar_spec *alone = parse_ok(j->resolved, "job.resolved.yaml", NULL, NULL, 0);
    assert_int_equal(alone->n_jobs, 0);
    same_job(j, alone);
    assert_null(strstr(j->resolved, "priority"));
    assert_null(strstr(j->resolved, "runtime"));
    ar_spec_destroy(alone);
  }
  assert_string_equal(s->jobs[2]->name, "job1-2");
  assert_string_equal(s->jobs[2]->output.dir, "runs/many/job1-2");
  ar_spec_destroy(s);
}

/* Every job file of configs/ (graph models, distributed, jobs:, shared
 * devices) survives the trip. */
static void config_round_trip(const char *path, const char *text, size_t len) {
  (void)len;
  ar_spec *s = parse_ok(text, path, ACCELRT_SOURCE_DIR "/configs", NULL, 0);
  round_trip(s);
  ar_spec_destroy(s);
}

static void test_project_configs(void **state) {
  (void)state;
  assert_true(each_config(config_round_trip) >= 5);
}

/* ".." after a real folder is removed, after a symlink it stays (the
 * link's parent is elsewhere). */
static void test_dot_dot(void **state) {
  (void)state;
  char tmp[] = "/tmp/accelrt-resolved-XXXXXX";
  assert_non_null(mkdtemp(tmp));
  char real[600], link[600], base[600];
  snprintf(real, sizeof real, "%s/real", tmp);
  snprintf(link, sizeof link, "%s/link", tmp);
  snprintf(base, sizeof base, "%s/jobs", tmp);
  assert_int_equal(mkdir(real, 0700), 0);
  assert_int_equal(mkdir(base, 0700), 0);
  assert_int_equal(symlink(real, link), 0);
  const char *text = "model: {input: {sparse: 5}, layers: [{dense: 2}]}\n"
                     "data: {train: ../real/../real/x.txt, test: ../link/../y.txt}\n"
                     "train: {iterations: 1}\n";
  ar_spec *s = parse_ok(text, "jobs/j.yaml", base, NULL, 0);
  char want[1400];
  snprintf(want, sizeof want, "  train: %s/real/x.txt\n", tmp);
  assert_non_null(strstr(s->resolved, want));
  snprintf(want, sizeof want, "  test: %s/link/../y.txt\n", tmp);
  assert_non_null(strstr(s->resolved, want));
  ar_spec_destroy(s);
  unlink(link);
  rmdir(real);
  rmdir(base);
  rmdir(tmp);
}

/* Out of memory while writing the text: a status, never a crash or a
 * half-made spec. */
static void test_out_of_memory(void **state) {
  (void)state;
  int ok = 0;
  for (long n = 0; n < 100000 && !ok; n++) {
    ar_spec *s = NULL;
    ar_alloc_fail_after(n);
    ar_status st = ar_spec_parse(JOB, strlen(JOB), "j.yaml", "/b", NULL, 0, false, &s, NULL);
    ar_alloc_fail_after(-1);
    if (st == AR_OK) {
      assert_non_null(s->resolved);
      ok = 1;
    } else {
      assert_int_equal(st, AR_NOMEM);
      assert_null(s);
    }
    ar_spec_destroy(s);
  }
  assert_true(ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_name_and_quoting),
      cmocka_unit_test(test_jobs),            cmocka_unit_test(test_project_configs),
      cmocka_unit_test(test_dot_dot),         cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
