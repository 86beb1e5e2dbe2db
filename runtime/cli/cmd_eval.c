/* accelrt eval: scores a checkpoint on the job's test split, with every
 * output neuron and, when the output layer is LSH-sampled on this device,
 * by LSH retrieval of the candidates (SLIDE inference). */
#define _GNU_SOURCE
#include "accelrt/runtime.h"
#include "accelrt/spec.h"
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *to) {
  fprintf(to,
          "usage: accelrt eval JOB.yaml [--checkpoint PATH] [--points N] [--reps N]\n"
          "                    [--lsh-K K] [--lsh-L L] [--lsh-budget B] [--lsh-recall R]\n"
          "                    [--lsh-probe N] [--set KEY=VALUE]...\n"
          "  Evaluates PATH (default OUTPUT_DIR/checkpoint.bin) on the job's test split:\n"
          "  P@1/3/5 and speed scoring every output neuron, and, when the output layer\n"
          "  has a sparse section and runs sampled here, by LSH retrieval of candidates.\n"
          "  Writes OUTPUT_DIR/eval.json.  --points: at most N test points (default all);\n"
          "  --reps: time each way N times and keep the fastest (default 3).\n"
          "  LSH inference builds its own tables over the output layer and scores the\n"
          "  first B candidates each point retrieves.  K (codes per table) and B are\n"
          "  chosen on N training points (--lsh-probe, default 512) as the cheapest\n"
          "  setting whose candidates hold the exact top-1 for a share R of them\n"
          "  (--lsh-recall, default 0.95), trying L = sparse.L x 1, 2, 4 tables; a\n"
          "  setting that reaches R then scores the candidates of a fifth of its\n"
          "  misses (0.99 for 0.95), within a quarter of the layer;\n"
          "  --lsh-K (or sparse.K in the job), --lsh-L and --lsh-budget set them by hand.\n");
}

/* The report on the terminal. */
static void print_report(const ar_spec *spec, const char *ckpt, const ar_eval_report *r) {
  printf("%s: %lld test points on %s, %d threads (checkpoint %s)\n", spec->name,
         (long long)r->points, r->device, r->threads, ckpt);
  if (r->single_label) {
    printf("  %7s %7s %10s %12s %10s\n", "top-1", "top-5", "loss", "samples/s", "seconds");
    printf("  %7.2f %7.2f %10.4f %12.1f %10.3f\n", r->top1, r->top5, r->loss,
           r->samples_per_s, r->seconds);
    return;
  }
  printf("  %-22s %7s %7s %7s %12s %10s\n", "", "P@1", "P@3", "P@5", "samples/s", "seconds");
  printf("  %-22s %7.2f %7.2f %7.2f %12.1f %10.3f\n", "all labels scored", r->p_at[0],
         r->p_at[1], r->p_at[2], r->samples_per_s, r->seconds);
  if (!r->lsh) {
    printf("  (no LSH inference: the output layer is not sampled on this device)\n");
    return;
  }
  printf("  %-22s %7.2f %7.2f %7.2f %12.1f %10.3f\n", "LSH candidates", r->lsh_p_at[0],
         r->lsh_p_at[1], r->lsh_p_at[2], r->lsh_samples_per_s, r->lsh_seconds);
  printf("  LSH scored %.1f candidates per point; speed-up %.2fx\n", r->lsh_active_mean,
         r->lsh_seconds > 0 ? r->seconds / r->lsh_seconds : 0.0);
  printf("  inference tables: K=%d%s, L=%d, budget %lld%s; on the test points the exact top-1 "
         "was a candidate for %.1f%%, the true labels for %.1f%%\n", r->lsh_K,
         r->lsh_K_hand ? " (set)" : "", r->lsh_L, (long long)r->lsh_budget,
         r->lsh_budget_hand ? " (set)" : "", 100 * r->lsh_recall_top1,
         100 * r->lsh_recall_labels);
  printf("  chosen on %lld training points for a top-1 recall of %.0f%%%s:\n",
         (long long)r->lsh_probe_points, 100 * r->lsh_recall_target,
         r->lsh_reached ? "" : " (not reached: the best recall kept)");
  printf("  %4s %5s %8s %8s %11s %11s %9s\n", "K", "L", "budget", "recall", "candidates",
         "retrieved", "cost");
  for (int i = 0; i < r->lsh_n_tried; i++) {
    const ar_lsh_try *t = &r->lsh_tried[i];
    printf("  %4d %5d %8lld %7.1f%% %11.1f %11.1f %9.1f%s\n", t->K, t->L, (long long)t->budget,
           100 * t->recall, t->candidates, t->retrieved, t->cost,
           t->K == r->lsh_K && t->L == r->lsh_L ? "  <- chosen" : "");
  }
}

/* The report as output.dir/eval.json. */
static ar_status write_report(const ar_spec *spec, const char *ckpt, const ar_eval_report *r,
                              ar_err *err) {
  ar_json *j = ar_json_begin();
  ar_json_str(j, "checkpoint", ckpt);
  ar_json_int(j, "points", r->points);
  ar_json_str(j, "device", r->device);
  ar_json_int(j, "threads", r->threads);
  ar_json_num(j, "p_at_1", r->p_at[0]);
  if (r->single_label) {
    ar_json_num(j, "top1", r->top1);
    ar_json_num(j, "top5", r->top5);
  } else {
    ar_json_num(j, "p_at_3", r->p_at[1]);
    ar_json_num(j, "p_at_5", r->p_at[2]);
  }
  ar_json_num(j, "samples_per_s", r->samples_per_s);
  ar_json_num(j, "loss", r->loss);
  if (r->lsh) {
    ar_json_num(j, "lsh_p_at_1", r->lsh_p_at[0]);
    ar_json_num(j, "lsh_p_at_3", r->lsh_p_at[1]);
    ar_json_num(j, "lsh_p_at_5", r->lsh_p_at[2]);
    ar_json_num(j, "lsh_samples_per_s", r->lsh_samples_per_s);
    ar_json_num(j, "lsh_candidates_mean", r->lsh_active_mean);
    ar_json_int(j, "lsh_K", r->lsh_K);
    ar_json_int(j, "lsh_K_auto", r->lsh_K_auto);
    ar_json_int(j, "lsh_L", r->lsh_L);
    ar_json_bool(j, "lsh_L_hand", r->lsh_L_hand);
    ar_json_int(j, "lsh_budget", r->lsh_budget);
    char chosen[32] = "";
    if (!r->lsh_K_hand)
      strcat(chosen, " K");
    if (!r->lsh_L_hand)
      strcat(chosen, " L");
    if (!r->lsh_budget_hand)
      strcat(chosen, " budget");
    ar_json_str(j, "lsh_chosen", chosen[0] ? chosen + 1 : "none"); /* the rest set by hand */
    ar_json_num(j, "lsh_recall_top1", r->lsh_recall_top1);
    ar_json_num(j, "lsh_recall_labels", r->lsh_recall_labels);
    ar_json_num(j, "lsh_recall_target", r->lsh_recall_target);
    ar_json_bool(j, "lsh_recall_reached", r->lsh_reached);
    ar_json_int(j, "lsh_probe_points", r->lsh_probe_points);
    ar_json_num(j, "lsh_probe_recall", r->lsh_probe_recall);
    ar_json_num(j, "lsh_probe_candidates", r->lsh_probe_candidates);
    /* Each setting the choice measured, keyed by K and L (eval.json is flat). */
    for (int i = 0; i < r->lsh_n_tried; i++) {
      const ar_lsh_try *t = &r->lsh_tried[i];
      static const char *const f[] = {"budget", "recall", "candidates", "retrieved", "cost"};
      const double v[] = {(double)t->budget, t->recall, t->candidates, t->retrieved, t->cost};
      for (int q = 0; q < 5; q++) {
        char key[48];
        snprintf(key, sizeof key, "lsh_tried_K%d_L%d_%s", t->K, t->L, f[q]);
        ar_json_num(j, key, v[q]);
      }
    }
  }
  const char *text = ar_json_end(j);
  char *out = ar_path_join(spec->output.dir, "eval.json");
  ar_status st = out && text ? ar_write_file_atomic(out, text, strlen(text), err)
                             : ar_errf(err, AR_NOMEM, "out of memory writing eval.json");
  ar_free(out);
  ar_json_destroy(j);
  return st;
}

/* Loads the job file with its overrides: a CLI exit status, or -1 when
 * *spec is ready. */
static int load_job(const char *file, const char **sets, int n_sets, ar_spec **spec) {
  ar_diags diags = {0, NULL};
  ar_status st = ar_spec_load(file, sets, n_sets, spec, &diags);
  int rc = -1;
  if (st != AR_OK) {
    ar_diags_print(&diags, file, stderr);
    if (!diags.count)
      fprintf(stderr, "%s: error: %s\n", file, ar_status_str(st));
    rc = st == AR_NOMEM ? CLI_FAIL : CLI_USAGE;
  } else if ((*spec)->n_jobs > 0) {
    fprintf(stderr, "accelrt eval: %s lists several jobs; evaluate one job file\n", file);
    rc = CLI_USAGE;
  } else {
    cli_short_spin(); /* re-executes before the routing note is printed */
    rc = cli_route_chain(*spec, NULL);
  }
  ar_diags_fini(&diags);
  return rc;
}

/* Evaluates, prints and writes eval.json: a CLI exit status. */
static int evaluate(const ar_spec *spec, const char *ckpt, int64_t points, int64_t reps,
                    const ar_eval_opts *eo) {
  char *path = ckpt ? NULL : ar_path_join(spec->output.dir, "checkpoint.bin");
  if (!ckpt && !path)
    return CLI_FAIL;
  if (!ckpt)
    ckpt = path;
  ar_err err = AR_ERR_INIT;
  ar_eval_report r;
  ar_status st = ar_eval_checkpoint(spec, ckpt, points, (int)reps, eo, &r, &err);
  if (st == AR_OK) {
    print_report(spec, ckpt, &r);
    st = write_report(spec, ckpt, &r, &err);
  }
  if (st != AR_OK)
    fprintf(stderr, "accelrt eval: error: %s\n", err.msg[0] ? err.msg : ar_status_str(st));
  ar_free(path);
  return st == AR_OK ? CLI_OK : st == AR_INVALID ? CLI_USAGE : CLI_FAIL;
}

/* The whole-number options: getopt's code, the name (as in cli_eval's
 * longs) and the bounds; cli_eval keeps each one's value at its W_ index. */
enum { W_POINTS, W_REPS, W_LSH_K, W_LSH_L, W_LSH_BUDGET, W_LSH_PROBE, W_N };
static const struct whole_opt {
  int c;
  const char *name;
  int64_t lo, hi;
} wholes[W_N] = {
    [W_POINTS] = {'p', "points", 0, INT64_MAX},
    [W_REPS] = {'r', "reps", 1, INT64_MAX},
    [W_LSH_K] = {'K', "lsh-K", 1, 64},
    [W_LSH_L] = {'L', "lsh-L", 1, 1024},
    [W_LSH_BUDGET] = {'B', "lsh-budget", 1, INT64_MAX},
    [W_LSH_PROBE] = {'P', "lsh-probe", 1, INT64_MAX},
};

/* Parses the argument of whole-number option c into vals[its row]; false,
 * with a message naming the option and its bounds, when it is not one. */
static bool parse_whole(int c, const char *arg, int64_t vals[W_N]) {
  int i = 0;
  while (i < W_N && wholes[i].c != c)
    i++;
  AR_ASSERT(i < W_N); /* cli_eval passes only the table's codes */
  const struct whole_opt *w = &wholes[i];
  if (cli_parse_i64(arg, w->lo, w->hi, &vals[i]))
    return true;
  char bounds[64] = "";
  if (w->hi != INT64_MAX)
    snprintf(bounds, sizeof bounds, " from %lld to %lld", (long long)w->lo, (long long)w->hi);
  else if (w->lo != 0)
    snprintf(bounds, sizeof bounds, " >= %lld", (long long)w->lo);
  fprintf(stderr, "accelrt eval: --%s needs a whole number%s, got '%s'\n", w->name, bounds,
          arg);
  return false;
}

int cli_eval(int argc, char **argv) {
  static const struct option longs[] = {{"checkpoint", required_argument, NULL, 'c'},
                                        {"points", required_argument, NULL, 'p'},
                                        {"reps", required_argument, NULL, 'r'},
                                        {"set", required_argument, NULL, 's'},
                                        {"lsh-K", required_argument, NULL, 'K'},
                                        {"lsh-L", required_argument, NULL, 'L'},
                                        {"lsh-budget", required_argument, NULL, 'B'},
                                        {"lsh-recall", required_argument, NULL, 'R'},
                                        {"lsh-probe", required_argument, NULL, 'P'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  const char *ckpt = NULL;
  int64_t vals[W_N] = {[W_REPS] = 3}; /* the rest 0: all points, chosen by eval */
  ar_eval_opts eo;
  memset(&eo, 0, sizeof eo);
  const char **sets = ar_calloc((size_t)argc, sizeof *sets);
  int n_sets = 0, c, rc = -1;
  if (!sets)
    return CLI_FAIL;
  optind = 1;
  while (rc < 0 && (c = cli_getopt(argc, argv, "h", longs)) != -1) {
    switch (c) {
    case 'c':
      ckpt = optarg;
      break;
    case 'p':
    case 'r':
    case 'K':
    case 'L':
    case 'B':
    case 'P':
      if (!parse_whole(c, optarg, vals))
        rc = CLI_USAGE;
      break;
    case 'R': {
      char *end;
      errno = 0;
      eo.lsh_recall = strtod(optarg, &end);
      if (errno || *end || end == optarg || !(eo.lsh_recall > 0 && eo.lsh_recall <= 1)) {
        fprintf(stderr, "accelrt eval: --lsh-recall needs a number in (0, 1], got '%s'\n",
                optarg);
        rc = CLI_USAGE;
      }
      break;
    }
    case 's':
      rc = cli_set_arg("eval", optarg, sets, &n_sets);
      break;
    case 'h':
      usage(stdout);
      rc = CLI_OK;
      break;
    default:
      rc = CLI_USAGE;
    }
  }
  if (rc < 0)
    rc = cli_one_job("eval", argc, usage);
  ar_spec *spec = NULL;
  if (rc < 0)
    rc = load_job(argv[optind], sets, n_sets, &spec);
  eo.lsh_K = (int)vals[W_LSH_K]; /* within int: bounded above */
  eo.lsh_L = (int)vals[W_LSH_L];
  eo.lsh_budget = vals[W_LSH_BUDGET];
  eo.lsh_probe = vals[W_LSH_PROBE];
  if (rc < 0)
    rc = evaluate(spec, ckpt, vals[W_POINTS], vals[W_REPS], &eo);
  ar_spec_destroy(spec);
  ar_free(sets);
  return rc;
}
