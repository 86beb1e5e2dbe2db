/* The inner loops of the sparse kernels, compiled once per instruction set
 * (kernels_portable.c, kernels_avx2.c, kernels_avx512.c include this file
 * with their own -march) and chosen at run time (kernels.c,
 * ar_lsh_isa_set).  Each file defines AR__ISA_TABLE as the name of its
 * table.  The loops are plain C under `omp simd`: the compiler vectorises
 * them for the file's instruction set, so every variant computes the same
 * sums in possibly different association (results agree to float
 * tolerance, tested in tests/lsh/test_isa.c). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lsh_impl.h"

#if defined(__GNUC__)
/* Sixteen running sums in one vector, folded in halves at the end: under
 * `omp simd reduction` the compilers spilled the vector and added its lanes
 * one after another (16 dependent adds, a third of a 64-wide dot's time
 * once its row is in cache), and an array of sums is not kept in
 * registers.  Vector extensions of GCC and Clang; each file's -march
 * decides the registers (one zmm, two ymm or four xmm). */
typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

static float dot_dense(const float *restrict w, const float *restrict x, uint32_t in) {
  v16f acc = {0.0f};
  uint32_t j = 0;
  for (; j + 16 <= in; j += 16) {
    v16f a, b;
    memcpy(&a, w + j, sizeof a);
    memcpy(&b, x + j, sizeof b);
    acc += a * b;
  }
  v8f h8[2];
  memcpy(h8, &acc, sizeof h8);
  const v8f s8 = h8[0] + h8[1];
  v4f h4[2];
  memcpy(h4, &s8, sizeof h4);
  const v4f s4 = h4[0] + h4[1];
  float s = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  for (; j < in; j++)
    s += w[j] * x[j];
  return s;
}
#else
static float dot_dense(const float *restrict w, const float *restrict x, uint32_t in) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (uint32_t j = 0; j < in; j++)
    s += w[j] * x[j];
  return s;
}
#endif

static float dot_sparse(const float *restrict w, const uint32_t *restrict idx,
                        const float *restrict val, size_t nnz) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (size_t k = 0; k < nnz; k++)
    s += w[idx[k]] * val[k];
  return s;
}

/* gw += g * x and, when dx, dx += g * w, over a dense row. */
static void axpy_dense(float g, const float *restrict x, const float *restrict w,
                       float *restrict gw, float *restrict dx, uint32_t in) {
  if (dx) {
#pragma omp simd
    for (uint32_t j = 0; j < in; j++) {
      gw[j] += g * x[j];
      dx[j] += g * w[j];
    }
  } else {
#pragma omp simd
    for (uint32_t j = 0; j < in; j++)
      gw[j] += g * x[j];
  }
}

/* The same at the input's non-zeros; dx is aligned with idx.  The indices
 * are distinct (a documented requirement), so the scatter has no conflict
 * between vector lanes. */
static void axpy_sparse(float g, const uint32_t *restrict idx, const float *restrict val,
                        const float *restrict w, float *restrict gw, float *restrict dx,
                        size_t nnz) {
  if (dx) {
#pragma omp simd
    for (size_t k = 0; k < nnz; k++) {
      gw[idx[k]] += g * val[k];
      dx[k] += g * w[idx[k]];
    }
  } else {
#pragma omp simd
    for (size_t k = 0; k < nnz; k++)
      gw[idx[k]] += g * val[k];
  }
}

/* One row of the sparse Adam step (see ar_lsh_adam_create): d1, d2 fold the
 * skipped steps' decay into this step's; lr_t and isq2 the bias
 * corrections; c (catch_up: lr_t * S_k, else 0) moves w first by the
 * skipped steps' moves from the moments as they were; the gradient row is
 * zeroed for the next batch. */
static void adam_row(float *restrict w, float *restrict g, float *restrict m,
                     float *restrict v, uint32_t in, float d1, float d2, float b1, float b2,
                     float lr_t, float isq2, float eps, float c) {
  if (c != 0.0f) {
#pragma omp simd
    for (uint32_t j = 0; j < in; j++) {
      const float gj = g[j], m0 = m[j], v0 = v[j];
      const float mj = d1 * m0 + (1.0f - b1) * gj;
      const float vj = d2 * v0 + (1.0f - b2) * gj * gj;
      m[j] = mj;
      v[j] = vj;
      w[j] -= c * m0 / (sqrtf(v0) * isq2 + eps) + lr_t * mj / (sqrtf(vj) * isq2 + eps);
      g[j] = 0.0f;
    }
    return;
  }
#pragma omp simd
  for (uint32_t j = 0; j < in; j++) {
    const float gj = g[j];
    const float mj = d1 * m[j] + (1.0f - b1) * gj;
    const float vj = d2 * v[j] + (1.0f - b2) * gj * gj;
    m[j] = mj;
    v[j] = vj;
    w[j] -= lr_t * mj / (sqrtf(vj) * isq2 + eps);
    g[j] = 0.0f;
  }
}

const ar__lsh_isa AR__ISA_TABLE = {AR__ISA_NAME, dot_dense, dot_sparse, axpy_dense,
                                   axpy_sparse, adam_row};
