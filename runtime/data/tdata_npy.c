/*
 * ar_tdata_open_npy: a folder with x.npy and y.npy in the npy format
 * (NumPy Enhancement Proposal 1, versions 1.0, 2.0 and 3.0): the magic
 * "\x93NUMPY", a version, a header length (u16 in 1.0, u32 later) and a
 * Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)},
 * then the values.  The files are mapped read-only; the values are used
 * in place unless the header length leaves them misaligned for their
 * type, when they are copied once into aligned memory.
 *
 * The dict is parsed as the literal it is (keys in any order, either
 * quote, a trailing comma) rather than searched with strstr, so a key
 * inside a string cannot be mistaken for a field.
 */
#define _GNU_SOURCE
#include "tdata_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_AXES (AR_TDATA_MAX_DIMS + 1)

/* A parsed header. */
typedef struct npy_head {
  char descr[16];
  bool fortran;
  int axes;
  int64_t shape[NPY_MAX_AXES];
  size_t data; /* offset of the first value */
  bool has_descr, has_fortran, has_shape;
} npy_head;

/* The dict text being parsed and where it sits in the file. */
typedef struct dict_cursor {
  const char *path;
  const char *s;
  size_t n, pos, base; /* text, its length, the position, its file offset */
} dict_cursor;

static ar_status dict_err(const dict_cursor *c, ar_err *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static ar_status dict_err(const dict_cursor *c, ar_err *err, const char *fmt, ...) {
  char what[AR_ERR_MAX / 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  char near[24];
  size_t k = 0;
  for (size_t i = c->pos; i < c->n && k < 16; i++)
    near[k++] = (c->s[i] >= 0x20 && c->s[i] < 0x7f) ? c->s[i] : '?';
  near[k] = '\0';
  return ar_errf(err, AR_PARSE, "%s: header offset %zu: %s (found \"%s\")", c->path,
                 c->base + c->pos, what, near);
}

static void skip_ws(dict_cursor *c) {
  while (c->pos < c->n && (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' || c->s[c->pos] == '\n'))
    c->pos++;
}

static bool eat(dict_cursor *c, char ch) {
  skip_ws(c);
  if (c->pos < c->n && c->s[c->pos] == ch) {
    c->pos++;
    return true;
  }
  return false;
}

static ar_status parse_str(dict_cursor *c, char *out, size_t cap, ar_err *err) {
  skip_ws(c);
  char q = c->pos < c->n ? c->s[c->pos] : 0;
  if (q != '\'' && q != '"')
    return dict_err(c, err, "expected a quoted string");
  size_t start = ++c->pos;
  while (c->pos < c->n && c->s[c->pos] != q)
    c->pos++;
  if (c->pos == c->n)
    return dict_err(c, err, "unterminated string");
  size_t len = c->pos - start;
  c->pos++;
  if (len >= cap) {
    c->pos = start;
    return dict_err(c, err, "string longer than %zu characters", cap - 1);
  }
  memcpy(out, c->s + start, len);
  out[len] = '\0';
  return AR_OK;
}

static ar_status parse_shape(dict_cursor *c, npy_head *h, ar_err *err) {
  if (!eat(c, '('))
    return dict_err(c, err, "'shape' needs a tuple such as (60000, 28, 28)");
  h->axes = 0;
  for (;;) {
    if (eat(c, ')'))
      return AR_OK;
    skip_ws(c);
    const char *p = c->s + c->pos;
    if (c->pos == c->n || *p < '0' || *p > '9')
      return dict_err(c, err, "'shape' needs non-negative integers");
    if (h->axes == NPY_MAX_AXES)
      return dict_err(c, err, "more than %d axes (examples and at most %d dims each)",
                      NPY_MAX_AXES, AR_TDATA_MAX_DIMS);
    int64_t v = 0;
    while (c->pos < c->n && c->s[c->pos] >= '0' && c->s[c->pos] <= '9') {
      if (v > (INT64_MAX - 9) / 10)
        return dict_err(c, err, "axis %d is too large", h->axes);
      v = v * 10 + (c->s[c->pos++] - '0');
    }
    h->shape[h->axes++] = v;
    if (eat(c, ')'))
      return AR_OK;
    if (!eat(c, ','))
      return dict_err(c, err, "expected ',' or ')' in 'shape'");
  }
}

static ar_status parse_dict(dict_cursor *c, npy_head *h, ar_err *err) {
  if (!eat(c, '{'))
    return dict_err(c, err, "expected '{' opening the header dict");
  for (;;) {
    if (eat(c, '}'))
      break;
    char key[32];
    AR_CHECK(parse_str(c, key, sizeof key, err));
    if (!eat(c, ':'))
      return dict_err(c, err, "expected ':' after '%s'", key);
    skip_ws(c);
    if (!strcmp(key, "descr")) {
      AR_CHECK(parse_str(c, h->descr, sizeof h->descr, err));
      h->has_descr = true;
    } else if (!strcmp(key, "fortran_order")) {
      if (c->n - c->pos >= 4 && !memcmp(c->s + c->pos, "True", 4))
        h->fortran = true, c->pos += 4;
      else if (c->n - c->pos >= 5 && !memcmp(c->s + c->pos, "False", 5))
        h->fortran = false, c->pos += 5;
      else
        return dict_err(c, err, "'fortran_order' must be True or False");
      h->has_fortran = true;
    } else if (!strcmp(key, "shape")) {
      AR_CHECK(parse_shape(c, h, err));
      h->has_shape = true;
    } else {
      return dict_err(c, err, "unknown key '%s' (expected descr, fortran_order, shape)", key);
    }
    if (eat(c, '}'))
      break;
    if (!eat(c, ','))
      return dict_err(c, err, "expected ',' or '}' after '%s'", key);
  }
  if (!h->has_descr || !h->has_fortran || !h->has_shape)
    return dict_err(c, err, "the header dict lacks '%s'",
                    !h->has_descr ? "descr" : !h->has_fortran ? "fortran_order" : "shape");
  return AR_OK;
}

/* Parses the npy header at the start of p (len bytes). */
static ar_status parse_header(const char *path, const uint8_t *p, size_t len, npy_head *h,
                              ar_err *err) {
  memset(h, 0, sizeof *h);
  if (len < 10 || memcmp(p, NPY_MAGIC, 6))
    return ar_errf(err, AR_PARSE, "%s: offset 0: not an npy file (no \\x93NUMPY magic)", path);
  int major = p[6], minor = p[7];
  size_t pre, hlen;
  if (major == 1) {
    pre = 10;
    hlen = (size_t)p[8] | (size_t)p[9] << 8;
  } else if (major == 2 || major == 3) {
    pre = 12;
    if (len < pre)
      return ar_errf(err, AR_PARSE, "%s: truncated: %zu bytes, the npy %d.%d preamble needs 12",
                     path, len, major, minor);
    hlen = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
  } else {
    return ar_errf(err, AR_PARSE,
                   "%s: offset 6: npy version %d.%d, expected 1.0, 2.0 or 3.0 (save it with "
                   "numpy.save)",
                   path, major, minor);
  }
  if (hlen > len - pre)
    return ar_errf(err, AR_PARSE,
                   "%s: truncated: the header promises %zu bytes after offset %zu, the file "
                   "has %zu",
                   path, hlen, pre, len - pre);
  dict_cursor c = {path, (const char *)p + pre, hlen, 0, pre};
  h->data = pre + hlen;
  return parse_dict(&c, h, err);
}

static int item_size(const char *descr, ar_tdata_type *type) {
  if (!strcmp(descr, "<f4"))
    return *type = AR_TDATA_F32, 4;
  if (!strcmp(descr, "|u1") || !strcmp(descr, "<u1"))
    return *type = AR_TDATA_U8, 1;
  if (!strcmp(descr, "<i8"))
    return *type = AR_TDATA_I64, 8;
  return 0;
}

/* One mapped npy file with its header checked against its size. */
typedef struct npy_file {
  char *path;
  void *map;
  size_t len;
  npy_head h;
  ar_tdata_type type;
  int item;
  int64_t count, elems; /* shape[0], the product of the other axes */
} npy_file;

static ar_status load(const ar_fs *fs, const char *folder, const char *name, npy_file *f,
                      ar_err *err) {
  if (!(f->path = ar_path_join(folder, name)))
    return ar_errf(err, AR_NOMEM, "out of memory naming %s/%s", folder, name);
  int fd;
  AR_CHECK(ar_fs_open_read(fs, f->path, &fd, err));
  ar_status st = ar__tdata_map(fd, f->path, &f->map, &f->len, err);
  close(fd);
  AR_CHECK(st);
  npy_head *h = &f->h;
  AR_CHECK(parse_header(f->path, f->map, f->len, h, err));
  if (!(f->item = item_size(h->descr, &f->type)))
    return ar_errf(err, AR_PARSE,
                   "%s: header field descr: '%s', expected '<f4', '|u1' or '<i8' (convert "
                   "with arr.astype)",
                   f->path, h->descr);
  if (h->fortran)
    return ar_errf(err, AR_PARSE,
                   "%s: header field fortran_order: True, expected False (save "
                   "numpy.ascontiguousarray(arr))",
                   f->path);
  if (h->axes < 1)
    return ar_errf(err, AR_PARSE,
                   "%s: header field shape: (), expected at least one axis (examples)",
                   f->path);
  /* Each axis is below 2^63 and the product of the example's axes must
   * stay below 2^62 bytes, so neither product below overflows. */
  f->count = h->shape[0];
  f->elems = 1;
  for (int k = 1; k < h->axes; k++) {
    if (h->shape[k] && f->elems > ((int64_t)1 << 62) / f->item / h->shape[k])
      return ar_errf(err, AR_PARSE, "%s: header field shape: an example of more than 2^62 "
                     "bytes", f->path);
    f->elems *= h->shape[k];
  }
  uint64_t row = (uint64_t)f->elems * (uint64_t)f->item;
  uint64_t n = row && (uint64_t)f->count > UINT64_MAX / row ? UINT64_MAX
                                                            : row * (uint64_t)f->count;
  uint64_t have = f->len - h->data;
  if (n != have)
    return ar_errf(err, AR_PARSE,
                   "%s: %s: the header (shape of %d axes, descr '%s') promises %llu bytes of "
                   "values after offset %zu, the file has %llu",
                   f->path, n > have ? "truncated" : "trailing bytes", h->axes, h->descr,
                   (unsigned long long)n, h->data, (unsigned long long)have);
  return AR_OK;
}

static void unload(npy_file *f) {
  if (f->map)
    munmap(f->map, f->len);
  ar_free(f->path);
  memset(f, 0, sizeof *f);
}

/* The values of f in place, or copied into slot's aligned memory when
 * the header leaves them misaligned for their type. */
static ar_status values(ar_tdata *d, int slot, npy_file *f, const void **out, ar_err *err) {
  const uint8_t *p = (const uint8_t *)f->map + f->h.data;
  size_t n = f->len - f->h.data;
  d->map[slot] = f->map;
  d->map_len[slot] = f->len;
  d->info.bytes += f->len;
  f->map = NULL;
  if ((uintptr_t)p % (uintptr_t)f->item == 0) {
    *out = p;
    return AR_OK;
  }
  if (!(d->heap[slot] = ar_aligned_alloc(64, n ? n : 1)))
    return ar_errf(err, AR_NOMEM, "%s: out of memory realigning %zu bytes", f->path, n);
  memcpy(d->heap[slot], p, n);
  d->info.bytes += n;
  *out = d->heap[slot];
  return AR_OK;
}

ar_status ar_tdata_open_npy(const char *folder, const ar_fs *fs, ar_tdata **out, ar_err *err) {
  npy_file fx = {0}, fy = {0};
  ar_tdata *d = NULL;
  ar_status st;
  if ((st = load(fs, folder, "x.npy", &fx, err)) != AR_OK ||
      (st = load(fs, folder, "y.npy", &fy, err)) != AR_OK)
    goto fail;
  if (fx.h.axes < 2) {
    st = ar_errf(err, AR_PARSE,
                 "%s: header field shape: one axis, expected (examples, ...): a feature "
                 "vector of one value is shape (N, 1)",
                 fx.path);
    goto fail;
  }
  bool targets = fy.h.axes == 2 && fy.type != AR_TDATA_I64;
  if (!targets && (fy.type != AR_TDATA_I64 || fy.h.axes != 1)) {
    st = ar_errf(err, AR_PARSE,
                 "%s: header: descr '%s' with %d axes, expected '<i8' with one axis (class "
                 "ids; save y.astype(numpy.int64)) or '|u1' or '<f4' with two (multi-hot "
                 "targets (N, C), for model.loss sigmoid_bce)",
                 fy.path, fy.h.descr, fy.h.axes);
    goto fail;
  }
  if (fy.count != fx.count) {
    st = ar_errf(err, AR_PARSE,
                 "%s: header field shape: %lld class ids, but %s holds %lld examples; "
                 "they must match",
                 fy.path, (long long)fy.count, fx.path, (long long)fx.count);
    goto fail;
  }
  if (!(d = ar__tdata_alloc())) {
    st = ar_errf(err, AR_NOMEM, "out of memory opening %s", folder);
    goto fail;
  }
  d->info.count = fx.count;
  d->info.nd = fx.h.axes - 1;
  for (int k = 1; k < fx.h.axes; k++)
    d->info.dims[k - 1] = fx.h.shape[k];
  d->info.type = fx.type;
  d->elems = fx.elems;
  const void *y = NULL;
  if ((st = values(d, 0, &fx, &d->x, err)) != AR_OK || (st = values(d, 1, &fy, &y, err)) != AR_OK)
    goto fail;
  if (targets) {
    d->yt = y;
    d->info.targets = d->info.classes = fy.h.shape[1];
    d->info.target_type = fy.type;
  } else {
    d->y64 = y;
  }
  for (int64_t i = 0; !targets && i < d->info.count; i++) {
    int64_t v = d->y64[i];
    if (v < 0) {
      st = ar_errf(err, AR_PARSE,
                   "%s: offset %zu: example %lld has class id %lld; class ids must be >= 0",
                   fy.path, fy.h.data + (size_t)i * 8, (long long)i, (long long)v);
      goto fail;
    }
    if (v >= d->info.classes)
      d->info.classes = v + 1;
  }
  unload(&fx);
  unload(&fy);
  *out = d;
  return AR_OK;
fail:
  ar_tdata_close(d);
  unload(&fx);
  unload(&fy);
  return st;
}

size_t ar__npy_header(char *out, const char *descr, const int64_t *shape, int nd) {
  char dict[AR__NPY_HEADER_MAX];
  int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   descr);
  for (int i = 0; i < nd; i++)
    k += snprintf(dict + k, sizeof dict - (size_t)k, "%lld,%s", (long long)shape[i],
                  i + 1 < nd ? " " : "");
  if (nd > 1)
    k--; /* (3, 4) rather than (3, 4,); a single axis keeps its comma: (3,) */
  k += snprintf(dict + k, sizeof dict - (size_t)k, "), }");
  size_t total = 10 + (size_t)k + 1; /* preamble, dict, '\n' */
  size_t padded = (total + 63) / 64 * 64;
  AR_ASSERT(padded <= AR__NPY_HEADER_MAX);
  memcpy(out, NPY_MAGIC, 6);
  out[6] = 1;
  out[7] = 0;
  size_t hlen = padded - 10;
  out[8] = (char)(hlen & 0xff);
  out[9] = (char)(hlen >> 8);
  memcpy(out + 10, dict, (size_t)k);
  memset(out + 10 + k, ' ', padded - total);
  out[padded - 1] = '\n';
  return padded;
}
