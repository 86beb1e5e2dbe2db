/* Status table, error buffers, allocation wrapper and logging. */
#define _GNU_SOURCE
#include "accelrt/base.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <math.h>
#include <time.h>

static const char *const status_names[] = {
#define AR__STATUS_NAME(name, msg) "AR_" #name,
    AR_STATUS_MAP(AR__STATUS_NAME)
#undef AR__STATUS_NAME
};

static const char *const status_msgs[] = {
#define AR__STATUS_MSG(name, msg) msg,
    AR_STATUS_MAP(AR__STATUS_MSG)
#undef AR__STATUS_MSG
};

const char *ar_status_name(ar_status s) {
  if ((unsigned)s >= AR_STATUS_COUNT)
    return "AR_UNKNOWN";
  return status_names[s];
}

const char *ar_status_str(ar_status s) {
  if ((unsigned)s >= AR_STATUS_COUNT)
    return "unknown status";
  return status_msgs[s];
}

ar_status ar_errf(ar_err *err, ar_status status, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->status = status;
  }
  return status;
}

ar_status ar_err_wrap(ar_err *err, const char *fmt, ...) {
  if (!err)
    return AR_OK;
  char prefix[AR_ERR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  char joined[2 * AR_ERR_MAX + 2];
  snprintf(joined, sizeof joined, "%s: %s", prefix, err->msg);
  memcpy(err->msg, joined, AR_ERR_MAX - 1);
  err->msg[AR_ERR_MAX - 1] = '\0';
  return err->status;
}

void ar__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "accelrt: internal error: assertion '%s' failed at %s:%d; "
          "please report this bug\n", expr, file, line);
  abort();
}

/* ---- allocation ---------------------------------------------------------- */

static long fail_countdown = -1;

static int alloc_should_fail(void) {
  if (fail_countdown < 0)
    return 0;
  if (fail_countdown == 0)
    return 1;
  fail_countdown--;
  return 0;
}

void ar_alloc_fail_after(long countdown) { fail_countdown = countdown; }

void *ar_malloc(size_t bytes) {
  if (alloc_should_fail())
    return NULL;
  return malloc(bytes ? bytes : 1);
}

void *ar_calloc(size_t n, size_t size) {
  if (alloc_should_fail())
    return NULL;
  if (n == 0 || size == 0)
    return calloc(1, 1);
  return calloc(n, size);
}

void *ar_realloc(void *p, size_t bytes) {
  if (alloc_should_fail())
    return NULL;
  return realloc(p, bytes ? bytes : 1);
}

/* Blocks of at least this size are placed on 2 MiB boundaries and offered
 * to the kernel as transparent huge pages: the sampled layers read rows at
 * random across hundreds of MiB, where 4 KiB pages cost a TLB miss (a page
 * walk) per row. */
#define HUGE_FROM ((size_t)8 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

void *ar_aligned_alloc(size_t align, size_t bytes) {
  if (alloc_should_fail())
    return NULL;
  void *p = NULL;
  int huge = bytes >= HUGE_FROM && align <= HUGE_PAGE;
  if (posix_memalign(&p, huge ? HUGE_PAGE : align, bytes ? bytes : align) != 0)
    return NULL;
#ifdef MADV_HUGEPAGE
  if (huge)
    (void)madvise(p, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice only */
#endif
  return p;
}

char *ar_strdup(const char *s) {
  if (!s)
    return NULL;
  size_t n = strlen(s) + 1;
  char *d = ar_malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

void ar_free(void *p) { free(p); }

/* ---- logging ------------------------------------------------------------- */

static int log_level = -1;

static ar_log_level level_from_env(void) {
  const char *e = getenv("ACCELRT_LOG");
  if (!e)
    return AR_LOG_INFO;
  if (!strcmp(e, "error"))
    return AR_LOG_ERROR;
  if (!strcmp(e, "warn"))
    return AR_LOG_WARN;
  if (!strcmp(e, "debug"))
    return AR_LOG_DEBUG;
  return AR_LOG_INFO;
}

void ar_log_set_level(ar_log_level level) { log_level = (int)level; }

ar_log_level ar_log_get_level(void) {
  if (log_level < 0)
    log_level = (int)level_from_env();
  return (ar_log_level)log_level;
}

void ar_log(ar_log_level level, const char *fmt, ...) {
  if (level > ar_log_get_level())
    return;
  static const char *const tags[] = {"error", "warning", "info", "debug"};
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "accelrt: %s: %s\n", tags[level], line);
}

double ar_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- random numbers ------------------------------------------------------ */

double ar_rng_normal(ar_rng *r) {
  double u1 = ar_rng_uniform(r), u2 = ar_rng_uniform(r);
  if (u1 < 1e-300)
    u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}
