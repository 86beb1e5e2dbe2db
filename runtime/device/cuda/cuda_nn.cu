/*
 * The CUDA backend's table of graph ops (include/accelrt/nn.h): filled
 * once from the kernel files, each with the ops it has; an op without an
 * entry answers AR_UNSUPPORTED at prepare (nn.c), naming the op, so a job
 * that needs it stops before its first step.
 */
#include "cuda/cuda_nn.h"

#include <pthread.h>

static ar_nn_kernel table[AR_NN_OP_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void fill(void) {
  ar__cuda_nn_conv_register(table);
  ar__cuda_nn_math_register(table);
  ar__cuda_nn_shape_register(table);
  ar__cuda_nn_attention_register(table);
  ar__cuda_nn_sparse_register(table);
  ar__cuda_nn_typed_register(table);
}

const ar_nn_kernel *ar__cuda_nn_table(ar_device *dev) {
  (void)dev;
  pthread_once(&once, fill);
  return table;
}

void ar__cuda_nn_copy(ar_nn_args *a, void *dst, const void *src, size_t bytes,
                      const char *what) {
  ar__cuda_device *d = nn_dev(a);
  if (bytes == 0 || dst == src || !ar__cuda_enter(d))
    return;
  ar__cuda_note(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                   d->stream),
                what);
}
