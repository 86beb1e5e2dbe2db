/* accelrt check: validates a job file and prints the exact memory plan of
 * what `accelrt run` would allocate for it, reading and never writing.
 *
 * Data files are scanned (read only); data.generate runs the generator in
 * memory (ar_job_data_stats), so the plan equals the one `run` computes
 * from the files it generates.  A file `run` accepts is accepted here too:
 * one job, a distributed job (the plan of one worker; no MPI needed) and a
 * `jobs:` file (each job's plan and the lanes' admission picture).  A
 * study file (`factors:`) is validated as `accelrt study` would and its
 * design printed.  A plan the device cannot hold is an error (exit 1),
 * as `run` refuses it before allocating. */
#define _GNU_SOURCE
#include "accelrt/lanes.h"
#include "accelrt/net.h"
#include "accelrt/runtime.h"
#include "accelrt/spec.h"
#include "accelrt/study.h"
#include "accelrt/tenancy.h"
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

static const char *human(size_t bytes, char *buf, size_t n) {
  return ar_lanes_fmt_bytes(bytes, buf, n);
}

/* The data line of a job reading sparse rows (a chain, lowered or not, or
 * a graph model over XC data): its splits and the row bounds it is planned
 * at. */
static void print_sparse_data(const ar_spec *spec, const ar_data_stats *tr,
                              const ar_data_stats *te, bool has_test, int64_t nnz,
                              int64_t lab) {
  if (spec->data.generate)
    printf("data: data.generate, run in memory (nothing written): train %lld points, test "
           "%lld points, at most %lld features and %lld labels a row\n", (long long)tr->points,
           (long long)te->points, (long long)nnz, (long long)lab);
  else
    printf("data: train %s (%lld points), test %s (%lld points); at most %lld features and "
           "%lld labels a row\n", spec->data.train, (long long)tr->points,
           has_test ? spec->data.test : "none", (long long)te->points, (long long)nnz,
           (long long)lab);
}

/* A lowered chain's plan in the chain's listing (ar_plan_print_memory):
 * the entries the graph engine allocates, the persistent ones first, in
 * the chain's order and under its names (LAYER.state1.w for the graph's
 * LAYER.w.adam_m), so that the per-tensor lines read as a chain's and
 * those checkpointed match its checkpoint.bin; the rest in plan order
 * under the graph's names.  The figures are the graph's. */
static ar_status print_lowered(const ar_spec *spec, const ar_plan *plan, ar_err *err) {
  ar_plan shown = *plan;
  shown.entries = ar_malloc((size_t)(plan->count ? plan->count : 1) * sizeof *shown.entries);
  int *slot = ar_malloc((size_t)(plan->count ? plan->count : 1) * sizeof *slot);
  if (!shown.entries || !slot) {
    ar_free(shown.entries);
    ar_free(slot);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  int n_ckpt = 0, top = -1;
  for (int i = 0; i < plan->count; i++) {
    char nm[sizeof plan->entries[i].name];
    const ar_plan_entry *e = &plan->entries[i];
    slot[i] = e->cls == AR_MEM_PERSISTENT ? ar_chain_lowered_slot(spec, e->name, nm, sizeof nm)
                                          : -1;
    if (slot[i] >= 0) {
      AR_ASSERT(slot[i] < plan->count);
      top = slot[i] > top ? slot[i] : top;
      shown.entries[slot[i]] = *e;
      snprintf(shown.entries[slot[i]].name, sizeof nm, "%s", nm);
      n_ckpt++;
    }
  }
  for (int i = 0, k = n_ckpt; i < plan->count; i++)
    if (slot[i] < 0)
      shown.entries[k++] = plan->entries[i];
  if (top + 1 != n_ckpt) /* not the chain's list (a bug): the plan's order */
    memcpy(shown.entries, plan->entries, (size_t)plan->count * sizeof *plan->entries);
  ar_plan_print_memory(&shown, spec->train.batch, stdout);
  ar_free(slot);
  ar_free(shown.entries);
  return AR_OK;
}

/* A graph model: its summary and plan, with the bytes its datasets hold
 * (ar_job_data_bytes; with_test: the test split too, as a job that keeps
 * records opens it), as ar_job_open computes it. */
static ar_status plan_graph(const ar_spec *spec, bool with_test, ar_plan *plan, ar_err *err) {
  ar_net *net = NULL;
  if (ar_spec_reads_rows(spec)) {
    /* Planned at the data's row bounds, as a chain model (the files are
     * scanned, data.generate runs in memory). */
    ar_data_stats tr, te;
    bool has_test = false;
    int64_t nnz, lab;
    AR_CHECK(ar_job_data_stats(spec, NULL, &tr, &te, &has_test, err));
    ar_job_row_bounds(&tr, has_test ? &te : NULL, &nnz, &lab);
    AR_CHECK(ar_net_build_sparse(spec, spec->train.batch, nnz, lab, &net, err));
    print_sparse_data(spec, &tr, &te, has_test, nnz, lab);
  } else {
    AR_CHECK(ar_net_build(spec, spec->train.batch, &net, err));
    printf("data: train %s, test %s (format %s)\n",
           spec->data.generate ? "data.generate" : spec->data.train ? spec->data.train : "none",
           !with_test ? "not opened" : spec->data.generate ? "generated"
           : spec->data.test ? spec->data.test : "none",
           spec->data.format == AR_FMT_NPY ? "npy" : "idx");
  }
  size_t data = 0;
  ar_status st = ar_job_data_bytes(spec, with_test, &data, err);
  if (st != AR_OK) {
    ar_net_destroy(net);
    return st;
  }
  ar_net_print(net, stdout);
  const ar_plan *p = ar_net_plan(net);
  *plan = *p;
  plan->entries = ar_malloc((size_t)(p->count ? p->count : 1) * sizeof *p->entries);
  if (!plan->entries) {
    ar_net_destroy(net);
    *plan = (ar_plan){0};
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  memcpy(plan->entries, p->entries, (size_t)p->count * sizeof *p->entries);
  ar_plan_add_host(plan, data);
  if (spec->lowered) { /* the chain's listing, which tools read */
    ar_status lst = print_lowered(spec, plan, err);
    ar_net_destroy(net);
    return lst;
  }
  char a[32], b[32], c[32], d[32], e[32], f[32];
  printf("memory plan: persistent %s (parameters, optimizer state, running statistics), "
         "ephemeral %s (one iteration, tensors placed by lifetime; %s without sharing), host "
         "%s (%s staging, %s the datasets hold in memory)\n",
         human(p->persistent_bytes, a, sizeof a), human(p->ephemeral_bytes, b, sizeof b),
         human(p->ephemeral_sum_bytes, c, sizeof c), human(plan->host_bytes, d, sizeof d),
         human(p->host_bytes, e, sizeof e), human(data, f, sizeof f));
  /* An LSH-sampled head's host memory, piece by piece (in the host total). */
  for (int i = 0; i < p->count; i++)
    if (p->entries[i].cls == AR_MEM_HOST && strstr(p->entries[i].name, ".lsh."))
      printf("  host: %-32s %s\n", p->entries[i].name, human(p->entries[i].bytes, a, sizeof a));
  ar_net_destroy(net);
  return AR_OK;
}

/* Scans or generates (in memory) the job's data and computes its plan;
 * prints the data line and the plan.  AR_OK or a status with err. */
static ar_status plan_job(const ar_spec *spec, bool with_test, ar_plan *plan, ar_err *err) {
  if (spec->graph)
    return plan_graph(spec, with_test, plan, err);
  ar_data_stats tr, te;
  bool has_test = false;
  AR_CHECK(ar_job_data_stats(spec, NULL, &tr, &te, &has_test, err));
  int64_t nnz, lab;
  ar_job_row_bounds(&tr, has_test ? &te : NULL, &nnz, &lab);
  AR_CHECK(ar_plan_compute(spec, nnz, lab, plan, err));
  print_sparse_data(spec, &tr, &te, has_test, nnz, lab);
  ar_plan_print(plan, spec, stdout);
  return AR_OK;
}

/* The plan against what the job's device can give (as `run` checks it). */
static ar_status fit_job(const ar_spec *spec, const ar_plan *plan, ar_err *err) {
  ar_mem_limit lim;
  ar_mem_limit_get(spec, NULL, &lim);
  AR_CHECK(ar_plan_fit(plan, spec, &lim, err));
  char a[32], b[32];
  if (lim.on_host && lim.host)
    printf("fits: %s of the %s this host can give (%s)\n", human(plan->total_bytes, a, sizeof a),
           human(lim.host, b, sizeof b), lim.host_source);
  else if (!lim.on_host && lim.device)
    printf("fits: %s of device memory in the %s of %s\n",
           human(plan->persistent_bytes + plan->ephemeral_bytes, a, sizeof a),
           human(lim.device, b, sizeof b), lim.device_source);
  else
    printf("fits: not checked here (%s's free memory is known when it is opened; run checks "
           "it before allocating)\n", lim.on_host ? "the host" : spec->device);
  return AR_OK;
}

static ar_status check_single(const ar_spec *spec, ar_err *err) {
  ar_plan plan = {0};
  ar_status st = plan_job(spec, true, &plan, err);
  if (st == AR_OK)
    st = fit_job(spec, &plan, err);
  ar_plan_fini(&plan);
  return st;
}

/* A tenant of a lanes picture: a job of a jobs: file, or a distributed
 * worker joining the shared device's jobs. */
typedef struct tenant {
  const char *name;
  size_t admit_p, admit_e; /* ar_tenancy_admit_sizes: what the runner admits it on */
} tenant;

/* Each tenant's sizes against the lanes' capacity (ar_tenancy_capacity):
 * whether it can ever be admitted.  AR_NOMEM when one never can. */
static ar_status print_admission(const ar_spec *spec, const tenant *t, int n, ar_err *err) {
  size_t cap = 0;
  char source[1400], a[32], b[32], c[32];
  AR_CHECK(ar_tenancy_capacity(spec, &cap, source, sizeof source, err));
  printf("\nadmission (lanes, policy %s) on device %s (%s): capacity %s (%s)\n",
         ar_policy_name(spec->runtime.policy), spec->device,
         ar_spec_runs_on_host(spec) ? "the host" : "a GPU",
         cap ? human(cap, a, sizeof a) : "unknown here", source);
  printf("  %-24s %14s %14s %14s  %s\n", "job", "persistent", "ephemeral", "alone", "can fit");
  ar_lanes_opts lo = AR_LANES_OPTS_INIT;
  lo.capacity = cap;
  size_t sum_p = 0, max_e = 0;
  int never = -1;
  for (int i = 0; i < n; i++) {
    bool fits = cap == 0 || ar_lanes_fits_alone(&lo, t[i].admit_p, t[i].admit_e);
    printf("  %-24s %14s %14s %14s  %s\n", t[i].name, human(t[i].admit_p, a, sizeof a),
           human(t[i].admit_e, b, sizeof b), human(t[i].admit_p + t[i].admit_e, c, sizeof c),
           cap == 0 ? "unknown" : fits ? "yes" : "NEVER");
    sum_p += t[i].admit_p;
    max_e = t[i].admit_e > max_e ? t[i].admit_e : max_e;
    if (!fits && never < 0)
      never = i;
  }
  printf("  all at once: persistent %s + the largest ephemeral peak %s = %s (%zu bytes)%s\n",
         human(sum_p, a, sizeof a), human(max_e, b, sizeof b), human(sum_p + max_e, c, sizeof c),
         sum_p + max_e,
         cap == 0 ? "" : sum_p + max_e <= cap ? "; every job fits at the same time"
                                            : "; not every job fits at the same time, some wait");
  if (never >= 0)
    return ar_errf(err, AR_NOMEM,
                   "job '%s' needs %s persistent (with its host memory) + %s ephemeral, more "
                   "than the lanes' whole capacity of %s (%s): it could never be admitted; "
                   "raise runtime.memory or lower its train.batch or widths",
                   t[never].name, human(t[never].admit_p, a, sizeof a),
                   human(t[never].admit_e, b, sizeof b), human(cap, c, sizeof c), source);
  return AR_OK;
}

/* Every job's plan, then the admission picture; extra (may be NULL) joins
 * it as one more tenant (a distributed worker). */
static ar_status check_jobs(const ar_spec *spec, const tenant *extra, ar_err *err) {
  int n = spec->n_jobs + (extra ? 1 : 0);
  tenant *t = ar_calloc((size_t)n, sizeof *t);
  if (!t)
    return ar_errf(err, AR_NOMEM, "out of memory");
  ar_status st = AR_OK;
  for (int i = 0; i < spec->n_jobs && st == AR_OK; i++) {
    const ar_spec *js = spec->jobs[i];
    printf("%s== job %d of %d: %s ==\n", i ? "\n" : "", i + 1, spec->n_jobs, js->name);
    ar_plan plan;
    ar_err je = AR_ERR_INIT;
    st = plan_job(js, true, &plan, &je);
    if (st != AR_OK) {
      ar_errf(err, st, "job '%s': %s", js->name, je.msg);
      break;
    }
    t[i].name = js->name;
    ar_tenancy_admit_sizes(&plan, &t[i].admit_p, &t[i].admit_e);
    ar_plan_fini(&plan);
  }
  if (st == AR_OK && extra)
    t[n - 1] = *extra;
  if (st == AR_OK)
    st = print_admission(spec, t, n, err);
  ar_free(t);
  return st;
}

/* A distributed job: the plan of one worker.  The ranks are given to
 * mpirun, not in the file, so with distributed.workers listing W workers
 * each takes ceil(batch / W) rows; otherwise the plan is that of a single
 * worker taking the whole batch, the most any worker can need. */
static ar_status check_distributed(const ar_spec *spec, ar_err *err) {
  ar_spec w = *spec;
  int W = spec->distributed.n_workers > 0 ? spec->distributed.n_workers : 1;
  w.train.batch = (spec->train.batch + W - 1) / W;
  printf("distributed: %d server%s; the plan of one worker with %d of the batch's %d rows "
         "(%s)\n", spec->distributed.servers, spec->distributed.servers == 1 ? "" : "s",
         w.train.batch, spec->train.batch,
         spec->distributed.n_workers > 0 ? "distributed.workers lists the workers"
                                         : "one worker; with W workers each takes "
                                           "ceil(batch / W) rows, less");
  ar_plan plan;
  AR_CHECK(plan_job(&w, false, &plan, err)); /* a worker opens no test split */
  ar_status st = AR_OK;
  if (!spec->distributed.share_file) {
    st = fit_job(&w, &plan, err);
  } else {
    /* The worker is one more tenant of the shared device's lanes. */
    ar_spec *share = NULL;
    ar_diags diags = {0, NULL};
    st = ar_spec_load(spec->distributed.share_file, NULL, 0, &share, &diags);
    if (st != AR_OK) {
      cli_load_failed(spec->distributed.share_file, st, &diags);
      ar_errf(err, st, "distributed.share: %s is not a valid jobs file",
              spec->distributed.share_file);
    } else if (share->n_jobs <= 0) {
      st = ar_errf(err, AR_SPEC, "distributed.share: %s has no `jobs:` list",
                   spec->distributed.share_file);
    } else {
      printf("\ndistributed.share: each worker joins the %d jobs of %s (%s)\n\n", share->n_jobs,
             spec->distributed.share_file,
             spec->distributed.share_tenants == AR_SHARE_ONCE
                 ? "each run once"
                 : "steady: each restarted until the worker's job ends");
      tenant worker = {"(the worker)", 0, 0};
      ar_tenancy_admit_sizes(&plan, &worker.admit_p, &worker.admit_e);
      st = check_jobs(share, &worker, err);
    }
    ar_diags_fini(&diags);
    ar_spec_destroy(share);
  }
  ar_plan_fini(&plan);
  return st;
}

/* Whether the diagnostics of a failed job load say the file is a study
 * (its top-level `factors`, unknown to job files). */
static bool looks_like_study(const ar_diags *d) {
  for (int i = 0; i < d->count; i++)
    if (d->items[i].path && !strcmp(d->items[i].path, "factors"))
      return true;
  return false;
}

static int check_study(const char *file) {
  ar_diags diags = {0, NULL};
  ar_study *s = NULL;
  ar_study_opts so = AR_STUDY_OPTS_INIT;
  ar_status st = ar_study_load(file, &so, &s, &diags);
  if (st != AR_OK) {
    fprintf(stderr, "%s is a study file (it has factors:), which `accelrt study` runs:\n", file);
    ar_diags_print(&diags, file, stderr);
    ar_diags_fini(&diags);
    return st == AR_NOMEM ? CLI_FAIL : CLI_USAGE;
  }
  ar_diags_fini(&diags);
  printf("%s: valid study file (`accelrt study` runs it; its base job and every planned "
         "cell's settings were validated, a cell's plan: accelrt check BASE --set ...)\n",
         file);
  ar_study_print_design(s, stdout);
  ar_study_destroy(s);
  return CLI_OK;
}

int cli_check(int argc, char **argv) {
  cli_job_args a;
  int rc = cli_parse_job_args(argc, argv, "check", false, &a);
  if (rc >= 0) {
    ar_free(a.sets);
    return rc;
  }
  const char *file = a.job;
  const char **sets = a.sets;
  const int n_sets = a.n_sets;
  ar_spec *spec = NULL;
  ar_diags diags = {0, NULL};
  ar_status st = ar_spec_load(file, sets, n_sets, &spec, &diags);
  if (st != AR_OK) {
    if (n_sets == 0 && looks_like_study(&diags)) {
      rc = check_study(file);
    } else {
      rc = cli_load_failed(file, st, &diags);
    }
    ar_diags_fini(&diags);
    ar_free(sets);
    return rc;
  }
  ar_diags_fini(&diags);
  if (a.print) { /* the YAML alone, so that it can be saved and run */
    fputs(spec->resolved, stdout);
    ar_spec_destroy(spec);
    ar_free(sets);
    return CLI_OK;
  }
  printf("%s: valid%s\n", file,
         spec->n_jobs > 0 ? " jobs file"
         : spec->distributed.enabled ? " distributed job" : " job");
  ar_err err = AR_ERR_INIT;
  if ((rc = cli_route_chain(spec, stdout)) >= 0) {
    ar_spec_destroy(spec);
    ar_free(sets);
    return rc;
  }
  if (spec->n_jobs > 0)
    st = check_jobs(spec, NULL, &err);
  else if (spec->distributed.enabled)
    st = check_distributed(spec, &err);
  else
    st = check_single(spec, &err);
  if (st != AR_OK) {
    fflush(stdout);
    fprintf(stderr, "accelrt check: error: %s\n", err.msg[0] ? err.msg : ar_status_str(st));
    rc = st == AR_PARSE || st == AR_SPEC ? CLI_USAGE : CLI_FAIL;
  } else {
    rc = CLI_OK;
  }
  ar_spec_destroy(spec);
  ar_free(sets);
  return rc;
}
