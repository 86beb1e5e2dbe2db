/*
 * report.html: one self-contained page (inline CSS and SVG, no scripts, no
 * fonts or images from anywhere) that opens offline.  Every string that
 * comes from a study file, a job or a run goes through esc().
 */
#define _GNU_SOURCE
#include "report.h"

#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accelrt/runtime.h"

static void esc(FILE *o, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", o); break;
    case '>': fputs("&gt;", o); break;
    case '&': fputs("&amp;", o); break;
    case '"': fputs("&quot;", o); break;
    case '\'': fputs("&#39;", o); break;
    default: fputc(*s, o);
    }
  }
}

static void fnum(FILE *o, double v) {
  char b[48];
  ar_fx_format(v, false, b, sizeof b);
  fputs(isfinite(v) ? b : "&ndash;", o);
}

/* A term's effect or interval end: a number, or on the log scale its
 * ratio ("3.52x"). */
static void fshown(FILE *o, const ar_fx_design *d, const ar_fx_term *t, double v) {
  if (d->scale != AR_FX_LOG) {
    fnum(o, v);
    return;
  }
  char b[48];
  ar_fx_format_ratio(isfinite(v) ? ar_fx_ratio(t, v) : NAN, b, sizeof b);
  fputs(isfinite(v) ? b : "&ndash;", o);
}

static const char *palette[] = {"#1f6feb", "#d9480f", "#2f9e44", "#9c36b5",
                                "#e8590c", "#0c8599", "#5c7cfa", "#c2255c"};

/* A linear axis: [lo, hi] widened to round ticks.  A log axis holds
 * ln(value) in lo and hi and labels its ticks with the values. */
typedef struct axis {
  double lo, hi, step;
  double p0, p1;      /* pixels for lo and hi */
  bool log;           /* lo, hi are ln of the values shown */
  const char *suffix; /* after each tick label ("x" for ratios) */
} axis;

static void axis_fit(axis *a, double lo, double hi, double p0, double p1) {
  if (!isfinite(lo) || !isfinite(hi)) {
    lo = 0;
    hi = 1;
  }
  if (hi - lo < 1e-12 * (fabs(lo) + fabs(hi) + 1e-300)) {
    double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
    lo -= pad;
    hi += pad;
  }
  double raw = (hi - lo) / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
  double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
  a->lo = floor(lo / step) * step;
  a->hi = ceil(hi / step) * step;
  a->step = step;
  a->p0 = p0;
  a->p1 = p1;
  a->log = false;
  a->suffix = "";
}

/* A log axis over [lnlo, lnhi] (natural logarithms), padded a little. */
static void axis_fit_log(axis *a, double lnlo, double lnhi, double p0, double p1) {
  if (!isfinite(lnlo) || !isfinite(lnhi)) {
    lnlo = 0;
    lnhi = log(10);
  }
  double pad = fmax(0.05 * (lnhi - lnlo), 0.02);
  a->lo = lnlo - pad;
  a->hi = lnhi + pad;
  a->step = 0;
  a->p0 = p0;
  a->p1 = p1;
  a->log = true;
  a->suffix = "";
}

static double ap(const axis *a, double v) {
  return a->p0 + (v - a->lo) / (a->hi - a->lo) * (a->p1 - a->p0);
}

/* One tick at pixel p labelled with v. */
static void tick(FILE *o, const axis *a, bool vertical, double at, double p, double v) {
  char shown[48];
  ar_fx_format(v, false, shown, sizeof shown);
  /* Ticks are round: "0.2000" reads as "0.2". */
  if (strchr(shown, '.') && !strchr(shown, 'e')) {
    size_t n = strlen(shown);
    while (n > 0 && shown[n - 1] == '0')
      shown[--n] = '\0';
    if (n > 0 && shown[n - 1] == '.')
      shown[--n] = '\0';
  }
  if (vertical)
    fprintf(o,
            "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='grid'/>"
            "<text x='%.1f' y='%.1f' class='tick' text-anchor='end'>%s%s</text>\n",
            at, at + 4000, p, p, at - 4, p + 4, shown, a->suffix);
  else
    fprintf(o,
            "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='grid'/>"
            "<text x='%.1f' y='%.1f' class='tick' text-anchor='middle'>%s%s</text>\n",
            p, p, at, at - 4000, p, at + 14, shown, a->suffix);
}

/* A log axis's ticks: 1, 2 and 5 times powers of ten when at least three
 * of them fall on it (only the powers when that makes more than 12), else
 * round values of a linear step, each at the position of its logarithm. */
static void log_ticks(FILE *o, const axis *a, bool vertical, double at) {
  static const double mant[] = {1, 2, 5};
  double vlo = exp(a->lo), vhi = exp(a->hi);
  int e0 = (int)floor(log10(vlo)), e1 = (int)ceil(log10(vhi)), n125 = 0;
  for (int e = e0; e <= e1; e++)
    for (int m = 0; m < 3; m++)
      n125 += mant[m] * pow(10, e) >= vlo && mant[m] * pow(10, e) <= vhi;
  if (n125 >= 3) {
    int nm = n125 > 12 ? 1 : 3; /* 1: only powers of ten */
    for (int e = e0; e <= e1; e++)
      for (int m = 0; m < nm; m++) {
        double v = mant[m] * pow(10, e);
        if (v >= vlo && v <= vhi)
          tick(o, a, vertical, at, ap(a, log(v)), v);
      }
    return;
  }
  double raw = (vhi - vlo) / 4, mag = pow(10, floor(log10(raw))), r = raw / mag;
  double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
  for (double v = ceil(vlo / step) * step; v <= vhi; v += step)
    if (v > 0)
      tick(o, a, vertical, at, ap(a, log(v)), v);
}

/* Tick labels along a vertical (y) or horizontal (x) axis. */
static void ticks(FILE *o, const axis *a, bool vertical, double at) {
  if (a->log) {
    log_ticks(o, a, vertical, at);
    return;
  }
  for (double v = a->lo; v <= a->hi + a->step * 1e-6; v += a->step)
    tick(o, a, vertical, at, ap(a, fabs(v) < a->step * 1e-9 ? 0 : v),
         fabs(v) < a->step * 1e-9 ? 0 : v);
}

/* ---- the effect bars ------------------------------------------------------------ */

/* Where a term's effect (or interval end) v goes on the effect axis: v
 * itself, or on the log scale ln of its ratio (ar_fx_ratio). */
static double bar_pos(const ar_fx_design *d, const ar_fx_term *t, double v) {
  return d->scale == AR_FX_LOG ? log(ar_fx_ratio(t, v)) : v;
}

static void effect_bars(FILE *o, const ar_fx_design *d, const ar_fx_result *r) {
  int n = 0;
  double lo = 0, hi = 0;
  bool logs = d->scale == AR_FX_LOG;
  for (int i = 0; i < r->n_terms; i++) {
    const ar_fx_term *t = &r->terms[i];
    if (t->alias_of != -1 || !isfinite(t->effect))
      continue;
    n++;
    double a = bar_pos(d, t, isfinite(t->lo) ? t->lo : t->effect),
           b = bar_pos(d, t, isfinite(t->hi) ? t->hi : t->effect);
    lo = a < lo ? a : lo;
    hi = b > hi ? b : hi;
  }
  if (!n) {
    fputs("<p class='note'>No effect could be estimated yet.</p>\n", o);
    return;
  }
  int row = 26, left = 300, width = 900, top = 10, h = top + row * n + 40;
  axis x;
  if (logs) {
    axis_fit_log(&x, lo, hi, left, width - 20);
    x.suffix = "x";
  } else {
    axis_fit(&x, lo, hi, left, width - 20);
  }
  fprintf(o, "<svg class='chart' viewBox='0 0 %d %d' width='%d' height='%d' role='img' "
             "aria-label='effects with intervals'>\n", width, h, width, h);
  fprintf(o, "<clipPath id='eb'><rect x='%d' y='0' width='%d' height='%d'/></clipPath>\n",
          left - 40, width - left + 40, h);
  fprintf(o, "<g clip-path='url(#eb)'>");
  ticks(o, &x, false, top + row * n + 4);
  fprintf(o, "</g><line x1='%.1f' x2='%.1f' y1='%d' y2='%d' class='zero'/>\n", ap(&x, 0),
          ap(&x, 0), top - 4, top + row * n + 4);
  char name[512], letters[32];
  int k = 0;
  for (int i = 0; i < r->n_terms; i++) {
    const ar_fx_term *t = &r->terms[i];
    if (t->alias_of != -1 || !isfinite(t->effect))
      continue;
    double y = top + row * k++;
    ar_fx_term_name(r, d, i, false, name, sizeof name);
    ar_fx_term_name(r, d, i, true, letters, sizeof letters);
    bool clear = isfinite(t->lo) && (t->lo > 0 || t->hi < 0);
    bool good = (t->effect > 0) == (d->better >= 0);
    const char *cls = !clear ? "bar-none" : good ? "bar-good" : "bar-bad";
    double x0 = ap(&x, 0), x1 = ap(&x, bar_pos(d, t, t->effect));
    double wlo = ap(&x, bar_pos(d, t, t->lo)), whi = ap(&x, bar_pos(d, t, t->hi));
    fprintf(o, "<text x='%d' y='%.1f' class='label' text-anchor='end'>", left - 8, y + 16);
    esc(o, letters);
    fputs("  ", o);
    esc(o, strlen(name) > 40 ? name + strlen(name) - 40 : name);
    fprintf(o, "</text><rect x='%.1f' y='%.1f' width='%.1f' height='16' class='%s'/>\n",
            x0 < x1 ? x0 : x1, y + 4, fabs(x1 - x0) < 1 ? 1 : fabs(x1 - x0), cls);
    if (isfinite(t->lo))
      fprintf(o,
              "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='whisker'/>"
              "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='whisker'/>"
              "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='whisker'/>\n",
              wlo, whi, y + 12, y + 12, wlo, wlo, y + 6, y + 18, whi, whi, y + 6, y + 18);
  }
  fprintf(o, "<text x='%d' y='%d' class='axis' text-anchor='middle'>%s ", (left + width) / 2,
          top + row * n + 36, logs ? "ratio (log scale): the factor by which it multiplies"
                                   : "effect on");
  esc(o, d->response);
  if (!logs) {
    fputs(d->unit && d->unit[0] ? " (" : "", o);
    esc(o, d->unit);
    fputs(d->unit && d->unit[0] ? ")" : "", o);
  }
  fputs("</text></svg>\n", o);
}

/* ---- interaction and main-effect plots -------------------------------------------- */

/* Means (with intervals) of factor fa's levels, one line per level of fb
 * (fb < 0: a main-effects plot). */
static void means_plot(FILE *o, const ar_fx_design *d, const ar_fx_result *r, int fa, int fb) {
  int W = 300, H = 220, L = 56, R = 12, T = 30, B = 46;
  int na = r->levels[fa], nb = fb >= 0 ? r->levels[fb] : 1;
  double m[64][16], hw[64][16], lo = INFINITY, hi = -INFINITY;
  int fix[AR_FX_MAX_FACTORS];
  for (int f = 0; f < r->k; f++)
    fix[f] = -1;
  for (int b = 0; b < nb && b < 16; b++)
    for (int a = 0; a < na && a < 64; a++) {
      fix[fa] = a;
      if (fb >= 0)
        fix[fb] = b;
      ar_fx_slice(r, fix, &m[a][b], &hw[a][b]);
      double h = isfinite(hw[a][b]) ? hw[a][b] : 0;
      if (isfinite(m[a][b])) {
        lo = fmin(lo, m[a][b] - h);
        hi = fmax(hi, m[a][b] + h);
      }
    }
  axis y;
  if (d->scale == AR_FX_LOG)
    axis_fit_log(&y, lo, hi, H - B, T);
  else
    axis_fit(&y, lo, hi, H - B, T);
  fprintf(o, "<svg class='small' viewBox='0 0 %d %d' width='%d' height='%d'>\n", W, H, W, H);
  if (d->scale == AR_FX_LOG)
    fprintf(o, "<text transform='rotate(-90)' x='%d' y='11' class='tick' "
               "text-anchor='middle'>log scale</text>\n", -(T + H - B) / 2);
  fprintf(o, "<text x='%d' y='16' class='title' text-anchor='middle'>", W / 2);
  esc(o, d->names[fa]);
  if (fb >= 0) {
    fputs(" &#215; ", o);
    esc(o, d->names[fb]);
  }
  fputs("</text>\n", o);
  fprintf(o, "<clipPath id='c%d_%d'><rect x='0' y='%d' width='%d' height='%d'/></clipPath>", fa,
          fb + 1, T - 6, W - R, H - B - T + 12);
  fprintf(o, "<g clip-path='url(#c%d_%d)'>", fa, fb + 1);
  ticks(o, &y, true, L);
  fputs("</g>", o);
  double step = (double)(W - L - R) / na;
  for (int a = 0; a < na && a < 64; a++) {
    fprintf(o, "<text x='%.1f' y='%d' class='tick' text-anchor='middle'>", L + step * (a + 0.5),
            H - B + 16);
    esc(o, d->level_names[fa][a]);
    fputs("</text>\n", o);
  }
  for (int b = 0; b < nb && b < 16; b++) {
    const char *col = palette[b % 8];
    double off = (nb > 1 ? (b - (nb - 1) / 2.0) * 5 : 0);
    fprintf(o, "<polyline fill='none' stroke='%s' stroke-width='2' points='", col);
    for (int a = 0; a < na && a < 64; a++)
      if (isfinite(m[a][b]))
        fprintf(o, "%.1f,%.1f ", L + step * (a + 0.5) + off, ap(&y, m[a][b]));
    fputs("'/>\n", o);
    for (int a = 0; a < na && a < 64; a++) {
      if (!isfinite(m[a][b]))
        continue;
      double x = L + step * (a + 0.5) + off;
      if (isfinite(hw[a][b]))
        fprintf(o, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='%s'/>", x, x,
                ap(&y, m[a][b] - hw[a][b]), ap(&y, m[a][b] + hw[a][b]), col);
      fprintf(o, "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'/>\n", x, ap(&y, m[a][b]), col);
    }
  }
  if (fb >= 0) {
    /* The legend: the line factor's name, then its levels in their colours. */
    fprintf(o, "<text x='%d' y='%d' class='legend'>", L - 40, H - 8);
    esc(o, strlen(d->names[fb]) > 28 ? d->names[fb] + strlen(d->names[fb]) - 28 : d->names[fb]);
    fputs(":", o);
    for (int b = 0; b < nb && b < 16; b++) {
      fprintf(o, " <tspan fill='%s'>&#9632; ", palette[b % 8]);
      esc(o, d->level_names[fb][b]);
      fputs("</tspan>", o);
    }
    fputs("</text>\n", o);
  }
  fputs("</svg>\n", o);
}

/* ---- timelines ------------------------------------------------------------------------ */

typedef struct series {
  int n, cap;
  double *x, *y, *z; /* z: jobs: the end of the queueing part */
} series;

static void push(series *s, double x, double y, double z) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    double *a = ar_realloc(s->x, (size_t)cap * sizeof *a);
    if (!a)
      return;
    s->x = a;
    double *b = ar_realloc(s->y, (size_t)cap * sizeof *b);
    if (!b)
      return;
    s->y = b;
    double *c = ar_realloc(s->z, (size_t)cap * sizeof *c);
    if (!c)
      return;
    s->z = c;
    s->cap = cap;
  }
  s->x[s->n] = x;
  s->y[s->n] = y;
  s->z[s->n++] = z;
}

/* What a run's metrics.jsonl shows over time: per-iteration seconds of a
 * distributed job, each job's queueing and running span in a jobs: file,
 * P@1 (or the training loss) over training seconds of a single job. */
static void load_series(const ar_study *s, const char *run, series *out) {
  char path[4200];
  snprintf(path, sizeof path, "%s/runs/%s/metrics.jsonl", s->out, run);
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char *line = NULL;
  size_t cap = 0;
  cJSON *m;
  while ((m = ar__study_json_next_line(f, &line, &cap))) {
    if (s->kind == STUDY_DIST) {
      if (ar__study_json_str_is(m, "kind", "iteration"))
        push(out, ar__study_json_num(m, "iteration"), ar__study_json_num(m, "iteration_s"),
             ar__study_json_true(m, "warmup") ? 1 : 0);
    } else if (s->kind == STUDY_JOBS) {
      if (ar__study_json_str_is(m, "event", "job")) {
        double a = ar__study_json_num(m, "arrival_s"), q = ar__study_json_num(m, "queue_s");
        push(out, a, a + ar__study_json_num(m, "jct_s"), a + q);
      }
    } else {
      double p = ar__study_json_num(m, "p_at_1");
      push(out, ar__study_json_num(m, "train_s"),
           isfinite(p) ? p : ar__study_json_num(m, "train_loss"), 0);
    }
    cJSON_Delete(m);
  }
  free(line);
  fclose(f);
}

/* The series of the first successful replicate of each cell (its run in
 * which[c]) and the extents the panels share: the last x (jobs: the last
 * end) and, but for jobs, the range of y.  Returns the cells with a series. */
static int load_timelines(const ar_study *s, const study_row *rows, int n_rows, series *ser,
                          const char **which, double *xmax, double *ylo, double *yhi) {
  int shown = 0;
  *xmax = 0;
  *ylo = INFINITY;
  *yhi = -INFINITY;
  for (int c = 0; c < s->n_cells; c++) {
    for (int i = 0; i < n_rows && !which[c]; i++)
      if (rows[i].cell == c && rows[i].status == RUN_OK)
        which[c] = rows[i].run;
    if (!which[c])
      continue;
    load_series(s, which[c], &ser[c]);
    for (int i = 0; i < ser[c].n; i++) {
      double xe = s->kind == STUDY_JOBS ? ser[c].y[i] : ser[c].x[i];
      *xmax = fmax(*xmax, isfinite(xe) ? xe : 0);
      if (s->kind != STUDY_JOBS && isfinite(ser[c].y[i])) {
        *ylo = fmin(*ylo, ser[c].y[i]);
        *yhi = fmax(*yhi, ser[c].y[i]);
      }
    }
    shown += ser[c].n > 0;
  }
  return shown;
}

/* The panel of cell c: its run's series z on the shared axes. */
static void timeline_panel(FILE *o, const ar_study *s, int c, const char *run, const series *z,
                           double xmax, double ylo, double yhi) {
  int W = 300, H = 170, L = 46, R = 10, T = 26, B = 28;
  fprintf(o, "<svg class='small' viewBox='0 0 %d %d' width='%d' height='%d'>\n", W, H, W, H);
  fprintf(o, "<text x='%d' y='14' class='title' text-anchor='middle'>", W / 2);
  esc(o, run);
  fputs(": ", o);
  for (int f = 0; f < s->k; f++) {
    esc(o, s->f[f].label[ar__study_level(s, c, f)]);
    fputs(f + 1 < s->k ? ", " : "", o);
  }
  fputs("</text>\n", o);
  axis x, y;
  axis_fit(&x, 0, xmax, L, W - R);
  if (s->kind == STUDY_JOBS)
    axis_fit(&y, 0, z->n, T, H - B);
  else
    axis_fit(&y, ylo, yhi, H - B, T);
  fprintf(o, "<clipPath id='t%d'><rect x='%d' y='%d' width='%d' height='%d'/></clipPath>", c,
          L - 40, T - 4, W - L + 40, H - B - T + 24);
  fprintf(o, "<g clip-path='url(#t%d)'>", c);
  ticks(o, &x, false, H - B);
  if (s->kind != STUDY_JOBS)
    ticks(o, &y, true, L);
  fputs("</g>\n", o);
  if (s->kind == STUDY_JOBS) {
    double bh = fmax(1, (H - B - T) / (double)(z->n + 1) - 1);
    for (int i = 0; i < z->n; i++) {
      double yy = ap(&y, i + 0.5);
      fprintf(o, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='queued'/>",
              ap(&x, z->x[i]), yy, fmax(0, ap(&x, z->z[i]) - ap(&x, z->x[i])), bh);
      fprintf(o, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='running'/>\n",
              ap(&x, z->z[i]), yy, fmax(0.5, ap(&x, z->y[i]) - ap(&x, z->z[i])), bh);
    }
  } else {
    fputs("<polyline fill='none' stroke='#1f6feb' stroke-width='1.5' points='", o);
    for (int i = 0; i < z->n; i++)
      if (isfinite(z->x[i]) && isfinite(z->y[i]))
        fprintf(o, "%.1f,%.1f ", ap(&x, z->x[i]), ap(&y, z->y[i]));
    fputs("'/>\n", o);
    for (int i = 0; i < z->n && z->n <= 400; i++)
      if (isfinite(z->x[i]) && isfinite(z->y[i]))
        fprintf(o, "<circle cx='%.1f' cy='%.1f' r='2.2' %s/>", ap(&x, z->x[i]), ap(&y, z->y[i]),
                z->z[i] > 0 ? "fill='white' stroke='#1f6feb'" : "fill='#1f6feb'");
    fputs("\n", o);
  }
  fputs("</svg>\n", o);
}

static void timelines(FILE *o, const ar_study *s, const study_row *rows, int n_rows) {
  series *ser = ar_calloc((size_t)s->n_cells, sizeof *ser);
  const char **which = ar_calloc((size_t)s->n_cells, sizeof *which);
  if (!ser || !which) {
    ar_free(ser);
    ar_free(which);
    return;
  }
  double xmax, ylo, yhi;
  int shown = load_timelines(s, rows, n_rows, ser, which, &xmax, &ylo, &yhi);
  const char *what = s->kind == STUDY_DIST   ? "seconds per iteration (hollow: warm-up iterations)"
                     : s->kind == STUDY_JOBS ? "each job from arrival: queued (light) then "
                                               "running (dark), seconds"
                                             : "P@1 (or training loss) at each evaluation over "
                                               "training seconds";
  fprintf(o, "<p class='note'>One run per cell (its first successful replicate): %s. The "
             "panels share their axes.</p>\n<div class='panels'>\n", what);
  if (!shown)
    fputs("<p class='note'>No run has metrics to show yet.</p>\n", o);
  for (int c = 0; c < s->n_cells; c++)
    if (ser[c].n)
      timeline_panel(o, s, c, which[c], &ser[c], xmax, ylo, yhi);
  fputs("</div>\n", o);
  for (int c = 0; c < s->n_cells; c++) {
    ar_free(ser[c].x);
    ar_free(ser[c].y);
    ar_free(ser[c].z);
  }
  ar_free(ser);
  ar_free(which);
}

/* ---- the page ---------------------------------------------------------------------------- */

static const char css[] =
    "body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;"
    "max-width:1180px;color:#1b1f24;padding:0 16px}"
    "h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px "
    "solid #d0d7de;padding-bottom:4px}"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d0d7de;padding:3px "
    "8px;text-align:left;vertical-align:top}th{background:#f6f8fa}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".meta{color:#57606a}.note{color:#57606a;max-width:900px}"
    ".v-additive{background:#e7f5ff}.v-synergistic{background:#d3f9d8}.v-antagonistic{"
    "background:#ffe3e3}.v-other{background:#f1f3f5}"
    ".badge{padding:1px 6px;border-radius:8px;font-weight:600;white-space:nowrap}"
    ".panels{display:flex;flex-wrap:wrap;gap:10px}"
    "svg text{font-family:Helvetica,Arial,sans-serif}"
    ".tick{font-size:10px;fill:#57606a}.label{font-size:12px;fill:#1b1f24}"
    ".axis{font-size:12px;fill:#1b1f24}.title{font-size:12px;font-weight:600;fill:#1b1f24}"
    ".legend{font-size:11px}"
    "line.grid{stroke:#eaeef2;stroke-width:1}.zero{stroke:#1b1f24;"
    "stroke-width:1.2}"
    ".whisker{stroke:#1b1f24;stroke-width:1.4}.bar-good{fill:#2f9e44}.bar-bad{fill:#e03131}"
    ".bar-none{fill:#adb5bd}.queued{fill:#a5d8ff}.running{fill:#1c7ed6}"
    "svg.small,svg.chart{background:#fff;border:1px solid #eaeef2}"
    ".missing{color:#c92a2a;font-weight:600}";

static void verdict_table(FILE *o, const ar_study *s, const ar_fx_design *d,
                          const ar_fx_result *r) {
  char name[512], letters[32], sentence[2048];
  bool logs = d->scale == AR_FX_LOG;
  fprintf(o, "<table><tr><th>term</th><th>factors</th><th>%s</th><th>95%% CI</th>"
             "<th>verdict</th><th>in words</th></tr>\n", logs ? "ratio" : "effect");
  int rows = 0;
  for (int i = 0; i < r->n_terms; i++) {
    const ar_fx_term *t = &r->terms[i];
    ar_fx_term_name(r, d, i, false, name, sizeof name);
    ar_fx_term_name(r, d, i, true, letters, sizeof letters);
    ar_fx_sentence(r, d, i, sentence, sizeof sentence);
    const char *v = ar_fx_verdict_name(t->verdict);
    const char *cls = t->verdict == AR_FX_ADDITIVE       ? "v-additive"
                      : t->verdict == AR_FX_SYNERGISTIC  ? "v-synergistic"
                      : t->verdict == AR_FX_ANTAGONISTIC ? "v-antagonistic"
                                                         : "v-other";
    fputs("<tr><td>", o);
    esc(o, letters);
    fputs("</td><td>", o);
    esc(o, name);
    fputs("</td><td class='n'>", o);
    fshown(o, d, t, t->effect);
    fputs("</td><td class='n'>", o);
    if (isfinite(t->lo)) {
      fshown(o, d, t, t->lo);
      fputs(" to ", o);
      fshown(o, d, t, t->hi);
    } else {
      fputs("&ndash;", o);
    }
    fprintf(o, "</td><td><span class='badge %s'>", cls);
    esc(o, t->order == 1 ? "main effect" : v);
    fputs("</span></td><td>", o);
    esc(o, sentence);
    fputs("</td></tr>\n", o);
    rows++;
  }
  fputs("</table>\n", o);
  if (!rows)
    fputs("<p class='note'>No two-level factors: there are no contrasts to show; see the "
          "level means below.</p>\n", o);
  (void)s;
}

/* A run that gave a response the log scale cannot take (<= 0). */
static bool not_analysable(const ar_study *s, const study_row *row) {
  return s->scale == AR_FX_LOG && row->status == RUN_OK && isfinite(row->y) && row->y <= 0;
}

static void design_table(FILE *o, const ar_study *s, const ar_fx_result *r,
                         const study_row *rows, int n_rows) {
  fputs("<table><tr><th>cell</th>", o);
  for (int f = 0; f < s->k; f++) {
    fprintf(o, "<th>%c: ", 'A' + f);
    esc(o, s->f[f].path);
    fputs("</th>", o);
  }
  bool logs = s->scale == AR_FX_LOG;
  fputs(logs ? "<th>runs analysed</th><th>geometric mean</th><th>sd of ln</th>"
               "<th>other runs</th></tr>\n"
             : "<th>runs ok</th><th>mean</th><th>sd</th><th>other runs</th></tr>\n",
        o);
  for (int c = 0; c < s->n_cells; c++) {
    if (!s->planned[c])
      continue;
    char cn[64];
    ar__study_cell_name(s, c, cn, sizeof cn);
    fputs("<tr><td>", o);
    esc(o, cn);
    fputs("</td>", o);
    for (int f = 0; f < s->k; f++) {
      fputs("<td>", o);
      esc(o, s->f[f].label[ar__study_level(s, c, f)]);
      fputs("</td>", o);
    }
    const ar_fx_cell *x = &r->cells[c];
    fprintf(o, "<td class='n%s'>%d of %d</td><td class='n'>", x->n ? "" : " missing", x->n,
            s->replicates);
    fnum(o, logs ? exp(x->mean) : x->mean);
    fputs("</td><td class='n'>", o);
    fnum(o, x->sd);
    fputs("</td><td>", o);
    int other = 0;
    for (int i = 0; i < n_rows; i++)
      if (rows[i].cell == c && (rows[i].status != RUN_OK || not_analysable(s, &rows[i]))) {
        fputs(other++ ? "<br>" : "", o);
        esc(o, rows[i].run);
        fputs(": ", o);
        if (not_analysable(s, &rows[i])) {
          char v[48];
          ar_fx_format(rows[i].y, false, v, sizeof v);
          fprintf(o, "not analysable on the log scale (%s ", v);
          esc(o, s->resp_name);
          fputs(" has no logarithm; left out)", o);
          continue;
        }
        esc(o, ar__study_status_name(rows[i].status));
        if (rows[i].note[0]) {
          fputs(" &ndash; ", o);
          esc(o, rows[i].note);
        }
      }
    if (!x->n && !other)
      fputs("<span class='missing'>not run yet</span>", o);
    fputs("</td></tr>\n", o);
  }
  fputs("</table>\n", o);
}

/* The title and the paragraphs on what was run and how it is analysed. */
static void report_head(FILE *o, const ar_study *s, const study_row *rows, int n_rows,
                        const ar_fx_result *r) {
  int ok = 0, failed = 0;
  for (int i = 0; i < n_rows; i++)
    ok += rows[i].status == RUN_OK && isfinite(rows[i].y), failed += rows[i].status != RUN_OK;
  fputs("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>\n"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n<title>Study ",
        o);
  esc(o, s->name);
  fprintf(o, "</title>\n<style>%s</style>\n</head><body>\n<h1>Study ", css);
  esc(o, s->name);
  if (s->base_factor >= 0) {
    fprintf(o, "</h1>\n<p class='meta'>Base jobs: the levels of factor %c <code>",
            'A' + s->base_factor);
    for (int l = 0; l < s->f[s->base_factor].n_levels; l++) {
      fputs(l ? ", " : "", o);
      esc(o, s->f[s->base_factor].file[l]);
    }
  } else {
    fputs("</h1>\n<p class='meta'>Base job <code>", o);
    esc(o, s->base);
  }
  fprintf(o, "</code> (%s). Response <b>", s->kind == STUDY_DIST   ? "distributed job over MPI"
                                          : s->kind == STUDY_JOBS ? "jobs: file through lanes"
                                                                  : "single job");
  esc(o, s->resp_name);
  fprintf(o, "</b>, %s is better. %d cells &#215; %d replicates = %d runs in random order "
             "(seed %llu): %d gave a response, %d did not, %d not run yet.",
          s->better > 0 ? "higher" : "lower", s->n_planned, s->replicates, s->n_runs,
          (unsigned long long)s->seed, ok, failed, s->n_runs - n_rows);
  if (s->scale == AR_FX_LOG)
    fprintf(o, " <b>Analysed on a log scale:</b> the fit is of ln(response), effects and "
               "their intervals are ratios, means are geometric%s.",
            r->n_nonpositive ? "; runs with a response of 0 or less have no logarithm and are "
                               "left out (see the design table)"
                             : "");
  if (r->df > 0) {
    char sd[48];
    ar_fx_format(sqrt(r->s2), false, sd, sizeof sd);
    fprintf(o, " Intervals: 95%%, Student t with %d degrees of freedom (t = %.3f) from the "
               "pooled replicate variance (s = %s%s).",
            r->df, r->t, sd, s->scale == AR_FX_LOG ? " on ln" : "");
  } else {
    fputs(" <b>No intervals:</b> with one result per cell there is no replicate variance; "
          "set replicates: 2 or more.",
          o);
  }
  fputs("</p>\n", o);
  if (r->n_missing)
    fprintf(o, "<p class='missing'>%d planned cell%s without any result (failed, skipped or "
               "not run): effects that need them are marked not estimable, the others assume "
               "no interaction of four or more factors. See the design table.</p>\n",
            r->n_missing, r->n_missing > 1 ? "s" : "");
  if (!s->n_gens)
    return;
  fputs("<p class='note'>A fraction: ", o);
  for (int g = 0; g < s->n_gens; g++) {
    esc(o, s->gens[g].text);
    fputs(g + 1 < s->n_gens ? ", " : "", o);
  }
  fputs(". Defining relation I", o);
  for (int w = 0; w < r->n_words; w++) {
    fputs(" = ", o);
    if (r->word_sign[w] < 0)
      fputs("&minus;", o);
    for (int f = 0; f < r->k; f++)
      if ((r->words[w] >> f) & 1u)
        fputc('A' + f, o);
  }
  fputs("; confounded terms are listed with the term they are estimated with.</p>\n", o);
}

/* The verdicts and the effect bars, explained for the scale. */
static void report_effects(FILE *o, const ar_study *s, const ar_fx_design *d,
                           const ar_fx_result *r) {
  if (s->scale == AR_FX_LOG) {
    fputs("<h2>Verdicts</h2>\n<p class='note'>On the log scale an interaction is "
          "<i>additive</i> (the factors act independently, multiplicatively) when the "
          "interval of its ratio contains 1; <i>synergistic</i> when, moving each factor to "
          "its better level (by its main effect), it multiplies the response further toward "
          "better than the lower-order effects multiply up to; <i>antagonistic</i> when it "
          "pulls it back.</p>\n",
          o);
    verdict_table(o, s, d, r);
    fputs("<h2>Ratios with 95% intervals (log scale)</h2>\n<p class='note'>A main effect's "
          "ratio: moving from the first level to the second multiplies the response by it "
          "(the geometric mean over the other factors' levels). An interaction's ratio: how "
          "many times more the change of all its factors together multiplies the response "
          "than the product of the lower-order effects (for two factors a and b: "
          "y(a2,b2)&#183;y(a1,b1) / (y(a2,b1)&#183;y(a1,b2))); 1 means independent. Green: "
          "clearly better, red: clearly worse, grey: interval contains 1.</p>\n",
          o);
  } else {
    fputs("<h2>Verdicts</h2>\n<p class='note'>An interaction is <i>additive</i> when its "
          "interval contains 0; <i>synergistic</i> when, at each factor's better level (by its "
          "main effect), it makes the response better than the lower-order effects add up to; "
          "<i>antagonistic</i> when it makes it worse.</p>\n",
          o);
    verdict_table(o, s, d, r);
    fputs("<h2>Effects with 95% intervals</h2>\n<p class='note'>Effect = mean at the second "
          "level minus mean at the first (for an interaction: half the difference of one "
          "factor's effect between the other's levels). Green: clearly better, red: clearly "
          "worse, grey: interval contains 0.</p>\n",
          o);
  }
  effect_bars(o, d, r);
}

/* The interaction plots of every pair of two-level factors, and each
 * factor's level means. */
static void report_plots(FILE *o, const ar_study *s, const ar_fx_design *d,
                         const ar_fx_result *r) {
  fputs("<h2>Interaction plots</h2>\n", o);
  if (s->scale == AR_FX_LOG)
    fputs("<p class='note'>Geometric means with 95% intervals on log y axes: parallel lines "
          "mean the factors act independently (their ratios multiply).</p>\n",
          o);
  fputs("<div class='panels'>\n", o);
  int pairs = 0;
  for (int a = 0; a < s->k; a++)
    for (int b = a + 1; b < s->k; b++)
      if (r->levels[a] == 2 && r->levels[b] == 2 && pairs < 66) {
        means_plot(o, d, r, a, b);
        pairs++;
      }
  fputs("</div>\n", o);
  if (!pairs)
    fputs("<p class='note'>Interaction plots need two factors of two levels.</p>\n", o);
  fputs(s->scale == AR_FX_LOG
            ? "<h2>Main effects (geometric level means with 95% intervals, log scale)</h2>\n"
              "<div class='panels'>\n"
            : "<h2>Main effects (level means with 95% intervals)</h2>\n<div class='panels'>\n",
        o);
  for (int f = 0; f < s->k; f++)
    means_plot(o, d, r, f, -1);
  fputs("</div>\n", o);
  for (int f = 0; f < s->k; f++)
    if (r->levels[f] > 2) {
      fputs("<p class='note'>", o);
      esc(o, s->f[f].path);
      fputs(" has more than two levels: its level means are shown here, and the other "
            "factors' effects and interactions within each of its levels below.</p>\n",
            o);
    }
}

/* ---- within each level of a factor ------------------------------------------ */

/* Split term t (or, t < 0, the level means) at each level: a point with
 * its interval per level on one axis, the no-effect line marked. */
static void split_forest(FILE *o, const ar_fx_design *d, const ar_fx_result *r,
                         const ar_fx_split *x, int t) {
  bool logs = d->scale == AR_FX_LOG, means = t < 0;
  int n = x->n_levels, row = 22, L = 190, W = 520, T = 24, H = T + row * n + 30;
  double e[64], lo[64], hi[64], a = means ? INFINITY : 0, b = means ? -INFINITY : 0;
  ar_fx_term rt = {.order = means ? 1 : x->terms[t].order};
  for (int l = 0; l < n && l < 64; l++) {
    int off = r->level_off[x->factor] + l;
    const ar_fx_term *in = means ? NULL : &x->terms[t].in[l];
    e[l] = means ? r->level_mean[off] : in->effect;
    lo[l] = means ? r->level_lo[off] : in->lo;
    hi[l] = means ? r->level_hi[off] : in->hi;
    /* On the log scale a term is drawn as ln of its ratio. */
    double k = logs && !means ? ldexp(1.0, rt.order - 1) : 1;
    e[l] *= k, lo[l] *= k, hi[l] *= k;
    if (isfinite(e[l])) {
      a = fmin(a, isfinite(lo[l]) ? lo[l] : e[l]);
      b = fmax(b, isfinite(hi[l]) ? hi[l] : e[l]);
    }
  }
  axis ax;
  if (logs)
    axis_fit_log(&ax, a, b, L, W - 16);
  else
    axis_fit(&ax, a, b, L, W - 16);
  ax.suffix = logs && !means ? "x" : "";
  fprintf(o, "<svg class='small' viewBox='0 0 %d %d' width='%d' height='%d'>\n", W, H, W, H);
  fprintf(o, "<text x='%d' y='15' class='title' text-anchor='middle'>", W / 2);
  char name[512];
  if (means)
    snprintf(name, sizeof name, "%s of %s", logs ? "geometric mean" : "mean", d->response);
  else
    ar_fx_split_term_name(x, d, t, name, sizeof name);
  esc(o, name);
  fputs(means ? "" : " within each level", o);
  fprintf(o, "</text>\n<clipPath id='sf%d_%d'><rect x='%d' y='0' width='%d' height='%d'/>"
             "</clipPath><g clip-path='url(#sf%d_%d)'>",
          x->factor, t + 1, L - 30, W - L + 30, H, x->factor, t + 1);
  ticks(o, &ax, false, T + row * n + 4);
  fputs("</g>", o);
  if (!means)
    fprintf(o, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%d' class='zero'/>\n", ap(&ax, 0),
            ap(&ax, 0), T - 4, T + row * n + 4);
  for (int l = 0; l < n && l < 64; l++) {
    double y = T + row * l + row / 2.0;
    fprintf(o, "<text x='%d' y='%.1f' class='label' text-anchor='end'>", L - 8, y + 4);
    const char *ln = d->level_names[x->factor][l];
    esc(o, strlen(ln) > 28 ? ln + strlen(ln) - 28 : ln);
    fputs("</text>", o);
    if (!isfinite(e[l]))
      continue;
    const char *col = palette[l % 8];
    if (isfinite(lo[l]))
      fprintf(o, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='%s' "
                 "stroke-width='2'/>", ap(&ax, lo[l]), ap(&ax, hi[l]), y, y, col);
    fprintf(o, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'/>\n", ap(&ax, e[l]), y, col);
  }
  fputs("</svg>\n", o);
}

/* The section of one split: the level means and every other term at
 * each level, with the verdict across the levels, and the interaction
 * plots of the two-level factors inside each level. */
static void report_split(FILE *o, const ar_study *s, const ar_fx_design *d,
                         const ar_fx_result *r, const ar_fx_split *x) {
  char text[8192];
  fputs("<h2>Within each level of ", o);
  esc(o, d->names[x->factor]);
  fputs("</h2>\n<p class='note'>The levels of this factor are not better or worse than "
        "each other; the question is whether the other factors act the same at each. Each "
        "level's cells are analysed alone (the other factors' main effects and interactions, "
        "with the whole study's pooled replicate variance), and each term is compared between "
        "every pair of levels; the pairs' intervals are Bonferroni-widened so that all of them "
        "together hold 95%. <i>same</i>: no pair's interval of the difference excludes ",
        o);
  fputs(d->scale == AR_FX_LOG ? "1x" : "0", o);
  fputs("; <i>differs</i>: some pair's does.</p>\n<p>", o);
  ar_fx_split_level_sentence(x, d, r, text, sizeof text);
  esc(o, text);
  fputs("</p>\n<table><tr><th>term</th>", o);
  for (int l = 0; l < x->n_levels; l++) {
    fputs("<th>", o);
    esc(o, d->level_names[x->factor][l]);
    fputs("</th>", o);
  }
  fputs("<th>across levels</th><th>in words</th></tr>\n", o);
  for (int t = 0; t < x->n_terms; t++) {
    const ar_fx_split_term *T = &x->terms[t];
    ar_fx_split_term_name(x, d, t, text, sizeof text);
    fputs("<tr><td>", o);
    esc(o, text);
    fputs("</td>", o);
    for (int l = 0; l < x->n_levels; l++) {
      fputs("<td class='n'>", o);
      fshown(o, d, &T->in[l], T->in[l].effect);
      if (isfinite(T->in[l].lo)) {
        fputs("<br>(", o);
        fshown(o, d, &T->in[l], T->in[l].lo);
        fputs(" to ", o);
        fshown(o, d, &T->in[l], T->in[l].hi);
        fputs(")", o);
      }
      fputs("</td>", o);
    }
    fprintf(o, "<td><span class='badge %s'>%s</span></td><td>",
            T->verdict == AR_FX_DIFFERS ? "v-antagonistic"
            : T->verdict == AR_FX_SAME  ? "v-additive"
                                        : "v-other",
            ar_fx_across_name(T->verdict));
    ar_fx_split_sentence(x, d, t, text, sizeof text);
    esc(o, text);
    fputs("</td></tr>\n", o);
  }
  fputs("</table>\n<div class='panels'>\n", o);
  split_forest(o, d, r, x, -1);
  for (int t = 0; t < x->n_terms; t++)
    split_forest(o, d, r, x, t);
  fputs("</div>\n", o);
  /* The interaction plots inside each level, side by side. */
  const ar_fx_design *sub = &x->sub;
  int shown = 0;
  for (int l = 0; l < x->n_levels; l++)
    for (int a = 0; a < sub->k; a++)
      for (int b = a + 1; b < sub->k; b++)
        if (sub->levels[a] == 2 && sub->levels[b] == 2 && shown < 48) {
          fputs(shown++ ? "" : "<div class='panels'>\n", o);
          fputs("<div><p class='note'>at ", o);
          esc(o, d->names[x->factor]);
          fputs(" = <b>", o);
          esc(o, d->level_names[x->factor][l]);
          fputs("</b></p>\n", o);
          means_plot(o, sub, x->within[l], a, b);
          fputs("</div>\n", o);
        }
  fputs(shown ? "</div>\n" : "", o);
  (void)s;
}

/* Every run in the order it ran, folded, and the page's end. */
static void report_runs(FILE *o, const study_row *rows, int n_rows) {
  fputs("<h2>Runs</h2>\n<details><summary>all runs in the order they ran</summary>\n<table>"
        "<tr><th>order</th><th>run</th><th>status</th><th>response</th><th>wall s</th>"
        "<th>note</th></tr>\n",
        o);
  for (int i = 0; i < n_rows; i++) {
    fprintf(o, "<tr><td class='n'>%d</td><td>", rows[i].order);
    esc(o, rows[i].run);
    fputs("</td><td>", o);
    esc(o, ar__study_status_name(rows[i].status));
    fputs("</td><td class='n'>", o);
    fnum(o, rows[i].y);
    fprintf(o, "</td><td class='n'>%.1f</td><td>", rows[i].wall_s);
    esc(o, rows[i].note);
    fputs("</td></tr>\n", o);
  }
  time_t now = time(NULL);
  char when[64];
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
  fprintf(o, "</table></details>\n<p class='meta'>Written by accelrt study at %s; the numbers "
             "are in effects.csv and runs.csv beside this file.</p>\n</body></html>\n",
          when);
}

ar_status ar__study_report(const ar_study *s, const study_row *rows, int n_rows,
                           const ar_fx_design *d, const ar_fx_result *r,
                           ar_fx_split *const *splits, const char *path, ar_err *err) {
  char *t = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&t, &len);
  if (!o)
    return ar_errf(err, AR_NOMEM, "out of memory writing the report");
  report_head(o, s, rows, n_rows, r);
  report_effects(o, s, d, r);
  report_plots(o, s, d, r);
  for (int f = 0; f < s->k; f++)
    if (splits[f])
      report_split(o, s, d, r, splits[f]);
  fputs("<h2>Timeline of one run per cell</h2>\n", o);
  timelines(o, s, rows, n_rows);
  fputs("<h2>Design</h2>\n", o);
  design_table(o, s, r, rows, n_rows);
  report_runs(o, rows, n_rows);
  fclose(o);
  ar_status st = t ? ar_write_file_atomic(path, t, len, err)
                   : ar_errf(err, AR_NOMEM, "out of memory writing the report");
  free(t);
  return st;
}
