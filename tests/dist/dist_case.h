/* What the MPI tests of tests/dist share: a CHECK that counts failures on
 * every rank, parsing a job from text, and the frame of one case per run
 * (a scratch folder made by rank 0 and shared, the rank count checked,
 * every rank's failures summed into the exit status, the folder removed
 * when all passed), and comparing two runs' checkpoints bit for bit.  One translation unit per test: the state is static. */
#ifndef ACCELRT_TESTS_DIST_CASE_H
#define ACCELRT_TESTS_DIST_CASE_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accelrt/spec.h"

static int failures;
static int rank;

#define CHECK(cond, ...)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank, __FILE__, __LINE__,     \
              #cond);                                                                      \
      fprintf(stderr, __VA_ARGS__);                                                        \
      fputc('\n', stderr);                                                                 \
      failures++;                                                                          \
    }                                                                                      \
  } while (0)

/* The job in yaml, or NULL (a failed check) when it does not parse. */
static inline ar_spec *case_parse(const char *yaml) {
  ar_spec *spec = NULL;
  ar_diags d = {0, NULL};
  ar_status st = ar_spec_parse(yaml, strlen(yaml), "<test>", NULL, NULL, 0, false, &spec, &d);
  if (st != AR_OK)
    ar_diags_print(&d, "<test>", stderr);
  ar_diags_fini(&d);
  CHECK(st == AR_OK, "the test job does not parse");
  return spec;
}

/* MPI_Init, then a scratch folder for case `which` in dir (every rank
 * gets rank 0's).  Returns false (after MPI_Finalize) when the job does
 * not have `ranks` ranks or the folder cannot be made. */
static inline bool case_begin(int *argc, char ***argv, int ranks, const char *which, char *dir,
                              size_t cap) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ar_log_set_level(AR_LOG_WARN);
  dir[0] = '\0';
  if (rank == 0) {
    snprintf(dir, cap, "/tmp/accelrt_dist_%s_XXXXXX", which);
    if (!mkdtemp(dir))
      dir[0] = '\0';
  }
  MPI_Bcast(dir, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (size == ranks && dir[0])
    return true;
  if (rank == 0)
    fprintf(stderr, "run under mpiexec -n %d (got %d ranks)\n", ranks, size);
  MPI_Finalize();
  return false;
}

/* Sums the failures of every rank, removes dir when there were none,
 * finalises MPI.  Returns the exit status. */
static inline int case_end(const char *which, const char *dir) {
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && all == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", dir);
  }
  MPI_Finalize();
  if (rank == 0)
    printf("%s: %s\n", which, all ? "FAILED" : "ok");
  return all ? 1 : 0;
}

/* Whether two runs' final checkpoints hold the same model, optimizer
 * state and data position bit for bit: every byte but train_s (wall
 * seconds, bytes 56..63: see runtime/engine/checkpoint.c) and the CRC
 * that covers it. */
static inline bool case_same_checkpoint(const char *a, const char *b) {
  char pa[700], pb[700];
  snprintf(pa, sizeof pa, "%s/checkpoint.bin", a);
  snprintf(pb, sizeof pb, "%s/checkpoint.bin", b);
  FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
  bool same = fa && fb;
  long n = -1, m = -2;
  if (same) {
    fseek(fa, 0, SEEK_END);
    fseek(fb, 0, SEEK_END);
    n = ftell(fa);
    m = ftell(fb);
    rewind(fa);
    rewind(fb);
    same = n == m && n > 68;
  }
  for (long i = 0; same && i < n - 4; i++) {
    int x = fgetc(fa), y = fgetc(fb);
    if (x != y && (i < 56 || i >= 64)) {
      fprintf(stderr, "checkpoints differ at byte %ld of %ld\n", i, n);
      same = false;
    }
  }
  CHECK(n == m, "checkpoint sizes %ld and %ld (%s, %s)", n, m, pa, pb);
  if (fa)
    fclose(fa);
  if (fb)
    fclose(fb);
  return same;
}

#endif
