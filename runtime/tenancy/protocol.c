/* The service's message codec; see protocol.h for the format. */
#define _GNU_SOURCE
#include "protocol.h"

#include "accelrt/spec.h"

#include <errno.h>
#include <poll.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint32_t get_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static const char *const op_names[] = {"",   "submit", "ps",   "logs", "cancel",
                                       "ok", "error",  "data", "end"};
#define N_OPS (sizeof op_names / sizeof op_names[0])

/* An unsigned decimal of at most 19 digits. */
static bool parse_u64(ar__mstr s, uint64_t *out) {
  if (s.n == 0 || s.n > 19)
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < s.n; i++) {
    if (s.p[i] < '0' || s.p[i] > '9')
      return false;
    v = v * 10 + (uint64_t)(s.p[i] - '0');
  }
  *out = v;
  return true;
}

static bool is_flag(ar__mstr s, bool *out) {
  if (s.n != 1 || (s.p[0] != '0' && s.p[0] != '1'))
    return false;
  *out = s.p[0] == '1';
  return true;
}

/* Stores one field's value in m; AR_PARSE for a bad value. */
static ar_status decode_field(uint8_t tag, ar__mstr v, ar__msg *m, ar_err *err) {
  switch (tag) {
  case AR__TAG_OP:
    m->op = AR__OP_NONE;
    for (size_t k = 1; k < N_OPS; k++)
      if (strlen(op_names[k]) == v.n && memcmp(op_names[k], v.p, v.n) == 0)
        m->op = (ar__msg_op)k;
    if (m->op == AR__OP_NONE)
      return ar_errf(err, AR_PARSE, "unknown operation (%zu bytes)", v.n);
    return AR_OK;
  case AR__TAG_ID:
    if (!parse_u64(v, &m->id))
      return ar_errf(err, AR_PARSE, "a job id is a decimal number");
    m->has_id = true;
    return AR_OK;
  case AR__TAG_SET:
    if (m->n_sets == AR__MSG_MAX_SETS)
      return ar_errf(err, AR_PARSE, "more than %d overrides", AR__MSG_MAX_SETS);
    if (v.n == 0 || !memchr(v.p, '=', v.n))
      return ar_errf(err, AR_PARSE, "an override is KEY=VALUE");
    m->sets[m->n_sets++] = v;
    return AR_OK;
  case AR__TAG_FOLLOW:
    return is_flag(v, &m->follow) ? AR_OK : ar_errf(err, AR_PARSE, "follow is 0 or 1");
  case AR__TAG_ALL:
    return is_flag(v, &m->all) ? AR_OK : ar_errf(err, AR_PARSE, "all is 0 or 1");
  case AR__TAG_KEEP:
    return is_flag(v, &m->keep) ? AR_OK : ar_errf(err, AR_PARSE, "keep is 0 or 1");
  case AR__TAG_JSON:
    return is_flag(v, &m->json) ? AR_OK : ar_errf(err, AR_PARSE, "json is 0 or 1");
  case AR__TAG_VERSION:
    if (!parse_u64(v, &m->version) || m->version == 0)
      return ar_errf(err, AR_PARSE, "version is a positive decimal number");
    return AR_OK;
  case AR__TAG_OFFSET:
    return parse_u64(v, &m->offset) ? AR_OK
                                    : ar_errf(err, AR_PARSE, "offset is a decimal number");
  case AR__TAG_YAML:
    m->yaml = v;
    return AR_OK;
  case AR__TAG_FILE:
    m->file = v;
    return AR_OK;
  case AR__TAG_BASE:
    m->base = v;
    return AR_OK;
  case AR__TAG_CWD:
    m->cwd = v;
    return AR_OK;
  case AR__TAG_TEXT:
    m->text = v;
    return AR_OK;
  }
  return ar_errf(err, AR_PARSE, "unknown field tag %u", tag);
}

/* The fields the message's operation needs, and their bounds. */
static ar_status check_op(const ar__msg *m, uint32_t seen, ar_err *err) {
  if (!(seen & (1u << AR__TAG_OP)))
    return ar_errf(err, AR_PARSE, "the message names no operation");
  if (seen & (1u << AR__TAG_JSON)) {
    if (m->op != AR__OP_PS && m->op != AR__OP_LOGS)
      return ar_errf(err, AR_PARSE, "json (tag %d) is a field of ps and logs only",
                     AR__TAG_JSON);
    if (m->version < 3)
      return ar_errf(err, AR_PARSE, "json (tag %d) needs protocol version 3 or later, the "
                     "message says %llu", AR__TAG_JSON,
                     (unsigned long long)(m->version ? m->version : 1));
  }
  switch (m->op) {
  case AR__OP_SUBMIT:
    if (!(seen & (1u << AR__TAG_YAML)) || m->yaml.n == 0)
      return ar_errf(err, AR_PARSE, "submit needs the job file's text");
    if (m->yaml.n > AR_SPEC_MAX_BYTES)
      return ar_errf(err, AR_PARSE, "the job file exceeds %u bytes", AR_SPEC_MAX_BYTES);
    if (m->file.n > 4095 || m->base.n > 4095 || m->cwd.n > 4095)
      return ar_errf(err, AR_PARSE, "a path exceeds 4095 bytes");
    if ((m->base.n && m->base.p[0] != '/') || (m->cwd.n && m->cwd.p[0] != '/'))
      return ar_errf(err, AR_PARSE, "base and cwd are absolute paths");
    return AR_OK;
  case AR__OP_LOGS:
  case AR__OP_CANCEL:
    if (!m->has_id)
      return ar_errf(err, AR_PARSE, "%s needs a job id", op_names[m->op]);
    return AR_OK;
  default:
    return AR_OK;
  }
}

ar_status ar__msg_decode(const uint8_t *body, size_t n, ar__msg *m, ar_err *err) {
  memset(m, 0, sizeof *m);
  if (!body && n > 0)
    return ar_errf(err, AR_PARSE, "no message body");
  if (n > AR__MSG_MAX)
    return ar_errf(err, AR_PARSE, "message of %zu bytes exceeds the limit of %zu", n,
                   AR__MSG_MAX);
  uint32_t seen = 0;
  size_t at = 0;
  while (at < n) {
    if (n - at < 5)
      return ar_errf(err, AR_PARSE, "truncated field header at byte %zu", at);
    uint8_t tag = body[at];
    uint32_t len = get_be32(body + at + 1);
    at += 5;
    if (len > n - at)
      return ar_errf(err, AR_PARSE,
                     "field %u at byte %zu declares %u bytes, only %zu remain", tag, at - 5,
                     len, n - at);
    ar__mstr v = {(const char *)body + at, len};
    at += len;
    if (tag < AR__TAG_OP || tag > AR__TAG_JSON)
      return ar_errf(err, AR_PARSE, "unknown field tag %u at byte %zu", tag, at - len - 5);
    if (tag != AR__TAG_SET && (seen & (1u << tag)))
      return ar_errf(err, AR_PARSE, "field tag %u appears twice", tag);
    seen |= 1u << tag;
    /* Only the job file may hold any bytes; every other field is text. */
    if (tag != AR__TAG_YAML && memchr(v.p, '\0', v.n))
      return ar_errf(err, AR_PARSE, "field tag %u holds a NUL byte", tag);
    AR_CHECK(decode_field(tag, v, m, err));
  }
  return check_op(m, seen, err);
}

typedef struct enc {
  uint8_t *buf;
  size_t len, cap;
  bool oom, big;
} enc;

static void put(enc *e, uint8_t tag, const void *p, size_t n) {
  if (e->oom || e->big)
    return;
  if (n > AR__MSG_MAX || e->len + 5 + n > AR__MSG_MAX + 4) {
    e->big = true;
    return;
  }
  if (e->len + 5 + n > e->cap) {
    size_t cap = (e->len + 5 + n) * 2;
    uint8_t *nb = ar_realloc(e->buf, cap);
    if (!nb) {
      e->oom = true;
      return;
    }
    e->buf = nb;
    e->cap = cap;
  }
  e->buf[e->len] = tag;
  put_be32(e->buf + e->len + 1, (uint32_t)n);
  if (n)
    memcpy(e->buf + e->len + 5, p, n);
  e->len += 5 + n;
}

static void put_str(enc *e, uint8_t tag, ar__mstr s) {
  if (s.p)
    put(e, tag, s.p, s.n);
}

static void put_u64(enc *e, uint8_t tag, uint64_t v) {
  char b[24];
  int k = snprintf(b, sizeof b, "%llu", (unsigned long long)v);
  put(e, tag, b, (size_t)k);
}

ar_status ar__msg_encode(const ar__msg *m, uint8_t **out, size_t *len, ar_err *err) {
  if ((unsigned)m->op == 0 || (unsigned)m->op >= N_OPS)
    return ar_errf(err, AR_INVALID, "message without an operation");
  enc e = {ar_malloc(256), 4, 256, false, false};
  if (!e.buf)
    return ar_errf(err, AR_NOMEM, "out of memory");
  put(&e, AR__TAG_OP, op_names[m->op], strlen(op_names[m->op]));
  if (m->version)
    put_u64(&e, AR__TAG_VERSION, m->version);
  if (m->has_id)
    put_u64(&e, AR__TAG_ID, m->id);
  put_str(&e, AR__TAG_YAML, m->yaml);
  put_str(&e, AR__TAG_FILE, m->file);
  put_str(&e, AR__TAG_BASE, m->base);
  put_str(&e, AR__TAG_CWD, m->cwd);
  for (int i = 0; i < m->n_sets && i < AR__MSG_MAX_SETS; i++)
    put_str(&e, AR__TAG_SET, m->sets[i]);
  if (m->follow)
    put(&e, AR__TAG_FOLLOW, "1", 1);
  if (m->all)
    put(&e, AR__TAG_ALL, "1", 1);
  if (m->keep)
    put(&e, AR__TAG_KEEP, "1", 1);
  if (m->json)
    put(&e, AR__TAG_JSON, "1", 1);
  if (m->offset)
    put_u64(&e, AR__TAG_OFFSET, m->offset);
  put_str(&e, AR__TAG_TEXT, m->text);
  if (e.oom || e.big) {
    ar_free(e.buf);
    return e.oom ? ar_errf(err, AR_NOMEM, "out of memory")
                 : ar_errf(err, AR_RANGE, "the message exceeds %zu bytes", AR__MSG_MAX);
  }
  put_be32(e.buf, (uint32_t)(e.len - 4));
  *out = e.buf;
  *len = e.len;
  return AR_OK;
}

bool ar__mstr_copy(ar__mstr s, char *dst, size_t cap) {
  if (cap == 0 || s.n >= cap)
    return false;
  if (s.n)
    memcpy(dst, s.p, s.n);
  dst[s.n] = '\0';
  return true;
}

/* Milliseconds left until deadline (CLOCK_MONOTONIC), at least 0. */
static int ms_left(const struct timespec *deadline) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  long long ms = (long long)(deadline->tv_sec - now.tv_sec) * 1000 +
                 (deadline->tv_nsec - now.tv_nsec) / 1000000;
  return ms < 0 ? 0 : ms > 1000000000 ? 1000000000 : (int)ms;
}

static ar_status read_full(int fd, uint8_t *p, size_t n, const struct timespec *deadline,
                           ar_err *err) {
  while (n > 0) {
    if (deadline) {
      struct pollfd pf = {fd, POLLIN, 0};
      int left = ms_left(deadline);
      int k = left > 0 ? poll(&pf, 1, left) : 0;
      if (k < 0 && errno == EINTR)
        continue;
      if (k == 0)
        return ar_errf(err, AR_INTERRUPTED, "the request did not arrive in time (%zu bytes "
                       "missing)", n);
    }
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return ar_errf(err, AR_IO, k == 0 ? "connection closed mid-message"
                                        : "reading the socket failed");
    p += k;
    n -= (size_t)k;
  }
  return AR_OK;
}

ar_status ar__msg_read(int fd, uint8_t **buf, size_t *n, int timeout_ms, ar_err *err) {
  struct timespec dl, *deadline = NULL;
  if (timeout_ms > 0) {
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
      dl.tv_sec++;
      dl.tv_nsec -= 1000000000L;
    }
    deadline = &dl;
  }
  uint8_t hdr[4];
  AR_CHECK(read_full(fd, hdr, 4, deadline, err));
  uint32_t len = get_be32(hdr);
  if (len > AR__MSG_MAX)
    return ar_errf(err, AR_RANGE, "message of %u bytes exceeds the limit of %zu", len,
                   AR__MSG_MAX);
  uint8_t *b = ar_malloc(len ? len : 1);
  if (!b)
    return ar_errf(err, AR_NOMEM, "out of memory for a message of %u bytes", len);
  ar_status st = read_full(fd, b, len, deadline, err);
  if (st != AR_OK) {
    ar_free(b);
    return st;
  }
  ar_free(*buf);
  *buf = b;
  *n = len;
  return AR_OK;
}

ar_status ar__msg_write(int fd, const ar__msg *m, ar_err *err) {
  uint8_t *b = NULL;
  size_t n = 0;
  AR_CHECK(ar__msg_encode(m, &b, &n, err));
  size_t at = 0;
  while (at < n) {
    /* MSG_NOSIGNAL: a client that went away must not kill the server. */
    ssize_t k = send(fd, b + at, n - at, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      ar_free(b);
      return ar_errf(err, AR_IO, "writing to the socket failed");
    }
    at += (size_t)k;
  }
  ar_free(b);
  return AR_OK;
}
