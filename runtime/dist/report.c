/* Rank 0's bookkeeping: every worker's and server's iteration report, the
 * time oracle fed from them during warm-up, TicTac's per-iteration
 * metrics (§3.3: makespan, N, C, U_min, U_max, E) and the straggler
 * spread, trace.tsv, and the distributed keys that rank 0's job adds to
 * its metrics lines and summary (the job writes them, evaluates and
 * checkpoints); the other servers' shards gathered into rank 0's model
 * before it evaluates or checkpoints. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static size_t slot_len(const ar__dist *c) {
  size_t a = ar__wrep(c, AR__WREP_PARTS), b = ar__srep(c, AR__SREP_PARTS);
  return a > b ? a : b;
}

ar_status ar__dist_report_init(ar__dist *c, bool resume) {
  const ar_spec *s = c->spec;
  int peers = c->W + c->S - 1;
  size_t spans = (size_t)c->W * (2 * (size_t)c->nt + c->nops) + (size_t)c->nt;
  c->oracle_path = ar_path_join(s->output.dir, "oracle.tsv");
  c->trace_path = ar_path_join(s->output.dir, "trace.tsv");
  c->reports = ar_malloc((size_t)peers * slot_len(c) * sizeof *c->reports);
  c->rep_req = ar_malloc((size_t)peers * sizeof *c->rep_req);
  c->rep_done = ar_malloc((size_t)peers * sizeof *c->rep_done + 1);
  c->stats = ar_calloc((size_t)(c->total > 0 ? c->total : 1), sizeof *c->stats);
  c->spans = ar_malloc(spans * sizeof *c->spans);
  c->finish = ar_malloc((size_t)c->W * sizeof *c->finish);
  c->bytes_sum = ar_calloc((size_t)c->nt, sizeof *c->bytes_sum);
  c->bytes_n = ar_calloc((size_t)c->nt, sizeof *c->bytes_n);
  if (!c->bytes_sum || !c->bytes_n || !c->oracle_path || !c->trace_path || !c->reports ||
      !c->rep_req || !c->rep_done || !c->stats || !c->spans || !c->finish)
    return ar_errf(c->err, AR_NOMEM, "out of memory for rank 0's reports");
  int n;
  AR_CHECK(ar__dist_count(c, slot_len(c), "an iteration report", &n));
  for (int i = 0; i < peers; i++)
    c->rep_req[i] = MPI_REQUEST_NULL;
  AR_CHECK(ar_commsched_oracle_create(c->g, &c->oracle, c->err));
  if (resume)
    AR_CHECK(ar_trim_lines(NULL, c->trace_path, c->iter, NULL, c->err));
  c->trace = fopen(c->trace_path, resume ? "a" : "w");
  if (!c->trace)
    return ar_errf(c->err, AR_IO, "cannot write '%s': %s", c->trace_path, strerror(errno));
  if (!resume)
    fputs("# accelrt dist trace: seconds on rank 0's clock; a recv's wire_s is when its\n"
          "# bytes went on the (emulated) link, link_s when the link delivered it, start/end\n"
          "# when the worker matched / had it; a compute op's start/end are its own\n"
          "iteration\twarmup\tworker\top\tkind\tbytes\tstart_s\tend_s\twire_s\tlink_s\n",
          c->trace);
  return AR_OK;
}

void ar__dist_report_fini(ar__dist *c) {
  if (c->rep_req) {
    for (int i = 0; i < c->W + c->S - 1; i++)
      if (c->rep_req[i] != MPI_REQUEST_NULL) {
        MPI_Cancel(&c->rep_req[i]);
        MPI_Request_free(&c->rep_req[i]);
      }
  }
  if (c->trace)
    fclose(c->trace);
  ar_commsched_oracle_destroy(c->oracle);
  ar_free(c->reports);
  ar_free(c->rep_req);
  ar_free(c->rep_done);
  ar_free(c->stats);
  ar_free(c->spans);
  ar_free(c->finish);
  ar_free(c->bytes_sum);
  ar_free(c->bytes_n);
  ar_free(c->oracle_path);
  ar_free(c->trace_path);
}

ar_status ar__dist_reports_post(ar__dist *c) {
  size_t slot = slot_len(c);
  for (int i = 0; i < c->W + c->S - 1; i++) {
    bool worker = i < c->W;
    int src = worker ? c->S + i : i - c->W + 1;
    size_t len = worker ? ar__wrep(c, AR__WREP_PARTS) : ar__srep(c, AR__SREP_PARTS);
    int rc = MPI_Irecv(c->reports + (size_t)i * slot, (int)len, MPI_DOUBLE, src,
                       AR__DIST_TAG_REPORT, c->cctl, &c->rep_req[i]);
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "posting the report receive from rank %d", src);
  }
  return AR_OK;
}

static ar_status wait_reports(ar__dist *c) {
  int peers = c->W + c->S - 1, *done = c->rep_done;
  ar_status st = AR_OK;
  ar__dist_poll_reset(c);
  while (st == AR_OK) {
    int n = 0;
    int rc = MPI_Testsome(peers, c->rep_req, &n, done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      st = ar__dist_mpi_err(c, rc, "iteration %lld: receiving iteration reports",
                            (long long)c->iter + 1);
      break;
    }
    int open = -1;
    for (int i = 0; i < peers && open < 0; i++)
      if (c->rep_req[i] != MPI_REQUEST_NULL)
        open = i < c->W ? c->S + i : i - c->W + 1;
    if (open < 0)
      break;
    st = ar__dist_poll(c, n != MPI_UNDEFINED && n > 0, open, "its iteration report");
  }
  return st;
}

/* The report of server s (its own for rank 0) and of worker w. */
static const double *srep(const ar__dist *c, int s, const double *own) {
  return s == 0 ? own : c->reports + (size_t)(c->W + s - 1) * slot_len(c);
}
static const double *wrep(const ar__dist *c, int w) {
  return c->reports + (size_t)w * slot_len(c);
}

/* Feeds one traced iteration of every worker to the oracle: a compute op
 * from its own start and end, a recv from when its server put it on the
 * wire to when the worker had it (the oracle then charges a transfer
 * queued behind another only from when it could start, TicTac §4.1). */
static ar_status trace_to_oracle(ar__dist *c, const double *own) {
  size_t nops = c->nops;
  double *start = ar_malloc(2 * nops * sizeof *start);
  if (!start)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  double *end = start + nops;
  ar_status st = AR_OK;
  for (int w = 0; w < c->W && st == AR_OK; w++) {
    const double *r = wrep(c, w);
    memcpy(start, r + ar__wrep(c, AR__WREP_OP_START), nops * sizeof *start);
    memcpy(end, r + ar__wrep(c, AR__WREP_OP_END), nops * sizeof *end);
    for (int t = 0; t < c->nt; t++) {
      /* With link emulation the server's times, not the worker's: a
       * worker busy computing notices an arrival only at its next poll. */
      ar_commsched_op op = ar_commsched_graph_recv_op(c->g, (uint32_t)t);
      const double *s = srep(c, c->t[t].server, own);
      size_t k = (size_t)w * (size_t)c->nt + (size_t)t;
      start[op] = s[ar__srep(c, AR__SREP_SEND_START) + k];
      if (c->spec->distributed.link_gbps > 0)
        end[op] = s[ar__srep(c, AR__SREP_ARRIVE) + k];
    }
    st = ar_commsched_oracle_add_run(c->oracle, c->g, start, end, c->err);
  }
  ar_free(start);
  return st;
}

/* The rows tensors' bytes of one iteration: per worker (mean over the
 * workers) into the iteration's figures, and while tracing into the sums
 * whose means become the op graph's bytes (ar__dist_schedule_setup).  The
 * full copy of the parameters that starts a run is left out of the means:
 * it happens once, not every iteration. */
static void count_rows_bytes(ar__dist *c, int64_t iter, bool traced, ar__dist_iter_stat *out) {
  size_t nt = (size_t)c->nt;
  out->rows_param = out->rows_grad = 0.0;
  for (int w = 0; w < c->W; w++) {
    const double *r = wrep(c, w);
    for (size_t t = 0; t < nt; t++) {
      if (!c->t[t].rows)
        continue;
      double p = r[ar__wrep(c, AR__WREP_PARAM_BYTES) + t];
      double g = r[ar__wrep(c, AR__WREP_GRAD_BYTES) + t];
      out->rows_param += p / c->W;
      out->rows_grad += g / c->W;
      if (!traced)
        continue;
      if (iter != c->first_iter) {
        c->bytes_sum[t] += p;
        c->bytes_n[t]++;
      }
      c->bytes_sum[t] += g;
      c->bytes_n[t]++;
    }
  }
}

size_t ar__dist_rows_mean_bytes(const ar__dist *c, int t) {
  if (!c->t[t].rows || c->bytes_n[t] == 0)
    return c->t[t].bytes;
  return (size_t)llround(c->bytes_sum[t] / (double)c->bytes_n[t]);
}

static void add_span(ar_commsched_span *s, size_t *n, double a, double b) {
  if (!isfinite(a) || !isfinite(b))
    return;
  s[*n].start = a;
  s[*n].end = b < a ? a : b; /* clocks of two machines may disagree */
  (*n)++;
}

/* TicTac's metrics over all workers' spans together (as the simulator
 * computes them): communication = parameters from the server's iteration
 * start to their arrival and gradients from ready to delivered;
 * computation = the workers' ops and the servers' updates, each update
 * its own span (TicTac's C is computation busy time: the stretch from a
 * server's first update to its last is mostly the server waiting for the
 * gradients still on the link, which is communication). */
static ar_status iteration_metrics(ar__dist *c, const double *own, ar__dist_iter_stat *out) {
  size_t nc = 0, nk = 0, nops = c->nops, nt = (size_t)c->nt;
  size_t ncomm_max = (size_t)c->W * 2 * nt;
  ar_commsched_span *comm = c->spans, *comp = c->spans + ncomm_max;
  for (int w = 0; w < c->W; w++) {
    const double *r = wrep(c, w);
    const double *r0 = r + ar__wrep(c, AR__WREP_OP_START), *r1 = r + ar__wrep(c, AR__WREP_OP_END);
    double fin = -INFINITY;
    for (size_t t = 0; t < nt; t++) {
      const double *s = srep(c, c->t[t].server, own);
      ar_commsched_op op = ar_commsched_graph_recv_op(c->g, (uint32_t)t);
      size_t k = (size_t)w * nt + t;
      double arr = s[ar__srep(c, AR__SREP_ARRIVE) + k], del = s[ar__srep(c, AR__SREP_DELIVERED) + k];
      /* A parameter has arrived when the (emulated) link delivered it,
       * not when the busy worker noticed. */
      bool link = c->spec->distributed.link_gbps > 0;
      add_span(comm, &nc, s[AR__SREP_START], link && arr < r1[op] ? arr : r1[op]);
      add_span(comm, &nc, r[ar__wrep(c, AR__WREP_READY) + t], del);
      if (del > fin)
        fin = del;
    }
    for (size_t op = 0; op < nops; op++)
      if (ar_commsched_graph_kind(c->g, (ar_commsched_op)op) == AR_COMMSCHED_COMPUTE) {
        add_span(comp, &nk, r0[op], r1[op]);
        if (r1[op] > fin)
          fin = r1[op];
      }
    c->finish[w] = fin;
  }
  for (size_t t = 0; t < nt; t++) {
    const double *s = srep(c, c->t[t].server, own);
    add_span(comp, &nk, s[ar__srep(c, AR__SREP_UPD_START) + t],
             s[ar__srep(c, AR__SREP_UPD_END) + t]);
  }
  ar_commsched_metrics m;
  AR_CHECK(ar_commsched_metrics_compute(comm, nc, comp, nk, &m, c->err));
  out->makespan = m.makespan_s;
  out->comm = m.comm_busy_s;
  out->comp = m.comp_busy_s;
  out->eff = m.efficiency;
  out->eff_defined = m.efficiency_defined;
  out->straggler = ar_commsched_straggler_spread(c->finish, (size_t)c->W);
  return AR_OK;
}

/* One line per op per worker into trace.tsv (see ar__dist_report_init). */
static ar_status write_trace(ar__dist *c, int64_t iter, bool warm, const double *own) {
  size_t nops = c->nops, nt = (size_t)c->nt;
  for (int w = 0; w < c->W; w++) {
    const double *r = wrep(c, w);
    const double *r0 = r + ar__wrep(c, AR__WREP_OP_START), *r1 = r + ar__wrep(c, AR__WREP_OP_END);
    for (size_t op = 0; op < nops; op++) {
      ar_commsched_op o = (ar_commsched_op)op;
      bool recv = ar_commsched_graph_kind(c->g, o) == AR_COMMSCHED_RECV;
      double wire = NAN, link = NAN;
      size_t bytes = 0;
      if (recv) {
        uint32_t t = ar_commsched_graph_transfer(c->g, o);
        const double *s = srep(c, c->t[t].server, own);
        size_t k = (size_t)w * nt + t;
        wire = s[ar__srep(c, AR__SREP_SEND_START) + k];
        link = s[ar__srep(c, AR__SREP_ARRIVE) + k];
        /* as received: rows vary */
        bytes = (size_t)r[ar__wrep(c, AR__WREP_PARAM_BYTES) + t];
      }
      fprintf(c->trace, "%lld\t%d\t%d\t%s\t%s\t%zu\t%.9f\t%.9f\t%.9f\t%.9f\n",
              (long long)iter, warm ? 1 : 0, w, ar_commsched_graph_name(c->g, o),
              recv ? "recv" : "compute", bytes, r0[op], r1[op], wire, link);
    }
  }
  if (fflush(c->trace) != 0)
    return ar_errf(c->err, AR_IO, "cannot append to '%s': %s", c->trace_path, strerror(errno));
  return AR_OK;
}

/* The iteration line's distributed keys (rank 0's job writes iteration,
 * kind and train_loss). */
static void iteration_keys(const ar__dist *c, ar_json *j) {
  const ar__dist_iter_stat *s = c->cur;
  ar_json_bool(j, "warmup", s->warm);
  ar_json_num(j, "iteration_s", s->wall);
  ar_json_num(j, "makespan_s", s->makespan);
  ar_json_num(j, "comm_busy_s", s->comm);
  ar_json_num(j, "comp_busy_s", s->comp);
  if (s->eff_defined)
    ar_json_num(j, "efficiency", s->eff);
  ar_json_num(j, "straggler_s", s->straggler);
  if (c->rows_dense_bytes > 0) {
    ar_json_num(j, "rows_param_bytes", s->rows_param);
    ar_json_num(j, "rows_grad_bytes", s->rows_grad);
  }
}

ar_status ar__dist_reports_collect(ar__dist *c, int64_t iter, double wall_s, const double *own) {
  AR_CHECK(wait_reports(c));
  double loss_sum = 0.0, rows = 0.0;
  for (int w = 0; w < c->W; w++) {
    const double *r = wrep(c, w);
    if ((int64_t)r[AR__WREP_ITER] != iter)
      return ar_errf(c->err, AR_STATE, "rank %d reported iteration %lld during iteration %lld",
                     c->S + w, (long long)r[AR__WREP_ITER], (long long)iter);
    loss_sum += r[AR__WREP_LOSS_SUM];
    rows += r[AR__WREP_ROWS];
  }
  bool traced = iter < c->first_iter + c->warmup;
  if (traced)
    AR_CHECK(trace_to_oracle(c, own));
  ar__dist_iter_stat *s = &c->stats[iter - 1];
  AR_CHECK(iteration_metrics(c, own, s));
  count_rows_bytes(c, iter, traced, s);
  s->wall = wall_s;
  s->warm = traced;
  c->cur = s;
  /* Every worker reads the same stream: worker 0's position is the job's. */
  ar_job_result res = {(int64_t)rows, (int64_t)wrep(c, 0)[AR__WREP_EPOCH],
                       (int64_t)wrep(c, 0)[AR__WREP_ROWS_IN_EPOCH],
                       rows > 0 ? loss_sum / rows : 0.0, wall_s};
  AR_CHECK(ar_job_record(c->job, &res, c->err));
  return write_trace(c, iter, traced, own);
}

/* ---- gathering shards, evaluation, checkpoints ---- */

ar_status ar__dist_gather(ar__dist *c) {
  if (c->S == 1)
    return AR_OK;
  /* Every tensor's four buffers, in pieces. */
  size_t nreq = 0, cap = 0;
  for (int t = 0; t < c->nt; t++)
    cap += 3 * (size_t)ar__dist_pieces(c, c->t[t].bytes) +
           (size_t)ar__dist_pieces(c, c->t[t].nrows * sizeof(uint64_t));
  MPI_Request *req = ar_malloc(cap * sizeof *req);
  if (!req)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  ar_status st = AR_OK;
  for (int t = 0; t < c->nt && st == AR_OK; t++) {
    ar__dist_tensor *T = &c->t[t];
    if (T->server == 0 || (c->rank != 0 && c->rank != T->server))
      continue;
    /* A sampled layer's row steps (sparse Adam's) go with its w. */
    void *bufs[4] = {T->p, T->s1, T->s2, T->last};
    for (int k = 0; k < 4 && st == AR_OK; k++) {
      if (!bufs[k])
        continue;
      size_t bytes = k < 3 ? T->bytes : T->nrows * sizeof(uint64_t);
      int pieces = ar__dist_pieces(c, bytes);
      st = ar__dist_post(c, c->rank != 0, bufs[k], bytes, pieces, c->rank == 0 ? T->server : 0,
                         AR__DIST_TAG_GATHER + 4 * t + k, c->cctl, req + nreq, "gathering",
                         T->name);
      if (st == AR_OK)
        nreq += (size_t)pieces;
    }
  }
  for (size_t i = 0; i < nreq && st == AR_OK; i++)
    st = ar__dist_wait(c, &req[i], c->rank == 0 ? -1 : 0, "a shard of the model");
  ar_free(req);
  return st;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of field `off` (a double inside ar__dist_iter_stat) over the
 * iterations after warm-up (all of them when warm-up is all there is). */
static double median(const ar__dist *c, size_t off, bool eff) {
  int64_t n = c->iter - c->first_iter + 1, k = 0;
  if (n <= 0)
    return NAN;
  double *v = ar_malloc((size_t)n * sizeof *v);
  if (!v)
    return NAN;
  for (int pass = 0; pass < 2 && k == 0; pass++)
    for (int64_t i = c->first_iter - 1; i < c->iter; i++) {
      const ar__dist_iter_stat *s = &c->stats[i];
      if ((pass == 0 && s->warm) || (eff && !s->eff_defined))
        continue;
      v[k++] = *(const double *)((const char *)s + off);
    }
  double r = NAN;
  if (k > 0) {
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    r = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
  }
  ar_free(v);
  return r;
}

/* The summary's distributed keys (rank 0's job writes the usual ones). */
static void summary_keys(const ar__dist *c, ar_json *j) {
  double warm = 0.0;
  for (int64_t i = c->first_iter - 1; i < c->iter; i++)
    if (c->stats[i].warm)
      warm += c->stats[i].wall;
  ar_json_int(j, "servers", c->S);
  ar_json_int(j, "workers", c->W);
  ar_json_int(j, "transfers", c->nt);
  ar_json_str(j, "order", ar_commsched_order_name(c->order));
  ar_json_bool(j, "schedule_from_file", c->from_file);
  ar_json_num(j, "link_gbps", c->spec->distributed.link_gbps);
  ar_json_int(j, "warmup_iterations", c->warmup);
  ar_json_num(j, "warmup_s", warm);
  ar_json_num(j, "iteration_s_median", median(c, offsetof(ar__dist_iter_stat, wall), false));
  ar_json_num(j, "makespan_s_median", median(c, offsetof(ar__dist_iter_stat, makespan), false));
  ar_json_num(j, "efficiency_median", median(c, offsetof(ar__dist_iter_stat, eff), true));
  double comm = median(c, offsetof(ar__dist_iter_stat, comm), false);
  double comp = median(c, offsetof(ar__dist_iter_stat, comp), false);
  ar_json_num(j, "comm_busy_s_median", comm);
  ar_json_num(j, "comp_busy_s_median", comp);
  /* Measured computation over communication per iteration (issue 17):
   * the medians of the busy times above, so above 1 the communication
   * could hide under the computation, below 1 it cannot. */
  ar_json_num(j, "comp_comm_ratio", comm > 0 ? comp / comm : NAN);
  ar_json_num(j, "straggler_s_median", median(c, offsetof(ar__dist_iter_stat, straggler), false));
  ar_json_num(j, "schedule_ms", c->schedule_ms);
  /* Where the workers computed: "host,cuda:0,host (staged)", and how many
   * staged their tensors through host buffers (GPU workers, or told to). */
  char devs[1024] = "";
  size_t dl = 0;
  int staged = 0, gpus = 0;
  for (int w = 0; w < c->W; w++) {
    const char *d = c->wdesc + (size_t)(c->S + w) * AR__DIST_DEV_DESC;
    bool gpu = strncmp(d, "cuda", 4) == 0;
    gpus += gpu;
    staged += gpu || strstr(d, "(staged)") != NULL;
    if (dl < sizeof devs)
      dl += (size_t)snprintf(devs + dl, sizeof devs - dl, "%s%s", w ? "," : "", d);
  }
  ar_json_str(j, "worker_devices", devs);
  ar_json_int(j, "gpu_workers", gpus);
  ar_json_int(j, "staged_workers", staged);
  if (c->rows_dense_bytes == 0)
    return;
  /* The sampled layers' tensors, per worker and iteration: their dense
   * size, and the bytes that moved as rows (medians after warm-up). */
  int sampled = 0;
  for (int w = 0; w < c->W; w++)
    for (int l = 0; l < c->spec->n_layers; l++)
      if (ar__dist_sampled(c, c->S + w, l)) {
        sampled++;
        break;
      }
  ar_json_int(j, "sampled_workers", sampled);
  ar_json_int(j, "rows_dense_bytes", (int64_t)c->rows_dense_bytes);
  ar_json_int(j, "rows_dense_steps", c->rows_dense_steps); /* rank 0's layers */
  ar_json_num(j, "param_bytes_median", median(c, offsetof(ar__dist_iter_stat, rows_param), false));
  ar_json_num(j, "sparse_grad_bytes_median",
              median(c, offsetof(ar__dist_iter_stat, rows_grad), false));
  for (int t = 0; t < c->nt; t++)
    if (c->t[t].rows) {
      char key[128];
      snprintf(key, sizeof key, "graph_bytes.%s", c->t[t].name);
      ar_json_int(j, key, (int64_t)ar_commsched_graph_bytes(c->g, (uint32_t)t));
    }
}

void ar__dist_keys(void *ctx, ar_job_output where, ar_json *j) {
  const ar__dist *c = ctx;
  if (where == AR_JOB_OUT_ITERATION)
    iteration_keys(c, j);
  else
    summary_keys(c, j);
}
