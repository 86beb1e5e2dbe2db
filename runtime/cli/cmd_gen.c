/* accelrt gen-data: write a synthetic XC-format dataset with planted
 * structure (labels predictable from features), of any size; or, with
 * --shape tokens, a token dataset whose label only token order tells
 * (ar_tdata_generate_tokens, tdata.h). */
#define _GNU_SOURCE
#include "accelrt/data.h"
#include "accelrt/runtime.h"
#include "accelrt/tdata.h"
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static int parse_i64(const char *opt, const char *s, int64_t lo, int64_t *out) {
  if (!cli_parse_i64(s, lo, INT64_MAX, out)) {
    fprintf(stderr, "accelrt gen-data: --%s needs an integer >= %lld, got '%s'\n", opt,
            (long long)lo, s);
    return -1;
  }
  return 0;
}

static void gen_usage(FILE *to) {
  fprintf(to,
          "usage: accelrt gen-data --out DIR [--shape amazon-670k|delicious|bibtex]\n"
          "         [--train-points N] [--test-points N] [--features F] [--labels L]\n"
          "         [--nnz K] [--labels-per-point M] [--noise X] [--seed S]\n"
          "writes DIR/train.txt and DIR/test.txt (XC format).  --shape sets the\n"
          "feature/label counts and row sizes of a known dataset; other options override.\n"
          "\n"
          "       accelrt gen-data --out DIR --shape tokens [--seq S] [--vocab V]\n"
          "         [--labels N] [--train-points N] [--test-points N] [--seed S]\n"
          "writes DIR/train and DIR/test, each with x.npy (i64 token ids, points x seq)\n"
          "and y.npy (class ids): token 1 first, markers 2 and 3 once each, fillers in\n"
          "[4, vocab), 0 padding; class 1 when 2 precedes 3, which only order tells.\n"
          "--labels N (N > 2): the class's digits base vocab-4 at positions 1.., no markers.\n"
          "Defaults: --seq 32 (at least 3), --vocab 64 (at least 5), 20000/2000 points.\n");
}

/* --shape tokens: the token dataset into out. */
static int gen_tokens(const ar_tokens_spec *t, int64_t seed, const char *out) {
  ar_err err = AR_ERR_INIT;
  double t0 = ar_now();
  if (ar_tdata_generate_tokens(t, (uint64_t)seed, out, NULL, &err) != AR_OK) {
    fprintf(stderr, "accelrt gen-data: %s\n", err.msg);
    return CLI_FAIL;
  }
  printf("wrote %s/train (%lld points) and %s/test (%lld points): sequences of %lld tokens "
         "over %lld ids in %.1f s\n",
         out, (long long)t->train_points, out, (long long)t->test_points, (long long)t->seq,
         (long long)t->vocab, ar_now() - t0);
  return CLI_OK;
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
      {"seq", required_argument, NULL, 'q'},          {"vocab", required_argument, NULL, 'v'},
      {"help", no_argument, NULL, 'h'},               {NULL, 0, NULL, 0}};
  ar_gen_spec g = {20000, 2000, 5000, 500, 20, 2, 0.1};
  const char *out = NULL;
  int64_t v, seed = 1;
  ar_tokens_spec tok = {0, 0, 32, 64, 0};
  bool tokens = false;
  const char *xc_only = NULL, *tok_only = NULL; /* an option given that the shape ignores */
  /* First pass: --shape sets defaults that the other options override. */
  optind = 1;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    if (c != 'S')
      continue;
    tokens = !strcmp(optarg, "tokens");
    if (tokens)
      continue;
    if (!strcmp(optarg, "amazon-670k"))
      g = (ar_gen_spec){490449, 153025, 135909, 670091, 75, 5, 0.1};
    else if (!strcmp(optarg, "delicious"))
      g = (ar_gen_spec){12920, 3185, 500, 983, 19, 19, 0.1};
    else if (!strcmp(optarg, "bibtex"))
      g = (ar_gen_spec){4880, 2515, 1836, 159, 68, 2, 0.1};
    else {
      fprintf(stderr,
              "accelrt gen-data: unknown --shape '%s' (amazon-670k, delicious, bibtex, tokens)\n",
              optarg);
      return CLI_USAGE;
    }
  }
  opterr = 1;
  optind = 1;
  while ((c = cli_getopt(argc, argv, "h", longs)) != -1) {
    switch (c) {
    case 'o': out = optarg; break;
    case 'S': break;
    case 't': if (parse_i64("train-points", optarg, 1, &g.train_points)) return CLI_USAGE; break;
    case 'T': if (parse_i64("test-points", optarg, 0, &g.test_points)) return CLI_USAGE; break;
    case 'f':
      if (parse_i64("features", optarg, 1, &g.features)) return CLI_USAGE;
      xc_only = "features";
      break;
    case 'l':
      if (parse_i64("labels", optarg, 1, &g.labels)) return CLI_USAGE;
      tok.labels = g.labels; /* tokens: more than 2 takes the digit rule */
      break;
    case 'q':
      if (parse_i64("seq", optarg, 3, &tok.seq)) return CLI_USAGE;
      tok_only = "seq";
      break;
    case 'v':
      if (parse_i64("vocab", optarg, 5, &tok.vocab)) return CLI_USAGE;
      tok_only = "vocab";
      break;
    case 'n':
      xc_only = "nnz";
      if (parse_i64("nnz", optarg, 1, &v) || v > 1000000) return CLI_USAGE;
      g.nnz = (int32_t)v;
      break;
    case 'm':
      xc_only = "labels-per-point";
      if (parse_i64("labels-per-point", optarg, 1, &v) || v > 100000) return CLI_USAGE;
      g.labels_per_point = (int32_t)v;
      break;
    case 'z': {
      xc_only = "noise";
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
  if (tokens ? xc_only != NULL : tok_only != NULL) {
    if (tokens)
      fprintf(stderr, "accelrt gen-data: --%s does not apply to --shape tokens\n", xc_only);
    else
      fprintf(stderr, "accelrt gen-data: --%s applies only to --shape tokens\n", tok_only);
    return CLI_USAGE;
  }
  if (tokens) {
    if (tok.labels == 1) {
      fprintf(stderr, "accelrt gen-data: --shape tokens needs --labels of 2 or more\n");
      return CLI_USAGE;
    }
    tok.train_points = g.train_points;
    tok.test_points = g.test_points;
    return gen_tokens(&tok, seed, out);
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
