/*
 * Helpers shared by the data tests: a scratch folder made with mkdtemp and
 * removed at the end, and files written into it.
 */
#ifndef ACCELRT_TEST_DATA_UTIL_H
#define ACCELRT_TEST_DATA_UTIL_H

#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tu_dir[256];

/* Creates the scratch folder; returns 0 on success.  Has cmocka's group
 * setup signature so tests pass it directly. */
static inline int tu_setup(void **state) {
  (void)state;
  const char *base = getenv("TMPDIR");
  snprintf(tu_dir, sizeof tu_dir, "%s/accelrt-data-XXXXXX", base ? base : "/tmp");
  return mkdtemp(tu_dir) ? 0 : -1;
}

/* Removes every file in the scratch folder, then the folder (cmocka's
 * group teardown signature). */
static inline int tu_teardown(void **state) {
  (void)state;
  DIR *d = opendir(tu_dir);
  if (d) {
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      snprintf(p, sizeof p, "%s/%s", tu_dir, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(tu_dir);
  return 0;
}

/* Path of `name` in the scratch folder (a static buffer per slot). */
static inline const char *tu_path(const char *name) {
  static char bufs[8][512];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, 512, "%s/%s", tu_dir, name);
  return b;
}

/* Writes `len` bytes to `name` in the scratch folder and returns its path. */
static inline const char *tu_write_n(const char *name, const char *data, size_t len) {
  const char *p = tu_path(name);
  FILE *f = fopen(p, "wb");
  if (!f)
    return NULL;
  if (len && fwrite(data, 1, len, f) != len) {
    fclose(f);
    return NULL;
  }
  fclose(f);
  return p;
}

static inline const char *tu_write(const char *name, const char *text) {
  return tu_write_n(name, text, strlen(text));
}

/* Reads a whole file into a malloc'ed buffer (plain malloc: not part of
 * the library's allocation accounting). */
static inline char *tu_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) {
    b[n] = '\0';
    *len = (size_t)n;
  }
  return b;
}

#endif /* ACCELRT_TEST_DATA_UTIL_H */
