/*
 * Not a test (not registered with ctest): measures the generator and the
 * reader on an Amazon-670K-shaped set.
 *
 *   bench_data gen FILE POINTS      generate POINTS train points into FILE
 *   bench_data scan FILE [WINDOW]   open (the validating scan), then read
 *                                   one epoch in batches of 128
 */
#define _POSIX_C_SOURCE 200809L
#include "accelrt/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static double file_mb(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (double)st.st_size / 1e6 : 0.0;
}

int main(int argc, char **argv) {
  ar_err err = AR_ERR_INIT;
  if (argc >= 4 && !strcmp(argv[1], "gen")) {
    ar_gen_spec g;
    memset(&g, 0, sizeof g);
    g.train_points = atoll(argv[3]);
    g.features = 135909;
    g.labels = 670091;
    g.nnz = 75;
    g.labels_per_point = 5;
    g.noise = 0.1;
    double t0 = ar_now();
    if (ar_data_generate(&g, 1, argv[2], NULL, NULL, &err) != AR_OK) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    double dt = ar_now() - t0;
    printf("generated %lld points, %.1f MB in %.2f s (%.0f points/s, %.1f MB/s)\n",
           (long long)g.train_points, file_mb(argv[2]), dt, (double)g.train_points / dt,
           file_mb(argv[2]) / dt);
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "scan")) {
    ar_reader_opts o = AR_READER_OPTS_INIT;
    o.shuffle_window = argc >= 4 ? atoll(argv[3]) : 0;
    ar_reader *r = NULL;
    double t0 = ar_now();
    if (ar_reader_open(argv[2], &o, &r, &err) != AR_OK) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    double t_open = ar_now() - t0;
    const ar_data_stats *s = ar_reader_stats(r);
    ar_batch b;
    if (ar_batch_init(&b, 128, s->max_nnz, s->max_labels) != AR_OK)
      return 1;
    t0 = ar_now();
    int64_t rows = 0;
    for (;;) {
      if (ar_reader_next(r, 128, &b, &err) != AR_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
      }
      if (!b.rows)
        break;
      rows += b.rows;
    }
    double t_epoch = ar_now() - t0;
    double mb = file_mb(argv[2]);
    printf("%lld points, max nnz %lld, max labels %lld\n", (long long)s->points,
           (long long)s->max_nnz, (long long)s->max_labels);
    printf("open (scan): %.2f s, %.1f MB/s; epoch (window %lld): %.2f s, %.1f MB/s\n",
           t_open, mb / t_open, (long long)o.shuffle_window, t_epoch, mb / t_epoch);
    ar_batch_fini(&b);
    ar_reader_close(r);
    return rows == s->points ? 0 : 1;
  }
  fprintf(stderr, "usage: bench_data gen FILE POINTS | bench_data scan FILE [WINDOW]\n");
  return 2;
}
