/* Distributed training under `mpiexec -n 3` (one case per run, named by
 * argv[1]):
 *
 *   order_file    a hand-made schedule (transfers in reverse id order, the
 *                 opposite of what "as ready" gives) read from
 *                 distributed.schedule: every worker receives the
 *                 transfers exactly in that order after warm-up;
 *   order_tac     1 server, 2 workers, TAC computed after warm-up: the
 *                 receive order follows the schedule's numbers;
 *   order_tic_2s  2 servers, 1 worker, TIC: per channel, numbers never
 *                 decrease (ties may go in any order among themselves);
 *   order_random  random: every iteration a permutation, and they differ;
 *   equal_1s      1 server, 2 workers: after 8 iterations (across an epoch
 *                 boundary, uneven slices) the parameters and Adam state
 *                 equal those of a single-process run with the same batch
 *                 and seed;
 *   equal_2s      2 servers (shards gathered for the checkpoint), 1 worker,
 *                 SGD with momentum: the same equality;
 *   pieces_2s     that job with every message in pieces of 1000 bytes (as
 *                 a message over 2 GiB is split into MPI-sized ones), run
 *                 for 4 iterations and resumed to 8 (the checkpoint's
 *                 state moved to the other server and the parameters
 *                 broadcast, in pieces): bit for bit the uninterrupted run
 *                 without pieces.
 *
 * No wall-clock thresholds.  Every rank checks what it can and the exit
 * status is non-zero when any rank failed. */
#define _GNU_SOURCE
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accelrt/dist.h"
#include "accelrt/runtime.h"
#include "dist_case.h"


#define MAX_ITERS 16
#define MAX_T 64

/* What the observers saw. */
static uint32_t seen[MAX_ITERS + 1][MAX_T];
static size_t seen_n[MAX_ITERS + 1];
static uint32_t number[MAX_T], channel[MAX_T];
static int have_schedule;
/* How the next run goes: bytes per piece of a message (0: the default),
 * and whether it resumes. */
static size_t piece_bytes;
static bool resume_run;

static void on_order(void *ctx, int64_t it, const uint32_t *t, size_t n) {
  (void)ctx;
  if (it < 1 || it > MAX_ITERS || n > MAX_T)
    return;
  memcpy(seen[it], t, n * sizeof *t);
  seen_n[it] = n;
}

static void on_schedule(void *ctx, const ar_commsched_schedule *s) {
  (void)ctx;
  for (uint32_t t = 0; t < MAX_T; t++) {
    const ar_commsched_entry *e = ar_commsched_schedule_find(s, t);
    number[t] = e ? e->number : UINT32_MAX;
    channel[t] = e ? e->channel : UINT32_MAX;
  }
  have_schedule = 1;
}

static ar_spec *job(const char *dir, int servers, const char *order, int iterations,
                    const char *optimizer, const char *schedule, bool distributed) {
  char yaml[4096], dist[512] = "";
  if (distributed)
    snprintf(dist, sizeof dist,
             "distributed: {servers: %d, order: %s, trace_iterations: 2%s%s}\n", servers, order,
             schedule ? ", schedule: " : "", schedule ? schedule : "");
  snprintf(yaml, sizeof yaml,
           "name: dist\nseed: 5\ndevice: host\n"
           "model:\n  input: {dense: 40}\n  layers:\n"
           "    - {name: h1, dense: 48, activation: relu}\n"
           "    - {name: h2, dense: 24, activation: sigmoid}\n"
           "    - {name: h3, dense: 32, activation: relu}\n"
           "    - {name: out, dense: 12, activation: softmax}\n"
           "data: {generate: {train_points: 150, test_points: 0, features: 40, labels: 12,"
           " nnz: 6, labels_per_point: 2}, shuffle_window: 50}\n"
           "train: {batch: 33, iterations: %d, threads: 1, optimizer: %s}\n"
           "output: {dir: '%s'}\n%s",
           iterations, optimizer, dir, dist);
  return case_parse(yaml);
}

static ar_status run_dist(ar_spec *spec) {
  ar_dist_opts o = AR_DIST_OPTS_INIT;
  o.timeout_s = 60;
  o.on_recv_order = on_order;
  o.on_schedule = on_schedule;
  o.piece_bytes = piece_bytes;
  ar_run_opts ro = AR_RUN_OPTS_INIT;
  ro.quiet = true;
  ro.resume = resume_run;
  ar_summary s;
  memset(&s, 0, sizeof s);
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_dist_run_ex(spec, &ro, &o, &s, &err);
  CHECK(st == AR_OK, "ar_dist_run_ex: %s", err.msg);
  return st;
}

/* Every iteration's order is a permutation of the nt transfers. */
static void check_permutations(int iters, size_t nt) {
  for (int it = 1; it <= iters; it++) {
    CHECK(seen_n[it] == nt, "iteration %d: %zu transfers received, expected %zu", it,
          seen_n[it], nt);
    int mark[MAX_T] = {0};
    for (size_t i = 0; i < seen_n[it]; i++)
      if (seen[it][i] < MAX_T)
        mark[seen[it][i]]++;
    for (size_t t = 0; t < nt; t++)
      CHECK(mark[t] == 1, "iteration %d: transfer %zu received %d times", it, t, mark[t]);
  }
}

/* After warm-up (iterations > 2), per channel the numbers never decrease
 * and, when strict, always increase. */
static void check_follows_schedule(int iters, bool strict) {
  CHECK(have_schedule, "no schedule was reported");
  for (int it = 3; it <= iters; it++) {
    uint32_t last[8];
    for (int k = 0; k < 8; k++)
      last[k] = 0;
    bool first[8] = {true, true, true, true, true, true, true, true};
    for (size_t i = 0; i < seen_n[it]; i++) {
      uint32_t t = seen[it][i], ch = channel[t], nb = number[t];
      CHECK(ch < 8, "transfer %u is not in the schedule", t);
      if (ch >= 8)
        continue;
      if (!first[ch])
        CHECK(strict ? nb > last[ch] : nb >= last[ch],
              "iteration %d: transfer %u (number %u) came after number %u on channel %u", it, t,
              nb, last[ch], ch);
      first[ch] = false;
      last[ch] = nb;
    }
  }
}

static void case_order(const char *dir, int servers, const char *order, bool strict) {
  ar_spec *spec = job(dir, servers, order, 6, "{adam: {lr: 0.01}}", NULL, true);
  if (spec && run_dist(spec) == AR_OK && rank >= servers) {
    check_permutations(6, 8);
    check_follows_schedule(6, strict);
  }
  ar_spec_destroy(spec);
}

static void case_order_file(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/reverse.sched", dir);
  if (rank == 0) {
    /* Transfer ids are 2l (w) and 2l+1 (b) in layer order. */
    static const char *names[8] = {"h1.w", "h1.b", "h2.w", "h2.b",
                                   "h3.w", "h3.b", "out.w", "out.b"};
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (f) {
      fprintf(f, "order tac\n");
      for (int t = 0; t < 8; t++)
        fprintf(f, "%d %s 0 %d\n", t, names[t], 7 - t);
      fclose(f);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ar_spec *spec = job(dir, 1, "tac", 6, "{adam: {lr: 0.01}}", path, true);
  if (spec && run_dist(spec) == AR_OK && rank >= 1) {
    check_permutations(6, 8);
    /* A schedule from a file is in force from the first iteration. */
    for (int it = 1; it <= 6; it++)
      for (size_t i = 0; i < seen_n[it]; i++)
        CHECK(seen[it][i] == 7 - i, "iteration %d: position %zu got transfer %u, expected %zu",
              it, i, seen[it][i], 7 - i);
  }
  ar_spec_destroy(spec);
}

static void case_random(const char *dir) {
  ar_spec *spec = job(dir, 1, "random", 8, "{adam: {lr: 0.01}}", NULL, true);
  if (spec && run_dist(spec) == AR_OK && rank >= 1) {
    check_permutations(8, 8);
    int distinct = 0;
    for (int it = 2; it <= 8; it++)
      if (memcmp(seen[it], seen[1], sizeof seen[1]) != 0)
        distinct++;
    CHECK(distinct >= 5, "only %d of 7 iterations differ from the first one's order", distinct);
  }
  ar_spec_destroy(spec);
}

/* Loads a checkpoint into a fresh model of spec's shape. */
static ar_model *load_ckpt(ar_device *dev, const ar_spec *spec, const char *path) {
  ar_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_model_create(dev, spec, 8, 8, &m, &err) != AR_OK) {
    CHECK(false, "ar_model_create: %s", err.msg);
    return NULL;
  }
  ar_ckpt_state st;
  if (ar_checkpoint_load(m, &st, NULL, path, &err) != AR_OK) {
    CHECK(false, "ar_checkpoint_load %s: %s", path, err.msg);
    ar_model_destroy(m);
    return NULL;
  }
  return m;
}

static void compare_models(const ar_model *a, const ar_model *b) {
  const char *na[64], *nb[64];
  float *pa[64], *pb[64];
  int64_t ca[64], cb[64];
  int n = ar_model_tensors(a, na, pa, ca, 64);
  CHECK(n == ar_model_tensors(b, nb, pb, cb, 64), "tensor counts differ");
  CHECK(a->step == b->step, "optimizer steps differ: %lld vs %lld", (long long)a->step,
        (long long)b->step);
  double worst = 0.0;
  for (int i = 0; i < n && i < 64; i++) {
    CHECK(ca[i] == cb[i], "tensor %s sizes differ", na[i]);
    for (int64_t k = 0; k < ca[i] && ca[i] == cb[i]; k++) {
      double d = fabs((double)pa[i][k] - (double)pb[i][k]);
      double tol = 1e-5 + 1e-3 * fabs((double)pb[i][k]);
      if (d > tol) {
        CHECK(false, "%s[%lld]: distributed %.9g vs single-process %.9g", na[i], (long long)k,
              (double)pa[i][k], (double)pb[i][k]);
        break;
      }
      if (d > worst)
        worst = d;
    }
  }
  printf("largest difference %.3g over %d tensors\n", worst, n);
}

static void case_equal(const char *dir, int servers, const char *opt) {
  char ddir[600], sdir[600], dck[700], sck[700];
  snprintf(ddir, sizeof ddir, "%s/dist", dir);
  snprintf(sdir, sizeof sdir, "%s/single", dir);
  ar_spec *spec = job(ddir, servers, "tac", 8, opt, NULL, true);
  ar_status st = spec ? run_dist(spec) : AR_INVALID;
  ar_spec_destroy(spec);
  if (rank != 0 || st != AR_OK)
    return;
  ar_spec *one = job(sdir, servers, "tac", 8, opt, NULL, false);
  ar_run_opts ro = AR_RUN_OPTS_INIT;
  ro.quiet = true;
  ar_summary s;
  ar_err err = AR_ERR_INIT;
  st = ar_run(one, &ro, &s, &err);
  CHECK(st == AR_OK, "ar_run: %s", err.msg);
  snprintf(dck, sizeof dck, "%s/checkpoint.bin", ddir);
  snprintf(sck, sizeof sck, "%s/checkpoint.bin", sdir);
  ar_device *dev = NULL;
  ar_device_opts dopts = AR_DEVICE_OPTS_INIT;
  dopts.threads = 1;
  CHECK(ar_device_open("host", &dopts, &dev, &err) == AR_OK, "host device: %s", err.msg);
  if (st == AR_OK && dev) {
    ar_model *a = load_ckpt(dev, one, dck), *b = load_ckpt(dev, one, sck);
    if (a && b)
      compare_models(a, b);
    ar_model_destroy(a);
    ar_model_destroy(b);
  }
  ar_device_close(dev);
  ar_spec_destroy(one);
}

static void case_pieces(const char *dir) {
  char plain[600], pieces[600];
  snprintf(plain, sizeof plain, "%s/plain", dir);
  snprintf(pieces, sizeof pieces, "%s/pieces", dir);
  static const char *sgd = "{sgd: {lr: 0.05, momentum: 0.9}}";
  ar_spec *all = job(plain, 2, "tac", 8, sgd, NULL, true);
  ar_spec *half = job(pieces, 2, "tac", 4, sgd, NULL, true);
  ar_spec *rest = job(pieces, 2, "tac", 8, sgd, NULL, true);
  ar_status st = all && half && rest ? run_dist(all) : AR_INVALID;
  piece_bytes = 1000;
  if (st == AR_OK)
    st = run_dist(half);
  resume_run = true;
  if (st == AR_OK)
    st = run_dist(rest);
  if (st == AR_OK && rank == 0)
    CHECK(case_same_checkpoint(plain, pieces), "the run in pieces differs from the plain run");
  ar_spec_destroy(all);
  ar_spec_destroy(half);
  ar_spec_destroy(rest);
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "";
  char dir[512];
  if (!case_begin(&argc, &argv, 3, which, dir, sizeof dir))
    return 1;
  if (strcmp(which, "order_file") == 0)
    case_order_file(dir);
  else if (strcmp(which, "order_tac") == 0)
    case_order(dir, 1, "tac", true);
  else if (strcmp(which, "order_tic_2s") == 0)
    case_order(dir, 2, "tic", false);
  else if (strcmp(which, "order_random") == 0)
    case_random(dir);
  else if (strcmp(which, "equal_1s") == 0)
    case_equal(dir, 1, "{adam: {lr: 0.01}}");
  else if (strcmp(which, "equal_2s") == 0)
    case_equal(dir, 2, "{sgd: {lr: 0.05, momentum: 0.9}}");
  else if (strcmp(which, "pieces_2s") == 0)
    case_pieces(dir);
  else
    CHECK(false, "unknown case '%s'", which);
  return case_end(which, dir);
}
