/*
 * Schedule files: a small line-oriented text format, so a schedule can be
 * computed once, inspected, edited by hand and replayed.
 *
 *   # comments and blank lines anywhere
 *   order tac
 *   <transfer id> <name> <channel> <priority>
 *
 * Numbers are not stored: they follow from the priorities.
 */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "commsched_impl.h"

/* Transfer ids in a file stay below this, so a typo cannot make the id
 * index allocate gigabytes. */
#define AR__CS_MAX_FILE_ID (1u << 24)

ar_status ar_commsched_schedule_write(const ar_commsched_schedule *s,
                                      const char *path, ar_err *err) {
  FILE *f = fopen(path, "w");
  if (!f)
    return ar_errf(err, AR_IO, "%s: cannot open for writing: %s", path,
                   strerror(errno));
  fprintf(f, "# accelrt commsched schedule: %zu listed transfers\n", s->n);
  fprintf(f, "order %s\n", ar_commsched_order_name(s->order));
  fprintf(f, "# transfer name channel priority\n");
  for (size_t i = 0; i < s->n; i++)
    fprintf(f, "%u %s %u %u\n", s->e[i].transfer, s->e[i].name,
            s->e[i].channel, s->e[i].priority);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return ar_errf(err, AR_IO, "%s: write failed (disk full?)", path);
  return AR_OK;
}

static int parse_u32(const char *tok, uint32_t limit, uint32_t *out) {
  if (!tok || *tok < '0' || *tok > '9')
    return 0;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(tok, &end, 10);
  if (errno || *end || v >= limit)
    return 0;
  *out = (uint32_t)v;
  return 1;
}

typedef struct {
  size_t n, cap;
  uint32_t *id, *chan, *prio;
  char **name;
  size_t *line;
} rows;

static void rows_free(rows *r) {
  for (size_t i = 0; i < r->n; i++)
    ar_free(r->name[i]);
  ar_free(r->id);
  ar_free(r->chan);
  ar_free(r->prio);
  ar_free(r->name);
  ar_free(r->line);
}

static int rows_push(rows *r) {
  if (r->n < r->cap)
    return 1;
  size_t c = r->cap ? 2 * r->cap : 64;
  void *a = ar_realloc(r->id, c * sizeof *r->id);
  if (!a)
    return 0;
  r->id = a;
  if (!(a = ar_realloc(r->chan, c * sizeof *r->chan)))
    return 0;
  r->chan = a;
  if (!(a = ar_realloc(r->prio, c * sizeof *r->prio)))
    return 0;
  r->prio = a;
  if (!(a = ar_realloc(r->name, c * sizeof *r->name)))
    return 0;
  r->name = a;
  if (!(a = ar_realloc(r->line, c * sizeof *r->line)))
    return 0;
  r->line = a;
  r->cap = c;
  return 1;
}

typedef struct {
  uint32_t key;
  size_t row;
} id_row;

static int cmp_id_row(const void *a, const void *b) {
  const id_row *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->row < y->row ? -1 : x->row > y->row;
}

static int cmp_name_row(const void *a, const void *b, const rows *r) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  int c = strcmp(r->name[x], r->name[y]);
  return c ? c : (x < y ? -1 : x > y);
}

/* Sorting names with a context argument, portably: a plain insertion-free
 * merge sort over row indices. */
static void sort_names(size_t *idx, size_t *tmp, size_t n, const rows *r) {
  if (n < 2)
    return;
  size_t h = n / 2;
  sort_names(idx, tmp, h, r);
  sort_names(idx + h, tmp, n - h, r);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n)
    tmp[k++] = cmp_name_row(&idx[j], &idx[i], r) < 0 ? idx[j++] : idx[i++];
  while (i < h)
    tmp[k++] = idx[i++];
  while (j < n)
    tmp[k++] = idx[j++];
  memcpy(idx, tmp, n * sizeof *idx);
}

/* Duplicate transfer ids and names, reported at the later line. */
static ar_status check_dups(const char *path, const rows *r, ar_err *err) {
  ar_status st = AR_OK;
  id_row *ir = ar_malloc((r->n + 1) * sizeof *ir);
  size_t *idx = ar_malloc((r->n + 1) * sizeof *idx);
  size_t *tmp = ar_malloc((r->n + 1) * sizeof *tmp);
  if (!ir || !idx || !tmp) {
    st = ar_errf(err, AR_NOMEM, "%s: out of memory", path);
    goto done;
  }
  for (size_t i = 0; i < r->n; i++) {
    ir[i].key = r->id[i];
    ir[i].row = i;
    idx[i] = i;
  }
  qsort(ir, r->n, sizeof *ir, cmp_id_row);
  for (size_t i = 1; i < r->n; i++)
    if (ir[i].key == ir[i - 1].key) {
      st = ar_errf(err, AR_PARSE,
                   "%s:%zu: error: transfer %u listed again (first on line "
                   "%zu); list each transfer once",
                   path, r->line[ir[i].row], ir[i].key, r->line[ir[i - 1].row]);
      goto done;
    }
  sort_names(idx, tmp, r->n, r);
  for (size_t i = 1; i < r->n; i++)
    if (strcmp(r->name[idx[i]], r->name[idx[i - 1]]) == 0) {
      st = ar_errf(err, AR_PARSE,
                   "%s:%zu: error: transfer name '%s' used again (first on "
                   "line %zu)",
                   path, r->line[idx[i]], r->name[idx[i]], r->line[idx[i - 1]]);
      goto done;
    }
done:
  ar_free(tmp);
  ar_free(idx);
  ar_free(ir);
  return st;
}

/* One line of a schedule file, split into its fields (after '#' nothing
 * counts): an "order" line sets *order, a transfer line joins r.  Blank
 * lines do nothing. */
static ar_status read_line(const char *path, size_t lineno, char *buf, rows *r,
                           ar_commsched_order *order, int *have_order, ar_err *err) {
  char *hash = strchr(buf, '#');
  if (hash)
    *hash = '\0';
  char *tok[5];
  int nt = 0;
  for (char *save = NULL, *t = strtok_r(buf, " \t\r\n", &save); t;
       t = strtok_r(NULL, " \t\r\n", &save))
    if (nt < 5)
      tok[nt++] = t;
    else
      nt++;
  if (nt == 0)
    return AR_OK;
  if (strcmp(tok[0], "order") == 0) {
    ar_commsched_order o;
    if (nt != 2 || ar_commsched_order_parse(tok[1], &o, NULL) != AR_OK)
      return ar_errf(err, AR_PARSE, "%s:%zu: error: expected 'order none|random|tic|tac'",
                     path, lineno);
    if (*have_order)
      return ar_errf(err, AR_PARSE, "%s:%zu: error: second 'order' line", path, lineno);
    *have_order = 1;
    *order = o;
    return AR_OK;
  }
  if (nt != 4)
    return ar_errf(err, AR_PARSE,
                   "%s:%zu: error: expected 4 fields 'transfer name channel priority', "
                   "found %d",
                   path, lineno, nt);
  uint32_t id, ch, pr;
  const char *what = NULL;
  if (!parse_u32(tok[0], AR__CS_MAX_FILE_ID, &id))
    what = "transfer id (an integer below 16777216)";
  else if (!parse_u32(tok[2], UINT32_MAX, &ch))
    what = "channel (a non-negative integer)";
  else if (!parse_u32(tok[3], UINT32_MAX, &pr))
    what = "priority (a non-negative integer)";
  if (what)
    return ar_errf(err, AR_PARSE, "%s:%zu: error: bad %s", path, lineno, what);
  if (!rows_push(r) || !(r->name[r->n] = ar_strdup(tok[1])))
    return ar_errf(err, AR_NOMEM, "%s: out of memory", path);
  r->id[r->n] = id;
  r->chan[r->n] = ch;
  r->prio[r->n] = pr;
  r->line[r->n] = lineno;
  r->n++;
  return AR_OK;
}

ar_status ar_commsched_schedule_read(const char *path,
                                     ar_commsched_schedule **out,
                                     ar_err *err) {
  FILE *f = fopen(path, "r");
  if (!f)
    return ar_errf(err, AR_IO, "%s: cannot open schedule: %s", path,
                   strerror(errno));
  rows r = {0};
  ar_commsched_order order = AR_COMMSCHED_ORDER_TAC;
  int have_order = 0;
  ar_status st = AR_OK;
  char buf[1024];
  size_t lineno = 0;
  while (st == AR_OK && fgets(buf, sizeof buf, f)) {
    lineno++;
    size_t len = strlen(buf);
    if (len == sizeof buf - 1 && buf[len - 1] != '\n' && !feof(f))
      st = ar_errf(err, AR_PARSE, "%s:%zu: error: line longer than %zu bytes", path, lineno,
                   sizeof buf - 2);
    else
      st = read_line(path, lineno, buf, &r, &order, &have_order, err);
  }
  if (st == AR_OK && ferror(f))
    st = ar_errf(err, AR_IO, "%s: read error", path);
  if (st == AR_OK)
    st = check_dups(path, &r, err);
  if (st == AR_OK) {
    ar_commsched_schedule *s = NULL;
    st = ar__cs_schedule_build(order, r.n, r.id, (const char *const *)r.name,
                               r.chan, r.prio, &s, err);
    if (st == AR_OK)
      *out = s;
  }
  fclose(f);
  rows_free(&r);
  return st;
}
