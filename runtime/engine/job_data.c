/* A job's data: generated into output.dir/data/ (reused when the same
 * parameters made it), removed again for the service, or read from the
 * files the job names; the reader options a job uses; the data's figures
 * without a model (accelrt check). */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include "engine_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Generated data lives in output.dir/data/, with a stamp naming the
 * parameters it was made with, so a rerun reuses it. */
static const char *const gen_files[] = {"train.txt", "test.txt", "generated"};

bool ar__stamp_matches(const ar_fs *fs, const char *path, const char *stamp) {
  char *old = NULL;
  size_t len = 0;
  bool same = ar_fs_read_own(fs, path, 1023, &old, &len, NULL) == AR_OK && strcmp(old, stamp) == 0;
  ar_free(old);
  return same;
}

ar_status ar_run_resolve_data(const ar_spec *spec, const ar_run_opts *opts, const char **train,
                              const char **test, char **storage, ar_err *err) {
  *storage = NULL;
  if (!spec->data.generate) {
    *train = spec->data.train;
    *test = spec->data.test;
    return AR_OK;
  }
  const ar_fs *fs = opts ? opts->fs : NULL;
  const ar_gen_spec *g = &spec->data.gen;
  char stamp[512];
  snprintf(stamp, sizeof stamp,
           "train_points=%lld test_points=%lld features=%lld labels=%lld nnz=%d "
           "labels_per_point=%d noise=%.17g seed=%llu\n",
           (long long)g->train_points, (long long)g->test_points, (long long)g->features,
           (long long)g->labels, g->nnz, g->labels_per_point, g->noise,
           (unsigned long long)spec->seed);
  char *dir = ar_path_join(spec->output.dir, "data");
  if (!dir)
    return ar_errf(err, AR_NOMEM, "out of memory");
  size_t n = strlen(dir) + 32;
  char *buf = ar_malloc(3 * n);
  if (!buf) {
    ar_free(dir);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  char *trp = buf, *tep = buf + n, *stp = buf + 2 * n;
  snprintf(trp, n, "%s/%s", dir, gen_files[0]);
  snprintf(tep, n, "%s/%s", dir, gen_files[1]);
  snprintf(stp, n, "%s/%s", dir, gen_files[2]);
  ar_status st = ar_fs_mkdirs(fs, dir, err);
  ar_free(dir);
  if (st != AR_OK) {
    ar_free(buf);
    return st;
  }
  bool fresh = ar__stamp_matches(fs, stp, stamp) && ar_fs_readable_own(fs, trp) &&
               (g->test_points == 0 || ar_fs_readable_own(fs, tep));
  if (!fresh) {
    ar_fs_unlink(fs, stp, false, NULL);
    ar_log(AR_LOG_INFO, "generating synthetic data into %s/data/", spec->output.dir);
    ar_gen_opts go = AR_GEN_OPTS_INIT;
    go.fs = fs;
    go.max_bytes = opts ? opts->max_generated : 0;
    st = ar_data_generate(g, spec->seed, trp, g->test_points > 0 ? tep : NULL, &go, err);
    if (st == AR_OK)
      st = ar_fs_write_atomic(fs, stp, stamp, strlen(stamp), err);
    if (st != AR_OK) {
      ar_free(buf);
      return st;
    }
  }
  *train = trp;
  *test = g->test_points > 0 ? tep : NULL;
  *storage = buf;
  return AR_OK;
}

void ar_run_remove_generated(const ar_spec *spec, const ar_fs *fs) {
  if (!spec->data.generate)
    return;
  char *dir = ar_path_join(spec->output.dir, "data");
  if (!dir)
    return;
  for (size_t i = 0; i < sizeof gen_files / sizeof gen_files[0]; i++) {
    char *p = ar_path_join(dir, gen_files[i]);
    if (p)
      ar_fs_unlink(fs, p, false, NULL);
    ar_free(p);
  }
  ar_fs_unlink(fs, dir, true, NULL);
  ar_free(dir);
}

/* How a job opens its data files (the test split in file order). */
ar_reader_opts ar__job_reader_opts(const ar_spec *s, const ar_run_opts *o, bool test) {
  ar_reader_opts ro = AR_READER_OPTS_INIT;
  ro.format = s->data.format;
  ro.shuffle_window = test ? 0 : s->data.shuffle_window;
  ro.seed = s->seed;
  ro.features = s->input.features;
  ro.labels = s->layers[s->n_layers - 1].width;
  ro.fs = o ? o->fs : NULL;
  ro.max_line = o ? o->max_line : 0;
  ro.own = s->data.generate;
  return ro;
}

ar_status ar_job_data_stats(const ar_spec *spec, const ar_run_opts *opts, ar_data_stats *train,
                            ar_data_stats *test, bool *has_test, ar_err *err) {
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  *has_test = false;
  if (spec->data.generate) {
    const ar_gen_spec *g = &spec->data.gen;
    *has_test = g->test_points > 0;
    return ar_data_generate_stats(g, spec->seed, train, *has_test ? test : NULL, err);
  }
  ar_reader *r = NULL;
  ar_reader_opts ro = ar__job_reader_opts(spec, opts, false);
  AR_CHECK(ar_reader_open(spec->data.train, &ro, &r, err));
  *train = *ar_reader_stats(r);
  ar_reader_close(r);
  if (train->points == 0)
    return ar_errf(err, AR_PARSE, "%s: error: the training file has no data points",
                   spec->data.train);
  if (spec->data.test) {
    ro = ar__job_reader_opts(spec, opts, true);
    AR_CHECK(ar_reader_open(spec->data.test, &ro, &r, err));
    *test = *ar_reader_stats(r);
    ar_reader_close(r);
    *has_test = true;
  }
  return AR_OK;
}

void ar_job_row_bounds(const ar_data_stats *train, const ar_data_stats *test, int64_t *max_nnz,
                       int64_t *max_labels) {
  int64_t nnz = train->max_nnz, lab = train->max_labels;
  if (test) {
    nnz = test->max_nnz > nnz ? test->max_nnz : nnz;
    lab = test->max_labels > lab ? test->max_labels : lab;
  }
  *max_nnz = nnz < 1 ? 1 : nnz;
  *max_labels = lab < 1 ? 1 : lab;
}

