/*
 * The CPUs this process was given, and the threads a job takes by default
 * (device.h, ar_host_cpus).  Two jobs started under `taskset -c 0` and
 * `taskset -c 1`, or in two Slurm allotments, must each stay on their own
 * CPUs: the thread count comes from what the process may use, never from
 * the machine's size, and the host device pins its threads only inside the
 * inherited affinity mask (host_device.c).
 *
 * The default thread count, first match wins:
 *   OMP_NUM_THREADS (its first number), SLURM_CPUS_PER_TASK, else the
 *   physical cores with a CPU in the affinity mask, bounded by the cgroup
 *   v2 cpu.max quota (rounded up; the lowest of the cgroup and its
 *   ancestors).
 * Whatever the source, never more threads than CPUs in the mask.
 */
#define _GNU_SOURCE
#include "accelrt/device.h"

#include <hwloc.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A positive integer at the start of s (OMP_NUM_THREADS may be a list:
 * "4,2" asks 4 for the outer level), or 0. */
static int leading_int(const char *s) {
  if (!s)
    return 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || v < 1 || v > 1 << 20 || (*end && *end != ','))
    return 0;
  return (int)v;
}

/* The mask as "0-3,8". */
static void mask_list(const cpu_set_t *set, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && at < cap; c++) {
    if (!CPU_ISSET(c, set))
      continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
      e++;
    int n = e > c ? snprintf(buf + at, cap - at, "%s%d-%d", at ? "," : "", c, e)
                  : snprintf(buf + at, cap - at, "%s%d", at ? "," : "", c);
    if (n < 0 || (size_t)n >= cap - at)
      break;
    at += (size_t)n;
    c = e;
  }
}

/* Physical cores with at least one CPU of the mask (hwloc), or 0. */
static int cores_in(const cpu_set_t *set) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0)
    return 0;
  int n = 0;
  hwloc_bitmap_t mask = hwloc_bitmap_alloc();
  if (mask && hwloc_topology_load(t) == 0) {
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, set))
        hwloc_bitmap_set(mask, (unsigned)c);
    int nc = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    for (int i = 0; i < nc; i++) {
      hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, (unsigned)i);
      if (core && hwloc_bitmap_intersects(core->cpuset, mask))
        n++;
    }
  }
  hwloc_bitmap_free(mask);
  hwloc_topology_destroy(t);
  return n;
}

/* The cgroup v2 cpu.max of this process's cgroup and its ancestors, as
 * CPUs (quota / period), the lowest; 0 without a limit. */
static double cgroup_cpus(const char *root) {
  char path[1200], line[1024];
  snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  char cg[1024] = "";
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "0::", 3)) {
      snprintf(cg, sizeof cg, "%s", line + 3);
      cg[strcspn(cg, "\n")] = '\0';
    }
  fclose(f);
  if (!cg[0])
    return 0;
  double best = 0;
  for (;;) {
    snprintf(path, sizeof path, "%s/sys/fs/cgroup%s/cpu.max", root,
             strcmp(cg, "/") ? cg : "");
    FILE *m = fopen(path, "r");
    if (m) {
      char quota[32] = "";
      long long period = 0;
      if (fscanf(m, "%31s %lld", quota, &period) == 2 && strcmp(quota, "max") != 0 &&
          period > 0) {
        double cpus = atof(quota) / (double)period;
        if (cpus > 0 && (best == 0 || cpus < best))
          best = cpus;
      }
      fclose(m);
    }
    char *slash = strrchr(cg, '/');
    if (!slash || slash == cg)
      break;
    *slash = '\0';
  }
  return best;
}

/* The affinity mask the process started with, read once: the host device
 * later binds its threads (the calling one included) to single cores, and
 * the mask a job may use is the one it was given, not a thread's binding. */
static cpu_set_t start_mask;
static int start_mask_ok;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;

static void read_start_mask(void) {
  CPU_ZERO(&start_mask);
  start_mask_ok = sched_getaffinity(0, sizeof start_mask, &start_mask) == 0;
}

ar_status ar_host_cpus_get_at(const char *root, ar_host_cpus *out) {
  memset(out, 0, sizeof *out);
  pthread_once(&start_once, read_start_mask);
  cpu_set_t set = start_mask;
  if (!start_mask_ok) {
    out->cpus = out->cores = out->threads = 1;
    snprintf(out->list, sizeof out->list, "?");
    snprintf(out->source, sizeof out->source, "the affinity mask could not be read");
    return AR_UNSUPPORTED;
  }
  out->cpus = CPU_COUNT(&set);
  if (out->cpus < 1)
    out->cpus = 1;
  mask_list(&set, out->list, sizeof out->list);
  out->cores = cores_in(&set);
  if (out->cores < 1 || out->cores > out->cpus)
    out->cores = out->cpus;
  out->cgroup_cpus = cgroup_cpus(root ? root : "");
  int omp = leading_int(getenv("OMP_NUM_THREADS"));
  int slurm = leading_int(getenv("SLURM_CPUS_PER_TASK"));
  out->per_process = omp || slurm;
  if (omp) {
    out->threads = omp;
    snprintf(out->source, sizeof out->source, "OMP_NUM_THREADS=%d", omp);
  } else if (slurm) {
    out->threads = slurm;
    snprintf(out->source, sizeof out->source, "SLURM_CPUS_PER_TASK=%d", slurm);
  } else {
    out->threads = out->cores;
    snprintf(out->source, sizeof out->source, "one per core of the affinity mask");
    if (out->cgroup_cpus > 0 && ceil(out->cgroup_cpus) < out->threads) {
      out->threads = (int)ceil(out->cgroup_cpus);
      snprintf(out->source, sizeof out->source, "the cgroup's cpu.max (%.2f CPUs)",
               out->cgroup_cpus);
    }
  }
  if (out->threads > out->cpus) {
    size_t n = strlen(out->source);
    snprintf(out->source + n, sizeof out->source - n, ", capped at the %d CPU%s of the mask",
             out->cpus, out->cpus == 1 ? "" : "s");
    out->threads = out->cpus;
  }
  return AR_OK;
}

ar_status ar_host_cpus_get(ar_host_cpus *out) { return ar_host_cpus_get_at(NULL, out); }

int ar_host_cpus_cap(const ar_host_cpus *c, int asked) {
  if (asked < 1)
    return c->threads;
  return asked > c->cpus ? c->cpus : asked;
}
