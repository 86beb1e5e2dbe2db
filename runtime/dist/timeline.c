/* A distributed run's timeline (output.dir/trace.json, Chrome trace
 * format).  Every rank records its own spans in one ar_trace made before
 * the loop (include/accelrt/trace.h): its job's iterations, batches and
 * per-layer forward and backward, a worker's waits for its parameters, a
 * server's optimizer, and every parameter and gradient transfer as a span
 * on its channel's track (a server's track per worker, a worker's per
 * server), named by the tensor, with its bytes, its place on the channel
 * in that iteration ("order") and, when a schedule is in force, its
 * TicTac priority.  At the end rank 0 gathers every rank's spans over MPI
 * and writes one trace: one process per rank, the other ranks' times
 * moved onto rank 0's clock.
 *
 * A channel's track is serial (trace.h): it carries one message at a
 * time, so a transfer's span starts when it was posted or matched, or
 * when the one before it on the channel ended if that was later.  What a
 * span covers: a server's parameter send, from when the gate released it
 * (with link emulation: when its bytes went on the emulated wire) to the
 * completion of its send; a worker's parameter receive, from the probe
 * that matched it to its completion; a worker's gradient send, from its
 * post after the layer's backward to its completion as next tested; a
 * server's gradient receive, the poll in which it completed (the receive
 * was posted at the start of the iteration) up to its emulated arrival.
 *
 * Clocks: ar_now() is CLOCK_MONOTONIC, one clock for all processes of a
 * machine and unrelated across machines.  After the run, BARRIER_ROUNDS
 * barriers are timed on every rank; a rank's offset to rank 0 is the
 * median over the rounds of (its exit time - rank 0's).  Ranks on rank 0's
 * machine (the same MPI processor name) share its clock and take offset
 * 0; the estimate is reported for them too (otherData.rank_info). */
#define _GNU_SOURCE
#include "dist_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BARRIER_ROUNDS 9
/* Per-rank figures rank 0 gathers (doubles): fragment bytes, spans,
 * dropped spans, first iteration denied detail, clock offset, barrier
 * estimate, same machine as rank 0, rendering ran out of memory. */
enum { INFO_LEN, INFO_EVENTS, INFO_DROPPED, INFO_STOPPED, INFO_OFFSET, INFO_ESTIMATE,
       INFO_SAME_HOST, INFO_OOM, INFO_N };

ar_status ar__dist_tl_open(ar__dist *c, const ar_trace_opts *rank0) {
  int64_t v[3] = {(int64_t)rank0->events, rank0->detail_first, rank0->detail_every};
  AR_CHECK(ar__dist_bcast(c, v, 3, MPI_INT64_T, "the trace options"));
  int peers = c->S > c->W ? c->S : c->W;
  ar_trace_opts o = AR_TRACE_OPTS_INIT;
  o.events = (size_t)v[0];
  o.detail_first = v[1];
  o.detail_every = v[2];
  o.tracks = AR_TRACE_CHANNEL + 2 * peers; /* per channel: parameters, gradients */
  c->tl_opts = o;
  AR_CHECK(ar_trace_create(&o, &c->tl, c->err));
  if (!c->tl)
    return AR_OK;
  size_t nt = 2 * (size_t)c->spec->n_layers, chans = (size_t)peers;
  c->tl_order = ar_calloc((size_t)(c->server ? c->W : 1) * nt, sizeof *c->tl_order);
  c->tl_t0 = ar_calloc(nt, sizeof *c->tl_t0);
  c->tl_next = ar_calloc(2 * chans, sizeof *c->tl_next);
  if (c->rank == 0) /* made now: the gathering at the end must not fail alone */
    c->tl_infos = ar_calloc((size_t)c->size * INFO_N, sizeof *c->tl_infos);
  if (!c->tl_order || !c->tl_t0 || !c->tl_next || (c->rank == 0 && !c->tl_infos))
    return ar_errf(c->err, AR_NOMEM, "out of memory for the timeline");
  c->tl_gnext = c->tl_next + chans;
  char name[96];
  int n = c->server ? c->W : c->S;
  /* Two serial tracks per channel: its parameters and its gradients go
   * on different ports and, with iterations overlapping at the server,
   * at the same time. */
  for (int k = 0; k < n; k++) {
    if (c->server)
      snprintf(name, sizeof name, "worker %d (rank %d)", k, c->S + k);
    else
      snprintf(name, sizeof name, "server %d (rank %d)", k, k);
    ar_trace_track(c->tl, AR_TRACE_CHANNEL + k, name, true);
    size_t len = strlen(name);
    snprintf(name + len, sizeof name - len, " gradients");
    ar_trace_track(c->tl, AR_TRACE_CHANNEL + n + k, name, true);
  }
  return AR_OK;
}

void ar__dist_tl_close(ar__dist *c) {
  ar_trace_destroy(c->tl);
  c->tl = NULL;
  ar_free(c->tl_order);
  ar_free(c->tl_t0);
  ar_free(c->tl_next);
  ar_free(c->tl_infos);
  c->tl_order = c->tl_next = c->tl_gnext = NULL;
  c->tl_t0 = c->tl_infos = NULL;
}

/* ar_now() minus ar__dist_clock(c) (the two clocks advance together;
 * their difference is read anew each iteration).  Read between two
 * ar_now() stamps, the narrowest of a few tries: a process descheduled
 * between the two reads would otherwise shift every span converted from
 * the link clock by that pause, and a server's sends would appear to
 * begin after its workers received them (seen once in CI under load). */
static double clock_conv(const ar__dist *c) {
  double best = INFINITY, conv = 0.0;
  for (int i = 0; i < 8 && best > 2e-6; i++) {
    double a = ar_now(), r = ar__dist_clock(c), b = ar_now();
    if (b - a < best) {
      best = b - a;
      conv = 0.5 * (a + b) - r;
    }
  }
  return conv;
}

void ar__dist_tl_begin(ar__dist *c, int64_t iter, const ar_commsched_schedule *s) {
  if (!c->tl)
    return;
  ar_trace_iteration(c->tl, iter);
  c->tl_det = ar_trace_detail(c->tl);
  c->tl_sched = s;
  c->tl_conv = clock_conv(c);
  int chans = c->S > c->W ? c->S : c->W;
  memset(c->tl_next, 0, 2 * (size_t)chans * sizeof *c->tl_next);
}

void ar__dist_tl_transfer(ar__dist *c, int chan, int t, bool grad, uint32_t order, size_t bytes,
                          double t0, double t1) {
  static const char *const keys[] = {"bytes", "order", "priority"};
  const ar_commsched_entry *e = c->tl_sched ? ar_commsched_schedule_find(c->tl_sched, (uint32_t)t)
                                            : NULL;
  int peers = c->server ? c->W : c->S;
  ar_trace_span s = {AR_TRACE_CHANNEL + chan + (grad ? peers : 0), grad ? "grad" : "param", NULL,
                     c->t[t].name, t0, t1, true, keys,
                     {(int64_t)bytes, order, e ? e->priority : 0}, e ? 3 : 2};
  ar_trace_add(c->tl, &s);
}

/* Leaves a barrier as soon as it completes (a short spin) and stamps the
 * exit; a barrier that takes longer than a millisecond is waited for
 * with the poll rules (that round's stamp is then late; the median
 * ignores it). */
static ar_status barrier_stamp(ar__dist *c, double *stamp) {
  MPI_Request q;
  int rc = MPI_Ibarrier(c->cctl, &q);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "a barrier aligning the trace's clocks");
  double t0 = ar_now();
  ar__dist_poll_reset(c);
  for (;;) {
    int flag = 0;
    rc = MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "a barrier aligning the trace's clocks");
    if (flag) {
      *stamp = ar_now();
      return AR_OK;
    }
    if (ar_now() - t0 > 1e-3)
      AR_CHECK(ar__dist_poll(c, false, -1, "the barrier aligning the trace's clocks"));
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Fills info's clock entries and *zero, the time of this rank's clock
 * that is rank 0's trace start. */
static ar_status align_clocks(ar__dist *c, double *info, double *zero) {
  double mine[BARRIER_ROUNDS + 1], r0[BARRIER_ROUNDS + 1], est[BARRIER_ROUNDS];
  mine[0] = ar_trace_start(c->tl);
  for (int k = 1; k <= BARRIER_ROUNDS; k++)
    AR_CHECK(barrier_stamp(c, &mine[k]));
  memcpy(r0, mine, sizeof r0);
  AR_CHECK(ar__dist_bcast(c, r0, BARRIER_ROUNDS + 1, MPI_DOUBLE, "the trace's clock stamps"));
  for (int k = 0; k < BARRIER_ROUNDS; k++)
    est[k] = mine[k + 1] - r0[k + 1];
  qsort(est, BARRIER_ROUNDS, sizeof *est, cmp_double);
  char host[MPI_MAX_PROCESSOR_NAME + 1] = "", host0[MPI_MAX_PROCESSOR_NAME + 1] = "";
  int len = 0;
  if (MPI_Get_processor_name(host, &len) != MPI_SUCCESS)
    host[0] = '\0';
  memcpy(host0, host, sizeof host0);
  AR_CHECK(ar__dist_bcast(c, host0, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, "rank 0's machine name"));
  bool same = host[0] && strcmp(host, host0) == 0;
  info[INFO_ESTIMATE] = est[BARRIER_ROUNDS / 2];
  info[INFO_OFFSET] = same ? 0.0 : est[BARRIER_ROUNDS / 2];
  info[INFO_SAME_HOST] = same;
  *zero = r0[0] + info[INFO_OFFSET];
  return AR_OK;
}

/* Posts and waits for a message of `bytes` bytes in pieces (tag 0 of
 * cctl: used by nothing else). */
static ar_status move_bytes(ar__dist *c, bool send, void *buf, size_t bytes, int peer) {
  int pieces = ar__dist_pieces(c, bytes);
  MPI_Request *req = ar_malloc((size_t)pieces * sizeof *req);
  if (!req)
    return ar_errf(c->err, AR_NOMEM, "out of memory moving the trace");
  ar_status st = ar__dist_post(c, send, buf, bytes, pieces, peer, AR__DIST_TAG_TRACE, c->cctl,
                               req, "moving", "the trace");
  for (int k = 0; k < pieces && st == AR_OK; k++)
    st = ar__dist_wait(c, &req[k], peer, "the trace's events");
  ar_free(req);
  return st;
}

/* otherData: the run, the rule, the transfers, each rank's figures. */
static void other_data(const ar__dist *c, const double *infos, ar_sbuf *b) {
  ar_sbuf_printf(b, "\"kind\": \"distributed\", \"ranks\": %d, \"servers\": %d, \"workers\": %d, "
                 "\"order\": \"%s\", \"warmup_iterations\": %lld, \"clock\": \"CLOCK_MONOTONIC, "
                 "ranks aligned to rank 0 by barrier\", ",
                 c->size, c->S, c->W, ar_commsched_order_name(c->order), (long long)c->warmup);
  /* The recorders' rule is rank 0's on every rank; the counts are the
   * ranks' sums, detail_stopped_at the earliest. */
  double events = 0, dropped = 0, stopped = 0;
  for (int r = 0; r < c->size; r++) {
    const double *in = infos + (size_t)r * INFO_N;
    events += in[INFO_EVENTS];
    dropped += in[INFO_DROPPED];
    if (in[INFO_STOPPED] > 0 && (stopped == 0 || in[INFO_STOPPED] < stopped))
      stopped = in[INFO_STOPPED];
  }
  ar_sbuf_printf(b, "\"events\": %.0f, \"dropped_events\": %.0f, \"capacity\": %zu, "
                 "\"detail_first\": %lld, \"detail_every\": %lld, \"detail_stopped_at\": ",
                 events, dropped, c->tl_opts.events, (long long)c->tl_opts.detail_first,
                 (long long)c->tl_opts.detail_every);
  if (stopped > 0)
    ar_sbuf_printf(b, "%.0f", stopped);
  else
    ar_sbuf_printf(b, "null");
  ar_sbuf_printf(b, ", \"transfers\": [");
  for (int t = 0; t < c->nt; t++) {
    ar_sbuf_printf(b, "%s{\"id\": %d, \"name\": ", t ? ", " : "", t);
    ar_sbuf_json_str(b, c->t[t].name);
    ar_sbuf_printf(b, ", \"server\": %d, \"bytes\": %zu, \"rows\": %s}", c->t[t].server,
                   c->t[t].bytes, c->t[t].rows ? "true" : "false");
  }
  ar_sbuf_printf(b, "], \"rank_info\": [");
  for (int r = 0; r < c->size; r++) {
    const double *in = infos + (size_t)r * INFO_N;
    ar_sbuf_printf(b, "%s{\"rank\": %d, \"role\": \"%s\", \"events\": %.0f, \"dropped_events\": "
                   "%.0f, \"detail_stopped_at\": ", r ? ", " : "", r,
                   r < c->S ? "server" : "worker", in[INFO_EVENTS], in[INFO_DROPPED]);
    if (in[INFO_STOPPED] > 0)
      ar_sbuf_printf(b, "%.0f", in[INFO_STOPPED]);
    else
      ar_sbuf_printf(b, "null");
    ar_sbuf_printf(b, ", \"clock_offset_us\": %.3f, \"barrier_estimate_us\": %.3f, "
                   "\"same_machine_as_rank0\": %s, \"lost\": %s}",
                   in[INFO_OFFSET] * 1e6, in[INFO_ESTIMATE] * 1e6,
                   in[INFO_SAME_HOST] != 0 ? "true" : "false", in[INFO_OOM] != 0 ? "true" : "false");
  }
  ar_sbuf_printf(b, "]");
}

/* Rank 0: the other ranks' fragments after its own, and the file. */
static ar_status collect(ar__dist *c, const double *infos, const ar_sbuf *own) {
  size_t total = 0;
  for (int r = 1; r < c->size; r++)
    total += (size_t)infos[(size_t)r * INFO_N + INFO_LEN];
  char *all = ar_malloc(total + 1);
  if (!all)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the ranks' trace events (%zu bytes)",
                   total);
  ar_status st = AR_OK;
  size_t off = 0;
  for (int r = 1; r < c->size && st == AR_OK; r++) {
    size_t len = (size_t)infos[(size_t)r * INFO_N + INFO_LEN];
    st = move_bytes(c, false, all + off, len, r);
    off += len;
  }
  ar_sbuf b = {0}, other = {0};
  if (st == AR_OK) {
    ar_ctrace_begin(&b);
    ar_ctrace_events(&b, own->buf, own->len);
    off = 0;
    for (int r = 1; r < c->size; r++) {
      size_t len = (size_t)infos[(size_t)r * INFO_N + INFO_LEN];
      ar_ctrace_events(&b, all + off, len);
      off += len;
    }
    other_data(c, infos, &other);
    ar_ctrace_end(&b, other.buf);
    char *path = ar_path_join(c->spec->output.dir, "trace.json");
    st = b.oom || other.oom || !path
             ? ar_errf(c->err, AR_NOMEM, "out of memory writing the trace")
             : ar_fs_write_atomic(NULL, path, b.buf, b.len, c->err);
    ar_free(path);
  }
  ar_sbuf_fini(&b);
  ar_sbuf_fini(&other);
  ar_free(all);
  return st;
}

ar_status ar__dist_tl_write(ar__dist *c) {
  double info[INFO_N] = {0}, zero = 0.0;
  AR_CHECK(align_clocks(c, info, &zero));
  ar_sbuf frag = {0};
  char name[64];
  snprintf(name, sizeof name, "rank %d (%s)", c->rank, c->server ? "server" : "worker");
  /* pid = rank + 1: Perfetto treats pid 0 as the kernel's idle process. */
  ar_ctrace_process_name(&frag, c->rank + 1, name, c->rank);
  ar_trace_render(c->tl, c->rank + 1, zero, &frag);
  info[INFO_OOM] = frag.oom;
  info[INFO_LEN] = frag.oom ? 0.0 : (double)frag.len;
  info[INFO_EVENTS] = (double)ar_trace_count(c->tl);
  info[INFO_DROPPED] = (double)ar_trace_dropped(c->tl);
  info[INFO_STOPPED] = (double)ar_trace_detail_stopped(c->tl);
  double *infos = c->tl_infos; /* rank 0's, NULL elsewhere */
  MPI_Request q;
  ar_status st = AR_OK;
  int rc = MPI_Igather(info, INFO_N, MPI_DOUBLE, infos, INFO_N, MPI_DOUBLE, 0, c->cctl, &q);
  if (rc != MPI_SUCCESS)
    st = ar__dist_mpi_err(c, rc, "gathering the ranks' trace figures");
  else
    st = ar__dist_wait(c, &q, 0, "the ranks' trace figures");
  if (st == AR_OK && c->rank != 0)
    st = move_bytes(c, true, frag.buf, (size_t)info[INFO_LEN], 0);
  if (st == AR_OK && c->rank == 0)
    st = collect(c, infos, &frag);
  ar_sbuf_fini(&frag);
  return st;
}
