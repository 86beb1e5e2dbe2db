/*
 * What the two CUDA-against-host tests share (test_cuda_parity.c: the
 * device table; test_nn_cuda.c: the graph ops): the two devices, the skip
 * without a GPU, and the table of the largest differences each prints.
 *
 * PARITY_DEVICE is the device compared with the host, "cuda:0" unless the
 * build defines it; with -DPARITY_DEVICE='"host"' the test compares a
 * one-thread host device instead, so its own bookkeeping runs on every
 * machine (ctest: device.cuda_parity_harness, device.nn_cuda_harness).
 */
#ifndef ACCELRT_TEST_PARITY_H
#define ACCELRT_TEST_PARITY_H

#include "op_fixtures.h"

#ifndef PARITY_DEVICE
#define PARITY_DEVICE "cuda:0"
#endif

static ar_device *H, *C; /* host, the device compared */

/* ---- the table of differences ----------------------------------------------- */

typedef struct parity_row {
  char op[40];
  double max_abs, max_rel;
  int64_t compared;
} parity_row;
static parity_row parity_table[128];
static int parity_n;

/* Keeps the largest differences seen for op over n compared elements (rows
 * past the table's 128 are dropped). */
static inline void record(const char *op, double abs_d, double rel_d, int64_t n) {
  int i = 0;
  while (i < parity_n && strcmp(parity_table[i].op, op) != 0)
    i++;
  if (i == parity_n) {
    if (parity_n == (int)(sizeof parity_table / sizeof parity_table[0]))
      return;
    snprintf(parity_table[i].op, sizeof parity_table[i].op, "%s", op);
    parity_n++;
  }
  parity_row *r = &parity_table[i];
  r->max_abs = abs_d > r->max_abs ? abs_d : r->max_abs;
  r->max_rel = rel_d > r->max_rel ? rel_d : r->max_rel;
  r->compared += n;
}

/* Prints the table under `title`, its first column headed `what`, and a
 * blank line (ci/gpu-check cuts it from the log from title to that line). */
static inline void parity_print(const char *title, const char *what) {
  printf("\n%s\n%-34s %12s %12s %12s\n", title, what, "max |diff|", "max rel", "elements");
  for (int i = 0; i < parity_n; i++)
    printf("%-34s %12.3g %12.3g %12lld\n", parity_table[i].op, parity_table[i].max_abs,
           parity_table[i].max_rel, (long long)parity_table[i].compared);
  printf("\n");
}

/* ---- the devices --------------------------------------------------------------- */

/* True, with the reason on stderr, when PARITY_DEVICE is a GPU and there is
 * none: main then exits 77 (skipped) before cmocka runs. */
static inline bool parity_skip(const char *test) {
  char why[512];
  if (strcmp(PARITY_DEVICE, "host") == 0 || ar_cuda_device_count(why, sizeof why) > 0)
    return false;
  fprintf(stderr, "no CUDA device (%s): %s skipped\n", why, test);
  return true;
}

/* Opens H (two threads) and C (PARITY_DEVICE, one thread, an arena of
 * memory_bytes); cmocka's group set-up calls it through a one-line
 * wrapper that gives the size.  0, or -1 with the reason on stderr. */
static inline int parity_open(uint64_t memory_bytes) {
  H = fx_open_host(2);
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.memory_bytes = memory_bytes;
  o.threads = 1;
  o.pin = false;
  ar_err err = AR_ERR_INIT;
  if (ar_device_open(PARITY_DEVICE, &o, &C, &err) != AR_OK) {
    fprintf(stderr, "cannot open %s: %s\n", PARITY_DEVICE, err.msg);
    return -1;
  }
  return 0;
}

/* cmocka's group teardown: closes both devices. */
static inline int parity_close(void **state) {
  (void)state;
  ar_device_close(H);
  ar_device_close(C);
  return 0;
}

#endif /* ACCELRT_TEST_PARITY_H */
