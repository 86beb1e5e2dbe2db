/* Shared by the engine tests that train small jobs on disk: a scratch
 * folder for the group (made with mkdtemp, removed at the end) and
 * whole-file reads.  Include after defining _GNU_SOURCE. */
#ifndef ACCELRT_TEST_ENGINE_SCRATCH_H
#define ACCELRT_TEST_ENGINE_SCRATCH_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

static char tmpdir[256];

/* cmocka group setup and teardown. */
static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/accelrt-test-engine-XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

/* The whole file (malloc'd) and its size in *len; fails the test when it
 * cannot be read. */
static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)n);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

#endif
