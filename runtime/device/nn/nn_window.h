/*
 * The window arithmetic of the convolutions and pools (private to
 * runtime/device), in one place for the host kernels (C) and the CUDA
 * kernels (CUDA C++, where these are host and device functions), so that
 * both count outputs and clip windows alike.
 *
 * Along one axis: an input of n elements, padding p0 before it and p1
 * after it, a kernel of k taps d apart (dilation d; the window spans
 * d (k - 1) + 1 elements), stride s.  All values are element counts; k, d
 * and s are at least 1 (the ops' infer checks them).
 */
#ifndef ACCELRT_NN_WINDOW_H
#define ACCELRT_NN_WINDOW_H

#include <stdint.h>

#ifdef __CUDACC__
#define NN_WINDOW_FN static __host__ __device__ __forceinline__
#else
#define NN_WINDOW_FN static inline
#endif

/* The number of outputs (PyTorch's Conv2d and MaxPool2d arithmetic, floor
 * mode): 0 when the dilated kernel does not fit in the padded input. */
NN_WINDOW_FN int64_t nn_window_out(int64_t n, int64_t k, int64_t s, int64_t p0, int64_t p1,
                                   int64_t d) {
  const int64_t span = n + p0 + p1 - d * (k - 1) - 1;
  return span < 0 ? 0 : span / s + 1;
}

/* A window starting at x0 (negative when it starts in the padding): the
 * first tap i with x0 + i d >= 0 ... */
NN_WINDOW_FN int64_t nn_window_first(int64_t x0, int64_t d) {
  return x0 < 0 ? (-x0 + d - 1) / d : 0;
}

/* ... and the end of the taps with x0 + i d < n, at most k: the taps
 * inside the input are [nn_window_first, nn_window_end). */
NN_WINDOW_FN int64_t nn_window_end(int64_t x0, int64_t d, int64_t k, int64_t n) {
  const int64_t e = n - x0 <= 0 ? 0 : (n - x0 + d - 1) / d;
  return e < k ? e : k;
}

#undef NN_WINDOW_FN

#endif /* ACCELRT_NN_WINDOW_H */
