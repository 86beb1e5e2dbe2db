/* The machine as hwloc sees it, the CPUs this process was given, for
 * `accelrt info` and thread counts. */
#include "accelrt/runtime.h"

#include <hwloc.h>

static int count(hwloc_topology_t t, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(t, type);
  return n < 0 ? 0 : n;
}

int ar_topology_cores(void) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0)
    return 1;
  int n = 1;
  if (hwloc_topology_load(t) == 0) {
    n = count(t, HWLOC_OBJ_CORE);
    if (n < 1)
      n = count(t, HWLOC_OBJ_PU);
  }
  hwloc_topology_destroy(t);
  return n < 1 ? 1 : n;
}

int ar_job_threads(const ar_spec *spec) {
  ar_host_cpus c;
  ar_host_cpus_get(&c);
  return ar_host_cpus_cap(&c, spec->train.threads);
}

void ar_topology_print(FILE *to) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0 || hwloc_topology_load(t) != 0) {
    fprintf(to, "topology: hwloc could not read this machine's topology\n");
    return;
  }
  fprintf(to, "topology (hwloc %s):\n", HWLOC_VERSION);
  fprintf(to, "  packages %d, cores %d, processing units %d, NUMA nodes %d\n",
          count(t, HWLOC_OBJ_PACKAGE), count(t, HWLOC_OBJ_CORE), count(t, HWLOC_OBJ_PU),
          count(t, HWLOC_OBJ_NUMANODE));
  static const struct {
    hwloc_obj_type_t type;
    const char *name;
  } caches[] = {{HWLOC_OBJ_L1CACHE, "L1d"}, {HWLOC_OBJ_L2CACHE, "L2"},
                {HWLOC_OBJ_L3CACHE, "L3"}};
  for (size_t i = 0; i < sizeof caches / sizeof caches[0]; i++) {
    int n = count(t, caches[i].type);
    if (n == 0)
      continue;
    hwloc_obj_t o = hwloc_get_obj_by_type(t, caches[i].type, 0);
    fprintf(to, "  %s: %d x %llu KiB\n", caches[i].name, n,
            o && o->attr ? (unsigned long long)(o->attr->cache.size / 1024) : 0ULL);
  }
  for (int i = 0; i < count(t, HWLOC_OBJ_NUMANODE); i++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i);
    if (o && o->attr)
      fprintf(to, "  NUMA node %d: %llu MiB\n", i,
              (unsigned long long)(o->attr->numanode.local_memory >> 20));
  }
  hwloc_topology_destroy(t);
  ar_host_cpus c;
  ar_host_cpus_get(&c);
  fprintf(to, "  this process may use CPUs %s (%d CPU%s, %d core%s); a job takes %d "
          "thread%s by default (%s)\n", c.list, c.cpus, c.cpus == 1 ? "" : "s", c.cores,
          c.cores == 1 ? "" : "s", c.threads, c.threads == 1 ? "" : "s", c.source);
  if (c.cgroup_cpus > 0)
    fprintf(to, "  cgroup cpu.max: %.2f CPUs\n", c.cgroup_cpus);
}
