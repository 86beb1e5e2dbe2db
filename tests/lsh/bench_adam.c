/* Times the sparse Adam step, ar_lsh_adam_step, alone (not part of ctest):
 * a head of ROWS rows of IN inputs, each step touching a random TOUCH of
 * them (so rows come back after random gaps, as a sampled head's do), for
 * STEPS steps after as many warm-up steps; prints the median over REPS of
 * the nanoseconds per touched row, lazy and catching up.
 *
 *   build/tests/lsh/bench_lsh_adam [ROWS [IN [TOUCH [STEPS [REPS]]]]]
 *
 * Defaults: the 100,000-class token head (128 inputs), 2% of its rows a
 * step, 200 steps, 5 repeats, one thread (ACCELRT_LSH_ISA picks the
 * instruction set).  Built with -DAR_BENCH_NO_CATCH_UP it also compiles
 * against the library before sparse.catch_up existed (the lazy row only),
 * for a side-by-side with an older build; bench/lsh/README.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accelrt/base.h"
#include "accelrt/lsh.h"

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One run: ns per touched row over `steps` timed steps, or < 0 on error. */
static double run(uint32_t rows, uint32_t in, uint32_t touch, int steps, uint64_t catch_up,
                  uint64_t seed) {
  ar_err err = AR_ERR_INIT;
  ar_lsh_adam_opts o = AR_LSH_ADAM_OPTS_INIT;
  o.threads = 1;
#ifndef AR_BENCH_NO_CATCH_UP
  o.catch_up = catch_up;
#else
  (void)catch_up;
#endif
  float *w = calloc((size_t)rows * in, sizeof *w), *g = calloc((size_t)rows * in, sizeof *g);
  float *b = calloc(rows, sizeof *b), *gb = calloc(rows, sizeof *gb);
  ar_lsh_adam *a = NULL;
  ar_lsh_touched *t = NULL;
  double ns = -1.0;
  if (!w || !g || !b || !gb || ar_lsh_adam_create(rows, in, 1, &o, &a, &err) != AR_OK ||
      ar_lsh_touched_create(rows, &t, &err) != AR_OK) {
    fprintf(stderr, "bench_lsh_adam: %s\n", err.msg[0] ? err.msg : "out of memory");
    goto out;
  }
  ar_lsh_rows layer = {w, b, rows, in, in}, grad = {g, gb, rows, in, in};
  ar_rng r;
  ar_rng_seed(&r, seed, 7);
  double spent = 0.0;
  size_t done = 0;
  for (int s = 0; s < 2 * steps; s++) {
    for (uint32_t k = 0; k < touch; k++) {
      uint32_t id = (uint32_t)ar_rng_below(&r, rows);
      ar_lsh_touched_mark(t, id);
      float *row = g + (size_t)id * in;
      for (uint32_t j = 0; j < in; j++)
        row[j] = (float)(ar_rng_uniform(&r) - 0.5);
      gb[id] = 0.1f;
    }
    size_t n = 0;
    (void)ar_lsh_touched_ids(t, &n);
    double t0 = ar_now();
    if (ar_lsh_adam_step(a, &layer, &grad, t, &err) != AR_OK) {
      fprintf(stderr, "bench_lsh_adam: %s\n", err.msg);
      goto out;
    }
    /* Only the step is timed, in the second half: the first leaves most
     * rows with a last step, so their skips are real gaps. */
    if (s >= steps) {
      spent += ar_now() - t0;
      done += n;
    }
  }
  ns = 1e9 * spent / (double)(done ? done : 1);
out:
  ar_lsh_touched_destroy(t);
  ar_lsh_adam_destroy(a);
  free(w);
  free(g);
  free(b);
  free(gb);
  return ns;
}

int main(int argc, char **argv) {
  uint32_t rows = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 100000;
  uint32_t in = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 128;
  uint32_t touch = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : rows / 50;
  int steps = argc > 4 ? atoi(argv[4]) : 200;
  int reps = argc > 5 ? atoi(argv[5]) : 5;
  if (rows == 0 || in == 0 || touch == 0 || touch > rows || steps <= 0 || reps <= 0 ||
      reps > 99) {
    fprintf(stderr, "usage: bench_lsh_adam [ROWS [IN [TOUCH <= ROWS [STEPS [REPS <= 99]]]]]\n");
    return 2;
  }
#ifndef AR_BENCH_NO_CATCH_UP
  static const char *const names[2] = {"lazy", "catch_up"};
  const int modes = 2;
#else
  static const char *const names[1] = {"lazy"};
  const int modes = 1;
#endif
  double v[2][99];
  for (int k = 0; k < reps; k++) /* modes alternate within a repeat */
    for (int m = 0; m < modes; m++) {
      v[m][k] = run(rows, in, touch, steps, m ? UINT64_MAX : 0, (uint64_t)k + 1);
      if (v[m][k] < 0)
        return 1;
    }
  printf("sparse Adam step, %u rows x %u inputs, %u touched a step, %d steps, isa %s\n", rows,
         in, touch, steps, ar_lsh_isa_name());
  for (int m = 0; m < modes; m++) {
    qsort(v[m], (size_t)reps, sizeof v[m][0], cmp_dbl);
    printf("  %-9s %8.1f ns per touched row (median of %d; range %.1f-%.1f)\n", names[m],
           v[m][reps / 2], reps, v[m][0], v[m][reps - 1]);
  }
  return 0;
}
