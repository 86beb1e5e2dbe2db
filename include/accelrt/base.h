/*
 * accelrt base: status codes, error text, logging and allocation.
 *
 * Every module of accelrt (runtime/, lanes/, commsched/, lsh/) depends on
 * this header and on nothing else of accelrt.  It holds:
 *
 *   - ar_status, one X-macro table of status codes with ar_status_str();
 *   - ar_err, the message buffer a context owns (SQLite style: the message
 *     belongs to the handle, never to a global);
 *   - AR_CHECK / AR_ASSERT macros;
 *   - ar_malloc and friends, the one allocation wrapper, with a failure
 *     injection hook so tests can exercise out-of-memory paths;
 *   - ar_log, levelled logging to stderr.
 *
 * Error rule, stated once: a function that can fail returns ar_status.
 * AR_OK is zero.  On failure it writes what failed, with which value and
 * what to do next into the ar_err it was given (when not NULL), and leaves
 * its outputs untouched unless it says otherwise.
 *
 * Tests: tests/base/test_base.c.
 */
#ifndef ACCELRT_BASE_H
#define ACCELRT_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* name, message */
#define AR_STATUS_MAP(X)                                                       \
  X(OK, "success")                                                             \
  X(INVALID, "invalid argument")                                               \
  X(NOMEM, "out of memory")                                                    \
  X(IO, "input/output error")                                                  \
  X(PARSE, "malformed input")                                                  \
  X(SPEC, "invalid job description")                                           \
  X(UNSUPPORTED, "not supported by this build or device")                      \
  X(NODEVICE, "device not available")                                          \
  X(DEVICE, "device error")                                                    \
  X(RANGE, "value out of range")                                               \
  X(STATE, "operation not valid in the current state")                         \
  X(NOTFOUND, "not found")                                                     \
  X(CORRUPT, "corrupt file")                                                   \
  X(INTERRUPTED, "interrupted")

typedef enum ar_status {
#define AR__STATUS_ENUM(name, msg) AR_##name,
  AR_STATUS_MAP(AR__STATUS_ENUM)
#undef AR__STATUS_ENUM
      AR_STATUS_COUNT
} ar_status;

/* Returns a static string naming the status ("AR_NOMEM"). */
const char *ar_status_name(ar_status s);
/* Returns a static one-line description of the status. */
const char *ar_status_str(ar_status s);

/* A message buffer owned by a context (a job, a reader, a device...). */
#define AR_ERR_MAX 1024
typedef struct ar_err {
  ar_status status;
  char msg[AR_ERR_MAX];
} ar_err;

#define AR_ERR_INIT {AR_OK, {0}}

/* Records status and a printf-formatted message in err (which may be NULL)
 * and returns status, so that `return ar_errf(err, AR_IO, "...")` works.
 * A message already present is replaced. */
ar_status ar_errf(ar_err *err, ar_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prepends "context: " to the message already in err (a breadcrumb, as
 * NCCL's checks leave).  Returns err->status.  No-op when err is NULL. */
ar_status ar_err_wrap(ar_err *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Propagates a failing status to the caller. */
#define AR_CHECK(expr)                                                         \
  do {                                                                         \
    ar_status ar__s = (expr);                                                  \
    if (ar__s != AR_OK)                                                        \
      return ar__s;                                                            \
  } while (0)

/* Broken invariants (bugs) only: aborts with file:line in every build. */
#define AR_ASSERT(cond)                                                        \
  do {                                                                         \
    if (!(cond))                                                               \
      ar__assert_fail(#cond, __FILE__, __LINE__);                              \
  } while (0)
void ar__assert_fail(const char *expr, const char *file, int line)
#if defined(__GNUC__)
    __attribute__((noreturn))
#endif
    ;

/* ---- allocation ---------------------------------------------------------
 * All host allocations of accelrt go through these so that tests can make
 * the n-th allocation fail.  ar_malloc(0) returns a unique non-NULL pointer.
 * ar_aligned_alloc returns memory aligned to `align` (a power of two, at
 * least sizeof(void*)), freed with ar_free. */
void *ar_malloc(size_t bytes);
void *ar_calloc(size_t n, size_t size);
void *ar_realloc(void *p, size_t bytes);
void *ar_aligned_alloc(size_t align, size_t bytes);
char *ar_strdup(const char *s);
void ar_free(void *p);

/* Failure injection for tests: after `countdown` more successful
 * allocations, every allocation fails until reset with a negative value.
 * Not thread-safe; tests only. */
void ar_alloc_fail_after(long countdown);

/* Counting for tests that compare what a component holds with what it
 * said it would hold (a job's memory plan): from ar_alloc_count_start on,
 * every block the wrappers hand out is recorded with the bytes asked for,
 * and ar_free forgets it.  ar_alloc_count_live returns the bytes of the
 * blocks allocated since the start and not freed (blocks older than the
 * start are ignored when freed), and their number in *blocks (may be
 * NULL); -1 when more blocks were live than the record holds (2^20).
 * Thread-safe (allocations from any thread are counted); start and stop
 * from one thread.  Start: AR_OK or AR_NOMEM.  Costs one flag read per
 * call when off. */
ar_status ar_alloc_count_start(void);
int64_t ar_alloc_count_live(int64_t *blocks);
void ar_alloc_count_stop(void);

/* ---- logging ------------------------------------------------------------ */
typedef enum ar_log_level {
  AR_LOG_ERROR = 0,
  AR_LOG_WARN = 1,
  AR_LOG_INFO = 2,
  AR_LOG_DEBUG = 3
} ar_log_level;

/* Messages above the level are dropped.  Default AR_LOG_INFO, or the value
 * of the environment variable ACCELRT_LOG (error|warn|info|debug). */
void ar_log_set_level(ar_log_level level);
ar_log_level ar_log_get_level(void);
void ar_log(ar_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- random numbers -----------------------------------------------------
 * xoshiro256** (Blackman & Vigna), seeded through splitmix64.  Every
 * random choice of accelrt draws from an ar_rng seeded from the job's seed
 * and a stream number, never from the clock, so runs repeat. */
typedef struct ar_rng {
  uint64_t s[4];
} ar_rng;

/* Advances *state and returns the next splitmix64 output. */
static inline uint64_t ar_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A stateless 64-bit mix of a key (the splitmix64 finaliser). */
static inline uint64_t ar_mix64(uint64_t key) {
  uint64_t st = key;
  return ar_splitmix64(&st);
}

/* Seeds a xoshiro256** stream from three words (e.g. seed, epoch, window):
 * the words are folded through splitmix64 so nearby keys give unrelated
 * streams.  The state is never all zero because splitmix64 is a bijection
 * of a counter and four consecutive outputs cannot all be zero. */
static inline void ar_rng_seed3(ar_rng *r, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t st = ar_mix64(a) ^ ar_mix64(b + 0x6A09E667F3BCC909ull) ^
                ar_mix64(c + 0xBB67AE8584CAA73Bull);
  for (int i = 0; i < 4; i++)
    r->s[i] = ar_splitmix64(&st);
}

static inline uint64_t ar__rotl64(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: the next 64 random bits. */
static inline uint64_t ar_rng_next(ar_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = ar__rotl64(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = ar__rotl64(s[3], 45);
  return out;
}

/* A uniform integer in [0, n), n >= 1, without modulo bias (Lemire,
 * "Fast random integer generation in an interval", TOMACS 2019), using
 * 32x32 multiplies for n < 2^32 and plain rejection above. */
static inline uint64_t ar_rng_below(ar_rng *r, uint64_t n) {
  if (n <= 1)
    return 0;
  if (n <= 0xFFFFFFFFull) {
    uint32_t n32 = (uint32_t)n;
    uint64_t m = (uint64_t)(uint32_t)(ar_rng_next(r) >> 32) * n32;
    uint32_t low = (uint32_t)m;
    if (low < n32) {
      uint32_t thresh = (uint32_t)(-n32) % n32;
      while (low < thresh) {
        m = (uint64_t)(uint32_t)(ar_rng_next(r) >> 32) * n32;
        low = (uint32_t)m;
      }
    }
    return m >> 32;
  }
  uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
  uint64_t x;
  do
    x = ar_rng_next(r);
  while (x >= limit);
  return x % n;
}

/* A uniform double in [0, 1) with 53 random bits. */
static inline double ar_rng_uniform(ar_rng *r) {
  return (double)(ar_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Seeds a stream from a seed and a stream number. */
static inline void ar_rng_seed(ar_rng *r, uint64_t seed, uint64_t stream) {
  ar_rng_seed3(r, seed, stream, 0);
}
/* Standard normal (Box-Muller). */
double ar_rng_normal(ar_rng *r);

/* Monotonic wall-clock seconds. */
double ar_now(void);

/* ---- growable text -------------------------------------------------------
 * A string that grows as it is printed into, for JSON records, traces and
 * replies.  Zero-initialise it ({0}); after an allocation failure `oom` is
 * set and later calls do nothing, so a writer checks once at the end.
 * ar_sbuf_json_str appends s as a JSON string (quotes, escapes; control
 * characters as \u00XX; bytes that are not well-formed UTF-8 as \ufffd, so
 * the result is always valid JSON), ar_sbuf_json_esc the same without the
 * quotes (parts of one string).  This, ar_json (runtime.h) and the Chrome
 * trace writer (trace.h), built on it, are the project's only JSON writers. */
typedef struct ar_sbuf {
  char *buf; /* NUL-terminated when len > 0 */
  size_t len, cap;
  bool oom;
} ar_sbuf;
void ar_sbuf_printf(ar_sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void ar_sbuf_json_str(ar_sbuf *b, const char *s);
void ar_sbuf_json_esc(ar_sbuf *b, const char *s);
void ar_sbuf_fini(ar_sbuf *b); /* frees, and leaves b empty */

/* ---- suggestions ----------------------------------------------------------
 * "did you mean": the nearest of a list of names to a mistyped word, for
 * every message about an unknown name (commands, options, job-file keys,
 * enum values).  The distance counts insertions, deletions, substitutions
 * and swaps of two neighbouring characters (optimal string alignment),
 * ignoring ASCII case.  Tests: tests/base/test_base.c. */

/* The distance between a (la bytes) and b (lb bytes); INT32_MAX when either
 * is longer than 64 bytes. */
int ar_edit_distance(const char *a, size_t la, const char *b, size_t lb);
/* The candidate nearest to word (len bytes) when it is close enough to be a
 * typo of it: at most one edit for candidates under 5 characters, two for
 * longer ones, and fewer edits than word has characters; the first of
 * equally near ones; NULL when none is (or n is 0).  Returns a borrowed
 * element of cands (NULL elements are skipped). */
const char *ar_suggest(const char *word, size_t len, const char *const *cands, size_t n);

/* ---- stop signals -------------------------------------------------------
 * SIGINT and SIGTERM as a request to stop at the next safe point (the end
 * of an iteration, the next accept), one process-wide flag for every
 * runner.  ar_stop_signals_install sets the handlers (and clears the flag),
 * remembering the ones before; installs nest, and the last
 * ar_stop_signals_restore puts the old handlers back.  Install and restore
 * from one thread (the main one); ar_stop_signal may be read from any.
 * With ignore_pipe, SIGPIPE is ignored for as long (a server writing to
 * clients that left).  Tests: tests/base/test_base.c. */
void ar_stop_signals_install(bool ignore_pipe);
void ar_stop_signals_restore(void);
/* The signal that asked to stop (SIGINT or SIGTERM), 0 when none did. */
int ar_stop_signal(void);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_BASE_H */
