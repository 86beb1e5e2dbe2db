/*
 * bench/cnn/conv_split.c: does splitting the batch between the threads pay
 * for the ResNet-20's convolutions?  For each conv shape of
 * configs/fashion-resnet.yaml (batch 128, Fashion-MNIST's 28x28) and each of
 * forward (training), backward data and backward weights, it times
 *   2thr:   one oneDNN primitive made and run with 2 OpenMP threads on the
 *           whole batch (what runtime/device/host/nn_conv.c does);
 *   2x1thr: two primitives made with 1 thread, one per half batch, run side
 *           by side from an `omp parallel` of 2 threads (backward weights:
 *           plus summing the two partial weight gradients);
 *   1thr:   one primitive, 1 thread, the whole batch (for the 2-thread
 *           efficiency, eff2 = 1thr / (2 x 2thr)).
 * Layouts are what the primitives choose (format_tag_any), scratchpads in
 * user mode as in nn_conv.c; reorders are not timed.  Each figure is the
 * fastest of REPS alternating runs; the totals weight each shape by how
 * often the network has it.  COLD 1 streams 64 MiB through the cache before
 * each timed call (activations come from memory in a training iteration).
 *
 *   gcc -O2 -fopenmp -Wall -Wextra -o /tmp/conv_split bench/cnn/conv_split.c -ldnnl
 *   /tmp/conv_split [REPS=20] [BATCH=128] [COLD=0]
 *
 * A one-off measurement tool, not part of the build; the figures it gave
 * are in bench/cnn/README.md ("Splitting the batch between the threads").
 */
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                                      \
  do {                                                                                             \
    dnnl_status_t s_ = (x);                                                                        \
    if (s_ != dnnl_success) {                                                                      \
      fprintf(stderr, "conv_split: %s failed (status %d)\n", #x, (int)s_);                         \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

enum { FWD, BWD_DATA, BWD_WEIGHTS };

typedef struct shape {
  const char *name;
  int c, h, o, k, stride, pad, count;
} shape;

/* One primitive with its arguments (memories it allocates) and stream. */
typedef struct job {
  dnnl_primitive_t p;
  dnnl_stream_t s;
  dnnl_exec_arg_t args[4];
  int n;
} job;

static dnnl_engine_t eng;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Memory of md, filled with small non-zero values (touched pages, no
 * denormals). */
static dnnl_memory_t filled(const dnnl_memory_desc_t *md) {
  dnnl_memory_t m;
  void *h;
  CK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
  CK(dnnl_memory_get_data_handle(m, &h));
  float *f = h;
  for (size_t i = 0, n = dnnl_memory_desc_get_size(md) / sizeof(float); i < n; i++)
    f[i] = (float)((i * 7919) % 13) * 0.01f - 0.05f;
  return m;
}

static void add_arg(job *j, const_dnnl_primitive_desc_t pd, int arg, dnnl_query_t q) {
  j->args[j->n++] = (dnnl_exec_arg_t){arg, filled(dnnl_primitive_desc_query_md(pd, q, 0))};
}

/* The primitive of `pass` on batch n, made while OpenMP has `threads`
 * threads (oneDNN sizes its work split then). */
static void job_init(job *j, int pass, int threads, int n, const shape *sh) {
  omp_set_num_threads(threads);
  const int ho = (sh->h + 2 * sh->pad - sh->k) / sh->stride + 1;
  dnnl_dims_t xd = {n, sh->c, sh->h, sh->h}, yd = {n, sh->o, ho, ho};
  dnnl_dims_t wd = {sh->o, sh->c, sh->k, sh->k}, st = {sh->stride, sh->stride};
  dnnl_dims_t pad = {sh->pad, sh->pad};
  dnnl_memory_desc_t x, y, w;
  CK(dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_format_tag_any));
  dnnl_primitive_attr_t attr;
  CK(dnnl_primitive_attr_create(&attr));
  CK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  dnnl_convolution_desc_t fd, d;
  dnnl_primitive_desc_t fpd, pd;
  CK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &x, &w,
                                        NULL, &y, st, pad, pad));
  CK(dnnl_primitive_desc_create(&fpd, &fd, attr, eng, NULL));
  pd = fpd;
  if (pass == BWD_DATA)
    CK(dnnl_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, &x, &w, &y, st, pad,
                                                pad));
  if (pass == BWD_WEIGHTS)
    CK(dnnl_convolution_backward_weights_desc_init(&d, dnnl_convolution_direct, &x, &w, NULL, &y,
                                                   st, pad, pad));
  if (pass != FWD)
    CK(dnnl_primitive_desc_create(&pd, &d, attr, eng, fpd));
  CK(dnnl_primitive_create(&j->p, pd));
  j->n = 0;
  if (pass == FWD) {
    add_arg(j, pd, DNNL_ARG_SRC, dnnl_query_src_md);
    add_arg(j, pd, DNNL_ARG_WEIGHTS, dnnl_query_weights_md);
    add_arg(j, pd, DNNL_ARG_DST, dnnl_query_dst_md);
  } else if (pass == BWD_DATA) {
    add_arg(j, pd, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md);
    add_arg(j, pd, DNNL_ARG_WEIGHTS, dnnl_query_weights_md);
    add_arg(j, pd, DNNL_ARG_DIFF_SRC, dnnl_query_diff_src_md);
  } else {
    add_arg(j, pd, DNNL_ARG_SRC, dnnl_query_src_md);
    add_arg(j, pd, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md);
    add_arg(j, pd, DNNL_ARG_DIFF_WEIGHTS, dnnl_query_diff_weights_md);
  }
  add_arg(j, pd, DNNL_ARG_SCRATCHPAD, dnnl_query_scratchpad_md);
  CK(dnnl_stream_create(&j->s, eng, dnnl_stream_default_flags));
  if (pd != fpd)
    dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_desc_destroy(fpd);
  dnnl_primitive_attr_destroy(attr);
}

static void job_run(job *j) {
  CK(dnnl_primitive_execute(j->p, j->s, j->n, j->args));
  CK(dnnl_stream_wait(j->s));
}

static void job_fini(job *j) {
  for (int i = 0; i < j->n; i++)
    dnnl_memory_destroy(j->args[i].memory);
  dnnl_stream_destroy(j->s);
  dnnl_primitive_destroy(j->p);
}

static float *job_data(const job *j, int i, size_t *count) {
  void *h;
  const dnnl_memory_desc_t *md;
  CK(dnnl_memory_get_data_handle(j->args[i].memory, &h));
  CK(dnnl_memory_get_memory_desc(j->args[i].memory, &md));
  *count = dnnl_memory_desc_get_size(md) / sizeof(float);
  return h;
}

static char *flush_buf;
#define FLUSH_BYTES ((size_t)64 << 20)

static void flush(void) {
  if (flush_buf)
    for (size_t i = 0; i < FLUSH_BYTES; i += 64)
      flush_buf[i]++;
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 20, batch = argc > 2 ? atoi(argv[2]) : 128;
  const int cold = argc > 3 ? atoi(argv[3]) : 0;
  if (reps < 1 || batch < 2 || batch % 2) {
    fprintf(stderr, "usage: conv_split [REPS>=1] [BATCH, even >=2] [COLD 0|1]\n");
    return 2;
  }
  if (cold && !(flush_buf = calloc(FLUSH_BYTES, 1)))
    return 1;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  static const shape shapes[] = {
      {"stem 1->16 28", 1, 28, 16, 3, 1, 1, 1},
      {"s1 16->16 28", 16, 28, 16, 3, 1, 1, 6},
      {"s2d 16->32 s2", 16, 28, 32, 3, 2, 1, 1},
      {"proj 16->32 1x1 s2", 16, 28, 32, 1, 2, 0, 1},
      {"s2 32->32 14", 32, 14, 32, 3, 1, 1, 5},
      {"s3d 32->64 s2", 32, 14, 64, 3, 2, 1, 1},
      {"proj 32->64 1x1 s2", 32, 14, 64, 1, 2, 0, 1},
      {"s3 64->64 7", 64, 7, 64, 3, 1, 1, 5},
  };
  static const char *pass_name[] = {"fwd", "bwd_d", "bwd_w"};
  double total[3][3] = {{0}}; /* pass x (2thr, 2x1thr, 1thr) */
  printf("%-20s %-6s %8s %8s %6s %8s %5s  (ms; fastest of %d, batch %d, cold %d)\n", "shape",
         "pass", "2thr", "2x1thr", "gain", "1thr", "eff2", reps, batch, cold);
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int pass = 0; pass < 3; pass++) {
      const shape *sh = &shapes[si];
      job whole, one, half[2];
      job_init(&whole, pass, 2, batch, sh);
      job_init(&one, pass, 1, batch, sh);
      for (int t = 0; t < 2; t++)
        job_init(&half[t], pass, 1, batch / 2, sh);
      double best[3] = {1e9, 1e9, 1e9};
      for (int r = -2; r < reps; r++) { /* two warm-up rounds */
        double t[3];
        omp_set_num_threads(2);
        flush();
        double t0 = now();
        job_run(&whole);
        t[0] = now() - t0;
        flush();
        t0 = now();
#pragma omp parallel num_threads(2)
        job_run(&half[omp_get_thread_num()]);
        if (pass == BWD_WEIGHTS) { /* the two partial gradients, summed */
          size_t n;
          float *g0 = job_data(&half[0], 2, &n), *g1 = job_data(&half[1], 2, &n);
          for (size_t i = 0; i < n; i++)
            g0[i] += g1[i];
        }
        t[1] = now() - t0;
        omp_set_num_threads(1);
        flush();
        t0 = now();
        job_run(&one);
        t[2] = now() - t0;
        for (int i = 0; i < 3 && r >= 0; i++)
          best[i] = t[i] < best[i] ? t[i] : best[i];
      }
      printf("%-20s %-6s %8.3f %8.3f %6.2f %8.3f %4.0f%%\n", sh->name, pass_name[pass],
             best[0] * 1e3, best[1] * 1e3, best[0] / best[1], best[2] * 1e3,
             100 * best[2] / (2 * best[0]));
      for (int i = 0; i < 3; i++)
        total[pass][i] += best[i] * sh->count;
      job_fini(&whole);
      job_fini(&one);
      job_fini(&half[0]);
      job_fini(&half[1]);
    }
  double all[2] = {0, 0};
  for (int p = 0; p < 3; p++) {
    printf("network %-6s 2thr %7.2f ms, 2x1thr %7.2f ms, gain %.2f; 1thr %7.2f ms, eff2 %.0f%%\n",
           pass_name[p], total[p][0] * 1e3, total[p][1] * 1e3, total[p][0] / total[p][1],
           total[p][2] * 1e3, 100 * total[p][2] / (2 * total[p][0]));
    all[0] += total[p][0];
    all[1] += total[p][1];
  }
  printf("network all    2thr %7.2f ms, 2x1thr %7.2f ms, gain %.2f\n", all[0] * 1e3, all[1] * 1e3,
         all[0] / all[1]);
  free(flush_buf);
  return 0;
}
