/*
 * The host kernels of the nn group "shape" (private to runtime/device/host):
 * nn_shape.c holds the data-movement ops (concat, split, slice, pad,
 * reshape, flatten, transpose) and registers the whole group, nn_embed.c the
 * token ops (embedding, posembed, dropout, mask), nn_attention.c the fused
 * multi-head self-attention, nn_gather.c GATHER.  This header is what the three share.
 *
 * Tests: tests/device/test_nn_shape.c.
 */
#ifndef ACCELRT_HOST_NN_SHAPE_IMPL_H
#define ACCELRT_HOST_NN_SHAPE_IMPL_H

#include "nn/nn_impl.h"

/* Below this many elements of work a kernel runs on the calling thread:
 * waking the OpenMP team costs more than copying 32 Ki floats. */
#define AR__NN_PAR_MIN ((int64_t)1 << 15)

/* The team size for `work` elements with at most `threads` threads. */
static inline int ar__nn_team(int threads, int64_t work) {
  return threads > 1 && work >= AR__NN_PAR_MIN ? threads : 1;
}

/* A shape as text for error messages: ar__nn_shp(&s, buf) with a buffer of
 * AR__NN_SHP bytes. */
#define AR__NN_SHP 96
static inline const char *ar__nn_shp(const ar_shape *s, char *buf) {
  return ar_shape_str(s, buf, AR__NN_SHP);
}

/* dst (cols) = the sum of src's rows (rows x cols), in row order per
 * column (the same bits for any thread count); columns split among at most
 * `threads` threads (nn_shape.c). */
void ar__nn_col_sum(int threads, int64_t rows, int64_t cols, const float *src, float *dst);

/* The ops of nn_embed.c and nn_attention.c, filled into the table by
 * ar__nn_host_shape_register. */
void ar__nn_host_embed_register(ar_nn_kernel *table);
void ar__nn_host_attention_register(ar_nn_kernel *table);
/* GATHER (nn_gather.c). */
void ar__nn_host_gather_register(ar_nn_kernel *table);

#endif
