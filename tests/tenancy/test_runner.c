/*
 * tenancy: the multi-job runner with synthetic jobs.  Each fake job fills
 * its persistent block with a pattern at start and checks every byte of it
 * at every iteration (so a defragmentation that loses or misplaces a byte
 * fails the job), writes its id over its lane at every iteration and
 * checks it is still there at the end of the iteration (so two iterations
 * sharing a lane at once fail), and registers the ranges it uses in a
 * global table that refuses any overlap between jobs (so admission never
 * overcommits the arena).  It also notes the device handle it was started
 * on and counts iterations running on each handle at once (a handle
 * serves one thread at a time).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tenancy_impl.h"

#define KiB ((size_t)1024)

typedef struct fake {
  int id;
  size_t P, E;
  uint64_t iters, done;
  uint64_t fail_at;   /* fail at this iteration (1-based); 0 never */
  uint64_t cancel_at; /* cancel itself at this iteration */
  uint64_t stop_at;   /* stop the runner at this iteration */
  unsigned spin_us;   /* busy work per iteration */
  ar_runner *r;
  size_t index;
  unsigned char *pers, *eph;
  ar_device *dev; /* the handle it was started on */
  int starts, finishes, interrupted, closes, rebases, corrupt;
  int progress_calls; /* f_progress */
  double idle_report; /* f_idle_s: seconds of each step it says it waited */
  uint64_t seq[32];   /* the runner-wide order of its first 32 steps */
  /* The block it had before its last rebase, and the most pages of it
   * found resident at a later step (-1: never looked). */
  unsigned char *old_pers;
  long vacated_resident;
} fake;

static atomic_ulong step_seq; /* steps of all fakes so far */

/* ---- iterations at once per device handle ------------------------------ */

static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  ar_device *dev;
  int active;
} dev_use[64];
static int ndev_use, dev_clashes;

static void dev_enter(ar_device *d, int delta) {
  pthread_mutex_lock(&dev_mu);
  int i = 0;
  while (i < ndev_use && dev_use[i].dev != d)
    i++;
  if (i == ndev_use && ndev_use < 64)
    dev_use[ndev_use++].dev = d;
  if (i < ndev_use) {
    dev_use[i].active += delta;
    if (dev_use[i].active > 1)
      dev_clashes++;
  }
  pthread_mutex_unlock(&dev_mu);
}

/* ---- the overlap registry --------------------------------------------- */

typedef struct range {
  const void *lo, *hi;
  int owner;
  int kind; /* 0 persistent, 1 ephemeral */
} range;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static range reg[4096];
static int nreg, overlaps;

/* Sets (replaces) a range of owner; checks nothing (a defragmentation
 * rebases jobs one at a time, so ranges overlap stale ones meanwhile). */
static void reg_set(int owner, int kind, const void *p, size_t n) {
  pthread_mutex_lock(&reg_mu);
  int i = 0;
  while (i < nreg && !(reg[i].owner == owner && reg[i].kind == kind))
    i++;
  if (i == nreg && nreg < 4096)
    nreg++;
  if (i < nreg)
    reg[i] = (range){p, (const char *)p + n, owner, kind};
  pthread_mutex_unlock(&reg_mu);
}

/* Counts overlaps of owner's ranges with other owners' ranges. */
static void reg_check(int owner) {
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nreg; i++)
    for (int k = 0; k < nreg; k++)
      if (reg[i].owner == owner && reg[k].owner != owner &&
          (const char *)reg[i].lo < (const char *)reg[k].hi &&
          (const char *)reg[k].lo < (const char *)reg[i].hi)
        overlaps++;
  pthread_mutex_unlock(&reg_mu);
}

static void reg_del(int owner, int kind) {
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nreg; i++)
    if (reg[i].owner == owner && reg[i].kind == kind)
      reg[i--] = reg[--nreg];
  pthread_mutex_unlock(&reg_mu);
}

/* ---- the fake job ------------------------------------------------------ */

static unsigned char pattern(int id, size_t i) {
  return (unsigned char)(id * 131 + i * 7 + (i >> 8));
}

static ar_status f_start(void *job, ar_device *dev, void *p, void *e, ar_err *err) {
  fake *f = job;
  f->dev = dev;
  f->starts++;
  if (((uintptr_t)p & 255) || ((uintptr_t)e & 255))
    return ar_errf(err, AR_INVALID, "blocks not 256-byte aligned");
  f->pers = p;
  f->eph = e;
  for (size_t i = 0; i < f->P; i++)
    f->pers[i] = pattern(f->id, i);
  reg_set(f->id, 0, f->pers, f->P);
  reg_check(f->id);
  return AR_OK;
}

static void spin(unsigned us) {
  double t = ar_now() + us * 1e-6;
  while (ar_now() < t)
    ;
}

static ar_status f_step_on(fake *f, ar_err *err);

static ar_status f_step(void *job, ar_err *err) {
  fake *f = job;
  dev_enter(f->dev, +1);
  ar_status st = f_step_on(f, err);
  dev_enter(f->dev, -1);
  return st;
}

/* Resident pages of the whole pages inside [p, p + n). */
static long resident_pages(const void *p, size_t n) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + n) & ~(page - 1);
  if (hi <= lo)
    return 0;
  size_t np = (hi - lo) / page;
  unsigned char *v = malloc(np);
  if (!v || mincore((void *)lo, hi - lo, v) != 0) {
    free(v);
    return -2;
  }
  long k = 0;
  for (size_t i = 0; i < np; i++)
    k += v[i] & 1;
  free(v);
  return k;
}

static ar_status f_step_on(fake *f, ar_err *err) {
  if (f->old_pers) { /* no job holds the place it left (test_host_pages_returned) */
    long k = resident_pages(f->old_pers, f->P);
    if (k > f->vacated_resident)
      f->vacated_resident = k;
  }
  for (size_t i = 0; i < f->P; i++)
    if (f->pers[i] != pattern(f->id, i)) {
      f->corrupt++;
      return ar_errf(err, AR_CORRUPT, "job %d: persistent byte %zu lost", f->id, i);
    }
  reg_set(f->id, 1, f->eph, f->E);
  reg_check(f->id);
  memset(f->eph, f->id & 0xff, f->E);
  spin(f->spin_us);
  for (size_t i = 0; i < f->E; i++)
    if (f->eph[i] != (unsigned char)(f->id & 0xff)) {
      f->corrupt++;
      reg_del(f->id, 1);
      return ar_errf(err, AR_CORRUPT, "job %d: its lane was written during its iteration",
                     f->id);
    }
  reg_del(f->id, 1);
  if (f->done < 32)
    f->seq[f->done] = atomic_fetch_add(&step_seq, 1);
  f->done++;
  if (f->cancel_at && f->done == f->cancel_at)
    ar_runner_cancel(f->r, f->index);
  if (f->stop_at && f->done == f->stop_at)
    ar_runner_stop(f->r);
  if (f->fail_at && f->done == f->fail_at)
    return ar_errf(err, AR_RANGE, "iteration %llu: the loss became nan",
                   (unsigned long long)f->done);
  return AR_OK;
}

static bool f_done(void *job) {
  fake *f = job;
  return f->done >= f->iters;
}

static void f_rebase(void *job, void *p, void *e) {
  fake *f = job;
  f->rebases++;
  if (p) {
    f->old_pers = f->pers;
    f->pers = p;
    reg_set(f->id, 0, f->pers, f->P);
  }
  if (e)
    f->eph = e;
}

static ar_status f_finish(void *job, bool interrupted, ar_err *err) {
  (void)err;
  fake *f = job;
  f->finishes++;
  f->interrupted += interrupted;
  return AR_OK;
}

static void f_close(void *job) {
  fake *f = job;
  f->closes++;
  reg_del(f->id, 0);
  reg_del(f->id, 1);
}

/* A fake iteration trains FAKE_BATCH samples; loss 1/n after its n-th
 * iteration here. */
#define FAKE_BATCH 10
static void f_progress(void *job, double *loss, uint64_t *samples) {
  fake *f = job;
  f->progress_calls++;
  *loss = f->done ? 1.0 / (double)f->done : NAN;
  *samples = FAKE_BATCH * (uint64_t)f->done;
}

static double f_idle_s(void *job) { return ((fake *)job)->idle_report; }

static const ar_tjob_fns fake_fns = {f_start,  f_step,  f_done,     f_rebase,
                                     f_finish, f_close, f_progress, f_idle_s};
/* The same job, reporting neither loss nor samples nor waits. */
static const ar_tjob_fns silent_fns = {f_start,  f_step,  f_done, f_rebase,
                                       f_finish, f_close, NULL,   NULL};

/* ---- helpers ------------------------------------------------------------ */

static ar_runner *make_runner(const char *policy, size_t capacity, int defrag,
                               const char *out_dir) {
  ar_runner_opts o = AR_RUNNER_OPTS_INIT;
  o.policy = policy;
  o.capacity = capacity;
  o.device = "host";
  o.threads = 2;
  o.defrag = defrag;
  o.out_dir = out_dir;
  ar_runner *r = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_runner_create(&o, &r, &err) != AR_OK)
    fail_msg("runner: %s", err.msg);
  return r;
}

static void add(ar_runner *r, fake *f, double arrival) {
  char name[32];
  snprintf(name, sizeof name, "f%d", f->id);
  ar_tjob_desc d = {name, NULL, f->P, f->E, f->iters, 0, 0, 0, arrival, f, &fake_fns, NULL};
  f->r = r;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_runner_add(r, &d, &f->index, &err), AR_OK);
}

static void run(ar_runner *r) {
  ar_err err = AR_ERR_INIT;
  if (ar_runner_run(r, &err) != AR_OK)
    fail_msg("run: %s", err.msg);
}

static ar_tjob_result result(ar_runner *r, size_t i) {
  ar_tjob_result res;
  assert_int_equal(ar_runner_result(r, i, &res), AR_OK);
  return res;
}

static const char *policies[] = {"fifo", "pack", "srtf", "fair", "priority"};

/* ---- tests -------------------------------------------------------------- */

/* Random mixes under every policy: every job ends done, runs exactly its
 * iterations, is started, finished and closed once; no two jobs ever use
 * the same byte; memory never exceeds the capacity. */
static void test_random_mixes(void **state) {
  (void)state;
  for (int p = 0; p < 5; p++) {
    for (uint64_t seed = 1; seed <= 12; seed++) {
      ar_rng g;
      ar_rng_seed(&g, seed, (uint64_t)p);
      size_t cap = 64 * KiB + (size_t)ar_rng_below(&g, 64) * KiB;
      int n = 4 + (int)ar_rng_below(&g, 8);
      fake f[12];
      memset(f, 0, sizeof f);
      ar_runner *r = make_runner(policies[p], cap, (int)ar_rng_below(&g, 3), NULL);
      overlaps = 0;
      for (int i = 0; i < n; i++) {
        f[i].id = i + 1;
        f[i].P = 1 + (size_t)ar_rng_below(&g, cap / 4);
        f[i].E = 1 + (size_t)ar_rng_below(&g, cap / 4);
        f[i].iters = 1 + ar_rng_below(&g, 12);
        add(r, &f[i], (double)ar_rng_below(&g, 3) * 1e-3);
      }
      run(r);
      ar_runner_summary s;
      ar_runner_summary_get(r, &s);
      for (int i = 0; i < n; i++) {
        ar_tjob_result res = result(r, (size_t)i);
        if (res.state != AR_TJ_DONE)
          fail_msg("%s seed %llu job %d: %s %s", policies[p], (unsigned long long)seed, i,
                   ar_tjob_state_name(res.state), res.error);
        assert_int_equal(res.iterations, f[i].iters);
        assert_int_equal(f[i].done, f[i].iters);
        assert_int_equal(f[i].starts, 1);
        assert_int_equal(f[i].finishes, 1);
        assert_int_equal(f[i].interrupted, 0);
        assert_int_equal(f[i].corrupt, 0);
        assert_true(res.queue_s >= 0 && res.jct_s >= res.queue_s);
        assert_true(res.lane > 0);
      }
      assert_int_equal(overlaps, 0);
      assert_true(s.max_memory_bytes <= s.capacity_bytes);
      assert_int_equal(s.failed, 0);
      ar_runner_destroy(r);
      for (int i = 0; i < n; i++)
        assert_int_equal(f[i].closes, 1);
    }
  }
}

/* fair charges a job the device's part of its steps: one whose steps
 * report their whole time as waits (a distributed worker's MPI waits) is
 * charged nothing, so its lane's other job, charged its steps, gets no
 * second turn before the first job's last (charged alike they take turns);
 * each job's device_s is its busy time less the waits it reported. */
static void test_fair_charges_device_time(void **state) {
  (void)state;
  fake f[2];
  memset(f, 0, sizeof f);
  ar_runner *r = make_runner("fair", 1 << 20, 1, NULL);
  for (int i = 0; i < 2; i++) {
    f[i] = (fake){.id = i + 1, .P = 1000, .E = 2000, .iters = 6, .spin_us = 1000};
    add(r, &f[i], 0);
  }
  f[0].idle_report = 1e9; /* more than any step: charged 0 */
  run(r);
  ar_tjob_result a = result(r, 0), b = result(r, 1);
  assert_int_equal(a.state, AR_TJ_DONE);
  assert_int_equal(b.state, AR_TJ_DONE);
  assert_int_equal(a.lane, b.lane);
  assert_true(a.busy_s > 0 && a.device_s == 0);
  assert_true(b.busy_s > 0 && b.device_s == b.busy_s);
  if (!(f[1].seq[1] > f[0].seq[5]))
    fail_msg("the job charged its steps got its second turn (step %lu) before the other's "
             "last (step %lu)", (unsigned long)f[1].seq[1], (unsigned long)f[0].seq[5]);
  ar_runner_destroy(r);

  /* Charged alike, they take turns. */
  memset(f, 0, sizeof f);
  r = make_runner("fair", 1 << 20, 1, NULL);
  for (int i = 0; i < 2; i++) {
    f[i] = (fake){.id = i + 1, .P = 1000, .E = 2000, .iters = 6, .spin_us = 1000};
    add(r, &f[i], 0);
  }
  run(r);
  assert_true(f[1].seq[1] < f[0].seq[5]);
  ar_runner_destroy(r);
}

/* fifo runs jobs one at a time in arrival order: each starts after the
 * previous one ended, and nothing shares its lane. */
static void test_fifo_order(void **state) {
  (void)state;
  fake f[4];
  memset(f, 0, sizeof f);
  ar_runner *r = make_runner("fifo", 1 << 20, 1, NULL);
  for (int i = 0; i < 4; i++) {
    f[i] = (fake){.id = i + 1, .P = 1000, .E = 2000, .iters = (uint64_t)(6 - i)};
    add(r, &f[i], 0.0005 * i);
  }
  run(r);
  for (int i = 1; i < 4; i++) {
    ar_tjob_result a = result(r, (size_t)i - 1), b = result(r, (size_t)i);
    assert_true(b.first_s >= a.end_s);
    assert_int_equal(b.switches, 0);
  }
  ar_runner_destroy(r);
}

/* srtf in one lane: the shortest job ends before the longest, though it
 * arrived after it (a preemption at an iteration boundary). */
static void test_srtf_short_first(void **state) {
  (void)state;
  fake f[3];
  memset(f, 0, sizeof f);
  ar_runner *r = make_runner("srtf", 1 << 20, 1, NULL);
  const uint64_t iters[3] = {150, 40, 6};
  for (int i = 0; i < 3; i++) {
    f[i] = (fake){.id = i + 1, .P = 512, .E = 4096, .iters = iters[i], .spin_us = 300};
    add(r, &f[i], 0.002 * i);
  }
  run(r);
  ar_tjob_result a = result(r, 0), b = result(r, 1), c = result(r, 2);
  assert_int_equal(a.lane, c.lane); /* one lane, time-shared */
  assert_true(c.end_s < a.end_s);
  assert_true(b.end_s < a.end_s);
  assert_true(c.switches > 0 || a.switches > 0);
  ar_runner_destroy(r);
}

/* A failing job (an error at its third iteration) ends alone. */
static void test_failure_alone(void **state) {
  (void)state;
  for (int p = 0; p < 5; p++) {
    fake f[3];
    memset(f, 0, sizeof f);
    ar_runner *r = make_runner(policies[p], 1 << 20, 1, NULL);
    for (int i = 0; i < 3; i++) {
      f[i] = (fake){.id = i + 1, .P = 3000, .E = 5000, .iters = 8};
      if (i == 1)
        f[i].fail_at = 3;
      add(r, &f[i], 0);
    }
    run(r);
    ar_tjob_result bad = result(r, 1);
    assert_int_equal(bad.state, AR_TJ_FAILED);
    assert_non_null(strstr(bad.error, "nan"));
    assert_int_equal(bad.iterations, 3);
    assert_int_equal(f[1].finishes, 0); /* a failed job is not checkpointed */
    for (int i = 0; i < 3; i += 2) {
      assert_int_equal(result(r, (size_t)i).state, AR_TJ_DONE);
      assert_int_equal(f[i].done, 8);
    }
    ar_runner_summary s;
    ar_runner_summary_get(r, &s);
    assert_int_equal(s.failed, 1);
    ar_runner_destroy(r);
    for (int i = 0; i < 3; i++)
      assert_int_equal(f[i].closes, 1);
  }
}

/* Defragmentation: a hole in the middle of the persistent region must be
 * closed before a large waiting job fits; every persistent byte of the
 * jobs that moved survives (their steps check it), they learn their new
 * addresses, and the waiting job runs. */
static void test_defrag_moves_bytes(void **state) {
  (void)state;
  for (int mode = 1; mode <= 2; mode++) {
    fake f[4];
    memset(f, 0, sizeof f);
    /* 40 KiB: A (8 KiB, short), B (8 KiB, long), lanes of 4 KiB; when A
     * leaves its block is a hole below B; C needs 20 KiB persistent, which
     * fits only once B slid down. */
    ar_runner *r = make_runner("pack", 40 * KiB, mode, NULL);
    f[0] = (fake){.id = 1, .P = 8 * KiB, .E = 4 * KiB, .iters = 2};
    f[1] = (fake){.id = 2, .P = 8 * KiB, .E = 4 * KiB, .iters = 400, .spin_us = 50};
    f[2] = (fake){.id = 3, .P = 20 * KiB, .E = 4 * KiB, .iters = 3};
    add(r, &f[0], 0);
    add(r, &f[1], 0);
    add(r, &f[2], 0.001);
    run(r);
    ar_runner_summary s;
    ar_runner_summary_get(r, &s);
    for (int i = 0; i < 3; i++) {
      ar_tjob_result res = result(r, (size_t)i);
      if (res.state != AR_TJ_DONE)
        fail_msg("mode %d job %d: %s %s", mode, i, ar_tjob_state_name(res.state), res.error);
      assert_int_equal(f[i].corrupt, 0);
    }
    assert_true(s.defrags >= 1);
    assert_true(s.defrag_bytes_moved >= 8 * KiB);
    assert_true(f[1].rebases >= 1);
    assert_true(result(r, 2).admit_s >= result(r, 0).end_s);
    ar_runner_destroy(r);
  }
}

/* On the host the arena's free pages go back to the kernel: the block a
 * job left when it ended and the place a defragmentation moved a block
 * from are not resident afterwards, nor is anything once every job ended
 * (the runner keeps the arena until it is destroyed).  The arena is under
 * the 8 MiB from which the host asks for transparent huge pages, which
 * khugepaged could fill back in at any time. */
static void test_host_pages_returned(void **state) {
  (void)state;
  const size_t MiB = 1024 * KiB;
  fake f[2];
  memset(f, 0, sizeof f);
  /* A (1 MiB, short) below B (1 MiB, long); when A leaves, defrag 2
   * compacts at once: B slides down onto A's place. */
  ar_runner *r = make_runner("pack", 6 * MiB, 2, NULL);
  f[0] = (fake){.id = 1, .P = MiB, .E = 256 * KiB, .iters = 2};
  f[1] = (fake){.id = 2, .P = MiB, .E = 256 * KiB, .iters = 60, .spin_us = 200};
  f[0].vacated_resident = f[1].vacated_resident = -1;
  add(r, &f[0], 0);
  add(r, &f[1], 0);
  run(r);
  ar_runner_summary s;
  ar_runner_summary_get(r, &s);
  for (int i = 0; i < 2; i++) {
    ar_tjob_result res = result(r, (size_t)i);
    if (res.state != AR_TJ_DONE)
      fail_msg("job %d: %s %s", i, ar_tjob_state_name(res.state), res.error);
    assert_int_equal(f[i].corrupt, 0);
  }
  assert_true(s.defrags >= 1);
  assert_non_null(f[1].old_pers);
  assert_true(f[1].pers + f[1].P <= f[1].old_pers); /* moved off its old place */
  if (f[1].vacated_resident != 0)
    fail_msg("%ld pages of the place B left stayed resident", f[1].vacated_resident);
  for (int i = 0; i < 2; i++) {
    long kp = resident_pages(f[i].pers, f[i].P), ke = resident_pages(f[i].eph, f[i].E);
    if (kp != 0 || ke != 0)
      fail_msg("job %d ended, yet %ld pages of its block and %ld of its lane are resident", i,
               kp, ke);
  }
  ar_runner_destroy(r);
}

/* Cancelling: a job that cancels itself mid-way is finished as interrupted
 * (its checkpoint) and leaves; one cancelled before it arrives never
 * starts. */
static void test_cancel(void **state) {
  (void)state;
  fake f[3];
  memset(f, 0, sizeof f);
  ar_runner *r = make_runner("pack", 1 << 20, 1, NULL);
  f[0] = (fake){.id = 1, .P = 1000, .E = 1000, .iters = 50, .cancel_at = 4};
  f[1] = (fake){.id = 2, .P = 1000, .E = 1000, .iters = 5};
  f[2] = (fake){.id = 3, .P = 1000, .E = 1000, .iters = 5};
  add(r, &f[0], 0);
  add(r, &f[1], 0);
  add(r, &f[2], 5.0);
  assert_int_equal(ar_runner_cancel(r, 2), AR_OK);
  assert_int_equal(ar_runner_cancel(r, 9), AR_NOTFOUND);
  run(r);
  assert_int_equal(result(r, 0).state, AR_TJ_CANCELLED);
  assert_int_equal(f[0].done, 4);
  assert_int_equal(f[0].interrupted, 1);
  assert_int_equal(result(r, 1).state, AR_TJ_DONE);
  assert_int_equal(result(r, 2).state, AR_TJ_CANCELLED);
  assert_int_equal(f[2].starts, 0);
  assert_int_equal(ar_runner_cancel(r, 1), AR_STATE);
  ar_runner_destroy(r);
  assert_int_equal(f[2].closes, 1);
}

/* Stopping (a signal, a service shutdown): started jobs are finished as
 * interrupted, the rest closed; all end as stopped. */
static void test_stop(void **state) {
  (void)state;
  fake f[3];
  memset(f, 0, sizeof f);
  ar_runner *r = make_runner("srtf", 1 << 20, 1, NULL);
  f[0] = (fake){.id = 1, .P = 1000, .E = 1000, .iters = 1000, .stop_at = 5};
  f[1] = (fake){.id = 2, .P = 1000, .E = 1000, .iters = 1000, .stop_at = 5};
  f[2] = (fake){.id = 3, .P = 1000, .E = 1000, .iters = 10};
  add(r, &f[0], 0);
  add(r, &f[1], 0);
  add(r, &f[2], 60.0);
  run(r);
  for (int i = 0; i < 3; i++)
    assert_int_equal(result(r, (size_t)i).state, AR_TJ_STOPPED);
  /* srtf runs one of the two first; whichever reached 5 stopped it. */
  assert_true(f[0].done == 5 || f[1].done == 5);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(f[i].interrupted, f[i].starts);
    assert_int_equal(f[i].finishes, f[i].starts);
  }
  assert_int_equal(f[2].starts, 0);
  ar_runner_destroy(r);
}

/* Progress: on_progress comes for running jobs only, after the first
 * iteration and then at most every AR_RUNNER_PROGRESS_S of the runner's
 * clock, with the position growing, the loss the job reported and the
 * memory it holds; ar_runner_progress may be read from another thread
 * meanwhile; at the end the memory is 0 and the last figures stay. */
typedef struct prog_seen {
  int calls[4], bad;
  uint64_t last_it[4];
  size_t P[4], E[4];
  bool silent[4];
} prog_seen;

static void on_progress(void *ctx, size_t job, const ar_tjob_result *res) {
  prog_seen *s = ctx;
  const ar_tjob_progress *p = &res->progress;
  if (job >= 4 || res->state != AR_TJ_ADMITTED) {
    s->bad++;
    return;
  }
  bool ok = p->iteration > s->last_it[job] && p->iteration <= p->iterations &&
            p->persistent_bytes == s->P[job] && p->lane_bytes >= s->E[job] &&
            (s->silent[job] ? isnan(p->loss) && isnan(p->samples_per_s) : p->loss > 0);
  s->bad += !ok;
  s->last_it[job] = p->iteration;
  s->calls[job]++;
}

typedef struct poller {
  ar_runner *r;
  atomic_int done;
  int polls, bad;
} poller;

static void *poll_progress(void *arg) {
  poller *pl = arg;
  uint64_t last[4] = {0};
  while (!atomic_load(&pl->done)) {
    for (size_t i = 0; i < 4; i++) {
      ar_tjob_progress p;
      if (ar_runner_progress(pl->r, i, &p) != AR_OK)
        continue;
      pl->bad += p.iteration < last[i] || p.iteration > p.iterations;
      last[i] = p.iteration;
      pl->polls++;
    }
  }
  return NULL;
}

static void test_progress(void **state) {
  (void)state;
  static prog_seen seen;
  memset(&seen, 0, sizeof seen);
  ar_runner_opts o = AR_RUNNER_OPTS_INIT;
  o.policy = "pack";
  o.capacity = 1 << 20;
  o.threads = 2;
  o.on_progress = on_progress;
  o.ctx = &seen;
  ar_runner *r = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_runner_create(&o, &r, &err), AR_OK);
  fake f[4];
  memset(f, 0, sizeof f);
  const uint64_t iters[4] = {300, 40, 60, 30}, before[4] = {0, 0, 5, 0};
  for (int i = 0; i < 4; i++) {
    f[i] = (fake){.id = i + 1, .P = 1000 + 100 * (size_t)i, .E = 2000, .iters = iters[i],
                  .spin_us = 2000};
    seen.P[i] = f[i].P;
    seen.E[i] = f[i].E;
    seen.silent[i] = i == 3;
    /* Job 2 resumes: 5 iterations ran before. */
    ar_tjob_desc d = {"p", NULL, f[i].P, f[i].E, iters[i], before[i], 0, 0, 0.0, &f[i],
                      i == 3 ? &silent_fns : &fake_fns, NULL};
    f[i].r = r;
    assert_int_equal(ar_runner_add(r, &d, &f[i].index, &err), AR_OK);
  }
  ar_tjob_progress p0;
  assert_int_equal(ar_runner_progress(r, 2, &p0), AR_OK);
  assert_int_equal(p0.iteration, 5);
  assert_int_equal(p0.iterations, 65);
  assert_true(isnan(p0.loss) && isnan(p0.eta_s) && p0.persistent_bytes == 0);
  assert_int_equal(ar_runner_progress(r, 4, &p0), AR_NOTFOUND);
  poller pl = {.r = r};
  atomic_init(&pl.done, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, poll_progress, &pl), 0);
  run(r);
  atomic_store(&pl.done, 1);
  pthread_join(th, NULL);
  assert_int_equal(pl.bad, 0);
  assert_true(pl.polls > 0);
  assert_int_equal(seen.bad, 0);
  for (int i = 0; i < 4; i++) {
    ar_tjob_result res = result(r, (size_t)i);
    const ar_tjob_progress *p = &res.progress;
    assert_int_equal(res.state, AR_TJ_DONE);
    assert_true(seen.calls[i] >= 1);
    /* The throttle, on the runner's own clock: the first call, then one
     * per AR_RUNNER_PROGRESS_S at most. */
    assert_true(seen.calls[i] <= 2 + (int)((res.end_s - res.first_s) / AR_RUNNER_PROGRESS_S));
    assert_int_equal(p->iteration, before[i] + iters[i]);
    assert_int_equal(p->iterations, before[i] + iters[i]);
    assert_int_equal(p->persistent_bytes, 0);
    assert_int_equal(p->lane_bytes, 0);
    assert_true(isnan(p->eta_s));
    if (i == 3) {
      assert_true(isnan(p->loss) && isnan(p->samples_per_s));
    } else {
      assert_true(p->loss == 1.0 / (double)iters[i]);
      assert_true(p->samples_per_s > 0 && isfinite(p->samples_per_s));
    }
  }
  ar_runner_destroy(r);
}

/* A job that can never fit fails alone with the sizes in its message. */
static void test_never_fits(void **state) {
  (void)state;
  fake f[2];
  memset(f, 0, sizeof f);
  ar_runner *r = make_runner("pack", 16 * KiB, 1, NULL);
  f[0] = (fake){.id = 1, .P = 12 * KiB, .E = 8 * KiB, .iters = 2};
  f[1] = (fake){.id = 2, .P = 1 * KiB, .E = 1 * KiB, .iters = 2};
  add(r, &f[0], 0);
  add(r, &f[1], 0);
  run(r);
  ar_tjob_result bad = result(r, 0);
  assert_int_equal(bad.state, AR_TJ_FAILED);
  assert_true(bad.error[0] != '\0');
  assert_int_equal(result(r, 1).state, AR_TJ_DONE);
  ar_runner_destroy(r);
}

/* The live aggregates (ar_runner_stats, what the service's --http shows)
 * agree with the per-job results once the run ended: iterations and
 * samples summed over the jobs, a switch histogram whose buckets add up to
 * the switches and whose bounds ascend, jobs that waited for memory
 * counted once each, nothing left in memory. */
static void test_stats(void **state) {
  (void)state;
  for (int p = 0; p < 5; p++) {
    fake f[5];
    memset(f, 0, sizeof f);
    /* Room for two of the five at once at most (two persistent blocks
     * sharing one lane): the others wait on arrival. */
    ar_runner *r = make_runner(policies[p], 24 * KiB, 1, NULL);
    ar_runner_stats before;
    ar_runner_stats_get(r, &before);
    assert_int_equal(before.iterations, 0);
    assert_int_equal(before.capacity_bytes, 24 * KiB);
    uint64_t iters = 0;
    for (int i = 0; i < 5; i++) {
      f[i] = (fake){.id = i + 1, .P = 10 * KiB, .E = 4 * KiB, .iters = 3 + (uint64_t)i,
                    .spin_us = 200};
      iters += f[i].iters;
      add(r, &f[i], 0);
    }
    run(r);
    ar_runner_stats st;
    ar_runner_stats_get(r, &st);
    ar_runner_summary sum;
    ar_runner_summary_get(r, &sum);
    for (int i = 0; i < 5; i++)
      assert_int_equal(result(r, (size_t)i).state, AR_TJ_DONE);
    assert_int_equal(st.iterations, iters);
    assert_int_equal(st.samples, iters * FAKE_BATCH);
    /* One progress call a step, and one at the start for the baseline. */
    for (int i = 0; i < 5; i++)
      assert_int_equal(f[i].progress_calls, f[i].iters + 1);
    assert_int_equal(st.switches, sum.switches);
    uint64_t in_buckets = 0;
    for (int b = 0; b <= AR_RUNNER_SWITCH_BOUNDS; b++)
      in_buckets += st.switch_buckets[b];
    assert_int_equal(in_buckets, st.switches);
    assert_true(st.switch_sum_s >= 0);
    for (int b = 1; b < AR_RUNNER_SWITCH_BOUNDS; b++)
      assert_true(ar_runner_switch_bounds[b] > ar_runner_switch_bounds[b - 1]);
    /* All five arrive in the first pass; at most two fit. */
    assert_true(st.admission_waits >= 3);
    assert_true(st.admission_waits <= 5);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.admitted, 0);
    assert_int_equal(st.persistent_bytes, 0);
    assert_true(st.busy_s > 0 && st.busy_s <= st.uptime_s);
    ar_runner_destroy(r);
  }
}

/* A resumed job (5 of its 8 iterations done before): the samples counted
 * are the 3 iterations trained here, not the earlier ones. */
static void test_stats_resumed(void **state) {
  (void)state;
  ar_runner *r = make_runner("fifo", 24 * KiB, 1, NULL);
  fake f = {.id = 1, .P = 4 * KiB, .E = 4 * KiB, .iters = 8, .done = 5};
  ar_tjob_desc d = {"resumed", NULL, f.P, f.E, 3, 5, 0, 0, 0, &f, &fake_fns, NULL};
  f.r = r;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_runner_add(r, &d, &f.index, &err), AR_OK);
  run(r);
  ar_runner_stats st;
  ar_runner_stats_get(r, &st);
  assert_int_equal(result(r, 0).state, AR_TJ_DONE);
  assert_int_equal(f.done, 8);
  assert_int_equal(st.iterations, 3);
  assert_int_equal(st.samples, 3 * FAKE_BATCH);
  assert_int_equal(f.progress_calls, 3 + 1);
  ar_runner_destroy(r);
}

static char *slurp(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  buf[n] = '\0';
  fclose(fp);
  return buf;
}

/* The records: summary.json with the contract's keys, metrics.jsonl with
 * memory samples and job lines, a Chrome trace with lane tracks. */
static void test_outputs(void **state) {
  (void)state;
  char dir[] = "/tmp/accelrt-tenancy-XXXXXX";
  assert_non_null(mkdtemp(dir));
  fake f[3];
  memset(f, 0, sizeof f);
  ar_runner *r = make_runner("fair", 1 << 20, 1, dir);
  for (int i = 0; i < 3; i++) {
    f[i] = (fake){.id = i + 1, .P = 2000, .E = 3000, .iters = 10};
    add(r, &f[i], 0);
  }
  run(r);
  char path[256];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  const char *s = slurp(path);
  assert_non_null(s);
  const char *keys[] = {"\"policy\": \"fair\"", "\"makespan_s\"", "\"avg_jct_s\"",
                        "\"p95_jct_s\"", "\"avg_queue_s\"", "\"switch_latency_ms_p50\"",
                        "\"switch_latency_ms_p99\"", "\"max_memory_bytes\"",
                        "\"capacity_bytes\"", "\"jobs\": [", "\"name\": \"f3\"", "\"jct_s\"",
                        "\"queue_s\"", "\"iterations\": 10", "\"lane\""};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    if (!strstr(s, keys[k]))
      fail_msg("summary.json lacks %s:\n%s", keys[k], s);
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  s = slurp(path);
  assert_non_null(s);
  assert_non_null(strstr(s, "\"event\": \"memory\""));
  assert_non_null(strstr(s, "\"persistent_bytes\""));
  assert_non_null(strstr(s, "\"event\": \"job\""));
  snprintf(path, sizeof path, "%s/trace.json", dir);
  s = slurp(path);
  assert_non_null(s);
  assert_non_null(strstr(s, "\"traceEvents\""));
  assert_non_null(strstr(s, "\"thread_name\""));
  assert_non_null(strstr(s, "\"ph\": \"X\""));
  assert_non_null(strstr(s, "\"ph\": \"C\""));
  ar_runner_destroy(r);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* Whether two jobs' admitted periods overlap (their lanes were live at
 * the same time). */
static bool overlapped(ar_tjob_result a, ar_tjob_result b) {
  return a.admit_s < b.end_s && b.admit_s < a.end_s;
}

static bool is_lane_handle(ar_runner *r, ar_device *d) {
  int nh = 0;
  (void)ar_runner_device(r, &nh);
  for (int i = 0; i < nh; i++)
    if (ar_runner_lane_handle(r, i) == d)
      return true;
  return false;
}

/* One device per run: the runner opens it once and makes ONE allocation
 * of it (the arena every block is carved from: its bytes in use never
 * change), the jobs run on lane handles that are neither that device nor
 * one per job (jobs of one lane share their lane's handle, lanes live at
 * the same time have handles of their own), no handle ever runs two
 * iterations at once, and the lane handles allocate nothing. */
static void test_one_device_lane_handles(void **state) {
  (void)state;
  ar_host_cpus cpus;
  ar_host_cpus_get(&cpus);
  if (cpus.cpus < 2)
    skip(); /* two workers need two CPUs: a one-CPU mask caps threads = 2 at one */
  for (int p = 0; p < 5; p++) {
    fake f[8];
    memset(f, 0, sizeof f);
    ar_runner *r = make_runner(policies[p], 1 << 20, 1, NULL);
    int nh = 0;
    ar_device *dev = ar_runner_device(r, &nh);
    assert_non_null(dev);
    assert_int_equal(nh, 2); /* one per worker to begin with: threads = 2 */
    assert_int_equal(ar_runner_capacity(r), 1 << 20);
    const size_t arena = ar_device_bytes_in_use(dev);
    assert_true(arena >= (size_t)(1 << 20) && arena <= (size_t)(1 << 20) + 256);
    assert_int_equal(ar_device_bytes_peak(dev), arena);
    ar_device *h0 = ar_runner_lane_handle(r, 0), *h1 = ar_runner_lane_handle(r, 1);
    assert_non_null(h0);
    assert_non_null(h1);
    assert_true(h0 != h1 && h0 != dev && h1 != dev);
    assert_null(ar_runner_lane_handle(r, 2));
    ndev_use = dev_clashes = 0;
    for (int i = 0; i < 8; i++) {
      f[i] = (fake){.id = i + 1, .P = 4000, .E = 6000, .iters = 6, .spin_us = 200};
      add(r, &f[i], 0.0005 * (i % 3));
    }
    run(r);
    int lanes_at_once = 1;
    for (int i = 0; i < 8; i++) {
      ar_tjob_result a = result(r, (size_t)i);
      assert_int_equal(a.state, AR_TJ_DONE);
      assert_int_equal(f[i].starts, 1);
      assert_true(f[i].dev != dev && is_lane_handle(r, f[i].dev));
      for (int k = 0; k < i; k++) {
        ar_tjob_result b = result(r, (size_t)k);
        if (b.lane == a.lane)
          assert_ptr_equal(f[k].dev, f[i].dev);
        else if (overlapped(a, b)) {
          assert_true(f[k].dev != f[i].dev);
          lanes_at_once = 2;
        }
      }
    }
    /* pack runs the jobs in several lanes at once (fifo runs one lane at
     * a time, srtf, fair and priority time-share one) */
    if (strcmp(policies[p], "pack") == 0)
      assert_int_equal(lanes_at_once, 2);
    (void)ar_runner_device(r, &nh);
    assert_true(nh >= 2 && nh <= 8);
    assert_int_equal(dev_clashes, 0);
    assert_int_equal(ar_device_bytes_in_use(dev), arena);
    assert_int_equal(ar_device_bytes_peak(dev), arena);
    for (int i = 0; i < nh; i++)
      assert_int_equal(ar_device_bytes_peak(ar_runner_lane_handle(r, i)), 0);
    ar_runner_destroy(r);
  }
}

/* At most one lane handle (as a GPU with fewer streams than lanes): all
 * lanes take turns on it, never two iterations at once, all jobs done;
 * and runtime.memory in bytes or as a fraction sizes the host's
 * capacity when none is given. */
static void test_shared_lane_handle(void **state) {
  (void)state;
  ar_runner_opts o = AR_RUNNER_OPTS_INIT;
  o.policy = "pack";
  o.device = "host";
  o.threads = 2;
  o.max_lane_handles = 1;
  o.device_opts.memory_bytes = 1 << 20; /* capacity 0: from runtime.memory */
  ar_runner *r = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_runner_create(&o, &r, &err) != AR_OK)
    fail_msg("runner: %s", err.msg);
  assert_int_equal(ar_runner_capacity(r), 1 << 20);
  fake f[6];
  memset(f, 0, sizeof f);
  ndev_use = dev_clashes = 0;
  for (int i = 0; i < 6; i++) {
    f[i] = (fake){.id = i + 1, .P = 2000, .E = 3000, .iters = 5, .spin_us = 100};
    add(r, &f[i], 0);
  }
  run(r);
  int nh = 0;
  (void)ar_runner_device(r, &nh);
  assert_int_equal(nh, 1);
  bool lanes[64] = {false};
  int nlanes = 0;
  for (int i = 0; i < 6; i++) {
    ar_tjob_result a = result(r, (size_t)i);
    assert_int_equal(a.state, AR_TJ_DONE);
    assert_ptr_equal(f[i].dev, ar_runner_lane_handle(r, 0));
    if (a.lane < 64 && !lanes[a.lane]) {
      lanes[a.lane] = true;
      nlanes++;
    }
  }
  assert_true(nlanes > 1);
  assert_int_equal(dev_clashes, 0);
  ar_runner_destroy(r);

  o.max_lane_handles = 0;
  o.device_opts.memory_bytes = 0;
  o.device_opts.memory_fraction = 0.001;
  assert_int_equal(ar_runner_create(&o, &r, &err), AR_OK);
  ar_host_memory hm;
  ar_host_memory_get(&hm);
  assert_true(ar_runner_capacity(r) > 0 && ar_runner_capacity(r) <= hm.limit / 500);
  ar_runner_destroy(r);
}

static void test_quantile(void **state) {
  (void)state;
  double v[5] = {5, 1, 4, 2, 3};
  assert_true(ar__quantile(v, 5, 0.5) == 3);
  assert_true(ar__quantile(v, 5, 0.95) == 5);
  assert_true(ar__quantile(v, 5, 0.0) == 1);
  assert_true(ar__quantile(v, 0, 0.5) == 0);
  double w[100];
  for (int i = 0; i < 100; i++)
    w[i] = 100 - i;
  assert_true(ar__quantile(w, 100, 0.99) == 99);
}

/* Job files and the lanes name policies from two tables (spec's
 * AR_POLICY_MAP, lanes' policies.c): every name a job file may give is one
 * the lanes know, and back. */
static void test_policy_names_agree(void **state) {
  (void)state;
  char all[128];
  snprintf(all, sizeof all, "%s", ar_policy_names());
  int listed = 1;
  for (const char *p = all; *p; p++)
    listed += *p == ',';
  assert_int_equal(listed, AR_POLICY_COUNT);
  for (int k = 0; k < AR_POLICY_COUNT; k++) {
    const char *name = ar_policy_name((ar_policy_kind)k);
    ar_policy_kind back;
    assert_true(ar_policy_parse(name, &back));
    assert_int_equal(back, k);
    assert_non_null(strstr(all, name));
    ar_lanes_opts o = AR_LANES_OPTS_INIT;
    o.capacity = 1 << 20;
    o.policy = name;
    ar_lanes *l = NULL;
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_lanes_create(&o, &l, &err), AR_OK);
    ar_lanes_destroy(l);
  }
  ar_policy_kind k;
  assert_false(ar_policy_parse("lifo", &k));
  assert_false(ar_policy_parse("", &k));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_policy_names_agree),
      cmocka_unit_test(test_quantile),       cmocka_unit_test(test_random_mixes),
      cmocka_unit_test(test_fifo_order),     cmocka_unit_test(test_srtf_short_first),
      cmocka_unit_test(test_failure_alone),  cmocka_unit_test(test_defrag_moves_bytes),
      cmocka_unit_test(test_host_pages_returned),
      cmocka_unit_test(test_cancel),         cmocka_unit_test(test_stop),
      cmocka_unit_test(test_progress),
      cmocka_unit_test(test_never_fits),     cmocka_unit_test(test_outputs),
      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_fair_charges_device_time),
      cmocka_unit_test(test_stats_resumed),
      cmocka_unit_test(test_one_device_lane_handles),
      cmocka_unit_test(test_shared_lane_handle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
