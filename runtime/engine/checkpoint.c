/* Checkpoints: parameters, optimizer state and data position, written
 * atomically and verified by a CRC-32 (zlib) on load.
 *
 * Layout (little-endian, as this host writes it):
 *   "ACCELRTC" u32 version u32 ntensors
 *   i64 iteration, epoch, rows_in_epoch, samples, step   f64 train_s
 *   ntensors x { u32 name_len, name bytes, i64 count, count x f32 }
 *   u32 crc32 of every byte before it
 */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_MAGIC "ACCELRTC"
#define CKPT_VERSION 1u
#define MAX_TENSORS 256
#define CHUNK (1 << 16) /* floats staged per copy */

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

ar_status ar_checkpoint_save(const ar_model *m, const ar_ckpt_state *st, const ar_fs *fs,
                             const char *path, ar_err *err) {
  const char *names[MAX_TENSORS];
  float *ptrs[MAX_TENSORS];
  int64_t counts[MAX_TENSORS];
  int n = ar_model_tensors(m, names, ptrs, counts, MAX_TENSORS);
  AR_ASSERT(n <= MAX_TENSORS);
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
  uint32_t version = CKPT_VERSION, nt = (uint32_t)n;
  put(&w, CKPT_MAGIC, 8);
  put(&w, &version, 4);
  put(&w, &nt, 4);
  int64_t hdr[5] = {st->iteration, st->epoch, st->rows_in_epoch, st->samples, m->step};
  put(&w, hdr, sizeof hdr);
  put(&w, &st->train_s, sizeof st->train_s);
  for (int i = 0; i < n && !w.failed; i++) {
    uint32_t nl = (uint32_t)strlen(names[i]);
    put(&w, &nl, 4);
    put(&w, names[i], nl);
    put(&w, &counts[i], 8);
    for (int64_t off = 0; off < counts[i] && !w.failed; off += CHUNK) {
      int64_t c = counts[i] - off < CHUNK ? counts[i] - off : CHUNK;
      status = m->dev->ops->copy_out(m->dev, stage, ptrs[i] + off, (size_t)c * sizeof(float));
      if (status != AR_OK) {
        ar_errf(err, status, "copying tensor '%s' off the device: %s", names[i],
                m->dev->err.msg);
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

typedef struct reader {
  FILE *f;
  uLong crc;
  int short_read;
} reader;

static int get(reader *r, void *p, size_t n) {
  if (r->short_read || fread(p, 1, n, r->f) != n) {
    r->short_read = 1;
    return -1;
  }
  r->crc = crc32(r->crc, p, (uInt)n);
  return 0;
}

/* Opens a checkpoint for reading through fs. */
static ar_status open_ckpt(const ar_fs *fs, const char *path, FILE **out, ar_err *err) {
  int fd;
  *out = NULL;
  ar_status st = ar_fs_open_read(fs, path, &fd, err);
  if (st != AR_OK)
    return ar_err_wrap(err, "checkpoint (run without --resume to start afresh)");
  *out = fdopen(fd, "rb");
  if (!*out) {
    close(fd);
    return ar_errf(err, AR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
  }
  return AR_OK;
}

ar_status ar_checkpoint_peek(const ar_fs *fs, const char *path, ar_ckpt_state *st,
                             ar_err *err) {
  reader r = {NULL, crc32(0L, Z_NULL, 0), 0};
  AR_CHECK(open_ckpt(fs, path, &r.f, err));
  char magic[8];
  uint32_t version = 0, nt = 0;
  int64_t hdr[5];
  double train_s = 0;
  ar_status status = AR_OK;
  if (get(&r, magic, 8) || memcmp(magic, CKPT_MAGIC, 8) != 0)
    status = ar_errf(err, AR_CORRUPT, "'%s' is not an accelrt checkpoint", path);
  get(&r, &version, 4);
  get(&r, &nt, 4);
  get(&r, hdr, sizeof hdr);
  get(&r, &train_s, sizeof train_s);
  if (status == AR_OK && (r.short_read || version != CKPT_VERSION))
    status = ar_errf(err, AR_CORRUPT, "checkpoint '%s' is truncated or of another version",
                     path);
  fclose(r.f);
  if (status == AR_OK) {
    st->iteration = hdr[0];
    st->epoch = hdr[1];
    st->rows_in_epoch = hdr[2];
    st->samples = hdr[3];
    st->train_s = train_s;
  }
  return status;
}

ar_status ar_checkpoint_load(ar_model *m, ar_ckpt_state *st, const ar_fs *fs, const char *path,
                             ar_err *err) {
  const char *names[MAX_TENSORS];
  float *ptrs[MAX_TENSORS];
  int64_t counts[MAX_TENSORS];
  int n = ar_model_tensors(m, names, ptrs, counts, MAX_TENSORS);
  ar_status status = AR_OK;
  float *stage = ar_malloc(CHUNK * sizeof(float));
  reader r = {NULL, crc32(0L, Z_NULL, 0), 0};
  if (!stage)
    return ar_errf(err, AR_NOMEM, "out of memory reading checkpoint '%s'", path);
  status = open_ckpt(fs, path, &r.f, err);
  if (status != AR_OK)
    goto done;
  char magic[8];
  uint32_t version = 0, nt = 0;
  int64_t hdr[5];
  double train_s = 0;
  if (get(&r, magic, 8) || memcmp(magic, CKPT_MAGIC, 8) != 0) {
    status = ar_errf(err, AR_CORRUPT, "'%s' is not an accelrt checkpoint", path);
    goto done;
  }
  get(&r, &version, 4);
  get(&r, &nt, 4);
  get(&r, hdr, sizeof hdr);
  get(&r, &train_s, sizeof train_s);
  if (r.short_read) {
    status = ar_errf(err, AR_CORRUPT, "checkpoint '%s' is truncated", path);
    goto done;
  }
  if (version != CKPT_VERSION) {
    status = ar_errf(err, AR_CORRUPT, "checkpoint '%s' has version %u; this accelrt reads "
                     "version %u", path, version, CKPT_VERSION);
    goto done;
  }
  if ((int)nt != n) {
    status = ar_errf(err, AR_SPEC, "checkpoint '%s' holds %u tensors but this job's model "
                     "has %d (was the model or the optimizer changed?)", path, nt, n);
    goto done;
  }
  for (int i = 0; i < n; i++) {
    uint32_t nl = 0;
    char name[80];
    int64_t count = 0;
    if (get(&r, &nl, 4) || nl >= sizeof name || get(&r, name, nl)) {
      status = ar_errf(err, AR_CORRUPT, "checkpoint '%s' is truncated or corrupt at tensor %d",
                       path, i);
      goto done;
    }
    name[nl] = '\0';
    get(&r, &count, 8);
    if (strcmp(name, names[i]) != 0 || count != counts[i]) {
      status = ar_errf(err, AR_SPEC, "checkpoint '%s': tensor %d is '%s' with %lld values, but "
                       "this job expects '%s' with %lld (was the model changed?)", path, i,
                       name, (long long)count, names[i], (long long)counts[i]);
      goto done;
    }
    for (int64_t off = 0; off < count; off += CHUNK) {
      int64_t c = count - off < CHUNK ? count - off : CHUNK;
      if (get(&r, stage, (size_t)c * sizeof(float))) {
        status = ar_errf(err, AR_CORRUPT, "checkpoint '%s' is truncated in tensor '%s'", path,
                         name);
        goto done;
      }
      status = m->dev->ops->copy_in(m->dev, ptrs[i] + off, stage, (size_t)c * sizeof(float));
      if (status != AR_OK) {
        ar_errf(err, status, "copying tensor '%s' to the device: %s", name, m->dev->err.msg);
        goto done;
      }
    }
  }
  uLong want = r.crc;
  uint32_t crc = 0;
  if (fread(&crc, 1, 4, r.f) != 4 || crc != (uint32_t)want) {
    status = ar_errf(err, AR_CORRUPT, "checkpoint '%s' fails its checksum (damaged file); "
                     "run without --resume to start afresh", path);
    goto done;
  }
  st->iteration = hdr[0];
  st->epoch = hdr[1];
  st->rows_in_epoch = hdr[2];
  st->samples = hdr[3];
  m->step = hdr[4];
  st->train_s = train_s;
  /* Hash tables are not saved: rebuilt from the loaded weights, so a
   * resumed sampled layer retrieves by the weights it resumes with. */
  if (m->n_sampled && ar_model_sampled_rebuild(m) != AR_OK)
    status = ar_errf(err, AR_NOMEM, "checkpoint '%s': %s", path, m->err.msg);
done:
  if (r.f)
    fclose(r.f);
  ar_free(stage);
  return status;
}
