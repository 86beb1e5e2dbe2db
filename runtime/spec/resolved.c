/*
 * The resolved job: a validated job file written back as YAML, the way it
 * will run (ar_spec.resolved; `accelrt run` keeps it as
 * output.dir/job.resolved.yaml, `accelrt check --print` prints it).
 *
 * The writer walks the schema table (schema.c), not the file: every key of
 * a mapping the file wrote is visited in table order, its value taken from
 * the tree after the --set overrides, or its default from the table when
 * the file left it out.  So the text names every setting the run used and
 * nothing the table does not know.  Three kinds of keys are written only
 * where given: those without a default in the table (their default is
 * computed, e.g. sparse.K from the width), those marked only_given (an
 * op's attribute, a graph model's setting, whose presence elsewhere would
 * be an error or noise), and mappings the file left out (their presence
 * means something: `sparse`, `generate`, `distributed`).  The name, seed,
 * device and output folder are written as the spec resolved them, so a
 * job named after its file keeps its name.  Data paths (every path but
 * output.dir) are made absolute, so the text runs from any folder.
 *
 * Values are written as they were read: a number keeps its digits (no
 * float printed back), a quoted string stays quoted.  libyaml's emitter
 * does the quoting and escaping.
 *
 * Tested by tests/spec/test_spec.c (group resolved: parsing the text gives
 * the same spec, for the project's configs too) and tests/e2e (a run of
 * job.resolved.yaml equals the original run).
 */
#define _POSIX_C_SOURCE 200809L

#include "resolved.h"

#include "schema.h"
#include "yaml_tree.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

typedef struct writer {
  yaml_emitter_t em;
  bool failed;          /* the emitter refused an event, or out of memory */
  ar_sbuf out;          /* the text so far */
  const char *base_dir; /* the job file's folder (may be NULL or relative) */
  char *cwd;            /* the working directory, or NULL when unknown */
  const ar_schema *output_keys; /* output's table: its paths stay as given */
} writer;

/* The values a spec resolved itself, written instead of the tree's. */
typedef struct fixed {
  const char *name, *device, *out_dir;
  uint64_t seed;
} fixed;

static int append(void *data, unsigned char *buf, size_t size) {
  writer *w = data;
  ar_sbuf_printf(&w->out, "%.*s", (int)size, (const char *)buf);
  return !w->out.oom;
}

/* ---- events --------------------------------------------------------------- */

static void emit(writer *w, yaml_event_t *ev, int made) {
  /* yaml_emitter_emit takes the event whether it succeeds or not. */
  if (!made || !yaml_emitter_emit(&w->em, ev))
    w->failed = true;
}

/* A null-looking plain scalar would read back as an empty value: such
 * text is written quoted. */
static bool reads_as_null(const char *t, size_t len) {
  static const char *const nulls[] = {"~", "null", "Null", "NULL"};
  if (len == 0)
    return true;
  for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
    if (strlen(nulls[i]) == len && memcmp(nulls[i], t, len) == 0)
      return true;
  return false;
}

/* A scalar; `plain` asks for the plain style (libyaml quotes anyway when
 * the text cannot be plain). */
static void scalar(writer *w, const char *t, size_t len, bool plain) {
  if (w->failed)
    return;
  yaml_event_t ev;
  yaml_scalar_style_t style =
      plain && !reads_as_null(t, len) ? YAML_PLAIN_SCALAR_STYLE : YAML_DOUBLE_QUOTED_SCALAR_STYLE;
  emit(w, &ev,
       yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)t, (int)len, 1, 1, style));
}

static void text(writer *w, const char *t) { scalar(w, t, strlen(t), true); }

static void map_start(writer *w, bool flow) {
  if (w->failed)
    return;
  yaml_event_t ev;
  emit(w, &ev,
       yaml_mapping_start_event_initialize(
           &ev, NULL, NULL, 1, flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE));
}

static void seq_start(writer *w, bool flow) {
  if (w->failed)
    return;
  yaml_event_t ev;
  emit(w, &ev,
       yaml_sequence_start_event_initialize(
           &ev, NULL, NULL, 1, flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE));
}

static void map_end(writer *w) {
  if (w->failed)
    return;
  yaml_event_t ev;
  emit(w, &ev, yaml_mapping_end_event_initialize(&ev));
}

static void seq_end(writer *w) {
  if (w->failed)
    return;
  yaml_event_t ev;
  emit(w, &ev, yaml_sequence_end_event_initialize(&ev));
}

/* ---- values --------------------------------------------------------------- */

/* A node as it was written: scalars keep their style; lists and mappings
 * of scalars go in flow style ([1, 28, 28]), others in block style. */
static void node(writer *w, const ar_ynode *v) {
  if (v->kind == AR_YNODE_SCALAR) {
    scalar(w, v->text, v->len, v->plain);
    return;
  }
  bool flat = true;
  for (int i = 0; i < v->n; i++)
    flat = flat && v->vals[i]->kind == AR_YNODE_SCALAR;
  if (v->kind == AR_YNODE_SEQ) {
    seq_start(w, flat);
    for (int i = 0; i < v->n; i++)
      node(w, v->vals[i]);
    seq_end(w);
    return;
  }
  map_start(w, flat);
  for (int i = 0; i < v->n; i++) {
    node(w, v->keys[i]);
    node(w, v->vals[i]);
  }
  map_end(w);
}

/* Appends the parts of path s to *p, each as "/PART": "." and empty parts
 * dropped, and "PART/.." removed when PART is a folder that is not a
 * symlink (through a symlink ".." leads elsewhere, so it stays). */
static void join_parts(ar_sbuf *p, const char *s) {
  while (*s) {
    const char *e = strchr(s, '/');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    char *last = p->buf && p->len ? strrchr(p->buf, '/') : NULL;
    struct stat st;
    if (n == 2 && s[0] == '.' && s[1] == '.' && last && strcmp(last, "/..") != 0 &&
        lstat(p->buf, &st) == 0 && S_ISDIR(st.st_mode)) {
      p->len = (size_t)(last - p->buf);
      p->buf[p->len] = '\0';
    } else if (n > 0 && !(n == 1 && s[0] == '.')) {
      ar_sbuf_printf(p, "/%.*s", (int)n, s);
    }
    s += n;
    if (*s == '/')
      s++;
  }
}

/* Whether len bytes are UTF-8, which the emitter requires (the tree's
 * text is, having been parsed; a working directory need not be). */
static bool utf8(const char *t, size_t len) {
  const unsigned char *p = (const unsigned char *)t, *end = p + len;
  while (p < end) {
    int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2
                        : (*p & 0xf8) == 0xf0 ? 3 : -1;
    if (n < 0 || end - p <= n)
      return n == 0;
    for (int i = 1; i <= n; i++)
      if ((p[i] & 0xc0) != 0x80)
        return false;
    p += n + 1;
  }
  return true;
}

/* A data path as an absolute one: from the file, relative to the job
 * file's folder; from a --set, relative to the working directory (the
 * rules of ar_spec_load).  Without a working directory a relative path
 * stays relative. */
static void data_path(writer *w, const ar_ynode *v) {
  const char *t = v->text;
  const char *base = v->set < 0 && w->base_dir ? w->base_dir : "";
  bool relative = t[0] != '/' && base[0] != '/' && !w->cwd;
  ar_sbuf p = {0};
  if (t[0] != '/') {
    if (base[0] != '/' && w->cwd)
      join_parts(&p, w->cwd);
    join_parts(&p, base);
  }
  join_parts(&p, t);
  if (p.oom)
    w->failed = true;
  else if (!utf8(p.buf, p.len))
    node(w, v); /* a folder name the emitter cannot write: as given */
  else if (p.len == 0)
    scalar(w, relative ? "." : "/", 1, v->plain);
  else
    scalar(w, p.buf + relative, p.len - relative, v->plain);
  ar_sbuf_fini(&p);
}

static void mapping(writer *w, const ar_schema *s, const ar_ynode *m, const fixed *fix);

/* The value of entry s, given as v.  `under_output`: a path there is
 * relative to the working directory and stays as given. */
static void value(writer *w, const ar_schema *s, const ar_ynode *v, bool under_output) {
  switch (s->type) {
  case AR_SCHEMA_MAP:
    if (v->kind == AR_YNODE_MAP) {
      mapping(w, s, v, NULL);
      return;
    }
    break;
  case AR_SCHEMA_LIST:
    if (v->kind == AR_YNODE_SEQ) {
      seq_start(w, false);
      for (int i = 0; i < v->n; i++)
        value(w, &s->kids[0], v->vals[i], false);
      seq_end(w);
      return;
    }
    break;
  case AR_SCHEMA_VARIANT: {
    /* "adam" and {adam: {...}} are written the second way, with the
     * chosen kind's defaults filled in. */
    const ar_ynode *k = v->kind == AR_YNODE_SCALAR ? v : v->kind == AR_YNODE_MAP && v->n == 1
                                                             ? v->keys[0]
                                                             : NULL;
    const ar_schema *ks = k ? ar__schema_kid(s, k->text, k->len) : NULL;
    if (ks) {
      map_start(w, false);
      text(w, ks->key);
      mapping(w, ks, v->kind == AR_YNODE_MAP ? v->vals[0] : NULL, NULL);
      map_end(w);
      return;
    }
    break;
  }
  case AR_SCHEMA_PATH:
    if (v->kind == AR_YNODE_SCALAR && !under_output && !ar_ynode_is(v, "none")) {
      data_path(w, v);
      return;
    }
    break;
  default:
    break;
  }
  node(w, v); /* scalars, ANY, and shapes validation would have refused */
}

/* The default of entry s (a scalar's text, or a variant's kind with its
 * defaults). */
static void default_value(writer *w, const ar_schema *s) {
  if (s->type != AR_SCHEMA_VARIANT) {
    text(w, s->def);
    return;
  }
  map_start(w, false);
  text(w, s->def);
  mapping(w, ar__schema_kid(s, s->def, strlen(s->def)), NULL, NULL);
  map_end(w);
}

/* Whether a key left out of a mapping the file wrote gets its default. */
static bool filled(const ar_schema *k) {
  return k->def && !k->only_given && k->type != AR_SCHEMA_MAP && k->type != AR_SCHEMA_LIST &&
         k->type != AR_SCHEMA_RESERVED;
}

/* The top level's resolved values (fix), else NULL for the tree's. */
static bool fixed_key(writer *w, const ar_schema *k, const fixed *fix) {
  char seed[32];
  if (!strcmp(k->key, "name") && fix->name) {
    text(w, "name");
    text(w, fix->name);
  } else if (!strcmp(k->key, "device") && fix->device) {
    text(w, "device");
    text(w, fix->device);
  } else if (!strcmp(k->key, "seed")) {
    snprintf(seed, sizeof seed, "%" PRIu64, fix->seed);
    text(w, "seed");
    text(w, seed);
  } else if (!strcmp(k->key, "output") && fix->out_dir) {
    text(w, "output");
    map_start(w, false);
    text(w, "dir");
    text(w, fix->out_dir);
    map_end(w);
  } else {
    return false;
  }
  return true;
}

/* A mapping of entry s from the map node m (NULL: none was written, only
 * defaults), keys in table order. */
static void mapping(writer *w, const ar_schema *s, const ar_ynode *m, const fixed *fix) {
  bool under_output = s->kids == w->output_keys;
  map_start(w, false);
  for (const ar_schema *k = s->kids; k && k->key && !w->failed; k++) {
    if (fix && fixed_key(w, k, fix))
      continue;
    const ar_ynode *v = m ? ar_ynode_get(m, k->key) : NULL;
    if (v) {
      text(w, k->key);
      value(w, k, v, under_output);
    } else if (filled(k)) {
      text(w, k->key);
      default_value(w, k);
    }
  }
  map_end(w);
}

/* ---- the document --------------------------------------------------------- */

/* Comment lines: what the text is and where it came from (control
 * characters of the name replaced). */
static void header(writer *w, const char *file) {
  ar_sbuf_printf(&w->out,
                 "# The job as accelrt resolved it: every --set applied, defaults filled in,\n"
                 "# data paths absolute.  From: ");
  for (const char *p = file ? file : "<string>"; *p; p++) /* ASCII: YAML wants UTF-8 */
    ar_sbuf_printf(&w->out, "%c", *p < 0x20 || *p >= 0x7f ? '?' : *p);
  ar_sbuf_printf(&w->out,
                 "\n# Run it again with: accelrt run THIS_FILE --set output.dir=ANOTHER_DIR\n");
}

static ar_status write_doc(const ar_ynode *m, const fixed *fix, const char *file,
                           const char *base_dir, char **out) {
  *out = NULL;
  writer *w = ar_calloc(1, sizeof *w);
  if (!w)
    return AR_NOMEM;
  w->base_dir = base_dir;
  w->cwd = getcwd(NULL, 0); /* libc's malloc: freed with free() */
  w->output_keys = ar__schema_kid(ar__schema_root(), "output", 6)->kids;
  header(w, file);
  ar_status st = AR_NOMEM;
  if (yaml_emitter_initialize(&w->em)) {
    yaml_emitter_set_output(&w->em, append, w);
    yaml_emitter_set_unicode(&w->em, 1);
    yaml_emitter_set_width(&w->em, -1); /* never fold a long value */
    yaml_emitter_set_indent(&w->em, 2);
    yaml_event_t ev;
    emit(w, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING));
    if (!w->failed)
      emit(w, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1));
    mapping(w, ar__schema_root(), m, fix);
    if (!w->failed)
      emit(w, &ev, yaml_document_end_event_initialize(&ev, 1));
    if (!w->failed)
      emit(w, &ev, yaml_stream_end_event_initialize(&ev));
    if (!w->failed && !yaml_emitter_flush(&w->em))
      w->failed = true;
    yaml_emitter_delete(&w->em);
    /* The tree was validated, so the emitter refuses nothing but for
     * want of memory. */
    if (!w->failed && !w->out.oom) {
      *out = w->out.buf;
      w->out.buf = NULL;
      st = AR_OK;
    }
  }
  ar_sbuf_fini(&w->out);
  free(w->cwd);
  ar_free(w);
  return st;
}

ar_status ar__spec_resolve_text(const ar_ynode *root, ar_spec *sp, const char *base_dir) {
  fixed fix = {sp->name, sp->device, sp->output.dir, sp->seed};
  AR_CHECK(write_doc(root, &fix, sp->file, base_dir, &sp->resolved));
  /* Each job of a jobs: file as a job file of its own: the item's keys
   * under the file's device, with the name, seed and folder it got (the
   * items and their copies in the order convert_jobs made them). */
  const ar_ynode *jobs = ar_ynode_get(root, "jobs");
  const ar_schema *item = &ar__schema_kid(ar__schema_root(), "jobs", 4)->kids[0];
  int k = 0;
  for (int i = 0; jobs && i < jobs->n && k < sp->n_jobs; i++) {
    ar_schema_value reps;
    if (!ar_schema_get(item, jobs->vals[i], "repeat", &reps))
      reps.i = 1;
    for (int64_t r = 0; r < reps.i && k < sp->n_jobs; r++, k++) {
      ar_spec *j = sp->jobs[k];
      fixed jf = {j->name, sp->device, j->output.dir, j->seed};
      AR_CHECK(write_doc(jobs->vals[i], &jf, sp->file, base_dir, &j->resolved));
    }
  }
  return AR_OK;
}
