/* Checkpoints: parameters, optimizer state and data position, written
 * atomically and verified by a CRC-32 (zlib) before anything in them is
 * used.
 *
 * Layout (little-endian, as this host writes it; docs/checkpoint.md):
 *   "ACCELRTC" u32 version u32 ntensors
 *   i64 iteration, epoch, rows_in_epoch, samples, step   f64 train_s
 *   version 2 (written): ntensors x { u32 name_len, name bytes, u8 dtype,
 *     u8 nd, u16 0, nd x i64 dim, the values (f32 or u64) }
 *   version 1 (still read): ntensors x { u32 name_len, name bytes,
 *     i64 count, count x f32 }
 *   u32 crc32 of every byte before it
 *
 * Reading trusts nothing in the file until it has been checked: the whole
 * file's checksum is verified first (one streaming pass, a fixed buffer,
 * however large the file), then every header field is range-checked, then
 * the tensor table is walked (names bounded, counts within the bytes the
 * file has, nothing left over), and only then are tensors copied into a
 * model, in a last pass that recomputes the checksum in case the file
 * changed meanwhile.  A file with a valid checksum can still be
 * hand-made, so the checks are those any real run satisfies; they are
 * listed in check_header.  Tests: tests/engine/test_checkpoint.c,
 * tests/fuzz/fuzz_ckpt.c.
 */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include "engine_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_MAGIC "ACCELRTC"
#define CKPT_VERSION 2u /* written; 1 is read too */
#define HEADER_BYTES (8 + 4 + 4 + 5 * 8 + 8)
#define MAX_TENSORS_V1 65536 /* version 2 has no limit but the file's size */
#define MIN_RECORD_V2 (4 + 1 + 4) /* a 1-byte name, the dtype/nd/0 word */
#define MAX_NAME 255      /* plan names are at most 63 bytes */
/* Counters a checkpoint may hold.  2^53 samples is far beyond any run
 * (a million epochs of 670,000 points is 2^39) and stays exact in the
 * doubles that metrics and progress report; it also leaves the counters
 * room to grow without overflow. */
#define MAX_COUNT ((int64_t)1 << 53)
#define CHUNK (1 << 16) /* floats staged per copy; the read buffer's size */

/* The model's tensors in file order (ar_model_tensors).  One allocation,
 * `block`, owned by the list. */
typedef struct tensor_list {
  int n;
  int64_t *counts;    /* (n) floats of device memory */
  const char **names; /* (n) */
  float **ptrs;       /* (n) */
  const ar__ckpt_shape *shapes; /* (n) */
  void *block;
} tensor_list;

static ar_status list_tensors(const ar_model *m, const char *path, tensor_list *t,
                              ar_err *err) {
  memset(t, 0, sizeof *t);
  int n = ar_model_tensors(m, NULL, NULL, NULL, 0);
  size_t each = sizeof(ar__ckpt_shape) + sizeof(int64_t) + sizeof(const char *) +
                sizeof(float *);
  t->block = ar_malloc((size_t)(n > 0 ? n : 1) * each);
  if (!t->block)
    return ar_errf(err, AR_NOMEM, "out of memory listing the tensors for checkpoint '%s'",
                   path);
  t->n = n;
  ar__ckpt_shape *shapes = t->block;
  t->shapes = shapes;
  t->counts = (int64_t *)(shapes + n);
  t->names = (const char **)(t->counts + n);
  t->ptrs = (float **)(t->names + n);
  ar_model_tensors(m, t->names, t->ptrs, t->counts, n);
  ar__model_tensor_shapes(m, shapes, n);
  return AR_OK;
}

/* ---- writing ------------------------------------------------------------- */

typedef struct writer {
  FILE *f;
  uLong crc;
  int failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
  if (w->failed)
    return;
  if (fwrite(p, 1, n, w->f) != n)
    w->failed = errno ? errno : EIO;
  w->crc = crc32(w->crc, p, (uInt)n);
}

static ar_status save_list(ar_device *dev, const tensor_list *tl, int64_t step,
                           const ar_ckpt_state *st, const ar_fs *fs, const char *path,
                           ar_err *err);

ar_status ar_checkpoint_save(const ar_model *m, const ar_ckpt_state *st, const ar_fs *fs,
                             const char *path, ar_err *err) {
  tensor_list t;
  AR_CHECK(list_tensors(m, path, &t, err));
  ar_status status = save_list(m->dev, &t, m->step, st, fs, path, err);
  ar_free(t.block);
  return status;
}

ar_status ar__checkpoint_save_tensors(const ar__ckpt_tensors *ct, int64_t step,
                                      const ar_ckpt_state *st, const ar_fs *fs,
                                      const char *path, ar_err *err) {
  tensor_list t = {ct->n, ct->counts, ct->names, ct->ptrs, ct->shapes, NULL};
  return save_list(ct->dev, &t, step, st, fs, path, err);
}

static ar_status save_list(ar_device *dev, const tensor_list *tl, int64_t step,
                           const ar_ckpt_state *st, const ar_fs *fs, const char *path,
                           ar_err *err) {
  tensor_list t = *tl;
  float *stage = ar_malloc(CHUNK * sizeof(float));
  ar_status status = AR_OK;
  writer w = {NULL, crc32(0L, Z_NULL, 0), 0};
  ar_fs_atomic a = {0};
  if (!stage) {
    status = ar_errf(err, AR_NOMEM, "out of memory writing checkpoint '%s'", path);
    goto done;
  }
  status = ar_fs_atomic_begin(fs, path, &a, err);
  if (status != AR_OK) {
    ar_err_wrap(err, "checkpoint (check output.dir)");
    goto done;
  }
  w.f = a.f;
  uint32_t version = CKPT_VERSION, nt = (uint32_t)t.n;
  put(&w, CKPT_MAGIC, 8);
  put(&w, &version, 4);
  put(&w, &nt, 4);
  int64_t hdr[5] = {st->iteration, st->epoch, st->rows_in_epoch, st->samples, step};
  put(&w, hdr, sizeof hdr);
  put(&w, &st->train_s, sizeof st->train_s);
  for (int i = 0; i < t.n && !w.failed; i++) {
    const ar__ckpt_shape *sh = &t.shapes[i];
    int64_t elems = 1;
    for (int d = 0; d < sh->nd; d++)
      elems *= sh->d[d];
    if (sh->nd < 0 || sh->nd > AR__CKPT_MAX_DIMS ||
        elems * (sh->dtype == AR__CKPT_U64 ? 8 : 4) != t.counts[i] * 4) {
      status = ar_errf(err, AR_INVALID, "checkpoint '%s': tensor '%s' has %lld floats of "
                       "memory but a shape of %lld elements (an accelrt bug)", path,
                       t.names[i], (long long)t.counts[i], (long long)elems);
      goto done;
    }
    uint32_t nl = (uint32_t)strlen(t.names[i]);
    put(&w, &nl, 4);
    put(&w, t.names[i], nl);
    const uint8_t tag[4] = {(uint8_t)sh->dtype, (uint8_t)sh->nd, 0, 0};
    put(&w, tag, 4);
    put(&w, sh->d, (size_t)sh->nd * 8);
    for (int64_t off = 0; off < t.counts[i] && !w.failed; off += CHUNK) {
      int64_t c = t.counts[i] - off < CHUNK ? t.counts[i] - off : CHUNK;
      status = ar_device_copy_out(dev, stage, t.ptrs[i] + off, (size_t)c * sizeof(float));
      if (status != AR_OK) {
        ar_errf(err, status, "copying tensor '%s' off the device: %s", t.names[i],
                ar_device_errmsg(dev));
        goto done;
      }
      put(&w, stage, (size_t)c * sizeof(float));
    }
  }
  uint32_t crc = (uint32_t)w.crc;
  if (!w.failed && fwrite(&crc, 1, 4, w.f) != 4)
    w.failed = EIO;
  if (w.failed) {
    status = ar_errf(err, AR_IO, "writing checkpoint '%s' failed: %s (disk full?); the "
                     "previous checkpoint is kept", a.tmp, strerror(w.failed));
    goto done;
  }
  status = ar_fs_atomic_commit(&a, err);
done:
  if (status != AR_OK)
    ar_fs_atomic_abort(&a);
  ar_free(stage);
  return status;
}

/* ---- reading ------------------------------------------------------------- */

/* What the messages about a file that fails a check add. */
#define DAMAGED "the file is damaged or was not written by accelrt; restore a good checkpoint, " \
                "or train afresh (accelrt run without --resume)"

/* An open checkpoint.  pos counts the bytes read or skipped; the data
 * (everything before the checksum) ends at size - 4. */
typedef struct reader {
  FILE *f;
  const char *path;
  int64_t size, pos;
  uLong crc; /* of the bytes get() read since it was last reset */
} reader;

/* The header, as the file holds it. */
typedef struct ckpt_header {
  uint32_t version, ntensors;
  int64_t count[5]; /* iteration, epoch, rows_in_epoch, samples, step */
  double train_s;
} ckpt_header;
enum { H_ITERATION, H_EPOCH, H_ROWS_IN_EPOCH, H_SAMPLES, H_STEP };
static const char *const count_names[5] = {"iteration", "epoch", "rows_in_epoch", "samples",
                                           "step"};

/* One tensor's record before its values. */
typedef struct record {
  uint32_t name_len;
  char name[MAX_NAME + 1];
  int64_t count;       /* floats' worth of bytes (what the device holds) */
  ar__ckpt_shape shape; /* version 1: f32 of one dim, count long */
} record;

static int64_t data_left(const reader *r) { return r->size - 4 - r->pos; }

static ar_status changed(const reader *r, ar_err *err) {
  return ar_errf(err, AR_CORRUPT, "checkpoint '%s' changed or shrank while it was being read "
                 "(is another run writing it?); try again when it is complete", r->path);
}

/* Reads n bytes of the data into p (added to the running checksum).  The
 * caller has checked that they are there; a short read means the file
 * changed after its size was taken. */
static ar_status get(reader *r, void *p, size_t n, ar_err *err) {
  if (fread(p, 1, n, r->f) != n)
    return changed(r, err);
  r->pos += (int64_t)n;
  r->crc = crc32(r->crc, p, (uInt)n);
  return AR_OK;
}

/* The checksum stored after the data (the reader stands there). */
static ar_status stored_crc(reader *r, uint32_t *out, ar_err *err) {
  unsigned char b[4];
  if (fread(b, 1, 4, r->f) != 4)
    return changed(r, err);
  memcpy(out, b, 4);
  return AR_OK;
}

/* Opens a checkpoint for reading through fs and takes its size. */
static ar_status open_ckpt(const ar_fs *fs, reader *r, ar_err *err) {
  int fd;
  ar_status st = ar_fs_open_read(fs, r->path, &fd, err);
  if (st != AR_OK)
    return ar_err_wrap(err, "checkpoint (run without --resume to start afresh)");
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !(r->f = fdopen(fd, "rb"))) {
    int e = errno;
    close(fd);
    return ar_errf(err, AR_IO, "cannot read checkpoint '%s': %s", r->path, strerror(e));
  }
  r->size = (int64_t)sb.st_size;
  return AR_OK;
}

/* Pass 1: the checksum of the whole file, read in chunks of buf (cap
 * bytes, at least HEADER_BYTES), before any field is used.  The header's
 * bytes are kept in head, so the fields used are the ones verified. */
static ar_status verify(reader *r, unsigned char *buf, size_t cap,
                        unsigned char head[HEADER_BYTES], ar_err *err) {
  size_t magic = r->size < 8 ? (size_t)r->size : 8;
  if (fread(buf, 1, magic, r->f) != magic)
    return changed(r, err);
  if (magic < 8 || memcmp(buf, CKPT_MAGIC, 8) != 0)
    return ar_errf(err, AR_CORRUPT, "'%s' is not an accelrt checkpoint (it does not start "
                   "with %s)", r->path, CKPT_MAGIC);
  if (r->size < HEADER_BYTES + 4)
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s' is truncated: %lld bytes, fewer than "
                   "its header and checksum (%d); " DAMAGED, r->path, (long long)r->size,
                   HEADER_BYTES + 4);
  uLong crc = crc32(0L, buf, 8);
  size_t have = 8;
  for (int64_t left = r->size - 4 - 8; left > 0;) {
    size_t n = left < (int64_t)(cap - have) ? (size_t)left : cap - have;
    if (fread(buf + have, 1, n, r->f) != n)
      return changed(r, err);
    if (have) /* the first chunk holds the header */
      memcpy(head, buf, HEADER_BYTES);
    crc = crc32(crc, buf + have, (uInt)n);
    left -= (int64_t)n;
    have = 0;
  }
  uint32_t stored = 0;
  AR_CHECK(stored_crc(r, &stored, err));
  if (stored != (uint32_t)crc)
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s' fails its checksum: it is damaged or "
                   "truncated; restore a good checkpoint, or train afresh (accelrt run without "
                   "--resume)", r->path);
  return AR_OK;
}

/* The header's fields, each checked against what a run can write. */
static ar_status check_header(const reader *r, const unsigned char head[HEADER_BYTES],
                              ckpt_header *h, ar_err *err) {
  memcpy(&h->version, head + 8, 4);
  memcpy(&h->ntensors, head + 12, 4);
  memcpy(h->count, head + 16, sizeof h->count);
  memcpy(&h->train_s, head + 16 + sizeof h->count, 8);
  const int64_t *c = h->count;
  if (h->version != 1 && h->version != CKPT_VERSION)
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s' has version %u; this accelrt reads "
                   "versions 1 and %u (a newer accelrt wrote it? use that one)", r->path,
                   h->version, CKPT_VERSION);
  if (h->version == 1 && h->ntensors > MAX_TENSORS_V1)
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s' declares %u tensors, more than the %d a "
                   "version 1 checkpoint holds; " DAMAGED, r->path, h->ntensors,
                   MAX_TENSORS_V1);
  if (h->version == 2 &&
      (int64_t)h->ntensors > (r->size - HEADER_BYTES - 4) / (MIN_RECORD_V2 + 4))
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s' declares %u tensors, more than its %lld "
                   "bytes can hold; " DAMAGED, r->path, h->ntensors, (long long)r->size);
  for (int i = 0; i < 5; i++)
    if (c[i] < 0 || c[i] > MAX_COUNT)
      return ar_errf(err, AR_CORRUPT, "checkpoint '%s': %s is %lld, outside [0, 2^53]; "
                     DAMAGED, r->path, count_names[i], (long long)c[i]);
  if (!isfinite(h->train_s) || h->train_s < 0)
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s': train_s is %g, not a number of seconds; "
                   DAMAGED, r->path, h->train_s);
  /* Every iteration trains at least one row and steps the optimizer once;
   * the rows of the current epoch are among the samples. */
  if (c[H_ITERATION] > c[H_SAMPLES] || c[H_ROWS_IN_EPOCH] > c[H_SAMPLES])
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s': %lld iterations and %lld rows into the "
                   "epoch cannot come from %lld samples (each iteration trains at least one "
                   "row); " DAMAGED, r->path, (long long)c[H_ITERATION],
                   (long long)c[H_ROWS_IN_EPOCH], (long long)c[H_SAMPLES]);
  if (c[H_STEP] > c[H_ITERATION])
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s': optimizer step %lld is beyond its %lld "
                   "iterations (one step per iteration); " DAMAGED, r->path,
                   (long long)c[H_STEP], (long long)c[H_ITERATION]);
  return AR_OK;
}

/* Version 2's dtype, dims and shape after the name: a known element type,
 * at most AR__CKPT_MAX_DIMS dims, a zero pad, every dim at least 0 and
 * their product's values in the file. */
static ar_status read_shape(reader *r, record *rec, ar_err *err) {
  uint8_t tag[4];
  if (data_left(r) < 4)
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s' ends inside the record of tensor '%s'; "
                   DAMAGED, r->path, rec->name);
  AR_CHECK(get(r, tag, 4, err));
  ar__ckpt_shape *s = &rec->shape;
  memset(s, 0, sizeof *s);
  s->dtype = tag[0];
  s->nd = tag[1];
  if ((s->dtype != AR__CKPT_F32 && s->dtype != AR__CKPT_U64) || s->nd > AR__CKPT_MAX_DIMS ||
      tag[2] || tag[3])
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s': tensor '%s' has element type %u and %u "
                   "dims (types 0 f32 and 1 u64, at most %d dims); " DAMAGED, r->path,
                   rec->name, tag[0], tag[1], AR__CKPT_MAX_DIMS);
  if ((int64_t)s->nd * 8 > data_left(r))
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s' ends inside tensor '%s''s dims; " DAMAGED,
                   r->path, rec->name);
  AR_CHECK(get(r, s->d, (size_t)s->nd * 8, err));
  const int64_t size = s->dtype == AR__CKPT_U64 ? 8 : 4;
  int64_t bytes = size;
  for (int d = 0; d < s->nd; d++)
    if (s->d[d] < 0 || (s->d[d] > 0 && bytes > data_left(r) / s->d[d]))
      return ar_errf(err, AR_CORRUPT, "checkpoint '%s': tensor '%s' has dim %d of %lld, more "
                     "values than the %lld bytes left in the file; " DAMAGED, r->path,
                     rec->name, d, (long long)s->d[d], (long long)data_left(r));
    else
      bytes *= s->d[d];
  rec->count = bytes / 4;
  return AR_OK;
}

/* Reads tensor i's record: a name of 1 to MAX_NAME bytes without control
 * characters and values that are in the file (version 1: a count of
 * floats; version 2: a shape). */
static ar_status read_record(reader *r, uint32_t version, uint32_t i, record *rec,
                             ar_err *err) {
  if (data_left(r) < 4 + 1 + (version == 1 ? 8 : 4))
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s' ends inside the record of tensor %u; "
                   DAMAGED, r->path, i);
  AR_CHECK(get(r, &rec->name_len, 4, err));
  if (rec->name_len == 0 || rec->name_len > MAX_NAME ||
      rec->name_len + (version == 1 ? 8 : 4) > data_left(r))
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s': tensor %u has a name of %u bytes "
                   "(names hold 1 to %d, within the file); " DAMAGED, r->path, i,
                   rec->name_len, MAX_NAME);
  AR_CHECK(get(r, rec->name, rec->name_len, err));
  rec->name[rec->name_len] = '\0';
  for (uint32_t k = 0; k < rec->name_len; k++)
    if ((unsigned char)rec->name[k] < 0x20 || rec->name[k] == 0x7f)
      return ar_errf(err, AR_CORRUPT, "checkpoint '%s': tensor %u's name holds control "
                     "characters; " DAMAGED, r->path, i);
  if (version != 1)
    return read_shape(r, rec, err);
  AR_CHECK(get(r, &rec->count, 8, err));
  if (rec->count < 0 || rec->count > data_left(r) / (int64_t)sizeof(float))
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s': tensor '%s' claims %lld values, but "
                   "%lld bytes are left in the file; " DAMAGED, r->path, rec->name,
                   (long long)rec->count, (long long)data_left(r));
  memset(&rec->shape, 0, sizeof rec->shape);
  rec->shape.nd = 1;
  rec->shape.d[0] = rec->count;
  return AR_OK;
}

static bool same_shape(const ar__ckpt_shape *a, const ar__ckpt_shape *b) {
  if (a->dtype != b->dtype || a->nd != b->nd)
    return false;
  for (int d = 0; d < a->nd; d++)
    if (a->d[d] != b->d[d])
      return false;
  return true;
}

/* Whether record i is the model's tensor i: same name, same size, and in
 * version 2 the same element type and shape (version 1 has no shapes:
 * files written before version 2 load by their sizes, as then). */
static bool same(const tensor_list *t, uint32_t version, uint32_t i, const record *rec) {
  return (int64_t)i < t->n && strcmp(rec->name, t->names[i]) == 0 &&
         rec->count == t->counts[i] && (version == 1 || same_shape(&rec->shape, &t->shapes[i]));
}

/* "f32 64x32x3x3" into buf. */
static const char *shape_text(const ar__ckpt_shape *s, char *buf, size_t cap) {
  int k = snprintf(buf, cap, "%s ", s->dtype == AR__CKPT_U64 ? "u64" : "f32");
  for (int d = 0; d < s->nd && k > 0 && (size_t)k < cap; d++)
    k += snprintf(buf + k, cap - (size_t)k, "%s%lld", d ? "x" : "", (long long)s->d[d]);
  if (s->nd == 0 && k > 0 && (size_t)k < cap)
    snprintf(buf + k, cap - (size_t)k, "scalar");
  return buf;
}

/* The shape error for the first record `bad` that differs from the model
 * (bad < 0: the records match but their number differs). */
static ar_status mismatch(const reader *r, const ckpt_header *h, const tensor_list *t,
                          int64_t bad, const record *rec, ar_err *err) {
  static const char fix[] = "the model's shape (its input, a layer's width or kind, the "
                            "optimizer) differs from the checkpoint's; use the job file it was "
                            "trained with, or start afresh without --resume";
  if (bad < 0 || bad >= t->n)
    return ar_errf(err, AR_SPEC, "checkpoint '%s' holds %u tensors but this job's model has "
                   "%d: %s", r->path, h->ntensors, t->n, fix);
  char a[160], b[160];
  if (h->version == 1)
    return ar_errf(err, AR_SPEC, "checkpoint '%s': tensor %lld is '%s' with %lld values, but "
                   "this job's model has '%s' with %lld: %s", r->path, (long long)bad,
                   rec->name, (long long)rec->count, t->names[bad], (long long)t->counts[bad],
                   fix);
  return ar_errf(err, AR_SPEC, "checkpoint '%s': tensor %lld is '%s' of %s, but this job's "
                 "model has '%s' of %s: %s", r->path, (long long)bad, rec->name,
                 shape_text(&rec->shape, a, sizeof a), t->names[bad],
                 shape_text(&t->shapes[bad], b, sizeof b), fix);
}

/* Walks the tensor table from the end of the header.  Without `into`, it
 * checks every record and seeks over the values; with t as well, it then
 * reports the first record that differs from the model (after the whole
 * table passed, so a damaged file is reported as such).  With `into`, the
 * table already passed: it copies the values to the model through buf
 * (CHUNK floats), each record read again in case the file changed. */
static ar_status walk(reader *r, const ckpt_header *h, const tensor_list *t, ar_device *into,
                      float *buf, ar_err *err) {
  if (fseeko(r->f, HEADER_BYTES, SEEK_SET) != 0)
    return ar_errf(err, AR_IO, "cannot read checkpoint '%s': %s", r->path, strerror(errno));
  r->pos = HEADER_BYTES;
  record rec, bad_rec = {0};
  int64_t bad = -1;
  for (uint32_t i = 0; i < h->ntensors; i++) {
    AR_CHECK(read_record(r, h->version, i, &rec, err));
    if (t && !same(t, h->version, i, &rec)) {
      if (into)
        return changed(r, err);
      if (bad < 0) {
        bad = i;
        bad_rec = rec;
      }
    }
    if (!into) {
      if (fseeko(r->f, (off_t)rec.count * (off_t)sizeof(float), SEEK_CUR) != 0)
        return ar_errf(err, AR_IO, "cannot read checkpoint '%s': %s", r->path, strerror(errno));
      r->pos += rec.count * (int64_t)sizeof(float);
      continue;
    }
    for (int64_t off = 0; off < rec.count; off += CHUNK) {
      size_t bytes = (size_t)(rec.count - off < CHUNK ? rec.count - off : CHUNK) * sizeof(float);
      AR_CHECK(get(r, buf, bytes, err));
      ar_status st = ar_device_copy_in(into, t->ptrs[i] + off, buf, bytes);
      if (st != AR_OK)
        return ar_errf(err, st, "copying tensor '%s' to the device: %s", rec.name,
                       ar_device_errmsg(into));
    }
  }
  if (data_left(r) != 0)
    return ar_errf(err, AR_CORRUPT, "checkpoint '%s': %lld bytes follow its last tensor; "
                   DAMAGED, r->path, (long long)data_left(r));
  if (t && (bad >= 0 || (int64_t)h->ntensors != t->n))
    return mismatch(r, h, t, bad, &bad_rec, err);
  return AR_OK;
}

/* Reads checkpoint `path` into h: verifies the checksum, then the header,
 * then the tensor table; with a model, checks its shapes against the
 * file's and then loads the tensors (the model is only written to once
 * everything else has passed). */
static ar_status read_list(ar_device *dev, const tensor_list *tl, const ar_fs *fs,
                           const char *path, ckpt_header *h, ar_err *err);

static ar_status read_checkpoint(ar_model *m, const ar_fs *fs, const char *path,
                                 ckpt_header *h, ar_err *err) {
  tensor_list t = {0};
  if (m)
    AR_CHECK(list_tensors(m, path, &t, err));
  ar_status st = read_list(m ? m->dev : NULL, m ? &t : NULL, fs, path, h, err);
  ar_free(t.block);
  return st;
}

/* With dev and tl: checks and loads tl's tensors; without: checks only. */
static ar_status read_list(ar_device *dev, const tensor_list *tl, const ar_fs *fs,
                           const char *path, ckpt_header *h, ar_err *err) {
  reader r = {NULL, path, 0, 0, 0};
  const tensor_list *m = tl;
  unsigned char head[HEADER_BYTES];
  ar_status st = AR_OK;
  float *buf = ar_malloc(CHUNK * sizeof(float));
  if (!buf) {
    st = ar_errf(err, AR_NOMEM, "out of memory reading checkpoint '%s'", path);
    goto done;
  }
  if ((st = open_ckpt(fs, &r, err)) != AR_OK)
    goto done;
  if ((st = verify(&r, (unsigned char *)buf, CHUNK * sizeof(float), head, err)) != AR_OK)
    goto done;
  if ((st = check_header(&r, head, h, err)) != AR_OK)
    goto done;
  if ((st = walk(&r, h, m, NULL, NULL, err)) != AR_OK || !m)
    goto done;
  /* The values, with the checksum recomputed: the file verified in pass
   * 1 may have been rewritten in place since. */
  r.crc = crc32(crc32(0L, Z_NULL, 0), head, HEADER_BYTES);
  if ((st = walk(&r, h, m, dev, buf, err)) != AR_OK)
    goto done;
  uint32_t stored = 0;
  if ((st = stored_crc(&r, &stored, err)) == AR_OK && stored != (uint32_t)r.crc)
    st = changed(&r, err);
done:
  if (r.f)
    fclose(r.f);
  ar_free(buf);
  return st;
}

static void to_state(const ckpt_header *h, ar_ckpt_state *st) {
  st->iteration = h->count[H_ITERATION];
  st->epoch = h->count[H_EPOCH];
  st->rows_in_epoch = h->count[H_ROWS_IN_EPOCH];
  st->samples = h->count[H_SAMPLES];
  st->train_s = h->train_s;
}

ar_status ar_checkpoint_peek(const ar_fs *fs, const char *path, ar_ckpt_state *st,
                             ar_err *err) {
  ckpt_header h;
  AR_CHECK(read_checkpoint(NULL, fs, path, &h, err));
  to_state(&h, st);
  return AR_OK;
}

ar_status ar_checkpoint_load(ar_model *m, ar_ckpt_state *st, const ar_fs *fs, const char *path,
                             ar_err *err) {
  ckpt_header h;
  AR_CHECK(read_checkpoint(m, fs, path, &h, err));
  to_state(&h, st);
  m->step = h.count[H_STEP];
  /* Hash tables are not saved: rebuilt from the loaded weights, so a
   * resumed sampled layer retrieves by the weights it resumes with. */
  if (m->n_sampled && ar_model_sampled_rebuild(m) != AR_OK)
    return ar_errf(err, AR_NOMEM, "checkpoint '%s': %s", path, m->err.msg);
  return AR_OK;
}

ar_status ar__checkpoint_load_tensors(const ar__ckpt_tensors *ct, int64_t *step,
                                      ar_ckpt_state *st, const ar_fs *fs, const char *path,
                                      ar_err *err) {
  tensor_list t = {ct->n, ct->counts, ct->names, ct->ptrs, ct->shapes, NULL};
  ckpt_header h;
  AR_CHECK(read_list(ct->dev, &t, fs, path, &h, err));
  to_state(&h, st);
  *step = h.count[H_STEP];
  return AR_OK;
}

ar_status ar_checkpoint_check_data(const ar_ckpt_state *st, int64_t points, const char *path,
                                   ar_err *err) {
  /* The engine keeps samples == epoch * points + rows_in_epoch with
   * 0 <= rows_in_epoch <= points (an epoch ends when the reader has
   * served every point); checked by division, and the subtraction only
   * of counts known to be in order, so no value overflows. */
  if (points > 0 && st->rows_in_epoch >= 0 && st->rows_in_epoch <= points &&
      st->samples >= st->rows_in_epoch) {
    int64_t full = st->samples - st->rows_in_epoch;
    if (full % points == 0 && full / points == st->epoch)
      return AR_OK;
  }
  return ar_errf(err, AR_SPEC, "checkpoint '%s' is %lld rows into epoch %lld after %lld "
                 "samples, which a training file of %lld points cannot give: the training "
                 "data's shape differs from the checkpoint's; start afresh without --resume, or "
                 "restore the data it was trained on", path, (long long)st->rows_in_epoch,
                 (long long)st->epoch, (long long)st->samples, (long long)points);
}
