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

#include "accelrt/spec.h" /* the node type (ar_ynode), public */

#include <stdbool.h>
#include <stddef.h>

/* Limits on untrusted input.  A real job file is a few kilobytes deep in
 * single digits; these bounds only stop hostile or broken input. */
#define AR__YAML_MAX_DEPTH 64
#define AR__YAML_MAX_NODES 100000

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
 * AR_NOMEM.  The caller owns *out (free with ar_ynode_destroy).  Reentrant. */
ar_status ar__yaml_parse(const char *text, size_t len, int set,
                         ar__yreport_fn report, void *ud, ar_ynode **out);

/* A new node of the given kind stamped with a position and origin; NULL
 * when out of memory.  A scalar gets a copy of len bytes of text. */
ar_ynode *ar__ynode_new(ar_ynode_kind kind, int line, int col, int set,
                        const char *text, size_t len);

/* Appends a pair to a map or an item to a sequence (key NULL), taking
 * ownership of both nodes only on success.  AR_OK or AR_NOMEM. */
ar_status ar__ynode_append(ar_ynode *coll, ar_ynode *key, ar_ynode *val);

/* The index of `key` in map, or -1. */
int ar__ymap_find(const ar_ynode *map, const char *key);

/* True for a plain scalar that YAML reads as null: empty, "~" or "null". */
bool ar__ynode_is_null(const ar_ynode *n);

/* Writes bytes for a message into buf (cap >= 8): control characters and
 * quotes escaped, cut to about `max` characters with "..." when longer.
 * Returns buf.  Used for every piece of user text that ends up in a
 * diagnostic so that messages stay one readable line. */
char *ar__yquote(const char *s, size_t len, size_t max, char *buf, size_t cap);

#endif /* ACCELRT_SPEC_YAML_TREE_H */
