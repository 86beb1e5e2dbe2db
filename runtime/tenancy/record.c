/* Small helpers of the runner's records: a growable string for JSON and
 * traces, and quantiles. */
#define _GNU_SOURCE
#include "tenancy_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ar__sb_printf(ar__sbuf *b, const char *fmt, ...) {
  if (b->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0,
                      fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->buf && (size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n + 64;
    char *nb = ar_realloc(b->buf, cap);
    if (!nb) {
      b->oom = true;
      return;
    }
    b->buf = nb;
    b->cap = cap;
  }
}

void ar__sb_json_str(ar__sbuf *b, const char *s) {
  ar__sb_printf(b, "\"");
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      ar__sb_printf(b, "\\%c", *p);
    else if (*p < 0x20)
      ar__sb_printf(b, "\\u%04x", *p);
    else
      ar__sb_printf(b, "%c", *p);
  }
  ar__sb_printf(b, "\"");
}

void ar__sb_fini(ar__sbuf *b) {
  ar_free(b->buf);
  memset(b, 0, sizeof *b);
}

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

const char *ar__tjob_state_name(ar__tjob_state s) {
  static const char *const names[] = {"pending", "queued",    "running", "done",
                                      "failed",  "cancelled", "stopped"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}
