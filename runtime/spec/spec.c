/*
 * Job files: parse (yaml_tree.c), apply --set overrides, validate against
 * the schema table (schema.c), check the rules that tie keys together,
 * convert to ar_spec.
 *
 * Validation never stops at the first problem: every check appends a
 * diagnostic and goes on, and conversion reads values through the same
 * parsers, skipping (silently, as they are already reported) the ones that
 * failed.  Only problems that leave no usable tree (YAML syntax, refused
 * YAML features, an empty file) end the work early.
 */
#define _POSIX_C_SOURCE 200809L

#include "accelrt/spec.h"

#include "resolved.h"
#include "schema.h"
#include "yaml_tree.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* More diagnostics than this are cut: past it they only bury the first. */
#define MAX_DIAGS 1000
/* Path segments in one --set key ("model.layers[1].dense" has 4). */
#define MAX_SET_SEGMENTS 64
/* Characters of user text quoted in a message before "..." */
#define QUOTE_MAX 60

/* ---- diagnostics -------------------------------------------------------- */

/* Appends one diagnostic; copies the strings.  false when out of memory. */
static bool diags_push(ar_diags *d, int line, int col, const char *set,
                       const char *path, const char *msg) {
  ar_diag *items = ar_realloc(d->items, (size_t)(d->count + 1) * sizeof *items);
  if (!items)
    return false;
  d->items = items;
  ar_diag *g = &d->items[d->count];
  memset(g, 0, sizeof *g);
  g->line = line;
  g->col = col;
  g->message = ar_strdup(msg);
  g->path = path ? ar_strdup(path) : NULL;
  g->set = set ? ar_strdup(set) : NULL;
  if (!g->message || (path && !g->path) || (set && !g->set)) {
    ar_free(g->message);
    ar_free(g->path);
    ar_free(g->set);
    return false;
  }
  d->count++;
  return true;
}

ar_status ar_diags_add(ar_diags *d, int line, int col, const char *path,
                       const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return diags_push(d, line, col, NULL, path, msg) ? AR_OK : AR_NOMEM;
}

void ar_diags_fini(ar_diags *d) {
  if (!d)
    return;
  for (int i = 0; i < d->count; i++) {
    ar_free(d->items[i].path);
    ar_free(d->items[i].message);
    ar_free(d->items[i].set);
  }
  ar_free(d->items);
  d->items = NULL;
  d->count = 0;
}

void ar_diags_print(const ar_diags *d, const char *file, FILE *to) {
  if (!d || !to)
    return;
  if (!file)
    file = "<string>";
  for (int i = 0; i < d->count; i++) {
    const ar_diag *g = &d->items[i];
    if (g->set)
      fprintf(to, "--set %s: error: ", g->set);
    else if (g->line > 0)
      fprintf(to, "%s:%d:%d: error: ", file, g->line, g->col);
    else
      fprintf(to, "%s: error: ", file);
    if (g->path && g->path[0])
      fprintf(to, "%s: ", g->path);
    fprintf(to, "%s\n", g->message);
  }
}

/* Sort key: overrides first (in the order given), then by place in the
 * file, then problems without a place; ties keep the order found. */
typedef struct diag_ref {
  ar_diag d;
  int seq;
} diag_ref;

static int diag_group(const ar_diag *d) {
  return d->set ? 0 : d->line > 0 ? 1 : 2;
}

static int diag_cmp(const void *pa, const void *pb) {
  const diag_ref *a = pa, *b = pb;
  int ga = diag_group(&a->d), gb = diag_group(&b->d);
  if (ga != gb)
    return ga - gb;
  if (ga == 1) {
    if (a->d.line != b->d.line)
      return a->d.line < b->d.line ? -1 : 1;
    if (a->d.col != b->d.col)
      return a->d.col < b->d.col ? -1 : 1;
  }
  return (a->seq > b->seq) - (a->seq < b->seq);
}

void ar_diags_sort(ar_diags *d) {
  if (!d || d->count < 2)
    return;
  diag_ref *refs = ar_malloc((size_t)d->count * sizeof *refs);
  if (!refs)
    return;
  for (int i = 0; i < d->count; i++)
    refs[i] = (diag_ref){d->items[i], i};
  qsort(refs, (size_t)d->count, sizeof *refs, diag_cmp);
  for (int i = 0; i < d->count; i++)
    d->items[i] = refs[i].d;
  ar_free(refs);
}

/* ---- context ------------------------------------------------------------ */

typedef struct ctx {
  ar_diags *d;
  bool nomem;  /* an allocation failed: the result is AR_NOMEM */
  bool capped; /* MAX_DIAGS reached */
  const char *const *sets;
  int n_sets;
  char set_key[MAX_SET_SEGMENTS * 8]; /* key part of the override at hand */
  const char *base_dir;
  bool check_files;
  char path[1024]; /* key path of the value being checked */
  size_t plen;
  const ar_ynode *root; /* the file's top mapping (jobs items are not) */
  const ar_schema *top; /* the table being checked against, for suggestions */
  /* A key the table does not have is reported with the path of the mapping
   * that holds it (ar_schema_check) instead of its own (job files). */
  bool unknown_at_map;
} ctx;

static void vdiag(ctx *c, int line, int col, int set, const char *path,
                  const char *fmt, va_list ap) {
  if (c->capped)
    return;
  char msg[1024], settext[512];
  const char *st = NULL;
  if (set >= 0) {
    const char *s = c->sets[set];
    st = ar__yquote(s, strlen(s), 400, settext, sizeof settext);
    line = col = -1;
  }
  if (c->d->count == MAX_DIAGS - 1) {
    snprintf(msg, sizeof msg, "more than %d problems; fix these first",
             MAX_DIAGS - 1);
    c->capped = true;
    if (!diags_push(c->d, 0, 0, NULL, NULL, msg))
      c->nomem = true;
    return;
  }
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (!diags_push(c->d, line, col, st, path, msg))
    c->nomem = true;
}

/* A problem at a node, with an explicit key path. */
static void diag_path(ctx *c, const ar_ynode *at, const char *path,
                      const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void diag_path(ctx *c, const ar_ynode *at, const char *path,
                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(c, at ? at->line : 0, at ? at->col : 0, at ? at->set : -1, path, fmt,
        ap);
  va_end(ap);
}

/* A problem at a node, about the key path being checked. */
static void diag(ctx *c, const ar_ynode *at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void diag(ctx *c, const ar_ynode *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(c, at ? at->line : 0, at ? at->col : 0, at ? at->set : -1,
        c->plen ? c->path : NULL, fmt, ap);
  va_end(ap);
}

/* Receives problems from the YAML parser of the file. */
static void report_file(void *ud, int line, int col, const char *path,
                        const char *msg) {
  ctx *c = ud;
  diag_path(c, &(ar_ynode){.line = line, .col = col, .set = -1}, path, "%s",
            msg);
}

/* Receives problems from the YAML parser of an override's value; their
 * paths are relative to the override's key. */
typedef struct set_report {
  ctx *c;
  int set;
} set_report;

static void report_set(void *ud, int line, int col, const char *path,
                       const char *msg) {
  (void)line;
  (void)col;
  set_report *r = ud;
  char full[1024];
  snprintf(full, sizeof full, "%s%s%s", r->c->set_key, path ? "." : "",
           path ? path : "");
  diag_path(r->c, &(ar_ynode){.set = r->set}, full, "%s", msg);
}

/* Key path bookkeeping while walking the tree: push returns the length to
 * restore. */
static size_t push_key(ctx *c, const ar_ynode *key) {
  size_t old = c->plen;
  char q[128];
  ar__yquote(key->text, key->len, 40, q, sizeof q);
  int w = snprintf(c->path + c->plen, sizeof c->path - c->plen, "%s%s",
                   c->plen ? "." : "", q);
  if (w > 0)
    c->plen = strlen(c->path);
  return old;
}

static size_t push_index(ctx *c, int i) {
  size_t old = c->plen;
  snprintf(c->path + c->plen, sizeof c->path - c->plen, "[%d]", i);
  c->plen = strlen(c->path);
  return old;
}

static void pop(ctx *c, size_t old) {
  c->plen = old;
  c->path[old] = '\0';
}

/* ---- suggestions ------------------------------------------------------- */

/* The candidate closest to the typed text when close enough to be a typo
 * (ar_suggest's rule, the one every "did you mean" of accelrt follows). */
static const char *closest(const char *typed, size_t len,
                           const char *const *cands, int n) {
  return ar_suggest(typed, len, cands, n > 0 ? (size_t)n : 0);
}

/* Writes into buf the path of the first schema entry named key outside
 * `except`, e.g. "train.batch" for a "batch:" written at the top level. */
static bool find_elsewhere(const ar_schema *s, const ar_schema *except,
                           const char *key, size_t len, char *prefix,
                           size_t cap) {
  if (!s->kids)
    return false;
  size_t plen = strlen(prefix);
  for (const ar_schema *k = s->kids; k->key; k++) {
    const char *name = s->type == AR_SCHEMA_LIST ? "[i]" : k->key;
    if (plen + strlen(name) + 2 >= cap)
      continue;
    snprintf(prefix + plen, cap - plen, "%s%s",
             plen && s->type != AR_SCHEMA_LIST ? "." : "", name);
    if (s != except && s->type != AR_SCHEMA_LIST && strlen(k->key) == len &&
        memcmp(k->key, key, len) == 0 && k->type != AR_SCHEMA_RESERVED)
      return true;
    if (find_elsewhere(k, except, key, len, prefix, cap))
      return true;
    prefix[plen] = '\0';
  }
  return false;
}

/* ---- scalars ------------------------------------------------------------ */

/* How a value reads in a message. */
static const char *describe(const ar_ynode *v, char *buf, size_t cap) {
  char q[160];
  if (v->kind == AR_YNODE_MAP)
    return "a mapping";
  if (v->kind == AR_YNODE_SEQ)
    return "a list";
  if (ar__ynode_is_null(v))
    return "an empty value";
  ar__yquote(v->text, v->len, QUOTE_MAX, q, sizeof q);
  snprintf(buf, cap, v->plain ? "'%s'" : "the quoted string '%s'", q);
  return buf;
}

/* Strict decimal integer: optional sign, digits only, whole text, no
 * overflow (*overflow set instead). */
static bool parse_int(const char *t, size_t len, int64_t *out, bool *overflow) {
  size_t i = 0;
  bool neg = false;
  *overflow = false;
  if (i < len && (t[i] == '+' || t[i] == '-'))
    neg = t[i++] == '-';
  if (i == len)
    return false;
  uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < len; i++) {
    if (t[i] < '0' || t[i] > '9')
      return false;
    unsigned d = (unsigned)(t[i] - '0');
    if (v > (lim - d) / 10)
      *overflow = true;
    else
      v = v * 10 + d;
  }
  if (*overflow)
    return true;
  *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v)
             : (int64_t)v;
  return true;
}

/* Decimal number through strtod; hex, "inf" and "nan" are refused by the
 * character check, overflow by isfinite. */
static bool parse_float(const char *t, size_t len, double *out, bool *range) {
  char buf[64];
  bool digit = false;
  *range = false;
  if (len == 0 || len >= sizeof buf)
    return false;
  for (size_t i = 0; i < len; i++) {
    char ch = t[i];
    if (ch >= '0' && ch <= '9')
      digit = true;
    else if (ch != '+' && ch != '-' && ch != '.' && ch != 'e' && ch != 'E')
      return false;
  }
  if (!digit)
    return false;
  memcpy(buf, t, len);
  buf[len] = '\0';
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (end != buf + len)
    return false;
  if (!isfinite(v)) {
    *range = true;
    return true;
  }
  *out = v;
  return true;
}

static bool valid_device(const char *t, size_t len) {
  if ((len == 4 && !memcmp(t, "auto", 4)) ||
      (len == 4 && !memcmp(t, "host", 4)))
    return true;
  if (len < 6 || len > 14 || memcmp(t, "cuda:", 5) != 0)
    return false;
  int64_t n = 0;
  for (size_t i = 5; i < len; i++) {
    if (t[i] < '0' || t[i] > '9')
      return false;
    n = n * 10 + (t[i] - '0');
  }
  return n <= INT_MAX;
}

/* Parses text as the scalar entry s.  Returns true with *out, or false
 * with the problem in why (a whole message, without the key path).
 * `plain` is false for quoted text (then never a number). */
/* "8GiB", "512MiB", "4GB", "1000000" (bytes) or "90%" (a fraction of the
 * device's free memory, in (0, 100]). */
static bool parse_size(const char *t, size_t len, bool plain,
                       ar_schema_value *out, char *why, size_t cap) {
  static const struct {
    const char *unit;
    double mult;
  } units[] = {{"", 1.0},           {"B", 1.0},
               {"KiB", 1024.0},     {"MiB", 1048576.0},
               {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
               {"KB", 1e3},         {"MB", 1e6},
               {"GB", 1e9},         {"TB", 1e12}};
  char q[160], num[64];
  ar__yquote(t, len, QUOTE_MAX, q, sizeof q);
  size_t n = 0;
  while (n < len && ((t[n] >= '0' && t[n] <= '9') || t[n] == '.'))
    n++;
  double v = 0.0;
  bool big = false;
  if (n == 0 || n >= sizeof num || !parse_float(t, n, &v, &big) || big) {
    snprintf(why, cap,
             "expected a size such as 8GiB, 512MiB or 90%%, got '%s'", q);
    return false;
  }
  (void)plain;
  memcpy(num, t, n);
  num[n] = '\0';
  const char *u = t + n;
  size_t ul = len - n;
  while (ul > 0 && *u == ' ') {
    u++;
    ul--;
  }
  if (ul == 1 && *u == '%') {
    if (!(v > 0.0 && v <= 100.0)) {
      snprintf(why, cap, "'%s' is out of range: a percentage must be above 0 "
               "and at most 100", q);
      return false;
    }
    out->i = 0;
    out->f = v / 100.0;
    return true;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strlen(units[i].unit) != ul || memcmp(units[i].unit, u, ul) != 0)
      continue;
    double b = v * units[i].mult;
    if (b < 1.0 || b > 9.0e18) {
      snprintf(why, cap, "'%s' is out of range: between 1 byte and 8 EiB", q);
      return false;
    }
    out->i = (int64_t)b;
    out->f = 0.0;
    return true;
  }
  snprintf(why, cap,
           "'%s' has an unknown unit: use B, KiB, MiB, GiB, TiB, KB, MB, GB, "
           "TB or %%",
           q);
  return false;
}

/* An integer entry's value (q: the text quoted for messages). */
static bool int_value(const ar_schema *s, const char *t, size_t len, bool plain, const char *q,
                      const char *range, ar_schema_value *out, char *why, size_t cap) {
  bool ovf;
  if (!plain) {
    snprintf(why, cap, "expected an integer, got the quoted string '%s'; remove the quotes", q);
    return false;
  }
  if (!parse_int(t, len, &out->i, &ovf)) {
    snprintf(why, cap, "expected an integer, got '%s'", q);
    return false;
  }
  if (ovf || out->i < s->imin || out->i > s->imax) {
    snprintf(why, cap, "%s is out of range: must be %s", q, range);
    return false;
  }
  return true;
}

static bool float_value(const ar_schema *s, const char *t, size_t len, bool plain,
                        const char *q, const char *range, ar_schema_value *out, char *why,
                        size_t cap) {
  bool big;
  if (!plain) {
    snprintf(why, cap, "expected a number, got the quoted string '%s'; remove the quotes", q);
    return false;
  }
  if (!parse_float(t, len, &out->f, &big)) {
    snprintf(why, cap, "expected a number, got '%s'", q);
    return false;
  }
  double v = out->f;
  if (big || v < s->fmin || (s->fmin_open && v == s->fmin) || v > s->fmax ||
      (s->fmax_open && v == s->fmax)) {
    snprintf(why, cap, "%s is out of range: must be %s", q, range);
    return false;
  }
  return true;
}

static bool enum_value(const ar_schema *s, const char *t, size_t len, const char *q,
                       ar_schema_value *out, char *why, size_t cap) {
  int n = 0;
  for (; s->values[n]; n++)
    if (strlen(s->values[n]) == len && !memcmp(s->values[n], t, len)) {
      out->e = n;
      return true;
    }
  char list[256] = "";
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof list; i++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                             s->values[i]);
  const char *near = closest(t, len, s->values, n);
  if (near)
    snprintf(why, cap, "'%s' is not allowed: use one of %s; did you mean '%s'?", q, list, near);
  else
    snprintf(why, cap, "'%s' is not allowed: use one of %s", q, list);
  return false;
}

/* Strings, names (no '/', no control characters, not '.' or '..') and
 * paths (not empty). */
static bool text_value(const ar_schema *s, const char *t, size_t len, const char *q,
                       ar_schema_value *out, char *why, size_t cap) {
  if (memchr(t, '\0', len)) {
    snprintf(why, cap, "'%s' contains a NUL character", q);
    return false;
  }
  if (s->type != AR_SCHEMA_STRING && len == 0) {
    snprintf(why, cap, "must not be empty");
    return false;
  }
  if (s->type == AR_SCHEMA_NAME) {
    bool bad = (len == 1 && t[0] == '.') || (len == 2 && t[0] == '.' && t[1] == '.');
    for (size_t i = 0; i < len; i++)
      if (t[i] == '/' || (unsigned char)t[i] < 0x20 || t[i] == 0x7f)
        bad = true;
    if (bad) {
      snprintf(why, cap,
               "'%s' is not a valid name: no '/', no control characters, not '.' or '..'", q);
      return false;
    }
  }
  out->s = t;
  return true;
}

static bool scalar_value(const ar_schema *s, const char *t, size_t len,
                         bool plain, ar_schema_value *out, char *why,
                         size_t cap) {
  char q[160], range[96];
  ar__yquote(t, len, QUOTE_MAX, q, sizeof q);
  ar__schema_range_text(s, range, sizeof range);
  switch (s->type) {
  case AR_SCHEMA_INT:
    return int_value(s, t, len, plain, q, range, out, why, cap);
  case AR_SCHEMA_FLOAT:
    return float_value(s, t, len, plain, q, range, out, why, cap);
  case AR_SCHEMA_ENUM:
    return enum_value(s, t, len, q, out, why, cap);
  case AR_SCHEMA_SIZE:
    return parse_size(t, len, plain, out, why, cap);
  case AR_SCHEMA_DEVICE:
    if (!valid_device(t, len)) {
      static const char *const devs[] = {"auto", "host", "cuda:0"};
      const char *near = closest(t, len, devs, 3);
      snprintf(why, cap, "expected 'auto', 'host' or 'cuda:N' (N >= 0), got '%s'%s%s%s", q,
               near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
      return false;
    }
    out->s = t;
    return true;
  case AR_SCHEMA_STRING:
  case AR_SCHEMA_NAME:
  case AR_SCHEMA_PATH:
    return text_value(s, t, len, q, out, why, cap);
  default:
    AR_ASSERT(!"not a scalar entry");
    return false;
  }
}

/* What an entry expects, in words, for type errors ("an integer",
 * "one of xc, libsvm").  Returns buf. */
static const char *expected(const ar_schema *s, char *buf, size_t cap) {
  if (s->expect) { /* the table's own words */
    snprintf(buf, cap, "%s", s->expect);
    return buf;
  }
  const char *w = NULL;
  switch (s->type) {
  case AR_SCHEMA_ANY:
    w = "a value";
    break;
  case AR_SCHEMA_MAP:
    w = "a mapping of keys";
    break;
  case AR_SCHEMA_LIST:
    w = "a list";
    break;
  case AR_SCHEMA_INT:
    w = "an integer";
    break;
  case AR_SCHEMA_FLOAT:
    w = "a number";
    break;
  case AR_SCHEMA_DEVICE:
    w = "'auto', 'host' or 'cuda:N'";
    break;
  case AR_SCHEMA_SIZE:
    w = "a size such as 8GiB or 90%";
    break;
  case AR_SCHEMA_NAME:
    w = "a name";
    break;
  case AR_SCHEMA_PATH:
    w = "a path";
    break;
  case AR_SCHEMA_STRING:
  case AR_SCHEMA_RESERVED:
    w = "a single value";
    break;
  case AR_SCHEMA_ENUM: {
    size_t used = (size_t)snprintf(buf, cap, "one of");
    for (int i = 0; s->values[i] && used < cap; i++)
      used += (size_t)snprintf(buf + used, cap - used, "%s %s", i ? "," : "",
                               s->values[i]);
    return buf;
  }
  case AR_SCHEMA_VARIANT:
    snprintf(buf, cap,
             "'%s' or '%s' (or a mapping with one of them as its "
             "only key)",
             s->kids[0].key, s->kids[1].key);
    return buf;
  }
  snprintf(buf, cap, "%s", w);
  return buf;
}

/* ---- validation against the schema --------------------------------------- */

static void check(ctx *c, const ar_schema *s, const ar_ynode *v,
                  const ar_ynode *key);

static void unknown_key(ctx *c, const ar_schema *s, const ar_ynode *k) {
  const char *names[32];
  int n = 0;
  char list[512] = "";
  size_t used = 0;
  for (const ar_schema *e = s->kids; e->key && n < 32; e++) {
    names[n++] = e->key;
    if (used < sizeof list)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                               n > 1 ? ", " : "", e->key);
  }
  char q[160], where[256] = "";
  ar__yquote(k->text, k->len, QUOTE_MAX, q, sizeof q);
  const char *near = closest(k->text, k->len, names, n);
  if (near)
    diag(c, k, "unknown key '%s'; did you mean '%s'?", q, near);
  else if (find_elsewhere(c->top, s, k->text, k->len, where, sizeof where))
    diag(c, k, "unknown key '%s' here; did you mean '%s'?", q, where);
  else
    diag(c, k, "unknown key '%s'; allowed keys: %s", q, list);
}

/* Reports k, a key the table does not have, with the path convention of
 * the check at hand (see ctx.unknown_at_map). */
static void unknown_key_at(ctx *c, const ar_schema *s, const ar_ynode *k) {
  if (c->unknown_at_map) {
    unknown_key(c, s, k);
    return;
  }
  size_t old = push_key(c, k);
  unknown_key(c, s, k);
  pop(c, old);
}

static void check_map(ctx *c, const ar_schema *s, const ar_ynode *m,
                      const ar_ynode *key) {
  for (int i = 0; i < m->n; i++) {
    const ar_ynode *k = m->keys[i];
    const ar_schema *ks = ar__schema_kid(s, k->text, k->len);
    if (!ks) {
      unknown_key_at(c, s, k);
      continue;
    }
    size_t old = push_key(c, k);
    check(c, ks, m->vals[i], k);
    pop(c, old);
  }
  const ar_ynode *at = key ? key : m;
  for (const ar_schema *e = s->kids; e->key; e++)
    if (e->required && ar__ymap_find(m, e->key) < 0)
      diag(c, at, "missing required key '%s'%s%s", e->key,
           e->expect ? "; expected " : "", e->expect ? e->expect : "");
  for (const ar_schema_rule *r = s->rules; r && r->kind != AR_SCHEMA_RULES_END;
       r++) {
    int ia = ar__ymap_find(m, r->a), ib = ar__ymap_find(m, r->b);
    if (ia >= 0 && ib >= 0) {
      /* Point at whichever of the two comes second. */
      const ar_ynode *first = m->keys[ia < ib ? ia : ib];
      const ar_ynode *second = m->keys[ia < ib ? ib : ia];
      char q1[160], q2[160];
      ar__yquote(first->text, first->len, 40, q1, sizeof q1);
      ar__yquote(second->text, second->len, 40, q2, sizeof q2);
      size_t old = push_key(c, second);
      if (first->set < 0 && first->line > 0)
        diag(c, second,
             "conflicting keys '%s' (line %d) and '%s': give only "
             "one; %s",
             q1, first->line, q2, r->why);
      else
        diag(c, second, "conflicting keys '%s' and '%s': give only one; %s", q1,
             q2, r->why);
      pop(c, old);
    } else if (r->kind == AR_SCHEMA_ONE_OF && ia < 0 && ib < 0) {
      diag(c, at, "missing key: give one of '%s' or '%s'; %s", r->a, r->b,
           r->why);
    }
  }
}

static void check_variant(ctx *c, const ar_schema *s, const ar_ynode *v) {
  const char *names[8];
  int n = 0;
  for (const ar_schema *e = s->kids; e->key && n < 8; e++)
    names[n++] = e->key;
  AR_ASSERT(n == 2); /* the messages name two alternatives */
  char want[256];
  if (v->kind == AR_YNODE_SCALAR) {
    if (ar__schema_kid(s, v->text, v->len))
      return;
    char q[160];
    const char *near = closest(v->text, v->len, names, n);
    ar__yquote(v->text, v->len, QUOTE_MAX, q, sizeof q);
    diag(c, v, "expected %s, got '%s'%s%s%s", expected(s, want, sizeof want), q,
         near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    return;
  }
  if (v->kind != AR_YNODE_MAP) {
    diag(c, v, "expected %s, got a list", expected(s, want, sizeof want));
    return;
  }
  const ar_ynode *first = NULL;
  for (int i = 0; i < v->n; i++) {
    const ar_ynode *k = v->keys[i];
    const ar_schema *ks = ar__schema_kid(s, k->text, k->len);
    if (!ks) {
      unknown_key_at(c, s, k);
      continue;
    }
    size_t old = push_key(c, k);
    if (first) {
      char q1[160], q2[160];
      ar__yquote(first->text, first->len, 40, q1, sizeof q1);
      ar__yquote(k->text, k->len, 40, q2, sizeof q2);
      diag(c, k, "conflicting keys '%s' and '%s': give only one", q1, q2);
    }
    first = first ? first : k;
    check(c, ks, v->vals[i], k);
    pop(c, old);
  }
  if (v->n == 0)
    diag(c, v, "empty mapping: give '%s' or '%s'", names[0], names[1]);
}

/* Checks value v against entry s; key is the key node that led here (NULL
 * at the top and for list items), for problems "at the parent". */
static void check(ctx *c, const ar_schema *s, const ar_ynode *v,
                  const ar_ynode *key) {
  char desc[200], why[512], want[256];
  if (s->type == AR_SCHEMA_ANY)
    return; /* the module that reads the file checks it */
  if (s->type == AR_SCHEMA_RESERVED) {
    diag(c, key ? key : v, "%s", s->reserved_msg);
    return;
  }
  if (ar__ynode_is_null(v)) {
    diag(c, v, "expected %s, got an empty value; %s",
         expected(s, want, sizeof want),
         s->required ? "give a value" : "remove the key to use the default");
    return;
  }
  switch (s->type) {
  case AR_SCHEMA_MAP:
    if (v->kind != AR_YNODE_MAP)
      diag(c, v, "expected %s, got %s", expected(s, want, sizeof want),
           describe(v, desc, sizeof desc));
    else
      check_map(c, s, v, key);
    return;
  case AR_SCHEMA_LIST:
    if (v->kind != AR_YNODE_SEQ) {
      diag(c, v, "expected %s, got %s", expected(s, want, sizeof want),
           describe(v, desc, sizeof desc));
      return;
    }
    if (v->n < s->min_items)
      diag(c, v, "needs at least %d item%s, got %d", s->min_items,
           s->min_items == 1 ? "" : "s", v->n);
    for (int i = 0; i < v->n; i++) {
      size_t old = push_index(c, i);
      check(c, &s->kids[0], v->vals[i], NULL);
      pop(c, old);
    }
    return;
  case AR_SCHEMA_VARIANT:
    check_variant(c, s, v);
    return;
  default:
    break;
  }
  if (v->kind != AR_YNODE_SCALAR) {
    diag(c, v, "expected %s, got %s", expected(s, want, sizeof want),
         describe(v, desc, sizeof desc));
    return;
  }
  ar_schema_value out;
  if (scalar_value(s, v->text, v->len, v->plain, &out, why, sizeof why))
    return;
  if (s->expect) /* the table's words instead of the type's */
    diag(c, v, "expected %s, got %s", s->expect,
         describe(v, desc, sizeof desc));
  else
    diag(c, v, "%s", why);
}

/* ---- --set overrides ---------------------------------------------------- */

typedef struct seg {
  const char *s;
  size_t len;
  bool index; /* written as [N] */
} seg;

/* Splits "model.layers[1].dense" into segments; false on a malformed key
 * with the reason in why. */
static bool split_key(const char *k, size_t len, seg *segs, int *n, char *why,
                      size_t cap) {
  *n = 0;
  size_t i = 0;
  while (i < len) {
    if (*n == MAX_SET_SEGMENTS) {
      snprintf(why, cap, "too many parts in the key (at most %d)",
               MAX_SET_SEGMENTS);
      return false;
    }
    if (k[i] == '[') {
      size_t j = i + 1;
      while (j < len && k[j] >= '0' && k[j] <= '9')
        j++;
      if (j == i + 1 || j >= len || k[j] != ']') {
        snprintf(why, cap, "expected [N] with N a list index");
        return false;
      }
      segs[(*n)++] = (seg){k + i + 1, j - i - 1, true};
      i = j + 1;
      if (i < len && k[i] == '.') {
        i++;
        if (i == len) {
          snprintf(why, cap, "the key ends with '.'");
          return false;
        }
      } else if (i < len && k[i] != '[') {
        snprintf(why, cap, "expected '.' or '[' after ']'");
        return false;
      }
      continue;
    }
    size_t j = i;
    while (j < len && k[j] != '.' && k[j] != '[')
      j++;
    if (j == i) {
      snprintf(why, cap, "empty part in the key");
      return false;
    }
    segs[(*n)++] = (seg){k + i, j - i, false};
    i = j;
    if (i < len && k[i] == '.') {
      i++;
      if (i == len) {
        snprintf(why, cap, "the key ends with '.'");
        return false;
      }
    }
  }
  if (*n == 0) {
    snprintf(why, cap, "the key is empty");
    return false;
  }
  return true;
}

static bool seg_is_number(const seg *g, int *out) {
  if (g->len == 0 || g->len > 9)
    return false;
  int v = 0;
  for (size_t i = 0; i < g->len; i++) {
    if (g->s[i] < '0' || g->s[i] > '9')
      return false;
    v = v * 10 + (g->s[i] - '0');
  }
  *out = v;
  return true;
}

/* The index of the item of a list addressed by g (index or name), or -1
 * after reporting. */
static int find_item(ctx *c, int set, const ar_ynode *seq, const seg *g,
                     const char *where) {
  int idx;
  char q[160];
  ar__yquote(g->s, g->len, 40, q, sizeof q);
  if (g->index || seg_is_number(g, &idx)) {
    if (!seg_is_number(g, &idx) || idx >= seq->n) {
      diag_path(c, &(ar_ynode){.set = set}, c->set_key,
                "index %s is out of range: '%s' has %d item%s", q, where,
                seq->n, seq->n == 1 ? "" : "s");
      return -1;
    }
    return idx;
  }
  for (int i = 0; i < seq->n; i++) {
    const ar_ynode *name = ar_ynode_get(seq->vals[i], "name");
    if (name && name->kind == AR_YNODE_SCALAR && name->len == g->len &&
        !memcmp(name->text, g->s, g->len))
      return i;
  }
  /* An item without a name answers to its default name, "layer<i>". */
  if (g->len > 5 && !memcmp(g->s, "layer", 5)) {
    seg num = {g->s + 5, g->len - 5, false};
    if (seg_is_number(&num, &idx) && idx < seq->n &&
        seq->vals[idx]->kind == AR_YNODE_MAP &&
        !ar_ynode_get(seq->vals[idx], "name"))
      return idx;
  }
  diag_path(c, &(ar_ynode){.set = set}, c->set_key,
            "no item of '%s' is named '%s'; address items by index "
            "('%s[0]') or by their name",
            where, q, where);
  return -1;
}

/* Applies override number i: parses its value and hangs it at its path,
 * creating missing mappings.  Problems are reported and the override
 * skipped. */
/* How one step of an override's walk down the tree ended. */
typedef enum walk_step { WALK_ON, WALK_PLACED, WALK_FAILED } walk_step;

/* The walk so far, for the steps and their messages. */
typedef struct set_walk {
  ctx *c;
  int i;          /* the override's number */
  ar_ynode *fake; /* stamps its diagnostics */
  const seg *segs;
  int n;
  ar_ynode *val;  /* placed at the end (ownership passes to the tree) */
  char where[512]; /* the path walked so far */
} set_walk;

/* Segment s of the key into the mapping *cur: the value placed at the
 * last segment, else *cur moves to (or makes) the mapping it names. */
static walk_step map_step(set_walk *w, ar_ynode **cur, int s, const char *q) {
  ctx *c = w->c;
  const seg *g = &w->segs[s];
  size_t wl = strlen(w->where);
  if (g->index) {
    diag_path(c, w->fake, c->set_key,
              "'%s' is a mapping, not a list: address it with a key, not [%s]",
              wl ? w->where : "the top level", q);
    return WALK_FAILED;
  }
  ar_ynode *m = *cur;
  int j = -1;
  for (int t = 0; t < m->n; t++)
    if (m->keys[t]->len == g->len && !memcmp(m->keys[t]->text, g->s, g->len))
      j = t;
  if (s == w->n - 1) {
    if (j >= 0) {
      ar_ynode_destroy(m->vals[j]);
      m->vals[j] = w->val;
      return WALK_PLACED;
    }
    ar_ynode *k = ar__ynode_new(AR_YNODE_SCALAR, 0, 0, w->i, g->s, g->len);
    if (!k || ar__ynode_append(m, k, w->val) != AR_OK) {
      ar_ynode_destroy(k);
      c->nomem = true;
      return WALK_FAILED;
    }
    return WALK_PLACED;
  }
  if (j >= 0 && ar__ynode_is_null(m->vals[j])) {
    /* "output:" left empty in the file: fill it like a missing key. */
    ar_ynode *fresh = ar__ynode_new(AR_YNODE_MAP, 0, 0, w->i, NULL, 0);
    if (!fresh) {
      c->nomem = true;
      return WALK_FAILED;
    }
    ar_ynode_destroy(m->vals[j]);
    m->vals[j] = fresh;
  } else if (j >= 0 && m->vals[j]->kind == AR_YNODE_SCALAR) {
    const ar_ynode *sv = m->vals[j];
    char vq[160], here[700], next[160];
    ar__yquote(sv->text, sv->len, 40, vq, sizeof vq);
    snprintf(here, sizeof here, "%s%s%s", w->where, wl ? "." : "", q);
    ar__yquote(w->segs[s + 1].s, w->segs[s + 1].len, 40, next, sizeof next);
    diag_path(c, w->fake, c->set_key,
              "'%s' holds the single value '%s', so it has no key '%s'; "
              "set '%s' as a whole instead",
              here, vq, next, here);
    return WALK_FAILED;
  } else if (j < 0) {
    ar_ynode *k = ar__ynode_new(AR_YNODE_SCALAR, 0, 0, w->i, g->s, g->len);
    ar_ynode *fresh = ar__ynode_new(AR_YNODE_MAP, 0, 0, w->i, NULL, 0);
    if (!k || !fresh || ar__ynode_append(m, k, fresh) != AR_OK) {
      ar_ynode_destroy(k);
      ar_ynode_destroy(fresh);
      c->nomem = true;
      return WALK_FAILED;
    }
    j = m->n - 1;
  }
  *cur = m->vals[j];
  return WALK_ON;
}

/* Segment s into the list *cur (an index or a layer's name). */
static walk_step seq_step(set_walk *w, ar_ynode **cur, int s) {
  ctx *c = w->c;
  int j = find_item(c, w->i, *cur, &w->segs[s], w->where);
  if (j < 0)
    return WALK_FAILED;
  if (s == w->n - 1) {
    ar_ynode_destroy((*cur)->vals[j]);
    (*cur)->vals[j] = w->val;
    return WALK_PLACED;
  }
  if ((*cur)->vals[j]->kind == AR_YNODE_SCALAR) {
    diag_path(c, w->fake, c->set_key, "item %d of '%s' is a single value, not a mapping", j,
              w->where);
    return WALK_FAILED;
  }
  *cur = (*cur)->vals[j];
  return WALK_ON;
}

/* The override's value: YAML of its own, stamped with the override's
 * number; an empty value ("key=") is an empty scalar, judged by
 * validation.  NULL after a reported error. */
static ar_ynode *set_value(ctx *c, int i, const char *text) {
  ar_ynode *val = NULL;
  set_report rep = {c, i};
  ar_status st = ar__yaml_parse(text, strlen(text), i, report_set, &rep, &val);
  if (st == AR_NOMEM)
    c->nomem = true;
  if (st != AR_OK)
    return NULL;
  if (!val && !(val = ar__ynode_new(AR_YNODE_SCALAR, 0, 0, i, "", 0)))
    c->nomem = true;
  return val;
}

static void apply_set(ctx *c, ar_ynode *root, int i) {
  const char *arg = c->sets[i];
  ar_ynode *fake = &(ar_ynode){.set = i};
  if (!arg) {
    diag_path(c, fake, NULL, "empty override; expected KEY.PATH=VALUE");
    return;
  }
  const char *eq = strchr(arg, '=');
  size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
  ar__yquote(arg, klen, sizeof c->set_key - 8, c->set_key, sizeof c->set_key);
  if (!eq) {
    diag_path(c, fake, NULL, "expected KEY.PATH=VALUE, e.g. train.batch=256");
    return;
  }
  seg segs[MAX_SET_SEGMENTS];
  int n;
  char why[256];
  if (!split_key(arg, klen, segs, &n, why, sizeof why)) {
    diag_path(c, fake, c->set_key, "%s", why);
    return;
  }
  set_walk w = {c, i, fake, segs, n, set_value(c, i, eq + 1), ""};
  if (!w.val)
    return;
  ar_ynode *cur = root;
  for (int s = 0; s < n; s++) {
    char q[160];
    ar__yquote(segs[s].s, segs[s].len, 40, q, sizeof q);
    AR_ASSERT(cur->kind == AR_YNODE_MAP || cur->kind == AR_YNODE_SEQ);
    walk_step r = cur->kind == AR_YNODE_MAP ? map_step(&w, &cur, s, q) : seq_step(&w, &cur, s);
    if (r == WALK_PLACED)
      return;
    if (r == WALK_FAILED)
      break;
    size_t wl = strlen(w.where);
    snprintf(w.where + wl, sizeof w.where - wl, segs[s].index ? "[%s]" : "%s%s",
             segs[s].index ? q : (wl ? "." : ""), q);
  }
  ar_ynode_destroy(w.val);
}

/* ---- conversion --------------------------------------------------------- */

static const ar_schema *kid(const ar_schema *parent, const char *key) {
  const ar_schema *k = ar__schema_kid(parent, key, strlen(key));
  AR_ASSERT(k); /* a key missing from the table is a bug in this file */
  return k;
}

/* The valid value of `key` in map m (entry ms), or its default.  false
 * when the value is invalid (already reported) or absent without default;
 * *node gets the value's node or NULL. */
static bool get(const ar_ynode *m, const ar_schema *ms, const char *key,
                ar_schema_value *out, const ar_ynode **node) {
  const ar_schema *s = kid(ms, key);
  const ar_ynode *v = ar_ynode_get(m, key);
  char why[512];
  if (node)
    *node = v;
  if (v) {
    if (v->kind != AR_YNODE_SCALAR || ar__ynode_is_null(v))
      return false;
    return scalar_value(s, v->text, v->len, v->plain, out, why, sizeof why);
  }
  if (!s->def)
    return false;
  bool ok = scalar_value(s, s->def, strlen(s->def), true, out, why, sizeof why);
  AR_ASSERT(ok); /* defaults are checked by tests/spec */
  return ok;
}

static int64_t get_int(const ar_ynode *m, const ar_schema *ms, const char *key,
                       bool *ok) {
  ar_schema_value v = {0};
  if (!get(m, ms, key, &v, NULL)) {
    *ok = false;
    return 0;
  }
  return v.i;
}

static double get_float(const ar_ynode *m, const ar_schema *ms,
                        const char *key) {
  ar_schema_value v = {0};
  return get(m, ms, key, &v, NULL) ? v.f : 0.0;
}

bool ar_schema_get(const ar_schema *map, const ar_ynode *m, const char *key,
                   ar_schema_value *out) {
  *out = (ar_schema_value){0};
  return get(m, map, key, out, NULL);
}

/* A map value or NULL (absent, or invalid and already reported). */
static const ar_ynode *get_map(const ar_ynode *m, const char *key) {
  const ar_ynode *v = ar_ynode_get(m, key);
  return v && v->kind == AR_YNODE_MAP ? v : NULL;
}

/* A copy of a string; out of memory is noted in the context. */
static char *dup_text(ctx *c, const char *s) {
  char *d = ar_strdup(s);
  if (!d)
    c->nomem = true;
  return d;
}

/* Data paths in the file resolve against the job file's folder; paths from
 * --set are the user's own, relative to the working directory. */
static char *resolve(ctx *c, const ar_ynode *v) {
  const char *p = v->text;
  if (v->set >= 0 || !c->base_dir || !c->base_dir[0] || p[0] == '/')
    return dup_text(c, p);
  size_t bl = strlen(c->base_dir), pl = strlen(p);
  bool slash = c->base_dir[bl - 1] == '/';
  char *r = ar_malloc(bl + pl + 2);
  if (!r) {
    c->nomem = true;
    return NULL;
  }
  memcpy(r, c->base_dir, bl);
  if (!slash)
    r[bl++] = '/';
  memcpy(r + bl, p, pl + 1);
  return r;
}

static void check_file(ctx *c, const ar_ynode *at, const char *key, const char *path,
                       bool folder) {
  char q[512];
  struct stat st;
  ar__yquote(path, strlen(path), 300, q, sizeof q);
  if (stat(path, &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      diag_path(c, at, key,
                "file '%s' does not exist; fix the path or use "
                "--set %s=PATH",
                q, key);
    else
      diag_path(c, at, key,
                "file '%s' cannot be read (%s); fix the path or "
                "use --set %s=PATH",
                q, strerror(errno), key);
    return;
  }
  if (S_ISDIR(st.st_mode) != folder) {
    diag_path(c, at, key,
              folder ? "'%s' is not a folder (format npy reads x.npy and y.npy from one); "
                       "fix the path or use --set %s=PATH"
                     : "'%s' is a folder, not a file; fix the path or use --set %s=PATH",
              q, key);
    return;
  }
  if (access(path, R_OK) != 0)
    diag_path(c, at, key,
              "file '%s' cannot be read (%s); fix its permissions "
              "or use --set %s=PATH",
              q, strerror(errno), key);
}

/* The job name from the file name: "jobs/xc-small.yaml" -> "xc-small". */
static char *name_from_file(ctx *c, const char *file) {
  const char *base = file ? strrchr(file, '/') : NULL;
  base = base ? base + 1 : file;
  size_t len = base ? strlen(base) : 0;
  const char *dot = len ? strrchr(base, '.') : NULL;
  if (dot && dot != base)
    len = (size_t)(dot - base);
  char why[256];
  ar_schema_value v;
  if (len == 0 || !scalar_value(kid(ar__schema_root(), "name"), base, len,
                                false, &v, why, sizeof why))
    return dup_text(c, "job");
  char *n = ar_malloc(len + 1);
  if (!n) {
    c->nomem = true;
    return NULL;
  }
  memcpy(n, base, len);
  n[len] = '\0';
  return n;
}

/* Layer names must be unique; sorting keeps this O(n log n). */
typedef struct name_ref {
  const char *name;
  int i;
} name_ref;

static int name_cmp(const void *pa, const void *pb) {
  const name_ref *a = pa, *b = pb;
  int r = strcmp(a->name, b->name);
  return r ? r : (a->i > b->i) - (a->i < b->i);
}

static void check_unique_names(ctx *c, const ar_spec *sp,
                               const ar_ynode *layers) {
  if (sp->n_layers < 2)
    return;
  name_ref *refs = ar_malloc((size_t)sp->n_layers * sizeof *refs);
  if (!refs) {
    c->nomem = true;
    return;
  }
  int n = 0;
  for (int i = 0; i < sp->n_layers; i++)
    if (sp->layers[i].name)
      refs[n++] = (name_ref){sp->layers[i].name, i};
  qsort(refs, (size_t)n, sizeof *refs, name_cmp);
  for (int j = 1; j < n; j++) {
    if (strcmp(refs[j].name, refs[j - 1].name) != 0)
      continue;
    int first = refs[j - 1].i;
    while (j < n && !strcmp(refs[j].name, sp->layers[first].name)) {
      int i = refs[j].i;
      const ar_ynode *item = layers->vals[i];
      const ar_ynode *at = ar_ynode_get(item, "name");
      char path[64], q[160];
      snprintf(path, sizeof path, "model.layers[%d].name", i);
      ar__yquote(refs[j].name, strlen(refs[j].name), 40, q, sizeof q);
      diag_path(c, at ? at : item, path,
                "layer name '%s' is already used by model.layers[%d]; names "
                "must be unique",
                q, first);
      j++;
    }
  }
  ar_free(refs);
}

static void convert_sparse_at(ctx *c, const ar_ynode *m, const ar_schema *ss, const char *path,
                              ar_layer_spec *ls);

/* layers[i].sparse; the layer's activation is already converted. */
static void convert_sparse(ctx *c, const ar_ynode *m, const ar_schema *ss,
                           int i, ar_layer_spec *ls) {
  char path[64];
  snprintf(path, sizeof path, "model.layers[%d].sparse", i);
  convert_sparse_at(c, m, ss, path, ls);
}

/* A sparse section at path (model.layers[i].sparse, model.sparse.NODE). */
static void convert_sparse_at(ctx *c, const ar_ynode *m, const ar_schema *ss, const char *path,
                              ar_layer_spec *ls) {
  ar_sparse_spec *sp = &ls->sparse;
  if (!m)
    return; /* absent (or invalid, reported): a dense layer */
  ar_schema_value v;
  bool ok = true;
  sp->mode = get(m, ss, "mode", &v, NULL) ? (ar_sparse_mode)(AR_SPARSE_DENSE + v.e)
                                          : AR_SPARSE_AUTO;
  sp->auto_min_width = get_int(m, ss, "auto_min_width", &ok);
  if (get(m, ss, "hash", &v, NULL))
    sp->hash = (ar_sparse_hash)v.e;
  /* 0: chosen from the width (ar_sparse_auto_K) */
  sp->K = ar_ynode_get(m, "K") ? (int32_t)get_int(m, ss, "K", &ok) : 0;
  sp->L = (int32_t)get_int(m, ss, "L", &ok);
  sp->bucket = (int32_t)get_int(m, ss, "bucket", &ok);
  sp->reservoir = get(m, ss, "insert", &v, NULL) && v.e == 1;
  if (get(m, ss, "sampling", &v, NULL))
    sp->sampling = (ar_sparse_sampling)v.e;
  sp->active = get_float(m, ss, "active");
  sp->min_active = ar_ynode_get(m, "min_active")
                       ? (int32_t)get_int(m, ss, "min_active", &ok)
                       : -1; /* the budget */
  sp->max_active = (int32_t)get_int(m, ss, "max_active", &ok);
  sp->negatives = ar_ynode_get(m, "negatives")
                      ? (int32_t)get_int(m, ss, "negatives", &ok)
                      : -1; /* ar_layer_negatives' default */
  sp->correction = get(m, ss, "correction", &v, NULL) ? (int8_t)v.e : -1;
  sp->catch_up = get_int(m, ss, "catch_up", &ok);
  sp->rescore = (int32_t)get_int(m, ss, "rescore", &ok);
  sp->threshold = (int32_t)get_int(m, ss, "threshold", &ok);
  const ar_schema *rs = kid(ss, "rehash");
  const ar_ynode *r = get_map(m, "rehash");
  sp->rehash_every = get_int(r, rs, "every", &ok);
  sp->rehash_growth = get_float(r, rs, "growth");
  sp->new_hash_every = get_int(r, rs, "new_hash_every", &ok);
  /* The sampled kernels compute relu or identity layers and softmax
   * output layers (SLIDE's network); sigmoid needs every neuron. */
  if (ls->act == AR_ACT_SIGMOID && sp->mode != AR_SPARSE_DENSE)
    diag_path(c, m, path,
              "a sigmoid layer cannot be LSH-sampled (its loss or output "
              "needs every neuron); use relu, none or softmax, or mode: "
              "dense");
  if (sp->min_active > 0 && sp->max_active > 0 &&
      sp->min_active > sp->max_active)
    diag_path(c, ar_ynode_get(m, "min_active"), path,
              "min_active %d is above max_active %d", sp->min_active,
              sp->max_active);
}

/* An integer list value: a number (given `fill` times) or a list of 1..max
 * numbers; false (reported at path) otherwise. */
static bool int_list(ctx *c, const ar_ynode *v, const char *path, int max, int64_t lo,
                     int64_t *out, int *n) {
  char buf[32];
  if (v->kind == AR_YNODE_SCALAR) {
    bool of = false;
    if (parse_int(v->text, v->len, &out[0], &of) && out[0] >= lo) {
      *n = 1;
      return true;
    }
  } else if (v->kind == AR_YNODE_SEQ && v->n >= 1 && v->n <= max) {
    bool good = true;
    for (int i = 0; i < v->n && good; i++) {
      bool of = false;
      const ar_ynode *e = v->vals[i];
      good = e->kind == AR_YNODE_SCALAR && parse_int(e->text, e->len, &out[i], &of) &&
             out[i] >= lo;
    }
    if (good) {
      *n = v->n;
      return true;
    }
  }
  diag_path(c, v, path, "expected a whole number >= %lld or a list of 1 to %d of them, got %s",
            (long long)lo, max, describe(v, buf, sizeof buf));
  return false;
}

/* kernel/stride/dilation: K or [KH, KW]; padding also [t, l, b, r]. */
static void pair_key(ctx *c, const ar_ynode *L, const char *key, const char *path0,
                     int64_t lo, int64_t *dst, bool four) {
  const ar_ynode *v = ar_ynode_get(L, key);
  if (!v)
    return;
  char path[192];
  snprintf(path, sizeof path, "%s.%s", path0, key);
  int64_t t[4];
  int n = 0;
  if (!int_list(c, v, path, four ? 4 : 2, lo, t, &n))
    return;
  if (n == 3) {
    diag_path(c, v, path, "give 1, 2 or 4 numbers, not 3");
    return;
  }
  if (!four) {
    dst[0] = t[0];
    dst[1] = n == 2 ? t[1] : t[0];
  } else if (n == 4) {
    memcpy(dst, t, sizeof t);
  } else {
    dst[0] = dst[2] = t[0];
    dst[1] = dst[3] = n >= 2 ? t[1] : t[0];
  }
}

static bool get_bool(const ar_ynode *L, const ar_schema *item, const char *key) {
  ar_schema_value v;
  return get(L, item, key, &v, NULL) && v.e == 1;
}

/* The graph keys of item L into ls->attr (over ar_nn_attr_defaults). */
static void convert_attr(ctx *c, const ar_ynode *L, const ar_schema *item, const char *path,
                         ar_layer_spec *ls) {
  ar_nn_attr *a = &ls->attr;
  ar_nn_attr_defaults(a);
  bool ok = true;
  a->out = ls->width;
  if (ar_ynode_get(L, "conv"))
    a->out = get_int(L, item, "conv", &ok);
  if (ar_ynode_get(L, "width"))
    a->out = get_int(L, item, "width", &ok);
  bool pool = ls->op == AR_NN_MAXPOOL || ls->op == AR_NN_AVGPOOL;
  pair_key(c, L, "kernel", path, 1, a->kernel, false);
  if (pool) { /* PyTorch: the stride defaults to the kernel */
    a->stride[0] = a->kernel[0];
    a->stride[1] = a->kernel[1];
  }
  pair_key(c, L, "stride", path, 1, a->stride, false);
  pair_key(c, L, "dilation", path, 1, a->dilation, false);
  if (ls->op == AR_NN_PAD) {
    const ar_ynode *v = ar_ynode_get(L, "padding");
    int64_t t[2 * AR_NN_MAX_DIMS];
    int n = 0;
    char p2[192];
    snprintf(p2, sizeof p2, "%s.padding", path);
    if (v && int_list(c, v, p2, 2 * (AR_NN_MAX_DIMS - 1), 0, t, &n)) {
      if (n % 2)
        diag_path(c, v, p2, "give [before, after] for each dimension after the batch's");
      for (int i = 0; i + 1 < n; i += 2) { /* dims 1.. */
        a->pad_nd[1 + i / 2] = t[i];
        a->pad_nd[AR_NN_MAX_DIMS + 1 + i / 2] = t[i + 1];
      }
    }
  } else {
    pair_key(c, L, "padding", path, 0, a->pad, true);
  }
  a->groups = get_int(L, item, "groups", &ok);
  a->bias = get_bool(L, item, "bias");
  a->eps = (float)get_float(L, item, "eps");
  a->momentum = (float)get_float(L, item, "momentum");
  a->alpha = (float)get_float(L, item, "alpha");
  a->p = (float)get_float(L, item, "p");
  a->scalar = (float)get_float(L, item, "scalar");
  a->axis = (int)get_int(L, item, "axis", &ok);
  a->axis_all = get_bool(L, item, "all");
  a->keepdims = get_bool(L, item, "keepdims");
  a->begin = get_int(L, item, "begin", &ok);
  a->end = get_int(L, item, "end", &ok);
  a->pad_id = get_int(L, item, "pad_id", &ok);
  a->heads = (int)get_int(L, item, "heads", &ok);
  a->causal = get_bool(L, item, "causal");
  a->trans_b = get_bool(L, item, "transpose_b");
  a->sparse_grad = get_bool(L, item, "sparse_grad");
  if (ar_ynode_get(L, "vocab"))
    a->vocab = get_int(L, item, "vocab", &ok);
  char p2[192];
  const ar_ynode *v;
  int n = 0;
  int64_t t[AR_NN_MAX_IO];
  if ((v = ar_ynode_get(L, "sizes"))) {
    snprintf(p2, sizeof p2, "%s.sizes", path);
    if (int_list(c, v, p2, AR_NN_MAX_IO, 1, t, &n)) {
      a->n_sizes = n;
      memcpy(a->sizes, t, (size_t)n * sizeof *t);
    }
  }
  if ((v = ar_ynode_get(L, "shape"))) {
    snprintf(p2, sizeof p2, "%s.shape", path);
    if (int_list(c, v, p2, AR_NN_MAX_DIMS - 1, -1, t, &n)) {
      a->shape.nd = n + 1; /* the batch's dimension first, kept (0) */
      a->shape.d[0] = 0;
      for (int i = 0; i < n; i++)
        a->shape.d[i + 1] = t[i];
    }
  }
  if ((v = ar_ynode_get(L, "perm"))) {
    snprintf(p2, sizeof p2, "%s.perm", path);
    if (int_list(c, v, p2, AR_NN_MAX_DIMS - 1, 0, t, &n))
      for (int i = 0; i < n; i++)
        a->perm[i + 1] = (int)t[i] + 1; /* the batch stays first */
  }
}

/* `inputs`: one name or a list of names. */
static void convert_inputs(ctx *c, const ar_ynode *L, const char *path, ar_layer_spec *ls) {
  const ar_ynode *v = ar_ynode_get(L, "inputs");
  if (!v)
    return;
  char p2[192], buf[32];
  snprintf(p2, sizeof p2, "%s.inputs", path);
  int n = v->kind == AR_YNODE_SEQ ? v->n : 1;
  if ((v->kind != AR_YNODE_SEQ && v->kind != AR_YNODE_SCALAR) || n < 1 || n > AR_NN_MAX_IO) {
    diag_path(c, v, p2, "expected a name or a list of 1 to %d names, got %s", AR_NN_MAX_IO,
              describe(v, buf, sizeof buf));
    return;
  }
  ls->inputs = ar_calloc((size_t)n, sizeof *ls->inputs);
  if (!ls->inputs) {
    c->nomem = true;
    return;
  }
  for (int i = 0; i < n; i++) {
    const ar_ynode *e = v->kind == AR_YNODE_SEQ ? v->vals[i] : v;
    if (e->kind != AR_YNODE_SCALAR || e->len == 0 || strlen(e->text) != e->len) {
      diag_path(c, e, p2, "expected a layer name, got %s", describe(e, buf, sizeof buf));
      continue;
    }
    ls->inputs[ls->n_inputs++] = dup_text(c, e->text);
  }
}

static void convert_items(ctx *c, const ar_ynode *layers, const ar_schema *item,
                          const char *prefix, bool top, ar_spec *sp, ar_layer_spec **out,
                          int *n_out);

/* One item of model.layers (or of a block): name, kind, activation, and
 * the graph keys. */
static void convert_item(ctx *c, const ar_ynode *L, const ar_schema *item, const char *path,
                         int i, bool last, ar_spec *sp, ar_layer_spec *ls) {
  ar_schema_value v;
  const ar_ynode *node;
  if (get(L, item, "name", &v, &node)) {
    ls->name = dup_text(c, v.s);
  } else if (!node) {
    char def[32];
    snprintf(def, sizeof def, "layer%d", i);
    ls->name = dup_text(c, def);
  }
  bool ok = true;
  static const char *const kinds[] = {"dense", "conv", "op", "repeat"};
  int given = 0;
  for (int k = 0; k < 4; k++)
    given += ar_ynode_get(L, kinds[k]) != NULL;
  if (given != 1)
    diag_path(c, L, path, "give exactly one of dense, conv, op or repeat (found %d)", given);
  ls->op = AR_NN_DENSE;
  ls->repeat = 1;
  if (ar_ynode_get(L, "dense"))
    ls->width = get_int(L, item, "dense", &ok);
  if (ar_ynode_get(L, "conv"))
    ls->op = AR_NN_CONV2D;
  if (get(L, item, "op", &v, &node))
    ls->op = (int)v.e;
  ls->graph_only = !ar_ynode_get(L, "dense") || ar_ynode_get(L, "inputs");
  if (ar_ynode_get(L, "repeat")) {
    ls->op = -1;
    ls->repeat = get_int(L, item, "repeat", &ok);
    const ar_ynode *b = ar_ynode_get(L, "block");
    char p2[192];
    snprintf(p2, sizeof p2, "%s.block", path);
    if (!b)
      diag_path(c, L, path, "`repeat` needs a `block` list of the items to repeat");
    else if (b->kind == AR_YNODE_SEQ)
      convert_items(c, b, item, p2, false, sp, &ls->block, &ls->n_block);
  } else if (ar_ynode_get(L, "block")) {
    diag_path(c, L, path, "`block` goes with `repeat`");
  }
  bool plain_dense = ls->op == AR_NN_DENSE;
  if (get(L, item, "activation", &v, &node)) {
    static const ar_act acts[] = {AR_ACT_RELU, AR_ACT_SIGMOID, AR_ACT_NONE, AR_ACT_SOFTMAX};
    ls->act = acts[v.e];
    char p2[192];
    snprintf(p2, sizeof p2, "%s.activation", path);
    if (last && ls->act != AR_ACT_SOFTMAX && ls->act != AR_ACT_SIGMOID)
      diag_path(c, node, p2,
                "the last layer's activation picks the loss "
                "and must be softmax or sigmoid, got '%s'",
                ar_act_name(ls->act));
    else if (!last && ls->act == AR_ACT_SOFTMAX)
      diag_path(c, node, p2,
                "softmax is only allowed on the last "
                "layer; use relu, sigmoid or none here");
  } else if (!node) {
    ls->act = last ? AR_ACT_SOFTMAX : plain_dense ? AR_ACT_RELU : AR_ACT_NONE;
  }
  convert_attr(c, L, item, path, ls);
  ls->attr.act = ls->act;
  convert_inputs(c, L, path, ls);
}

static void convert_items(ctx *c, const ar_ynode *layers, const ar_schema *item,
                          const char *prefix, bool top, ar_spec *sp, ar_layer_spec **out,
                          int *n_out) {
  ar_layer_spec *ls = ar_calloc((size_t)layers->n, sizeof *ls);
  if (!ls) {
    c->nomem = true;
    return;
  }
  *out = ls;
  *n_out = layers->n;
  for (int i = 0; i < layers->n; i++) {
    const ar_ynode *L = layers->vals[i];
    if (L->set < 0)
      ls[i].pos = (ar_srcpos){L->line, L->col};
    ls[i].op = AR_NN_DENSE;
    ls[i].repeat = 1;
    ar_nn_attr_defaults(&ls[i].attr);
    if (L->kind != AR_YNODE_MAP)
      continue; /* reported */
    char path[128];
    snprintf(path, sizeof path, "%s[%d]", prefix, i);
    convert_item(c, L, item, path, i, top && i == layers->n - 1, sp, &ls[i]);
    if (ls[i].graph_only)
      sp->graph = true;
    if (ls[i].op != AR_NN_DENSE || !top) {
      /* Only a top-level dense item samples (a graph model: its last). */
      const ar_ynode *sk = ar_ynode_get(L, "sparse");
      char p2[160];
      snprintf(p2, sizeof p2, "%s.sparse", path);
      if (sk)
        diag_path(c, sk, p2,
                  "only a dense item at the top of model.layers can be LSH-sampled (in a "
                  "graph model, the last one); remove this sparse section");
      convert_sparse(c, NULL, kid(item, "sparse"), i, &ls[i]);
    }
    else
      convert_sparse(c, get_map(L, "sparse"), kid(item, "sparse"), i, &ls[i]);
  }
}

/* model.input: exactly one kind. */
static void convert_input(ctx *c, const ar_ynode *model, ar_spec *sp) {
  const ar_schema *ms = kid(ar__schema_root(), "model");
  const ar_ynode *input = get_map(model, "input");
  if (!input)
    return;
  const ar_schema *is = kid(ms, "input");
  bool ok = true;
  static const char *const kinds[] = {"sparse", "dense", "image", "tokens"};
  int given = 0;
  for (int k = 0; k < 4; k++)
    if (ar_ynode_get(input, kinds[k])) {
      given++;
      sp->input.kind = (ar_input_kind)k;
    }
  if (given != 1)
    diag_path(c, input, "model.input",
              "give exactly one of sparse, dense, image or tokens (found %d)", given);
  sp->input.sparse = sp->input.kind == AR_INPUT_SPARSE;
  if (sp->input.kind <= AR_INPUT_DENSE) {
    sp->input.features = get_int(input, is, kinds[sp->input.kind], &ok);
  } else if (sp->input.kind == AR_INPUT_IMAGE) {
    sp->graph = true;
    const ar_ynode *v = ar_ynode_get(input, "image");
    int n = 0;
    if (int_list(c, v, "model.input.image", 3, 1, sp->input.image, &n) && n != 3)
      diag_path(c, v, "model.input.image", "expected [C, H, W], three numbers");
    sp->input.features = sp->input.image[0] * sp->input.image[1] * sp->input.image[2];
  } else {
    sp->graph = true;
    sp->input.features = get_int(input, is, "tokens", &ok);
    if (!ar_ynode_get(input, "vocab"))
      diag_path(c, input, "model.input", "`tokens` needs `vocab`, the number of token ids");
    else
      sp->input.vocab = get_int(input, is, "vocab", &ok);
  }
  if (sp->input.kind != AR_INPUT_TOKENS && ar_ynode_get(input, "vocab"))
    diag_path(c, ar_ynode_get(input, "vocab"), "model.input.vocab", "`vocab` goes with `tokens`");
}

/* Whether a graph model has a head that may train LSH-sampled. */
static bool graph_samples(const ar_spec *sp) {
  for (int i = 0; i < sp->n_layers; i++)
    if (sp->layers[i].sparse.mode == AR_SPARSE_LSH || sp->layers[i].sparse.mode == AR_SPARSE_AUTO)
      return true;
  for (int i = 0; i < sp->n_onnx_sparse; i++)
    if (sp->onnx_sparse[i].sparse.mode == AR_SPARSE_LSH ||
        sp->onnx_sparse[i].sparse.mode == AR_SPARSE_AUTO)
      return true;
  return false;
}

/* model.sparse: {NODE: {sparse section}} for an imported model, each
 * section checked against a layer's sparse entry of the schema. */
static void convert_onnx_sparse(ctx *c, const ar_ynode *model, ar_spec *sp) {
  const ar_ynode *m = ar_ynode_get(model, "sparse");
  if (!m)
    return;
  if (m->kind != AR_YNODE_MAP || m->n == 0) {
    diag_path(c, m, "model.sparse",
              "expected a mapping of node names to sparse sections ({NODE: {mode: lsh, "
              "...}}), naming the imported model's last Gemm");
    return;
  }
  const ar_schema *ms = kid(ar__schema_root(), "model");
  const ar_schema *ss = kid(&kid(ms, "layers")->kids[0], "sparse");
  sp->onnx_sparse = ar_calloc((size_t)m->n, sizeof *sp->onnx_sparse);
  if (!sp->onnx_sparse) {
    c->nomem = true;
    return;
  }
  for (int i = 0; i < m->n; i++) {
    const ar_ynode *k = m->keys[i], *v = m->vals[i];
    ar_layer_spec *ls = &sp->onnx_sparse[sp->n_onnx_sparse++];
    ls->name = dup_text(c, k->text);
    ls->act = AR_ACT_SOFTMAX;
    ls->op = AR_NN_DENSE;
    ls->repeat = 1;
    if (k->set < 0)
      ls->pos = (ar_srcpos){k->line, k->col};
    /* The walk's key path while checking: model.sparse.NODE. */
    size_t old = c->plen;
    snprintf(c->path + c->plen, sizeof c->path - c->plen, "%smodel.sparse", c->plen ? "." : "");
    c->plen = strlen(c->path);
    push_key(c, k);
    check(c, ss, v, k);
    pop(c, old);
    char path[200];
    snprintf(path, sizeof path, "model.sparse.%.150s", k->text);
    if (v->kind == AR_YNODE_MAP)
      convert_sparse_at(c, v, ss, path, ls);
  }
}

/* model.onnx: the model file instead of layers (exactly one of the two). */
static void convert_onnx(ctx *c, const ar_ynode *root, const ar_ynode *model, ar_spec *sp) {
  const ar_ynode *onnx = ar_ynode_get(model, "onnx"), *layers = ar_ynode_get(model, "layers");
  const ar_ynode *loss = ar_ynode_get(model, "loss");
  bool bce = loss && loss->kind == AR_YNODE_SCALAR && loss->len == 11 &&
             !memcmp(loss->text, "sigmoid_bce", 11);
  if (!onnx && bce) /* softmax_ce, the default, is what a written model has */
    diag_path(c, loss, "model.loss",
              "sigmoid_bce is for `onnx` models only; a written model's loss is its last "
              "layer's (remove model.loss)");
  if (!onnx) {
    if (!layers) /* reported at the key, as a missing required key is */
      diag_path(c, root->keys[ar__ymap_find(root, "model")], "model",
                "missing required key 'layers' (the model written out), or give `onnx` (a "
                "model file)");
    return;
  }
  if (layers)
    diag_path(c, layers, "model.layers", "give `layers` or `onnx`, not both");
  if (onnx->kind != AR_YNODE_SCALAR)
    return; /* reported by the schema */
  sp->graph = true;
  sp->bce = bce;
  sp->onnx = resolve(c, onnx);
  if (c->check_files && sp->onnx)
    check_file(c, onnx, "model.onnx", sp->onnx, false);
  convert_onnx_sparse(c, model, sp);
}

static void convert_model(ctx *c, const ar_ynode *root, ar_spec *sp) {
  const ar_schema *ms = kid(ar__schema_root(), "model");
  const ar_ynode *model = get_map(root, "model");
  convert_input(c, model, sp);
  if (model)
    convert_onnx(c, root, model, sp);
  const ar_ynode *layers = ar_ynode_get(model, "layers");
  if (!layers || layers->kind != AR_YNODE_SEQ || layers->n == 0)
    return;
  const ar_schema *item = &kid(ms, "layers")->kids[0];
  convert_items(c, layers, item, "model.layers", true, sp, &sp->layers, &sp->n_layers);
  check_unique_names(c, sp, layers);
}

static void convert_data(ctx *c, const ar_ynode *root, ar_spec *sp) {
  const ar_schema *ds = kid(ar__schema_root(), "data");
  const ar_ynode *data = get_map(root, "data");
  ar_schema_value v;
  const ar_ynode *node;
  bool ok = true;
  /* A missing file is reported at its key ("train:") when the path is
   * written in the file, and against the override when it came from one. */
  if (get(data, ds, "format", &v, NULL))
    sp->data.format = (ar_data_format)v.e;
  bool npy = sp->data.format == AR_FMT_NPY;
  if (sp->data.format >= AR_FMT_IDX)
    sp->graph = true;
  static const char *const paths[] = {"train", "test", "train_labels", "test_labels"};
  char **dst[] = {&sp->data.train, &sp->data.test, &sp->data.train_labels,
                  &sp->data.test_labels};
  for (int i = 0; i < 4; i++) {
    if (!get(data, ds, paths[i], &v, &node))
      continue;
    *dst[i] = resolve(c, node);
    const ar_ynode *k = data->keys[ar__ymap_find(data, paths[i])];
    char key[32];
    snprintf(key, sizeof key, "data.%s", paths[i]);
    if (c->check_files && *dst[i])
      check_file(c, node->set >= 0 ? node : k, key, *dst[i], npy && i < 2);
  }
  sp->data.normalize = get(data, ds, "normalize", &v, NULL) && v.e == 1;
  const ar_ynode *aug = get_map(data, "augment");
  const ar_schema *as = kid(ds, "augment");
  sp->data.crop_pad = get_int(aug, as, "crop_pad", &ok);
  sp->data.flip = get(aug, as, "flip", &v, NULL) && v.e == 1;
  sp->data.shuffle_window = get_int(data, ds, "shuffle_window", &ok);

  const ar_ynode *gen = get_map(data, "generate");
  if (!gen)
    return;
  const ar_schema *gs = kid(ds, "generate");
  ar_gen_spec *g = &sp->data.gen;
  sp->data.generate = true;
  g->train_points = get_int(gen, gs, "train_points", &ok);
  g->test_points = get_int(gen, gs, "test_points", &ok);
  g->nnz = (int32_t)get_int(gen, gs, "nnz", &ok);
  g->labels_per_point = (int32_t)get_int(gen, gs, "labels_per_point", &ok);
  g->noise = get_float(gen, gs, "noise");

  /* The generated data must fit the model: report both ends of a mismatch
   * so that whichever is wrong can be fixed where it is written. */
  bool fok = true, lok = true;
  g->features = get_int(gen, gs, "features", &fok);
  g->labels = get_int(gen, gs, "labels", &lok);
  const ar_ynode *input = get_map(get_map(root, "model"), "input");
  static const char *const in_keys[] = {"sparse", "dense", "image", "tokens"};
  const char *in_key = in_keys[sp->input.kind];
  if (sp->input.kind == AR_INPUT_IMAGE)
    diag_path(c, gen, "data.generate",
              "the generator makes token datasets (model.input.tokens) and extreme-"
              "classification sets; images come from files (data.format idx or npy)");
  if (sp->input.kind == AR_INPUT_TOKENS && lok && g->labels < 2)
    diag_path(c, ar_ynode_get(gen, "labels"), "data.generate.labels",
              "a generated token set has 2 classes (which marker comes first) or more "
              "(a class's digits at fixed positions); set 2 or more");
  if (sp->input.kind == AR_INPUT_TOKENS && sp->data.format != AR_FMT_NPY)
    diag_path(c, gen, "data.generate",
              "a generated token set is written as npy: set data.format: npy");
  const ar_ynode *in_node = ar_ynode_get(input, in_key);
  if (fok && sp->input.features > 0 && g->features != sp->input.features) {
    char ip[32];
    snprintf(ip, sizeof ip, "model.input.%s", in_key);
    diag_path(c, in_node, ip,
              "%" PRId64 " input features, but "
              "data.generate.features is %" PRId64 "; they must be equal",
              sp->input.features, g->features);
    diag_path(c, ar_ynode_get(gen, "features"), "data.generate.features",
              "%" PRId64 " features, but %s is %" PRId64 "; they must be "
              "equal",
              g->features, ip, sp->input.features);
  }
  int last = sp->n_layers - 1;
  if (lok && last >= 0 && sp->layers[last].width > 0 &&
      g->labels != sp->layers[last].width) {
    const ar_ynode *layers = ar_ynode_get(get_map(root, "model"), "layers");
    const ar_ynode *dn = ar_ynode_get(layers->vals[last], "dense");
    char lp[64];
    snprintf(lp, sizeof lp, "model.layers[%d].dense", last);
    diag_path(c, dn, lp,
              "the last layer has %" PRId64 " outputs, but "
              "data.generate.labels is %" PRId64 "; they must be equal",
              sp->layers[last].width, g->labels);
    diag_path(c, ar_ynode_get(gen, "labels"), "data.generate.labels",
              "%" PRId64 " labels, but the last layer (%s) has %" PRId64
              " outputs; they must be equal",
              g->labels, lp, sp->layers[last].width);
  }
}

static void convert_train(ctx *c, const ar_ynode *root, ar_spec *sp) {
  const ar_schema *ts = kid(ar__schema_root(), "train");
  int ti = ar__ymap_find(root, "train");
  const ar_ynode *train = get_map(root, "train");
  bool eok = true, iok = true, ok = true;
  sp->train.batch = (int32_t)get_int(train, ts, "batch", &ok);
  sp->train.epochs = get_int(train, ts, "epochs", &eok);
  sp->train.iterations = get_int(train, ts, "iterations", &iok);
  sp->train.threads = (int32_t)get_int(train, ts, "threads", &ok);
  sp->train.eval_every = get_int(train, ts, "eval_every", &ok);
  sp->train.eval_points = get_int(train, ts, "eval_points", &ok);
  sp->train.checkpoint_every = get_int(train, ts, "checkpoint_every", &ok);
  sp->train.log_every = get_int(train, ts, "log_every", &ok);
  const ar_ynode *sch = get_map(train, "schedule");
  const ar_schema *ss = kid(ts, "schedule");
  ar_schema_value sv;
  sp->train.schedule.kind = get(sch, ss, "kind", &sv, NULL) ? (int)sv.e : 0;
  sp->train.schedule.warmup = get_int(sch, ss, "warmup", &ok);
  sp->train.schedule.step_every = get_int(sch, ss, "step_every", &ok);
  sp->train.schedule.gamma = get_float(sch, ss, "gamma");
  sp->train.schedule.min_lr = get_float(sch, ss, "min_lr");
  ar_schema_value v;
  if (get(train, ts, "init", &v, NULL))
    sp->train.init = (ar_init_kind)v.e; /* table order: auto, he, xavier */
  if (train && eok && iok && sp->train.epochs == 0 &&
      sp->train.iterations == 0) {
    const ar_ynode *at = ar_ynode_get(train, "epochs");
    at = at ? at : ar_ynode_get(train, "iterations");
    diag_path(c, at ? at : root->keys[ti], "train",
              "nothing to train: set epochs or iterations (or both) above 0");
  }

  /* optimizer: "adam", "sgd", or {adam: {...}} / {sgd: {...}}. */
  const ar_schema *os = kid(ts, "optimizer");
  const ar_ynode *opt = ar_ynode_get(train, "optimizer");
  const char *kind = os->def;
  const ar_ynode *params = NULL;
  if (opt && opt->kind == AR_YNODE_SCALAR &&
      ar__schema_kid(os, opt->text, opt->len))
    kind = opt->text;
  else if (opt && opt->kind == AR_YNODE_MAP && opt->n >= 1 &&
           ar__schema_kid(os, opt->keys[0]->text, opt->keys[0]->len)) {
    kind = opt->keys[0]->text;
    params = get_map(opt, kind);
  }
  const ar_schema *ks = kid(os, kind);
  if (!strcmp(kind, "sgd")) {
    sp->train.optimizer = AR_OPT_SGD;
    sp->train.momentum = get_float(params, ks, "momentum");
  } else {
    sp->train.optimizer = AR_OPT_ADAM;
    sp->train.beta1 = get_float(params, ks, "beta1");
    sp->train.beta2 = get_float(params, ks, "beta2");
    sp->train.eps = get_float(params, ks, "eps");
    ar_schema_value dv;
    sp->train.decoupled = get(params, ks, "decoupled", &dv, NULL) && dv.e == 1;
  }
  sp->train.lr = get_float(params, ks, "lr");
  sp->train.weight_decay = get_float(params, ks, "weight_decay");
}

static void convert_runtime(ctx *c, const ar_ynode *root, ar_spec *sp) {
  const ar_schema *rs = kid(ar__schema_root(), "runtime");
  const ar_ynode *m = get_map(root, "runtime");
  ar_schema_value v;
  if (get(m, rs, "policy", &v, NULL))
    sp->runtime.policy = (ar_policy_kind)v.e;
  if (get(m, rs, "memory", &v, NULL)) {
    sp->runtime.memory_bytes = (uint64_t)v.i;
    sp->runtime.memory_fraction = v.f;
  }
  sp->runtime.poisson_mean_s = get_float(m, rs, "poisson_mean_s");
  (void)c;
}

static void convert_distributed(ctx *c, const ar_ynode *root, ar_spec *sp) {
  const ar_schema *ds = kid(ar__schema_root(), "distributed");
  const ar_ynode *m = get_map(root, "distributed");
  ar_schema_value v;
  const ar_ynode *node;
  bool ok = true;
  sp->distributed.enabled = m != NULL;
  sp->distributed.servers = (int32_t)get_int(m, ds, "servers", &ok);
  sp->distributed.order =
      get(m, ds, "order", &v, NULL) ? (ar_order_kind)v.e : AR_ORDER_TAC;
  sp->distributed.trace_iterations =
      (int32_t)get_int(m, ds, "trace_iterations", &ok);
  sp->distributed.max_bytes_in_flight =
      get_int(m, ds, "max_bytes_in_flight", &ok);
  const ar_ynode *link = get_map(m, "link");
  if (link) {
    const ar_schema *ls = kid(ds, "link");
    sp->distributed.link_gbps = get_float(link, ls, "gbps");
    sp->distributed.link_latency_us = get_float(link, ls, "latency_us");
  }
  if (get(m, ds, "schedule", &v, &node))
    sp->distributed.schedule_file = resolve(c, node);
  if (get(m, ds, "share", &v, &node) && strcmp(node->text, "none") != 0)
    sp->distributed.share_file = resolve(c, node);
  sp->distributed.share_tenants =
      get(m, ds, "share_tenants", &v, NULL) ? (ar_share_tenants)v.e : AR_SHARE_ONCE;
  const ar_ynode *ws = m ? ar_ynode_get(m, "workers") : NULL;
  if (!ws || ws->kind != AR_YNODE_SEQ || ws->n == 0)
    return;
  const ar_schema *item = &kid(ds, "workers")->kids[0];
  sp->distributed.workers = ar_calloc((size_t)ws->n, sizeof *sp->distributed.workers);
  if (!sp->distributed.workers) {
    c->nomem = true;
    return;
  }
  sp->distributed.n_workers = ws->n;
  for (int i = 0; i < ws->n; i++) {
    const ar_ynode *w = ws->vals[i];
    if (w->kind != AR_YNODE_MAP)
      continue; /* reported */
    if (get(w, item, "device", &v, NULL))
      sp->distributed.workers[i].device = dup_text(c, v.s);
    sp->distributed.workers[i].dense = get(w, item, "sparse", &v, NULL) && v.e == 1;
  }
}

static ar_spec *convert(ctx *c, const ar_ynode *root, const char *file);

/* The output folder "PARENT/NAME" (PARENT NULL: "runs/NAME"). */
static char *join_dir(ctx *c, const char *parent, const char *name) {
  size_t n = strlen(name) + (parent ? strlen(parent) : 4) + 2;
  char *d = ar_malloc(n);
  if (!d) {
    c->nomem = true;
    return NULL;
  }
  snprintf(d, n, "%s/%s", parent ? parent : "runs", name);
  return d;
}

/* jobs: each item (and each copy of a repeated item) becomes a complete
 * ar_spec of its own. */
static void convert_jobs(ctx *c, const ar_ynode *root, ar_spec *sp) {
  const ar_ynode *jobs = ar_ynode_get(root, "jobs");
  if (!jobs || jobs->kind != AR_YNODE_SEQ || jobs->n == 0)
    return;
  const ar_schema *js = &kid(ar__schema_root(), "jobs")->kids[0];
  int total = 0;
  bool ok = true;
  for (int i = 0; i < jobs->n; i++)
    if (jobs->vals[i]->kind == AR_YNODE_MAP)
      total += (int)get_int(jobs->vals[i], js, "repeat", &ok);
  if (total == 0)
    return;
  sp->jobs = ar_calloc((size_t)total, sizeof *sp->jobs);
  if (!sp->jobs) {
    c->nomem = true;
    return;
  }
  ar_rng rng;
  ar_rng_seed(&rng, sp->seed, 77);
  double clock = 0.0;
  for (int i = 0; i < jobs->n && !c->nomem; i++) {
    const ar_ynode *it = jobs->vals[i];
    if (it->kind != AR_YNODE_MAP)
      continue;
    int64_t reps = get_int(it, js, "repeat", &ok);
    ar_schema_value v;
    const ar_ynode *node;
    bool named = get(it, js, "name", &v, &node);
    bool has_seed = ar_ynode_get(it, "seed") != NULL;
    bool has_arrival = ar_ynode_get(it, "arrival") != NULL;
    for (int64_t r = 0; r < reps && !c->nomem; r++) {
      ar_spec *j = convert(c, it, NULL);
      if (!j)
        return;
      sp->jobs[sp->n_jobs++] = j;
      char name[300];
      if (named && reps > 1)
        snprintf(name, sizeof name, "%s-%lld", v.s, (long long)r + 1);
      else if (named)
        snprintf(name, sizeof name, "%s", v.s);
      else if (reps > 1)
        snprintf(name, sizeof name, "job%d-%lld", i, (long long)r + 1);
      else
        snprintf(name, sizeof name, "job%d", i);
      ar_free(j->name);
      j->name = dup_text(c, name);
      ar_free(j->file);
      j->file = dup_text(c, sp->file);
      ar_free(j->device);
      j->device = dup_text(c, sp->device);
      if (!has_seed)
        j->seed = sp->seed + (uint64_t)sp->n_jobs;
      if (!get_map(it, "output") ||
          !ar_ynode_get(get_map(it, "output"), "dir")) {
        ar_free(j->output.dir);
        j->output.dir = j->name ? join_dir(c, sp->output.dir, j->name) : NULL;
      }
      j->runtime = sp->runtime;
      j->priority = (int32_t)get_int(it, js, "priority", &ok);
      if (has_arrival) {
        j->arrival_s = get_float(it, js, "arrival");
      } else if (sp->runtime.poisson_mean_s > 0) {
        /* Exponential gaps: the inter-arrival times of a Poisson process. */
        clock += -log(1.0 - ar_rng_uniform(&rng)) * sp->runtime.poisson_mean_s;
        j->arrival_s = clock;
      }
    }
  }
  /* Output folders must differ, or jobs would overwrite each other. */
  for (int a = 0; a < sp->n_jobs; a++)
    for (int b = a + 1; b < sp->n_jobs; b++)
      if (sp->jobs[a]->name && sp->jobs[b]->name &&
          !strcmp(sp->jobs[a]->name, sp->jobs[b]->name)) {
        diag_path(c, jobs, "jobs",
                  "two jobs are named '%s'; give each job (and each "
                  "repeated job) its own name",
                  sp->jobs[a]->name);
        return;
      }
}

/* Settings only graph models have, on a chain of dense layers: an error
 * rather than a setting silently ignored. */
static void check_graph_only(ctx *c, const ar_ynode *root, const ar_spec *sp) {
  if (sp->graph)
    return;
  const ar_ynode *train = get_map(root, "train");
  static const char *const keys[] = {"log_every", "schedule"};
  for (int i = 0; i < 2; i++) {
    const ar_ynode *v = ar_ynode_get(train, keys[i]);
    if (v) {
      char path[64];
      snprintf(path, sizeof path, "train.%s", keys[i]);
      diag_path(c, v, path,
                "only graph models (image or token inputs, or items with op/conv/inputs) "
                "take this; remove it");
    }
  }
  if (sp->train.decoupled)
    diag_path(c, train, "train.optimizer.adam.decoupled",
              "only graph models take decoupled weight decay; remove it");
}

static ar_spec *convert(ctx *c, const ar_ynode *root, const char *file) {
  const ar_schema *rs = ar__schema_root();
  ar_spec *sp = ar_calloc(1, sizeof *sp);
  if (!sp) {
    c->nomem = true;
    return NULL;
  }
  sp->file = dup_text(c, file ? file : "<string>");
  ar_schema_value v;
  const ar_ynode *node;
  if (get(root, rs, "name", &v, &node))
    sp->name = dup_text(c, v.s);
  else if (!node)
    sp->name = name_from_file(c, file);
  sp->device = dup_text(c, get(root, rs, "device", &v, NULL) ? v.s : "auto");
  bool ok = true;
  sp->seed = (uint64_t)get_int(root, rs, "seed", &ok);

  bool multi = ar_ynode_get(root, "jobs") != NULL;
  if (!multi) {
    if (root == c->root) {
      /* model is covered by the schema's one-of rule with jobs. */
      int n = 0;
      const char *missing[2];
      if (ar__ymap_find(root, "data") < 0)
        missing[n++] = "data";
      if (ar__ymap_find(root, "train") < 0)
        missing[n++] = "train";
      for (int i = 0; i < n; i++)
        diag_path(c, root, NULL, "missing required key '%s'", missing[i]);
    }
    convert_model(c, root, sp);
    convert_data(c, root, sp);
    convert_train(c, root, sp);
    check_graph_only(c, root, sp);
  }
  if (root == c->root) {
    convert_runtime(c, root, sp);
    convert_distributed(c, root, sp);
    if (sp->distributed.enabled && sp->graph && graph_samples(sp))
      diag_path(c, get_map(root, "distributed"), "distributed",
                "a graph model with an LSH-sampled head (a sparse: section with mode lsh or "
                "auto) does not run distributed yet: its rows would need the servers' sparse "
                "Adam; set the head's sparse.mode to dense or run it in one process");
    if (sp->distributed.enabled && sp->graph && sp->input.sparse && !sp->onnx)
      diag_path(c, get_map(root, "distributed"), "distributed",
                "a graph model over sparse input does not run distributed yet; write the "
                "model as a chain of dense items (without `inputs:`) or run it in one "
                "process");
  }

  const ar_ynode *out = get_map(root, "output");
  if (get(out, kid(rs, "output"), "dir", &v, &node)) {
    sp->output.dir = dup_text(c, v.s);
  } else if (!node && sp->name) {
    size_t n = strlen(sp->name) + sizeof "runs/";
    sp->output.dir = ar_malloc(n);
    if (sp->output.dir)
      snprintf(sp->output.dir, n, "runs/%s", sp->name);
    else
      c->nomem = true;
  }
  if (root == c->root && multi)
    convert_jobs(c, root, sp);
  return sp;
}

/* ---- public entry points ------------------------------------------------ */

int ar_sparse_auto_K(ar_sparse_hash hash, int64_t width) {
  double bits = log2((double)(width > 32 ? width : 32) / 16.0);
  int per = hash == AR_HASH_SRP ? 1 : 3;
  int k = (int)lround(bits / per);
  return k < 1 ? 1 : k > 20 ? 20 : k;
}

const char *ar_act_name(ar_act a) {
  switch (a) {
  case AR_ACT_NONE:
    return "none";
  case AR_ACT_RELU:
    return "relu";
  case AR_ACT_SIGMOID:
    return "sigmoid";
  case AR_ACT_SOFTMAX:
    return "softmax";
  }
  return "unknown";
}

static void free_layers(ar_layer_spec *ls, int n) {
  for (int i = 0; ls && i < n; i++) {
    ar_free(ls[i].name);
    for (int k = 0; k < ls[i].n_inputs; k++)
      ar_free(ls[i].inputs[k]);
    ar_free(ls[i].inputs);
    free_layers(ls[i].block, ls[i].n_block);
  }
  ar_free(ls);
}

ar_status ar_spec_item_verrf(const ar_spec *spec, const ar_srcpos *pos, const char *path,
                             ar_err *err, ar_status status, const char *fmt, va_list ap) {
  char msg[AR_ERR_MAX / 2];
  vsnprintf(msg, sizeof msg, fmt, ap);
  const char *file = spec && spec->file ? spec->file : "<string>";
  if (pos && pos->line > 0)
    return ar_errf(err, status, "%s:%d:%d: error: %s: %s", file, pos->line, pos->col, path, msg);
  return ar_errf(err, status, "%s: error: %s: %s", file, path, msg);
}

ar_status ar_spec_item_errf(const ar_spec *spec, const ar_srcpos *pos, const char *path,
                            ar_err *err, ar_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ar_status st = ar_spec_item_verrf(spec, pos, path, err, status, fmt, ap);
  va_end(ap);
  return st;
}

void ar_spec_destroy(ar_spec *sp) {
  if (!sp)
    return;
  for (int i = 0; i < sp->n_jobs; i++)
    ar_spec_destroy(sp->jobs[i]);
  ar_free(sp->jobs);
  ar_free(sp->distributed.schedule_file);
  ar_free(sp->distributed.share_file);
  for (int i = 0; i < sp->distributed.n_workers; i++)
    ar_free(sp->distributed.workers[i].device);
  ar_free(sp->distributed.workers);
  free_layers(sp->layers, sp->n_layers);
  free_layers(sp->onnx_sparse, sp->n_onnx_sparse);
  ar_free(sp->file);
  ar_free(sp->name);
  ar_free(sp->device);
  ar_free(sp->onnx);
  ar_free(sp->data.train);
  ar_free(sp->data.test);
  ar_free(sp->data.train_labels);
  ar_free(sp->data.test_labels);
  ar_free(sp->output.dir);
  ar_free(sp->resolved);
  ar_free(sp);
}

ar_status ar_spec_parse(const char *text, size_t len, const char *file,
                        const char *base_dir, const char *const *sets,
                        int n_sets, bool check_files, ar_spec **out,
                        ar_diags *diags) {
  ar_diags local = {0};
  if (diags)
    *diags = (ar_diags){0};
  if (out)
    *out = NULL;
  if (!out || (!text && len) || n_sets < 0 || (n_sets > 0 && !sets))
    return AR_INVALID;

  /* The context is large (path buffers); it lives on the heap so that the
   * parse is light on the caller's stack. */
  ctx *c = ar_calloc(1, sizeof *c);
  if (!c)
    return AR_NOMEM;
  c->d = diags ? diags : &local;
  c->sets = sets;
  c->n_sets = n_sets;
  c->base_dir = base_dir;
  c->check_files = check_files;
  c->top = ar__schema_root();

  ar_status st = AR_OK;
  ar_ynode *root = NULL;
  ar_spec *sp = NULL;
  if (len > AR_SPEC_MAX_BYTES) {
    diag_path(c, NULL, NULL,
              "the job file has %zu bytes; the limit is %u "
              "(a job file is a few kilobytes)",
              len, AR_SPEC_MAX_BYTES);
    goto done;
  }
  st = ar__yaml_parse(text, len, -1, report_file, c, &root);
  if (st != AR_OK)
    goto done; /* AR_PARSE: reported; AR_NOMEM */
  if (!root || ar__ynode_is_null(root)) {
    diag_path(c, &(ar_ynode){.line = 1, .col = 1, .set = -1}, NULL,
              "the job file is empty; it needs at least model:, data: and "
              "train: (see docs/job-file.md)");
    goto done;
  }
  if (root->kind != AR_YNODE_MAP) {
    char desc[200];
    diag_path(c, root, NULL,
              "the top level of a job file must be a mapping "
              "of keys (model:, data:, train:, ...), got %s",
              describe(root, desc, sizeof desc));
    goto done;
  }
  for (int i = 0; i < n_sets && !c->nomem; i++)
    apply_set(c, root, i);
  if (!c->nomem)
    check(c, c->top, root, NULL);
  c->root = root;
  if (!c->nomem)
    sp = convert(c, root, file);
  if (sp && !c->nomem && c->d->count == 0 && ar__spec_resolve_text(root, sp, base_dir) != AR_OK)
    c->nomem = true;

done:
  if (c->nomem || st == AR_NOMEM)
    st = AR_NOMEM;
  else if (c->d->count > 0)
    st = AR_SPEC;
  else
    st = AR_OK;
  if (st == AR_OK)
    *out = sp;
  else
    ar_spec_destroy(sp);
  ar_diags_sort(c->d);
  ar_ynode_destroy(root);
  ar_diags_fini(&local);
  ar_free(c);
  return st;
}

/* Reads the file at path into *buf (ar_free it), at most one byte past
 * AR_SPEC_MAX_BYTES: enough for the caller to refuse an oversized file
 * without reading all of it.  AR_IO with *errnum, or AR_NOMEM. */
static ar_status read_capped(const char *path, char **buf, size_t *len,
                             int *errnum) {
  *buf = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    *errnum = errno ? errno : EIO;
    return AR_IO;
  }
  *buf = ar_malloc(AR_SPEC_MAX_BYTES + 1);
  if (!*buf) {
    fclose(f);
    return AR_NOMEM;
  }
  *len = fread(*buf, 1, AR_SPEC_MAX_BYTES + 1, f);
  *errnum = ferror(f) ? (errno ? errno : EIO) : 0;
  fclose(f);
  if (!*errnum)
    return AR_OK;
  ar_free(*buf);
  *buf = NULL;
  return AR_IO;
}

ar_status ar_spec_load(const char *path, const char *const *sets, int n_sets,
                       ar_spec **out, ar_diags *diags) {
  ar_diags local = {0};
  ar_diags *d = diags ? diags : &local;
  *d = (ar_diags){0};
  if (out)
    *out = NULL;
  if (!path || !out)
    return AR_INVALID;

  char *buf = NULL, *dir = NULL;
  size_t len = 0;
  int errnum = 0;
  ar_status st = read_capped(path, &buf, &len, &errnum);
  if (st == AR_IO)
    goto io_error;
  if (st != AR_OK)
    goto done;

  /* Data paths in the file are relative to the file's folder. */
  const char *slash = strrchr(path, '/');
  if (slash) {
    size_t dl = slash == path ? 1 : (size_t)(slash - path);
    dir = ar_malloc(dl + 1);
    if (!dir) {
      st = AR_NOMEM;
      goto done;
    }
    memcpy(dir, path, dl);
    dir[dl] = '\0';
  }
  st = ar_spec_parse(buf, len, path, dir, sets, n_sets, true, out, diags);
  goto done;

io_error : {
  char msg[512];
  snprintf(msg, sizeof msg, "cannot read the job file: %s", strerror(errnum));
  st = diags_push(d, 0, 0, NULL, NULL, msg) ? AR_IO : AR_NOMEM;
}
done:
  ar_free(buf);
  ar_free(dir);
  ar_diags_fini(&local);
  return st;
}

/* ---- other modules' YAML files ------------------------------------------ */

ar_status ar_schema_check(const ar_schema *s, const ar_ynode *v,
                          const char *path, ar_diags *diags) {
  if (!s || !v || !diags)
    return AR_OK;
  ctx *c = ar_calloc(1, sizeof *c);
  if (!c)
    return AR_NOMEM;
  c->d = diags;
  c->top = s;
  c->unknown_at_map = true;
  snprintf(c->path, sizeof c->path, "%s", path ? path : "");
  c->plen = strlen(c->path);
  check(c, s, v, NULL);
  ar_status st = c->nomem ? AR_NOMEM : AR_OK;
  ar_free(c);
  return st;
}

/* Receives the YAML parser's problems for ar_yaml_load. */
typedef struct plain_report {
  ar_diags *d;
  bool nomem;
} plain_report;

static void report_plain(void *ud, int line, int col, const char *path,
                         const char *msg) {
  plain_report *r = ud;
  if (!diags_push(r->d, line, col, NULL, path, msg))
    r->nomem = true;
}

ar_status ar_yaml_load(const char *path, const char *what, ar_ynode **out,
                       ar_diags *diags) {
  *out = NULL;
  char *buf = NULL;
  size_t len = 0;
  int errnum = 0;
  ar_status st = read_capped(path, &buf, &len, &errnum);
  if (st == AR_IO)
    return ar_diags_add(diags, 0, 0, NULL, "cannot read the %s: %s", what,
                        strerror(errnum)) == AR_OK
               ? AR_IO
               : AR_NOMEM;
  if (st != AR_OK)
    return st;
  if (len > AR_SPEC_MAX_BYTES) {
    ar_free(buf);
    return ar_diags_add(diags, 0, 0, NULL, "the %s is larger than %u bytes",
                        what, AR_SPEC_MAX_BYTES) == AR_OK
               ? AR_SPEC
               : AR_NOMEM;
  }
  plain_report r = {diags, false};
  st = ar__yaml_parse(buf, len, -1, report_plain, &r, out);
  ar_free(buf);
  if (r.nomem && st == AR_OK) {
    ar_ynode_destroy(*out);
    *out = NULL;
  }
  return r.nomem || st == AR_NOMEM ? AR_NOMEM : st == AR_OK ? AR_OK : AR_SPEC;
}
