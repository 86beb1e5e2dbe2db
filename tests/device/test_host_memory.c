/* The host memory this process can use (ar_host_memory_get): captured
 * /proc and cgroup trees replayed under a temporary root, the way hwloc
 * tests topologies without the machines: cgroup v2 (a limit on an
 * ancestor wins; "max" is none; a hybrid system's unified mount), cgroup
 * v1 (the kernel's "unlimited" value), MemAvailable below the cgroup's
 * limit, no /proc/meminfo.  And this machine answers. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accelrt/device.h"

#define GIB ((uint64_t)1 << 30)
#define MIB ((uint64_t)1 << 20)

static char root[256];

/* Writes `text` to root/rel, making the folders on the way. */
static void put(const char *rel, const char *text) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  for (char *p = path + strlen(root) + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0755);
      *p = '/';
    }
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int fresh_root(void **state) {
  (void)state;
  snprintf(root, sizeof root, "/tmp/accelrt-hostmem-XXXXXX");
  assert_non_null(mkdtemp(root));
  return 0;
}

static int remove_root(void **state) {
  (void)state;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
  return 0;
}

static void meminfo(uint64_t avail) {
  char text[256];
  snprintf(text, sizeof text, "MemTotal: 33554432 kB\nMemFree: 1000 kB\nMemAvailable: %llu kB\n",
           (unsigned long long)(avail / 1024));
  put("proc/meminfo", text);
}

static void test_v2_ancestor_wins(void **state) {
  (void)state;
  meminfo(8 * GIB);
  put("proc/self/cgroup", "0::/user.slice/job/inner\n");
  put("sys/fs/cgroup/user.slice/job/inner/memory.max", "1073741824\n");
  put("sys/fs/cgroup/user.slice/job/memory.max", "536870912\n");
  put("sys/fs/cgroup/user.slice/memory.max", "max\n");
  ar_host_memory m;
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_OK);
  assert_int_equal(m.mem_available, 8 * GIB);
  assert_int_equal(m.cgroup_limit, 512 * MIB);
  assert_int_equal(m.limit, 512 * MIB);
  assert_non_null(strstr(m.cgroup_file, "user.slice/job/memory.max"));
  assert_non_null(strstr(m.source, "cgroup"));
  assert_non_null(strstr(m.source, "user.slice/job/memory.max"));
}

static void test_v2_max_is_none(void **state) {
  (void)state;
  meminfo(3 * GIB);
  put("proc/self/cgroup", "0::/a\n");
  put("sys/fs/cgroup/a/memory.max", "max\n");
  ar_host_memory m;
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_OK);
  assert_int_equal(m.cgroup_limit, UINT64_MAX);
  assert_int_equal(m.limit, 3 * GIB);
  assert_non_null(strstr(m.source, "MemAvailable"));
}

/* A container: its cgroup is the mount's root ("0::/"), whose memory.max
 * is the container's limit. */
static void test_v2_container_root(void **state) {
  (void)state;
  meminfo(64 * GIB);
  put("proc/self/cgroup", "0::/\n");
  put("sys/fs/cgroup/memory.max", "2147483648\n");
  ar_host_memory m;
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_OK);
  assert_int_equal(m.limit, 2 * GIB);
}

static void test_v2_hybrid_unified(void **state) {
  (void)state;
  meminfo(64 * GIB);
  put("proc/self/cgroup", "4:memory:/\n0::/svc\n");
  put("sys/fs/cgroup/unified/svc/memory.max", "104857600\n");
  ar_host_memory m;
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_OK);
  assert_int_equal(m.limit, 100 * MIB);
  assert_non_null(strstr(m.cgroup_file, "unified/svc/memory.max"));
}

static void test_v1(void **state) {
  (void)state;
  meminfo(16 * GIB);
  put("proc/self/cgroup", "9:pids:/\n4:cpu,memory:/docker/abc\n0::/\n");
  put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "314572800\n");
  put("sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "9223372036854771712\n");
  put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  ar_host_memory m;
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_OK);
  assert_int_equal(m.limit, 300 * MIB);
  /* The kernel's "unlimited" is no limit. */
  put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_OK);
  assert_int_equal(m.cgroup_limit, UINT64_MAX);
  assert_int_equal(m.limit, 16 * GIB);
}

static void test_meminfo_lower(void **state) {
  (void)state;
  meminfo(700 * MIB);
  put("proc/self/cgroup", "0::/a\n");
  put("sys/fs/cgroup/a/memory.max", "1073741824\n");
  ar_host_memory m;
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_OK);
  assert_int_equal(m.limit, 700 * MIB);
  assert_non_null(strstr(m.source, "MemAvailable"));
}

static void test_no_meminfo(void **state) {
  (void)state;
  put("proc/self/cgroup", "0::/a\n");
  put("sys/fs/cgroup/a/memory.max", "1073741824\n");
  ar_host_memory m;
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_UNSUPPORTED);
  assert_int_equal(m.limit, GIB);
  remove_root(NULL);
  fresh_root(NULL);
  assert_int_equal(ar_host_memory_get_at(root, &m), AR_UNSUPPORTED);
  assert_int_equal(m.limit, 0);
}

static void test_this_machine(void **state) {
  (void)state;
  ar_host_memory m;
  assert_int_equal(ar_host_memory_get(&m), AR_OK);
  assert_true(m.limit > 0 && m.limit <= m.mem_available);
  print_message("this machine: %llu MiB (%s)\n", (unsigned long long)(m.limit >> 20), m.source);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_v2_ancestor_wins, fresh_root, remove_root),
      cmocka_unit_test_setup_teardown(test_v2_max_is_none, fresh_root, remove_root),
      cmocka_unit_test_setup_teardown(test_v2_container_root, fresh_root, remove_root),
      cmocka_unit_test_setup_teardown(test_v2_hybrid_unified, fresh_root, remove_root),
      cmocka_unit_test_setup_teardown(test_v1, fresh_root, remove_root),
      cmocka_unit_test_setup_teardown(test_meminfo_lower, fresh_root, remove_root),
      cmocka_unit_test_setup_teardown(test_no_meminfo, fresh_root, remove_root),
      cmocka_unit_test(test_this_machine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
