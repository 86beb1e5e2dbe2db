/*
 * Inside the CUDA backend's graph ops (private to runtime/device/cuda;
 * CUDA C++ only): what the kernel files cuda_nn_conv.cu, cuda_nn_pool.cu,
 * cuda_nn_bnorm.cu, cuda_nn_math.cu, cuda_nn_shape.cu,
 * cuda_nn_attention.cu, cuda_nn_sparse.cu and cuda_nn_typed.cu share,
 * and the registration of their entries in the CUDA table (cuda_nn.cu).
 *
 * Every op keeps include/accelrt/nn.h's contract, with the host kernels
 * (runtime/device/host/nn_*.c) as the reference for each value: the same
 * formulas, in float with double sums where the host sums in double.  The
 * kernels are plain on purpose (one thread per output element, or one
 * block per row or channel with a fixed-order tree reduction), so that a
 * reader can check their indexing against the host's loops; none uses
 * atomics, so every result is deterministic.  Nothing here allocates: the
 * workspace is the one prepare asked for, never more than the host's for
 * the same op (the engine sizes its plan with the host's).  An op after a
 * failure does nothing; a failed launch is recorded in the handle
 * (cuda_impl.h).
 *
 * Tests: tests/device/test_nn_cuda.c (every op against the host backend).
 */
#ifndef ACCELRT_CUDA_NN_H
#define ACCELRT_CUDA_NN_H

#include "cuda/cuda_impl.h"
#include "nn/nn_impl.h"

#define NN_BLOCK 256 /* threads of every block here (a power of two) */

/* The CUDA handle a call runs on (the wrappers of nn.c set a->dev). */
static inline ar__cuda_device *nn_dev(const ar_nn_args *a) {
  return ar__cuda(a->dev);
}

/* A grid-stride loop over [0, n). */
#define NN_LOOP(i, n)                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);   \
       i += (int64_t)blockDim.x * gridDim.x)

/* Launches KERNEL over n items on a's stream, recording a failure as
 * "nn OP forward" etc.  Nothing when n is 0 or the handle failed before. */
#define NN_LAUNCH(a, n, what, KERNEL, ...)                                     \
  do {                                                                         \
    ar__cuda_device *nn_d_ = nn_dev(a);                                        \
    if ((n) > 0 && ar__cuda_enter(nn_d_)) {                                    \
      KERNEL<<<ar__cuda_grid(nn_d_, (n), NN_BLOCK), NN_BLOCK, 0,              \
               nn_d_->stream>>>(__VA_ARGS__);                                  \
      ar__cuda_launched(nn_d_, what);                                          \
    }                                                                          \
  } while (0)

/* The same with one block per item (rows, channels), items < 2^31. */
#define NN_LAUNCH_ROWS(a, rows, what, KERNEL, ...)                             \
  do {                                                                         \
    ar__cuda_device *nn_d_ = nn_dev(a);                                        \
    if ((rows) > 0 && ar__cuda_enter(nn_d_)) {                                 \
      KERNEL<<<(unsigned)(rows), NN_BLOCK, 0, nn_d_->stream>>>(__VA_ARGS__);  \
      ar__cuda_launched(nn_d_, what);                                          \
    }                                                                          \
  } while (0)

/* Block-wide sum and max (blockDim.x == NN_BLOCK): a tree in shared
 * memory in a fixed order, so the result does not depend on timing; every
 * thread gets it.  The leading barrier lets a kernel call them repeatedly. */
static __device__ __forceinline__ double nn_block_sum(double v) {
  __shared__ double sh[NN_BLOCK];
  __syncthreads();
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = NN_BLOCK / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s)
      sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

static __device__ __forceinline__ float nn_block_max(float v) {
  __shared__ float sh[NN_BLOCK];
  __syncthreads();
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = NN_BLOCK / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x])
      sh[threadIdx.x] = sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

/* The gradient of a broadcast operand, gathered per operand element (the
 * binary ops, WHERE, EXPAND): the operand's element strides st along the
 * output's nd dims `out` are 0 where it is broadcast.  nn_bcast_coords:
 * element j's coordinates along the dims the operand keeps into coord (0
 * elsewhere; its dims are the output's where the stride is not 0), and
 * how many output elements read it.  nn_bcast_elem: the r-th of those
 * (row-major over the broadcast dims, so r in order walks them in output
 * order), its coordinates into c, its output offset returned. */
static __device__ __forceinline__ int64_t nn_bcast_coords(int nd, const int64_t *out,
                                                          const int64_t *st, int64_t j,
                                                          int64_t *coord) {
  int64_t reps = 1, rest = j;
  for (int k = 0; k < nd; k++) {
    coord[k] = 0;
    if (st[k] == 0)
      reps *= out[k];
  }
  for (int k = 0; k < nd; k++)
    if (st[k] != 0) {
      coord[k] = rest / st[k];
      rest %= st[k];
    }
  return reps;
}

static __device__ __forceinline__ int64_t nn_bcast_elem(int nd, const int64_t *out,
                                                        const int64_t *st,
                                                        const int64_t *coord, int64_t r,
                                                        int64_t *c) {
  int64_t e = 0, stride = 1;
  for (int k = nd - 1; k >= 0; k--) {
    c[k] = coord[k];
    if (st[k] == 0) {
      c[k] = r % out[k];
      r /= out[k];
    }
    e += c[k] * stride;
    stride *= out[k];
  }
  return e;
}

/* An asynchronous device-to-device copy on a's stream (RESHAPE, FLATTEN,
 * the gradient that passes through unchanged). */
void ar__cuda_nn_copy(ar_nn_args *a, void *dst, const void *src, size_t bytes,
                      const char *what);

/* Each kernel file fills its ops' entries of the CUDA table. */
void ar__cuda_nn_conv_register(ar_nn_kernel *table); /* and the two below */
void ar__cuda_nn_pool_register(ar_nn_kernel *table);
void ar__cuda_nn_bnorm_register(ar_nn_kernel *table);
void ar__cuda_nn_math_register(ar_nn_kernel *table);
void ar__cuda_nn_shape_register(ar_nn_kernel *table);
void ar__cuda_nn_attention_register(ar_nn_kernel *table);
void ar__cuda_nn_sparse_register(ar_nn_kernel *table);
void ar__cuda_nn_typed_register(ar_nn_kernel *table);

/* The table (cuda_device.cu's nn_table slot), filled once. */
const ar_nn_kernel *ar__cuda_nn_table(ar_device *dev);

#endif /* ACCELRT_CUDA_NN_H */
