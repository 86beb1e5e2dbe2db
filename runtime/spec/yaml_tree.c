/*
 * libyaml events -> ar_ynode tree (see yaml_tree.h for what is refused and
 * why).  The builder keeps an explicit stack bounded by
 * AR__YAML_MAX_DEPTH, so nothing here recurses on input depth except the
 * final free, which is bounded the same way.
 */
#include "yaml_tree.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ---- nodes ------------------------------------------------------------- */

ar_ynode *ar__ynode_new(ar_ynode_kind kind, int line, int col, int set,
                        const char *text, size_t len) {
  ar_ynode *n = ar_calloc(1, sizeof *n);
  if (!n)
    return NULL;
  n->kind = kind;
  n->line = line;
  n->col = col;
  n->set = set;
  n->plain = true;
  if (kind == AR_YNODE_SCALAR) {
    if (len == SIZE_MAX) {
      ar_free(n);
      return NULL;
    }
    n->text = ar_malloc(len + 1);
    if (!n->text) {
      ar_free(n);
      return NULL;
    }
    if (len)
      memcpy(n->text, text, len);
    n->text[len] = '\0';
    n->len = len;
  }
  return n;
}

void ar_ynode_destroy(ar_ynode *n) {
  if (!n)
    return;
  for (int i = 0; i < n->n; i++) {
    if (n->keys)
      ar_ynode_destroy(n->keys[i]);
    ar_ynode_destroy(n->vals[i]);
  }
  ar_free(n->keys);
  ar_free(n->vals);
  ar_free(n->text);
  ar_free(n);
}

ar_status ar__ynode_append(ar_ynode *coll, ar_ynode *key, ar_ynode *val) {
  AR_ASSERT(coll->kind != AR_YNODE_SCALAR);
  AR_ASSERT((coll->kind == AR_YNODE_MAP) == (key != NULL));
  if (coll->n == coll->cap) {
    /* The node limit keeps n far below INT_MAX / 2. */
    int cap = coll->cap ? coll->cap * 2 : 4;
    ar_ynode **vals = ar_realloc(coll->vals, (size_t)cap * sizeof *vals);
    if (!vals)
      return AR_NOMEM;
    coll->vals = vals;
    if (coll->kind == AR_YNODE_MAP) {
      ar_ynode **keys = ar_realloc(coll->keys, (size_t)cap * sizeof *keys);
      if (!keys)
        return AR_NOMEM;
      coll->keys = keys;
    }
    coll->cap = cap;
  }
  if (key)
    coll->keys[coll->n] = key;
  coll->vals[coll->n] = val;
  coll->n++;
  return AR_OK;
}

bool ar_ynode_is(const ar_ynode *n, const char *s) {
  if (!n || n->kind != AR_YNODE_SCALAR)
    return false;
  size_t l = strlen(s);
  return n->len == l && memcmp(n->text, s, l) == 0;
}

int ar__ymap_find(const ar_ynode *map, const char *key) {
  if (!map || map->kind != AR_YNODE_MAP)
    return -1;
  for (int i = 0; i < map->n; i++)
    if (ar_ynode_is(map->keys[i], key))
      return i;
  return -1;
}

const ar_ynode *ar_ynode_get(const ar_ynode *map, const char *key) {
  int i = ar__ymap_find(map, key);
  return i < 0 ? NULL : map->vals[i];
}

bool ar__ynode_is_null(const ar_ynode *n) {
  if (!n || n->kind != AR_YNODE_SCALAR || !n->plain)
    return false;
  return n->len == 0 || ar_ynode_is(n, "~") || ar_ynode_is(n, "null") ||
         ar_ynode_is(n, "Null") || ar_ynode_is(n, "NULL");
}

char *ar__yquote(const char *s, size_t len, size_t max, char *buf, size_t cap) {
  AR_ASSERT(cap >= 8);
  size_t o = 0;
  bool cut = false;
  if (len > max) {
    /* Cut at a character boundary: skip back over UTF-8 continuation bytes. */
    len = max;
    while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
      len--;
    cut = true;
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    char tmp[8];
    const char *piece = tmp;
    if (c == '\n')
      piece = "\\n";
    else if (c == '\t')
      piece = "\\t";
    else if (c < 0x20 || c == 0x7f)
      snprintf(tmp, sizeof tmp, "\\x%02x", c);
    else {
      tmp[0] = (char)c;
      tmp[1] = '\0';
    }
    size_t pl = strlen(piece);
    if (o + pl + 4 > cap) { /* keep room for "..." and the NUL */
      cut = true;
      break;
    }
    memcpy(buf + o, piece, pl);
    o += pl;
  }
  if (cut) {
    memcpy(buf + o, "...", 3);
    o += 3;
  }
  buf[o] = '\0';
  return buf;
}

char *ar_ynode_quote(const ar_ynode *n, char *buf, size_t cap) {
  return ar__yquote(n->text, n->len, 60, buf, cap);
}

/* ---- builder ------------------------------------------------------------ */

typedef struct builder {
  /* Open collections, outermost first.  A collection is attached to its
   * parent when it starts, so the parent's last pair/item leads to it. */
  ar_ynode *stack[AR__YAML_MAX_DEPTH];
  int depth;
  ar_ynode *pending_key[AR__YAML_MAX_DEPTH]; /* map: key awaiting a value */
  ar_ynode *root;
  long nodes;
  int docs;
  int set;
  ar__yreport_fn report;
  void *ud;
} builder;

static void reportf(builder *b, int line, int col, const char *path,
                    const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static void reportf(builder *b, int line, int col, const char *path,
                    const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (b->report)
    b->report(b->ud, line, col, path, msg);
}

/* Appends printf text to buf[*used..cap), truncating silently. */
static void cat(char *buf, size_t cap, size_t *used, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void cat(char *buf, size_t cap, size_t *used, const char *fmt, ...) {
  if (*used + 1 >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *used, cap - *used, fmt, ap);
  va_end(ap);
  if (w > 0)
    *used += (size_t)w < cap - *used ? (size_t)w : cap - *used - 1;
}

/* Key path of the collection at stack[upto] ("train.optimizer",
 * "model.layers[1]"), written into buf. */
static void stack_path(const builder *b, int upto, char *buf, size_t cap,
                       size_t *used) {
  char q[128];
  for (int i = 0; i < upto; i++) {
    const ar_ynode *c = b->stack[i];
    if (c->kind == AR_YNODE_MAP) {
      const ar_ynode *k = c->keys[c->n - 1];
      cat(buf, cap, used, "%s%s", *used ? "." : "",
          ar__yquote(k->text, k->len, 40, q, sizeof q));
    } else {
      cat(buf, cap, used, "[%d]", c->n - 1);
    }
  }
}

/* A key and its index in the map, sorted together so that the comparison
 * needs no outside state (qsort has no context argument). */
typedef struct keyref {
  const ar_ynode *key;
  int i;
} keyref;

/* Orders keys by bytes, then by position, so that equal keys are
 * neighbours with the first occurrence first. */
static int key_cmp(const void *pa, const void *pb) {
  const keyref *a = pa, *b = pb;
  size_t l = a->key->len < b->key->len ? a->key->len : b->key->len;
  int c = l ? memcmp(a->key->text, b->key->text, l) : 0;
  if (c)
    return c;
  if (a->key->len != b->key->len)
    return a->key->len < b->key->len ? -1 : 1;
  return (a->i > b->i) - (a->i < b->i);
}

/* Reports and drops every repeated key of the map at stack[depth-1].
 * Sorting keeps this O(n log n), so a map with thousands of keys cannot
 * make the parser crawl. */
static ar_status drop_duplicates(builder *b) {
  ar_ynode *m = b->stack[b->depth - 1];
  if (m->n < 2)
    return AR_OK;
  keyref *refs = ar_malloc((size_t)m->n * sizeof *refs);
  bool *drop = ar_calloc((size_t)m->n, sizeof *drop);
  if (!refs || !drop) {
    ar_free(refs);
    ar_free(drop);
    return AR_NOMEM;
  }
  for (int i = 0; i < m->n; i++)
    refs[i] = (keyref){m->keys[i], i};
  qsort(refs, (size_t)m->n, sizeof *refs, key_cmp);
  const ar_ynode *first = refs[0].key;
  for (int j = 1; j < m->n; j++) {
    const ar_ynode *k = refs[j].key;
    if (first->len == k->len && memcmp(first->text, k->text, k->len) == 0) {
      char path[1024], q[128];
      size_t used = 0;
      stack_path(b, b->depth - 1, path, sizeof path, &used);
      cat(path, sizeof path, &used, "%s%s", used ? "." : "",
          ar__yquote(k->text, k->len, 40, q, sizeof q));
      reportf(b, k->line, k->col, path,
              "duplicate key '%s' (first given at line %d); keep only one", q,
              first->line);
      drop[refs[j].i] = true;
    } else {
      first = k;
    }
  }
  int w = 0;
  for (int i = 0; i < m->n; i++) {
    if (drop[i]) {
      ar_ynode_destroy(m->keys[i]);
      ar_ynode_destroy(m->vals[i]);
    } else {
      m->keys[w] = m->keys[i];
      m->vals[w] = m->vals[i];
      w++;
    }
  }
  m->n = w;
  ar_free(refs);
  ar_free(drop);
  return AR_OK;
}

/* Hangs a new node under the innermost open collection (or makes it the
 * root).  Takes ownership of node in every case. */
static ar_status attach(builder *b, ar_ynode *node) {
  if (b->depth == 0) {
    AR_ASSERT(b->root == NULL);
    b->root = node;
    return AR_OK;
  }
  ar_ynode *top = b->stack[b->depth - 1];
  ar_ynode **key = &b->pending_key[b->depth - 1];
  if (top->kind == AR_YNODE_SEQ) {
    ar_status st = ar__ynode_append(top, NULL, node);
    if (st != AR_OK)
      ar_ynode_destroy(node);
    return st;
  }
  if (!*key) {
    if (node->kind != AR_YNODE_SCALAR) {
      reportf(b, node->line, node->col, NULL,
              "a key must be a single value, not a %s",
              node->kind == AR_YNODE_MAP ? "mapping" : "list");
      ar_ynode_destroy(node);
      return AR_PARSE;
    }
    *key = node;
    return AR_OK;
  }
  ar_status st = ar__ynode_append(top, *key, node);
  if (st != AR_OK) {
    ar_ynode_destroy(*key);
    ar_ynode_destroy(node);
  }
  *key = NULL;
  return st;
}

/* Refuses anchors and tags on a node event. */
static ar_status check_props(builder *b, const yaml_event_t *ev,
                             const yaml_char_t *anchor,
                             const yaml_char_t *tag) {
  int line = (int)ev->start_mark.line + 1, col = (int)ev->start_mark.column + 1;
  char q[128];
  if (anchor) {
    const char *a = (const char *)anchor;
    reportf(b, line, col, NULL,
            "anchors ('&%s') are not allowed in job files; write the value out "
            "where it is needed",
            ar__yquote(a, strlen(a), 40, q, sizeof q));
    return AR_PARSE;
  }
  if (tag) {
    const char *t = (const char *)tag;
    reportf(b, line, col, NULL,
            "tags ('%s') are not allowed in job files; remove the tag",
            ar__yquote(t, strlen(t), 40, q, sizeof q));
    return AR_PARSE;
  }
  return AR_OK;
}

static ar_status count_node(builder *b, const yaml_event_t *ev) {
  if (++b->nodes > AR__YAML_MAX_NODES) {
    reportf(b, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1,
            NULL, "too many values (more than %d); a job file is far smaller",
            AR__YAML_MAX_NODES);
    return AR_PARSE;
  }
  return AR_OK;
}

/* Reports libyaml's error with the best position it gives. */
static ar_status parser_error(builder *b, const yaml_parser_t *p,
                              const char *text, size_t len) {
  if (p->error == YAML_MEMORY_ERROR)
    return AR_NOMEM;
  const char *problem = p->problem ? p->problem : "malformed YAML";
  if (p->error == YAML_READER_ERROR) {
    /* The reader gives a byte offset, not a line: count lines ourselves. */
    size_t off = p->problem_offset < len ? p->problem_offset : len;
    int line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
      if (text[i] == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    if (p->problem_value != -1)
      reportf(b, line, col, NULL, "%s (0x%x); a job file must be UTF-8 text",
              problem, (unsigned)p->problem_value);
    else
      reportf(b, line, col, NULL, "%s; a job file must be UTF-8 text", problem);
    return AR_PARSE;
  }
  int line = (int)p->problem_mark.line + 1,
      col = (int)p->problem_mark.column + 1;
  if (p->context)
    reportf(b, line, col, NULL, "%s (%s at line %d, column %d)", problem,
            p->context, (int)p->context_mark.line + 1,
            (int)p->context_mark.column + 1);
  else
    reportf(b, line, col, NULL, "%s", problem);
  return AR_PARSE;
}

/* Handles one event; sets *done at the end of the stream. */
static ar_status on_event(builder *b, const yaml_event_t *ev, bool *done) {
  int line = (int)ev->start_mark.line + 1, col = (int)ev->start_mark.column + 1;
  ar_status st;
  switch (ev->type) {
  case YAML_STREAM_END_EVENT:
    *done = true;
    return AR_OK;
  case YAML_DOCUMENT_START_EVENT:
    if (++b->docs > 1) {
      reportf(b, line, col, NULL,
              "a second YAML document starts here; a job file holds one "
              "(remove the '---' line)");
      return AR_PARSE;
    }
    return AR_OK;
  case YAML_ALIAS_EVENT: {
    const char *a = (const char *)ev->data.alias.anchor;
    char q[128];
    reportf(b, line, col, NULL,
            "aliases ('*%s') are not allowed in job files; write the value out "
            "where it is needed",
            ar__yquote(a, a ? strlen(a) : 0, 40, q, sizeof q));
    return AR_PARSE;
  }
  case YAML_SCALAR_EVENT: {
    st = check_props(b, ev, ev->data.scalar.anchor, ev->data.scalar.tag);
    if (st == AR_OK)
      st = count_node(b, ev);
    if (st != AR_OK)
      return st;
    ar_ynode *n = ar__ynode_new(AR_YNODE_SCALAR, line, col, b->set,
                                (const char *)ev->data.scalar.value,
                                ev->data.scalar.length);
    if (!n)
      return AR_NOMEM;
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    return attach(b, n);
  }
  case YAML_SEQUENCE_START_EVENT:
  case YAML_MAPPING_START_EVENT: {
    bool map = ev->type == YAML_MAPPING_START_EVENT;
    st = map ? check_props(b, ev, ev->data.mapping_start.anchor,
                           ev->data.mapping_start.tag)
             : check_props(b, ev, ev->data.sequence_start.anchor,
                           ev->data.sequence_start.tag);
    if (st == AR_OK)
      st = count_node(b, ev);
    if (st != AR_OK)
      return st;
    if (b->depth == AR__YAML_MAX_DEPTH) {
      reportf(b, line, col, NULL,
              "values nested more than %d levels deep; a job file needs far "
              "fewer",
              AR__YAML_MAX_DEPTH);
      return AR_PARSE;
    }
    ar_ynode *n = ar__ynode_new(map ? AR_YNODE_MAP : AR_YNODE_SEQ, line, col,
                                b->set, NULL, 0);
    if (!n)
      return AR_NOMEM;
    /* A key that is itself a collection is refused inside attach. */
    st = attach(b, n);
    if (st != AR_OK)
      return st;
    b->stack[b->depth] = n;
    b->pending_key[b->depth] = NULL;
    b->depth++;
    return AR_OK;
  }
  case YAML_MAPPING_END_EVENT:
    st = drop_duplicates(b);
    b->depth--;
    return st;
  case YAML_SEQUENCE_END_EVENT:
    b->depth--;
    return AR_OK;
  default: /* stream start, document end, no event */
    return AR_OK;
  }
}

ar_status ar__yaml_parse(const char *text, size_t len, int set,
                         ar__yreport_fn report, void *ud, ar_ynode **out) {
  *out = NULL;
  builder b;
  memset(&b, 0, sizeof b);
  b.set = set;
  b.report = report;
  b.ud = ud;

  if (!text) {
    text = "";
    len = 0;
  }
  /* Force UTF-8, so that a UTF-16 byte-order mark is refused rather than
   * followed (no job file is UTF-16, and reader offsets stay byte offsets
   * into text).  With the encoding forced libyaml keeps a UTF-8 mark as
   * content, so skip it here; editors do not count it as a column. */
  if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) {
    text += 3;
    len -= 3;
  }
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p))
    return AR_NOMEM;
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);

  ar_status st = AR_OK;
  bool done = false;
  while (!done) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) {
      st = parser_error(&b, &p, text, len);
      break;
    }
    st = on_event(&b, &ev, &done);
    yaml_event_delete(&ev);
    if (st != AR_OK)
      break;
  }
  yaml_parser_delete(&p);

  /* A key may wait for a value that never came when parsing stopped early;
   * the open collections themselves already hang in the tree. */
  for (int i = 0; i < b.depth; i++)
    ar_ynode_destroy(b.pending_key[i]);
  if (st != AR_OK) {
    ar_ynode_destroy(b.root);
    return st;
  }
  *out = b.root;
  return AR_OK;
}
