/* Files through an identity (include/accelrt/fs.h): planted links and
 * special files are refused, opening never blocks, atomic writes leave
 * either the old or the new file, and a folder fs never leads outside. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accelrt/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

static const char *at(const char *name) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ & 3];
  snprintf(b, 512, "%s/%s", root, name);
  return b;
}

static void put_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static char *slurp(const char *path) {
  static char buf[4096];
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static int setup(void **state) {
  (void)state;
  snprintf(root, sizeof root, "/tmp/accelrt-fs-XXXXXX");
  return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_read_refuses_special_files(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  int fd = -1;
  /* A FIFO with no writer: refused at once instead of blocking. */
  assert_int_equal(mkfifo(at("fifo"), 0600), 0);
  assert_int_equal(ar_fs_open_read(NULL, at("fifo"), &fd, &err), AR_IO);
  assert_non_null(strstr(err.msg, "a FIFO"));
  assert_int_equal(fd, -1);
  assert_int_equal(ar_fs_open_read(NULL, "/dev/zero", &fd, &err), AR_IO);
  assert_non_null(strstr(err.msg, "a character device"));
  assert_int_equal(ar_fs_open_read(NULL, root, &fd, &err), AR_IO);
  assert_non_null(strstr(err.msg, "a folder"));
  assert_int_equal(ar_fs_open_read(NULL, at("missing"), &fd, &err), AR_NOTFOUND);
  assert_non_null(strstr(err.msg, "missing"));
  /* A regular file opens, blocking again. */
  put_text(at("data"), "hello\n");
  assert_int_equal(ar_fs_open_read(NULL, at("data"), &fd, &err), AR_OK);
  assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  close(fd);
  assert_true(ar_fs_readable(NULL, at("data")));
  assert_false(ar_fs_readable(NULL, at("fifo")));
  char *buf;
  size_t len;
  assert_int_equal(ar_fs_read_all(NULL, at("data"), 6, &buf, &len, &err), AR_OK);
  assert_int_equal(len, 6);
  assert_string_equal(buf, "hello\n");
  ar_free(buf);
  assert_int_equal(ar_fs_read_all(NULL, at("data"), 5, &buf, &len, &err), AR_RANGE);
  assert_null(buf);
}

static void test_write_refuses_planted_links(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  put_text(at("victim"), "precious\n");
  assert_int_equal(symlink(at("victim"), at("metrics.jsonl")), 0);
  FILE *f = NULL;
  assert_int_equal(ar_fs_open_write(NULL, at("metrics.jsonl"), true, &f, &err), AR_IO);
  assert_null(f);
  assert_non_null(strstr(err.msg, "symbolic link"));
  assert_int_equal(ar_fs_open_write(NULL, at("metrics.jsonl"), false, &f, &err), AR_IO);
  assert_string_equal(slurp(at("victim")), "precious\n");
  /* A FIFO planted where an output goes: refused, not blocked on. */
  assert_int_equal(mkfifo(at("out.fifo"), 0600), 0);
  assert_int_equal(ar_fs_open_write(NULL, at("out.fifo"), true, &f, &err), AR_IO);
  /* Reading back what the job wrote: a planted link is not followed. */
  int fd = -1;
  assert_int_equal(ar_fs_open_own(NULL, at("metrics.jsonl"), &fd, &err), AR_IO);
  assert_int_equal(fd, -1);
  assert_false(ar_fs_readable_own(NULL, at("metrics.jsonl")));
  assert_true(ar_fs_readable(NULL, at("metrics.jsonl")));
  char *buf = NULL;
  size_t len;
  assert_int_equal(ar_fs_read_own(NULL, at("metrics.jsonl"), 100, &buf, &len, &err), AR_IO);
  assert_null(buf);
  /* A plain file: truncated or appended. */
  put_text(at("log"), "old\n");
  assert_int_equal(ar_fs_open_write(NULL, at("log"), true, &f, &err), AR_OK);
  fputs("new\n", f);
  fclose(f);
  assert_string_equal(slurp(at("log")), "old\nnew\n");
  assert_int_equal(ar_fs_open_write(NULL, at("log"), false, &f, &err), AR_OK);
  fputs("only\n", f);
  fclose(f);
  assert_string_equal(slurp(at("log")), "only\n");
}

static void test_atomic(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_fs_mkdirs(NULL, at("a/b/c"), &err), AR_OK);
  assert_int_equal(ar_fs_mkdirs(NULL, at("a/b/c"), &err), AR_OK);
  /* The old fixed temporary name, planted as a link: never written through. */
  put_text(at("victim2"), "precious\n");
  assert_int_equal(symlink(at("victim2"), at("a/summary.json.tmp")), 0);
  assert_int_equal(ar_fs_write_atomic(NULL, at("a/summary.json"), "{}\n", 3, &err), AR_OK);
  assert_string_equal(slurp(at("a/summary.json")), "{}\n");
  assert_string_equal(slurp(at("victim2")), "precious\n");
  /* The target itself a link: replaced by the rename, its target kept. */
  assert_int_equal(symlink(at("victim2"), at("a/x.json")), 0);
  assert_int_equal(ar_fs_write_atomic(NULL, at("a/x.json"), "1", 1, &err), AR_OK);
  struct stat sb;
  assert_int_equal(lstat(at("a/x.json"), &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_string_equal(slurp(at("victim2")), "precious\n");
  /* Abort leaves the old file and no temporary. */
  int before = count_entries(at("a"));
  ar_fs_atomic a;
  assert_int_equal(ar_fs_atomic_begin(NULL, at("a/summary.json"), &a, &err), AR_OK);
  fputs("half", a.f);
  ar_fs_atomic_abort(&a);
  assert_int_equal(count_entries(at("a")), before);
  assert_string_equal(slurp(at("a/summary.json")), "{}\n");
  /* Unlink: files and empty folders; a missing one is fine. */
  assert_int_equal(ar_fs_unlink(NULL, at("a/b/c"), true, &err), AR_OK);
  assert_int_equal(ar_fs_unlink(NULL, at("a/b/c"), true, &err), AR_OK);
  assert_int_equal(ar_fs_unlink(NULL, at("a/x.json"), false, &err), AR_OK);
  assert_int_equal(lstat(at("a/x.json"), &sb), -1);
}

static void test_beneath(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(mkdir(at("state"), 0700), 0);
  put_text(at("outside"), "secret\n");
  int dfd = open(at("state"), O_RDONLY | O_DIRECTORY);
  assert_true(dfd >= 0);
  ar_fs *fs = NULL;
  assert_int_equal(ar_fs_beneath(dfd, NULL, &fs, &err), AR_OK);
  close(dfd);
  assert_int_equal(ar_fs_mkdirs(fs, "jobs/1", &err), AR_OK);
  assert_int_equal(ar_fs_write_atomic(fs, "jobs/1/meta", "id 1\n", 5, &err), AR_OK);
  assert_string_equal(slurp(at("state/jobs/1/meta")), "id 1\n");
  char *buf;
  size_t len;
  assert_int_equal(ar_fs_read_all(fs, "jobs/1/meta", 100, &buf, &len, &err), AR_OK);
  ar_free(buf);
  /* No way out: "..", absolute paths, symlinks (to a file or a folder). */
  assert_int_not_equal(ar_fs_read_all(fs, "../outside", 100, &buf, &len, &err), AR_OK);
  assert_int_not_equal(ar_fs_read_all(fs, at("outside"), 100, &buf, &len, &err), AR_OK);
  assert_int_equal(symlink(at("outside"), at("state/jobs/1/log")), 0);
  assert_int_not_equal(ar_fs_read_all(fs, "jobs/1/log", 100, &buf, &len, &err), AR_OK);
  FILE *f = NULL;
  assert_int_not_equal(ar_fs_open_write(fs, "jobs/1/log", true, &f, &err), AR_OK);
  assert_int_equal(symlink(root, at("state/jobs/2")), 0);
  assert_int_not_equal(ar_fs_write_atomic(fs, "jobs/2/outside", "x", 1, &err), AR_OK);
  assert_int_not_equal(ar_fs_mkdirs(fs, "jobs/2/sub", &err), AR_OK);
  assert_int_not_equal(ar_fs_unlink(fs, "jobs/2/outside", false, &err), AR_OK);
  assert_string_equal(slurp(at("outside")), "secret\n");
  struct stat sb;
  assert_int_equal(stat(at("sub"), &sb), -1);
  ar_fs_destroy(fs);
  ar_fs_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_refuses_special_files),
      cmocka_unit_test(test_write_refuses_planted_links),
      cmocka_unit_test(test_atomic),
      cmocka_unit_test(test_beneath),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
