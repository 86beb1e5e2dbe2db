/* The host memory this process can use: MemAvailable (/proc/meminfo) and
 * the memory limit of its cgroup, whichever is lower.
 *
 * A job refused on MemAvailable alone can still be killed by the kernel's
 * OOM killer inside a container whose cgroup allows far less than the
 * machine has free, so both are read:
 *
 *   - cgroup v2: /proc/self/cgroup has "0::/PATH"; the limit is memory.max
 *     under the unified hierarchy (/sys/fs/cgroup, or /sys/fs/cgroup/unified
 *     on hybrid systems), "max" meaning none.
 *   - cgroup v1: a line "N:...memory...:/PATH"; the limit is
 *     memory.limit_in_bytes under /sys/fs/cgroup/memory, values of 2^62 and
 *     more meaning none (the kernel writes 2^63 - 4096 for "unlimited").
 *
 * A limit applies to a cgroup and every cgroup below it, so the folder of
 * PATH and each of its ancestors up to the hierarchy's root are read and
 * the lowest limit wins (inside a container the mount's root is often the
 * container's own cgroup, with PATH "/").  Files that do not exist are
 * skipped. */
#define _GNU_SOURCE
#include "accelrt/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values of memory.limit_in_bytes from here up mean "no limit". */
#define V1_UNLIMITED ((uint64_t)1 << 62)

static bool read_meminfo(const char *path, uint64_t *avail) {
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  char line[256];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    unsigned long long kib = 0;
    if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      *avail = (uint64_t)kib * 1024u;
      found = true;
    }
  }
  fclose(f);
  return found;
}

/* A limit file's value: true with *v set, UINT64_MAX for "max"; false when
 * the file is missing or unreadable. */
static bool read_limit(const char *path, uint64_t *v) {
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  char buf[64] = "";
  bool ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  if (!ok)
    return false;
  if (strncmp(buf, "max", 3) == 0) {
    *v = UINT64_MAX;
    return true;
  }
  char *end = NULL;
  unsigned long long x = strtoull(buf, &end, 10);
  if (end == buf)
    return false;
  *v = (uint64_t)x;
  return true;
}

/* Reads `file` in the folder of cgroup `path` (under mount `mnt`) and in
 * each ancestor; the lowest limit and its file go to *out. */
static void walk_limits(const char *mnt, const char *path, const char *file, bool v1,
                        ar_host_memory *out) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", path);
  for (;;) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
      dir[--n] = '\0';
    char p[1024];
    snprintf(p, sizeof p, "%s%s%s/%s", mnt, dir[0] == '/' ? "" : "/",
             strcmp(dir, "/") == 0 ? "" : dir, file);
    uint64_t v;
    if (read_limit(p, &v)) {
      if (v1 && v >= V1_UNLIMITED)
        v = UINT64_MAX;
      if (v < out->cgroup_limit) {
        out->cgroup_limit = v;
        snprintf(out->cgroup_file, sizeof out->cgroup_file, "%s", p);
      }
    }
    if (strcmp(dir, "/") == 0 || n == 0)
      break;
    char *slash = strrchr(dir, '/');
    if (!slash)
      break;
    if (slash == dir)
      dir[1] = '\0';
    else
      *slash = '\0';
  }
}

/* Whether a v1 hierarchy line's controller list ("cpu,memory") names the
 * memory controller. */
static bool names_memory(const char *list, size_t len) {
  const char *p = list, *end = list + len;
  while (p < end) {
    const char *c = memchr(p, ',', (size_t)(end - p));
    size_t n = c ? (size_t)(c - p) : (size_t)(end - p);
    if (n == 6 && memcmp(p, "memory", 6) == 0)
      return true;
    p += n + 1;
  }
  return false;
}

static void read_cgroups(const char *root, ar_host_memory *out) {
  char path[512];
  snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    /* ID:CONTROLLERS:PATH */
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    const char *cg = c2 + 1;
    char mnt[512];
    if (c2 == c1 + 1 && strncmp(line, "0:", 2) == 0) { /* v2: "0::/PATH" */
      snprintf(mnt, sizeof mnt, "%s/sys/fs/cgroup", root);
      walk_limits(mnt, cg, "memory.max", false, out);
      snprintf(mnt, sizeof mnt, "%s/sys/fs/cgroup/unified", root);
      walk_limits(mnt, cg, "memory.max", false, out);
    } else if (names_memory(c1 + 1, (size_t)(c2 - c1 - 1))) {
      snprintf(mnt, sizeof mnt, "%s/sys/fs/cgroup/memory", root);
      walk_limits(mnt, cg, "memory.limit_in_bytes", true, out);
    }
  }
  fclose(f);
}

ar_status ar_host_memory_get_at(const char *root, ar_host_memory *out) {
  memset(out, 0, sizeof *out);
  out->cgroup_limit = UINT64_MAX;
  if (!root)
    root = "";
  char path[512];
  snprintf(path, sizeof path, "%s/proc/meminfo", root);
  bool have = read_meminfo(path, &out->mem_available);
  read_cgroups(root, out);
  if (have && out->mem_available <= out->cgroup_limit) {
    out->limit = out->mem_available;
    snprintf(out->source, sizeof out->source, "MemAvailable in %s", path);
  } else if (out->cgroup_limit != UINT64_MAX) {
    out->limit = out->cgroup_limit;
    snprintf(out->source, sizeof out->source, "the memory limit of this process's cgroup (%s)",
             out->cgroup_file);
  }
  return have ? AR_OK : AR_UNSUPPORTED;
}

ar_status ar_host_memory_get(ar_host_memory *out) { return ar_host_memory_get_at("", out); }
