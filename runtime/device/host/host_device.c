/*
 * Host device: the handle, its memory, and its threads.
 *
 * Memory is plain host memory, 64-byte aligned (one cache line, and the
 * widest vector load) so that the kernels' column slices never share a
 * cache line between threads.  The "capacity" the lanes manage on the host
 * is a budget they keep themselves; this backend only allocates.
 *
 * Threads: every op, GEMM included, runs an OpenMP team of dev->threads
 * (the num_threads clause): by default ar_host_cpus' count, which follows
 * OMP_NUM_THREADS, SLURM_CPUS_PER_TASK and the affinity mask, and never
 * more than the mask's CPUs.  OpenBLAS itself is set to one thread and
 * called once per team thread.  With opts->pin and a team of one thread
 * per core of the inherited mask, thread i of the team is bound with hwloc
 * once at open to the i-th core that has CPUs in the mask (to those CPUs
 * only); a smaller team stays unpinned, as one of several processes
 * sharing the mask would otherwise stack on its first cores.  libgomp keeps the team's threads for
 * later parallel regions of the opening thread, so the binding holds for
 * every op issued from that thread; ops issued from another thread run on
 * that thread's own (unpinned) team.  At close the threads get their
 * previous binding back.
 */
#include "host/host_device.h"
#include "host/host_kernels.h"
#include "nn/nn_impl.h"

#include <omp.h>
#include <string.h>

/* OpenBLAS extensions (declared here so the build does not depend on which
 * cblas.h the include path finds). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);

/* ---- memory ------------------------------------------------------------------ */

static ar_status host_alloc(ar_device *dev, size_t bytes, void **out) {
  void *p = ar_aligned_alloc(64, bytes);
  if (!p)
    return ar_errf(&dev->err, AR_NOMEM,
                   "host device: cannot allocate %zu bytes (%.1f MiB) of host "
                   "memory; lower train.batch or the model size, or free "
                   "memory on this machine",
                   bytes, (double)bytes / (1024.0 * 1024.0));
  *out = p;
  return AR_OK;
}

static void host_free(ar_device *dev, void *ptr) {
  (void)dev;
  ar_free(ptr);
}

static ar_status host_copy(ar_device *dev, void *dst, const void *src,
                           size_t bytes) {
  if (bytes == 0)
    return AR_OK;
  if (!dst || !src)
    return ar_errf(&dev->err, AR_INVALID,
                   "host device: copy of %zu bytes with a NULL %s pointer",
                   bytes, dst ? "source" : "destination");
  memmove(dst, src, bytes);
  return AR_OK;
}

/* ---- threads -------------------------------------------------------------------- */

/* Binds thread i of the calling thread's OpenMP team to the i-th core
 * that has a CPU in the inherited affinity mask (taskset, a Slurm
 * allotment), on that core's CPUs of the mask only: the team never leaves
 * the CPUs this process was given.  Only a team of one thread per core of
 * the mask is bound; a smaller or larger one, or one the topology cannot
 * place, runs unpinned inside the mask (as inherited) with a notice. */
static void pin_team(ar__host_device *h) {
  const int threads = h->base.threads;
  if (!h->topo) {
    ar_log(AR_LOG_INFO, "host device: hwloc could not read the machine "
                        "topology; %d threads run unpinned", threads);
    return;
  }
  h->unpinned = hwloc_bitmap_alloc();
  if (!h->unpinned ||
      hwloc_get_cpubind(h->topo, h->unpinned, HWLOC_CPUBIND_THREAD) != 0) {
    ar_log(AR_LOG_INFO, "host device: cannot read this thread's CPU binding; "
                        "threads run unpinned");
    hwloc_bitmap_free(h->unpinned);
    h->unpinned = NULL;
    return;
  }
  /* The cores inside the mask, in order. */
  hwloc_topology_t topo = h->topo;
  int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), usable = 0;
  hwloc_obj_t *cores = ar_calloc(ncores > 0 ? (size_t)ncores : 1, sizeof *cores);
  for (int i = 0; cores && i < ncores; i++) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
    if (core && hwloc_bitmap_intersects(core->cpuset, h->unpinned))
      cores[usable++] = core;
  }
  /* A team smaller than its cores stays unpinned too: it uses part of the
   * CPUs it was given and cannot know what else runs there, and pinning
   * thread i to the i-th core put every such process's team on the same
   * first cores (two one-thread jobs side by side shared core 0 and left
   * core 1 idle).  The OS places it inside the mask; `taskset` a job to
   * its own cores to pin it. */
  if (!cores || threads != usable) {
    if (!cores || threads > usable)
      ar_log(AR_LOG_INFO,
             "host device: %d threads on %d cores of this process's CPUs cannot each "
             "have a core; threads run unpinned inside them (set train.threads to %d "
             "to pin)", threads, usable, usable);
    else
      ar_log(AR_LOG_INFO,
             "host device: %d threads on %d cores of this process's CPUs run unpinned "
             "inside them (pinned when train.threads is %d, or under taskset)",
             threads, usable, usable);
    ar_free(cores);
    hwloc_bitmap_free(h->unpinned);
    h->unpinned = NULL;
    return;
  }
  int bound = 0, team = 0;
  hwloc_const_bitmap_t mask = h->unpinned;
#pragma omp parallel num_threads(threads) reduction(+ : bound)
  {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set) {
      hwloc_bitmap_and(set, cores[omp_get_thread_num()]->cpuset, mask);
      if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) == 0)
        bound++;
      hwloc_bitmap_free(set);
    }
#pragma omp single
    team = omp_get_num_threads();
  }
  ar_free(cores);
  if (bound < team)
    ar_log(AR_LOG_INFO,
           "host device: pinned %d of %d threads to cores (the others run "
           "unpinned: the OS refused the binding)",
           bound, team);
}

static void host_destroy(ar_device *dev) {
  ar__host_device *h = (ar__host_device *)dev;
  if (h->unpinned) {
    hwloc_topology_t topo = h->topo;
    hwloc_const_bitmap_t set = h->unpinned;
#pragma omp parallel num_threads(dev->threads)
    hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD);
    hwloc_bitmap_free(h->unpinned);
  }
  if (h->topo)
    hwloc_topology_destroy(h->topo);
  ar_free(h);
}

/* ---- memory query ------------------------------------------------------------ */

/* MemTotal from /proc/meminfo (Linux), falling back to hwloc's count; the
 * free figure is what this process can use (MemAvailable or its cgroup's
 * limit, ar_host_memory_get), 0 when unknown. */
static ar_status host_mem_info(ar_device *dev, ar_device_mem *out) {
  ar__host_device *h = (ar__host_device *)dev;
  uint64_t total = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kib = 0;
    while (total == 0 && fgets(line, sizeof line, f))
      if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
        total = (uint64_t)kib * 1024u;
    fclose(f);
  }
  if (total == 0 && h->topo)
    total = hwloc_get_root_obj(h->topo)->total_memory;
  ar_host_memory hm;
  ar_host_memory_get(&hm);
  out->total = total;
  out->free = hm.limit;
  out->capacity = 0; /* no arena: the lanes keep the host budget */
  out->available = 0;
  return AR_OK;
}

static const struct ar_nn_kernel *host_nn_table(ar_device *dev) {
  (void)dev;
  return ar__nn_host_table();
}

static const ar_device_ops host_ops = {
    .name = "host",
    .destroy = host_destroy,
    .alloc = host_alloc,
    .free = host_free,
    .copy_in = host_copy,
    .copy_out = host_copy,
    .sync = NULL, /* every op is synchronous: nothing to wait for */
    .fill = ar__host_fill,
    .gemm = ar__host_gemm,
    .spmm = ar__host_spmm,
    .spmm_t = ar__host_spmm_t,
    .bias_act = ar__host_bias_act,
    .act_grad = ar__host_act_grad,
    .col_sum = ar__host_col_sum,
    .softmax_xent = ar__host_softmax_xent,
    .sigmoid_bce = ar__host_sigmoid_bce,
    .topk = ar__host_topk,
    .adam = ar__host_adam,
    .sgd = ar__host_sgd,
    .bn_fold = ar__host_bn_fold,
    .mem_info = host_mem_info,
    .open_lane = NULL, /* one synchronous queue: lanes share the handle */
    .copy = host_copy, /* memmove: overlapping ranges are fine */
    .host_alloc = NULL, /* ar_malloc: staging host memory gains nothing */
    .host_free = NULL,
    .nn_table = host_nn_table,
};

/* Loads the topology of the CPUs this process may use, or returns NULL. */
static hwloc_topology_t load_topology(void) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    return NULL;
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return NULL;
  }
  return topo;
}

static int count_cores(hwloc_topology_t topo) {
  int n = topo ? hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) : 0;
  return n > 0 ? n : omp_get_num_procs();
}

ar_status ar_host_device_create(const ar_device_opts *opts, ar_device **out,
                                ar_err *err) {
  if (!out)
    return ar_errf(err, AR_INVALID, "ar_host_device_create: out is NULL");
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  if (opts)
    o = *opts;
  if (o.threads < 0)
    return ar_errf(err, AR_INVALID,
                   "host device: threads = %d; use 0 (one per core) or a "
                   "positive count",
                   o.threads);
  ar__host_device *h = ar_calloc(1, sizeof *h);
  if (!h)
    return ar_errf(err, AR_NOMEM,
                   "host device: cannot allocate its handle (%zu bytes)",
                   sizeof *h);
  h->base.ops = &host_ops;
  h->base.index = 0;
  h->base.failed = AR_OK;
  h->base.err = (ar_err)AR_ERR_INIT;
  h->topo = load_topology();
  h->cores = count_cores(h->topo);
  /* Never more threads than the CPUs this process was given. */
  ar_host_cpus cpus;
  ar_host_cpus_get(&cpus);
  h->base.threads = ar_host_cpus_cap(&cpus, o.threads);
  if (o.threads > h->base.threads)
    ar_log(AR_LOG_INFO, "host device: %d threads asked for, %d used: this process may use "
           "CPUs %s only", o.threads, h->base.threads, cpus.list);
  /* GEMM runs on the device's own OpenMP team, one single-threaded OpenBLAS
   * call per thread (see ar__host_gemm for why), so OpenBLAS's pool stays
   * at one thread.  This is process-wide, like OpenBLAS's setting itself. */
  openblas_set_num_threads(1);
  if (o.pin)
    pin_team(h);
  *out = &h->base;
  return AR_OK;
}

/* ---- description --------------------------------------------------------------- */

static const char *vector_isa(void) {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "AVX2+FMA";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__SSE2__)
  return "SSE2";
#elif defined(__ARM_NEON)
  return "NEON";
#else
  return "scalar";
#endif
}

/* The OpenMP version this file was compiled against, from _OPENMP. */
static const char *openmp_version(void) {
#if _OPENMP >= 202111
  return "5.2";
#elif _OPENMP >= 202011
  return "5.1";
#elif _OPENMP >= 201811
  return "5.0";
#elif _OPENMP >= 201511
  return "4.5";
#elif _OPENMP >= 201307
  return "4.0";
#else
  return "3.x";
#endif
}

void ar__host_describe(FILE *to) {
  hwloc_topology_t topo = load_topology();
  const char *model = NULL;
  int cores = count_cores(topo);
  int pus = topo ? hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU) : 0;
  double gib = 0.0;
  if (topo) {
    hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
    if (pkg)
      model = hwloc_obj_get_info_by_name(pkg, "CPUModel");
    gib = (double)hwloc_get_root_obj(topo)->total_memory /
          (1024.0 * 1024.0 * 1024.0);
  }
  const char *blas = openblas_get_config();
  fprintf(to,
          "host: %s, %d cores, %d hardware threads, %.1f GiB memory; kernels "
          "built for %s, OpenMP %s; BLAS: %s\n",
          model ? model : "unknown CPU", cores, pus > 0 ? pus : cores, gib,
          vector_isa(), openmp_version(), blas ? blas : "OpenBLAS");
  if (topo)
    hwloc_topology_destroy(topo);
}
