/*
 * TensorProto to a host tensor (onnx_impl.h, include/accelrt/onnx.h): the
 * element type, the dims, and the data from raw_data (little-endian,
 * fixed width), from the typed fields, or from an external file, each
 * checked against the dims before it is copied.  External data is read
 * only from a plain file name in the model's own folder (no folder part,
 * so no "..", no absolute path, and no symlink: the file is opened as the
 * job's own, which refuses one), within its size and the limits.  Also
 * the files of ONNX's backend tests, one TensorProto each.
 */
#define _GNU_SOURCE
#include "onnx_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool ar__onnx_dtype(int32_t code, ar_dtype *out, const char **name) {
  static const char *const names[] = {"UNDEFINED",  "FLOAT",   "UINT8",  "INT8",   "UINT16",
                                      "INT16",      "INT32",   "INT64",  "STRING", "BOOL",
                                      "FLOAT16",    "DOUBLE",  "UINT32", "UINT64", "COMPLEX64",
                                      "COMPLEX128", "BFLOAT16"};
  *name = code >= 0 && code < (int32_t)(sizeof names / sizeof names[0]) ? names[code] : "unknown";
  switch (code) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    *out = AR_DT_F32;
    return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    *out = AR_DT_I64;
    return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    *out = AR_DT_I32;
    return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    *out = AR_DT_U8;
    return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
    *out = AR_DT_BOOL;
    return true;
  default:
    return false;
  }
}

void ar_onnx_tensor_fini(ar_onnx_tensor *t) {
  if (!t)
    return;
  ar_free(t->name);
  ar_free(t->data);
  memset(t, 0, sizeof *t);
}

/* ---- external data ---------------------------------------------------------- */

/* A non-negative decimal, or -1. */
static int64_t parse_count(const char *s) {
  if (!s || !*s)
    return -1;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10)
      return -1;
    v = v * 10 + (*s - '0');
  }
  return v;
}

/* Reads `bytes` bytes of tp's external file into data. */
static ar_status read_external(const char *file, const char *dir, const ar_fs *fs,
                               const Onnx__TensorProto *tp, const char *what, void *data,
                               size_t bytes, ar_err *err) {
  const char *loc = NULL, *off_s = NULL, *len_s = NULL;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[i];
    if (!e->key || !e->value)
      continue;
    if (!strcmp(e->key, "location"))
      loc = e->value;
    else if (!strcmp(e->key, "offset"))
      off_s = e->value;
    else if (!strcmp(e->key, "length"))
      len_s = e->value;
  }
  if (!dir)
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: %s keeps its data in an external file, which is read only for a model "
                   "opened from a file; save the model with its data inside",
                   file, what);
  if (!loc || !*loc || strchr(loc, '/') || !strcmp(loc, ".") || !strcmp(loc, ".."))
    return ar_errf(err, AR_INVALID,
                   "%s: %s keeps its data in external file '%s': accelrt reads external data "
                   "only from a file directly in the model's folder (a plain file name, no "
                   "'/' or '..'); move the file beside the model and save the model again",
                   file, what, loc ? loc : "(no location)");
  int64_t off = off_s ? parse_count(off_s) : 0, len = len_s ? parse_count(len_s) : -1;
  if (off < 0 || (len_s && len < 0))
    return ar_errf(err, AR_INVALID,
                   "%s: %s: external data offset '%s' or length '%s' is not "
                   "a non-negative integer",
                   file, what, off_s ? off_s : "", len_s ? len_s : "");
  if (len_s && (uint64_t)len != bytes)
    return ar_errf(err, AR_INVALID,
                   "%s: %s: external data length %" PRId64 " bytes, but its dims and type "
                   "make %zu; the file does not belong to this model",
                   file, what, len, bytes);
  char *path = ar_path_join(dir, loc);
  if (!path)
    return ar_errf(err, AR_NOMEM, "out of memory");
  int fd = -1;
  /* Opened as the job's own file: a symlink is refused, so the name cannot
   * lead out of the folder. */
  ar_status st = ar_fs_open_own(fs, path, &fd, err);
  if (st != AR_OK) {
    ar_err_wrap(err, "%s: %s's external data", file, what);
    ar_free(path);
    return st;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < (uint64_t)off ||
      (uint64_t)sb.st_size - (uint64_t)off < bytes) {
    close(fd);
    st = ar_errf(err, AR_INVALID,
                 "%s: %s: external file %s holds %lld bytes, fewer than offset %" PRId64
                 " plus the %zu its dims need; the data file is truncated or not this model's",
                 file, what, path, (long long)sb.st_size, off, bytes);
    ar_free(path);
    return st;
  }
  size_t done = 0;
  while (done < bytes) {
    ssize_t r = pread(fd, (char *)data + done, bytes - done, (off_t)((uint64_t)off + done));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      st = ar_errf(err, AR_IO, "%s: %s: reading external file %s: %s", file, what, path,
                   r < 0 ? strerror(errno) : "unexpected end");
      break;
    }
    done += (size_t)r;
  }
  close(fd);
  ar_free(path);
  return st;
}

/* ---- decoding ------------------------------------------------------------------ */

/* The typed field that holds tp's values and its count, or NULL. */
static const void *typed_field(const Onnx__TensorProto *tp, ar_dtype t, size_t *count,
                               int *fields) {
  *fields = (tp->n_float_data > 0) + (tp->n_int32_data > 0) + (tp->n_int64_data > 0) +
            (tp->n_double_data > 0) + (tp->n_uint64_data > 0) + (tp->n_string_data > 0) +
            (tp->has_raw_data && tp->raw_data.len > 0);
  switch (t) {
  case AR_DT_F32:
    *count = tp->n_float_data;
    return tp->float_data;
  case AR_DT_I64:
    *count = tp->n_int64_data;
    return tp->int64_data;
  default:
    *count = tp->n_int32_data;
    return tp->int32_data;
  }
}

/* Copies typed values into data, checking u8 and bool ranges. */
static ar_status copy_typed(const char *file, const char *what, ar_dtype t, const void *src,
                            size_t n, void *data, ar_err *err) {
  if (t == AR_DT_F32 || t == AR_DT_I64 || t == AR_DT_I32) {
    memcpy(data, src, n * ar_dtype_size(t));
    return AR_OK;
  }
  const int32_t *v = src;
  uint8_t *d = data;
  const int32_t hi = t == AR_DT_BOOL ? 1 : 255;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] > hi)
      return ar_errf(err, AR_INVALID, "%s: %s: element %zu is %d, outside %s's range 0..%d", file,
                     what, i, v[i], ar_dtype_name(t), hi);
    d[i] = (uint8_t)v[i];
  }
  return AR_OK;
}

ar_status ar__onnx_tensor_decode(const char *file, const char *dir, const ar_fs *fs,
                                 const ar_onnx_limits *lim, const Onnx__TensorProto *tp,
                                 const char *what, ar_onnx_tensor *out, ar_err *err) {
  memset(out, 0, sizeof *out);
  const char *tname;
  if (!tp->has_data_type || !ar__onnx_dtype(tp->data_type, &out->dtype, &tname))
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: %s is of element type %s; accelrt imports f32, i64, i32, u8 and bool "
                   "(export the model in float32, e.g. model.float() before torch.onnx.export)",
                   file, what, tp->has_data_type ? tname : "(none)");
  if (tp->n_dims > AR_NN_MAX_DIMS)
    return ar_errf(err, AR_UNSUPPORTED, "%s: %s has %zu dims; accelrt handles at most %d", file,
                   what, tp->n_dims, AR_NN_MAX_DIMS);
  if (tp->segment)
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: %s is a segment of a larger tensor; save the model "
                   "with whole tensors",
                   file, what);
  const size_t es = ar_dtype_size(out->dtype);
  /* The product of the non-zero dims is held to the limit even when a dim
   * is 0: an empty tensor's shape still travels through shape arithmetic
   * (Shape, Flatten, Reshape), which must not overflow. */
  uint64_t count = 1;
  bool over = false, empty = false;
  out->shape.nd = (int)tp->n_dims;
  for (size_t i = 0; i < tp->n_dims; i++) {
    int64_t d = tp->dims[i];
    if (d < 0)
      return ar_errf(err, AR_INVALID, "%s: %s: dim %zu is %" PRId64 "; dims are >= 0", file, what,
                     i, d);
    out->shape.d[i] = d;
    if (d == 0)
      empty = true;
    else if (count > UINT64_MAX / (uint64_t)d)
      over = true;
    else
      count *= (uint64_t)d;
  }
  if (over || count > lim->max_tensor_bytes / es)
    return ar_errf(err, AR_RANGE,
                   "%s: %s: its dims make more than the %zu bytes a tensor may hold here; the "
                   "file is corrupt, or raise the limit",
                   file, what, lim->max_tensor_bytes);
  if (empty)
    count = 0;
  const size_t bytes = (size_t)count * es;
  out->bytes = bytes;
  out->data = ar_malloc(bytes ? bytes : 1);
  if (!out->data)
    return ar_errf(err, AR_NOMEM, "%s: out of memory for the %zu bytes of %s", file, bytes, what);
  ar_status st = AR_OK;
  size_t n = 0;
  int fields = 0;
  const void *typed = typed_field(tp, out->dtype, &n, &fields);
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    st = fields ? ar_errf(err, AR_INVALID,
                          "%s: %s is external but also holds data inline; "
                          "save the model again",
                          file, what)
                : read_external(file, dir, fs, tp, what, out->data, bytes, err);
  } else if (fields > 1) {
    st = ar_errf(err, AR_INVALID,
                 "%s: %s holds its data in more than one field; save the "
                 "model again",
                 file, what);
  } else if (tp->has_raw_data && tp->raw_data.len > 0) {
    if (tp->raw_data.len != bytes)
      st = ar_errf(err, AR_INVALID,
                   "%s: %s: raw_data has %zu bytes, but its dims and type make %zu; the file "
                   "is corrupt",
                   file, what, tp->raw_data.len, bytes);
    else
      memcpy(out->data, tp->raw_data.data, bytes); /* little-endian, as x86 and arm64 */
  } else if (count > 0 && n != count) {
    st = ar_errf(err, AR_INVALID,
                 "%s: %s holds %zu %s values, but its dims make %" PRIu64 "; the file is corrupt",
                 file, what, n, ar_dtype_name(out->dtype), count);
  } else if (count > 0) {
    st = copy_typed(file, what, out->dtype, typed, n, out->data, err);
  }
  if (st == AR_OK && tp->name && *tp->name) {
    out->name = ar_strdup(tp->name);
    if (!out->name)
      st = ar_errf(err, AR_NOMEM, "out of memory");
  }
  if (st != AR_OK)
    ar_onnx_tensor_fini(out);
  return st;
}

/* ---- tensor files ---------------------------------------------------------------- */

ar_status ar_onnx_parse_tensor(const void *bytes, size_t n, const char *name,
                               const ar_onnx_limits *limits, ar_onnx_tensor *out, ar_err *err) {
  ar_onnx_limits lim = AR_ONNX_LIMITS_INIT;
  if (limits)
    lim = *limits;
  memset(out, 0, sizeof *out);
  if (!ar__onnx_depth_ok(&onnx__tensor_proto__descriptor, bytes, n, lim.max_depth))
    return ar_errf(err, AR_CORRUPT,
                   "%s: not a TensorProto: the protobuf does not parse or nests too deep "
                   "(truncated or corrupt?)",
                   name);
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&ar__onnx_alloc, n, bytes);
  if (!tp)
    return ar_errf(err, AR_CORRUPT,
                   "%s: not a TensorProto: the protobuf does not parse (truncated or corrupt?)",
                   name);
  ar_status st = ar__onnx_tensor_decode(name, NULL, NULL, &lim, tp, "the tensor", out, err);
  onnx__tensor_proto__free_unpacked(tp, &ar__onnx_alloc);
  return st;
}

ar_status ar_onnx_read_tensor(const char *path, const ar_fs *fs, const ar_onnx_limits *limits,
                              ar_onnx_tensor *out, ar_err *err) {
  ar_onnx_limits lim = AR_ONNX_LIMITS_INIT;
  if (limits)
    lim = *limits;
  char *buf = NULL;
  size_t len = 0;
  AR_CHECK(ar_fs_read_all(fs, path, lim.max_file_bytes, &buf, &len, err));
  ar_status st = ar_onnx_parse_tensor(buf, len, path, &lim, out, err);
  ar_free(buf);
  return st;
}
