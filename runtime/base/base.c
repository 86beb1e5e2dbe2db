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

/* Counting (ar_alloc_count_start): the blocks handed out since the start,
 * as an open-addressing table from address to the bytes asked for (linear
 * probing, tombstones), guarded by a spin lock: allocations may come from
 * any thread.  Off, the wrappers only read one flag. */
#define COUNT_SLOTS ((size_t)1 << 20)
#define COUNT_TOMB ((uintptr_t)1)
typedef struct count_slot {
  uintptr_t p; /* 0 empty, COUNT_TOMB deleted, else the block */
  size_t bytes;
} count_slot;
static count_slot *count_tab;
static int count_on;
static char count_lock;
static int64_t count_bytes, count_blocks;
static int count_overflow;

static void count_acquire(void) {
  while (__atomic_test_and_set(&count_lock, __ATOMIC_ACQUIRE))
    ;
}
static void count_release(void) { __atomic_clear(&count_lock, __ATOMIC_RELEASE); }

static size_t count_hash(uintptr_t p) {
  return (size_t)(ar_mix64((uint64_t)p) & (COUNT_SLOTS - 1));
}

static void count_add(void *p, size_t bytes) {
  if (!p || !__atomic_load_n(&count_on, __ATOMIC_ACQUIRE))
    return;
  count_acquire();
  if (count_tab) {
    size_t i = count_hash((uintptr_t)p), k = 0;
    while (count_tab[i].p > COUNT_TOMB && k < COUNT_SLOTS) {
      i = (i + 1) & (COUNT_SLOTS - 1);
      k++;
    }
    if (k == COUNT_SLOTS) {
      count_overflow = 1;
    } else {
      count_tab[i].p = (uintptr_t)p;
      count_tab[i].bytes = bytes;
      count_bytes += (int64_t)bytes;
      count_blocks++;
    }
  }
  count_release();
}

/* Forgets block p; returns whether it was recorded, with its bytes. */
static int count_remove(void *p, size_t *bytes) {
  if (!p || !__atomic_load_n(&count_on, __ATOMIC_ACQUIRE))
    return 0;
  int found = 0;
  count_acquire();
  if (count_tab) {
    size_t i = count_hash((uintptr_t)p);
    for (size_t k = 0; k < COUNT_SLOTS && count_tab[i].p; k++) {
      if (count_tab[i].p == (uintptr_t)p) {
        count_bytes -= (int64_t)count_tab[i].bytes;
        count_blocks--;
        count_tab[i].p = COUNT_TOMB;
        if (bytes)
          *bytes = count_tab[i].bytes;
        found = 1;
        break;
      }
      i = (i + 1) & (COUNT_SLOTS - 1);
    }
  }
  count_release();
  return found;
}

ar_status ar_alloc_count_start(void) {
  count_acquire();
  free(count_tab);
  count_tab = calloc(COUNT_SLOTS, sizeof *count_tab);
  count_bytes = count_blocks = 0;
  count_overflow = 0;
  count_release();
  if (!count_tab)
    return AR_NOMEM;
  __atomic_store_n(&count_on, 1, __ATOMIC_RELEASE);
  return AR_OK;
}

int64_t ar_alloc_count_live(int64_t *blocks) {
  count_acquire();
  int64_t b = count_overflow ? -1 : count_bytes;
  if (blocks)
    *blocks = count_blocks;
  count_release();
  return b;
}

void ar_alloc_count_stop(void) {
  __atomic_store_n(&count_on, 0, __ATOMIC_RELEASE);
  count_acquire();
  free(count_tab);
  count_tab = NULL;
  count_release();
}

void *ar_malloc(size_t bytes) {
  if (alloc_should_fail())
    return NULL;
  void *p = malloc(bytes ? bytes : 1);
  count_add(p, bytes);
  return p;
}

void *ar_calloc(size_t n, size_t size) {
  if (alloc_should_fail())
    return NULL;
  if (n == 0 || size == 0) {
    void *p = calloc(1, 1);
    count_add(p, 0);
    return p;
  }
  void *p = calloc(n, size);
  count_add(p, n * size); /* calloc refused an overflowing product */
  return p;
}

void *ar_realloc(void *p, size_t bytes) {
  if (alloc_should_fail())
    return NULL;
  size_t was = 0;
  int counted = count_remove(p, &was);
  void *q = realloc(p, bytes ? bytes : 1);
  if (q)
    count_add(q, bytes);
  else if (counted)
    count_add(p, was); /* p is still the caller's */
  return q;
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
  count_add(p, bytes);
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

void ar_free(void *p) {
  count_remove(p, NULL);
  free(p);
}

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
