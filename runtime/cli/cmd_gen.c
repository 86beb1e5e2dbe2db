/* accelrt gen-data: write a synthetic XC-format dataset with planted
 * structure (labels predictable from features), of any size. */
#define _GNU_SOURCE
#include "accelrt/data.h"
#include "accelrt/runtime.h"
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static int parse_i64(const char *opt, const char *s, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) {
    fprintf(stderr, "accelrt gen-data: --%s needs an integer >= %lld, got '%s'\n", opt,
            (long long)lo, s);
    return -1;
  }
  *out = v;
  return 0;
}

static void gen_usage(FILE *to) {
  fprintf(to,
          "usage: accelrt gen-data --out DIR [--shape amazon-670k|delicious|bibtex]\n"
          "         [--train-points N] [--test-points N] [--features F] [--labels L]\n"
          "         [--nnz K] [--labels-per-point M] [--noise X] [--seed S]\n"
          "writes DIR/train.txt and DIR/test.txt (XC format).  --shape sets the\n"
          "feature/label counts and row sizes of a known dataset; other options override.\n");
}

/* accelrt gen-data: its options, one case each (a linear switch, kept in
 * one piece), then the generator. */
int cli_gen_data(int argc, char **argv) {
  static const struct option longs[] = {
      {"out", required_argument, NULL, 'o'},          {"shape", required_argument, NULL, 'S'},
      {"train-points", required_argument, NULL, 't'}, {"test-points", required_argument, NULL, 'T'},
      {"features", required_argument, NULL, 'f'},     {"labels", required_argument, NULL, 'l'},
      {"nnz", required_argument, NULL, 'n'},          {"labels-per-point", required_argument, NULL, 'm'},
      {"noise", required_argument, NULL, 'z'},        {"seed", required_argument, NULL, 's'},
      {"help", no_argument, NULL, 'h'},               {NULL, 0, NULL, 0}};
  ar_gen_spec g = {20000, 2000, 5000, 500, 20, 2, 0.1};
  const char *out = NULL;
  int64_t v, seed = 1;
  /* First pass: --shape sets defaults that the other options override. */
  optind = 1;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    if (c != 'S')
      continue;
    if (!strcmp(optarg, "amazon-670k"))
      g = (ar_gen_spec){490449, 153025, 135909, 670091, 75, 5, 0.1};
    else if (!strcmp(optarg, "delicious"))
      g = (ar_gen_spec){12920, 3185, 500, 983, 19, 19, 0.1};
    else if (!strcmp(optarg, "bibtex"))
      g = (ar_gen_spec){4880, 2515, 1836, 159, 68, 2, 0.1};
    else {
      fprintf(stderr, "accelrt gen-data: unknown --shape '%s' (amazon-670k, delicious, bibtex)\n",
              optarg);
      return CLI_USAGE;
    }
  }
  opterr = 1;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (c) {
    case 'o': out = optarg; break;
    case 'S': break;
    case 't': if (parse_i64("train-points", optarg, 1, &g.train_points)) return CLI_USAGE; break;
    case 'T': if (parse_i64("test-points", optarg, 0, &g.test_points)) return CLI_USAGE; break;
    case 'f': if (parse_i64("features", optarg, 1, &g.features)) return CLI_USAGE; break;
    case 'l': if (parse_i64("labels", optarg, 1, &g.labels)) return CLI_USAGE; break;
    case 'n':
      if (parse_i64("nnz", optarg, 1, &v) || v > 1000000) return CLI_USAGE;
      g.nnz = (int32_t)v;
      break;
    case 'm':
      if (parse_i64("labels-per-point", optarg, 1, &v) || v > 100000) return CLI_USAGE;
      g.labels_per_point = (int32_t)v;
      break;
    case 'z': {
      char *end;
      g.noise = strtod(optarg, &end);
      if (end == optarg || *end || !(g.noise >= 0.0 && g.noise <= 1.0)) {
        fprintf(stderr, "accelrt gen-data: --noise needs a number in [0, 1], got '%s'\n", optarg);
        return CLI_USAGE;
      }
      break;
    }
    case 's': if (parse_i64("seed", optarg, 0, &seed)) return CLI_USAGE; break;
    case 'h': gen_usage(stdout); return CLI_OK;
    default: gen_usage(stderr); return CLI_USAGE;
    }
  }
  if (!out || optind != argc) {
    gen_usage(stderr);
    return CLI_USAGE;
  }
  ar_err err = AR_ERR_INIT;
  if (ar_mkdirs(out, &err) != AR_OK) {
    fprintf(stderr, "accelrt gen-data: %s\n", err.msg);
    return CLI_FAIL;
  }
  size_t n = strlen(out) + 16;
  char *train = ar_malloc(n), *test = ar_malloc(n);
  int rc = CLI_FAIL;
  if (train && test) {
    snprintf(train, n, "%s/train.txt", out);
    snprintf(test, n, "%s/test.txt", out);
    double t0 = ar_now();
    ar_status st = ar_data_generate(&g, (uint64_t)seed, train, g.test_points ? test : NULL, NULL, &err);
    if (st == AR_OK) {
      printf("wrote %s (%lld points) and %s (%lld points): %lld features, %lld labels in %.1f s\n",
             train, (long long)g.train_points, test, (long long)g.test_points,
             (long long)g.features, (long long)g.labels, ar_now() - t0);
      rc = CLI_OK;
    } else {
      fprintf(stderr, "accelrt gen-data: %s\n", err.msg);
    }
  }
  ar_free(train);
  ar_free(test);
  return rc;
}
