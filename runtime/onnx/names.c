/* A map from names to indices for the ONNX importer (onnx_impl.h): open
 * addressing with linear probing over FNV-1a hashes, at most half full.
 * Keys are borrowed (the model's strings). */
#include "onnx_impl.h"

#include <string.h>

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

int ar__onnx_map_get(const ar__onnx_map *m, const char *key) {
  if (!m->cap)
    return -1;
  for (size_t i = hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i])
      return -1;
    if (!strcmp(m->keys[i], key))
      return m->vals[i];
  }
}

static void place(const char **keys, int *vals, size_t cap, const char *key, int val) {
  size_t i = hash(key) & (cap - 1);
  while (keys[i] && strcmp(keys[i], key))
    i = (i + 1) & (cap - 1);
  keys[i] = key;
  vals[i] = val;
}

ar_status ar__onnx_map_put(ar__onnx_map *m, const char *key, int val) {
  if (2 * (m->n + 1) > m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    const char **keys = ar_calloc(cap, sizeof *keys);
    int *vals = ar_calloc(cap, sizeof *vals);
    if (!keys || !vals) {
      ar_free(keys);
      ar_free(vals);
      return AR_NOMEM;
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i])
        place(keys, vals, cap, m->keys[i], m->vals[i]);
    ar_free(m->keys);
    ar_free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
  }
  if (ar__onnx_map_get(m, key) < 0)
    m->n++;
  place(m->keys, m->vals, m->cap, key, val);
  return AR_OK;
}

void ar__onnx_map_fini(ar__onnx_map *m) {
  ar_free(m->keys);
  ar_free(m->vals);
  memset(m, 0, sizeof *m);
}
