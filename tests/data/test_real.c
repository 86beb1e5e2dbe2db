/*
 * The real Delicious and Bibtex sets (shared/data, see its README): the
 * stats of every split against counts made independently (awk over the
 * files), and one shuffled epoch that serves every point once.  Skipped
 * (exit 77) when the data folder is absent.  ACCELRT_DATA_DIR overrides
 * the folder.
 */
#include "test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "accelrt/data.h"

#ifndef ACCELRT_REAL_DATA_DIR
#define ACCELRT_REAL_DATA_DIR "../shared/data"
#endif

typedef struct real_split {
  const char *file;
  int64_t points, features, labels, total_labels, total_nnz, empty;
} real_split;

static const real_split splits[] = {
    {"Delicious/delicious_train.txt", 12920, 500, 983, 246088, 239549, 10},
    {"Delicious/delicious_test.txt", 3185, 500, 983, 60229, 55065, 4},
    {"Bibtex/bibtex_train.txt", 4880, 1836, 159, 11616, 334250, 0},
    {"Bibtex/bibtex_test.txt", 2515, 1836, 159, 6146, 173496, 0},
};

static const char *data_dir(void) {
  const char *e = getenv("ACCELRT_DATA_DIR");
  return e ? e : ACCELRT_REAL_DATA_DIR;
}

static void test_real_stats(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
    const real_split *sp = &splits[i];
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", data_dir(), sp->file);
    ar_reader_opts o = AR_READER_OPTS_INIT;
    o.shuffle_window = 1000;
    o.seed = 1;
    o.features = sp->features;
    o.labels = sp->labels;
    ar_reader *r = NULL;
    ar_err err = AR_ERR_INIT;
    if (ar_reader_open(path, &o, &r, &err) != AR_OK)
      fail_msg("%s", err.msg);
    const ar_data_stats *s = ar_reader_stats(r);
    print_message("%s: %lld points, %lld features, %lld labels, max nnz %lld, "
                  "max labels %lld, %lld without labels\n",
                  sp->file, (long long)s->points, (long long)s->features,
                  (long long)s->labels, (long long)s->max_nnz, (long long)s->max_labels,
                  (long long)s->empty_label_rows);
    assert_int_equal(s->points, sp->points);
    assert_int_equal(s->features, sp->features);
    assert_int_equal(s->labels, sp->labels);
    assert_int_equal(s->total_labels, sp->total_labels);
    assert_int_equal(s->total_nnz, sp->total_nnz);
    assert_int_equal(s->empty_label_rows, sp->empty);

    /* One shuffled epoch: every point once, totals preserved. */
    ar_batch b;
    assert_int_equal(ar_batch_init(&b, 128, s->max_nnz, s->max_labels), AR_OK);
    int64_t rows = 0, nnz = 0, labs = 0, empty = 0;
    for (;;) {
      assert_int_equal(ar_reader_next(r, 128, &b, &err), AR_OK);
      if (!b.rows)
        break;
      rows += b.rows;
      nnz += b.row_ptr[b.rows];
      labs += b.lab_ptr[b.rows];
      for (int64_t k = 0; k < b.rows; k++)
        empty += b.lab_ptr[k + 1] == b.lab_ptr[k];
    }
    assert_int_equal(rows, sp->points);
    assert_int_equal(nnz, sp->total_nnz);
    assert_int_equal(labs, sp->total_labels);
    assert_int_equal(empty, sp->empty);
    ar_batch_fini(&b);
    ar_reader_close(r);
  }
}

int main(void) {
  char probe[1024];
  snprintf(probe, sizeof probe, "%s/Delicious/delicious_train.txt", data_dir());
  if (access(probe, R_OK) != 0) {
    fprintf(stderr, "skipped: %s not found (set ACCELRT_DATA_DIR)\n", probe);
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_real_stats)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
