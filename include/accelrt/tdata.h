/*
 * accelrt tdata: datasets of dense examples for graph models (images,
 * token sequences, feature vectors), one class id per example, held whole
 * in memory: read once (a `.gz` file decompressed once, never per epoch)
 * and sliced into batches by index.
 *
 * Formats:
 *   idx  The MNIST family (Fashion-MNIST too): an images file (magic
 *        0x00000803, u8, dims N x H x W, big-endian header) and a labels
 *        file (0x00000801, u8, N).  The labels file is found by the MNIST
 *        naming rule ("-images-idx3-ubyte" -> "-labels-idx1-ubyte", and
 *        "images.idx3" -> "labels.idx1"), or given.  Either may end in
 *        ".gz" (zlib).  Examples are (1, H, W) u8.
 *   npy  A folder with x.npy (f32, u8 or i64, C order, little-endian;
 *        first axis = examples) and y.npy (i64 class ids, one axis of the
 *        same length; or targets of shape (N, C), u8 or f32, multi-hot for
 *        model.loss sigmoid_bce), read with mmap (no copy).
 *
 * Every file is opened through an ar_fs (fs.h).  Malformed input is an
 * AR_PARSE error naming the file, the offset or header field, what was
 * found and what was expected; a header that promises more bytes than the
 * file has is caught before anything is read past its end.
 *
 * Batches: ar_tdata_batch gathers examples by index into a float batch
 * (u8 images scaled to [0, 1], then normalised per channel, then the
 * seeded augmentation) or an i64 batch (token ids), and their class ids.
 *
 * Tests: tests/data/test_tdata.c.
 */
#ifndef ACCELRT_TDATA_H
#define ACCELRT_TDATA_H

#include "accelrt/base.h"
#include "accelrt/fs.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ar_tdata_type { AR_TDATA_U8 = 0, AR_TDATA_F32, AR_TDATA_I64 } ar_tdata_type;

#define AR_TDATA_MAX_DIMS 4

typedef struct ar_tdata ar_tdata;

/* Opens an idx images file; labels NULL: by the naming rule (AR_NOTFOUND
 * naming the path tried and `data.train_labels` when absent).  AR_OK;
 * AR_NOTFOUND, AR_IO, AR_PARSE (with FILE and what), AR_NOMEM. */
ar_status ar_tdata_open_idx(const char *images, const char *labels, const ar_fs *fs,
                            ar_tdata **out, ar_err *err);
/* Opens a folder with x.npy and y.npy.  Statuses as above. */
ar_status ar_tdata_open_npy(const char *folder, const ar_fs *fs, ar_tdata **out, ar_err *err);
void ar_tdata_close(ar_tdata *d); /* NULL is a no-op */

/* What was read. */
typedef struct ar_tdata_info {
  int64_t count;                  /* examples */
  int nd;                         /* dims of one example */
  int64_t dims[AR_TDATA_MAX_DIMS]; /* idx: (1, H, W) */
  ar_tdata_type type;
  int64_t classes;                /* the largest class id + 1; targets: C */
  int64_t targets;                /* npy y.npy of shape (N, C): C per example
                                     (multi-hot, u8 or f32), else 0 (class ids) */
  ar_tdata_type target_type;
  size_t bytes;                   /* memory the dataset holds (mapped or
                                     decompressed), for the memory plan */
} ar_tdata_info;
void ar_tdata_get_info(const ar_tdata *d, ar_tdata_info *out);
/* The targets of examples idx[0..n-1] as floats into t (n x info.targets;
 * a dataset of targets only). */
void ar_tdata_targets(const ar_tdata *d, const int64_t *idx, int64_t n, float *t);
/* The class id of example i (0 <= i < count; a dataset of class ids). */
int64_t ar_tdata_label(const ar_tdata *d, int64_t i);

/* Per-channel mean and standard deviation of the examples (channel = the
 * first example dim; u8 values scaled to [0, 1] first), over every example.
 * mean and std have room for dims[0] floats.  AR_INVALID for i64 data. */
ar_status ar_tdata_channel_stats(const ar_tdata *d, float *mean, float *std, ar_err *err);

/* How ar_tdata_batch turns examples into a float batch. */
typedef struct ar_tdata_aug {
  const float *mean, *std; /* per channel (NULL: no normalisation) */
  int64_t crop_pad;        /* > 0: pad by this much (zeros after
                              normalisation) and crop back at a random
                              offset (images, 3 dims) */
  bool flip;               /* mirror horizontally with probability 1/2 */
  uint64_t seed;           /* the augmentation's stream: the same seed,
                              epoch and indices give the same batch */
} ar_tdata_aug;

/* Gathers examples idx[0..n-1] into x (f32: n x the example's elements,
 * for u8 and f32 data) or into ids (i64: n x elements, for i64 data; the
 * other pointer NULL), and their class ids into y (n).  aug may be NULL
 * (no normalisation, no augmentation; augmentation is only for training
 * batches).  epoch and each example's index in the dataset (idx[i], not
 * its place in the batch) pick its augmentation, so an example is
 * augmented alike whatever batch it lands in.  Crop and flip apply to
 * examples of 3 dims only.  y may be NULL.  Allocates nothing.  Threads:
 * up to `threads` OpenMP threads. */
void ar_tdata_batch(const ar_tdata *d, const int64_t *idx, int64_t n, const ar_tdata_aug *aug,
                    uint64_t epoch, int threads, float *x, int64_t *ids, int64_t *y);

/* The order of examples for an epoch: a permutation of 0..count-1 from
 * (seed, epoch), or the file order when shuffle is false. */
void ar_tdata_order(int64_t count, bool shuffle, uint64_t seed, uint64_t epoch, int64_t *perm);

/* Writes a token dataset for `accelrt gen-data --shape tokens`: folders
 * DIR/train and DIR/test, each with x.npy (i64, points x seq) and y.npy
 * (i64 class ids).  Each sequence: token 1 at position 0 (a class token),
 * a length L uniform in [max(seq/2, 3), seq], positions L.. padded with 0; the
 * marker tokens 2 and 3 once each at two random positions in [1, L), the
 * rest uniform over [4, vocab).  The label is 1 when marker 2 comes before
 * marker 3, else 0: it depends on token order and on nothing a bag of
 * words can see (both classes hold the same tokens).  Through fs; files
 * written atomically.  AR_INVALID for seq < 3 or vocab < 5 (two distinct
 * marker positions in [1, L) need L >= 3, and fillers need a token >= 4),
 * train_points < 1 or test_points < 0; AR_IO, AR_NOMEM.
 *
 * labels > 2 (many classes, for sampled heads): the class c is uniform
 * in [0, labels) and written as its D digits base (vocab - 4), most
 * significant first, as tokens 4 + digit at positions 1..D (D the fewest
 * digits that hold labels - 1); L is at least D + 1 and the markers are
 * not written.  Fillers are drawn from the same range, so only positions
 * tell the digits from the filler.  AR_INVALID when seq < D + 1. */
typedef struct ar_tokens_spec {
  int64_t train_points, test_points;
  int64_t seq, vocab;
  int64_t labels; /* 0 or 2: the marker rule; more: the digit rule */
} ar_tokens_spec;
ar_status ar_tdata_generate_tokens(const ar_tokens_spec *spec, uint64_t seed, const char *dir,
                                   const ar_fs *fs, ar_err *err);
/* The bytes ar_tdata_open_npy holds for the training split (test false)
 * or the test split (test true) that ar_tdata_generate_tokens writes for
 * spec, computed without writing (`accelrt check`); 0 for an empty split. */
size_t ar_tdata_tokens_bytes(const ar_tokens_spec *spec, bool test);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_TDATA_H */
