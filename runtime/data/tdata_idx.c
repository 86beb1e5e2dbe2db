/*
 * ar_tdata_open_idx: the idx files of MNIST and Fashion-MNIST (LeCun et
 * al., "The MNIST database", file format section): a big-endian header
 * (magic 0x000008NN: type u8, NN dims; then one u32 per dim) and the
 * values.  An uncompressed file is mapped; a gzip file (found by its
 * magic bytes, whatever its name) is decompressed once into memory.
 * The header's promise is checked against the bytes present before a
 * value is read, so a truncated file is an error naming both numbers.
 */
#define _GNU_SOURCE
#include "tdata_impl.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_IMAGES 0x00000803u /* u8, 3 dims: N x H x W */
#define IDX_LABELS 0x00000801u /* u8, 1 dim: N */
#define IDX_DIM_MAX 0x7fffffffu
#define GZ_CHUNK ((size_t)1 << 20)
#define GZ_MAX ((size_t)1 << 40) /* more decompressed bytes than this: refused */

/* One file's contents, mapped or decompressed. */
typedef struct idx_file {
  const char *path;
  const uint8_t *p; /* (len) */
  size_t len;
  void *heap;       /* decompressed, or NULL */
  void *map;        /* mapped, or NULL */
  bool gz_short;    /* the gzip stream ended early */
} idx_file;

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Decompresses the gzip stream on fd (which gz takes over and closes).
 * A stream cut short keeps what came before the cut (gz_short), so the
 * header check below reports it with the byte counts. */
static ar_status gunzip(int fd, idx_file *f, ar_err *err) {
  gzFile gz = gzdopen(fd, "rb");
  if (!gz) {
    close(fd);
    return ar_errf(err, AR_NOMEM, "%s: out of memory opening the gzip stream", f->path);
  }
  size_t cap = GZ_CHUNK, len = 0;
  uint8_t *buf = ar_malloc(cap);
  ar_status st = AR_OK;
  if (!buf) {
    st = ar_errf(err, AR_NOMEM, "%s: out of memory decompressing (%zu bytes)", f->path, cap);
    goto done;
  }
  for (;;) {
    if (len == cap) {
      if (cap >= GZ_MAX) {
        st = ar_errf(err, AR_PARSE, "%s: decompresses to more than %zu bytes; not an idx file",
                     f->path, GZ_MAX);
        goto done;
      }
      uint8_t *nb = ar_realloc(buf, cap * 2);
      if (!nb) {
        st = ar_errf(err, AR_NOMEM, "%s: out of memory decompressing (%zu bytes)", f->path,
                     cap * 2);
        goto done;
      }
      buf = nb;
      cap *= 2;
    }
    size_t want = cap - len > (1u << 30) ? (1u << 30) : cap - len;
    int got = gzread(gz, buf + len, (unsigned)want);
    if (got > 0) {
      len += (size_t)got;
      continue;
    }
    /* A cut stream reads as its data so far, then 0 or -1, with
     * Z_BUF_ERROR ("unexpected end of file") left in the state. */
    int zst;
    const char *why = gzerror(gz, &zst);
    if (zst == Z_BUF_ERROR)
      f->gz_short = true;
    if (got == 0 || zst == Z_BUF_ERROR)
      break;
    st = ar_errf(err, zst == Z_ERRNO ? AR_IO : AR_PARSE,
                 "%s: cannot decompress after %zu bytes: %s (the gzip file is damaged; "
                 "download it again)",
                 f->path, len, zst == Z_ERRNO ? strerror(errno) : why);
    goto done;
  }
  /* Give back the doubling's slack: the dataset's size is reported. */
  if (len > 0 && len < cap) {
    uint8_t *nb = ar_realloc(buf, len);
    if (nb)
      buf = nb;
  }
done:
  gzclose(gz);
  if (st != AR_OK) {
    ar_free(buf);
    return st;
  }
  f->heap = buf;
  f->p = buf;
  f->len = len;
  return AR_OK;
}

/* Reads path whole: mapped when plain, decompressed when gzip. */
static ar_status load(const ar_fs *fs, const char *path, idx_file *f, ar_err *err) {
  memset(f, 0, sizeof *f);
  f->path = path;
  int fd;
  AR_CHECK(ar_fs_open_read(fs, path, &fd, err));
  uint8_t magic[2];
  ssize_t got = pread(fd, magic, 2, 0);
  if (got < 0) {
    int e = errno;
    close(fd);
    return ar_errf(err, AR_IO, "%s: read failed: %s (check the file and the disk)", path,
                   strerror(e));
  }
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b)
    return gunzip(fd, f, err);
  void *base;
  ar_status st = ar__tdata_map(fd, path, &base, &f->len, err);
  close(fd);
  if (st != AR_OK)
    return st;
  f->map = base;
  f->p = base;
  return AR_OK;
}

static void unload(idx_file *f) {
  ar_free(f->heap);
  if (f->map)
    munmap(f->map, f->len);
  f->heap = f->map = NULL;
}

/* Checks the header of f against the magic it must have (nd dims) and
 * the bytes present; dims gets the nd sizes. */
static ar_status check_header(const idx_file *f, uint32_t want, int nd, int64_t *dims,
                              ar_err *err) {
  const char *what = want == IDX_IMAGES ? "images" : "labels";
  size_t head = 4 + 4 * (size_t)nd;
  const char *gz = f->gz_short ? " (the gzip stream ends early: the download was cut; "
                                 "fetch the file again)"
                               : "";
  if (f->len < 4)
    return ar_errf(err, AR_PARSE,
                   "%s: truncated: %zu bytes, shorter than the 4-byte idx magic%s", f->path,
                   f->len, gz);
  uint32_t magic = be32(f->p);
  if (magic != want)
    return ar_errf(err, AR_PARSE,
                   "%s: offset 0: magic 0x%08x, expected 0x%08x (idx %s: u8, %d dim%s); "
                   "is this the %s file?",
                   f->path, magic, want, what, nd, nd > 1 ? "s" : "", what);
  if (f->len < head)
    return ar_errf(err, AR_PARSE, "%s: truncated: header needs %zu bytes, the file has %zu%s",
                   f->path, head, f->len, gz);
  uint64_t need = 1;
  for (int k = 0; k < nd; k++) {
    uint32_t v = be32(f->p + 4 + 4 * k);
    if (v > IDX_DIM_MAX || (k > 0 && v == 0))
      return ar_errf(err, AR_PARSE, "%s: offset %d: dimension %d is %u, expected 1 to %u",
                     f->path, 4 + 4 * k, k, v, IDX_DIM_MAX);
    dims[k] = v;
    if (need > UINT64_MAX / (v ? v : 1))
      need = UINT64_MAX;
    else
      need *= v;
  }
  uint64_t have = f->len - head;
  if (need > have)
    return ar_errf(err, AR_PARSE,
                   "%s: truncated: the header promises %llu bytes of %s after its %zu bytes, "
                   "the file has %llu%s",
                   f->path, (unsigned long long)need, what, head, (unsigned long long)have, gz);
  if (need < have)
    return ar_errf(err, AR_PARSE,
                   "%s: %llu bytes after the %llu bytes of %s the header promises; "
                   "the file is damaged or not an idx file",
                   f->path, (unsigned long long)(have - need), (unsigned long long)need, what);
  if (f->gz_short)
    return ar_errf(err, AR_PARSE,
                   "%s: the gzip stream ends before its checksum, so the data cannot be "
                   "trusted; fetch the file again",
                   f->path);
  return AR_OK;
}

/* The labels file by the MNIST naming rule, in the file's name only:
 * "-images-idx3-ubyte" -> "-labels-idx1-ubyte", or "images.idx3" ->
 * "labels.idx1".  Tries the images file's compression first (".gz" or
 * none), then the other.  *out is ar_free'd by the caller. */
static ar_status find_labels(const ar_fs *fs, const char *images, char **out, ar_err *err) {
  static const char *const rule[][2] = {{"-images-idx3-ubyte", "-labels-idx1-ubyte"},
                                        {"images.idx3", "labels.idx1"}};
  size_t n = strlen(images);
  bool gz = n >= 3 && !strcmp(images + n - 3, ".gz");
  const char *base = strrchr(images, '/');
  base = base ? base + 1 : images;
  const char *hit = NULL;
  int r = 0;
  for (; r < 2; r++) {
    for (const char *p = strstr(base, rule[r][0]); p; p = strstr(p + 1, rule[r][0]))
      hit = p; /* the last occurrence */
    if (hit)
      break;
  }
  if (!hit)
    return ar_errf(err, AR_NOTFOUND,
                   "%s: cannot name its labels file: the name holds neither "
                   "'-images-idx3-ubyte' nor 'images.idx3'; give it with data.train_labels "
                   "(or data.test_labels)",
                   images);
  size_t stem = gz ? n - 3 : n;
  char *tried[2] = {NULL, NULL};
  ar_status st = AR_OK;
  for (int k = 0; k < 2; k++) {
    bool with_gz = (k == 0) == gz;
    char *p = ar_malloc(stem + 4);
    if (!p) {
      st = ar_errf(err, AR_NOMEM, "out of memory naming the labels file of %s", images);
      goto done;
    }
    memcpy(p, images, stem);
    memcpy(p + (hit - images), rule[r][1], strlen(rule[r][1]));
    strcpy(p + stem, with_gz ? ".gz" : "");
    tried[k] = p;
    if (ar_fs_readable(fs, p)) {
      *out = p;
      tried[k] = NULL;
      goto done;
    }
  }
  st = ar_errf(err, AR_NOTFOUND,
               "labels of %s not found: tried %s and %s; give the file with "
               "data.train_labels (or data.test_labels)",
               images, tried[0], tried[1]);
done:
  ar_free(tried[0]);
  ar_free(tried[1]);
  return st;
}

/* Moves a loaded file's memory into the handle. */
static void adopt(ar_tdata *d, int slot, idx_file *f) {
  d->heap[slot] = f->heap;
  d->map[slot] = f->map;
  d->map_len[slot] = f->map ? f->len : 0;
  d->info.bytes += f->len;
  f->heap = f->map = NULL;
}

ar_status ar_tdata_open_idx(const char *images, const char *labels, const ar_fs *fs,
                            ar_tdata **out, ar_err *err) {
  char *found = NULL;
  idx_file fi = {0}, fl = {0};
  ar_tdata *d = NULL;
  ar_status st;
  int64_t idim[3], ldim[1];
  if (!labels) {
    st = find_labels(fs, images, &found, err);
    if (st != AR_OK)
      goto fail;
    labels = found;
  }
  if ((st = load(fs, images, &fi, err)) != AR_OK ||
      (st = check_header(&fi, IDX_IMAGES, 3, idim, err)) != AR_OK ||
      (st = load(fs, labels, &fl, err)) != AR_OK ||
      (st = check_header(&fl, IDX_LABELS, 1, ldim, err)) != AR_OK)
    goto fail;
  if (idim[0] != ldim[0]) {
    st = ar_errf(err, AR_PARSE,
                 "%s: offset 4: %lld labels, but %s holds %lld images; the two files must "
                 "come from the same set (train or test)",
                 labels, (long long)ldim[0], images, (long long)idim[0]);
    goto fail;
  }
  if (!(d = ar__tdata_alloc())) {
    st = ar_errf(err, AR_NOMEM, "out of memory opening %s", images);
    goto fail;
  }
  d->info.count = idim[0];
  d->info.nd = 3;
  d->info.dims[0] = 1;
  d->info.dims[1] = idim[1];
  d->info.dims[2] = idim[2];
  d->info.type = AR_TDATA_U8;
  d->elems = idim[1] * idim[2];
  d->x = fi.p + 16;
  d->y8 = fl.p + 8;
  for (int64_t i = 0; i < d->info.count; i++)
    if (d->y8[i] >= d->info.classes)
      d->info.classes = d->y8[i] + 1;
  adopt(d, 0, &fi);
  adopt(d, 1, &fl);
  ar_free(found);
  *out = d;
  return AR_OK;
fail:
  unload(&fl);
  unload(&fi);
  ar_free(found);
  return st;
}
