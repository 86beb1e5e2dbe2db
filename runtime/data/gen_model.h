/*
 * The generative model behind ar_data_generate, shared by generate.c and
 * the tests that check the planted structure (tests/data/test_gen.c).
 * Private to runtime/data.
 *
 * Labels.  Label popularity is Zipf-Mandelbrot with exponent 1: label id r
 * is drawn with probability proportional to 1 / (r + AR__GEN_ZIPF_OFFSET),
 * so label 0 is the most frequent and the tail is long, as in XC data
 * (with 670,091 labels the most popular one gets about 0.9% of all label
 * draws and most tail labels occur a handful of times or never).  A point
 * has k labels, k uniform in 1 .. 2*labels_per_point - 1 (mean
 * labels_per_point), distinct, written in increasing order.
 *
 * Features.  Label l owns P = max(1, nnz) prototype features, prototype j
 * being ar__gen_prototype(seed, features, l, j): a hash, so no table is
 * stored whatever the sizes.  A point makes m draws, m uniform in
 * nnz - nnz/2 .. nnz + nnz/2 (mean nnz); each draw is, with probability
 * `noise`, a uniform feature, and otherwise a uniform prototype of one of
 * the point's labels chosen uniformly.  Repeated draws collapse, so a
 * point has slightly fewer than m distinct features, written in increasing
 * order with value 1 (a binary bag of words, as in XC data).
 *
 * Randomness.  Point i of split s (0 train, 1 test) uses its own
 * xoshiro256** stream seeded from (seed, s + 1, i) (ar_rng in base.h), so the output
 * depends only on the seed and the spec, and train and test share labels
 * and prototypes but not points.
 */
#ifndef ACCELRT_DATA_GEN_MODEL_H
#define ACCELRT_DATA_GEN_MODEL_H


#include <stdint.h>

#define AR__GEN_ZIPF_OFFSET 10.0

/* Number of prototype features each label owns. */
static inline int64_t ar__gen_prototypes(int32_t nnz) {
  return nnz > 1 ? nnz : 1;
}

/* Prototype j of label `label`, a feature id in [0, features),
 * features < 2^32. */
static inline int32_t ar__gen_prototype(uint64_t seed, int64_t features,
                                        int64_t label, int64_t j) {
  uint64_t key = ar_mix64(seed ^ 0x5851F42D4C957F2Dull) ^
                 ar_mix64((uint64_t)label + 0x14057B7EF767814Full);
  uint64_t h = ar_mix64(key + (uint64_t)j);
  return (int32_t)(((h >> 32) * (uint64_t)features) >> 32);
}

#endif /* ACCELRT_DATA_GEN_MODEL_H */
