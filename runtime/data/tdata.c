/*
 * ar_tdata: what both readers share (the handle, its release), and what
 * is done with a dataset once read: labels, channel statistics, epoch
 * orders and batches.
 *
 * Augmentation is counter-based: the crop offset and the flip of an
 * example come from a xoshiro256** stream seeded with (seed, epoch, the
 * example's index in the dataset), never from a stream advanced batch by
 * batch, so an example's augmentation in an epoch does not depend on
 * which batch it lands in, on the batch size or on the thread that
 * gathers it.
 */
#define _GNU_SOURCE
#include "tdata_impl.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* Stream numbers (the third seed word) of the two random choices. */
#define ORDER_STREAM 0x6f72646572ull /* "order" */

ar_tdata *ar__tdata_alloc(void) { return ar_calloc(1, sizeof(ar_tdata)); }

ar_status ar__tdata_map(int fd, const char *path, void **base, size_t *len, ar_err *err) {
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    return ar_errf(err, AR_IO, "%s: cannot stat: %s (check the file)", path, strerror(errno));
  *base = NULL;
  *len = (size_t)sb.st_size;
  if (*len == 0)
    return AR_OK;
  void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED)
    return ar_errf(err, AR_IO, "%s: cannot map %zu bytes: %s (check the file and free memory)",
                   path, *len, strerror(errno));
  *base = p;
  return AR_OK;
}

void ar_tdata_close(ar_tdata *d) {
  if (!d)
    return;
  for (int i = 0; i < AR__TDATA_HOLD; i++) {
    ar_free(d->heap[i]);
    if (d->map[i])
      munmap(d->map[i], d->map_len[i]);
  }
  ar_free(d);
}

void ar_tdata_get_info(const ar_tdata *d, ar_tdata_info *out) { *out = d->info; }

void ar_tdata_targets(const ar_tdata *d, const int64_t *idx, int64_t n, float *t) {
  const int64_t C = d->info.targets;
  AR_ASSERT(d->yt);
  for (int64_t b = 0; b < n; b++) {
    AR_ASSERT(idx[b] >= 0 && idx[b] < d->info.count);
    for (int64_t j = 0; j < C; j++)
      t[b * C + j] = d->info.target_type == AR_TDATA_U8
                         ? (float)((const uint8_t *)d->yt)[idx[b] * C + j]
                         : ((const float *)d->yt)[idx[b] * C + j];
  }
}

int64_t ar_tdata_label(const ar_tdata *d, int64_t i) {
  AR_ASSERT(i >= 0 && i < d->info.count && !d->yt);
  return d->y8 ? (int64_t)d->y8[i] : d->y64[i];
}

/* Value j of example i as a float (u8 scaled to [0, 1]). */
static inline float value_at(const ar_tdata *d, int64_t i, int64_t j) {
  size_t k = (size_t)i * (size_t)d->elems + (size_t)j;
  if (d->info.type == AR_TDATA_U8)
    return (float)((const uint8_t *)d->x)[k] / 255.0f;
  return ((const float *)d->x)[k];
}

/* Two passes per channel (mean, then the squared deviations from it), in
 * double: a one-pass sum of squares loses the variance of values far
 * from zero.  The standard deviation is the population one (divided by
 * the number of values). */
ar_status ar_tdata_channel_stats(const ar_tdata *d, float *mean, float *std, ar_err *err) {
  if (d->info.type == AR_TDATA_I64)
    return ar_errf(err, AR_INVALID,
                   "channel statistics need float or u8 examples, not token ids (i64); "
                   "leave data normalisation off for token datasets");
  int64_t ch = d->info.nd > 0 ? d->info.dims[0] : 1;
  int64_t per = d->elems / ch; /* values of one channel in one example */
  double n = (double)d->info.count * (double)per;
  for (int64_t c = 0; c < ch; c++) {
    double s = 0.0, q = 0.0;
    for (int64_t i = 0; i < d->info.count; i++)
      for (int64_t j = c * per; j < (c + 1) * per; j++)
        s += value_at(d, i, j);
    double m = n > 0 ? s / n : 0.0;
    for (int64_t i = 0; i < d->info.count; i++)
      for (int64_t j = c * per; j < (c + 1) * per; j++) {
        double v = value_at(d, i, j) - m;
        q += v * v;
      }
    mean[c] = (float)m;
    std[c] = (float)(n > 0 ? sqrt(q / n) : 0.0);
  }
  return AR_OK;
}

void ar_tdata_order(int64_t count, bool shuffle, uint64_t seed, uint64_t epoch, int64_t *perm) {
  for (int64_t i = 0; i < count; i++)
    perm[i] = i;
  if (!shuffle)
    return;
  /* Fisher-Yates (Knuth, TAOCP vol. 2, §3.4.2, Algorithm P). */
  ar_rng r;
  ar_rng_seed3(&r, seed, epoch, ORDER_STREAM);
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = (int64_t)ar_rng_below(&r, (uint64_t)i + 1);
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* One example's augmentation. */
typedef struct aug_pick {
  int64_t dy, dx; /* crop offset in the padded image, in [0, 2 * pad] */
  bool flip;
} aug_pick;

static aug_pick pick(const ar_tdata_aug *aug, uint64_t epoch, int64_t example) {
  aug_pick p = {0, 0, false};
  ar_rng r;
  ar_rng_seed3(&r, aug->seed, epoch, (uint64_t)example);
  if (aug->crop_pad > 0) {
    p.dy = (int64_t)ar_rng_below(&r, 2 * (uint64_t)aug->crop_pad + 1);
    p.dx = (int64_t)ar_rng_below(&r, 2 * (uint64_t)aug->crop_pad + 1);
  }
  if (aug->flip)
    p.flip = (ar_rng_next(&r) >> 63) != 0;
  return p;
}

/* Normalised value j (channel c) of example i. */
static inline float norm_at(const ar_tdata *d, const ar_tdata_aug *aug, int64_t i, int64_t c,
                            int64_t j) {
  float v = value_at(d, i, j);
  if (aug && aug->mean && aug->std)
    v = (v - aug->mean[c]) / aug->std[c];
  return v;
}

/* An image (C, H, W) with crop and flip: output pixel (y, x) is the
 * padded image's pixel (y + dy, x' + dx) with x' = W-1-x when flipped
 * (the crop is taken, then mirrored); padding is 0 after normalisation. */
static void gather_image(const ar_tdata *d, const ar_tdata_aug *aug, aug_pick p, int64_t i,
                         float *out) {
  int64_t C = d->info.dims[0], H = d->info.dims[1], W = d->info.dims[2];
  int64_t pad = aug->crop_pad > 0 ? aug->crop_pad : 0;
  for (int64_t c = 0; c < C; c++)
    for (int64_t y = 0; y < H; y++) {
      int64_t sy = y + p.dy - pad;
      float *row = out + (c * H + y) * W;
      for (int64_t x = 0; x < W; x++) {
        int64_t sx = (p.flip ? W - 1 - x : x) + p.dx - pad;
        row[x] = (sy < 0 || sy >= H || sx < 0 || sx >= W)
                     ? 0.0f
                     : norm_at(d, aug, i, c, (c * H + sy) * W + sx);
      }
    }
}

void ar_tdata_batch(const ar_tdata *d, const int64_t *idx, int64_t n, const ar_tdata_aug *aug,
                    uint64_t epoch, int threads, float *x, int64_t *ids, int64_t *y) {
  const int64_t E = d->elems;
  const int64_t C = d->info.nd > 0 ? d->info.dims[0] : 1;
  const int64_t per = E / C; /* values of one channel */
  const bool image_aug = aug && d->info.nd == 3 && (aug->crop_pad > 0 || aug->flip);
  AR_ASSERT(d->info.type == AR_TDATA_I64 ? ids != NULL : x != NULL);
  if (threads < 1)
    threads = 1;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && n > 1)
  for (int64_t b = 0; b < n; b++) {
    int64_t i = idx[b];
    AR_ASSERT(i >= 0 && i < d->info.count);
    if (y) /* class ids (a dataset of targets gives them by ar_tdata_targets) */
      y[b] = d->y8 ? (int64_t)d->y8[i] : d->y64 ? d->y64[i] : 0;
    if (d->info.type == AR_TDATA_I64) {
      memcpy(ids + b * E, (const int64_t *)d->x + i * E, (size_t)E * sizeof *ids);
      continue;
    }
    float *out = x + b * E;
    if (image_aug) {
      gather_image(d, aug, pick(aug, epoch, i), i, out);
      continue;
    }
    for (int64_t c = 0; c < C; c++)
      for (int64_t j = c * per; j < (c + 1) * per; j++)
        out[j] = norm_at(d, aug, i, c, j);
  }
}
