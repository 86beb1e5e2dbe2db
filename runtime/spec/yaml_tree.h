/*
 * Private to the spec module: a YAML document as a small tree of scalars,
 * mappings and sequences, each node knowing where it was written.
 *
 * libyaml's event parser feeds a builder that keeps only what a job file
 * needs.  The builder refuses the YAML features a job file has no use for
 * and that make untrusted input dangerous: anchors and aliases (an alias
 * bomb expands a few hundred bytes into gigabytes), tags, several
 * documents, nesting deeper than AR__YAML_MAX_DEPTH and more than
 * AR__YAML_MAX_NODES nodes.  Duplicate keys are reported and the later
 * occurrence dropped, so that validation can still go on.
 *
 * Used by runtime/spec/spec.c; tested through tests/spec/test_spec.c.
 */
#ifndef ACCELRT_SPEC_YAML_TREE_H
#define ACCELRT_SPEC_YAML_TREE_H

#include "accelrt/base.h"

#include <stdbool.h>
#include <stddef.h>

/* Limits on untrusted input.  A real job file is a few kilobytes deep in
 * single digits; these bounds only stop hostile or broken input. */
#define AR__YAML_MAX_DEPTH 64
#define AR__YAML_MAX_NODES 100000

typedef enum ar__ykind { AR__YSCALAR = 0, AR__YMAP, AR__YSEQ } ar__ykind;

typedef struct ar__ynode ar__ynode;
struct ar__ynode {
  ar__ykind kind;
  int line, col; /* 1-based position of the node's first character */
  int set;       /* -1: written in the file; i >= 0: made by the i-th --set */
  bool plain;    /* scalar written without quotes (plain style) */
  size_t len;    /* scalar: bytes in text, not counting the final NUL */
  char *text;    /* scalar: len bytes plus a NUL; may hold inner NULs ("\0") */
  int n, cap;    /* map: pairs; seq: items */
  ar__ynode **keys; /* map: (n) scalar key nodes; NULL for a sequence */
  ar__ynode **vals; /* map: (n) values; seq: (n) items */
};

/* Receives one problem: 1-based line/column (0 when unknown), the key path
 * ("train.batch"; NULL when the problem has none) and the message.  The
 * strings are borrowed for the duration of the call. */
typedef void (*ar__yreport_fn)(void *ud, int line, int col, const char *path,
                               const char *msg);

/* Parses len bytes of YAML (need not be NUL-terminated; any bytes are
 * accepted and judged).  Every node created is stamped with `set`.
 *
 * Returns AR_OK and *out, the root node, or NULL when the stream holds no
 * document or an empty one.  Duplicate keys are reported through `report`
 * but still give AR_OK (the first occurrence is kept).  Returns AR_PARSE
 * after reporting the first problem that makes the tree unusable (syntax,
 * anchors, aliases, tags, limits, several documents) with *out NULL, and
 * AR_NOMEM.  The caller owns *out (free with ar__ynode_free).  Reentrant. */
ar_status ar__yaml_parse(const char *text, size_t len, int set,
                         ar__yreport_fn report, void *ud, ar__ynode **out);

/* Frees a node and everything below it.  NULL is a no-op. */
void ar__ynode_free(ar__ynode *n);

/* A new node of the given kind stamped with a position and origin; NULL
 * when out of memory.  A scalar gets a copy of len bytes of text. */
ar__ynode *ar__ynode_new(ar__ykind kind, int line, int col, int set,
                         const char *text, size_t len);

/* Appends a pair to a map or an item to a sequence (key NULL), taking
 * ownership of both nodes only on success.  AR_OK or AR_NOMEM. */
ar_status ar__ynode_append(ar__ynode *coll, ar__ynode *key, ar__ynode *val);

/* The value stored under `key` (a NUL-terminated string compared with the
 * whole key, inner NULs included), or NULL.  Returns NULL for non-maps. */
ar__ynode *ar__ymap_get(const ar__ynode *map, const char *key);
/* The index of `key` in map, or -1. */
int ar__ymap_find(const ar__ynode *map, const char *key);

/* True for a plain scalar that YAML reads as null: empty, "~" or "null". */
bool ar__ynode_is_null(const ar__ynode *n);

/* True when the scalar's bytes equal the NUL-terminated string s. */
bool ar__yscalar_is(const ar__ynode *n, const char *s);

/* Writes bytes for a message into buf (cap >= 8): control characters and
 * quotes escaped, cut to about `max` characters with "..." when longer.
 * Returns buf.  Used for every piece of user text that ends up in a
 * diagnostic so that messages stay one readable line. */
char *ar__yquote(const char *s, size_t len, size_t max, char *buf, size_t cap);

/* Appends one diagnostic to d (spec.c; strings copied): for other files
 * read with this tree, such as study files.  false when out of memory. */
struct ar_diags;
bool ar__diags_push(struct ar_diags *d, int line, int col, const char *set, const char *path,
                    const char *msg);

#endif /* ACCELRT_SPEC_YAML_TREE_H */
