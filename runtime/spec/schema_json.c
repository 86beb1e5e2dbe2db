/*
 * The job-file schema as a JSON Schema (draft-07), generated from the
 * schema table (schema.c) like the Markdown reference: `accelrt schema
 * --json`, committed as docs/job-file.schema.json.  Editors that speak
 * JSON Schema for YAML (VS Code's YAML extension, anything built on
 * yaml-language-server) then complete keys, show each key's sentence and
 * default, and mark unknown keys, wrong types, values out of range and
 * missing required keys while the file is written.
 *
 * What it cannot say: the rules spec.c checks in code (the last layer's
 * activation, generate.features equal to model.input, unique layer names,
 * data and train required beside model) and that a job file reads numbers
 * and text by their plain YAML form (a name written `123` is a name to
 * accelrt but a number to an editor: quote it there).  `accelrt check`
 * remains the judge.
 *
 * Mappings whose table is reached from two places (jobs[].model is the
 * top-level model; a block's items are model.layers' items, recursively)
 * are written once under "definitions" and referred to with $ref.
 *
 * Tested by tests/spec/schema_json.py (valid JSON Schema; every job file
 * of configs/ validates; wrong keys and types do not) and tests/e2e
 * schema_docs (the committed file is this output).
 */
#include "schema.h"

#include "accelrt/spec.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small indented JSON writer ---------------------------------------- */

#define MAX_DEPTH 64

typedef struct jw {
  ar_sbuf b;
  int depth;
  bool first[MAX_DEPTH]; /* nothing written yet at this depth */
} jw;

static void newline(jw *w) {
  ar_sbuf_printf(&w->b, "\n%*s", 2 * w->depth, "");
}

/* Before a member or an element: the comma and the line break. */
static void sep(jw *w) {
  if (!w->first[w->depth])
    ar_sbuf_printf(&w->b, ",");
  w->first[w->depth] = false;
  newline(w);
}

static void key(jw *w, const char *k) {
  sep(w);
  ar_sbuf_json_str(&w->b, k);
  ar_sbuf_printf(&w->b, ": ");
}

static void jopen(jw *w, char c) {
  AR_ASSERT(w->depth + 1 < MAX_DEPTH);
  ar_sbuf_printf(&w->b, "%c", c);
  w->first[++w->depth] = true;
}

static void jclose(jw *w, char c) {
  bool empty = w->first[w->depth--];
  if (!empty)
    newline(w);
  ar_sbuf_printf(&w->b, "%c", c);
}

static void str(jw *w, const char *s) { ar_sbuf_json_str(&w->b, s); }

/* A list of strings on one line: ["a", "b"]. */
static void str_list(jw *w, const char *const *items, int n) {
  ar_sbuf_printf(&w->b, "[");
  for (int i = 0; i < n; i++) {
    if (i)
      ar_sbuf_printf(&w->b, ", ");
    str(w, items[i]);
  }
  ar_sbuf_printf(&w->b, "]");
}

/* ---- shared tables --------------------------------------------------------- */

/* A mapping table written once under "definitions". */
typedef struct shared {
  const ar_schema *kids;
  char name[128]; /* the key path where it is first reached */
  int uses;
} shared;

typedef struct gen {
  jw w;
  shared defs[32];
  int n_defs;
} gen;

static shared *find_def(gen *g, const ar_schema *kids) {
  for (int i = 0; i < g->n_defs; i++)
    if (g->defs[i].kids == kids)
      return &g->defs[i];
  return NULL;
}

/* Counts how often each mapping table is reached from the root; a table
 * already seen is not entered again (a block's items are the layers'). */
static void count_uses(gen *g, const ar_schema *s, const char *path) {
  for (const ar_schema *k = s->kids; k && k->key; k++) {
    char sub[128];
    bool item = s->type == AR_SCHEMA_LIST;
    snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", item ? "item" : k->key);
    if (k->type != AR_SCHEMA_MAP && k->type != AR_SCHEMA_LIST && k->type != AR_SCHEMA_VARIANT)
      continue;
    if (k->type == AR_SCHEMA_MAP) {
      shared *d = find_def(g, k->kids);
      if (d) {
        d->uses++;
        continue;
      }
      AR_ASSERT(g->n_defs < (int)(sizeof g->defs / sizeof g->defs[0]));
      d = &g->defs[g->n_defs++];
      d->kids = k->kids;
      d->uses = 1;
      snprintf(d->name, sizeof d->name, "%s", sub);
    }
    count_uses(g, k, sub);
  }
}

/* ---- entries ------------------------------------------------------------- */

/* JSON's number grammar, which the table's defaults should already follow
 * ("1e-5", "0.001"). */
static bool json_number(const char *t) {
  const char *p = t;
  if (*p == '-')
    p++;
  if (*p == '0')
    p++;
  else if (*p >= '1' && *p <= '9')
    while (*p >= '0' && *p <= '9')
      p++;
  else
    return false;
  if (*p == '.') {
    if (!(*++p >= '0' && *p <= '9'))
      return false;
    while (*p >= '0' && *p <= '9')
      p++;
  }
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-')
      p++;
    if (!(*p >= '0' && *p <= '9'))
      return false;
    while (*p >= '0' && *p <= '9')
      p++;
  }
  return *p == '\0';
}

/* YAML reads a plain true or false as a boolean, which the job file
 * accepts for these enums: the schema allows both forms. */
static bool yaml_bool(const char *v) { return !strcmp(v, "true") || !strcmp(v, "false"); }

static void default_value(jw *w, const ar_schema *s) {
  if ((s->type == AR_SCHEMA_INT || s->type == AR_SCHEMA_FLOAT) && json_number(s->def))
    ar_sbuf_printf(&w->b, "%s", s->def);
  else if (s->type == AR_SCHEMA_FLOAT)
    ar_sbuf_printf(&w->b, "%.17g", strtod(s->def, NULL));
  else if (s->type == AR_SCHEMA_ENUM && yaml_bool(s->def))
    ar_sbuf_printf(&w->b, "%s", s->def);
  else
    str(w, s->def);
}

/* The entry's sentences and its default, as the reference says them. */
static void description(jw *w, const ar_schema *s) {
  ar_sbuf d = {0};
  ar_sbuf_printf(&d, "%s", s->doc ? s->doc : "");
  if (s->def)
    ar_sbuf_printf(&d, "%sDefault: `%s`.", d.len ? " " : "", s->def);
  else if (s->def_doc && !strncmp(s->def_doc, "**required**", 12))
    ar_sbuf_printf(&d, "%sRequired%s.", d.len ? " " : "", s->def_doc + 12);
  else if (s->def_doc && !s->required)
    ar_sbuf_printf(&d, "%sDefault: %s.", d.len ? " " : "", s->def_doc);
  if (d.len) {
    key(w, "description");
    str(w, d.buf);
  }
  ar_sbuf_fini(&d);
}

static void entry(gen *g, const ar_schema *s);

/* The properties of a mapping table: every key, no others, the required
 * ones listed. */
static void map_body(gen *g, const ar_schema *kids) {
  jw *w = &g->w;
  key(w, "type");
  str(w, "object");
  key(w, "properties");
  jopen(w, '{');
  const char *req[64];
  int n_req = 0;
  for (const ar_schema *k = kids; k->key; k++) {
    key(w, k->key);
    entry(g, k);
    if (k->required && n_req < 64)
      req[n_req++] = k->key;
  }
  jclose(w, '}');
  key(w, "additionalProperties");
  ar_sbuf_printf(&w->b, "false");
  if (n_req) {
    key(w, "required");
    str_list(w, req, n_req);
  }
}

/* A mapping entry: its table inline, or a $ref to its definition; then
 * its rules (exactly one of two keys, two keys never together). */
static void map_entry(gen *g, const ar_schema *s) {
  jw *w = &g->w;
  shared *d = find_def(g, s->kids);
  bool ref = d && d->uses > 1;
  bool rules = s->rules && s->rules[0].kind != AR_SCHEMA_RULES_END;
  if (ref || rules) {
    key(w, "allOf");
    jopen(w, '[');
    if (ref) {
      sep(w);
      jopen(w, '{');
      key(w, "$ref");
      char r[160];
      snprintf(r, sizeof r, "#/definitions/%s", d->name);
      str(w, r);
      jclose(w, '}');
    }
    for (const ar_schema_rule *r = s->rules; r && r->kind != AR_SCHEMA_RULES_END; r++) {
      const char *both[2] = {r->a, r->b};
      sep(w);
      jopen(w, '{');
      key(w, r->kind == AR_SCHEMA_ONE_OF ? "oneOf" : "not");
      if (r->kind == AR_SCHEMA_ONE_OF) {
        jopen(w, '[');
        for (int i = 0; i < 2; i++) {
          sep(w);
          jopen(w, '{');
          key(w, "required");
          str_list(w, &both[i], 1);
          jclose(w, '}');
        }
        jclose(w, ']');
      } else {
        jopen(w, '{');
        key(w, "required");
        str_list(w, both, 2);
        jclose(w, '}');
      }
      key(w, "description");
      str(w, r->why);
      jclose(w, '}');
    }
    jclose(w, ']');
  }
  if (!ref)
    map_body(g, s->kids);
}

/* One entry's schema (an object), by its type. */
static void entry(gen *g, const ar_schema *s) {
  jw *w = &g->w;
  char pattern[160];
  jopen(w, '{');
  description(w, s);
  switch (s->type) {
  case AR_SCHEMA_MAP:
    map_entry(g, s);
    break;
  case AR_SCHEMA_LIST:
    key(w, "type");
    str(w, "array");
    if (s->min_items > 0) {
      key(w, "minItems");
      ar_sbuf_printf(&w->b, "%d", s->min_items);
    }
    key(w, "items");
    jopen(w, '{');
    map_entry(g, &s->kids[0]);
    jclose(w, '}');
    break;
  case AR_SCHEMA_VARIANT: {
    /* "adam", or {adam: {...}} with exactly one of the kinds. */
    const char *names[8];
    int n = 0;
    for (const ar_schema *k = s->kids; k->key && n < 8; k++)
      names[n++] = k->key;
    key(w, "oneOf");
    jopen(w, '[');
    sep(w);
    jopen(w, '{');
    key(w, "enum");
    str_list(w, names, n);
    jclose(w, '}');
    sep(w);
    jopen(w, '{');
    key(w, "type");
    str(w, "object");
    key(w, "minProperties");
    ar_sbuf_printf(&w->b, "1");
    key(w, "maxProperties");
    ar_sbuf_printf(&w->b, "1");
    key(w, "properties");
    jopen(w, '{');
    for (const ar_schema *k = s->kids; k->key; k++) {
      key(w, k->key);
      entry(g, k);
    }
    jclose(w, '}');
    key(w, "additionalProperties");
    ar_sbuf_printf(&w->b, "false");
    jclose(w, '}');
    jclose(w, ']');
    break;
  }
  case AR_SCHEMA_STRING:
    key(w, "type");
    str(w, "string");
    break;
  case AR_SCHEMA_NAME:
    key(w, "type");
    str(w, "string");
    key(w, "pattern");
    str(w, "^[^/\\x00-\\x1f\\x7f]+$");
    key(w, "not");
    jopen(w, '{');
    key(w, "enum");
    str_list(w, (const char *const[]){".", ".."}, 2);
    jclose(w, '}');
    break;
  case AR_SCHEMA_PATH:
    key(w, "type");
    str(w, "string");
    key(w, "minLength");
    ar_sbuf_printf(&w->b, "1");
    break;
  case AR_SCHEMA_INT:
    key(w, "type");
    str(w, "integer");
    key(w, "minimum");
    ar_sbuf_printf(&w->b, "%" PRId64, s->imin);
    if (s->imax != INT64_MAX) {
      key(w, "maximum");
      ar_sbuf_printf(&w->b, "%" PRId64, s->imax);
    }
    break;
  case AR_SCHEMA_FLOAT:
    key(w, "type");
    str(w, "number");
    if (isfinite(s->fmin)) {
      key(w, s->fmin_open ? "exclusiveMinimum" : "minimum");
      ar_sbuf_printf(&w->b, "%.17g", s->fmin);
    }
    if (isfinite(s->fmax)) {
      key(w, s->fmax_open ? "exclusiveMaximum" : "maximum");
      ar_sbuf_printf(&w->b, "%.17g", s->fmax);
    }
    break;
  case AR_SCHEMA_ENUM:
    key(w, "enum");
    ar_sbuf_printf(&w->b, "[");
    for (int i = 0; s->values[i]; i++) {
      ar_sbuf_printf(&w->b, "%s", i ? ", " : "");
      str(w, s->values[i]);
      if (yaml_bool(s->values[i]))
        ar_sbuf_printf(&w->b, ", %s", s->values[i]);
    }
    ar_sbuf_printf(&w->b, "]");
    break;
  case AR_SCHEMA_DEVICE:
    key(w, "type");
    str(w, "string");
    key(w, "pattern");
    str(w, "^(auto|host|cuda:[0-9]+)$");
    break;
  case AR_SCHEMA_SIZE:
    /* "8GiB", "90%", or a count of bytes (a YAML integer). */
    key(w, "type");
    str_list(w, (const char *const[]){"string", "integer"}, 2);
    key(w, "minimum");
    ar_sbuf_printf(&w->b, "1");
    snprintf(pattern, sizeof pattern,
             "^[0-9]+(\\.[0-9]+)? *(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|%%)?$");
    key(w, "pattern");
    str(w, pattern);
    break;
  case AR_SCHEMA_RESERVED:
    key(w, "not");
    jopen(w, '{');
    jclose(w, '}');
    break;
  case AR_SCHEMA_ANY:
    break; /* checked by the code that reads it */
  }
  if (s->def && s->type != AR_SCHEMA_MAP && s->type != AR_SCHEMA_LIST) {
    key(w, "default");
    default_value(w, s);
  }
  jclose(w, '}');
}

ar_status ar_spec_schema_json(FILE *to) {
  gen *g = ar_calloc(1, sizeof *g);
  if (!g)
    return AR_NOMEM;
  const ar_schema *root = ar__schema_root();
  count_uses(g, root, "");
  jw *w = &g->w;
  jopen(w, '{');
  key(w, "$schema");
  str(w, "http://json-schema.org/draft-07/schema#");
  key(w, "$comment");
  str(w, "Generated by `accelrt schema --json` from runtime/spec/schema.c; do not edit. "
         "docs/job-file.md documents the same keys.");
  key(w, "title");
  str(w, "accelrt job file");
  description(w, root);
  map_entry(g, root);
  bool any = false;
  for (int i = 0; i < g->n_defs; i++)
    any = any || g->defs[i].uses > 1;
  if (any) {
    key(w, "definitions");
    jopen(w, '{');
    for (int i = 0; i < g->n_defs; i++) {
      if (g->defs[i].uses < 2)
        continue;
      key(w, g->defs[i].name);
      jopen(w, '{');
      map_body(g, g->defs[i].kids);
      jclose(w, '}');
    }
    jclose(w, '}');
  }
  jclose(w, '}');
  ar_sbuf_printf(&w->b, "\n");
  ar_status st = w->b.oom ? AR_NOMEM : AR_OK;
  if (st == AR_OK && fputs(w->b.buf, to) == EOF)
    st = AR_IO;
  ar_sbuf_fini(&w->b);
  ar_free(g);
  return st;
}
