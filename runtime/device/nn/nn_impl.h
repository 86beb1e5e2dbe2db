/*
 * Inside the nn ops (private to runtime/device): what a backend gives for
 * one op, and the host backend's tables by group (AR_NN_OP_MAP's third
 * column names the file: runtime/device/host/nn_<group>.c).
 *
 * infer is pure (shapes only) and shared by every backend: ar_nn_infer
 * takes it from the host table.  prepare and release are optional (NULL:
 * no state, no workspace).
 */
#ifndef ACCELRT_NN_IMPL_H
#define ACCELRT_NN_IMPL_H

#include "accelrt/nn.h"

#ifdef __cplusplus
extern "C" { /* the CUDA backend's kernels (C++) use the host table too */
#endif

typedef struct ar_nn_kernel {
  ar_status (*infer)(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                     const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err);
  /* Makes the op's state for these shapes (*state may stay NULL) and says
   * its workspace; training: backward will be called. */
  ar_status (*prepare)(const ar_nn_args *a, bool training, void **state, size_t *work_bytes,
                       ar_err *err);
  void (*forward)(void *state, ar_nn_args *a);
  void (*backward)(void *state, ar_nn_args *a);
  void (*release)(void *state);
} ar_nn_kernel;

/* Each group fills its ops' entries of the table (indexed by ar_nn_op);
 * entries it leaves zeroed are ops not built yet (AR_UNSUPPORTED). */
void ar__nn_host_conv_register(ar_nn_kernel *table);
void ar__nn_host_math_register(ar_nn_kernel *table);
void ar__nn_host_shape_register(ar_nn_kernel *table);
void ar__nn_host_sparse_register(ar_nn_kernel *table);

/* The host table, filled once (thread-safe). */
const ar_nn_kernel *ar__nn_host_table(void);

/* Helpers for infer functions: a fresh sig with n_in inputs, and one
 * output of shape s (f32). */
void ar__nn_sig_init(ar_nn_sig *sig, int n_in);
void ar__nn_sig_out(ar_nn_sig *sig, const ar_shape *s, ar_dtype t);
void ar__nn_sig_param(ar_nn_sig *sig, const char *name, const ar_shape *s, ar_nn_init init,
                      bool decay);
void ar__nn_sig_state(ar_nn_sig *sig, const char *name, const ar_shape *s, ar_nn_init init);
void ar__nn_sig_aux(ar_nn_sig *sig, const ar_shape *s, ar_dtype t);
/* A shape from dims: ar__nn_shape(3, (int64_t[]){a, b, c}). */
ar_shape ar__nn_shape(int nd, const int64_t *d);

#ifdef __cplusplus
}
#endif
#endif
