/* Rank 0's bookkeeping: every worker's and server's iteration report, the
 * time oracle fed from them during warm-up, TicTac's per-iteration
 * metrics (§3.3: makespan, N, C, U_min, U_max, E) and the straggler
 * spread, metrics.jsonl, evaluation and checkpoints on a model whose
 * shards are gathered from the other servers, and summary.json. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

size_t ar__dist_worker_report_len(const ar__dist *c) {
  return AR__WREP_HEAD + 2 * c->nops + 4 * (size_t)c->nt;
}

size_t ar__dist_server_report_len(const ar__dist *c) {
  return AR__SREP_HEAD + 3 * (size_t)c->W * (size_t)c->nt;
}

static size_t slot_len(const ar__dist *c) {
  size_t a = ar__dist_worker_report_len(c), b = ar__dist_server_report_len(c);
  return a > b ? a : b;
}


ar_status ar__dist_report_init(ar__dist *c, bool resume) {
  const ar_spec *s = c->spec;
  int peers = c->W + c->S - 1;
  size_t spans = (size_t)c->W * (2 * (size_t)c->nt + c->nops) + (size_t)c->S;
  c->ckpt_path = ar_path_join(s->output.dir, "checkpoint.bin");
  c->metrics_path = ar_path_join(s->output.dir, "metrics.jsonl");
  c->summary_path = ar_path_join(s->output.dir, "summary.json");
  c->oracle_path = ar_path_join(s->output.dir, "oracle.tsv");
  c->trace_path = ar_path_join(s->output.dir, "trace.tsv");
  c->reports = ar_malloc((size_t)peers * slot_len(c) * sizeof *c->reports);
  c->rep_req = ar_malloc((size_t)peers * sizeof *c->rep_req);
  c->stats = ar_calloc((size_t)(c->total > 0 ? c->total : 1), sizeof *c->stats);
  c->spans = ar_malloc(spans * sizeof *c->spans);
  c->finish = ar_malloc((size_t)c->W * sizeof *c->finish);
  c->bytes_sum = ar_calloc((size_t)c->nt, sizeof *c->bytes_sum);
  c->bytes_n = ar_calloc((size_t)c->nt, sizeof *c->bytes_n);
  if (!c->bytes_sum || !c->bytes_n || !c->ckpt_path || !c->metrics_path || !c->summary_path || !c->oracle_path || !c->trace_path || !c->reports ||
      !c->rep_req || !c->stats || !c->spans || !c->finish)
    return ar_errf(c->err, AR_NOMEM, "out of memory for rank 0's reports");
  for (int i = 0; i < peers; i++)
    c->rep_req[i] = MPI_REQUEST_NULL;
  AR_CHECK(ar_commsched_oracle_create(c->g, &c->oracle, c->err));
  if (resume)
    AR_CHECK(ar_trim_lines(NULL, c->metrics_path, c->st.iteration, "iteration", c->err));
  c->metrics = fopen(c->metrics_path, resume ? "a" : "w");
  if (!c->metrics)
    return ar_errf(c->err, AR_IO, "cannot write '%s': %s", c->metrics_path, strerror(errno));
  if (resume)
    AR_CHECK(ar_trim_lines(NULL, c->trace_path, c->st.iteration, NULL, c->err));
  c->trace = fopen(c->trace_path, resume ? "a" : "w");
  if (!c->trace)
    return ar_errf(c->err, AR_IO, "cannot write '%s': %s", c->trace_path, strerror(errno));
  if (!resume)
    fputs("# accelrt dist trace: seconds on rank 0's clock; a recv's wire_s is when its\n"
          "# bytes went on the (emulated) link, link_s when the link delivered it, start/end\n"
          "# when the worker matched / had it; a compute op's start/end are its own\n"
          "iteration\twarmup\tworker\top\tkind\tbytes\tstart_s\tend_s\twire_s\tlink_s\n",
          c->trace);
  c->last_eval_iter = -1;
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
  if (c->progress) {
    ar_progress_finish(c->progress);
    ar_progress_destroy(c->progress);
  }
  if (c->metrics)
    fclose(c->metrics);
  if (c->trace)
    fclose(c->trace);
  ar_commsched_oracle_destroy(c->oracle);
  ar_free(c->reports);
  ar_free(c->rep_req);
  ar_free(c->stats);
  ar_free(c->spans);
  ar_free(c->finish);
  ar_free(c->bytes_sum);
  ar_free(c->bytes_n);
  ar_free(c->ckpt_path);
  ar_free(c->metrics_path);
  ar_free(c->summary_path);
  ar_free(c->oracle_path);
  ar_free(c->trace_path);
}

ar_status ar__dist_reports_post(ar__dist *c) {
  size_t slot = slot_len(c);
  for (int i = 0; i < c->W + c->S - 1; i++) {
    bool worker = i < c->W;
    int src = worker ? c->S + i : i - c->W + 1;
    size_t len = worker ? ar__dist_worker_report_len(c) : ar__dist_server_report_len(c);
    int rc = MPI_Irecv(c->reports + (size_t)i * slot, (int)len, MPI_DOUBLE, src,
                       AR__DIST_TAG_REPORT, c->cctl, &c->rep_req[i]);
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "posting the report receive from rank %d", src);
  }
  return AR_OK;
}

static ar_status wait_reports(ar__dist *c) {
  int peers = c->W + c->S - 1;
  int *done = ar_malloc((size_t)peers * sizeof *done + 1);
  if (!done)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  ar_status st = AR_OK;
  ar__dist_poll_reset(c);
  while (st == AR_OK) {
    int n = 0;
    int rc = MPI_Testsome(peers, c->rep_req, &n, done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      st = ar__dist_mpi_err(c, rc, "iteration %lld: receiving iteration reports",
                            (long long)c->st.iteration + 1);
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
  ar_free(done);
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
    const double *r = wrep(c, w) + AR__WREP_HEAD;
    memcpy(start, r, nops * sizeof *start);
    memcpy(end, r + nops, nops * sizeof *end);
    size_t wt = (size_t)c->W * (size_t)c->nt;
    for (int t = 0; t < c->nt; t++) {
      /* With link emulation the server's times, not the worker's: a
       * worker busy computing notices an arrival only at its next poll. */
      ar_commsched_op op = ar_commsched_graph_recv_op(c->g, (uint32_t)t);
      const double *s = srep(c, c->t[t].server, own) + AR__SREP_HEAD + (size_t)w * c->nt + t;
      start[op] = s[0];
      if (c->spec->distributed.link_gbps > 0)
        end[op] = s[wt];
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
  size_t nt = (size_t)c->nt, base = 2 * c->nops + 2 * nt;
  out->rows_param = out->rows_grad = 0.0;
  for (int w = 0; w < c->W; w++) {
    const double *r = wrep(c, w) + AR__WREP_HEAD;
    for (size_t t = 0; t < nt; t++) {
      if (!c->t[t].rows)
        continue;
      double p = r[base + t], g = r[base + nt + t];
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
 * computation = the workers' ops and the servers' updates. */
static ar_status iteration_metrics(ar__dist *c, const double *own, ar__dist_iter_stat *out) {
  size_t nc = 0, nk = 0, nops = c->nops, nt = (size_t)c->nt;
  size_t ncomm_max = (size_t)c->W * 2 * nt;
  ar_commsched_span *comm = c->spans, *comp = c->spans + ncomm_max;
  for (int w = 0; w < c->W; w++) {
    const double *r = wrep(c, w) + AR__WREP_HEAD;
    double fin = -INFINITY;
    for (size_t t = 0; t < nt; t++) {
      const double *s = srep(c, c->t[t].server, own);
      ar_commsched_op op = ar_commsched_graph_recv_op(c->g, (uint32_t)t);
      size_t wt = nt * (size_t)c->W, k = AR__SREP_HEAD + (size_t)w * nt + t;
      double arr = s[k + wt], del = s[k + 2 * wt];
      /* A parameter has arrived when the (emulated) link delivered it,
       * not when the busy worker noticed. */
      bool link = c->spec->distributed.link_gbps > 0;
      add_span(comm, &nc, s[AR__SREP_START], link && arr < r[nops + op] ? arr : r[nops + op]);
      add_span(comm, &nc, r[2 * nops + t], del);
      if (del > fin)
        fin = del;
    }
    for (size_t op = 0; op < nops; op++)
      if (ar_commsched_graph_kind(c->g, (ar_commsched_op)op) == AR_COMMSCHED_COMPUTE) {
        add_span(comp, &nk, r[op], r[nops + op]);
        if (r[nops + op] > fin)
          fin = r[nops + op];
      }
    c->finish[w] = fin;
  }
  for (int s = 0; s < c->S; s++)
    add_span(comp, &nk, srep(c, s, own)[AR__SREP_UPD0], srep(c, s, own)[AR__SREP_UPD1]);
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
  size_t nops = c->nops, nt = (size_t)c->nt, wt = nt * (size_t)c->W;
  for (int w = 0; w < c->W; w++) {
    const double *r = wrep(c, w) + AR__WREP_HEAD;
    for (size_t op = 0; op < nops; op++) {
      ar_commsched_op o = (ar_commsched_op)op;
      bool recv = ar_commsched_graph_kind(c->g, o) == AR_COMMSCHED_RECV;
      double wire = NAN, link = NAN, start = r[op];
      size_t bytes = 0;
      if (recv) {
        uint32_t t = ar_commsched_graph_transfer(c->g, o);
        const double *s = srep(c, c->t[t].server, own) + AR__SREP_HEAD + (size_t)w * nt + t;
        wire = s[0];
        link = s[wt];
        bytes = (size_t)r[2 * nops + 2 * nt + t]; /* as received: rows vary */
      }
      fprintf(c->trace, "%lld\t%d\t%d\t%s\t%s\t%zu\t%.9f\t%.9f\t%.9f\t%.9f\n",
              (long long)iter, warm ? 1 : 0, w, ar_commsched_graph_name(c->g, o),
              recv ? "recv" : "compute", bytes, start, r[nops + op], wire, link);
    }
  }
  if (fflush(c->trace) != 0)
    return ar_errf(c->err, AR_IO, "cannot append to '%s': %s", c->trace_path, strerror(errno));
  return AR_OK;
}

static ar_status log_iteration(ar__dist *c, int64_t iter, double loss,
                               const ar__dist_iter_stat *s) {
  ar_json *j = ar_json_begin();
  ar_json_int(j, "iteration", iter);
  ar_json_str(j, "kind", "iteration");
  ar_json_bool(j, "warmup", s->warm);
  ar_json_num(j, "train_loss", loss);
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
  const char *text = ar_json_end(j);
  ar_status st = AR_OK;
  if (!text || fputs(text, c->metrics) < 0 || fflush(c->metrics) != 0)
    st = ar_errf(c->err, AR_IO, "cannot append to '%s': %s", c->metrics_path, strerror(errno));
  ar_json_destroy(j);
  return st;
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
  c->st.epoch = (int64_t)wrep(c, 0)[AR__WREP_EPOCH];
  c->st.rows_in_epoch = (int64_t)wrep(c, 0)[AR__WREP_ROWS_IN_EPOCH];
  c->st.samples += (int64_t)rows;
  c->st.train_s += wall_s;
  bool traced = iter < c->first_iter + c->warmup;
  if (traced)
    AR_CHECK(trace_to_oracle(c, own));
  ar__dist_iter_stat *s = &c->stats[iter - 1];
  AR_CHECK(iteration_metrics(c, own, s));
  count_rows_bytes(c, iter, traced, s);
  s->wall = wall_s;
  s->warm = traced;
  double loss = rows > 0 ? loss_sum / rows : 0.0;
  if (!isfinite(loss))
    return ar_errf(c->err, AR_RANGE, "iteration %lld: the loss became %f; lower "
                   "train.optimizer's lr", (long long)iter, loss);
  c->loss_window += loss;
  c->loss_window_n++;
  c->last_train_loss = loss;
  AR_CHECK(log_iteration(c, iter, loss, s));
  AR_CHECK(write_trace(c, iter, traced, own));
  ar_progress_update(c->progress, iter, c->st.epoch, loss,
                     c->st.train_s > 0 ? (double)c->st.samples / c->st.train_s : 0.0);
  return AR_OK;
}

/* ---- gathering shards, evaluation, checkpoints ---- */

ar_status ar__dist_gather(ar__dist *c) {
  if (c->S == 1)
    return AR_OK;
  int nreq = 0;
  MPI_Request *req = ar_malloc((size_t)c->nt * 4 * sizeof *req);
  if (!req)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  ar_status st = AR_OK;
  for (int t = 0; t < c->nt && st == AR_OK; t++) {
    ar__dist_tensor *T = &c->t[t];
    if (T->server == 0 || (c->rank != 0 && c->rank != T->server))
      continue;
    /* A sampled layer's row steps (sparse Adam's) go with its w. */
    void *bufs[4] = {T->p, T->s1, T->s2, T->last};
    for (int k = 0; k < 4; k++) {
      if (!bufs[k])
        continue;
      int tag = AR__DIST_TAG_GATHER + 4 * t + k, rc;
      int n = k < 3 ? (int)T->count : (int)(T->nrows * sizeof(uint64_t));
      MPI_Datatype type = k < 3 ? MPI_FLOAT : MPI_BYTE;
      if (c->rank == 0)
        rc = MPI_Irecv(bufs[k], n, type, T->server, tag, c->cctl, &req[nreq]);
      else
        rc = MPI_Isend(bufs[k], n, type, 0, tag, c->cctl, &req[nreq]);
      if (rc != MPI_SUCCESS)
        st = ar__dist_mpi_err(c, rc, "gathering '%s'", T->name);
      else
        nreq++;
    }
  }
  for (int i = 0; i < nreq && st == AR_OK; i++)
    st = ar__dist_wait(c, &req[i], c->rank == 0 ? -1 : 0, "a shard of the model");
  ar_free(req);
  return st;
}

static double p_at(const ar_eval_acc *a, int i) {
  static const int ks[3] = {1, 3, 5};
  return a->rows ? 100.0 * a->hits[i] / ((double)a->rows * ks[i]) : -1.0;
}

ar_status ar__dist_eval_and_log(ar__dist *c) {
  ar_eval_acc acc;
  memset(&acc, 0, sizeof acc);
  double t0 = ar_now();
  if (c->test) {
    AR_CHECK(ar_reader_rewind(c->test, 0, c->err));
    int64_t limit = c->spec->train.eval_points;
    for (;;) {
      int64_t want = c->gbatch.cap_rows;
      if (limit > 0 && limit - acc.rows < want)
        want = limit - acc.rows;
      if (want <= 0)
        break;
      AR_CHECK(ar_reader_next(c->test, want, &c->gbatch, c->err));
      if (c->gbatch.rows == 0)
        break;
      ar_status st = ar_model_eval_batch(c->model, &c->gbatch, &acc);
      if (st != AR_OK)
        return ar_errf(c->err, st, "evaluation: %s", c->model->err.msg);
    }
  }
  double eval_s = ar_now() - t0;
  c->last_eval = acc;
  c->last_eval_iter = c->st.iteration;
  double train_loss =
      c->loss_window_n ? c->loss_window / (double)c->loss_window_n : c->last_train_loss;
  c->last_train_loss = train_loss;
  c->loss_window = 0;
  c->loss_window_n = 0;
  ar_json *j = ar_json_begin();
  ar_json_int(j, "iteration", c->st.iteration);
  ar_json_str(j, "kind", "eval");
  ar_json_num(j, "epoch", (double)c->st.epoch);
  ar_json_int(j, "samples", c->st.samples);
  ar_json_num(j, "train_loss", train_loss);
  if (acc.rows) {
    ar_json_num(j, "test_loss", acc.loss_sum / (double)acc.rows);
    ar_json_num(j, "p_at_1", p_at(&acc, 0));
    ar_json_num(j, "p_at_3", p_at(&acc, 1));
    ar_json_num(j, "p_at_5", p_at(&acc, 2));
    ar_json_int(j, "test_points", acc.rows);
  }
  ar_json_num(j, "samples_per_s", c->st.train_s > 0 ? (double)c->st.samples / c->st.train_s : 0);
  ar_json_num(j, "train_s", c->st.train_s);
  ar_json_num(j, "eval_s", eval_s);
  const char *text = ar_json_end(j);
  ar_status st = AR_OK;
  if (!text || fputs(text, c->metrics) < 0 || fflush(c->metrics) != 0)
    st = ar_errf(c->err, AR_IO, "cannot append to '%s': %s", c->metrics_path, strerror(errno));
  ar_json_destroy(j);
  return st;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of field `off` (a double inside ar__dist_iter_stat) over the
 * iterations after warm-up (all of them when warm-up is all there is). */
static double median(const ar__dist *c, size_t off, bool eff) {
  int64_t n = c->st.iteration - c->first_iter + 1, k = 0;
  if (n <= 0)
    return NAN;
  double *v = ar_malloc((size_t)n * sizeof *v);
  if (!v)
    return NAN;
  for (int pass = 0; pass < 2 && k == 0; pass++)
    for (int64_t i = c->first_iter - 1; i < c->st.iteration; i++) {
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

static ar_status write_summary(ar__dist *c, const ar_summary *s) {
  double warm = 0.0;
  for (int64_t i = c->first_iter - 1; i < c->st.iteration; i++)
    if (c->stats[i].warm)
      warm += c->stats[i].wall;
  ar_json *j = ar_json_begin();
  ar_json_str(j, "name", c->spec->name);
  ar_json_num(j, "samples_per_s", s->samples_per_s);
  ar_json_num(j, "loss", s->loss);
  ar_json_num(j, "train_loss", s->train_loss);
  if (s->p_at[0] >= 0) {
    ar_json_num(j, "p_at_1", s->p_at[0]);
    ar_json_num(j, "p_at_3", s->p_at[1]);
    ar_json_num(j, "p_at_5", s->p_at[2]);
  }
  ar_json_int(j, "iterations", s->iterations);
  ar_json_int(j, "samples", s->samples);
  ar_json_num(j, "epochs", s->epochs_done);
  ar_json_num(j, "wall_s", s->wall_s);
  ar_json_num(j, "train_s", s->train_s);
  ar_json_int(j, "peak_rss_bytes", s->peak_rss_bytes);
  ar_json_int(j, "persistent_bytes", (int64_t)c->model->plan.persistent_bytes);
  ar_json_str(j, "device", s->device);
  ar_json_int(j, "threads", s->threads);
  ar_json_int(j, "batch", c->spec->train.batch);
  ar_json_bool(j, "interrupted", s->interrupted);
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
  ar_json_num(j, "comm_busy_s_median", median(c, offsetof(ar__dist_iter_stat, comm), false));
  ar_json_num(j, "comp_busy_s_median", median(c, offsetof(ar__dist_iter_stat, comp), false));
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
  if (c->rows_dense_bytes > 0) {
    /* The sampled layers' tensors, per worker and iteration: their dense
     * size, and the bytes that moved as rows (medians after warm-up). */
    int sampled = 0;
    for (int w = 0; w < c->W; w++)
      for (int l = 0; l < c->model->n_layers; l++)
        if (ar__dist_sampled(c, c->S + w, l)) {
          sampled++;
          break;
        }
    ar_json_int(j, "sampled_workers", sampled);
    ar_json_int(j, "rows_dense_bytes", (int64_t)c->rows_dense_bytes);
    ar_json_int(j, "rows_dense_steps", c->rows_dense_steps); /* rank 0's layers */
    ar_json_num(j, "param_bytes_median",
                median(c, offsetof(ar__dist_iter_stat, rows_param), false));
    ar_json_num(j, "sparse_grad_bytes_median",
                median(c, offsetof(ar__dist_iter_stat, rows_grad), false));
    for (int t = 0; t < c->nt; t++)
      if (c->t[t].rows) {
        char key[128];
        snprintf(key, sizeof key, "graph_bytes.%s", c->t[t].name);
        ar_json_int(j, key, (int64_t)ar_commsched_graph_bytes(c->g, (uint32_t)t));
      }
  }
  const char *text = ar_json_end(j);
  ar_status st = text ? ar_write_file_atomic(c->summary_path, text, strlen(text), c->err)
                      : ar_errf(c->err, AR_NOMEM, "out of memory writing the summary");
  ar_json_destroy(j);
  return st;
}

ar_status ar__dist_finish(ar__dist *c, bool finished, double wall0, ar_summary *summary) {
  if (finished && c->last_eval_iter != c->st.iteration)
    AR_CHECK(ar__dist_eval_and_log(c));
  if (c->progress)
    ar_progress_finish(c->progress);
  AR_CHECK(ar_checkpoint_save(c->model, &c->st, NULL, c->ckpt_path, c->err));
  ar_summary s;
  memset(&s, 0, sizeof s);
  const ar_data_stats *ts = ar_reader_stats(c->train);
  s.iterations = c->st.iteration;
  s.samples = c->st.samples;
  s.train_s = c->st.train_s;
  s.samples_per_s = c->st.train_s > 0 ? (double)c->st.samples / c->st.train_s : 0.0;
  s.epochs_done = ts->points ? (double)c->st.samples / (double)ts->points : 0.0;
  s.train_loss = c->last_train_loss;
  s.loss = c->last_eval.rows ? c->last_eval.loss_sum / (double)c->last_eval.rows : s.train_loss;
  for (int i = 0; i < 3; i++)
    s.p_at[i] = c->last_eval.rows ? p_at(&c->last_eval, i) : -1.0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  s.peak_rss_bytes = (int64_t)ru.ru_maxrss * 1024;
  s.threads = ar_device_threads(c->dev);
  snprintf(s.device, sizeof s.device, "host");
  s.interrupted = !finished;
  s.wall_s = ar_now() - wall0;
  AR_CHECK(write_summary(c, &s));
  if (summary)
    *summary = s;
  return AR_OK;
}
