/*
 * accelrt data: streaming readers for multi-label sparse datasets and the
 * synthetic dataset generator.
 *
 * Formats:
 *   xc      The Extreme Classification Repository format: a header line
 *           "points features labels", then one point per line
 *           "l1,l2,... f:v f:v ...", 0-based ids.  A point without labels
 *           starts with a space.
 *   libsvm  The LIBSVM multi-label format: no header, "l1,l2 f:v ...",
 *           labels 0-based, feature indices 1-based (as LIBSVM writes them).
 *
 * Readers stream: they hold one shuffle window of rows in memory, never the
 * whole file, so a file larger than memory still trains.  Opening a file
 * scans it once to learn its exact shape (points, the largest row), which
 * is what lets the engine plan its memory exactly and lets the training
 * loop run without allocating.  Every malformed line is reported as
 * "FILE:LINE: error: ..." and a reader never reads past a buffer.
 *
 * Lines may end in "\r\n" and carry trailing blanks; repeated labels in a
 * row are dropped (the first occurrence is kept); empty lines may only
 * close the file.  Values are decimal floats and must be finite.
 *
 * A reader is not thread-safe: one thread uses it at a time.  Different
 * readers are independent.
 *
 * Tests: tests/data/test_reader.c, tests/data/test_gen.c,
 * tests/data/test_fuzz.c, tests/data/test_real.c (the Delicious and Bibtex
 * sets); throughput: tests/data/bench_data.c.
 */
#ifndef ACCELRT_DATA_H
#define ACCELRT_DATA_H

#include "accelrt/base.h"
#include "accelrt/fs.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A batch of sparse rows in CSR form, host memory, owned by the caller
 * (ar_batch_init / ar_batch_fini) with capacities fixed at init. */
/* The formats a reader takes (data.format in a job file). */
typedef enum ar_data_format {
  AR_FMT_XC = 0,
  AR_FMT_LIBSVM,
  AR_FMT_IDX, /* dense datasets of graph models: include/accelrt/tdata.h */
  AR_FMT_NPY
} ar_data_format;

/* What data.generate asks the generator for (see ar_data_generate). */
typedef struct ar_gen_spec {
  int64_t train_points, test_points;
  int64_t features, labels;
  int32_t nnz;              /* average non-zero features per point */
  int32_t labels_per_point; /* average labels per point */
  double noise;             /* fraction of features drawn at random, 0..1 */
} ar_gen_spec;

typedef struct ar_batch {
  int64_t rows;     /* rows filled */
  int64_t *row_ptr; /* (cap_rows + 1) feature offsets; row_ptr[0] = 0 */
  int32_t *idx;     /* (cap_nnz) 0-based feature ids */
  float *val;       /* (cap_nnz) feature values */
  int64_t *lab_ptr; /* (cap_rows + 1) label offsets */
  int32_t *lab;     /* (cap_labels) 0-based label ids, no duplicates in a row */
  int64_t cap_rows, cap_nnz, cap_labels;
} ar_batch;

/* Allocates a batch for `rows` rows of at most `max_nnz` features and
 * `max_labels` labels each.  AR_NOMEM; AR_INVALID for a NULL batch or a
 * negative size.  On failure *b is left zeroed, so ar_batch_fini is safe.
 * ar_batch_fini frees the arrays and zeroes *b; it accepts NULL. */
ar_status ar_batch_init(ar_batch *b, int64_t rows, int64_t max_nnz,
                        int64_t max_labels);
void ar_batch_fini(ar_batch *b);

/* What one scan of a file learns. */
typedef struct ar_data_stats {
  int64_t points;      /* data lines */
  int64_t features;    /* from the header (xc) or max id + 1 (libsvm) */
  int64_t labels;      /* likewise */
  int64_t max_nnz;     /* most features in one row */
  int64_t max_labels;  /* most labels in one row */
  int64_t total_nnz;
  int64_t total_labels;
  int64_t empty_label_rows; /* rows with no labels */
} ar_data_stats;

typedef struct ar_reader_opts {
  ar_data_format format;
  int64_t shuffle_window; /* rows permuted together; 0 or 1 = file order */
  uint64_t seed;          /* shuffle seed; epoch e uses a stream derived from (seed, e) */
  int64_t features;       /* expected feature count (model input); 0 = do not check */
  int64_t labels;         /* expected label count (output width); 0 = do not check */
  const ar_fs *fs; /* whose rights open the file (fs.h); NULL: this process's */
  int64_t max_line;       /* longest line accepted, bytes; 0 = AR_READER_MAX_LINE */
  bool own;               /* a file the job generated: a symlink is refused */
} ar_reader_opts;
#define AR_READER_OPTS_INIT {AR_FMT_XC, 0, 0, 0, 0, NULL, 0, false}
/* The default bound on a line: a longer one is a located error, so a file
 * without newlines (or /dev/zero behind a link) cannot grow the buffer
 * without bound. */
#define AR_READER_MAX_LINE ((int64_t)16 << 20)

typedef struct ar_reader ar_reader;

/* Opens and scans `path` (the scan checks every line: a malformed line, a
 * feature or label id out of range of the header or of opts->features /
 * opts->labels, or a header whose point count disagrees with the lines is
 * an AR_PARSE error "FILE:LINE: error: ..." in err).  The reader is
 * positioned at the start of epoch 0.  AR_NOTFOUND when the file does not
 * exist, AR_IO when it cannot be read or is not a regular file (opened
 * through opts->fs), AR_RANGE for a line longer than opts->max_line.
 * AR_INVALID for a bad option, AR_NOMEM.  opts may be NULL (defaults);
 * path is copied.  On failure *out is NULL.
 *
 * Memory, all taken here: a read buffer of max(1 MiB, longest line), one
 * shuffle window of parsed rows (sized by the most features and labels
 * any window of the file holds), and a label set for long label lists. */
ar_status ar_reader_open(const char *path, const ar_reader_opts *opts,
                         ar_reader **out, ar_err *err);
void ar_reader_close(ar_reader *r); /* NULL is a no-op */

/* The file's shape, from the scan at open.  Borrowed: valid while r lives. */
const ar_data_stats *ar_reader_stats(const ar_reader *r);

/* Fills b with up to `max_rows` next rows of the current epoch (b must have
 * been initialised with at least max_rows rows and the stats' max_nnz and
 * max_labels).  b->rows == 0 means the epoch is over.  Never allocates.
 * AR_INVALID when b is too small (nothing is consumed).  AR_IO on a read
 * error; AR_CORRUPT or AR_PARSE when the file changed since it was opened
 * (shorter, longer lines or rows, bad lines).  After such a failure the
 * reader answers AR_STATE until ar_reader_rewind.
 *
 * Shuffle order (shuffle_window W > 1): the file is cut into consecutive
 * windows of W rows; an epoch serves the windows in file order, each
 * permuted by a Fisher-Yates shuffle driven by xoshiro256** seeded through
 * splitmix64 from (seed, epoch, window index).  Rows never leave their
 * window, so this is a local shuffle; a W of at least the point count
 * shuffles the whole file. */
ar_status ar_reader_next(ar_reader *r, int64_t max_rows, ar_batch *b,
                         ar_err *err);

/* Starts epoch `epoch` from the beginning of the file with its shuffle
 * order; the order depends only on (seed, epoch, file), so a resumed run
 * can replay it.  Clears an earlier failure.  AR_IO, AR_CORRUPT.  Never
 * allocates. */
ar_status ar_reader_rewind(ar_reader *r, uint64_t epoch, ar_err *err);

/* Skips `rows` rows of the current epoch exactly as ar_reader_next would
 * have delivered them (used to resume from a checkpoint).  Whole windows
 * are stepped over without parsing.  Skipping past the end of the epoch
 * leaves the reader at its end (the next batch is empty).  AR_INVALID for
 * a negative count; otherwise as ar_reader_next.  Never allocates. */
ar_status ar_reader_skip(ar_reader *r, int64_t rows, ar_err *err);

/* Writes a synthetic XC dataset with planted structure: every label owns a
 * small set of "prototype" features, and a point's features are drawn
 * mostly from the prototypes of its labels (the rest, a `noise` fraction,
 * at random), so labels are predictable from features.  Label popularity
 * follows a Zipf-like law as real XC data does.  Deterministic in `seed`;
 * streams (memory does not grow with points); each file is written to a
 * temporary name, fsynced and renamed, so a crash leaves no half file.
 * test_path may be NULL (then gen->test_points is ignored).
 *
 * The model, exactly (runtime/data/gen_model.h): label r has popularity
 * proportional to 1/(r + 10); a point has 1 .. 2*labels_per_point - 1
 * distinct labels (uniform); each label owns max(1, nnz) prototype
 * features given by a hash of (seed, label, j); a point makes
 * nnz/2 .. 3*nnz/2 feature draws, each uniform over all features with
 * probability noise and otherwise a prototype of one of its labels.
 * Labels and features are written sorted and distinct, values are 1.
 * Train and test share labels and prototypes, not points.  Memory is
 * about 12 bytes a label.  AR_INVALID for a bad spec (the message names
 * the data.generate key), AR_IO (nothing is left behind but a complete
 * earlier file), AR_NOMEM. */
typedef struct ar_gen_opts {
  const ar_fs *fs; /* whose rights create the files; NULL: this process's */
  uint64_t max_bytes;     /* both files together; 0 = no bound.  Past it:
                             AR_RANGE, and nothing is left behind */
} ar_gen_opts;
#define AR_GEN_OPTS_INIT {NULL, 0}
ar_status ar_data_generate(const ar_gen_spec *gen, uint64_t seed,
                           const char *train_path, const char *test_path,
                           const ar_gen_opts *opts, ar_err *err);
/* What ar_reader_stats would say of the train and test files
 * ar_data_generate writes for (gen, seed) (every field: points, header
 * counts, largest and total rows), from the same draws made in memory:
 * nothing is written, memory is that of the generator (12 bytes a label),
 * time that of generating.  train or test may be NULL (not computed).
 * AR_OK, AR_INVALID (the spec, as ar_data_generate) or AR_NOMEM. */
ar_status ar_data_generate_stats(const ar_gen_spec *gen, uint64_t seed, ar_data_stats *train,
                                 ar_data_stats *test, ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_DATA_H */
