/*
 * What a study measures: the responses and eval.json numbers a study file
 * may name, its response: key, and reading the response of a finished run
 * (see response.h).
 */
#define _GNU_SOURCE
#include "response.h"

#include "json.h"
#include "study_file.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the names ----------------------------------------------------------- */

typedef struct study_response {
  const char *name; /* as the study file names it */
  ar_study_response_kind kind;
  int better;       /* +1 higher is better, -1 lower, 0 the file says */
  const char *unit;
} study_response;

typedef struct study_eval_key {
  const char *key;  /* a number accelrt eval writes to eval.json */
  int better;
  const char *unit;
} study_eval_key;

static const study_response responses[] = {
    {"samples_per_s", AR_RESP_SAMPLES_PER_S, 1, "samples/s"},
    {"iteration_s", AR_RESP_ITERATION_S, -1, "s"},
    {"makespan_s", AR_RESP_MAKESPAN_S, -1, "s"},
    {"jct_s", AR_RESP_JCT_S, -1, "s"},
    {"time_to_p1", AR_RESP_TIME_TO_P1, -1, "s"},
    {"p_at_1", AR_RESP_P_AT_1, 1, "%"},
    {"wall_s", AR_RESP_WALL_S, -1, "s"},
    {"key", AR_RESP_KEY, 0, ""},
    {"eval", AR_RESP_EVAL_KEY, 0, ""},
    {"inference_samples_per_s", AR_RESP_INFERENCE_SAMPLES_PER_S, 1, "samples/s"},
    {"inference_p_at_1", AR_RESP_INFERENCE_P_AT_1, 1, "%"},
};

/* The numbers of eval.json a response may name ({eval: KEY}); the lsh_
 * ones are there only when the output layer ran sampled. */
static const study_eval_key eval_keys[] = {
    {"p_at_1", 1, "%"},
    {"p_at_3", 1, "%"},
    {"p_at_5", 1, "%"},
    {"samples_per_s", 1, "samples/s"},
    {"loss", -1, ""},
    {"lsh_p_at_1", 1, "%"},
    {"lsh_p_at_3", 1, "%"},
    {"lsh_p_at_5", 1, "%"},
    {"lsh_samples_per_s", 1, "samples/s"},
    {"lsh_candidates_mean", -1, "candidates"},
    {"lsh_recall_top1", 1, ""},
    {"lsh_recall_labels", 1, ""},
};

static const study_response *response_named(const ar_ynode *n) {
  for (size_t i = 0; i < sizeof responses / sizeof responses[0]; i++)
    if (ar_ynode_is(n, responses[i].name))
      return &responses[i];
  return NULL;
}

static const study_eval_key *eval_key_named(const ar_ynode *n) {
  for (size_t i = 0; i < sizeof eval_keys / sizeof eval_keys[0]; i++)
    if (ar_ynode_is(n, eval_keys[i].key))
      return &eval_keys[i];
  return NULL;
}

bool ar__study_resp_from_eval(ar_study_response_kind k) {
  return k == AR_RESP_EVAL_KEY || k == AR_RESP_INFERENCE_SAMPLES_PER_S ||
         k == AR_RESP_INFERENCE_P_AT_1;
}

/* ---- the study file's response: key -------------------------------------- */

/* The argument of {time_to_p1: P}, {key: K} or {eval: K}: sets what it
 * decides and the column name in buf.  false after reporting. */
static bool response_arg(study_diags *c, ar_study *s, const ar_ynode *arg, char *buf,
                         size_t cap) {
  char q[128];
  if (s->resp == AR_RESP_TIME_TO_P1) {
    if (!ar__study_scalar(c, arg, "response.time_to_p1"))
      return false;
    char *end = NULL;
    double x = strtod(arg->text, &end);
    if (!arg->len || *end || !(x > 0 && x <= 100)) {
      ar__study_diag(c, arg->line, arg->col, "response.time_to_p1",
                     "expected P@1 in percent, above 0 and at most 100, got '%s'",
                     ar_ynode_quote(arg, q, sizeof q));
      return false;
    }
    s->resp_x = x;
    snprintf(buf, cap, "time_to_p1_%g", x);
    return true;
  }
  if (s->resp == AR_RESP_KEY) {
    if (!ar__study_scalar(c, arg, "response.key"))
      return false;
    bool ok = arg->len > 0 && arg->len < 100;
    for (size_t j = 0; j < arg->len && ok; j++)
      ok = (arg->text[j] >= 'a' && arg->text[j] <= 'z') || arg->text[j] == '_' ||
           (arg->text[j] >= '0' && arg->text[j] <= '9');
    if (!ok) {
      ar__study_diag(c, arg->line, arg->col, "response.key",
                     "expected a key of summary.json (lower case, digits, _), got '%s'",
                     ar_ynode_quote(arg, q, sizeof q));
      return false;
    }
    s->resp_key = ar__study_strdup(c, arg->text);
    snprintf(buf, cap, "%s", arg->text);
    return true;
  }
  /* AR_RESP_EVAL_KEY */
  if (!ar__study_scalar(c, arg, "response.eval"))
    return false;
  const study_eval_key *k = eval_key_named(arg);
  if (!k) {
    ar__study_diag(c, arg->line, arg->col, "response.eval",
                   "'%s' is not a number accelrt eval writes; one of p_at_1, p_at_3, p_at_5, "
                   "samples_per_s, loss, and for a sampled output layer lsh_p_at_1, "
                   "lsh_p_at_3, lsh_p_at_5, lsh_samples_per_s, lsh_candidates_mean, "
                   "lsh_recall_top1, lsh_recall_labels",
                   ar_ynode_quote(arg, q, sizeof q));
    return false;
  }
  s->resp_key = ar__study_strdup(c, arg->text);
  s->better = k->better;
  s->unit = k->unit;
  snprintf(buf, cap, "eval.%s", k->key);
  return true;
}

void ar__study_parse_response(study_diags *c, ar_study *s, const ar_ynode *n) {
  const ar_ynode *name = n, *arg = NULL;
  if (n->kind == AR_YNODE_MAP && n->n == 1) {
    name = n->keys[0];
    arg = n->vals[0];
  } else if (n->kind != AR_YNODE_SCALAR) {
    ar__study_diag(c, n->line, n->col, "response",
                   "expected a response name or {time_to_p1: P}, {key: SUMMARY_KEY} or "
                   "{eval: EVAL_KEY}");
    return;
  }
  s->resp_line = arg ? arg->line : name->line;
  s->resp_col = arg ? arg->col : name->col;
  const study_response *r = response_named(name);
  if (!r) {
    char q[128];
    ar__study_diag(c, name->line, name->col, "response",
                   "unknown response '%s'; one of samples_per_s, iteration_s, makespan_s, "
                   "jct_s, p_at_1, wall_s, {time_to_p1: P@1 in percent}, {key: SUMMARY_KEY}, "
                   "and with eval: inference_samples_per_s, inference_p_at_1, "
                   "{eval: EVAL_KEY}",
                   ar_ynode_quote(name, q, sizeof q));
    return;
  }
  s->resp = r->kind;
  s->better = r->better;
  s->unit = r->unit;
  bool needs = s->resp == AR_RESP_TIME_TO_P1 || s->resp == AR_RESP_KEY ||
               s->resp == AR_RESP_EVAL_KEY;
  if (needs != (arg != NULL)) {
    ar__study_diag(c, name->line, name->col, "response",
                   needs ? "%s needs an argument: {time_to_p1: 50} (P@1 in percent, as "
                           "summary.json has it), {key: SUMMARY_KEY} or {eval: EVAL_KEY}"
                         : "%s takes no argument",
                   r->name);
    return;
  }
  char buf[160]; /* the column name in runs.csv */
  snprintf(buf, sizeof buf, "%s", r->name);
  if (!arg || response_arg(c, s, arg, buf, sizeof buf))
    s->resp_name = ar__study_strdup(c, buf);
}

/* ---- reading one --------------------------------------------------------- */

/* Sets the row's status and its note from a format. */
static void set_result(study_row *r, run_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_result(study_row *r, run_status status, const char *fmt, ...) {
  char note[4400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(note, sizeof note, fmt, ap);
  va_end(ap);
  r->status = status;
  r->note = ar_strdup(note);
}

/* The summary.json key the response is, for the kind of base job; NULL
 * for the responses read elsewhere and for iteration_s of a job that is not
 * distributed (train_s / iterations). */
static const char *summary_key(const ar_study *s) {
  bool dist = s->kind == STUDY_DIST, jobs = s->kind == STUDY_JOBS;
  switch (s->resp) {
  case AR_RESP_SAMPLES_PER_S: return "samples_per_s";
  case AR_RESP_ITERATION_S: return dist ? "iteration_s_median" : NULL;
  case AR_RESP_MAKESPAN_S: return dist ? "makespan_s_median" : "makespan_s";
  case AR_RESP_JCT_S: return "avg_jct_s";
  case AR_RESP_P_AT_1: return "p_at_1";
  case AR_RESP_WALL_S: return jobs ? "makespan_s" : "wall_s";
  case AR_RESP_KEY: return s->resp_key;
  default: return NULL;
  }
}

/* An eval.json response: *y, the key read in *key, and in *sampled whether
 * the output layer ran LSH-sampled.  false (r set) when the run wrote no
 * eval.json. */
static bool eval_response(const ar_study *s, const char *dir, study_row *r, double *y,
                          const char **key, bool *sampled) {
  char path[4200];
  snprintf(path, sizeof path, "%s/eval.json", dir);
  cJSON *ev = ar__study_json_file(path);
  if (!ev) {
    set_result(r, RUN_NO_RESPONSE, "run %s wrote no %seval.json in %s (see its log.txt)",
               r->run, access(path, F_OK) == 0 ? "readable " : "", dir);
    return false;
  }
  /* eval.json has the lsh_ numbers exactly when the output layer ran
   * sampled: that is then the job's own inference path. */
  *sampled = !isnan(ar__study_json_num(ev, "lsh_samples_per_s"));
  if (s->resp == AR_RESP_EVAL_KEY)
    *key = s->resp_key;
  else if (s->resp == AR_RESP_INFERENCE_SAMPLES_PER_S)
    *key = *sampled ? "lsh_samples_per_s" : "samples_per_s";
  else
    *key = *sampled ? "lsh_p_at_1" : "p_at_1";
  *y = ar__study_json_num(ev, *key);
  cJSON_Delete(ev);
  return true;
}

/* time_to_p1: the training seconds of the first evaluation in
 * metrics.jsonl whose P@1 reached the threshold.  false (r set) when none
 * did. */
static bool time_to_p1(const ar_study *s, const char *dir, study_row *r, double *y) {
  char path[4200];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *f = fopen(path, "r");
  char *line = NULL;
  size_t cap = 0;
  double best = NAN, best_t = NAN;
  cJSON *m;
  while (f && isnan(*y) && (m = ar__study_json_next_line(f, &line, &cap))) {
    double p = ar__study_json_num(m, "p_at_1"), t = ar__study_json_num(m, "train_s");
    cJSON_Delete(m);
    if (isnan(p))
      continue;
    if (p >= s->resp_x)
      *y = t;
    if (isnan(best) || p > best) {
      best = p;
      best_t = t;
    }
  }
  free(line);
  if (f)
    fclose(f);
  if (!isnan(*y))
    return true;
  set_result(r, RUN_NOT_REACHED,
             "run %s never reached P@1 %g (best %.2f at %.1f s): train longer or lower the "
             "threshold",
             r->run, s->resp_x, best, best_t);
  return false;
}

void ar__study_read_response(const ar_study *s, const char *dir, study_row *r) {
  char path[4200];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  cJSON *sum = ar__study_json_file(path);
  if (!sum) {
    if (access(path, F_OK) == 0)
      set_result(r, RUN_NO_RESPONSE, "run %s wrote a summary.json in %s that is not JSON",
                 r->run, dir);
    else
      set_result(r, RUN_NO_RESPONSE, "run %s wrote no summary.json in %s", r->run, dir);
    return;
  }
  double y = NAN;
  const char *key = summary_key(s), *file = "summary.json";
  bool sampled = false, have = true;
  if (ar__study_resp_from_eval(s->resp)) {
    file = "eval.json";
    have = eval_response(s, dir, r, &y, &key, &sampled);
  } else if (s->resp == AR_RESP_TIME_TO_P1) {
    have = time_to_p1(s, dir, r, &y);
  } else if (key) {
    y = ar__study_json_num(sum, key);
  } else { /* iteration_s of a job that is not distributed */
    y = ar__study_json_num(sum, "train_s") / ar__study_json_num(sum, "iterations");
  }
  bool interrupted = ar__study_json_true(sum, "interrupted");
  cJSON_Delete(sum);
  if (!have)
    return;
  if (interrupted) {
    set_result(r, RUN_FAILED, "run %s was interrupted (its summary says so)", r->run);
  } else if (!isfinite(y)) {
    bool lsh = ar__study_resp_from_eval(s->resp) && !strncmp(key, "lsh_", 4) && !sampled;
    set_result(r, RUN_NO_RESPONSE, "the %s of run %s has no number '%s'%s", file, r->run,
               key ? key : "train_s / iterations",
               lsh ? " (the output layer did not run LSH-sampled in this run)" : "");
  } else {
    r->y = y;
    if (s->resp == AR_RESP_INFERENCE_SAMPLES_PER_S || s->resp == AR_RESP_INFERENCE_P_AT_1)
      set_result(r, RUN_OK, "inference %s (eval.json %s)",
                 sampled ? "by LSH candidates" : "scoring every label", key);
    else
      set_result(r, RUN_OK, "%s", "");
  }
}
