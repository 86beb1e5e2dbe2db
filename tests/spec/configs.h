/* The project's ready job files (every .yaml directly in configs/, not the study files in
 * its subfolders), for tests that run every one of them through the spec
 * module: test_spec.c (each parses) and test_resolved.c (each survives
 * job.resolved.yaml).  Include after cmocka.h; needs ACCELRT_SOURCE_DIR. */
#ifndef ACCELRT_TESTS_SPEC_CONFIGS_H
#define ACCELRT_TESTS_SPEC_CONFIGS_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* Calls fn with each file's path and text (NUL-terminated, len bytes);
 * returns how many, or skips the test when the folder is absent. */
static int each_config(void (*fn)(const char *path, const char *text, size_t len)) {
  DIR *dir = opendir(ACCELRT_SOURCE_DIR "/configs");
  if (!dir)
    skip();
  struct dirent *e;
  int n = 0;
  while ((e = readdir(dir))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 5, ".yaml"))
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/%s", ACCELRT_SOURCE_DIR, e->d_name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    fn(path, buf, len);
    n++;
  }
  closedir(dir);
  return n;
}

#endif
