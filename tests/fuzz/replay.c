/*
 * Replays fuzzer inputs through the harness without libFuzzer, so that any
 * compiler (and every ctest run) exercises the seed corpus:
 *
 *   fuzz_spec_replay DIR_OR_FILE...
 *
 * Directories are read one level deep, in name order.  A crash or an
 * abort in the harness fails the run; otherwise it prints how many inputs
 * ran and exits 0 (1 when a path cannot be read or nothing ran).
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs one file; returns 0 on success, 1 when it cannot be read. */
static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return 1;
  }
  size_t cap = 4096, len = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      fclose(f);
      fprintf(stderr, "replay: out of memory reading %s\n", path);
      return 1;
    }
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap)
      break;
    cap *= 2;
    uint8_t *nb = realloc(buf, cap);
    if (!nb)
      free(buf);
    buf = nb;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    free(buf);
    return 1;
  }
  LLVMFuzzerTestOneInput(buf, len);
  free(buf);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  int failed = 0, ran = 0;
  for (int a = 1; a < argc; a++) {
    struct stat st;
    if (stat(argv[a], &st) != 0) {
      fprintf(stderr, "replay: no such file or folder: %s\n", argv[a]);
      failed = 1;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      failed |= run_file(argv[a]);
      ran++;
      continue;
    }
    DIR *d = opendir(argv[a]);
    if (!d) {
      fprintf(stderr, "replay: cannot open folder %s\n", argv[a]);
      failed = 1;
      continue;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.')
        continue;
      char **nn = realloc(names, (n + 1) * sizeof *names);
      if (!nn)
        break;
      names = nn;
      size_t l = strlen(argv[a]) + strlen(e->d_name) + 2;
      names[n] = malloc(l);
      if (!names[n])
        break;
      snprintf(names[n], l, "%s/%s", argv[a], e->d_name);
      n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
      failed |= run_file(names[i]);
      ran++;
      free(names[i]);
    }
    free(names);
  }
  printf("replay: %d input%s\n", ran, ran == 1 ? "" : "s");
  return failed || ran == 0;
}
