/*
 * Generator tests: byte-identical output for a seed, a valid xc file of the
 * asked shape, the planted structure (features overlap the prototypes of
 * the point's labels far more than chance; a nearest-centroid classifier
 * trained on the train split predicts test labels far above the
 * most-frequent-label baseline), Zipf-like popularity, atomic writes and
 * out-of-memory injection.
 */
#include "test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "accelrt/data.h"
#include "gen_model.h" /* runtime/data: the prototypes, to check them */

static ar_gen_spec small_spec(void) {
  ar_gen_spec g;
  memset(&g, 0, sizeof g);
  g.train_points = 2000;
  g.test_points = 500;
  g.features = 1000;
  g.labels = 50;
  g.nnz = 20;
  g.labels_per_point = 2;
  g.noise = 0.2;
  return g;
}

static void gen_ok(const ar_gen_spec *g, uint64_t seed, const char *train,
                   const char *test) {
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_data_generate(g, seed, train, test, NULL, &err);
  if (st != AR_OK)
    fail_msg("generate: %s: %s", ar_status_name(st), err.msg);
}

/* No "*.tmp.*" file is left in the scratch folder. */
static void assert_no_temp_files(void) {
  DIR *d = opendir(tu_dir);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strstr(e->d_name, ".tmp."))
      fail_msg("temporary file left behind: %s", e->d_name);
  closedir(d);
}

static void test_deterministic(void **state) {
  (void)state;
  ar_gen_spec g = small_spec();
  char a_tr[512], a_te[512], b_tr[512], b_te[512], c_tr[512];
  snprintf(a_tr, sizeof a_tr, "%s", tu_path("a_train.txt"));
  snprintf(a_te, sizeof a_te, "%s", tu_path("a_test.txt"));
  snprintf(b_tr, sizeof b_tr, "%s", tu_path("b_train.txt"));
  snprintf(b_te, sizeof b_te, "%s", tu_path("b_test.txt"));
  snprintf(c_tr, sizeof c_tr, "%s", tu_path("c_train.txt"));
  gen_ok(&g, 11, a_tr, a_te);
  gen_ok(&g, 11, b_tr, b_te);
  gen_ok(&g, 12, c_tr, NULL);
  size_t na = 0, nb = 0, nc = 0, nat = 0, nbt = 0;
  char *a = tu_slurp(a_tr, &na), *b = tu_slurp(b_tr, &nb), *c = tu_slurp(c_tr, &nc);
  char *at = tu_slurp(a_te, &nat), *bt = tu_slurp(b_te, &nbt);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(c);
  assert_non_null(at);
  assert_non_null(bt);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na);
  assert_int_equal(nat, nbt);
  assert_memory_equal(at, bt, nat);
  assert_true(na != nc || memcmp(a, c, na) != 0);
  /* Train and test are different points. */
  assert_true(strncmp(a, "2000 1000 50\n", 13) == 0);
  assert_true(strncmp(at, "500 1000 50\n", 12) == 0);
  assert_true(memcmp(a + 13, at + 12, 200) != 0);
  free(a);
  free(b);
  free(c);
  free(at);
  free(bt);
  assert_no_temp_files();
}

/* Reads a generated file in file order and checks it is well formed:
 * sorted distinct labels and features, values 1. */
typedef struct point_set {
  int64_t n;
  int64_t *lab_ptr, *feat_ptr; /* (n + 1) */
  int32_t *lab, *feat;
} point_set;

static void load_points(const char *path, const ar_gen_spec *g, int64_t points,
                        point_set *ps) {
  ar_reader_opts o = AR_READER_OPTS_INIT;
  o.features = g->features;
  o.labels = g->labels;
  ar_reader *r = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_reader_open(path, &o, &r, &err) != AR_OK)
    fail_msg("open %s: %s", path, err.msg);
  const ar_data_stats *s = ar_reader_stats(r);
  assert_int_equal(s->points, points);
  assert_int_equal(s->features, g->features);
  assert_int_equal(s->labels, g->labels);
  assert_int_equal(s->empty_label_rows, 0);
  assert_true(s->max_labels <= 2 * g->labels_per_point - 1);
  assert_true(s->max_nnz <= g->nnz + g->nnz / 2);
  ps->n = points;
  ps->lab_ptr = malloc((size_t)(points + 1) * sizeof *ps->lab_ptr);
  ps->feat_ptr = malloc((size_t)(points + 1) * sizeof *ps->feat_ptr);
  ps->lab = malloc((size_t)s->total_labels * sizeof *ps->lab + 1);
  ps->feat = malloc((size_t)s->total_nnz * sizeof *ps->feat + 1);
  ps->lab_ptr[0] = ps->feat_ptr[0] = 0;
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, 256, s->max_nnz, s->max_labels), AR_OK);
  int64_t i = 0;
  for (;;) {
    assert_int_equal(ar_reader_next(r, 256, &b, &err), AR_OK);
    if (!b.rows)
      break;
    for (int64_t k = 0; k < b.rows; k++, i++) {
      int64_t l0 = b.lab_ptr[k], ln = b.lab_ptr[k + 1] - l0;
      int64_t f0 = b.row_ptr[k], fn = b.row_ptr[k + 1] - f0;
      assert_true(ln >= 1);
      for (int64_t j = 0; j < ln; j++) {
        if (j)
          assert_true(b.lab[l0 + j] > b.lab[l0 + j - 1]);
        ps->lab[ps->lab_ptr[i] + j] = b.lab[l0 + j];
      }
      for (int64_t j = 0; j < fn; j++) {
        if (j)
          assert_true(b.idx[f0 + j] > b.idx[f0 + j - 1]);
        assert_true(b.val[f0 + j] == 1.0f);
        ps->feat[ps->feat_ptr[i] + j] = b.idx[f0 + j];
      }
      ps->lab_ptr[i + 1] = ps->lab_ptr[i] + ln;
      ps->feat_ptr[i + 1] = ps->feat_ptr[i] + fn;
    }
  }
  assert_int_equal(i, points);
  /* Shape: averages near the asked ones. */
  double avg_lab = (double)s->total_labels / (double)points;
  double avg_nnz = (double)s->total_nnz / (double)points;
  if (avg_lab < g->labels_per_point - 0.2 || avg_lab > g->labels_per_point + 0.2)
    fail_msg("average labels %.3f, asked %d", avg_lab, g->labels_per_point);
  if (avg_nnz < 0.7 * g->nnz || avg_nnz > 1.01 * g->nnz)
    fail_msg("average nnz %.3f, asked %d", avg_nnz, g->nnz);
  ar_batch_fini(&b);
  ar_reader_close(r);
}

static void free_points(point_set *ps) {
  free(ps->lab_ptr);
  free(ps->feat_ptr);
  free(ps->lab);
  free(ps->feat);
}

/* Fraction of point i's features that are prototypes of the labels of
 * point j (j == i: its own labels). */
static double proto_overlap(const point_set *ps, const ar_gen_spec *g, uint64_t seed,
                            int64_t i, int64_t j, unsigned char *mark) {
  int64_t protos = ar__gen_prototypes(g->nnz);
  memset(mark, 0, (size_t)g->features);
  for (int64_t a = ps->lab_ptr[j]; a < ps->lab_ptr[j + 1]; a++)
    for (int64_t p = 0; p < protos; p++)
      mark[ar__gen_prototype(seed, g->features, ps->lab[a], p)] = 1;
  int64_t hit = 0, n = ps->feat_ptr[i + 1] - ps->feat_ptr[i];
  for (int64_t f = ps->feat_ptr[i]; f < ps->feat_ptr[i + 1]; f++)
    hit += mark[ps->feat[f]];
  return n ? (double)hit / (double)n : 0.0;
}

static void test_structure(void **state) {
  (void)state;
  ar_gen_spec g = small_spec();
  const uint64_t seed = 2024;
  char tr[512], te[512];
  snprintf(tr, sizeof tr, "%s", tu_path("s_train.txt"));
  snprintf(te, sizeof te, "%s", tu_path("s_test.txt"));
  gen_ok(&g, seed, tr, te);
  point_set train, test;
  load_points(tr, &g, g.train_points, &train);
  load_points(te, &g, g.test_points, &test);

  /* Prototype overlap: own labels vs another point's labels. */
  unsigned char *mark = malloc((size_t)g.features);
  double own = 0, other = 0;
  for (int64_t i = 0; i < train.n; i++) {
    own += proto_overlap(&train, &g, seed, i, i, mark);
    other += proto_overlap(&train, &g, seed, i, (i + 1) % train.n, mark);
  }
  own /= (double)train.n;
  other /= (double)train.n;
  print_message("prototype overlap: own labels %.3f, other point's labels %.3f\n", own,
                other);
  /* Expected a little under (1 - noise) + chance: prototype draws repeat
   * more often than noise draws, and repeats collapse. */
  assert_true(own > 0.7);
  assert_true(other < 0.25);
  assert_true(own > 4 * other);
  free(mark);

  /* Popularity: the head labels are far more frequent than the tail. */
  int64_t count[50] = {0};
  for (int64_t a = 0; a < train.lab_ptr[train.n]; a++)
    count[train.lab[a]]++;
  int64_t head = 0, tail = 0;
  for (int l = 0; l < 5; l++) {
    head += count[l];
    tail += count[45 + l];
  }
  print_message("label frequency: labels 0-4 %lld, labels 45-49 %lld\n", (long long)head,
                (long long)tail);
  assert_true(head > 3 * tail);

  /* Learnability: nearest centroid (feature counts per label, normalised
   * by label frequency), precision@1 on the test split. */
  double *cent = calloc((size_t)(g.labels * g.features), sizeof *cent);
  for (int64_t i = 0; i < train.n; i++)
    for (int64_t a = train.lab_ptr[i]; a < train.lab_ptr[i + 1]; a++)
      for (int64_t f = train.feat_ptr[i]; f < train.feat_ptr[i + 1]; f++)
        cent[train.lab[a] * g.features + train.feat[f]] += 1.0;
  int64_t best_label = 0;
  for (int l = 1; l < 50; l++)
    if (count[l] > count[best_label])
      best_label = l;
  int64_t hits = 0, base = 0;
  for (int64_t i = 0; i < test.n; i++) {
    double best = -1;
    int64_t arg = 0;
    for (int64_t l = 0; l < g.labels; l++) {
      double sc = 0;
      for (int64_t f = test.feat_ptr[i]; f < test.feat_ptr[i + 1]; f++)
        sc += cent[l * g.features + test.feat[f]];
      sc /= (double)(count[l] + 1);
      if (sc > best) {
        best = sc;
        arg = l;
      }
    }
    for (int64_t a = test.lab_ptr[i]; a < test.lab_ptr[i + 1]; a++) {
      hits += test.lab[a] == arg;
      base += test.lab[a] == best_label;
    }
  }
  double p1 = (double)hits / (double)test.n, p1_base = (double)base / (double)test.n;
  print_message("nearest centroid P@1 %.3f, most-frequent-label P@1 %.3f\n", p1, p1_base);
  assert_true(p1 > 0.7);
  assert_true(p1 > 4 * p1_base);
  free(cent);
  free_points(&train);
  free_points(&test);
}

/* The Amazon-670K shape (135,909 features, 670,091 labels): tables stay
 * small, ids stay in range and generation is fast. */
static void test_amazon_shape(void **state) {
  (void)state;
  ar_gen_spec g;
  memset(&g, 0, sizeof g);
  g.train_points = 5000;
  g.test_points = 1000;
  g.features = 135909;
  g.labels = 670091;
  g.nnz = 75;
  g.labels_per_point = 5;
  g.noise = 0.1;
  char tr[512], te[512];
  snprintf(tr, sizeof tr, "%s", tu_path("amz_train.txt"));
  snprintf(te, sizeof te, "%s", tu_path("amz_test.txt"));
  double t0 = ar_now();
  gen_ok(&g, 1, tr, te);
  double dt = ar_now() - t0;
  print_message("6000 Amazon-670K-shaped points in %.3f s\n", dt);
  point_set ps;
  load_points(tr, &g, g.train_points, &ps);
  free_points(&ps);
  unlink(tr);
  unlink(te);
}

static void test_errors(void **state) {
  (void)state;
  ar_gen_spec g = small_spec();
  ar_err err = AR_ERR_INIT;
  /* Bad specs. */
  ar_gen_spec bad = g;
  bad.noise = 1.5;
  assert_int_equal(ar_data_generate(&bad, 1, tu_path("x.txt"), NULL, NULL, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "noise"));
  bad = g;
  bad.labels = 0;
  assert_int_equal(ar_data_generate(&bad, 1, tu_path("x.txt"), NULL, NULL, &err), AR_INVALID);
  bad = g;
  bad.labels_per_point = 0;
  assert_int_equal(ar_data_generate(&bad, 1, tu_path("x.txt"), NULL, NULL, &err), AR_INVALID);
  assert_int_equal(ar_data_generate(&g, 1, NULL, NULL, NULL, &err), AR_INVALID);
  /* A folder that does not exist. */
  assert_int_equal(ar_data_generate(&g, 1, tu_path("no/such/dir/t.txt"), NULL, NULL, &err),
                   AR_NOTFOUND);
  /* The final rename fails (a folder has the name): the temporary file is
   * removed and the folder untouched. */
  const char *dir = tu_path("adir");
  char dirpath[512];
  snprintf(dirpath, sizeof dirpath, "%s", dir);
  assert_int_equal(mkdir(dirpath, 0755), 0);
  assert_int_equal(ar_data_generate(&g, 1, dirpath, NULL, NULL, &err), AR_IO);
  assert_non_null(strstr(err.msg, "rename"));
  assert_no_temp_files();
  struct stat st;
  assert_int_equal(stat(dirpath, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  rmdir(dirpath);
  /* Tiny edge shapes: one label, no features, more labels asked than exist. */
  ar_gen_spec e = g;
  e.labels = 1;
  e.labels_per_point = 3;
  e.nnz = 0;
  e.train_points = 10;
  gen_ok(&e, 3, tu_path("edge.txt"), NULL);
  size_t n;
  char *t = tu_slurp(tu_path("edge.txt"), &n);
  assert_non_null(t);
  assert_true(strncmp(t, "10 1000 1\n0\n0\n", 14) == 0);
  free(t);
}

static void stats_equal(const ar_data_stats *a, const ar_data_stats *b, const char *what) {
  if (a->points != b->points || a->features != b->features || a->labels != b->labels ||
      a->max_nnz != b->max_nnz || a->max_labels != b->max_labels ||
      a->total_nnz != b->total_nnz || a->total_labels != b->total_labels ||
      a->empty_label_rows != b->empty_label_rows)
    fail_msg("%s: in memory points %lld nnz %lld/%lld labels %lld/%lld; the file says "
             "points %lld nnz %lld/%lld labels %lld/%lld", what, (long long)a->points,
             (long long)a->max_nnz, (long long)a->total_nnz, (long long)a->max_labels,
             (long long)a->total_labels, (long long)b->points, (long long)b->max_nnz,
             (long long)b->total_nnz, (long long)b->max_labels, (long long)b->total_labels);
}

/* The generator run in memory says exactly what reading its files says
 * (every field of ar_data_stats, both splits), for ordinary shapes, one
 * with many repeated feature draws (few features), all noise, the edge of
 * one label and no features, and the Amazon-670K shape; and writes
 * nothing. */
static void test_stats_in_memory(void **state) {
  (void)state;
  ar_gen_spec shapes[5];
  shapes[0] = small_spec();
  shapes[1] = small_spec();
  shapes[1].features = 30;
  shapes[1].nnz = 40;
  shapes[2] = small_spec();
  shapes[2].noise = 1.0;
  shapes[2].labels_per_point = 7;
  shapes[3] = small_spec();
  shapes[3].labels = 1;
  shapes[3].labels_per_point = 3;
  shapes[3].nnz = 0;
  shapes[3].test_points = 0;
  memset(&shapes[4], 0, sizeof shapes[4]);
  shapes[4].train_points = 3000;
  shapes[4].test_points = 300;
  shapes[4].features = 135909;
  shapes[4].labels = 670091;
  shapes[4].nnz = 77;
  shapes[4].labels_per_point = 5;
  for (int k = 0; k < 5; k++) {
    const ar_gen_spec *g = &shapes[k];
    ar_data_stats mtr, mte;
    ar_err err = AR_ERR_INIT;
    int files_before = 0;
    DIR *d = opendir(tu_dir);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
      files_before++;
    closedir(d);
    assert_int_equal(ar_data_generate_stats(g, 40 + (uint64_t)k, &mtr, &mte, &err), AR_OK);
    int files_after = 0;
    d = opendir(tu_dir);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
      files_after++;
    closedir(d);
    assert_int_equal(files_before, files_after);
    char tr[512], te[512];
    snprintf(tr, sizeof tr, "%s", tu_path("st_train.txt"));
    snprintf(te, sizeof te, "%s", tu_path("st_test.txt"));
    gen_ok(g, 40 + (uint64_t)k, tr, g->test_points ? te : NULL);
    ar_reader_opts ro = AR_READER_OPTS_INIT;
    ar_reader *r = NULL;
    assert_int_equal(ar_reader_open(tr, &ro, &r, &err), AR_OK);
    stats_equal(&mtr, ar_reader_stats(r), "train");
    ar_reader_close(r);
    if (g->test_points) {
      assert_int_equal(ar_reader_open(te, &ro, &r, &err), AR_OK);
      stats_equal(&mte, ar_reader_stats(r), "test");
      ar_reader_close(r);
    } else {
      assert_int_equal(mte.points, 0);
      assert_int_equal(mte.max_nnz, 0);
    }
    print_message("shape %d: train %lld points, at most %lld features and %lld labels a row\n",
                  k, (long long)mtr.points, (long long)mtr.max_nnz, (long long)mtr.max_labels);
    unlink(tr);
    unlink(te);
  }
  ar_gen_spec bad = small_spec();
  bad.noise = -1;
  ar_err err = AR_ERR_INIT;
  ar_data_stats x;
  assert_int_equal(ar_data_generate_stats(&bad, 1, &x, NULL, &err), AR_INVALID);
}

static void test_alloc_failures(void **state) {
  (void)state;
  ar_gen_spec g = small_spec();
  g.train_points = 50;
  g.test_points = 10;
  int ok = 0;
  for (long n = 0; n < 100 && !ok; n++) {
    ar_err err = AR_ERR_INIT;
    unlink(tu_path("oom_train.txt"));
    unlink(tu_path("oom_test.txt"));
    ar_alloc_fail_after(n);
    ar_status st =
        ar_data_generate(&g, 1, tu_path("oom_train.txt"), tu_path("oom_test.txt"), NULL, &err);
    ar_alloc_fail_after(-1);
    assert_no_temp_files();
    if (st == AR_OK) {
      ok = 1;
    } else {
      assert_int_equal(st, AR_NOMEM);
      assert_true(access(tu_path("oom_test.txt"), F_OK) != 0);
    }
  }
  assert_true(ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deterministic),   cmocka_unit_test(test_structure),
      cmocka_unit_test(test_amazon_shape),    cmocka_unit_test(test_errors),
      cmocka_unit_test(test_alloc_failures),
      cmocka_unit_test(test_stats_in_memory),
  };
  return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
