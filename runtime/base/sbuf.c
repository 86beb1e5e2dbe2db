/* A growable string and JSON string escaping (base.h). */
#define _GNU_SOURCE
#include "accelrt/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ar_sbuf_printf(ar_sbuf *b, const char *fmt, ...) {
  if (b->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0, fmt, ap);
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

/* The length of the well-formed UTF-8 sequence at p (at most n bytes), or
 * 0 when it is not one (a stray continuation byte, an overlong form, a
 * surrogate, past U+10FFFF, cut short). */
static size_t utf8_len(const unsigned char *p, size_t n) {
  size_t k = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
  if (k == 0 || k > n || p[0] > 0xf4)
    return 0;
  for (size_t i = 1; i < k; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
      (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
    return 0;
  return k;
}

void ar_sbuf_json_esc(ar_sbuf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  size_t n = strlen((const char *)p);
  for (size_t i = 0; i < n;) {
    /* The run of bytes that need no escape (printable ASCII and
     * well-formed UTF-8 sequences), in one append. */
    size_t run = 0, k;
    while (i + run < n && run < (1u << 30)) {
      unsigned char c = p[i + run];
      if (c == '"' || c == '\\' || c < 0x20)
        break;
      if (c < 0x80) {
        run++;
        continue;
      }
      if ((k = utf8_len(p + i + run, n - i - run)) == 0)
        break;
      run += k;
    }
    if (run) {
      ar_sbuf_printf(b, "%.*s", (int)run, (const char *)p + i);
      i += run;
      continue;
    }
    if (p[i] == '"' || p[i] == '\\')
      ar_sbuf_printf(b, "\\%c", p[i]);
    else if (p[i] < 0x20)
      ar_sbuf_printf(b, "\\u%04x", p[i]);
    else /* JSON text is UTF-8: a byte that does not start a well-formed
          * sequence (a Latin-1 path, say) becomes U+FFFD. */
      ar_sbuf_printf(b, "\\ufffd");
    i++;
  }
}

void ar_sbuf_json_str(ar_sbuf *b, const char *s) {
  ar_sbuf_printf(b, "\"");
  ar_sbuf_json_esc(b, s);
  ar_sbuf_printf(b, "\"");
}

void ar_sbuf_fini(ar_sbuf *b) {
  ar_free(b->buf);
  memset(b, 0, sizeof *b);
}
