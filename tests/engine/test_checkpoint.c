/* Checkpoint verification: nothing in a checkpoint is trusted before it
 * is checked.  One flipped byte anywhere and any truncation are refused by
 * peek and load; so are hand-made files that carry a valid CRC-32 but
 * hold what no run writes (negative or huge counters, more iterations
 * than samples, NaN seconds, a tensor that runs past the end, trailing
 * bytes).  A resume is refused when the training data's shape changed,
 * and accepted when only train.epochs, train.iterations or train.threads
 * changed.  Every refusal is a status with a message naming the file,
 * never an abort. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "accelrt/runtime.h"
#include "engine_fixtures.h"
#include "engine_impl.h" /* ar__ckpt_shape, ar__model_tensor_shapes */
#include "engine_scratch.h"

/* A small job: 20 features, one hidden layer of 4, 6 labels (342
 * parameters with Adam's two moments), so a checkpoint is 1.5 KB and a
 * test can flip every byte of it.  extra: more YAML keys for train. */
static ar_spec *job(const char *out, int train_points, const char *train) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: ckpt\nseed: 3\ndevice: host\n"
           "model:\n  input: {sparse: 20}\n  layers:\n"
           "    - {name: h, dense: 4, activation: relu}\n"
           "    - {name: out, dense: 6, activation: softmax}\n"
           "data: {generate: {train_points: %d, test_points: 10, features: 20, labels: 6,"
           " nnz: 4, labels_per_point: 1}}\n"
           "train: {batch: 16, %s, optimizer: {adam: {lr: 0.01}}}\n"
           "output: {dir: '%s'}\n",
           train_points, train, out);
  return parse(yaml);
}

static ar_status run(const char *out, int train_points, const char *train, bool resume,
                     ar_summary *s, ar_err *err) {
  ar_spec *spec = job(out, train_points, train);
  ar_run_opts o = AR_RUN_OPTS_INIT;
  o.quiet = true;
  o.resume = resume;
  ar_status st = ar_run(spec, &o, s, err);
  ar_spec_destroy(spec);
  return st;
}

static void run_ok(const char *out, int train_points, const char *train, bool resume,
                   ar_summary *s) {
  ar_err err = AR_ERR_INIT;
  if (run(out, train_points, train, resume, s, &err) != AR_OK)
    fail_msg("ar_run: %s", err.msg);
}

static void spit(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  fclose(f);
}

/* The job's model on the host device, to load checkpoints into. */
typedef struct fixture {
  ar_spec *spec;
  ar_device *dev;
  ar_model *model;
} fixture;

static void fixture_open(fixture *fx) {
  fx->spec = job("/nonexistent", 60, "iterations: 1, threads: 1");
  ar_err err = AR_ERR_INIT;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = 1;
  assert_int_equal(ar_device_open("host", &o, &fx->dev, &err), AR_OK);
  if (ar_model_create(fx->dev, fx->spec, 4, 1, &fx->model, &err) != AR_OK)
    fail_msg("ar_model_create: %s", err.msg);
}

static void fixture_close(fixture *fx) {
  ar_model_destroy(fx->model);
  ar_device_close(fx->dev);
  ar_spec_destroy(fx->spec);
}

/* Peek and load both refuse `path` with `want`, and the message names the
 * file and holds `what`.  Returns nothing: failures fail the test. */
static void refused(fixture *fx, const char *path, ar_status want, const char *what,
                    const char *label) {
  ar_ckpt_state st;
  memset(&st, 0x5a, sizeof st);
  ar_err err = AR_ERR_INIT;
  ar_status got = ar_checkpoint_peek(NULL, path, &st, &err);
  /* Without a model, a shape mismatch cannot be seen: peek accepts it. */
  if (want == AR_SPEC) {
    if (got != AR_OK)
      fail_msg("%s: peek: %s '%s', want AR_OK", label, ar_status_name(got), err.msg);
  } else if (got != want || !strstr(err.msg, path) || !strstr(err.msg, what)) {
    fail_msg("%s: peek: %s '%s', want %s naming the file and '%s'", label,
             ar_status_name(got), err.msg, ar_status_name(want), what);
  }
  got = ar_checkpoint_load(fx->model, &st, NULL, path, &err);
  if (got != want || !strstr(err.msg, path) || !strstr(err.msg, what))
    fail_msg("%s: load: %s '%s', want %s naming the file and '%s'", label,
             ar_status_name(got), err.msg, ar_status_name(want), what);
}

/* Trains the test job for 6 iterations in folder `name`; its checkpoint's
 * path goes to path (cap bytes). */
static void write_ckpt(const char *name, char *path, size_t cap) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
  ar_summary s;
  run_ok(dir, 60, "iterations: 6, threads: 1", false, &s);
  snprintf(path, cap, "%s/checkpoint.bin", dir);
}

/* A good checkpoint's bytes (free them; *len their count) with the model
 * it loads into, checked to load, so that a refusal of a damaged copy is
 * the damage's doing.  copy: where the damaged versions go. */
static unsigned char *good_checkpoint(const char *name, char *copy, size_t cap, size_t *len,
                                      fixture *fx) {
  char path[340];
  write_ckpt(name, path, sizeof path);
  snprintf(copy, cap, "%s.damaged", path);
  unsigned char *c = slurp(path, len);
  assert_true(*len > 1000 && *len < 4000);
  fixture_open(fx);
  ar_ckpt_state st;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_checkpoint_load(fx->model, &st, NULL, path, &err), AR_OK);
  assert_int_equal(st.iteration, 6);
  return c;
}

/* ---- damaged files ---------------------------------------------------------- */

static void test_every_flipped_byte_refused(void **state) {
  (void)state;
  char copy[360];
  size_t len;
  fixture fx;
  unsigned char *c = good_checkpoint("flip", copy, sizeof copy, &len, &fx);
  for (size_t i = 0; i < len; i++) {
    char label[64];
    snprintf(label, sizeof label, "byte %zu of %zu", i, len);
    c[i] ^= 0x10;
    spit(copy, c, len);
    /* The magic's bytes say "not a checkpoint"; every other byte, the
     * header, the tensors and the CRC itself, fails the checksum. */
    refused(&fx, copy, AR_CORRUPT, i < 8 ? "not an accelrt checkpoint" : "checksum", label);
    c[i] ^= 0x10;
  }
  fixture_close(&fx);
  free(c);
}

static void test_truncated_refused(void **state) {
  (void)state;
  char copy[360];
  size_t len;
  fixture fx;
  unsigned char *c = good_checkpoint("cut", copy, sizeof copy, &len, &fx);
  const size_t cuts[] = {0, 5, 8, 40, 67, 68, 100, len / 2, len - 4, len - 1};
  const char *what[] = {"not an accelrt", "not an accelrt", "truncated", "truncated",
                        "truncated", "checksum", "checksum", "checksum", "checksum",
                        "checksum"};
  for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
    char label[64];
    snprintf(label, sizeof label, "cut at %zu of %zu", cuts[k], len);
    spit(copy, c, cuts[k]);
    refused(&fx, copy, AR_CORRUPT, what[k], label);
  }
  fixture_close(&fx);
  free(c);
}

/* Opening a resumed job (what the service does when it recovers a job
 * after a restart) refuses a damaged checkpoint: its position is not
 * believed before the checksum matched. */
static void test_resume_refuses_damaged(void **state) {
  (void)state;
  char dir[300], path[340];
  write_ckpt("resume_damaged", path, sizeof path);
  snprintf(dir, sizeof dir, "%s/resume_damaged", tmpdir);
  ar_summary s;
  size_t len;
  unsigned char *c = slurp(path, &len);
  c[23] ^= 0x01; /* the iteration count's high byte: 2^56 + 6, the job would look done */
  spit(path, c, len);
  ar_spec *spec = job(dir, 60, "iterations: 12, threads: 1");
  ar_run_opts o = AR_RUN_OPTS_INIT;
  o.quiet = true;
  o.resume = true;
  ar_err err = AR_ERR_INIT;
  ar_job *j = (ar_job *)1;
  assert_int_equal(ar_job_open(spec, &o, &j, &err), AR_CORRUPT);
  assert_null(j);
  assert_non_null(strstr(err.msg, path));
  assert_non_null(strstr(err.msg, "checksum"));
  assert_int_equal(ar_run(spec, &o, &s, &err), AR_CORRUPT);
  ar_spec_destroy(spec);
  free(c);
}

/* ---- hand-made files with a valid checksum ---------------------------------- */

/* A checkpoint built byte by byte, CRC-32 (zlib) appended by ck_save. */
typedef struct ck {
  unsigned char b[8192];
  size_t n;
} ck;

static void ck_put(ck *c, const void *p, size_t n) {
  assert_true(c->n + n <= sizeof c->b);
  memcpy(c->b + c->n, p, n);
  c->n += n;
}

static void ck_u32(ck *c, uint32_t v) { ck_put(c, &v, 4); }
static void ck_i64(ck *c, int64_t v) { ck_put(c, &v, 8); }

/* The header fields a hand-made file is built from. */
typedef struct fields {
  uint32_t version, ntensors;
  int64_t iteration, epoch, rows_in_epoch, samples, step;
  double train_s;
} fields;

/* What the test job writes after 6 iterations of 16 rows over 60 points:
 * epoch 1, 32 rows into it, 92 samples. */
static fields good_fields(const fixture *fx) {
  fields f = {1, 0, 6, 1, 32, 92, 6, 0.5};
  f.ntensors = (uint32_t)ar_model_tensors(fx->model, NULL, NULL, NULL, 0);
  return f;
}

static void ck_header(ck *c, const fields *f) {
  c->n = 0;
  ck_put(c, "ACCELRTC", 8);
  ck_u32(c, f->version);
  ck_u32(c, f->ntensors);
  ck_i64(c, f->iteration);
  ck_i64(c, f->epoch);
  ck_i64(c, f->rows_in_epoch);
  ck_i64(c, f->samples);
  ck_i64(c, f->step);
  ck_put(c, &f->train_s, 8);
}

/* One tensor record with `values` zero floats after it. */
static void ck_tensor(ck *c, const char *name, uint32_t name_len, int64_t count,
                      int64_t values) {
  ck_u32(c, name_len);
  ck_put(c, name, strlen(name));
  ck_i64(c, count);
  for (int64_t i = 0; i < values; i++) {
    float z = 0.0f;
    ck_put(c, &z, 4);
  }
}

/* The model's tensors, all zero. */
static void ck_model_tensors(ck *c, const fixture *fx) {
  const char *names[64];
  float *ptrs[64];
  int64_t counts[64];
  int n = ar_model_tensors(fx->model, names, ptrs, counts, 64);
  assert_true(n <= 64);
  for (int i = 0; i < n; i++)
    ck_tensor(c, names[i], (uint32_t)strlen(names[i]), counts[i], counts[i]);
}

/* Appends the CRC-32 of everything so far and writes the file. */
static const char *ck_save(ck *c, const char *name) {
  static char path[400];
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), c->b, (uInt)c->n);
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(c->b, 1, c->n, f), c->n);
  assert_int_equal(fwrite(&crc, 1, 4, f), 4);
  fclose(f);
  return path;
}

/* A file of the model's tensors with header f, refused as `want`. */
static void header_refused(fixture *fx, const fields *f, ar_status want, const char *what,
                           const char *label) {
  ck c;
  ck_header(&c, f);
  ck_model_tensors(&c, fx);
  refused(fx, ck_save(&c, "made.bin"), want, what, label);
}

static void test_handmade_header_refused(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  /* The builder itself makes a checkpoint both calls accept. */
  ck c;
  fields g = good_fields(&fx);
  ck_header(&c, &g);
  ck_model_tensors(&c, &fx);
  const char *path = ck_save(&c, "good.bin");
  ar_ckpt_state st;
  ar_err err = AR_ERR_INIT;
  if (ar_checkpoint_peek(NULL, path, &st, &err) != AR_OK)
    fail_msg("peek of a good hand-made file: %s", err.msg);
  assert_int_equal(st.iteration, 6);
  assert_int_equal(st.samples, 92);
  if (ar_checkpoint_load(fx.model, &st, NULL, path, &err) != AR_OK)
    fail_msg("load of a good hand-made file: %s", err.msg);
  assert_int_equal(fx.model->step, 6);

  fields f;
#define CASE(field, value, what)                                                                \
  do {                                                                                         \
    f = g;                                                                                     \
    f.field = value;                                                                           \
    header_refused(&fx, &f, AR_CORRUPT, what, #field " = " #value);                           \
  } while (0)
  CASE(version, 3, "version 3");
  CASE(version, 0, "version 0");
  CASE(ntensors, 70000, "70000 tensors");
  CASE(step, -1, "step is -1");
  CASE(iteration, -1, "iteration is -1");
  CASE(epoch, -5, "epoch is -5");
  CASE(rows_in_epoch, -16, "rows_in_epoch is -16");
  CASE(samples, INT64_MIN, "samples is");
  CASE(iteration, INT64_MAX, "outside [0, 2^53]");
  CASE(samples, (int64_t)1 << 60, "outside [0, 2^53]");
  /* Consistent with the range but impossible for a run. */
  CASE(iteration, 93, "cannot come from 92 samples");
  CASE(iteration, (int64_t)1 << 40, "each iteration trains at least one row");
  CASE(rows_in_epoch, 93, "cannot come from 92 samples");
  CASE(step, 7, "step 7 is beyond its 6 iterations");
  CASE(train_s, NAN, "train_s");
  CASE(train_s, INFINITY, "train_s");
  CASE(train_s, -1.0, "train_s is -1");
  /* More tensors declared than the file holds: it ends inside a record. */
  CASE(ntensors, g.ntensors + 1, "ends inside the record of tensor");
#undef CASE
  /* Fewer: the model's shape differs (tensor count), for load only. */
  f = g;
  f.ntensors = g.ntensors - 1;
  ck_header(&c, &f);
  const char *names[64];
  float *ptrs[64];
  int64_t counts[64];
  int n = ar_model_tensors(fx.model, names, ptrs, counts, 64);
  for (int i = 0; i < n - 1; i++)
    ck_tensor(&c, names[i], (uint32_t)strlen(names[i]), counts[i], counts[i]);
  refused(&fx, ck_save(&c, "fewer.bin"), AR_SPEC, "model's shape", "one tensor fewer");
  fixture_close(&fx);
}

static void test_handmade_tensors_refused(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  fields g = good_fields(&fx);
  const char *names[64];
  float *ptrs[64];
  int64_t counts[64];
  int n = ar_model_tensors(fx.model, names, ptrs, counts, 64);
  ck c;

  /* A count that would read far past the end, with the values it has. */
  ck_header(&c, &g);
  ck_tensor(&c, names[0], (uint32_t)strlen(names[0]), (int64_t)1 << 40, counts[0]);
  refused(&fx, ck_save(&c, "long.bin"), AR_CORRUPT, "claims 1099511627776 values",
          "count past the end");
  /* The last tensor one value longer than the bytes left. */
  ck_header(&c, &g);
  for (int i = 0; i < n; i++)
    ck_tensor(&c, names[i], (uint32_t)strlen(names[i]), counts[i] + (i == n - 1), counts[i]);
  refused(&fx, ck_save(&c, "one_more.bin"), AR_CORRUPT, "bytes are left",
          "last count one too many");
  /* A negative count. */
  ck_header(&c, &g);
  ck_tensor(&c, names[0], (uint32_t)strlen(names[0]), -4, counts[0]);
  refused(&fx, ck_save(&c, "negative.bin"), AR_CORRUPT, "claims -4 values", "negative count");
  /* Names: empty, longer than any name, longer than the file, control bytes. */
  ck_header(&c, &g);
  ck_tensor(&c, "", 0, counts[0], counts[0]);
  refused(&fx, ck_save(&c, "noname.bin"), AR_CORRUPT, "a name of 0 bytes", "empty name");
  ck_header(&c, &g);
  ck_tensor(&c, "h.w", 1000, 0, 0);
  refused(&fx, ck_save(&c, "bigname.bin"), AR_CORRUPT, "a name of 1000 bytes", "long name");
  ck_header(&c, &g);
  ck_tensor(&c, "h.w", 0xffffffffu, 0, 0);
  refused(&fx, ck_save(&c, "hugename.bin"), AR_CORRUPT, "a name of 4294967295 bytes",
          "name length 2^32-1");
  ck_header(&c, &g);
  ck_tensor(&c, "h\n.w", 4, counts[0], counts[0]);
  refused(&fx, ck_save(&c, "ctrlname.bin"), AR_CORRUPT, "control characters", "newline");
  /* Trailing bytes between the last tensor and the checksum. */
  ck_header(&c, &g);
  ck_model_tensors(&c, &fx);
  ck_put(&c, "xyz", 3);
  refused(&fx, ck_save(&c, "trailing.bin"), AR_CORRUPT, "3 bytes follow its last tensor",
          "trailing bytes");
  /* Bytes after the checksum: the checksum is then read from elsewhere. */
  ck_header(&c, &g);
  ck_model_tensors(&c, &fx);
  const char *p = ck_save(&c, "after_crc.bin");
  FILE *f = fopen(p, "ab");
  fputs("tail", f);
  fclose(f);
  refused(&fx, p, AR_CORRUPT, "checksum", "bytes after the checksum");
  /* Another model's tensor (a renamed layer): a shape error naming both. */
  ck_header(&c, &g);
  ck_tensor(&c, "x.w", 3, counts[0], counts[0]);
  for (int i = 1; i < n; i++)
    ck_tensor(&c, names[i], (uint32_t)strlen(names[i]), counts[i], counts[i]);
  refused(&fx, ck_save(&c, "renamed.bin"), AR_SPEC, "tensor 0 is 'x.w'", "renamed tensor");
  /* A wider layer: same names, more values. */
  ck_header(&c, &g);
  for (int i = 0; i < n; i++)
    ck_tensor(&c, names[i], (uint32_t)strlen(names[i]), counts[i] + (i == 0), counts[i] + (i == 0));
  refused(&fx, ck_save(&c, "wider.bin"), AR_SPEC, "model's shape", "wider tensor");
  fixture_close(&fx);
}

/* ---- version 2: element types and shapes -------------------------------------- */

/* A version 2 record: name, dtype, nd, pad, dims, then the values' bytes
 * (zeros; `bytes` of them). */
static void ck_tensor2(ck *c, const char *name, uint8_t dtype, uint8_t nd, const int64_t *dims,
                       int64_t bytes) {
  ck_u32(c, (uint32_t)strlen(name));
  ck_put(c, name, strlen(name));
  const uint8_t tag[4] = {dtype, nd, 0, 0};
  ck_put(c, tag, 4);
  for (int d = 0; dims && d < nd; d++) /* no dims: the record stops at its tag */
    ck_i64(c, dims[d]);
  for (int64_t i = 0; i < bytes; i++)
    ck_put(c, "", 1);
}

/* The model's tensors as version 2 records with their true shapes (from
 * what the engine itself writes), tensor `odd` given `dims` instead. */
static void ck_model_tensors2(ck *c, const fixture *fx, int odd, uint8_t nd,
                              const int64_t *dims) {
  const char *names[64];
  float *ptrs[64];
  int64_t counts[64];
  ar__ckpt_shape sh[64];
  int n = ar_model_tensors(fx->model, names, ptrs, counts, 64);
  ar__model_tensor_shapes(fx->model, sh, 64);
  for (int i = 0; i < n; i++)
    if (i == odd)
      ck_tensor2(c, names[i], AR__CKPT_F32, nd, dims, counts[i] * 4);
    else
      ck_tensor2(c, names[i], (uint8_t)sh[i].dtype, (uint8_t)sh[i].nd, sh[i].d, counts[i] * 4);
}

/* What this build writes is version 2, each record holding the shape the
 * model gives the tensor (weights matrices, biases and their optimizer
 * slots vectors), and the values' bytes follow exactly. */
static void test_v2_written_with_shapes(void **state) {
  (void)state;
  char copy[360];
  size_t len;
  fixture fx;
  unsigned char *c = good_checkpoint("v2", copy, sizeof copy, &len, &fx);
  uint32_t version;
  memcpy(&version, c + 8, 4);
  assert_int_equal(version, 2);
  ar__ckpt_shape sh[64];
  const char *names[64];
  float *ptrs[64];
  int64_t counts[64];
  int n = ar_model_tensors(fx.model, names, ptrs, counts, 64);
  ar__model_tensor_shapes(fx.model, sh, 64);
  /* Walk the file's records and compare each with the model's. */
  size_t at = 64;
  for (int i = 0; i < n; i++) {
    uint32_t nl;
    memcpy(&nl, c + at, 4);
    assert_int_equal(nl, strlen(names[i]));
    assert_memory_equal(c + at + 4, names[i], nl);
    at += 4 + nl;
    assert_int_equal(c[at], sh[i].dtype);
    assert_int_equal(c[at + 1], sh[i].nd);
    at += 4;
    int64_t bytes = sh[i].dtype == AR__CKPT_U64 ? 8 : 4;
    for (int d = 0; d < sh[i].nd; d++) {
      int64_t dim;
      memcpy(&dim, c + at, 8);
      assert_int_equal(dim, sh[i].d[d]);
      bytes *= dim;
      at += 8;
    }
    assert_int_equal(bytes, counts[i] * 4);
    at += (size_t)bytes;
  }
  assert_int_equal(at + 4, len);
  /* Weights are matrices, biases vectors. */
  bool saw_matrix = false;
  for (int i = 0; i < n; i++) {
    size_t nl = strlen(names[i]);
    if (names[i][nl - 1] == 'w') {
      assert_int_equal(sh[i].nd, 2);
      saw_matrix = true;
    } else {
      assert_int_equal(sh[i].nd, 1);
    }
  }
  assert_true(saw_matrix);
  fixture_close(&fx);
  free(c);
}

static void test_v2_handmade(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  fields g = good_fields(&fx);
  g.version = 2;
  ck c;
  /* The builder's good file loads. */
  ck_header(&c, &g);
  ck_model_tensors2(&c, &fx, -1, 0, NULL);
  ar_ckpt_state st;
  ar_err err = AR_ERR_INIT;
  const char *path = ck_save(&c, "good2.bin");
  if (ar_checkpoint_load(fx.model, &st, NULL, path, &err) != AR_OK)
    fail_msg("load of a good version 2 file: %s", err.msg);
  assert_int_equal(st.iteration, 6);
  /* The first weight transposed: same count, other shape; a shape error
   * naming both shapes (version 1 could not tell). */
  ar__ckpt_shape sh[64];
  ar__model_tensor_shapes(fx.model, sh, 64);
  assert_int_equal(sh[0].nd, 2);
  const int64_t tr[2] = {sh[0].d[1], sh[0].d[0]};
  assert_true(tr[0] != tr[1]);
  ck_header(&c, &g);
  ck_model_tensors2(&c, &fx, 0, 2, tr);
  char want[96];
  snprintf(want, sizeof want, "of f32 %lldx%lld, but this job's model has", (long long)tr[0],
           (long long)tr[1]);
  refused(&fx, ck_save(&c, "transposed.bin"), AR_SPEC, want, "transposed weight");
  /* Damaged records (files of that one record). */
  fields one_rec = g;
  one_rec.ntensors = 1;
  const int64_t one[1] = {4}, neg[1] = {-1}, huge[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  ck_header(&c, &one_rec);
  ck_tensor2(&c, "h.w", 7, 1, one, 16);
  refused(&fx, ck_save(&c, "dtype.bin"), AR_CORRUPT, "element type 7", "unknown dtype");
  ck_header(&c, &one_rec);
  ck_tensor2(&c, "h.w", AR__CKPT_F32, 9, NULL, 16);
  refused(&fx, ck_save(&c, "nd9.bin"), AR_CORRUPT, "9 dims", "nine dims");
  ck_header(&c, &one_rec);
  ck_tensor2(&c, "h.w", AR__CKPT_F32, 1, neg, 0);
  refused(&fx, ck_save(&c, "negdim.bin"), AR_CORRUPT, "dim 0 of -1", "negative dim");
  ck_header(&c, &one_rec);
  ck_tensor2(&c, "h.w", AR__CKPT_F32, 2, huge, 16);
  refused(&fx, ck_save(&c, "hugedims.bin"), AR_CORRUPT, "more values than", "dims past the end");
  ck_header(&c, &one_rec);
  ck_tensor2(&c, "h.w", AR__CKPT_F32, 8, NULL, 16); /* 16 bytes, not 8 dims */
  refused(&fx, ck_save(&c, "cutdims.bin"), AR_CORRUPT, "ends inside", "dims cut");
  /* More tensors than its bytes can hold. */
  g.ntensors = 1000000;
  ck_header(&c, &g);
  ck_model_tensors2(&c, &fx, -1, 0, NULL);
  refused(&fx, ck_save(&c, "toomany.bin"), AR_CORRUPT, "more than its", "ntensors too many");
  fixture_close(&fx);
}

/* ---- the job's data and what may change on resume ---------------------------- */

static void test_resume_refuses_other_data_shape(void **state) {
  (void)state;
  char dir[300];
  ar_summary s;
  ar_err err = AR_ERR_INIT;
  /* 6 iterations over 60 points: epoch 1, 32 rows in, 92 samples.  With
   * 40 points that position cannot be (1 x 40 + 32 != 92). */
  snprintf(dir, sizeof dir, "%s/shape_epoch1", tmpdir);
  run_ok(dir, 60, "iterations: 6, threads: 1", false, &s);
  assert_int_equal(run(dir, 40, "iterations: 12, threads: 1", true, &s, &err), AR_SPEC);
  assert_non_null(strstr(err.msg, "checkpoint.bin"));
  assert_non_null(strstr(err.msg, "training data's shape differs from the checkpoint's"));
  assert_non_null(strstr(err.msg, "40 points"));
  /* 3 iterations: 48 rows into epoch 0, more than 40 points hold. */
  snprintf(dir, sizeof dir, "%s/shape_epoch0", tmpdir);
  run_ok(dir, 60, "iterations: 3, threads: 1", false, &s);
  assert_int_equal(run(dir, 40, "iterations: 12, threads: 1", true, &s, &err), AR_SPEC);
  assert_non_null(strstr(err.msg, "training data's shape differs"));
  /* With the data it was trained on, the same checkpoint resumes. */
  run_ok(dir, 60, "iterations: 12, threads: 1", true, &s);
  assert_int_equal(s.iterations, 12);
}

static void test_resume_with_other_length_and_threads(void **state) {
  (void)state;
  char dir[300];
  ar_summary s;
  snprintf(dir, sizeof dir, "%s/length", tmpdir);
  run_ok(dir, 60, "iterations: 5, threads: 1", false, &s);
  /* 4 batches an epoch: 3 epochs are 12 iterations, below train.iterations. */
  run_ok(dir, 60, "iterations: 20, epochs: 3, threads: 2", true, &s);
  assert_int_equal(s.iterations, 12);
  assert_int_equal(s.samples, 3 * 60);
  /* Already past what a shorter job asks: accepted, nothing to run. */
  run_ok(dir, 60, "epochs: 1, threads: 1", true, &s);
  assert_int_equal(s.iterations, 12);
}

/* A model of more tensors than the old fixed table held (256) saves and
 * loads: 50 layers with Adam are 300 tensors. */
static void test_many_tensors_round_trip(void **state) {
  (void)state;
  char yaml[8192], dir[300];
  snprintf(dir, sizeof dir, "%s/deep", tmpdir);
  int n = snprintf(yaml, sizeof yaml,
                   "name: deep\nseed: 1\ndevice: host\nmodel:\n  input: {sparse: 8}\n"
                   "  layers:\n");
  for (int l = 0; l < 49; l++)
    n += snprintf(yaml + n, sizeof yaml - (size_t)n, "    - {dense: 2, activation: relu}\n");
  snprintf(yaml + n, sizeof yaml - (size_t)n,
           "    - {dense: 3, activation: softmax}\n"
           "data: {generate: {train_points: 8, test_points: 0, features: 8, labels: 3,"
           " nnz: 2, labels_per_point: 1}}\n"
           "train: {batch: 4, iterations: 2, threads: 1, optimizer: {adam: {lr: 0.01}}}\n"
           "output: {dir: '%s'}\n",
           dir);
  ar_spec *spec = parse(yaml);
  ar_run_opts o = AR_RUN_OPTS_INIT;
  o.quiet = true;
  ar_err err = AR_ERR_INIT;
  ar_summary s;
  if (ar_run(spec, &o, &s, &err) != AR_OK)
    fail_msg("ar_run: %s", err.msg);
  ar_spec_destroy(spec);
  char path[340];
  snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
  ar_ckpt_state cs;
  if (ar_checkpoint_peek(NULL, path, &cs, &err) != AR_OK)
    fail_msg("peek: %s", err.msg);
  assert_int_equal(cs.iteration, 2);
  size_t len;
  unsigned char *c = slurp(path, &len);
  uint32_t nt;
  memcpy(&nt, c + 12, 4);
  assert_int_equal(nt, 300);
  free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_flipped_byte_refused),
      cmocka_unit_test(test_truncated_refused),
      cmocka_unit_test(test_resume_refuses_damaged),
      cmocka_unit_test(test_handmade_header_refused),
      cmocka_unit_test(test_handmade_tensors_refused),
      cmocka_unit_test(test_v2_written_with_shapes),
      cmocka_unit_test(test_v2_handmade),
      cmocka_unit_test(test_resume_refuses_other_data_shape),
      cmocka_unit_test(test_resume_with_other_length_and_threads),
      cmocka_unit_test(test_many_tensors_round_trip),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
