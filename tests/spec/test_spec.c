/*
 * Job-description tests: YAML handling, validation messages, --set
 * overrides, conversion and defaults, data-file checks, the generated
 * reference, out-of-memory paths and a short random-mutation run.
 *
 * Usage: test_spec [GROUP]   runs one group (yaml, validate, set, convert,
 *                            files, docs, oom, mutate) or all of them;
 *        test_spec --print-schema   prints the job-file reference (this is
 *                            how docs/job-file.md is regenerated).
 */
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
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

/* A valid job with every default left out. */
static const char MINIMAL[] = "model:\n"
                              "  input: {sparse: 100}\n"
                              "  layers:\n"
                              "    - dense: 32\n"
                              "    - dense: 10\n"
                              "data:\n"
                              "  train: data/train.txt\n"
                              "train:\n"
                              "  epochs: 1\n";

/* Parses text as "dir/job.yaml" with base_dir "/base", files unchecked. */
static ar_status parse_sets(const char *text, const char *const *sets, int n,
                            ar_spec **out, ar_diags *d) {
  return ar_spec_parse(text, strlen(text), "dir/job.yaml", "/base", sets, n,
                       false, out, d);
}

static ar_status parse(const char *text, ar_spec **out, ar_diags *d) {
  return parse_sets(text, NULL, 0, out, d);
}

/* Prints the diagnostics into a string (caller frees). */
static char *printed(const ar_diags *d) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  ar_diags_print(d, "dir/job.yaml", f);
  fclose(f);
  return buf;
}

/* True when a diagnostic at `line` (0: any) with `path` (NULL: none) has a
 * message containing `text`. */
static bool has(const ar_diags *d, int line, const char *path,
                const char *text) {
  for (int i = 0; i < d->count; i++) {
    const ar_diag *g = &d->items[i];
    if (line && g->line != line)
      continue;
    if (path ? !g->path || strcmp(g->path, path) : g->path != NULL)
      continue;
    if (strstr(g->message, text))
      return true;
  }
  return false;
}

/* Asserts that parsing fails with exactly `count` diagnostics, one of which
 * matches (line, path, text); prints them when not. */
static void expect_error(const char *text, int count, int line,
                         const char *path, const char *msg) {
  ar_spec *s = (ar_spec *)1;
  ar_diags d;
  ar_status st = parse(text, &s, &d);
  bool ok = st == AR_SPEC && s == NULL && d.count == count &&
            has(&d, line, path, msg);
  if (!ok) {
    char *p = printed(&d);
    print_error("status %s, %d diagnostics, wanted %d with %d '%s' '%s':\n%s",
                ar_status_name(st), d.count, count, line,
                path ? path : "(none)", msg, p);
    free(p);
  }
  ar_diags_fini(&d);
  assert_true(ok);
}

/* MINIMAL with one line replaced/added: lines are joined from parts. */
static char *job(const char *model, const char *data, const char *train) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fprintf(f, "model:\n%sdata:\n%strain:\n%s", model, data, train);
  fclose(f);
  return buf;
}

static const char MODEL[] = "  input: {sparse: 100}\n"
                            "  layers:\n"
                            "    - dense: 32\n"
                            "    - dense: 10\n";
static const char DATA[] = "  train: data/train.txt\n";
static const char TRAIN[] = "  epochs: 1\n";

/* ---- yaml --------------------------------------------------------------- */

static void test_syntax_error_has_position(void **state) {
  (void)state;
  expect_error("model: [1, 2\n", 1, 2, NULL, "");
  expect_error("a: b\n c: d\n", 1, 0, NULL, "mapping values are not allowed");
}

static void test_empty_and_not_a_mapping(void **state) {
  (void)state;
  expect_error("", 1, 1, NULL, "the job file is empty");
  expect_error("# only a comment\n", 1, 1, NULL, "the job file is empty");
  expect_error("---\n", 1, 1, NULL, "the job file is empty");
  expect_error("- a\n- b\n", 1, 1, NULL, "must be a mapping of keys");
  expect_error("hello\n", 1, 1, NULL, "got 'hello'");
}

static void test_aliases_and_anchors_refused(void **state) {
  (void)state;
  /* A billion-laughs shape: refused at the first anchor, in no time. */
  const char *bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n"
                     "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                     "d: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n";
  expect_error(bomb, 1, 1, NULL, "anchors ('&a') are not allowed");
  expect_error("a: *x\n", 1, 1, NULL, "");
  expect_error("name: !!str x\n", 1, 1, NULL, "tags ('tag:yaml.org,2002:str')");
}

static void test_duplicate_keys_name_both_lines(void **state) {
  (void)state;
  char *t = job(MODEL, DATA, "  epochs: 1\n  batch: 8\n  batch: 9\n");
  /* The duplicate is reported and validation still runs (batch: 8 kept). */
  expect_error(t, 1, 11, "train.batch",
               "duplicate key 'batch' (first given "
               "at line 10)");
  free(t);
  ar_spec *s;
  ar_diags d;
  t = job(MODEL, DATA, "  epochs: 1\n  batch: 8\n  batch: 9\n  bogus: 1\n");
  assert_int_equal(parse(t, &s, &d), AR_SPEC);
  assert_int_equal(d.count, 2);
  assert_true(has(&d, 12, "train.bogus", "unknown key"));
  ar_diags_fini(&d);
  free(t);
}

static void test_several_documents_refused(void **state) {
  (void)state;
  expect_error("a: 1\n---\nb: 2\n", 1, 2, NULL, "a second YAML document");
}

static void test_depth_and_size_bounded(void **state) {
  (void)state;
  char deep[400];
  memset(deep, '[', 300);
  deep[300] = '\0';
  expect_error(deep, 1, 1, NULL, "nested more than 64 levels");

  /* Over the byte limit: refused before parsing. */
  size_t n = AR_SPEC_MAX_BYTES + 10;
  char *big = malloc(n);
  memset(big, '#', n);
  ar_spec *s;
  ar_diags d;
  assert_int_equal(
      ar_spec_parse(big, n, "big.yaml", NULL, NULL, 0, false, &s, &d), AR_SPEC);
  assert_int_equal(d.count, 1);
  assert_non_null(strstr(d.items[0].message, "the limit is"));
  ar_diags_fini(&d);

  /* Too many nodes: a flat list of 150000 items within the byte limit. */
  size_t k = 0;
  memcpy(big, "x: [", 4);
  k = 4;
  for (int i = 0; i < 150000; i++) {
    big[k++] = '1';
    big[k++] = ',';
  }
  big[k++] = ']';
  assert_int_equal(
      ar_spec_parse(big, k, "big.yaml", NULL, NULL, 0, false, &s, &d), AR_SPEC);
  assert_true(has(&d, 1, NULL, "too many values"));
  ar_diags_fini(&d);
  free(big);
}

static void test_bad_bytes(void **state) {
  (void)state;
  ar_spec *s;
  ar_diags d;
  /* A NUL byte, invalid UTF-8, a lone continuation byte, a byte-order mark
   * of UTF-16: all refused with a position, none crash. */
  const char nul[] = "model:\n  x: a\0b\n";
  assert_int_equal(
      ar_spec_parse(nul, sizeof nul - 1, "j", NULL, NULL, 0, false, &s, &d),
      AR_SPEC);
  assert_true(has(&d, 2, NULL, "UTF-8"));
  ar_diags_fini(&d);
  const char bad[] = "name: \xff\xfe\n";
  assert_int_equal(
      ar_spec_parse(bad, sizeof bad - 1, "j", NULL, NULL, 0, false, &s, &d),
      AR_SPEC);
  assert_true(has(&d, 1, NULL, "UTF-8"));
  ar_diags_fini(&d);
  const char bom16[] = "\xff\xfen\0a\0";
  assert_int_equal(
      ar_spec_parse(bom16, sizeof bom16 - 1, "j", NULL, NULL, 0, false, &s, &d),
      AR_SPEC);
  ar_diags_fini(&d);
  /* A NUL written as an escape reaches validation and is refused there. */
  char *t = job(MODEL, DATA, TRAIN);
  char *t2 = malloc(strlen(t) + 32);
  sprintf(t2, "name: \"a\\0b\"\n%s", t);
  expect_error(t2, 1, 1, "name", "contains a NUL character");
  free(t);
  free(t2);
  /* A UTF-8 byte-order mark is skipped and does not shift columns. */
  char *bom = malloc(strlen(MINIMAL) + 8);
  sprintf(bom, "\xEF\xBB\xBF%s", MINIMAL);
  assert_int_equal(
      ar_spec_parse(bom, strlen(bom), "j", NULL, NULL, 0, false, &s, &d),
      AR_OK);
  assert_int_equal(s->layers[0].pos.col, 7);
  ar_spec_destroy(s);
  free(bom);
  /* Text need not be NUL-terminated: only len bytes are read. */
  assert_int_equal(ar_spec_parse(MINIMAL, strlen(MINIMAL), "j", NULL, NULL, 0,
                                 false, &s, &d),
                   AR_OK);
  ar_spec_destroy(s);
  ar_diags_fini(&d);
  assert_int_equal(
      ar_spec_parse("model: {", 7, "j", NULL, NULL, 0, false, &s, &d), AR_SPEC);
  ar_diags_fini(&d);
  assert_int_equal(ar_spec_parse(NULL, 0, "j", NULL, NULL, 0, false, &s, &d),
                   AR_SPEC);
  ar_diags_fini(&d);
  assert_int_equal(ar_spec_parse(NULL, 3, "j", NULL, NULL, 0, false, &s, &d),
                   AR_INVALID);
}

/* ---- validate ------------------------------------------------------------ */

static void test_unknown_keys_suggest(void **state) {
  (void)state;
  char *t = job(MODEL, DATA, "  epochs: 1\n  bach: 4\n");
  expect_error(t, 1, 10, "train.bach",
               "unknown key 'bach'; did you mean "
               "'batch'?");
  free(t);
  /* A key written at the wrong level points to where it belongs. */
  t = job(MODEL, DATA, TRAIN);
  char *t2 = malloc(strlen(t) + 32);
  sprintf(t2, "%sbatch: 4\n", t);
  expect_error(t2, 1, 10, "batch", "did you mean 'train.batch'?");
  free(t2);
  t2 = malloc(strlen(t) + 32);
  sprintf(t2, "%szzz: 4\n", t);
  expect_error(t2, 1, 10, "zzz", "allowed keys: name, device, seed, model");
  free(t2);
  free(t);
}

static void test_wrong_types(void **state) {
  (void)state;
  char *t = job(MODEL, DATA, "  epochs: abc\n");
  expect_error(t, 1, 9, "train.epochs", "expected an integer, got 'abc'");
  free(t);
  t = job(MODEL, DATA, "  epochs: 1.5\n");
  expect_error(t, 1, 9, "train.epochs", "expected an integer, got '1.5'");
  free(t);
  t = job(MODEL, DATA, "  epochs: \"3\"\n");
  expect_error(t, 1, 9, "train.epochs", "quoted string '3'; remove the quotes");
  free(t);
  t = job(MODEL, DATA, "  epochs: [1]\n");
  expect_error(t, 1, 9, "train.epochs", "expected an integer, got a list");
  free(t);
  t = job(MODEL, DATA, "  epochs:\n");
  expect_error(t, 1, 9, "train.epochs", "got an empty value");
  free(t);
  t = job(MODEL, DATA, "  epochs: 1\n  optimizer: {adam: {lr: fast}}\n");
  expect_error(t, 1, 10, "train.optimizer.adam.lr",
               "expected a number, got 'fast'");
  free(t);
  t = job(MODEL, "  train: [a]\n", TRAIN);
  expect_error(t, 1, 7, "data.train", "expected a path, got a list");
  free(t);
  expect_error("model: 3\ndata: {train: x}\ntrain: {epochs: 1}\n", 1, 1,
               "model", "expected a mapping of keys, got '3'");
}

static void test_integers_are_strict(void **state) {
  (void)state;
  static const struct {
    const char *v;
    const char *msg;
  } bad[] = {
      {"0x10", "expected an integer"},
      {"1e3", "expected an integer"},
      {"1_000", "expected an integer"},
      {"+", "expected an integer"},
      {"--1", "expected an integer"},
      {"1 000", "expected an integer"},
      {"99999999999999999999", "out of range: must be >= 0"},
      {"-1", "-1 is out of range: must be >= 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char line[64];
    snprintf(line, sizeof line, "  epochs: %s\n", bad[i].v);
    char *t = job(MODEL, DATA, line);
    expect_error(t, 1, 9, "train.epochs", bad[i].msg);
    free(t);
  }
  /* A leading + and the extremes of the range are fine. */
  ar_spec *s;
  ar_diags d;
  char *t = job(MODEL, DATA,
                "  epochs: +2\n  batch: 1048576\n  iterations: "
                "9223372036854775807\n");
  assert_int_equal(parse(t, &s, &d), AR_OK);
  assert_int_equal(s->train.epochs, 2);
  assert_int_equal(s->train.batch, 1048576);
  assert_true(s->train.iterations == INT64_MAX);
  ar_spec_destroy(s);
  free(t);
  t = job(MODEL, DATA, "  epochs: 1\n  batch: 1048577\n");
  expect_error(t, 1, 10, "train.batch",
               "1048577 is out of range: must be between 1 and 1048576");
  free(t);
  t = job(MODEL, DATA, "  epochs: 1\n  batch: 0\n");
  expect_error(t, 1, 10, "train.batch", "between 1 and 1048576");
  free(t);
}

static void test_floats_are_finite(void **state) {
  (void)state;
  static const struct {
    const char *v;
    const char *msg;
  } bad[] = {
      {"nan", "expected a number"},
      {".inf", "expected a number"},
      {"0x1p3", "expected a number"},
      {"1e999", "out of range: must be > 0"},
      {"0", "0 is out of range: must be > 0"},
      {"-0.1", "must be > 0"},
      {"1e", "expected a number"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char line[96];
    snprintf(line, sizeof line, "  epochs: 1\n  optimizer: {sgd: {lr: %s}}\n",
             bad[i].v);
    char *t = job(MODEL, DATA, line);
    expect_error(t, 1, 10, "train.optimizer.sgd.lr", bad[i].msg);
    free(t);
  }
  char *t =
      job(MODEL, DATA, "  epochs: 1\n  optimizer: {sgd: {momentum: 1}}\n");
  expect_error(t, 1, 10, "train.optimizer.sgd.momentum",
               "must be >= 0 and < 1");
  free(t);
  t = job(MODEL, "  generate: {features: 100, labels: 10, noise: 1.5}\n",
          TRAIN);
  expect_error(t, 1, 7, "data.generate.noise", "must be between 0 and 1");
  free(t);
}

static void test_missing_required_at_parent(void **state) {
  (void)state;
  ar_spec *s;
  ar_diags d;
  const char *t = "name: x\n"
                  "model:\n"
                  "  input: {sparse: 10}\n"
                  "train:\n"
                  "  epochs: 1\n";
  assert_int_equal(parse(t, &s, &d), AR_SPEC);
  assert_int_equal(d.count, 2);
  /* layers is missing from model (reported at "model:"), data from the top
   * level (reported where the mapping starts). */
  assert_true(has(&d, 2, "model", "missing required key 'layers'"));
  assert_true(has(&d, 1, NULL, "missing required key 'data'"));
  ar_diags_fini(&d);
  expect_error("model:\n  input: {sparse: 1}\n  layers:\n    - {name: a}\n"
               "data: {train: x}\ntrain: {epochs: 1}\n",
               1, 4, "model.layers[0]", "give exactly one of dense, conv, op or repeat (found 0)");
}

static void test_conflicting_keys(void **state) {
  (void)state;
  char *t = job("  input: {sparse: 100, dense: 100}\n  layers: [{dense: 2}]\n",
                DATA, TRAIN);
  expect_error(t, 1, 2, "model.input",
               "give exactly one of sparse, dense, image or tokens (found 2)");
  free(t);
  t = job("  input: {}\n  layers: [{dense: 2}]\n", DATA, TRAIN);
  expect_error(t, 1, 2, "model.input",
               "give exactly one of sparse, dense, image or tokens (found 0)");
  free(t);
  t = job(MODEL, "  train: a\n  generate: {features: 100, labels: 10}\n",
          TRAIN);
  expect_error(t, 1, 8, "data.generate", "conflicting keys 'train' (line 7)");
  free(t);
  t = job(MODEL, "  test: a\n  generate: {features: 100, labels: 10}\n", TRAIN);
  expect_error(t, 1, 8, "data.generate",
               "the generator writes its own test set");
  free(t);
  t = job(MODEL, "  format: xc\n", TRAIN);
  expect_error(t, 1, 6, "data",
               "missing key: give one of 'train' or "
               "'generate'");
  free(t);
}

static void test_enums_and_device(void **state) {
  (void)state;
  char *t = job("  input: {sparse: 100}\n  layers:\n    - {dense: 3, "
                "activation: relux}\n    - {dense: 10}\n",
                DATA, TRAIN);
  expect_error(t, 1, 4, "model.layers[0].activation",
               "'relux' is not allowed: use one of relu, sigmoid, none, "
               "softmax; did you mean 'relu'?");
  free(t);
  t = job(MODEL, "  train: x\n  format: svm\n", TRAIN);
  expect_error(t, 1, 8, "data.format", "use one of xc, libsvm");
  free(t);
  const char *devs_bad[] = {"gpu",     "cuda:",   "cuda:x",
                            "cuda:-1", "cuda:1a", "cuda:99999999999"};
  for (size_t i = 0; i < sizeof devs_bad / sizeof *devs_bad; i++) {
    char *base = job(MODEL, DATA, TRAIN);
    char *t2 = malloc(strlen(base) + 64);
    sprintf(t2, "device: \"%s\"\n%s", devs_bad[i], base);
    expect_error(t2, 1, 1, "device", "expected 'auto', 'host' or 'cuda:N'");
    free(t2);
    free(base);
  }
  t = job(MODEL, DATA, TRAIN);
  char *t2 = malloc(strlen(t) + 64);
  sprintf(t2, "device: Host\n%s", t);
  expect_error(t2, 1, 1, "device", "did you mean 'host'?");
  sprintf(t2, "device: cuda:12\n%s", t);
  ar_spec *s;
  ar_diags d;
  assert_int_equal(parse(t2, &s, &d), AR_OK);
  assert_string_equal(s->device, "cuda:12");
  ar_spec_destroy(s);
  free(t2);
  free(t);
}

static void test_layer_rules(void **state) {
  (void)state;
  char *t = job("  input: {sparse: 100}\n  layers: []\n", DATA, TRAIN);
  expect_error(t, 1, 3, "model.layers", "needs at least 1 item, got 0");
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - {dense: 3, activation: "
          "softmax}\n    - {dense: 10}\n",
          DATA, TRAIN);
  expect_error(t, 1, 4, "model.layers[0].activation",
               "softmax is only allowed on the last layer");
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - {dense: 3}\n    - {dense: "
          "10, activation: relu}\n",
          DATA, TRAIN);
  expect_error(t, 1, 5, "model.layers[1].activation",
               "must be softmax or sigmoid, got 'relu'");
  free(t);
  /* Explicit and default names collide too ("layer1" is layer 1's default). */
  t = job("  input: {sparse: 100}\n  layers:\n    - {name: layer1, dense: 3}\n"
          "    - {dense: 10}\n",
          DATA, TRAIN);
  expect_error(t, 1, 5, "model.layers[1].name",
               "layer name 'layer1' is already used by model.layers[0]");
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - {name: h, dense: 3}\n"
          "    - {name: h, dense: 3}\n    - {name: h, dense: 10}\n",
          DATA, TRAIN);
  ar_spec *s;
  ar_diags d;
  assert_int_equal(parse(t, &s, &d), AR_SPEC);
  assert_int_equal(d.count, 2);
  assert_true(has(&d, 5, "model.layers[1].name", "model.layers[0]"));
  assert_true(has(&d, 6, "model.layers[2].name", "model.layers[0]"));
  ar_diags_fini(&d);
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - {name: a/b, dense: 3}\n",
          DATA, TRAIN);
  expect_error(t, 1, 4, "model.layers[0].name", "not a valid name");
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - dense: 10\n      "
          "activation: sigmoid\n      sparse: {hash: dwta}\n",
          DATA, TRAIN);
  expect_error(t, 1, 6, "model.layers[0].sparse", "cannot be LSH-sampled");
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - dense: 10\n      sparse: "
          "{min_active: 50, max_active: 20}\n",
          DATA, TRAIN);
  expect_error(t, 1, 5, "model.layers[0].sparse", "min_active 50 is above");
  free(t);
}

static ar_spec *parse_ok(const char *text) {
  ar_spec *s = NULL;
  ar_diags d;
  ar_status st = parse(text, &s, &d);
  if (st != AR_OK) {
    char *p = printed(&d);
    print_error("%s", p);
    free(p);
  }
  ar_diags_fini(&d);
  assert_int_equal(st, AR_OK);
  return s;
}

static void test_sparse_section(void **state) {
  (void)state;
  /* Without `sparse` a layer is dense; an empty mapping takes defaults. */
  char *t = job("  input: {sparse: 100}\n  layers:\n    - dense: 8\n"
                "    - dense: 10\n      sparse: {}\n",
                DATA, TRAIN);
  ar_spec *s = parse_ok(t);
  assert_int_equal(s->layers[0].sparse.mode, AR_SPARSE_NONE);
  const ar_sparse_spec *sp = &s->layers[1].sparse;
  assert_int_equal(sp->mode, AR_SPARSE_AUTO);
  assert_int_equal(sp->hash, AR_HASH_SRP);
  assert_int_equal(sp->K, 0); /* from the width */
  /* log2(width / 16) bits: 983 -> 6 (srp) or 2 (dwta, 3 bits a code). */
  assert_int_equal(ar_sparse_auto_K(AR_HASH_SRP, 983), 6);
  assert_int_equal(ar_sparse_auto_K(AR_HASH_DWTA, 983), 2);
  assert_int_equal(ar_sparse_auto_K(AR_HASH_SRP, 100000), 13);
  assert_int_equal(ar_sparse_auto_K(AR_HASH_SRP, 670091), 15);
  assert_int_equal(ar_sparse_auto_K(AR_HASH_SRP, 10), 1);
  assert_int_equal(sp->L, 50);
  assert_int_equal(sp->bucket, 128);
  assert_int_equal(sp->min_active, -1); /* fill to the budget */
  assert_int_equal(sp->catch_up, 0);     /* lazy */
  assert_int_equal(sp->sampling, AR_SAMPLE_TOPK);
  assert_false(sp->reservoir);
  assert_int_equal(sp->rehash_every, 50);
  assert_true(sp->rehash_growth == 1.1);
  ar_spec_destroy(s);
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - dense: 10\n      sparse: "
          "{mode: lsh, hash: srp, K: 4, L: 20, bucket: 64, insert: reservoir, "
          "sampling: threshold, threshold: 3, active: 0.5, min_active: 2, "
          "max_active: 7, catch_up: 2500, rehash: {every: 9, growth: 2, new_hash_every: 40}}\n",
          DATA, TRAIN);
  s = parse_ok(t);
  sp = &s->layers[0].sparse;
  assert_int_equal(sp->mode, AR_SPARSE_LSH);
  assert_int_equal(sp->hash, AR_HASH_SRP);
  assert_int_equal(sp->K, 4);
  assert_int_equal(sp->L, 20);
  assert_int_equal(sp->bucket, 64);
  assert_true(sp->reservoir);
  assert_int_equal(sp->sampling, AR_SAMPLE_THRESHOLD);
  assert_int_equal(sp->threshold, 3);
  assert_true(sp->active == 0.5);
  assert_int_equal(sp->min_active, 2);
  assert_int_equal(sp->max_active, 7);
  assert_int_equal(sp->rehash_every, 9);
  assert_true(sp->rehash_growth == 2.0);
  assert_int_equal(sp->new_hash_every, 40);
  assert_int_equal(sp->catch_up, 2500);
  ar_spec_destroy(s);
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - dense: 10\n      sparse: "
          "{catch_up: true}\n",
          DATA, TRAIN);
  expect_error(t, 1, 5, "model.layers[0].sparse.catch_up", "true");
  free(t);
  t = job("  input: {sparse: 100}\n  layers:\n    - dense: 10\n      sparse: "
          "{active: 0}\n",
          DATA, TRAIN);
  expect_error(t, 1, 5, "model.layers[0].sparse.active", "out of range");
  free(t);
}

/* A valid single job plus `extra` at the end. */
static char *job_plus(const char *extra) {
  char *base = job(MODEL, DATA, TRAIN);
  char *t = malloc(strlen(base) + strlen(extra) + 1);
  sprintf(t, "%s%s", base, extra);
  free(base);
  return t;
}

static void test_runtime_section(void **state) {
  (void)state;
  char *t = job_plus("runtime: {policy: srtf, memory: 8GiB}\n");
  ar_spec *s = parse_ok(t);
  assert_int_equal(s->runtime.policy, AR_POLICY_SRTF);
  assert_true(s->runtime.memory_bytes == 8ull << 30);
  assert_true(s->runtime.memory_fraction == 0.0);
  ar_spec_destroy(s);
  free(t);
  t = job_plus("runtime: {memory: 90%}\n");
  s = parse_ok(t);
  assert_int_equal(s->runtime.policy, AR_POLICY_FIFO);
  assert_true(s->runtime.memory_bytes == 0);
  assert_true(fabs(s->runtime.memory_fraction - 0.9) < 1e-12);
  ar_spec_destroy(s);
  free(t);
  t = job_plus("runtime: {memory: 1.5MB}\n");
  s = parse_ok(t);
  assert_true(s->runtime.memory_bytes == 1500000);
  ar_spec_destroy(s);
  free(t);
  t = job_plus("runtime: {memory: 8 GiBs}\n");
  expect_error(t, 1, 10, "runtime.memory", "unknown unit");
  free(t);
  t = job_plus("runtime: {memory: 150%}\n");
  expect_error(t, 1, 10, "runtime.memory", "at most 100");
  free(t);
  t = job_plus("runtime: {policy: lifo}\n");
  expect_error(t, 1, 10, "runtime.policy", "use one of fifo, pack");
  free(t);
}

static void test_distributed_section(void **state) {
  (void)state;
  char *t = job(MODEL, DATA, TRAIN);
  ar_spec *s = parse_ok(t);
  assert_false(s->distributed.enabled);
  ar_spec_destroy(s);
  free(t);
  t = job_plus("distributed: {servers: 2, order: random, link: {gbps: 1.5, "
               "latency_us: 50}, schedule: sched.txt}\n");
  s = parse_ok(t);
  assert_true(s->distributed.enabled);
  assert_int_equal(s->distributed.servers, 2);
  assert_int_equal(s->distributed.order, AR_ORDER_RANDOM);
  assert_int_equal(s->distributed.trace_iterations, 3);
  assert_true(s->distributed.link_gbps == 1.5);
  assert_true(s->distributed.link_latency_us == 50.0);
  assert_string_equal(s->distributed.schedule_file, "/base/sched.txt");
  ar_spec_destroy(s);
  free(t);
  t = job_plus("distributed: {}\n");
  s = parse_ok(t);
  assert_true(s->distributed.enabled);
  assert_int_equal(s->distributed.order, AR_ORDER_TAC);
  assert_true(s->distributed.link_gbps == 0.0);
  ar_spec_destroy(s);
  free(t);
  t = job_plus("distributed: {link: {latency_us: 5}}\n");
  expect_error(t, 1, 10, "distributed.link", "missing required key 'gbps'");
  free(t);
}

static const char JOBS[] =
    "name: mt\n"
    "seed: 5\n"
    "runtime: {policy: pack, poisson_mean_s: 2}\n"
    "jobs:\n"
    "  - name: small\n"                                       /* 5 */
    "    repeat: 3\n"
    "    model: {input: {sparse: 100}, layers: [{dense: 10}]}\n"
    "    data: {train: data/train.txt}\n"
    "    train: {iterations: 5}\n"
    "  - model: {input: {sparse: 100}, layers: [{dense: 10}]}\n" /* 10 */
    "    data: {train: data/train.txt}\n"
    "    train: {iterations: 7}\n"
    "    arrival: 1.5\n"
    "    priority: 3\n";

static void test_jobs_section(void **state) {
  (void)state;
  ar_spec *s = parse_ok(JOBS);
  assert_int_equal(s->n_jobs, 4);
  assert_int_equal(s->n_layers, 0);
  assert_string_equal(s->jobs[0]->name, "small-1");
  assert_string_equal(s->jobs[2]->name, "small-3");
  assert_string_equal(s->jobs[3]->name, "job1");
  assert_string_equal(s->jobs[1]->output.dir, "runs/mt/small-2");
  assert_int_equal(s->jobs[3]->train.iterations, 7);
  assert_int_equal(s->jobs[3]->priority, 3);
  assert_true(s->jobs[3]->arrival_s == 1.5);
  assert_int_equal(s->jobs[3]->runtime.policy, AR_POLICY_PACK);
  assert_string_equal(s->jobs[0]->data.train, "/base/data/train.txt");
  /* Poisson arrivals: increasing, distinct seeds per copy. */
  assert_true(s->jobs[0]->arrival_s > 0.0);
  assert_true(s->jobs[1]->arrival_s > s->jobs[0]->arrival_s);
  assert_true(s->jobs[2]->arrival_s > s->jobs[1]->arrival_s);
  assert_true(s->jobs[0]->seed != s->jobs[1]->seed);
  ar_spec_destroy(s);

  expect_error("name: x\n", 3, 1, NULL, "give one of 'model' or 'jobs'");
  char *t = malloc(sizeof JOBS + 256);
  sprintf(t, "%sdata: {train: a.txt}\n", JOBS);
  expect_error(t, 1, 15, "data", "each job of jobs has its own data");
  sprintf(t, "%s  - name: small-2\n    model: {input: {sparse: 1}, layers: "
          "[{dense: 2}]}\n    data: {train: a}\n    train: {epochs: 1}\n", JOBS);
  expect_error(t, 1, 0, "jobs", "two jobs are named 'small-2'");
  free(t);
  expect_error("model: {input: {sparse: 1}, layers: [{dense: 2}]}\n", 2, 0,
               NULL, "missing required key 'data'");
}

static void test_generate_must_match_model(void **state) {
  (void)state;
  ar_spec *s;
  ar_diags d;
  char *t = job(MODEL, "  generate: {features: 200, labels: 7}\n", TRAIN);
  assert_int_equal(parse(t, &s, &d), AR_SPEC);
  assert_int_equal(d.count, 4);
  assert_true(
      has(&d, 2, "model.input.sparse", "data.generate.features is 200"));
  assert_true(
      has(&d, 7, "data.generate.features", "model.input.sparse is 100"));
  assert_true(has(&d, 5, "model.layers[1].dense", "data.generate.labels is 7"));
  assert_true(has(&d, 7, "data.generate.labels", "has 10 outputs"));
  ar_diags_fini(&d);
  free(t);
}

static void test_nothing_to_train(void **state) {
  (void)state;
  char *t = job(MODEL, DATA, "  epochs: 0\n  iterations: 0\n");
  expect_error(t, 1, 9, "train", "nothing to train");
  free(t);
  t = job(MODEL, DATA, "  batch: 2\n");
  expect_error(t, 1, 8, "train", "nothing to train");
  free(t);
}

static void test_optimizer_forms(void **state) {
  (void)state;
  char *t = job(MODEL, DATA, "  epochs: 1\n  optimizer: adamw\n");
  expect_error(t, 1, 10, "train.optimizer", "did you mean 'adam'?");
  free(t);
  t = job(MODEL, DATA, "  epochs: 1\n  optimizer: {adam: {}, sgd: {}}\n");
  expect_error(t, 1, 10, "train.optimizer.sgd",
               "conflicting keys 'adam' and "
               "'sgd'");
  free(t);
  t = job(MODEL, DATA, "  epochs: 1\n  optimizer: {}\n");
  expect_error(t, 1, 10, "train.optimizer", "empty mapping");
  free(t);
  t = job(MODEL, DATA, "  epochs: 1\n  optimizer: {adam: {momentum: 0.5}}\n");
  expect_error(t, 1, 10, "train.optimizer.adam.momentum", "unknown key");
  free(t);
}

static void test_every_problem_reported_in_order(void **state) {
  (void)state;
  const char *t = "name: demo\n"                        /* 1 */
                  "device: gpu\n"                       /* 2 */
                  "model:\n"                            /* 3 */
                  "  input: {sparse: 0}\n"              /* 4 */
                  "  layers:\n"                         /* 5 */
                  "    - {dense: 8, activaton: relu}\n" /* 6 */
                  "data:\n"                             /* 7 */
                  "  train: x\n"                        /* 8 */
                  "  shuffle_window: -5\n"              /* 9 */
                  "train:\n"                            /* 10 */
                  "  epochs: 1\n"                       /* 11 */
                  "  batch: many\n";                    /* 12 */
  ar_spec *s;
  ar_diags d;
  assert_int_equal(parse(t, &s, &d), AR_SPEC);
  char *p = printed(&d);
  assert_string_equal(
      p,
      "dir/job.yaml:2:9: error: device: expected 'auto', 'host' or 'cuda:N' "
      "(N >= 0), got 'gpu'\n"
      "dir/job.yaml:4:19: error: model.input.sparse: 0 is out of range: must "
      "be between 1 and 2147483647\n"
      "dir/job.yaml:6:18: error: model.layers[0].activaton: unknown key "
      "'activaton'; did you mean 'activation'?\n"
      "dir/job.yaml:9:19: error: data.shuffle_window: -5 is out of range: "
      "must be >= 0\n"
      "dir/job.yaml:12:10: error: train.batch: expected an integer, got "
      "'many'\n");
  free(p);
  ar_diags_fini(&d);
}

/* ---- set ---------------------------------------------------------------- */

static void test_set_overrides(void **state) {
  (void)state;
  const char *t = "model:\n"
                  "  input: {sparse: 100}\n"
                  "  layers:\n"
                  "    - {name: hidden, dense: 32}\n"
                  "    - {name: out, dense: 10}\n"
                  "data: {train: data/train.txt}\n"
                  "train: {epochs: 1}\n";
  const char *sets[] = {"train.batch=256",
                        "model.layers[0].dense=64",
                        "model.layers.out.activation=sigmoid",
                        "model.layers.1.dense=20",
                        "model.input={dense: 50}",
                        "output.dir=elsewhere",
                        "data.test=t.txt",
                        "train.optimizer={sgd: {lr: 0.5}}"};
  ar_spec *s;
  ar_diags d;
  assert_int_equal(parse_sets(t, sets, 8, &s, &d), AR_OK);
  assert_int_equal(d.count, 0);
  assert_int_equal(s->train.batch, 256);
  assert_int_equal(s->layers[0].width, 64);
  assert_int_equal(s->layers[1].width, 20);
  assert_int_equal(s->layers[1].act, AR_ACT_SIGMOID);
  assert_false(s->input.sparse);
  assert_int_equal(s->input.features, 50);
  assert_string_equal(s->output.dir, "elsewhere");
  /* From the file: relative to the file's folder; from --set: as given. */
  assert_string_equal(s->data.train, "/base/data/train.txt");
  assert_string_equal(s->data.test, "t.txt");
  assert_int_equal(s->train.optimizer, AR_OPT_SGD);
  assert_true(s->train.lr == 0.5);
  assert_true(s->train.momentum == 0.9);
  ar_spec_destroy(s);
}

static void expect_set_error(const char *set, const char *path,
                             const char *msg) {
  const char *sets[] = {set};
  ar_spec *s;
  ar_diags d;
  char *t = job("  input: {sparse: 100}\n  layers:\n    - {name: hidden, "
                "dense: 32}\n    - {name: out, dense: 10}\n",
                DATA, "  epochs: 1\n  optimizer: adam\n");
  ar_status st = parse_sets(t, sets, 1, &s, &d);
  bool ok = st == AR_SPEC && d.count == 1 && d.items[0].set &&
            !strcmp(d.items[0].set, set) && d.items[0].line == -1 &&
            has(&d, -1, path, msg);
  if (!ok) {
    char *p = printed(&d);
    print_error("--set %s: wanted '%s' '%s', got %s:\n%s", set,
                path ? path : "(none)", msg, ar_status_name(st), p);
    free(p);
  }
  ar_diags_fini(&d);
  free(t);
  assert_true(ok);
}

static void test_set_errors(void **state) {
  (void)state;
  expect_set_error("train.batch", NULL, "expected KEY.PATH=VALUE");
  expect_set_error("train..batch=1", "train..batch", "empty part");
  expect_set_error("train.batch.=1", "train.batch.", "ends with '.'");
  expect_set_error("model.layers[x].dense=1", "model.layers[x].dense",
                   "expected [N]");
  expect_set_error("model.layers[5].dense=1", "model.layers[5].dense",
                   "index 5 is out of range: 'model.layers' has 2 items");
  expect_set_error("model.layers.nope.dense=1", "model.layers.nope.dense",
                   "no item of 'model.layers' is named 'nope'");
  expect_set_error("train.optimizer.adam.lr=1", "train.optimizer.adam.lr",
                   "'train.optimizer' holds the single value 'adam', so it "
                   "has no key 'adam'");
  expect_set_error("train[0]=1", "train[0]",
                   "'train' is a mapping, not a list");
  /* The value is YAML and is validated like the file. */
  expect_set_error("model.input={sparse: 1", "model.input", "");
  expect_set_error("train.batch=big", "train.batch",
                   "expected an integer, got 'big'");
  expect_set_error("train.batch=", "train.batch", "got an empty value");
  expect_set_error("train.bach=3", "train.bach", "did you mean 'batch'?");
  expect_set_error("data.train=&a x", "data.train", "anchors");

  /* Printed with the override in place of FILE:LINE:COL. */
  const char *sets[] = {"train.batch=0"};
  ar_spec *s;
  ar_diags d;
  assert_int_equal(parse_sets(MINIMAL, sets, 1, &s, &d), AR_SPEC);
  char *p = printed(&d);
  assert_string_equal(p, "--set train.batch=0: error: train.batch: 0 is out "
                         "of range: must be between 1 and 1048576\n");
  free(p);
  ar_diags_fini(&d);
}

static void test_set_default_layer_names(void **state) {
  (void)state;
  /* An unnamed layer answers to "layer<i>"; a named one only to its name. */
  const char *t = "model:\n"
                  "  input: {sparse: 100}\n"
                  "  layers:\n"
                  "    - dense: 32\n"
                  "    - {name: out, dense: 10}\n"
                  "data: {train: x}\n"
                  "train: {epochs: 1}\n";
  const char *ok[] = {"model.layers.layer0.dense=64"};
  ar_spec *s;
  ar_diags d;
  assert_int_equal(parse_sets(t, ok, 1, &s, &d), AR_OK);
  assert_int_equal(s->layers[0].width, 64);
  ar_spec_destroy(s);
  const char *bad[] = {"model.layers.layer1.dense=5"};
  assert_int_equal(parse_sets(t, bad, 1, &s, &d), AR_SPEC);
  assert_true(has(&d, -1, "model.layers.layer1.dense",
                  "no item of 'model.layers' is named 'layer1'"));
  ar_diags_fini(&d);
}

static void test_set_creates_and_fills(void **state) {
  (void)state;
  /* "output:" left empty in the file is filled like a missing key, and a
   * missing chain of mappings is created. */
  const char *sets[] = {"output.dir=x", "data.generate.features=100",
                        "data.generate.labels=10", "data.train=~"};
  char *t = job(MODEL, DATA, TRAIN);
  char *t2 = malloc(strlen(t) + 16);
  sprintf(t2, "%soutput:\n", t);
  ar_spec *s;
  ar_diags d;
  /* data.train=~ leaves a null: reported as an empty value, and both
   * train and generate are present. */
  assert_int_equal(parse_sets(t2, sets, 4, &s, &d), AR_SPEC);
  assert_true(has(&d, -1, "data.train", "got an empty value"));
  ar_diags_fini(&d);
  assert_int_equal(parse_sets(t2, sets, 3, &s, &d), AR_SPEC);
  assert_true(
      has(&d, -1, "data.generate", "conflicting keys 'train' (line 7)"));
  ar_diags_fini(&d);
  free(t2);
  free(t);
}

/* ---- convert ------------------------------------------------------------ */

static void test_defaults(void **state) {
  (void)state;
  ar_spec *s;
  ar_diags d;
  assert_int_equal(parse(MINIMAL, &s, &d), AR_OK);
  assert_int_equal(d.count, 0);
  assert_string_equal(s->file, "dir/job.yaml");
  assert_string_equal(s->name, "job");
  assert_string_equal(s->device, "auto");
  assert_int_equal(s->seed, 1);
  assert_true(s->input.sparse);
  assert_int_equal(s->input.features, 100);
  assert_int_equal(s->n_layers, 2);
  assert_string_equal(s->layers[0].name, "layer0");
  assert_string_equal(s->layers[1].name, "layer1");
  assert_int_equal(s->layers[0].act, AR_ACT_RELU);
  assert_int_equal(s->layers[1].act, AR_ACT_SOFTMAX);
  assert_int_equal(s->layers[0].pos.line, 4);
  assert_int_equal(s->layers[0].pos.col, 7);
  assert_string_equal(s->data.train, "/base/data/train.txt");
  assert_null(s->data.test);
  assert_false(s->data.generate);
  assert_int_equal(s->data.format, AR_FMT_XC);
  assert_int_equal(s->data.shuffle_window, 65536);
  assert_int_equal(s->train.batch, 128);
  assert_int_equal(s->train.epochs, 1);
  assert_int_equal(s->train.iterations, 0);
  assert_int_equal(s->train.threads, 0);
  assert_int_equal(s->train.optimizer, AR_OPT_ADAM);
  assert_true(s->train.lr == 1e-3);
  assert_true(s->train.beta1 == 0.9);
  assert_true(s->train.beta2 == 0.999);
  assert_true(s->train.eps == 1e-8);
  assert_true(s->train.weight_decay == 0.0);
  assert_int_equal(s->train.init, AR_INIT_AUTO);
  assert_int_equal(s->train.eval_every, 0);
  assert_int_equal(s->train.eval_points, 0);
  assert_int_equal(s->train.checkpoint_every, 0);
  assert_string_equal(s->output.dir, "runs/job");
  ar_spec_destroy(s);

  /* sgd as a plain string takes every sgd default; generate's defaults. */
  char *t = job(MODEL, "  generate: {features: 100, labels: 10}\n",
                "  iterations: 5\n  optimizer: sgd\n  init: xavier\n");
  assert_int_equal(parse(t, &s, &d), AR_OK);
  assert_int_equal(s->train.optimizer, AR_OPT_SGD);
  assert_true(s->train.lr == 0.1);
  assert_true(s->train.momentum == 0.9);
  assert_int_equal(s->train.init, AR_INIT_XAVIER);
  assert_true(s->data.generate);
  assert_null(s->data.train);
  assert_int_equal(s->data.gen.train_points, 20000);
  assert_int_equal(s->data.gen.test_points, 2000);
  assert_int_equal(s->data.gen.features, 100);
  assert_int_equal(s->data.gen.labels, 10);
  assert_int_equal(s->data.gen.nnz, 20);
  assert_int_equal(s->data.gen.labels_per_point, 2);
  assert_true(s->data.gen.noise == 0.1);
  ar_spec_destroy(s);
  free(t);

  /* Without a file name the job is called "job"; odd file names too. */
  assert_int_equal(ar_spec_parse(MINIMAL, strlen(MINIMAL), NULL, NULL, NULL, 0,
                                 false, &s, &d),
                   AR_OK);
  assert_string_equal(s->file, "<string>");
  assert_string_equal(s->name, "job");
  assert_string_equal(s->data.train, "data/train.txt");
  ar_spec_destroy(s);
  assert_int_equal(ar_spec_parse(MINIMAL, strlen(MINIMAL),
                                 "a/b.c/xc-small.yaml", NULL, NULL, 0, false,
                                 &s, &d),
                   AR_OK);
  assert_string_equal(s->name, "xc-small");
  assert_string_equal(s->output.dir, "runs/xc-small");
  ar_spec_destroy(s);
}

static void test_full_conversion(void **state) {
  (void)state;
  const char *t = "name: full\n"
                  "device: host\n"
                  "seed: 42\n"
                  "model:\n"
                  "  input: {dense: 64}\n"
                  "  layers:\n"
                  "    - {name: a, dense: 16, activation: sigmoid}\n"
                  "    - {name: b, dense: 8, activation: none}\n"
                  "    - {name: c, dense: 4, activation: sigmoid}\n"
                  "data:\n"
                  "  train: /abs/train.svm\n"
                  "  test: rel/test.svm\n"
                  "  format: libsvm\n"
                  "  shuffle_window: 0\n"
                  "train:\n"
                  "  batch: 32\n"
                  "  epochs: 3\n"
                  "  iterations: 100\n"
                  "  threads: 4\n"
                  "  optimizer:\n"
                  "    adam: {lr: 2e-4, beta1: 0.8, beta2: 0.99, eps: 1e-6, "
                  "weight_decay: 0.01}\n"
                  "  init: he\n"
                  "  eval_every: 10\n"
                  "  eval_points: 500\n"
                  "  checkpoint_every: 50\n"
                  "output: {dir: out/full}\n";
  ar_spec *s;
  ar_diags d;
  assert_int_equal(
      ar_spec_parse(t, strlen(t), "j.yaml", "cfg/", NULL, 0, false, &s, &d),
      AR_OK);
  assert_string_equal(s->name, "full");
  assert_string_equal(s->device, "host");
  assert_int_equal(s->seed, 42);
  assert_false(s->input.sparse);
  assert_int_equal(s->input.features, 64);
  assert_int_equal(s->n_layers, 3);
  assert_int_equal(s->layers[0].act, AR_ACT_SIGMOID);
  assert_int_equal(s->layers[1].act, AR_ACT_NONE);
  assert_string_equal(s->layers[2].name, "c");
  assert_int_equal(s->layers[2].width, 4);
  assert_string_equal(s->data.train, "/abs/train.svm");
  assert_string_equal(s->data.test, "cfg/rel/test.svm");
  assert_int_equal(s->data.format, AR_FMT_LIBSVM);
  assert_int_equal(s->data.shuffle_window, 0);
  assert_int_equal(s->train.batch, 32);
  assert_int_equal(s->train.epochs, 3);
  assert_int_equal(s->train.iterations, 100);
  assert_int_equal(s->train.threads, 4);
  assert_int_equal(s->train.optimizer, AR_OPT_ADAM);
  assert_true(s->train.lr == 2e-4);
  assert_true(s->train.beta1 == 0.8);
  assert_true(s->train.beta2 == 0.99);
  assert_true(s->train.eps == 1e-6);
  assert_true(s->train.weight_decay == 0.01);
  assert_int_equal(s->train.init, AR_INIT_HE);
  assert_int_equal(s->train.eval_every, 10);
  assert_int_equal(s->train.eval_points, 500);
  assert_int_equal(s->train.checkpoint_every, 50);
  assert_string_equal(s->output.dir, "out/full");
  ar_spec_destroy(s);
  assert_string_equal(ar_act_name(AR_ACT_RELU), "relu");
  assert_string_equal(ar_act_name(AR_ACT_NONE), "none");
  assert_string_equal(ar_act_name(AR_ACT_SOFTMAX), "softmax");
  assert_string_equal(ar_act_name(AR_ACT_SIGMOID), "sigmoid");
  ar_spec_destroy(NULL);
  ar_diags_fini(NULL);
}

static void config_parses(const char *path, const char *text, size_t len) {
  ar_spec *s;
  ar_diags d;
  ar_status st = ar_spec_parse(text, len, path, NULL, NULL, 0, false, &s, &d);
  if (st != AR_OK)
    ar_diags_print(&d, path, stderr);
  assert_int_equal(st, AR_OK);
  ar_spec_destroy(s);
}

static void test_project_configs_parse(void **state) {
  (void)state;
  assert_true(each_config(config_parses) > 0);
}

/* ---- files -------------------------------------------------------------- */

static char tmpdir[256];

static void write_file(const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int files_setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/accelrt-spec-XXXXXX");
  if (!mkdtemp(tmpdir))
    return -1;
  char sub[512];
  snprintf(sub, sizeof sub, "%s/data", tmpdir);
  mkdir(sub, 0700);
  write_file("data/train.txt", "1 2 3\n0:1 1:1\n");
  return 0;
}

static int files_teardown(void **state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_load_resolves_against_file_folder(void **state) {
  (void)state;
  write_file("ok.yaml", MINIMAL);
  char path[512], want[512];
  snprintf(path, sizeof path, "%s/ok.yaml", tmpdir);
  snprintf(want, sizeof want, "%s/data/train.txt", tmpdir);
  ar_spec *s;
  ar_diags d;
  assert_int_equal(ar_spec_load(path, NULL, 0, &s, &d), AR_OK);
  assert_string_equal(s->data.train, want);
  assert_string_equal(s->name, "ok");
  assert_string_equal(s->file, path);
  ar_spec_destroy(s);
}

static void test_missing_data_file(void **state) {
  (void)state;
  char *t =
      job(MODEL, "  train: data/train.txt\n  test: data/nope.txt\n", TRAIN);
  write_file("missing.yaml", t);
  free(t);
  char path[512], want[1024];
  snprintf(path, sizeof path, "%s/missing.yaml", tmpdir);
  ar_spec *s;
  ar_diags d;
  assert_int_equal(ar_spec_load(path, NULL, 0, &s, &d), AR_SPEC);
  assert_null(s);
  assert_int_equal(d.count, 1);
  assert_int_equal(d.items[0].line, 8);
  assert_int_equal(d.items[0].col, 3);
  assert_string_equal(d.items[0].path, "data.test");
  snprintf(want, sizeof want,
           "file '%s/data/nope.txt' does not exist; fix "
           "the path or use --set data.test=PATH",
           tmpdir);
  assert_string_equal(d.items[0].message, want);
  ar_diags_fini(&d);

  /* --set replaces it, relative to the working directory. */
  char set[600];
  snprintf(set, sizeof set, "data.test=%s/data/train.txt", tmpdir);
  const char *sets[] = {set, "data.train=/nonexistent/x"};
  assert_int_equal(ar_spec_load(path, sets, 2, &s, &d), AR_SPEC);
  assert_int_equal(d.count, 1);
  assert_true(has(&d, -1, "data.train",
                  "file '/nonexistent/x' does not "
                  "exist"));
  ar_diags_fini(&d);

  /* A folder is not a data file. */
  const char *sets2[] = {"data.test=/tmp"};
  assert_int_equal(ar_spec_load(path, sets2, 1, &s, &d), AR_SPEC);
  assert_true(has(&d, -1, "data.test", "'/tmp' is a folder, not a file"));
  ar_diags_fini(&d);
}

static void test_load_io_errors(void **state) {
  (void)state;
  ar_spec *s;
  ar_diags d;
  assert_int_equal(ar_spec_load("/nonexistent/job.yaml", NULL, 0, &s, &d),
                   AR_IO);
  assert_null(s);
  assert_int_equal(d.count, 1);
  char *p = printed(&d);
  assert_string_equal(p, "dir/job.yaml: error: cannot read the job file: No "
                         "such file or directory\n");
  free(p);
  ar_diags_fini(&d);
  assert_int_equal(ar_spec_load(tmpdir, NULL, 0, &s, &d), AR_IO);
  ar_diags_fini(&d);
  assert_int_equal(ar_spec_load(NULL, NULL, 0, &s, &d), AR_INVALID);
}

/* ---- docs --------------------------------------------------------------- */

/* ---- another module's file checked with its own table ------------------- */

static const char *const demo_flag_values[] = {"true", "false", NULL};

static const ar_schema demo_sub_keys[] = {
    {.key = "points", .type = AR_SCHEMA_INT, .imin = 0, .imax = 100, .def = "0"},
    {0}};

static const ar_schema demo_keys[] = {
    {.key = "name", .type = AR_SCHEMA_STRING},
    {.key = "base", .type = AR_SCHEMA_PATH, .required = true, .expect = "the base file"},
    {.key = "count",
     .type = AR_SCHEMA_INT,
     .imin = 1,
     .imax = 10,
     .def = "3",
     .expect = "a whole number from 1 to 10"},
    {.key = "flag", .type = AR_SCHEMA_ENUM, .values = demo_flag_values, .expect = "true or false"},
    {.key = "ratio", .type = AR_SCHEMA_FLOAT, .fmin = 0, .fmin_open = true, .fmax = INFINITY},
    {.key = "free", .type = AR_SCHEMA_ANY},
    {.key = "sub", .type = AR_SCHEMA_MAP, .kids = demo_sub_keys},
    {0}};

static const ar_schema demo_file = {.key = "", .type = AR_SCHEMA_MAP, .kids = demo_keys};

/* A file of another module: read with ar_yaml_load, checked against its
 * own table with the job files' checks and FILE:LINE:COL messages (the
 * table's own words where it gives them), values and defaults read back
 * through the same parser. */
static void test_other_module_file(void **state) {
  (void)state;
  write_file("demo.yaml", "count: 0\n"
                          "flag: yes\n"
                          "ratio: 0\n"
                          "free: {anything: [1, 2]}\n"
                          "sub: {points: 5, bogus: 1}\n"
                          "cuont: 2\n"
                          "name: [x]\n");
  char path[512];
  snprintf(path, sizeof path, "%s/demo.yaml", tmpdir);
  ar_diags d = {0, NULL};
  ar_ynode *root = NULL;
  assert_int_equal(ar_yaml_load(path, "demo file", &root, &d), AR_OK);
  assert_non_null(root);
  assert_int_equal(d.count, 0);
  assert_int_equal(ar_schema_check(&demo_file, root, NULL, &d), AR_OK);
  assert_true(has(&d, 1, "count", "expected a whole number from 1 to 10, got '0'"));
  assert_true(has(&d, 2, "flag", "expected true or false, got 'yes'"));
  assert_true(has(&d, 3, "ratio", "0 is out of range: must be > 0"));
  /* Unknown keys: reported against the mapping that holds them. */
  assert_true(has(&d, 5, "sub", "unknown key 'bogus'; allowed keys: points"));
  assert_true(has(&d, 6, NULL, "unknown key 'cuont'; did you mean 'count'?"));
  assert_true(has(&d, 7, "name", "expected a single value, got a list"));
  assert_true(has(&d, 1, NULL, "missing required key 'base'; expected the base file"));
  assert_int_equal(d.count, 7); /* nothing about free: its reader checks it */
  /* The module adds its own problems; the order is by place. */
  assert_int_equal(ar_diags_add(&d, 4, 7, "free", "no %s here", "anything"), AR_OK);
  assert_int_equal(ar_diags_add(&d, 0, 0, NULL, "as a whole"), AR_OK);
  ar_diags_sort(&d);
  int last = 0;
  for (int i = 0; i < d.count - 1; i++) {
    assert_true(d.items[i].line >= last);
    last = d.items[i].line;
  }
  assert_int_equal(d.items[d.count - 1].line, 0);
  char *text = printed(&d);
  assert_non_null(strstr(text, "dir/job.yaml:4:7: error: free: no anything here\n"));
  free(text);
  ar_diags_fini(&d);

  /* Values: checked ones through the parser, absent ones as the default. */
  ar_schema_value v;
  assert_false(ar_schema_get(&demo_file, root, "count", &v)); /* 0: invalid */
  assert_true(ar_schema_get(&demo_file, NULL, "count", &v));
  assert_int_equal(v.i, 3);
  const ar_ynode *sub = ar_ynode_get(root, "sub");
  assert_non_null(sub);
  const ar_schema *sub_entry = &demo_keys[6];
  assert_string_equal(sub_entry->key, "sub");
  assert_true(ar_schema_get(sub_entry, sub, "points", &v));
  assert_int_equal(v.i, 5);
  assert_true(ar_ynode_is(ar_ynode_get(root, "flag"), "yes"));
  assert_false(ar_ynode_is(ar_ynode_get(root, "flag"), "ye"));
  assert_null(ar_ynode_get(root, "absent"));
  char q[64];
  assert_string_equal(ar_ynode_quote(ar_ynode_get(root, "ratio"), q, sizeof q), "0");
  ar_ynode_destroy(root);
}

/* ar_yaml_load's own problems: a file it cannot read, one too large, and
 * YAML it refuses; an empty file is no tree and no problem. */
static void test_other_module_file_errors(void **state) {
  (void)state;
  char path[512];
  ar_diags d = {0, NULL};
  ar_ynode *root = NULL;
  snprintf(path, sizeof path, "%s/absent.yaml", tmpdir);
  assert_int_equal(ar_yaml_load(path, "demo file", &root, &d), AR_IO);
  assert_true(has(&d, 0, NULL, "cannot read the demo file: No such file"));
  ar_diags_fini(&d);
  write_file("alias.yaml", "a: &x 1\nb: *x\n");
  snprintf(path, sizeof path, "%s/alias.yaml", tmpdir);
  assert_int_equal(ar_yaml_load(path, "demo file", &root, &d), AR_SPEC);
  assert_null(root);
  assert_int_equal(d.count, 1);
  assert_int_equal(d.items[0].line, 1);
  ar_diags_fini(&d);
  write_file("empty.yaml", "");
  snprintf(path, sizeof path, "%s/empty.yaml", tmpdir);
  assert_int_equal(ar_yaml_load(path, "demo file", &root, &d), AR_OK);
  assert_null(root);
  assert_int_equal(d.count, 0);
  char *big = malloc(AR_SPEC_MAX_BYTES + 16);
  assert_non_null(big);
  memset(big, '#', AR_SPEC_MAX_BYTES + 15);
  big[AR_SPEC_MAX_BYTES + 15] = '\0';
  write_file("big.yaml", big);
  free(big);
  snprintf(path, sizeof path, "%s/big.yaml", tmpdir);
  assert_int_equal(ar_yaml_load(path, "demo file", &root, &d), AR_SPEC);
  assert_true(has(&d, 0, NULL, "the demo file is larger than"));
  ar_diags_fini(&d);
}

static void test_docs_match_schema(void **state) {
  (void)state;
  char *gen = NULL;
  size_t glen = 0;
  FILE *f = open_memstream(&gen, &glen);
  ar_spec_schema_markdown(f);
  fclose(f);
  FILE *doc = fopen(ACCELRT_DOCS_JOB_FILE, "rb");
  if (!doc)
    fail_msg("cannot open %s; regenerate it with: accelrt schema > "
             "docs/job-file.md (or test_spec --print-schema)",
             ACCELRT_DOCS_JOB_FILE);
  char *text = malloc(glen + 2);
  size_t dlen = fread(text, 1, glen + 1, doc);
  fclose(doc);
  bool same = dlen == glen && memcmp(text, gen, glen) == 0;
  free(text);
  free(gen);
  if (!same)
    fail_msg("%s differs from ar_spec_schema_markdown(); regenerate it with: "
             "accelrt schema > docs/job-file.md (or test_spec --print-schema)",
             ACCELRT_DOCS_JOB_FILE);
}

static void test_docs_example_is_valid(void **state) {
  (void)state;
  char *gen = NULL;
  size_t glen = 0;
  FILE *f = open_memstream(&gen, &glen);
  ar_spec_schema_markdown(f);
  fclose(f);
  char *start = strstr(gen, "```yaml\n");
  assert_non_null(start);
  start += 8;
  char *end = strstr(start, "```");
  assert_non_null(end);
  ar_spec *s;
  ar_diags d;
  ar_status st = ar_spec_parse(start, (size_t)(end - start), "example.yaml",
                               NULL, NULL, 0, false, &s, &d);
  if (st != AR_OK)
    ar_diags_print(&d, "example.yaml", stderr);
  assert_int_equal(st, AR_OK);
  assert_string_equal(s->name, "quickstart");
  ar_spec_destroy(s);
  free(gen);
}

/* ---- oom ---------------------------------------------------------------- */

/* Fails the n-th allocation for n = 0, 1, ... until a parse succeeds: each
 * must return AR_NOMEM (or the normal result) and leak nothing (the
 * sanitizer build checks leaks). */
static void run_oom(const char *text, const char *const *sets, int n_sets,
                    ar_status want) {
  for (long n = 0;; n++) {
    ar_spec *s = NULL;
    ar_diags d;
    ar_alloc_fail_after(n);
    ar_status st = parse_sets(text, sets, n_sets, &s, &d);
    ar_alloc_fail_after(-1);
    ar_spec_destroy(s);
    ar_diags_fini(&d);
    if (st == want)
      break;
    assert_int_equal(st, AR_NOMEM);
    assert_true(n < 100000);
  }
}

static void test_out_of_memory(void **state) {
  (void)state;
  const char *sets[] = {"model.layers.layer1.dense=10", "output.dir=o",
                        "train.optimizer={sgd: {lr: 0.2}}"};
  run_oom(MINIMAL, sets, 3, AR_OK);
  const char *bad = "name: demo\ndevice: gpu\nmodel:\n  input: {sparse: 0}\n"
                    "  layers:\n    - {dense: 8, activaton: relu}\n"
                    "    - {dense: 8, activaton: relu}\n"
                    "train: {epochs: 0, batch: 1, batch: 2}\n";
  const char *bad_sets[] = {"x.y=1", "model.layers[7].dense=1"};
  run_oom(bad, bad_sets, 2, AR_SPEC);
}

/* ---- mutate ------------------------------------------------------------- */

/* A few thousand random byte edits of a valid job: whatever comes out, the
 * parser returns a status, and on success the spec is consistent. */
static void test_random_mutations(void **state) {
  (void)state;
  const char *base = "name: m\nmodel:\n  input: {sparse: 100}\n  layers:\n"
                     "    - {name: h, dense: 32, activation: relu}\n"
                     "    - {name: o, dense: 10}\n"
                     "data: {generate: {features: 100, labels: 10}}\n"
                     "train: {epochs: 1, optimizer: {sgd: {lr: 0.1}}}\n";
  const char alphabet[] = " \n:-{}[],&*!#'\"\\0123456789abcdz.\t\x80\xff";
  size_t blen = strlen(base);
  char buf[1024];
  uint64_t rng = 12345;
  int ok = 0;
  for (int it = 0; it < 5000; it++) {
    memcpy(buf, base, blen);
    size_t len = blen;
    int edits = 1 + (int)(rng % 4);
    for (int e = 0; e < edits; e++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      size_t at = (size_t)(rng >> 33) % len;
      char ch = alphabet[(rng >> 13) % (sizeof alphabet - 1)];
      switch ((rng >> 7) % 3) {
      case 0:
        buf[at] = ch;
        break;
      case 1:
        if (len + 1 < sizeof buf) {
          memmove(buf + at + 1, buf + at, len - at);
          buf[at] = ch;
          len++;
        }
        break;
      default:
        if (len > 1) {
          memmove(buf + at, buf + at + 1, len - at - 1);
          len--;
        }
      }
    }
    ar_spec *s;
    ar_diags d;
    ar_status st =
        ar_spec_parse(buf, len, "m.yaml", NULL, NULL, 0, false, &s, &d);
    assert_true(st == AR_OK || st == AR_SPEC);
    assert_true((st == AR_OK) == (d.count == 0));
    if (st == AR_OK) {
      assert_true(s->n_layers >= 1);
      assert_true(s->layers[s->n_layers - 1].act == AR_ACT_SOFTMAX ||
                  s->layers[s->n_layers - 1].act == AR_ACT_SIGMOID);
      ok++;
    }
    ar_spec_destroy(s);
    ar_diags_fini(&d);
  }
  assert_true(ok > 0);
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--print-schema")) {
    ar_spec_schema_markdown(stdout);
    return 0;
  }
  const char *only = argc > 1 ? argv[1] : NULL;
  const struct CMUnitTest yaml[] = {
      cmocka_unit_test(test_syntax_error_has_position),
      cmocka_unit_test(test_empty_and_not_a_mapping),
      cmocka_unit_test(test_aliases_and_anchors_refused),
      cmocka_unit_test(test_duplicate_keys_name_both_lines),
      cmocka_unit_test(test_several_documents_refused),
      cmocka_unit_test(test_depth_and_size_bounded),
      cmocka_unit_test(test_bad_bytes),
  };
  const struct CMUnitTest validate[] = {
      cmocka_unit_test(test_unknown_keys_suggest),
      cmocka_unit_test(test_wrong_types),
      cmocka_unit_test(test_integers_are_strict),
      cmocka_unit_test(test_floats_are_finite),
      cmocka_unit_test(test_missing_required_at_parent),
      cmocka_unit_test(test_conflicting_keys),
      cmocka_unit_test(test_enums_and_device),
      cmocka_unit_test(test_layer_rules),
      cmocka_unit_test(test_sparse_section),
      cmocka_unit_test(test_runtime_section),
      cmocka_unit_test(test_distributed_section),
      cmocka_unit_test(test_jobs_section),
      cmocka_unit_test(test_generate_must_match_model),
      cmocka_unit_test(test_nothing_to_train),
      cmocka_unit_test(test_optimizer_forms),
      cmocka_unit_test(test_every_problem_reported_in_order),
  };
  const struct CMUnitTest set[] = {
      cmocka_unit_test(test_set_overrides),
      cmocka_unit_test(test_set_errors),
      cmocka_unit_test(test_set_default_layer_names),
      cmocka_unit_test(test_set_creates_and_fills),
  };
  const struct CMUnitTest convert[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_full_conversion),
      cmocka_unit_test(test_project_configs_parse),
  };
  const struct CMUnitTest files[] = {
      cmocka_unit_test(test_load_resolves_against_file_folder),
      cmocka_unit_test(test_missing_data_file),
      cmocka_unit_test(test_load_io_errors),
      cmocka_unit_test(test_other_module_file),
      cmocka_unit_test(test_other_module_file_errors),
  };
  const struct CMUnitTest docs[] = {
      cmocka_unit_test(test_docs_match_schema),
      cmocka_unit_test(test_docs_example_is_valid),
  };
  const struct CMUnitTest oom[] = {cmocka_unit_test(test_out_of_memory)};
  const struct CMUnitTest mutate[] = {cmocka_unit_test(test_random_mutations)};
  int failed = 0;
#define GROUP(g, setup, teardown)                                              \
  if (!only || !strcmp(only, #g))                                              \
  failed += cmocka_run_group_tests_name(#g, g, setup, teardown)
  GROUP(yaml, NULL, NULL);
  GROUP(validate, NULL, NULL);
  GROUP(set, NULL, NULL);
  GROUP(convert, NULL, NULL);
  GROUP(files, files_setup, files_teardown);
  GROUP(docs, NULL, NULL);
  GROUP(oom, NULL, NULL);
  GROUP(mutate, NULL, NULL);
#undef GROUP
  return failed ? 1 : 0;
}
