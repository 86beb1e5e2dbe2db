/*
 * The service's wire format (accelrt serve <-> submit/ps/logs/cancel), over
 * a Unix stream socket.
 *
 * A message is a 4-byte big-endian length N followed by N bytes of body,
 * N <= AR__MSG_MAX.  The body is a sequence of fields, each a 1-byte tag, a
 * 4-byte big-endian length L and L bytes.  Every message has exactly one
 * `op`; `set` may repeat (up to AR__MSG_MAX_SETS); every other tag appears
 * at most once; text fields hold no NUL byte; unknown tags, trailing bytes,
 * a missing field an op needs, or a value out of range reject the whole
 * message.  The decoder never reads outside the body and allocates nothing
 * (fields point into the caller's buffer), so any byte string is safe to
 * decode: tests/fuzz/fuzz_msg.c fuzzes it, and ctest replays its corpus.
 *
 * Requests: submit (yaml, file, base, cwd, sets, keep), ps (json), logs
 * (id, follow, offset, json), cancel (id), each with the client's version;
 * the replies ok (text, id), error (text), data (text) and end, with the
 * server's version.  docs/service.md is the specification.
 */
#ifndef ACCELRT_TENANCY_PROTOCOL_H
#define ACCELRT_TENANCY_PROTOCOL_H

#include "accelrt/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The largest body: a job file (AR_SPEC_MAX_BYTES) plus its overrides. */
#define AR__MSG_MAX ((size_t)(1u << 20) + 65536)
#define AR__MSG_MAX_SETS 64

typedef enum ar__msg_op {
  AR__OP_NONE = 0,
  AR__OP_SUBMIT,
  AR__OP_PS,
  AR__OP_LOGS,
  AR__OP_CANCEL,
  AR__OP_OK,    /* reply */
  AR__OP_ERROR, /* reply */
  AR__OP_DATA,  /* reply: a chunk of a log stream */
  AR__OP_END    /* reply: the end of a log stream */
} ar__msg_op;

enum {
  AR__TAG_OP = 1,
  AR__TAG_ID = 2,
  AR__TAG_YAML = 3,
  AR__TAG_FILE = 4,
  AR__TAG_BASE = 5,
  AR__TAG_CWD = 6,
  AR__TAG_SET = 7,
  AR__TAG_FOLLOW = 8,
  AR__TAG_OFFSET = 9,
  AR__TAG_TEXT = 10,
  AR__TAG_ALL = 11,
  AR__TAG_VERSION = 12,
  AR__TAG_KEEP = 13,
  AR__TAG_JSON = 14 /* version 3 */
};

/* The protocol version this build speaks; a request without a version
 * field is version 1 (the same fields without keep), version 2 has no
 * json.  A request of a newer version than the server's is refused with an
 * error naming both. */
#define AR__PROTO_VERSION 3

/* A borrowed byte range of the decoded buffer (not NUL-terminated). */
typedef struct ar__mstr {
  const char *p;
  size_t n;
} ar__mstr;

typedef struct ar__msg {
  ar__msg_op op;
  uint64_t id;       /* logs, cancel; ok of submit */
  bool has_id;
  ar__mstr yaml, file, base, cwd, text;
  ar__mstr sets[AR__MSG_MAX_SETS];
  int n_sets;
  bool follow, all;
  bool keep; /* submit: keep generated data when the job ends */
  bool json; /* ps, logs (version 3): answer in JSON */
  uint64_t offset;
  uint64_t version; /* 0: absent */
} ar__msg;

/* Decodes a body (without its length prefix).  Returns AR_OK, or AR_PARSE
 * with the reason in err (which field, which byte).  json is refused in a
 * message other than ps and logs, and in one of a version before 3.  *out is filled only
 * as far as decoding got; its ranges point into body. */
ar_status ar__msg_decode(const uint8_t *body, size_t n, ar__msg *out, ar_err *err);

/* Encodes m into a new buffer with its 4-byte length prefix: *out (free
 * with ar_free), *len the whole length.  AR_NOMEM; AR_RANGE when the body
 * would exceed AR__MSG_MAX. */
ar_status ar__msg_encode(const ar__msg *m, uint8_t **out, size_t *len, ar_err *err);

/* Copies a field into a NUL-terminated string of at most cap bytes;
 * returns false when it does not fit. */
bool ar__mstr_copy(ar__mstr s, char *dst, size_t cap);

/* Reads one message from fd into *buf (grown as needed, free with
 * ar_free): AR_OK, AR_IO (closed or failed), AR_RANGE (declared length
 * above AR__MSG_MAX: nothing more is read).  With timeout_ms > 0 the whole
 * message must arrive within it (a deadline for the message, not for each
 * read, so a client trickling bytes is cut off): AR_INTERRUPTED when it
 * passes.  Writes one: AR_IO. */
ar_status ar__msg_read(int fd, uint8_t **buf, size_t *n, int timeout_ms, ar_err *err);
ar_status ar__msg_write(int fd, const ar__msg *m, ar_err *err);

#endif
