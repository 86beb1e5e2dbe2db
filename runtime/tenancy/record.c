/* Small helpers of the runner's records: quantiles and state names. */
#define _GNU_SOURCE
#include "tenancy_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double ar__quantile(double *v, size_t n, double q) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof *v, cmp_double);
  /* Nearest rank: the smallest value with at least q of the values at or
   * below it. */
  double rank = q * (double)n;
  size_t k = (size_t)rank;
  if ((double)k < rank)
    k++;
  if (k == 0)
    k = 1;
  if (k > n)
    k = n;
  return v[k - 1];
}

const char *ar_tjob_state_name(ar_tjob_state s) {
  static const char *const names[] = {"pending", "queued",    "running", "done",
                                      "failed",  "cancelled", "stopped"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}
