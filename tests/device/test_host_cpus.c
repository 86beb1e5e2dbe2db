/* The CPUs a process was given and the default thread count
 * (ar_host_cpus, runtime/device/host/host_cpus.c): the order of the
 * sources, the cap at the affinity mask, and cgroup v2 cpu.max read from a
 * replayed tree. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accelrt/device.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char root[256];

static void put(const char *rel, const char *text) {
  char path[512], dir[600];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  snprintf(dir, sizeof dir, "mkdir -p \"$(dirname '%s')\"", path);
  assert_int_equal(system(dir), 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int setup(void **state) {
  (void)state;
  snprintf(root, sizeof root, "/tmp/accelrt-cpus-XXXXXX");
  unsetenv("OMP_NUM_THREADS");
  unsetenv("SLURM_CPUS_PER_TASK");
  return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  return system(cmd) == 0 ? 0 : -1;
}

static int mask_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

static void test_sources(void **state) {
  (void)state;
  ar_host_cpus c;
  int n = mask_cpus();
  assert_int_equal(ar_host_cpus_get_at(root, &c), AR_OK);
  assert_int_equal(c.cpus, n);
  assert_true(c.threads >= 1 && c.threads <= n && c.threads == c.cores);
  assert_non_null(strstr(c.source, "affinity mask"));
  setenv("SLURM_CPUS_PER_TASK", "1", 1);
  assert_int_equal(ar_host_cpus_get_at(root, &c), AR_OK);
  assert_int_equal(c.threads, 1);
  assert_non_null(strstr(c.source, "SLURM_CPUS_PER_TASK=1"));
  /* OMP_NUM_THREADS wins over Slurm; a list's first number counts. */
  setenv("OMP_NUM_THREADS", "1,4", 1);
  assert_int_equal(ar_host_cpus_get_at(root, &c), AR_OK);
  assert_int_equal(c.threads, 1);
  assert_non_null(strstr(c.source, "OMP_NUM_THREADS=1"));
  /* Never past the mask. */
  setenv("OMP_NUM_THREADS", "4096", 1);
  assert_int_equal(ar_host_cpus_get_at(root, &c), AR_OK);
  assert_int_equal(c.threads, n);
  assert_non_null(strstr(c.source, "capped"));
  /* Garbage is ignored. */
  setenv("OMP_NUM_THREADS", "lots", 1);
  unsetenv("SLURM_CPUS_PER_TASK");
  assert_int_equal(ar_host_cpus_get_at(root, &c), AR_OK);
  assert_int_equal(c.threads, c.cores);
  unsetenv("OMP_NUM_THREADS");
  /* Asked-for counts: capped, 0 takes the default. */
  assert_int_equal(ar_host_cpus_cap(&c, 0), c.threads);
  assert_int_equal(ar_host_cpus_cap(&c, 1), 1);
  assert_int_equal(ar_host_cpus_cap(&c, 100000), n);
}

static void test_cgroup_cpu_max(void **state) {
  (void)state;
  /* Half a CPU for the job's cgroup, none set above it. */
  put("proc/self/cgroup", "0::/jobs/one\n");
  put("sys/fs/cgroup/jobs/one/cpu.max", "50000 100000\n");
  put("sys/fs/cgroup/jobs/cpu.max", "max 100000\n");
  ar_host_cpus c;
  assert_int_equal(ar_host_cpus_get_at(root, &c), AR_OK);
  assert_true(c.cgroup_cpus > 0.49 && c.cgroup_cpus < 0.51);
  assert_int_equal(c.threads, 1);
  /* Under a one-core mask the mask is already the tighter limit. */
  if (c.cores > 1)
    assert_non_null(strstr(c.source, "cpu.max"));
  else
    assert_non_null(strstr(c.source, "affinity mask"));
  /* An ancestor's tighter limit counts too; the lowest wins. */
  put("sys/fs/cgroup/jobs/one/cpu.max", "max 100000\n");
  put("sys/fs/cgroup/jobs/cpu.max", "150000 100000\n");
  assert_int_equal(ar_host_cpus_get_at(root, &c), AR_OK);
  assert_true(c.cgroup_cpus > 1.49 && c.cgroup_cpus < 1.51);
  assert_int_equal(c.threads, c.cores < 2 ? c.cores : 2);
  /* No limit anywhere. */
  put("sys/fs/cgroup/jobs/cpu.max", "max 100000\n");
  assert_int_equal(ar_host_cpus_get_at(root, &c), AR_OK);
  assert_true(c.cgroup_cpus == 0);
  assert_int_equal(c.threads, c.cores);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sources),
      cmocka_unit_test(test_cgroup_cpu_max),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
