/*
 * The element arithmetic of the typed ops (private to runtime/device), in
 * one place for the host kernels (C: nn_eltwise.c, nn_typed.c) and the
 * CUDA kernels (CUDA C++: cuda_nn_typed.cu, where these are host and
 * device functions), so that both compute every integer result and every
 * conversion alike, and the host tests check the CUDA kernels' arithmetic:
 *
 *   - integer ADD, SUB, MUL, DIV, POW of two operands of one type (i64,
 *     i32, u8), through int64 with values wrapping to the type on the
 *     store, as NumPy's do; no division traps: x / 0 is 0 and
 *     INT64_MIN / -1 wraps;
 *   - CAST of one element between any two element types (nn.h's rule);
 *   - the element strides of a broadcast operand.
 */
#ifndef ACCELRT_NN_ELEM_H
#define ACCELRT_NN_ELEM_H

#include "accelrt/nn.h"

#include <stdint.h>

#ifdef __CUDACC__
#define NN_ELEM_FN static __host__ __device__ __forceinline__
#else
#define NN_ELEM_FN static inline
#endif

/* Element i of an integer tensor of type t (i64, i32, or u8), widened. */
NN_ELEM_FN int64_t nn_int_load(ar_dtype t, const void *p, int64_t i) {
  switch (t) {
  case AR_DT_I64:
    return ((const int64_t *)p)[i];
  case AR_DT_I32:
    return ((const int32_t *)p)[i];
  default:
    return ((const uint8_t *)p)[i];
  }
}

/* Stores v into element i, wrapped to type t (i64, i32, or u8). */
NN_ELEM_FN void nn_int_store(ar_dtype t, void *p, int64_t i, uint64_t v) {
  switch (t) {
  case AR_DT_I64:
    ((int64_t *)p)[i] = (int64_t)v;
    break;
  case AR_DT_I32:
    ((int32_t *)p)[i] = (int32_t)(uint32_t)v;
    break;
  default:
    ((uint8_t *)p)[i] = (uint8_t)v;
  }
}

/* x^z by squaring, wrapping; a negative exponent gives 1/x^-z truncated
 * (0 unless x is 1 or -1). */
NN_ELEM_FN uint64_t nn_int_pow(int64_t x, int64_t z) {
  if (z < 0)
    return x == 1 ? 1u : x == -1 ? ((-z) % 2 ? (uint64_t)-1 : 1u) : 0u;
  uint64_t r = 1, b = (uint64_t)x;
  while (z) {
    if (z & 1)
      r *= b;
    b *= b;
    z >>= 1;
  }
  return r;
}

/* op (ADD, SUB, MUL, DIV, POW) of two widened integers, wrapping. */
NN_ELEM_FN uint64_t nn_int_apply(int op, int64_t x, int64_t z) {
  switch (op) {
  case AR_NN_ADD:
    return (uint64_t)x + (uint64_t)z;
  case AR_NN_SUB:
    return (uint64_t)x - (uint64_t)z;
  case AR_NN_MUL:
    return (uint64_t)x * (uint64_t)z;
  case AR_NN_DIV:
    return z == 0 ? 0u : z == -1 ? 0u - (uint64_t)x : (uint64_t)(x / z);
  default:
    return nn_int_pow(x, z);
  }
}

/* A float as an integer: truncated toward zero, NaN 0, saturated at
 * int64's range (C leaves the conversion of such values undefined). */
NN_ELEM_FN int64_t nn_float_to_int(double v) {
  if (v != v)
    return 0;
  if (v >= 9223372036854775807.0)
    return INT64_MAX;
  if (v <= -9223372036854775808.0)
    return INT64_MIN;
  return (int64_t)v;
}

/* y[i] = x[i] converted from type `from` to type `to` (from != to):
 * float to integer truncates (nn_float_to_int) then wraps to the narrower
 * type, anything to bool is x != 0 (NaN is true, as NumPy's astype). */
NN_ELEM_FN void nn_cast_elem(ar_dtype from, ar_dtype to, const void *x, void *y, int64_t i) {
  double f = 0;
  int64_t v = 0;
  switch (from) {
  case AR_DT_F32:
    f = ((const float *)x)[i];
    v = nn_float_to_int(f);
    if (to == AR_DT_BOOL)
      v = f != 0.0;
    break;
  case AR_DT_I64:
    v = ((const int64_t *)x)[i];
    break;
  case AR_DT_I32:
    v = ((const int32_t *)x)[i];
    break;
  default: /* u8, bool */
    v = ((const uint8_t *)x)[i];
    break;
  }
  if (from != AR_DT_F32)
    f = (double)v;
  switch (to) {
  case AR_DT_F32:
    ((float *)y)[i] = (float)f;
    break;
  case AR_DT_I64:
    ((int64_t *)y)[i] = v;
    break;
  case AR_DT_I32:
    ((int32_t *)y)[i] = (int32_t)(uint32_t)(uint64_t)v;
    break;
  case AR_DT_U8:
    ((uint8_t *)y)[i] = (uint8_t)(uint64_t)v;
    break;
  case AR_DT_BOOL:
    ((uint8_t *)y)[i] = v != 0;
    break;
  }
}

/* The element strides of an operand of shape `s` read at each index of
 * the output `out` (aligned at the last dims; 0 where s is broadcast or
 * lacks the dim). */
NN_ELEM_FN void nn_bcast_strides(const ar_shape *out, const ar_shape *s, int64_t *st) {
  int64_t acc = 1;
  for (int k = out->nd - 1; k >= 0; k--) {
    const int kk = k - (out->nd - s->nd);
    const int64_t ext = kk >= 0 ? s->d[kk] : 1;
    st[k] = ext == out->d[k] && ext != 1 ? acc : 0;
    acc *= ext;
  }
}

#endif /* ACCELRT_NN_ELEM_H */
