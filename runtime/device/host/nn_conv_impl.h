/*
 * Inside the host kernels of the nn ops in group "conv" (private to
 * runtime/device/host): the three files that hold them and what they
 * share.
 *
 *   nn_conv.c   CONV2D (oneDNN, through nn_dnnl.h), and the group's
 *               register function;
 *   nn_pool.c   MAXPOOL, AVGPOOL, GAVGPOOL (native C and OpenMP on NCHW);
 *   nn_bnorm.c  BATCHNORM (native C and OpenMP on NCHW or (N,C)).
 *
 * include/accelrt/nn.h states each op's contract.  The native kernels run
 * on at most a->threads OpenMP threads, allocate nothing, and give the same
 * bits whatever the thread count: work is split by (n, c) planes or by
 * channels, and every sum is taken by one thread in a fixed order.
 */
#ifndef ACCELRT_NN_CONV_IMPL_H
#define ACCELRT_NN_CONV_IMPL_H

#include "nn/nn_impl.h"

#include <stdint.h>
#include <stdio.h>

/* Below this many elements of work a native kernel runs on the calling
 * thread alone (waking the team costs more), as PAR_MIN_WORK in
 * host_kernels.c. */
#define AR__NN_CONV_PAR_MIN ((int64_t)1 << 15)

static inline int ar__nn_conv_team(const ar_nn_args *a, int64_t work) {
  return a->threads > 1 && work >= AR__NN_CONV_PAR_MIN ? a->threads : 1;
}

/* Registration of the pooling and batch normalisation kernels (called by
 * ar__nn_host_conv_register: one group, three files). */
void ar__nn_host_pool_register(ar_nn_kernel *table);
void ar__nn_host_bnorm_register(ar_nn_kernel *table);

/* "3" for a square pair, "3x5" otherwise, into buf. */
static inline const char *ar__nn_pair_str(const int64_t *v, char *buf, size_t n) {
  if (v[0] == v[1])
    snprintf(buf, n, "%lld", (long long)v[0]);
  else
    snprintf(buf, n, "%lldx%lld", (long long)v[0], (long long)v[1]);
  return buf;
}

/* "1" when the four paddings agree, else "t,l,b,r (top,left,bottom,right)". */
static inline const char *ar__nn_pad_str(const int64_t *pad, char *buf, size_t n) {
  if (pad[0] == pad[1] && pad[1] == pad[2] && pad[2] == pad[3])
    snprintf(buf, n, "%lld", (long long)pad[0]);
  else
    snprintf(buf, n, "%lld,%lld,%lld,%lld (top,left,bottom,right)", (long long)pad[0],
             (long long)pad[1], (long long)pad[2], (long long)pad[3]);
  return buf;
}

#endif
