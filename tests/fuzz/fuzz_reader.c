/*
 * libFuzzer harness for the data reader (runtime/data/reader.c): the input
 * is a data file, opened once as xc (file order) and once as libsvm (a
 * shuffle window of 3), then read to the end of its epoch, rewound to
 * epoch 1, half an epoch skipped and the rest read.
 *
 * Besides crashes, leaks and undefined behaviour (the sanitizers), the
 * harness aborts when a result breaks the API's promises: open answers
 * AR_OK, or AR_PARSE / AR_RANGE with a message that starts with the file's
 * path; an epoch serves exactly the points the scan counted; every row
 * fits the stats' max_nnz and max_labels, its feature and label ids are
 * below the stats' counts, its values are finite and its labels distinct;
 * after a skip of k rows an epoch serves points - k more.
 *
 * Built as `fuzz_reader` with clang and -DACCELRT_FUZZ=ON (ci/fuzz-spec
 * runs it); replay.c runs the same entry over tests/fuzz/corpus/reader
 * with any compiler as the ctest test fuzz.reader_corpus.
 */
#include "memfile.h"

#include "accelrt/data.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define BATCH 4 /* rows per batch: small, so epochs end inside batches */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks one batch's rows against the stats; returns its row count. */
static int64_t check_batch(const ar_batch *b, const ar_data_stats *s) {
  if (b->rows < 0 || b->rows > BATCH || b->row_ptr[0] != 0 || b->lab_ptr[0] != 0)
    abort();
  for (int64_t r = 0; r < b->rows; r++) {
    int64_t f0 = b->row_ptr[r], f1 = b->row_ptr[r + 1];
    int64_t l0 = b->lab_ptr[r], l1 = b->lab_ptr[r + 1];
    if (f1 < f0 || f1 - f0 > s->max_nnz || l1 < l0 || l1 - l0 > s->max_labels)
      abort();
    for (int64_t k = f0; k < f1; k++)
      if (b->idx[k] < 0 || b->idx[k] >= s->features || !isfinite(b->val[k]))
        abort();
    for (int64_t k = l0; k < l1; k++) {
      if (b->lab[k] < 0 || b->lab[k] >= s->labels)
        abort();
      for (int64_t q = l0; q < k; q++)
        if (b->lab[q] == b->lab[k])
          abort();
    }
  }
  return b->rows;
}

/* Rows served until the epoch ends. */
static int64_t read_epoch(ar_reader *r, ar_batch *b, const ar_data_stats *s) {
  ar_err err = AR_ERR_INIT;
  int64_t rows = 0;
  for (;;) {
    if (ar_reader_next(r, BATCH, b, &err) != AR_OK)
      abort(); /* the file cannot change under a fuzzer */
    if (b->rows == 0)
      return rows;
    rows += check_batch(b, s);
  }
}

static void check_format(ar_data_format format, int64_t window, const char *path) {
  ar_reader_opts o = AR_READER_OPTS_INIT;
  o.format = format;
  o.shuffle_window = window;
  o.seed = 7;
  o.max_line = 1 << 16; /* inputs are small; a longer line is AR_RANGE */
  ar_reader *r = NULL;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_reader_open(path, &o, &r, &err);
  if (st != AR_OK) {
    if ((st != AR_PARSE && st != AR_RANGE) || r != NULL ||
        strncmp(err.msg, path, strlen(path)) != 0)
      abort();
    return;
  }
  const ar_data_stats *s = ar_reader_stats(r);
  ar_batch b;
  if (ar_batch_init(&b, BATCH, s->max_nnz, s->max_labels) != AR_OK)
    abort(); /* sized by a small input: never out of memory */
  if (read_epoch(r, &b, s) != s->points)
    abort();
  int64_t skip = s->points / 2;
  if (ar_reader_rewind(r, 1, &err) != AR_OK || ar_reader_skip(r, skip, &err) != AR_OK ||
      read_epoch(r, &b, s) != s->points - skip)
    abort();
  ar_batch_fini(&b);
  ar_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = memfile_write(data, size, NULL, 0);
  check_format(AR_FMT_XC, 0, path);
  check_format(AR_FMT_LIBSVM, 3, path);
  return 0;
}
