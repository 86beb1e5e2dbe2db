/*
 * CUDA kernel of BATCHNORM (group "conv"), with the semantics of
 * runtime/device/host/nn_bnorm.c: one block per channel computes the batch
 * mean and biased variance in double, updates the running statistics,
 * then normalises the channel (evaluation: the running statistics); the
 * backward reduces sum g and sum g (x - mean) per channel the same way and
 * writes dx, dgamma and dbeta.  The fused relu's mask comes from x as on
 * the host.  No workspace.
 */
#include "cuda/cuda_nn.h"

#include <math.h>

/* ---- BATCHNORM ----------------------------------------------------------- */

typedef struct bn_g {
  int64_t N, C, S; /* x seen as (N, C, S) */
  float eps, momentum;
  double unbias; /* the running variance's factor on the biased one */
  bool relu, train;
} bn_g;

static bn_g bn_geom(const ar_nn_args *a) {
  const ar_shape *xs = &a->in[0].shape;
  bn_g g;
  g.N = xs->d[0];
  g.C = xs->d[1];
  g.S = xs->nd == 4 ? xs->d[2] * xs->d[3] : 1;
  g.eps = a->attr->eps;
  g.momentum = a->attr->momentum;
  const int64_t m = g.N * g.S;
  g.unbias = a->attr->var_biased ? 1.0 : (double)m / (double)(m - 1 > 0 ? m - 1 : 1);
  g.relu = a->attr->act == AR_ACT_RELU;
  g.train = a->training;
  return g;
}

/* gamma[c] / sqrt(var[c] + eps), as the host rounds it. */
static __device__ __forceinline__ float bn_scale(float gamma, float var, float eps) {
  return (float)((double)gamma * (1.0 / sqrt((double)var + (double)eps)));
}

/* One block per channel c; element k of the channel (k < N S) is
 * x[(n C + c) S + s] with n = k / S, s = k % S. */
static __global__ void bn_fwd_k(bn_g g, const float *x, const float *gamma, const float *beta,
                                float *rm, float *rv, float *mean_aux, float *var_aux,
                                float *y) {
  const int64_t c = blockIdx.x, m = g.N * g.S;
  float mean, var;
  if (g.train) {
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x)
      s += (double)x[(k / g.S * g.C + c) * g.S + k % g.S];
    const double mu = nn_block_sum(s) / (double)m;
    double q = 0.0;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      const double d = (double)x[(k / g.S * g.C + c) * g.S + k % g.S] - mu;
      q += d * d;
    }
    const double v = nn_block_sum(q) / (double)m;
    mean = (float)mu;
    var = (float)v;
    if (threadIdx.x == 0) {
      mean_aux[c] = mean;
      var_aux[c] = var;
      rm[c] = (1.0f - g.momentum) * rm[c] + g.momentum * mean;
      rv[c] = (1.0f - g.momentum) * rv[c] + g.momentum * (float)((double)var * g.unbias);
    }
  } else {
    mean = rm[c];
    var = rv[c];
  }
  const float scale = bn_scale(gamma[c], var, g.eps), b = beta[c];
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = (k / g.S * g.C + c) * g.S + k % g.S;
    const float v = (x[i] - mean) * scale + b;
    y[i] = g.relu ? (v > 0.0f ? v : 0.0f) : v;
  }
}

/* One block per channel: sg = sum g, sgx = sum g (x - mean) (g masked by
 * the relu's pre-activation), then dgamma, dbeta and dx = A g + B (x -
 * mean) + D as on the host. */
static __global__ void bn_bwd_k(bn_g g, const float *x, const float *gamma, const float *beta,
                                const float *gy, const float *mean_aux, const float *var_aux,
                                float *dx, float *dgamma, float *dbeta) {
  const int64_t c = blockIdx.x, m = g.N * g.S;
  const float mean = mean_aux[c], var = var_aux[c];
  const float scale = bn_scale(gamma[c], var, g.eps), b = beta[c];
  double s1 = 0.0, s2 = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = (k / g.S * g.C + c) * g.S + k % g.S;
    const float xc = x[i] - mean;
    const float gv = g.relu && !(xc * scale + b > 0.0f) ? 0.0f : gy[i];
    s1 += (double)gv;
    s2 += (double)(gv * xc);
  }
  const double sg = nn_block_sum(s1), sgx = nn_block_sum(s2);
  const double rs = 1.0 / sqrt((double)var + (double)g.eps), gr = (double)gamma[c] * rs;
  if (threadIdx.x == 0) {
    dgamma[c] = (float)(sgx * rs);
    dbeta[c] = (float)sg;
  }
  if (!dx)
    return;
  const float A = (float)gr, B = (float)(-gr * rs * rs * sgx / (double)m),
              D = (float)(-gr * sg / (double)m);
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = (k / g.S * g.C + c) * g.S + k % g.S;
    const float xc = x[i] - mean;
    const float gv = g.relu && !(xc * scale + b > 0.0f) ? 0.0f : gy[i];
    dx[i] = A * gv + B * xc + D;
  }
}

static void bn_forward(void *state, ar_nn_args *a) {
  (void)state;
  const bn_g g = bn_geom(a);
  NN_LAUNCH_ROWS(a, g.C, "nn batchnorm forward", bn_fwd_k, g, (const float *)a->in[0].p,
                 (const float *)a->param[0].p, (const float *)a->param[1].p,
                 (float *)a->state[0].p, (float *)a->state[1].p,
                 (float *)(g.train ? a->aux[0].p : NULL),
                 (float *)(g.train ? a->aux[1].p : NULL), (float *)a->out[0].p);
}

static void bn_backward(void *state, ar_nn_args *a) {
  (void)state;
  const bn_g g = bn_geom(a);
  NN_LAUNCH_ROWS(a, g.C, "nn batchnorm backward", bn_bwd_k, g, (const float *)a->in[0].p,
                 (const float *)a->param[0].p, (const float *)a->param[1].p,
                 (const float *)a->gout[0].p, (const float *)a->aux[0].p,
                 (const float *)a->aux[1].p, (float *)a->gin[0].p, (float *)a->gparam[0].p,
                 (float *)a->gparam[1].p);
}

void ar__cuda_nn_bnorm_register(ar_nn_kernel *table) {
  table[AR_NN_BATCHNORM].forward = bn_forward;
  table[AR_NN_BATCHNORM].backward = bn_backward;
}
