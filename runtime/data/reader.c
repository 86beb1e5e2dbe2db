/*
 * Streaming readers for the xc and libsvm multi-label formats.
 *
 * ar_reader_open reads the file once, validating every line and learning
 * its shape (ar_data_stats) and the most memory any shuffle window needs.
 * It then allocates everything a reader will ever use: the read buffer
 * (large enough for the longest line, so a line never straddles a refill
 * that cannot be handled), the label de-duplication set and one shuffle
 * window of parsed rows.  ar_reader_next, _skip and _rewind never allocate.
 *
 * Shuffling is a windowed (local) shuffle, as streaming loaders do: the
 * file is cut into consecutive windows of W rows; epoch e serves window 0,
 * then window 1, ..., each permuted by a Fisher-Yates shuffle driven by a
 * xoshiro256** stream seeded from (seed, e, window index) (see ar_rng in base.h).
 * Because each window has its own stream, ar_reader_skip can step over
 * whole windows without parsing them and still land in exactly the state
 * ar_reader_next would have reached.  Rows never move between windows, so
 * the order is a permutation of the file within each window only.
 *
 * Lines: '\n' ends a line, a '\r' before it and trailing blanks are
 * ignored.  Empty (or whitespace-only) lines are accepted only at the end
 * of the file; inside the data they are an error, because a point with
 * neither labels nor features cannot be told from an accidental blank.
 */
#define _GNU_SOURCE
#include "accelrt/data.h"


#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK ((size_t)1 << 20) /* initial read buffer: 1 MiB */
#define LINEAR_DEDUPE 16 /* label lists up to this long are de-duplicated by a linear scan */
#define ID_MAX 2147483647ll /* ids are int32 in ar_batch */
#define NUM_TOKEN_MAX 128 /* longest number text handed to strtod */
#define EXP10_CAP 100000  /* bound of a value's decimal exponent while parsing */

/* ---- line reading ---------------------------------------------------------
 * The reader owns one buffer; a line that fits is returned in place (with
 * its '\n' replaced by NUL).  When the rest of the buffer holds only part
 * of a line, that part is moved to the front and the buffer refilled.  A
 * line longer than the buffer makes it grow, which only the opening scan
 * may do; afterwards the buffer is at least as long as the longest line. */
typedef struct linereader {
  FILE *f;
  char *buf;     /* (cap + 1): one spare byte for the NUL after an unterminated last line */
  size_t cap;    /* bytes of data the buffer holds */
  size_t pos;    /* start of the unread data */
  size_t end;    /* end of the valid data */
  size_t scan;   /* where the search for '\n' resumes, pos <= scan <= end */
  int eof;       /* fread reported the end of the file */
  int64_t lineno; /* 1-based number of the line last returned */
} linereader;

struct ar_reader {
  char *path; /* copied at open */
  ar_reader_opts opts;
  ar_data_stats stats;
  linereader lr;

  /* Ids must be below these (exclusive); the hints say which bound. */
  int64_t feat_limit, lab_limit;
  const char *feat_why, *lab_why;

  /* Label de-duplication for long label lists: open addressing with a
   * per-row stamp in the high 32 bits, so the table is never cleared. */
  uint64_t *set;     /* (1 << set_bits) slots: stamp << 32 | label */
  unsigned set_bits; /* 0 while no set has been needed */
  uint32_t stamp;

  /* Scan only: labels of the current row (growing); freed after the scan. */
  int32_t *scratch_lab; /* (scratch_cap) */
  int64_t scratch_cap;

  /* One shuffle window of parsed rows, packed. */
  int64_t window;                /* W, rows per window, >= 1 */
  int64_t win_nnz_cap;           /* most features in any window of the file */
  int64_t win_lab_cap;           /* most labels in any window of the file */
  int32_t *w_idx;                /* (win_nnz_cap) */
  float *w_val;                  /* (win_nnz_cap) */
  int32_t *w_lab;                /* (win_lab_cap) */
  int64_t *w_row;                /* (window + 1) feature offsets */
  int64_t *w_labp;               /* (window + 1) label offsets */
  int64_t *perm;                 /* (window) serving order of the loaded rows */

  /* Position in the current epoch. */
  uint64_t epoch;
  int64_t rows_read;   /* data rows consumed from the file (whole windows) */
  int64_t next_window; /* index of the next window to load or skip */
  int64_t win_rows;    /* rows in the loaded window */
  int64_t win_pos;     /* rows of it already served */
  ar_status broken;    /* a failed next/skip; cleared by rewind */
};

/* Where a parsed row goes: counts only (scan, idx == NULL) or the window. */
typedef struct rowbuf {
  int32_t *idx; /* (nnz_cap) or NULL */
  float *val;   /* (nnz_cap) or NULL */
  int64_t nnz_cap;
  int32_t *lab; /* (lab_cap) */
  int64_t lab_cap;
  int64_t nnz, nlab;
  int set_active; /* the label set holds this row's labels */
} rowbuf;

/* ---- messages -------------------------------------------------------------- */

static ar_status perr(const ar_reader *r, ar_err *err, ar_status st,
                      int64_t line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static ar_status perr(const ar_reader *r, ar_err *err, ar_status st,
                      int64_t line, const char *fmt, ...) {
  if (!err)
    return st;
  char what[AR_ERR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return ar_errf(err, st, "%s:%lld: error: %s", r->path, (long long)line, what);
}

/* Copies the token starting at p (up to a blank or e) for a message,
 * shortened and with unprintable bytes as '?'. */
static const char *show_token(char out[48], const char *p, const char *e) {
  size_t n = 0;
  while (p < e && *p != ' ' && *p != '\t' && n < 40) {
    unsigned char c = (unsigned char)*p++;
    out[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  if (p < e && *p != ' ' && *p != '\t') {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
  return out;
}

/* ---- line reader ----------------------------------------------------------- */

static ar_status lr_io_error(const ar_reader *r, ar_err *err) {
  return ar_errf(err, AR_IO, "%s: read failed: %s (check the file and the disk)",
                 r->path, strerror(errno));
}

/* Returns the next line in *line / *len (NUL-terminated, without '\n'),
 * or *line = NULL at the end of the file.  may_grow: the buffer may grow
 * for a long line (open scan only); otherwise such a line means the file
 * changed since it was opened. */
static ar_status lr_get(ar_reader *r, int may_grow, char **line, size_t *len,
                        ar_err *err) {
  linereader *lr = &r->lr;
  for (;;) {
    char *nl = memchr(lr->buf + lr->scan, '\n', lr->end - lr->scan);
    if (nl) {
      *line = lr->buf + lr->pos;
      *len = (size_t)(nl - *line);
      *nl = '\0';
      lr->pos = lr->scan = (size_t)(nl - lr->buf) + 1;
      lr->lineno++;
      return AR_OK;
    }
    if (lr->eof) {
      if (lr->pos == lr->end) {
        *line = NULL;
        *len = 0;
        return AR_OK;
      }
      *line = lr->buf + lr->pos;
      *len = lr->end - lr->pos;
      lr->buf[lr->end] = '\0'; /* the spare byte */
      lr->pos = lr->scan = lr->end;
      lr->lineno++;
      return AR_OK;
    }
    /* Keep the partial line, make room, refill. */
    if (lr->pos > 0) {
      size_t rest = lr->end - lr->pos;
      memmove(lr->buf, lr->buf + lr->pos, rest);
      lr->pos = 0;
      lr->end = rest;
    }
    lr->scan = lr->end;
    if (lr->end == lr->cap) {
      if (!may_grow)
        return perr(r, err, AR_CORRUPT, lr->lineno + 1,
                    "line is longer than when the file was opened "
                    "(the file changed while it was being read; reopen it)");
      size_t limit = (size_t)r->opts.max_line;
      if (lr->cap >= limit)
        return perr(r, err, AR_RANGE, lr->lineno + 1,
                    "line is longer than %zu bytes, the longest this reader accepts "
                    "(is this a data file? a file without line breaks, or /dev/zero, "
                    "is not)",
                    limit);
      size_t ncap = lr->cap * 2 > limit ? limit : lr->cap * 2;
      char *nb = ar_realloc(lr->buf, ncap + 1);
      if (!nb)
        return perr(r, err, AR_NOMEM, lr->lineno + 1,
                    "out of memory buffering a line of more than %zu bytes",
                    lr->cap);
      lr->buf = nb;
      lr->cap = ncap;
    }
    size_t got = fread(lr->buf + lr->end, 1, lr->cap - lr->end, lr->f);
    if (got == 0) {
      if (ferror(lr->f))
        return lr_io_error(r, err);
      lr->eof = 1;
    }
    lr->end += got;
  }
}

/* Seeks to the start of the file and forgets buffered data. */
static ar_status lr_restart(ar_reader *r, ar_err *err) {
  linereader *lr = &r->lr;
  clearerr(lr->f);
  if (fseek(lr->f, 0, SEEK_SET) != 0)
    return ar_errf(err, AR_IO, "%s: cannot seek to the start: %s", r->path,
                   strerror(errno));
  lr->pos = lr->end = lr->scan = 0;
  lr->eof = 0;
  lr->lineno = 0;
  return AR_OK;
}

/* ---- number parsing -------------------------------------------------------- */

static inline int is_blank(char c) { return c == ' ' || c == '\t'; }
static inline int is_digit(char c) { return (unsigned)(c - '0') < 10u; }

/* Parses a non-negative decimal integer at *pp.  Returns the number of
 * digits (0: none), or -1 when the value exceeds `max` (>= 0).  The bound
 * is checked before each digit is added, so v never overflows, however
 * many digits follow ("99999999999999999999" is -1, not a wrapped value). */
static int parse_uint(const char **pp, const char *e, int64_t max,
                      int64_t *out) {
  const char *p = *pp;
  int64_t v = 0;
  int n = 0;
  while (p < e && is_digit(*p)) {
    int d = *p - '0';
    if (v > max / 10 || v * 10 > max - d)
      return -1;
    v = v * 10 + d;
    p++;
    n++;
  }
  *pp = p;
  *out = v;
  return n;
}

enum { NUM_OK = 0, NUM_BAD, NUM_NONFINITE, NUM_TOOLONG };

static const double pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,
                                     1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17,
                                     1e18, 1e19, 1e20, 1e21, 1e22};

/* Parses a decimal floating-point value [+-]digits[.digits][(e|E)[+-]digits]
 * that must end at e or a blank.  Values with at most 15 significant
 * digits and a decimal exponent within +-22 are computed exactly in double
 * (both operands are exact, so the one multiply or divide rounds once);
 * anything else goes through strtod.  The result is rounded to float and
 * must be finite.  One pass over the characters of the number, kept in one
 * piece: it is the reader's innermost loop, and its states (sign, digits,
 * point, exponent) read in the order the text has them. */
static int parse_value(const char **pp, const char *e, float *out) {
  const char *p = *pp, *start = p;
  int neg = 0;
  if (p < e && (*p == '+' || *p == '-')) {
    neg = *p == '-';
    p++;
  }
  /* The common case of XC data: "1". */
  if (p < e && *p == '1' && (p + 1 == e || is_blank(p[1]))) {
    *out = neg ? -1.0f : 1.0f;
    *pp = p + 1;
    return NUM_OK;
  }
  if (p < e && (*p == 'n' || *p == 'N' || *p == 'i' || *p == 'I'))
    return NUM_NONFINITE;
  /* exp10 saturates at +-EXP10_CAP: only a token of that many digits
   * gets there, and such a token is NUM_TOOLONG (or zero) whatever its
   * exact exponent, so the counters stay far from overflow on any line. */
  uint64_t mant = 0;
  int sig = 0, exp10 = 0;
  bool digits = false;
  while (p < e && is_digit(*p)) {
    int d = *p++ - '0';
    digits = true;
    if (sig < 19) {
      if (mant || d) {
        mant = mant * 10 + (uint64_t)d;
        sig++;
      }
    } else if (exp10 < EXP10_CAP) {
      exp10++;
    }
  }
  if (p < e && *p == '.') {
    p++;
    while (p < e && is_digit(*p)) {
      int d = *p++ - '0';
      digits = true;
      if (sig < 19) {
        if (mant || d) {
          mant = mant * 10 + (uint64_t)d;
          sig++;
        }
        if (exp10 > -EXP10_CAP)
          exp10--;
      }
    }
  }
  if (!digits)
    return NUM_BAD;
  if (p < e && (*p == 'e' || *p == 'E')) {
    p++;
    int eneg = 0;
    if (p < e && (*p == '+' || *p == '-')) {
      eneg = *p == '-';
      p++;
    }
    if (p == e || !is_digit(*p))
      return NUM_BAD;
    int x = 0;
    while (p < e && is_digit(*p)) {
      if (x < 100000)
        x = x * 10 + (*p - '0');
      p++;
    }
    exp10 += eneg ? -x : x;
  }
  if (p < e && !is_blank(*p))
    return NUM_BAD;

  double v;
  if (mant == 0) {
    v = 0.0;
  } else if (sig <= 15 && exp10 >= -22 && exp10 <= 22) {
    v = exp10 >= 0 ? (double)mant * pow10_tab[exp10]
                   : (double)mant / pow10_tab[-exp10];
  } else {
    char tmp[NUM_TOKEN_MAX];
    size_t n = (size_t)(p - start);
    if (n >= sizeof tmp)
      return NUM_TOOLONG;
    memcpy(tmp, start, n);
    tmp[n] = '\0';
    v = strtod(tmp, NULL);
    neg = 0; /* strtod read the sign */
  }
  float f = (float)(neg ? -v : v);
  if (!isfinite(f))
    return NUM_NONFINITE;
  *out = f;
  *pp = p;
  return NUM_OK;
}

/* ---- label de-duplication -------------------------------------------------- */

static inline uint32_t set_hash(uint32_t v, unsigned bits) {
  return (uint32_t)(v * 0x9E3779B1u) >> (32 - bits);
}

/* Inserts v into the set for the current stamp; returns 1 when it was
 * already there. */
static int set_insert(ar_reader *r, int32_t v) {
  uint32_t mask = (1u << r->set_bits) - 1;
  uint32_t h = set_hash((uint32_t)v, r->set_bits);
  uint64_t key = ((uint64_t)r->stamp << 32) | (uint32_t)v;
  for (;;) {
    uint64_t s = r->set[h];
    if ((uint32_t)(s >> 32) != r->stamp) {
      r->set[h] = key;
      return 0;
    }
    if (s == key)
      return 1;
    h = (h + 1) & mask;
  }
}

/* Starts a fresh stamp and inserts the row's labels so far. */
static void set_fill(ar_reader *r, const rowbuf *row) {
  if (++r->stamp == 0) {
    memset(r->set, 0, ((size_t)1 << r->set_bits) * sizeof *r->set);
    r->stamp = 1;
  }
  for (int64_t i = 0; i < row->nlab; i++)
    set_insert(r, row->lab[i]);
}

/* Replaces the set by one that holds `n` labels at a load of at most 1/2
 * and inserts the row's labels so far.  Only the scan may grow it; it is
 * then as large as the longest label list of the file needs. */
static ar_status set_grow(ar_reader *r, int scanning, rowbuf *row, int64_t n,
                          int64_t line, ar_err *err) {
  if (!scanning)
    return perr(r, err, AR_CORRUPT, line,
                "row has more labels than when the file was opened "
                "(the file changed while it was being read; reopen it)");
  unsigned bits = r->set_bits ? r->set_bits : 6;
  while (((int64_t)1 << bits) < 2 * n)
    bits++;
  if (bits > 31)
    return perr(r, err, AR_NOMEM, line, "too many labels in one row");
  uint64_t *ns = ar_calloc((size_t)1 << bits, sizeof *ns);
  if (!ns)
    return perr(r, err, AR_NOMEM, line,
                "out of memory for the label set of a row with %lld labels",
                (long long)n);
  ar_free(r->set);
  r->set = ns;
  r->set_bits = bits;
  r->stamp = 0;
  set_fill(r, row);
  row->set_active = 1;
  return AR_OK;
}

/* Appends label v unless the row already has it (first occurrence wins).
 * Short lists are checked linearly; from LINEAR_DEDUPE labels on, the
 * row's labels also live in the hash set. */
static ar_status add_label(ar_reader *r, int scanning, rowbuf *row, int32_t v,
                           int64_t line, ar_err *err) {
  if (row->nlab < LINEAR_DEDUPE) {
    for (int64_t i = 0; i < row->nlab; i++)
      if (row->lab[i] == v)
        return AR_OK;
  } else {
    if (!r->set_bits || ((int64_t)1 << r->set_bits) < 2 * (row->nlab + 1)) {
      AR_CHECK(set_grow(r, scanning, row, row->nlab + 1, line, err));
    } else if (!row->set_active) {
      set_fill(r, row);
      row->set_active = 1;
    }
    if (set_insert(r, v))
      return AR_OK;
  }
  if (row->nlab == row->lab_cap) {
    if (!scanning)
      return perr(r, err, AR_CORRUPT, line,
                  "row has more labels than when the file was opened "
                  "(the file changed while it was being read; reopen it)");
    int64_t ncap = row->lab_cap ? row->lab_cap * 2 : 64;
    int32_t *nl = ar_realloc(r->scratch_lab, (size_t)ncap * sizeof *nl);
    if (!nl)
      return perr(r, err, AR_NOMEM, line, "out of memory for a row's labels");
    r->scratch_lab = nl;
    r->scratch_cap = ncap;
    row->lab = nl;
    row->lab_cap = ncap;
  }
  row->lab[row->nlab++] = v;
  return AR_OK;
}

/* ---- row parsing ----------------------------------------------------------- */

/* Parses one data line into row.  scanning: validate and count (features
 * are not stored, the label buffer may grow); otherwise store into the
 * window (capacities are fixed: exceeding them means the file changed). */
/* The label list "l1,l2,..." at *pp (the line does not start with a
 * blank); *pp moves past it. */
static ar_status parse_labels(ar_reader *r, int scanning, const char **pp, const char *e,
                              rowbuf *row, int64_t line, ar_err *err) {
  const char *p = *pp;
  char tok[48];
  const char *list = p;
  for (;;) {
    int64_t v;
    const char *at = p;
    int n = parse_uint(&p, e, ID_MAX - 1, &v);
    if (n < 0)
      return perr(r, err, AR_PARSE, line,
                  "label id '%s' is too large (ids must be below 2^31)",
                  show_token(tok, at, e));
    if (n == 0) {
      const char *q = list;
      while (q < e && !is_blank(*q) && *q != ':')
        q++;
      if (q < e && *q == ':')
        return perr(r, err, AR_PARSE, line,
                    "the line starts with feature '%s' but labels come first "
                    "(a point without labels starts with a space)",
                    show_token(tok, list, e));
      if (at == e || is_blank(*at) || *at == ',')
        return perr(r, err, AR_PARSE, line,
                    "empty label id in '%s' (labels are separated by single commas)",
                    show_token(tok, list, e));
      if (*at == '-')
        return perr(r, err, AR_PARSE, line,
                    "negative label id '%s' (label ids are 0-based, >= 0)",
                    show_token(tok, at, e));
      return perr(r, err, AR_PARSE, line,
                  "non-numeric label id '%s' (labels are 'l1,l2,...' with "
                  "0-based integer ids)",
                  show_token(tok, at, e));
    }
    if (v >= r->lab_limit)
      return perr(r, err, AR_PARSE, line,
                  "label id %lld out of range [0, %lld) (%s)", (long long)v,
                  (long long)r->lab_limit, r->lab_why);
    AR_CHECK(add_label(r, scanning, row, (int32_t)v, line, err));
    if (p < e && *p == ',') {
      p++;
      continue;
    }
    if (p == e || is_blank(*p)) {
      *pp = p;
      return AR_OK;
    }
    if (*p == ':')
      return perr(r, err, AR_PARSE, line,
                  "the line starts with feature '%s' but labels come first "
                  "(a point without labels starts with a space)",
                  show_token(tok, list, e));
    return perr(r, err, AR_PARSE, line,
                "unexpected character '%s' in the label list (labels are "
                "'l1,l2,...' with 0-based integer ids)",
                show_token(tok, p, e));
  }
}

/* The features "id:value ..." from p to e. */
static ar_status parse_features(ar_reader *r, const char *p, const char *e, rowbuf *row,
                                int64_t line, ar_err *err) {
  const int libsvm = r->opts.format == AR_FMT_LIBSVM;
  char tok[48];
  for (;;) {
    while (p < e && is_blank(*p))
      p++;
    if (p == e)
      break;
    const char *at = p;
    int64_t id;
    int n = parse_uint(&p, e, ID_MAX, &id);
    if (n < 0)
      return perr(r, err, AR_PARSE, line,
                  "feature id in '%s' is too large (ids must be below 2^31)",
                  show_token(tok, at, e));
    if (n == 0) {
      if (*at == '-')
        return perr(r, err, AR_PARSE, line,
                    "negative feature id in '%s' (feature ids are %s)",
                    show_token(tok, at, e),
                    libsvm ? "1-based in libsvm files" : "0-based, >= 0");
      return perr(r, err, AR_PARSE, line,
                  "non-numeric feature id in '%s' (features are 'id:value')",
                  show_token(tok, at, e));
    }
    if (p == e || *p != ':')
      return perr(r, err, AR_PARSE, line,
                  "missing ':' in feature '%s' (features are 'id:value')",
                  show_token(tok, at, e));
    p++;
    if (libsvm) {
      if (id == 0)
        return perr(r, err, AR_PARSE, line,
                    "feature index 0 in '%s' (libsvm feature indices start at "
                    "1; for 0-based ids use format xc)",
                    show_token(tok, at, e));
      id -= 1;
      if (id >= r->feat_limit)
        return perr(r, err, AR_PARSE, line,
                    "feature index %lld out of range [1, %lld] (%s)",
                    (long long)id + 1, (long long)r->feat_limit, r->feat_why);
    } else if (id >= r->feat_limit) {
      return perr(r, err, AR_PARSE, line,
                  "feature id %lld out of range [0, %lld) (%s)", (long long)id,
                  (long long)r->feat_limit, r->feat_why);
    }
    float v;
    int st = parse_value(&p, e, &v);
    if (st != NUM_OK) {
      switch (st) {
      case NUM_NONFINITE:
        return perr(r, err, AR_PARSE, line,
                    "value of feature '%s' is not a finite float "
                    "(NaN, infinity and values beyond 3.4e38 are not allowed)",
                    show_token(tok, at, e));
      case NUM_TOOLONG:
        return perr(r, err, AR_PARSE, line,
                    "value of feature '%s' is longer than %d characters "
                    "(write it with fewer digits)",
                    show_token(tok, at, e), NUM_TOKEN_MAX - 1);
      default:
        return perr(r, err, AR_PARSE, line,
                    "non-numeric value in feature '%s' (values are decimal "
                    "numbers such as 1, 0.25 or 1e-3)",
                    show_token(tok, at, e));
      }
    }
    if (row->idx) {
      if (row->nnz == row->nnz_cap)
        return perr(r, err, AR_CORRUPT, line,
                    "row has more features than when the file was opened "
                    "(the file changed while it was being read; reopen it)");
      row->idx[row->nnz] = (int32_t)id;
      row->val[row->nnz] = v;
    } else if (id + 1 > r->stats.features && libsvm) {
      r->stats.features = id + 1;
    }
    row->nnz++;
  }
  return AR_OK;
}

static ar_status parse_row(ar_reader *r, int scanning, char *s, size_t len,
                           rowbuf *row, ar_err *err) {
  const int64_t line = r->lr.lineno;
  const char *p = s, *e = s + len;
  while (e > p && (is_blank(e[-1]) || e[-1] == '\r'))
    e--;
  row->nnz = 0;
  row->nlab = 0;
  row->set_active = 0;
  /* Labels first, unless the line starts with a blank. */
  if (p < e && !is_blank(*p))
    AR_CHECK(parse_labels(r, scanning, &p, e, row, line, err));
  return parse_features(r, p, e, row, line, err);
}

static int line_is_blank(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!is_blank(s[i]) && s[i] != '\r')
      return 0;
  return 1;
}

/* ---- header ---------------------------------------------------------------- */

static ar_status parse_header(ar_reader *r, const char *s, size_t len,
                              int64_t out[3], ar_err *err) {
  static const char *const what[3] = {"points", "features", "labels"};
  const char *p = s, *e = s + len;
  char tok[48];
  while (e > p && (is_blank(e[-1]) || e[-1] == '\r'))
    e--;
  for (int i = 0; i < 3; i++) {
    while (p < e && is_blank(*p))
      p++;
    const char *at = p;
    int n = parse_uint(&p, e, (int64_t)1 << 62, &out[i]);
    if (n <= 0 || (p < e && !is_blank(*p))) {
      const char *hint = "an xc file starts with 'points features labels', "
                         "e.g. '12920 500 983'; a file without it is format libsvm";
      if (n < 0)
        return perr(r, err, AR_PARSE, 1, "header %s count '%s' is too large (%s)",
                    what[i], show_token(tok, at, e), hint);
      if (at == e)
        return perr(r, err, AR_PARSE, 1, "header has no %s count (%s)", what[i],
                    hint);
      return perr(r, err, AR_PARSE, 1, "malformed header: %s count '%s' (%s)",
                  what[i], show_token(tok, at, e), hint);
    }
  }
  while (p < e && is_blank(*p))
    p++;
  if (p != e)
    return perr(r, err, AR_PARSE, 1,
                "header has more than three numbers, '%s' follows "
                "(an xc header is 'points features labels')",
                show_token(tok, p, e));
  if (out[1] < 1 || out[1] > ID_MAX)
    return perr(r, err, AR_PARSE, 1,
                "header declares %lld features (it must be between 1 and 2^31-1)",
                (long long)out[1]);
  if (out[2] < 1 || out[2] > ID_MAX)
    return perr(r, err, AR_PARSE, 1,
                "header declares %lld labels (it must be between 1 and 2^31-1)",
                (long long)out[2]);
  return AR_OK;
}

/* ---- open: the scan -------------------------------------------------------- */

/* The id limits and the reasons messages give for them: the xc header's
 * counts (read here from line 1), then the model's own, when smaller. */
static ar_status set_limits(ar_reader *r, int64_t header[3], ar_err *err) {
  ar_data_stats *st = &r->stats;
  r->feat_limit = ID_MAX;
  r->lab_limit = ID_MAX;
  r->feat_why = "ids must be below 2^31";
  r->lab_why = "ids must be below 2^31";
  if (r->opts.format == AR_FMT_XC) {
    char *line;
    size_t len;
    AR_CHECK(lr_get(r, 1, &line, &len, err));
    if (!line)
      return perr(r, err, AR_PARSE, 1,
                  "empty file (an xc file starts with a header "
                  "'points features labels')");
    AR_CHECK(parse_header(r, line, len, header, err));
    st->features = header[1];
    st->labels = header[2];
    r->feat_limit = header[1];
    r->lab_limit = header[2];
    r->feat_why = "the header declares this many features";
    r->lab_why = "the header declares this many labels";
  }
  if (r->opts.features > 0 && r->opts.features < r->feat_limit) {
    r->feat_limit = r->opts.features;
    r->feat_why = "the model's input has this many features; check "
                  "model.input and the data file";
  }
  if (r->opts.labels > 0 && r->opts.labels < r->lab_limit) {
    r->lab_limit = r->opts.labels;
    r->lab_why = "the output layer has this many labels; check its width "
                 "and the data file";
  }
  return AR_OK;
}

/* Adds a parsed row to the file's figures and to the window it falls in
 * (*win: features, labels, rows of the window so far). */
static void count_row(ar_reader *r, const rowbuf *row, int64_t *max_lab_id, int64_t win[3]) {
  ar_data_stats *st = &r->stats;
  st->points++;
  st->total_nnz += row->nnz;
  st->total_labels += row->nlab;
  if (row->nnz > st->max_nnz)
    st->max_nnz = row->nnz;
  if (row->nlab > st->max_labels)
    st->max_labels = row->nlab;
  if (row->nlab == 0)
    st->empty_label_rows++;
  for (int64_t i = 0; i < row->nlab; i++)
    if (row->lab[i] > *max_lab_id)
      *max_lab_id = row->lab[i];
  win[0] += row->nnz;
  win[1] += row->nlab;
  if (++win[2] == r->window) {
    if (win[0] > r->win_nnz_cap)
      r->win_nnz_cap = win[0];
    if (win[1] > r->win_lab_cap)
      r->win_lab_cap = win[1];
    win[0] = win[1] = win[2] = 0;
  }
}

/* Reads the whole file once: validates, fills stats and the window sizes. */
static ar_status scan(ar_reader *r, ar_err *err) {
  const int xc = r->opts.format == AR_FMT_XC;
  ar_data_stats *st = &r->stats;
  int64_t header[3] = {0, 0, 0};
  AR_CHECK(set_limits(r, header, err));
  int64_t blank_line = 0; /* first of a run of blank lines, 0 when none */
  int64_t max_lab_id = -1, win[3] = {0, 0, 0};
  for (;;) {
    char *line;
    size_t len;
    AR_CHECK(lr_get(r, 1, &line, &len, err));
    if (!line)
      break;
    if (line_is_blank(line, len)) {
      if (!blank_line)
        blank_line = r->lr.lineno;
      continue;
    }
    if (blank_line)
      return perr(r, err, AR_PARSE, blank_line,
                  "blank line inside the data (a point without labels is "
                  "written as a space followed by its features; remove the "
                  "blank line)");
    if (xc && st->points == header[0])
      return perr(r, err, AR_PARSE, r->lr.lineno,
                  "more points than the %lld the header declares (fix the "
                  "point count on line 1)",
                  (long long)header[0]);
    rowbuf row = {NULL, NULL, 0, r->scratch_lab, r->scratch_cap, 0, 0, 0};
    AR_CHECK(parse_row(r, 1, line, len, &row, err));
    count_row(r, &row, &max_lab_id, win);
  }
  if (win[0] > r->win_nnz_cap)
    r->win_nnz_cap = win[0];
  if (win[1] > r->win_lab_cap)
    r->win_lab_cap = win[1];
  if (xc && st->points != header[0])
    return perr(r, err, AR_PARSE, 1,
                "the header declares %lld points but the file has %lld data "
                "lines (fix the point count on line 1)",
                (long long)header[0], (long long)st->points);
  if (!xc) {
    /* features was raised to max id + 1 while parsing. */
    if (r->opts.features > st->features)
      st->features = r->opts.features;
    st->labels = max_lab_id + 1;
    if (r->opts.labels > st->labels)
      st->labels = r->opts.labels;
  }
  return AR_OK;
}

/* ---- epochs ---------------------------------------------------------------- */

static ar_status restart_epoch(ar_reader *r, uint64_t epoch, ar_err *err) {
  AR_CHECK(lr_restart(r, err));
  if (r->opts.format == AR_FMT_XC) {
    char *line;
    size_t len;
    AR_CHECK(lr_get(r, 0, &line, &len, err));
    if (!line)
      return ar_errf(err, AR_CORRUPT,
                     "%s: the file is empty now but was not when opened "
                     "(it changed while being read; reopen it)",
                     r->path);
  }
  r->epoch = epoch;
  r->rows_read = 0;
  r->next_window = 0;
  r->win_rows = 0;
  r->win_pos = 0;
  r->broken = AR_OK;
  return AR_OK;
}

static ar_status file_shrank(ar_reader *r, ar_err *err) {
  return perr(r, err, AR_CORRUPT, r->lr.lineno + 1,
              "the file ends before its %lld points (it changed since it was "
              "opened; reopen it)",
              (long long)r->stats.points);
}

/* Parses the next window of the file into the window arena and computes
 * its serving order. */
static ar_status load_window(ar_reader *r, ar_err *err) {
  int64_t left = r->stats.points - r->rows_read;
  int64_t n = left < r->window ? left : r->window;
  int64_t nz = 0, nl = 0;
  r->w_row[0] = 0;
  r->w_labp[0] = 0;
  for (int64_t i = 0; i < n; i++) {
    char *line;
    size_t len;
    AR_CHECK(lr_get(r, 0, &line, &len, err));
    if (!line || line_is_blank(line, len))
      return file_shrank(r, err);
    int64_t lab_room = r->win_lab_cap - nl;
    if (lab_room > r->stats.max_labels)
      lab_room = r->stats.max_labels;
    int64_t nnz_room = r->win_nnz_cap - nz;
    if (nnz_room > r->stats.max_nnz)
      nnz_room = r->stats.max_nnz;
    rowbuf row = {r->w_idx + nz, r->w_val + nz, nnz_room,
                  r->w_lab + nl, lab_room, 0, 0, 0};
    AR_CHECK(parse_row(r, 0, line, len, &row, err));
    nz += row.nnz;
    nl += row.nlab;
    r->w_row[i + 1] = nz;
    r->w_labp[i + 1] = nl;
    r->perm[i] = i;
  }
  if (r->window > 1) {
    /* Fisher-Yates with the window's own stream. */
    ar_rng g;
    ar_rng_seed3(&g, r->opts.seed, r->epoch, (uint64_t)r->next_window);
    for (int64_t i = n - 1; i > 0; i--) {
      int64_t j = (int64_t)ar_rng_below(&g, (uint64_t)i + 1);
      int64_t t = r->perm[i];
      r->perm[i] = r->perm[j];
      r->perm[j] = t;
    }
  }
  r->rows_read += n;
  r->next_window++;
  r->win_rows = n;
  r->win_pos = 0;
  return AR_OK;
}

/* ---- public API ------------------------------------------------------------ */

/* Opens r->path through the identity of r->opts.fs (a generated file
 * without following links) and makes the read buffer. */
static ar_status open_file(ar_reader *r, ar_err *err) {
  const ar_reader_opts o = r->opts;
  const char *path = r->path;
  int fd = -1;
  ar_status st = o.own ? ar_fs_open_own(o.fs, path, &fd, err)
                       : ar_fs_open_read(o.fs, path, &fd, err);
  if (st != AR_OK)
    return ar_err_wrap(err, "data file (check data.train / data.test)");
  r->lr.f = fdopen(fd, "rb");
  if (!r->lr.f) {
    close(fd);
    return ar_errf(err, AR_IO, "%s: cannot open: %s (check data.train / data.test)", path,
                   strerror(errno));
  }
  /* Our buffer is the only one: stdio would copy every byte once more. */
  setvbuf(r->lr.f, NULL, _IONBF, 0);
#ifdef POSIX_FADV_SEQUENTIAL
  posix_fadvise(fileno(r->lr.f), 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  r->lr.cap = READ_CHUNK < (size_t)o.max_line ? READ_CHUNK : (size_t)o.max_line;
  r->lr.buf = ar_malloc(r->lr.cap + 1);
  if (!r->lr.buf)
    return ar_errf(err, AR_NOMEM, "%s: out of memory for the read buffer", path);
  return AR_OK;
}

/* One shuffle window's arrays, sized by the scan; a window never needs to
 * be longer than the file. */
static ar_status alloc_window(ar_reader *r, ar_err *err) {
  const char *path = r->path;
  if (r->window > r->stats.points)
    r->window = r->stats.points > 0 ? r->stats.points : 1;
  if (r->window > (int64_t)(((size_t)-1) / 64))
    return ar_errf(err, AR_NOMEM, "%s: shuffle window of %lld rows is too large", path,
                   (long long)r->window);
  r->w_idx = ar_malloc((size_t)r->win_nnz_cap * sizeof *r->w_idx);
  r->w_val = ar_malloc((size_t)r->win_nnz_cap * sizeof *r->w_val);
  r->w_lab = ar_malloc((size_t)r->win_lab_cap * sizeof *r->w_lab);
  r->w_row = ar_malloc((size_t)(r->window + 1) * sizeof *r->w_row);
  r->w_labp = ar_malloc((size_t)(r->window + 1) * sizeof *r->w_labp);
  r->perm = ar_malloc((size_t)r->window * sizeof *r->perm);
  if (!r->w_idx || !r->w_val || !r->w_lab || !r->w_row || !r->w_labp || !r->perm)
    return ar_errf(err, AR_NOMEM,
                   "%s: out of memory for a shuffle window of %lld rows "
                   "(%lld features, %lld labels); lower data.shuffle_window",
                   path, (long long)r->window, (long long)r->win_nnz_cap,
                   (long long)r->win_lab_cap);
  return AR_OK;
}

ar_status ar_reader_open(const char *path, const ar_reader_opts *opts,
                         ar_reader **out, ar_err *err) {
  ar_reader_opts o = AR_READER_OPTS_INIT;
  ar_status st;
  if (!path || !out)
    return ar_errf(err, AR_INVALID, "ar_reader_open: path and out are required");
  *out = NULL;
  if (opts)
    o = *opts;
  if (o.format != AR_FMT_XC && o.format != AR_FMT_LIBSVM)
    return ar_errf(err, AR_INVALID, "%s: unknown data format %d (use xc or libsvm)",
                   path, (int)o.format);
  if (o.max_line == 0)
    o.max_line = AR_READER_MAX_LINE;
  if (o.shuffle_window < 0 || o.features < 0 || o.labels < 0 || o.max_line < 64)
    return ar_errf(err, AR_INVALID,
                   "%s: shuffle_window (%lld), features (%lld) and labels (%lld) "
                   "must not be negative, max_line (%lld) at least 64",
                   path, (long long)o.shuffle_window, (long long)o.features,
                   (long long)o.labels, (long long)o.max_line);

  ar_reader *r = ar_calloc(1, sizeof *r);
  if (!r)
    return ar_errf(err, AR_NOMEM, "%s: out of memory for a reader", path);
  r->opts = o;
  r->window = o.shuffle_window > 1 ? o.shuffle_window : 1;
  r->path = ar_strdup(path);
  if (!r->path) {
    st = ar_errf(err, AR_NOMEM, "%s: out of memory for a reader", path);
    goto fail;
  }
  st = open_file(r, err);
  if (st != AR_OK)
    goto fail;

  st = scan(r, err);
  ar_free(r->scratch_lab);
  r->scratch_lab = NULL;
  r->scratch_cap = 0;
  if (st != AR_OK)
    goto fail;

  st = alloc_window(r, err);
  if (st != AR_OK)
    goto fail;
  st = restart_epoch(r, 0, err);
  if (st != AR_OK)
    goto fail;
  *out = r;
  return AR_OK;

fail:
  ar_reader_close(r);
  return st;
}

void ar_reader_close(ar_reader *r) {
  if (!r)
    return;
  if (r->lr.f)
    fclose(r->lr.f);
  ar_free(r->lr.buf);
  ar_free(r->set);
  ar_free(r->scratch_lab);
  ar_free(r->w_idx);
  ar_free(r->w_val);
  ar_free(r->w_lab);
  ar_free(r->w_row);
  ar_free(r->w_labp);
  ar_free(r->perm);
  ar_free(r->path);
  ar_free(r);
}

const ar_data_stats *ar_reader_stats(const ar_reader *r) {
  return r ? &r->stats : NULL;
}

static ar_status check_usable(ar_reader *r, ar_err *err) {
  if (r->broken != AR_OK)
    return ar_errf(err, AR_STATE,
                   "%s: an earlier read failed (%s); call ar_reader_rewind "
                   "before reading again",
                   r->path, ar_status_name(r->broken));
  return AR_OK;
}

ar_status ar_reader_next(ar_reader *r, int64_t max_rows, ar_batch *b,
                         ar_err *err) {
  if (!r || !b)
    return ar_errf(err, AR_INVALID, "ar_reader_next: reader and batch are required");
  if (max_rows < 0 || max_rows > b->cap_rows)
    return ar_errf(err, AR_INVALID,
                   "%s: asked for %lld rows but the batch holds %lld "
                   "(initialise it with at least that many rows)",
                   r->path, (long long)max_rows, (long long)b->cap_rows);
  if ((r->stats.max_nnz > 0 && b->cap_nnz / r->stats.max_nnz < max_rows) ||
      (r->stats.max_labels > 0 && b->cap_labels / r->stats.max_labels < max_rows))
    return ar_errf(err, AR_INVALID,
                   "%s: batch capacity (%lld features, %lld labels) is below "
                   "%lld rows of the file's largest row (%lld features, %lld "
                   "labels); initialise it with the reader's stats",
                   r->path, (long long)b->cap_nnz, (long long)b->cap_labels,
                   (long long)max_rows, (long long)r->stats.max_nnz,
                   (long long)r->stats.max_labels);
  AR_CHECK(check_usable(r, err));

  int64_t rows = 0, nz = 0, nl = 0;
  b->rows = 0;
  b->row_ptr[0] = 0;
  b->lab_ptr[0] = 0;
  while (rows < max_rows) {
    if (r->win_pos == r->win_rows) {
      if (r->rows_read == r->stats.points)
        break;
      ar_status st = load_window(r, err);
      if (st != AR_OK) {
        r->broken = st;
        return st;
      }
    }
    int64_t k = r->perm[r->win_pos++];
    int64_t f0 = r->w_row[k], fn = r->w_row[k + 1] - f0;
    int64_t l0 = r->w_labp[k], ln = r->w_labp[k + 1] - l0;
    AR_ASSERT(nz + fn <= b->cap_nnz && nl + ln <= b->cap_labels);
    memcpy(b->idx + nz, r->w_idx + f0, (size_t)fn * sizeof *b->idx);
    memcpy(b->val + nz, r->w_val + f0, (size_t)fn * sizeof *b->val);
    memcpy(b->lab + nl, r->w_lab + l0, (size_t)ln * sizeof *b->lab);
    nz += fn;
    nl += ln;
    rows++;
    b->row_ptr[rows] = nz;
    b->lab_ptr[rows] = nl;
  }
  b->rows = rows;
  return AR_OK;
}

ar_status ar_reader_rewind(ar_reader *r, uint64_t epoch, ar_err *err) {
  if (!r)
    return ar_errf(err, AR_INVALID, "ar_reader_rewind: reader is required");
  ar_status st = restart_epoch(r, epoch, err);
  if (st != AR_OK)
    r->broken = st;
  return st;
}

ar_status ar_reader_skip(ar_reader *r, int64_t rows, ar_err *err) {
  if (!r)
    return ar_errf(err, AR_INVALID, "ar_reader_skip: reader is required");
  if (rows < 0)
    return ar_errf(err, AR_INVALID, "%s: cannot skip %lld rows", r->path,
                   (long long)rows);
  AR_CHECK(check_usable(r, err));
  ar_status st = AR_OK;
  while (rows > 0) {
    if (r->win_pos == r->win_rows) {
      int64_t left = r->stats.points - r->rows_read;
      if (left == 0)
        break; /* past the end: the epoch is over, as next would report */
      int64_t n = left < r->window ? left : r->window;
      if (rows >= n) {
        /* The whole window would be served: step over its lines. */
        for (int64_t i = 0; i < n; i++) {
          char *line;
          size_t len;
          st = lr_get(r, 0, &line, &len, err);
          if (st == AR_OK && !line)
            st = file_shrank(r, err);
          if (st != AR_OK)
            goto broken;
        }
        r->rows_read += n;
        r->next_window++;
        r->win_rows = r->win_pos = 0;
        rows -= n;
        continue;
      }
      st = load_window(r, err);
      if (st != AR_OK)
        goto broken;
    }
    int64_t take = r->win_rows - r->win_pos;
    if (take > rows)
      take = rows;
    r->win_pos += take;
    rows -= take;
  }
  return AR_OK;

broken:
  r->broken = st;
  return st;
}
