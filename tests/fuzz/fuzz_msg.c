/*
 * libFuzzer harness for the service's message decoder
 * (runtime/tenancy/protocol.c): any byte string is a message body.
 *
 * Besides crashes and undefined behaviour (the sanitizers), the harness
 * aborts when a decoded message breaks the format's promises: ranges inside
 * the input, at most AR__MSG_MAX_SETS overrides, each KEY=VALUE, the fields
 * an operation needs present, json only in a ps or logs of version 3 or
 * later; and a message that decodes must encode and decode again to the
 * same fields.
 *
 * Built as `fuzz_msg` with clang and -DACCELRT_FUZZ=ON; replay.c runs the
 * same entry over tests/fuzz/corpus/msg as the ctest test fuzz.msg_corpus.
 */
#include "protocol.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(ar__mstr s, const uint8_t *data, size_t size) {
  if (!s.p)
    return s.n == 0;
  return (const uint8_t *)s.p >= data && s.n <= size &&
         (const uint8_t *)s.p - data <= (ptrdiff_t)(size - s.n);
}

static int same(ar__mstr a, ar__mstr b) {
  return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ar__msg m;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar__msg_decode(data, size, &m, &err);
  if (st != AR_OK) {
    if (st != AR_PARSE || err.msg[0] == '\0')
      abort();
    return 0;
  }
  if (m.op == AR__OP_NONE || m.n_sets < 0 || m.n_sets > AR__MSG_MAX_SETS)
    abort();
  const ar__mstr *f[] = {&m.yaml, &m.file, &m.base, &m.cwd, &m.text};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (!inside(*f[i], data, size))
      abort();
  for (int i = 0; i < m.n_sets; i++)
    if (!inside(m.sets[i], data, size) || !memchr(m.sets[i].p, '=', m.sets[i].n))
      abort();
  if ((m.op == AR__OP_LOGS || m.op == AR__OP_CANCEL) && !m.has_id)
    abort();
  if (m.op == AR__OP_SUBMIT && m.yaml.n == 0)
    abort();
  if (m.json && ((m.op != AR__OP_PS && m.op != AR__OP_LOGS) || m.version < 3))
    abort();
  /* Round trip. */
  uint8_t *enc = NULL;
  size_t len = 0;
  if (ar__msg_encode(&m, &enc, &len, &err) != AR_OK)
    abort();
  ar__msg m2;
  if (len < 4 || ar__msg_decode(enc + 4, len - 4, &m2, &err) != AR_OK)
    abort();
  if (m2.op != m.op || m2.has_id != m.has_id || m2.id != m.id || m2.n_sets != m.n_sets ||
      m2.follow != m.follow || m2.all != m.all || m2.offset != m.offset ||
      m2.keep != m.keep || m2.json != m.json || m2.version != m.version)
    abort();
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    const ar__mstr *g[] = {&m2.yaml, &m2.file, &m2.base, &m2.cwd, &m2.text};
    if (!same(*f[i], *g[i]))
      abort();
  }
  for (int i = 0; i < m.n_sets; i++)
    if (!same(m.sets[i], m2.sets[i]))
      abort();
  ar_free(enc);
  return 0;
}
