/* accelrt simulate JOB.yaml --workers W --servers S --gbps B: predicts one
 * synchronous parameter-server iteration of the job for each transfer
 * order (none, random, tic, tac) with commsched's discrete-event simulator
 * (model in commsched/simulate.c), on the op graph the runtime schedules
 * (ar_dist_op_graph; a graph model's: ar_dist_net_op_graph, its net's
 * DAG).  Compute op times come from a real run's time oracle
 * (--oracle runs/JOB/oracle.tsv, written by `mpirun ... accelrt run`) or
 * are measured here: each layer's (graph: node's) forward and backward on
 * one worker's share of the batch, one thread, the minimum of a few runs.
 * The servers apply each tensor's update as soon as its gradients are in,
 * as the runtime does (--late-update: the whole update after the last
 * gradient, the runtime before it), and iterations overlap as the
 * runtime's do: a tensor updated is offered for the next iteration at once
 * (iter_ms / iteration_s: the steady-state time per iteration;
 * --no-overlap: one iteration alone, every parameter offered at its start,
 * the runtime before issue 17).
 *
 * Calibration against a real run (--trace runs/JOB/trace.tsv, written by
 * every distributed run): compute ops take their median time over the
 * run's iterations after warm-up (so the time-sharing of the cores and
 * whatever else ran is in them), and the per-message cost the simulator
 * charges a receiver (commsched.h: bytes x byte_s, plus message_s when it
 * was waiting for the message rather than busy) is the
 * least-squares fit of time = a + bytes / rate over the traced transfers
 * the worker was idle for: from the link's delivery to the worker having
 * the tensor; every op is then scaled by the trace's sum of mean op times
 * over its sum of medians (the waits for a core a loaded machine adds to
 * a whole iteration, which medians drop).  --message-us / --copy-gbps override the fit; --cores N
 * scales compute by workers / N when more workers than cores share the
 * machine (for predictions without a trace). */
#define _GNU_SOURCE
#include "accelrt/dist.h"
#include "accelrt/net.h"
#include "accelrt/runtime.h"
#include "accelrt/spec.h"
#include "cli/cli.h"

#include <getopt.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_args {
  const char *job, *oracle, *trace;
  double message_us, copy_gbps, compute_scale; /* < 0: not given */
  int cores;
  const char **sets;
  int n_sets;
  int workers, servers;
  double gbps, latency_us;
  long rows; /* per worker; 0: train.batch / workers */
  int random_iters;
  bool json, late_update, no_overlap;
} sim_args;

static int usage(FILE *to) {
  fprintf(to,
          "usage: accelrt simulate JOB.yaml --workers W --servers S --gbps B\n"
          "         [--latency-us L] [--oracle FILE] [--rows-per-worker N]\n"
          "         [--trace FILE] [--message-us A] [--copy-gbps B] [--cores N]\n"
          "         [--compute-scale X] [--late-update] [--no-overlap]\n"
          "         [--random-iterations K] [--json] [--set KEY=VALUE]...\n");
  return CLI_USAGE;
}

/* The options, one case each: a linear switch, kept in one piece. */
static int parse_args(int argc, char **argv, sim_args *a) {
  static const struct option longs[] = {{"workers", required_argument, NULL, 'w'},
                                        {"servers", required_argument, NULL, 's'},
                                        {"gbps", required_argument, NULL, 'g'},
                                        {"latency-us", required_argument, NULL, 'l'},
                                        {"oracle", required_argument, NULL, 'o'},
                                        {"rows-per-worker", required_argument, NULL, 'r'},
                                        {"random-iterations", required_argument, NULL, 'k'},
                                        {"json", no_argument, NULL, 'j'},
                                        {"trace", required_argument, NULL, 'T'},
                                        {"message-us", required_argument, NULL, 'm'},
                                        {"copy-gbps", required_argument, NULL, 'c'},
                                        {"cores", required_argument, NULL, 'C'},
                                        {"compute-scale", required_argument, NULL, 'x'},
                                        {"set", required_argument, NULL, 'S'},
                                        {"late-update", no_argument, NULL, 'U'},
                                        {"no-overlap", no_argument, NULL, 'O'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  a->workers = 0;
  a->servers = 1;
  a->gbps = 0;
  a->random_iters = 10;
  a->message_us = a->copy_gbps = a->compute_scale = -1.0;
  a->sets = ar_calloc((size_t)argc + 1, sizeof *a->sets);
  if (!a->sets)
    return CLI_FAIL;
  optind = 1;
  int c;
  char *end;
  while ((c = cli_getopt(argc, argv, "h", longs)) != -1) {
    switch (c) {
    case 'w':
      a->workers = (int)strtol(optarg, &end, 10);
      if (*end || a->workers < 1 || a->workers > 100000) {
        fprintf(stderr, "accelrt simulate: --workers needs an integer in 1..100000\n");
        return CLI_USAGE;
      }
      break;
    case 's':
      a->servers = (int)strtol(optarg, &end, 10);
      if (*end || a->servers < 1 || a->servers > 65536) {
        fprintf(stderr, "accelrt simulate: --servers needs an integer in 1..65536\n");
        return CLI_USAGE;
      }
      break;
    case 'g':
      a->gbps = strtod(optarg, &end);
      if (*end || !(a->gbps > 0)) {
        fprintf(stderr, "accelrt simulate: --gbps needs a positive number (Gbit/s)\n");
        return CLI_USAGE;
      }
      break;
    case 'l':
      a->latency_us = strtod(optarg, &end);
      if (*end || !(a->latency_us >= 0) || !isfinite(a->latency_us)) {
        fprintf(stderr, "accelrt simulate: --latency-us needs a number >= 0\n");
        return CLI_USAGE;
      }
      break;
    case 'o':
      a->oracle = optarg;
      break;
    case 'r':
      a->rows = strtol(optarg, &end, 10);
      if (*end || a->rows < 1) {
        fprintf(stderr, "accelrt simulate: --rows-per-worker needs a positive integer\n");
        return CLI_USAGE;
      }
      break;
    case 'k':
      a->random_iters = (int)strtol(optarg, &end, 10);
      if (*end || a->random_iters < 1 || a->random_iters > 10000) {
        fprintf(stderr, "accelrt simulate: --random-iterations needs an integer in 1..10000\n");
        return CLI_USAGE;
      }
      break;
    case 'j':
      a->json = true;
      break;
    case 'T':
      a->trace = optarg;
      break;
    case 'U':
      a->late_update = true;
      break;
    case 'O':
      a->no_overlap = true;
      break;
    case 'm':
    case 'c':
    case 'x': {
      double v = strtod(optarg, &end);
      if (*end || !isfinite(v) || v < 0 || (c != 'm' && v <= 0)) {
        fprintf(stderr, "accelrt simulate: --%s needs a number %s\n",
                c == 'm' ? "message-us" : c == 'c' ? "copy-gbps" : "compute-scale",
                c == 'm' ? ">= 0" : "> 0");
        return CLI_USAGE;
      }
      *(c == 'm' ? &a->message_us : c == 'c' ? &a->copy_gbps : &a->compute_scale) = v;
      break;
    }
    case 'C':
      a->cores = (int)strtol(optarg, &end, 10);
      if (*end || a->cores < 1 || a->cores > 100000) {
        fprintf(stderr, "accelrt simulate: --cores needs an integer in 1..100000\n");
        return CLI_USAGE;
      }
      break;
    case 'S':
      if (!strchr(optarg, '=')) {
        fprintf(stderr, "accelrt simulate: --set needs KEY=VALUE, got '%s'\n", optarg);
        return CLI_USAGE;
      }
      a->sets[a->n_sets++] = optarg;
      break;
    case 'h':
      usage(stdout);
      return CLI_OK;
    default:
      return usage(stderr);
    }
  }
  if (optind != argc - 1 || a->workers < 1 || a->gbps <= 0) {
    fprintf(stderr, "accelrt simulate: one job file, --workers and --gbps are required\n");
    return usage(stderr);
  }
  a->job = argv[optind];
  return -1;
}

/* Times every compute op of g on this machine: one worker's rows, one
 * thread, the minimum of `reps` runs; and the optimizer over the whole
 * model (*update_s).  Inputs are random rows of the job's shape. */
/* The features a row of the measured sparse batch holds. */
static int64_t sparse_nnz(const ar_spec *spec) {
  return spec->input.features < 32 ? spec->input.features : 32;
}

/* A sparse batch of `rows` rows to time a chain on (either engine):
 * sparse_nnz features spread over the input, one random label each. */
static ar_status sparse_batch(const ar_spec *spec, long rows, ar_batch *b, ar_err *err) {
  const int64_t nnz = sparse_nnz(spec);
  ar_status st = ar_batch_init(b, rows, nnz, 1);
  if (st != AR_OK)
    return ar_errf(err, st, "out of memory for a batch of %ld rows", rows);
  ar_rng r;
  ar_rng_seed(&r, spec->seed, 99);
  int64_t labels = spec->layers[spec->n_layers - 1].width;
  b->rows = rows;
  for (long i = 0; i <= rows; i++) {
    b->row_ptr[i] = i * nnz;
    b->lab_ptr[i] = i;
  }
  for (long i = 0; i < rows; i++) {
    for (int64_t j = 0; j < nnz; j++) {
      b->idx[i * nnz + j] = (int32_t)(j * (spec->input.features / nnz));
      b->val[i * nnz + j] = (float)ar_rng_uniform(&r);
    }
    b->lab[i] = (int32_t)ar_rng_below(&r, (uint64_t)labels);
  }
  return AR_OK;
}

/* A sampled first layer over the sparse input has no dense input to
 * multiply ((out, in) rows, no x): it is timed on its per-sample kernels,
 * as its worker trains it.  Other layers are timed dense. */
static bool per_sample(const ar_model *m, int l) {
  return l == 0 && m->layers[0].smp && !m->x;
}

static ar_status measure(const ar_spec *spec, long rows, ar_commsched_graph *g,
                         double *update_s, ar_err *err) {
  ar_device *dev = NULL;
  ar_device_opts dopts = AR_DEVICE_OPTS_INIT;
  dopts.threads = 1;
  AR_CHECK(ar_device_open("host", &dopts, &dev, err));
  ar_spec local = *spec;
  local.train.batch = (int32_t)rows;
  ar_model *m = NULL;
  ar_batch b;
  memset(&b, 0, sizeof b);
  ar_status st = ar_model_create(dev, &local, sparse_nnz(spec), 1, &m, err);
  if (st == AR_OK)
    st = sparse_batch(spec, rows, &b, err);
  if (st == AR_OK)
    st = ar_model_load(m, &b);
  if (st == AR_OK) {
    int n = m->n_layers;
    double *best = ar_malloc((size_t)(2 * n + 2) * sizeof *best);
    if (!best) {
      st = ar_errf(err, AR_NOMEM, "out of memory");
    } else {
      for (int i = 0; i < 2 * n + 2; i++)
        best[i] = INFINITY;
      for (int rep = 0; rep < 5 && st == AR_OK; rep++) {
        for (int l = 0; l < n && st == AR_OK; l++) {
          double t0 = ar_now();
          if (per_sample(m, l))
            st = ar_model_train_forward_layer(m, l, &(double){0.0});
          else
            ar_model_forward_layer(m, l);
          ar_device_sync(dev);
          best[l] = fmin(best[l], ar_now() - t0);
        }
        double t0 = ar_now();
        ar_model_loss(m, true);
        ar_device_sync(dev);
        best[2 * n] = fmin(best[2 * n], ar_now() - t0);
        for (int l = n - 1; l >= 0 && st == AR_OK; l--) {
          t0 = ar_now();
          if (per_sample(m, l))
            st = ar_model_train_backward_layer(m, l);
          else
            ar_model_backward_layer(m, l);
          ar_device_sync(dev);
          best[n + l] = fmin(best[n + l], ar_now() - t0);
        }
        t0 = ar_now();
        ar_model_advance_step(m);
        for (int l = 0; l < n; l++)
          ar_model_step_layer(m, l);
        ar_device_sync(dev);
        best[2 * n + 1] = fmin(best[2 * n + 1], ar_now() - t0);
      }
      if (st != AR_OK)
        st = ar_errf(err, st, "timing the job's layers: %s", m->err.msg);
      /* Op ids as ar_dist_op_graph lays them out. */
      for (int l = 0; l < n && st == AR_OK; l++) {
        st = ar_commsched_graph_set_time(g, ar_dist_op_fwd(n, l), best[l], err);
        if (st == AR_OK)
          st = ar_commsched_graph_set_time(g, ar_dist_op_bwd(n, l), best[n + l], err);
      }
      if (st == AR_OK)
        st = ar_commsched_graph_set_time(g, ar_dist_op_loss(n), best[2 * n], err);
      *update_s = best[2 * n + 1];
      ar_free(best);
    }
  }
  ar_batch_fini(&b);
  ar_model_destroy(m);
  ar_device_close(dev);
  return st;
}

/* A graph model's op timing: its node hooks around each forward and
 * backward (the host device is synchronous, the sync is cheap). */
typedef struct net_timer {
  ar_device *dev;
  const ar_commsched_op *fwd, *bwd;
  double *best; /* (ops) */
  double t0;
} net_timer;

static ar_status timer_before(void *ctx, ar_job_phase phase, int node) {
  (void)phase;
  (void)node;
  ((net_timer *)ctx)->t0 = ar_now();
  return AR_OK;
}

static ar_status timer_after(void *ctx, ar_job_phase phase, int node) {
  net_timer *k = ctx;
  ar_device_sync(k->dev);
  ar_commsched_op op = phase == AR_JOB_BACKWARD ? k->bwd[node] : k->fwd[node];
  if (op != AR_COMMSCHED_NONE)
    k->best[op] = fmin(k->best[op], ar_now() - k->t0);
  return AR_OK;
}

static ar_status timer_step(void *ctx) {
  (void)ctx; /* the optimizer is timed on its own */
  return AR_OK;
}

/* A graph model: its net for one worker's rows, the op graph of its DAG
 * (*out), every node's forward and backward timed on a zero batch with
 * one thread (the minimum of 5 steps), and the optimizer over every
 * parameter (*update_s). */
static ar_status measure_net(const ar_spec *spec, long rows, int servers,
                             ar_commsched_graph **out, double *update_s, ar_err *err) {
  ar_device *dev = NULL;
  ar_device_opts dopts = AR_DEVICE_OPTS_INIT;
  dopts.threads = 1;
  ar_spec local = *spec;
  local.train.threads = 1;
  /* The worker's net: its forward order is the distributed one (ready
   * nodes that wait for no parameter first, docs/graph.md "Forward
   * order") also for a file without a distributed: section. */
  local.distributed.enabled = true;
  ar_net *net = NULL;
  ar_commsched_op *fwd = NULL, *bwd = NULL;
  double *best = NULL;
  ar_net_param *ps = NULL;
  /* A lowered chain (sparse input) is timed on the chain's batch. */
  const bool sparse = spec->input.kind == AR_INPUT_SPARSE && !spec->onnx;
  ar_batch b;
  memset(&b, 0, sizeof b);
  ar_status st = ar_device_open("host", &dopts, &dev, err);
  if (st == AR_OK && sparse)
    st = ar_net_build_sparse(&local, rows, sparse_nnz(spec), 1, &net, err);
  else if (st == AR_OK)
    st = ar_net_build(&local, rows, &net, err);
  if (st == AR_OK)
    st = ar_net_start(net, dev, NULL, NULL, err);
  if (st == AR_OK && sparse && (st = sparse_batch(spec, rows, &b, err)) == AR_OK)
    st = ar_net_stage_sparse(net, &b, err);
  int N = net ? ar_net_node_count(net) : 0, P = net ? ar_net_params(net, NULL) : 0;
  if (st == AR_OK) {
    fwd = ar_calloc((size_t)N + 1, sizeof *fwd);
    bwd = ar_calloc((size_t)N + 1, sizeof *bwd);
    ps = ar_calloc((size_t)P + 1, sizeof *ps);
    if (!fwd || !bwd || !ps)
      st = ar_errf(err, AR_NOMEM, "out of memory");
  }
  if (st == AR_OK)
    st = ar_dist_net_op_graph(net, servers, out, fwd, bwd, err);
  size_t nops = st == AR_OK ? ar_commsched_graph_op_count(*out) : 0;
  if (st == AR_OK && !(best = ar_malloc((nops + 1) * sizeof *best)))
    st = ar_errf(err, AR_NOMEM, "out of memory");
  if (st == AR_OK) {
    for (size_t i = 0; i < nops; i++)
      best[i] = INFINITY;
    net_timer k = {dev, fwd, bwd, best, 0.0};
    ar_job_hooks h = {timer_before, timer_after, timer_step, &k};
    ar_net_set_hooks(net, &h);
    ar_net_params(net, ps);
    if (!sparse) { /* (a sparse batch is staged above) */
      /* A zero batch: class 0 (or zero targets) for every row. */
      size_t xel = (size_t)ar_shape_count(ar_net_input_shape(net));
      memset(ar_net_x(net), 0, xel * ar_dtype_size(ar_net_input_dtype(net)));
      if (spec->bce)
        memset(ar_net_targets(net), 0,
               (size_t)rows * (size_t)ar_net_classes(net) * sizeof(float));
      else
        memset(ar_net_y(net), 0, (size_t)rows * sizeof(int64_t));
    }
    *update_s = INFINITY;
    for (int rep = 0; rep < 5 && st == AR_OK; rep++) {
      double loss, lr;
      st = ar_net_train(net, &loss, &lr, err);
      double t0 = ar_now();
      lr = ar_net_opt_begin(net);
      for (int p = 0; p < P; p++)
        ar_net_opt_param(net, ps[p].tensor, lr);
      ar_device_sync(dev);
      *update_s = fmin(*update_s, ar_now() - t0);
    }
    ar_net_set_hooks(net, NULL);
    for (size_t i = 0; i < nops && st == AR_OK; i++)
      if (ar_commsched_graph_kind(*out, (ar_commsched_op)i) == AR_COMMSCHED_COMPUTE &&
          isfinite(best[i]))
        st = ar_commsched_graph_set_time(*out, (ar_commsched_op)i, best[i], err);
  }
  ar_free(best);
  ar_free(ps);
  ar_free(fwd);
  ar_free(bwd);
  ar_batch_fini(&b);
  ar_net_destroy(net);
  ar_device_close(dev);
  return st;
}

typedef struct row {
  double makespan, iteration, eff, comm, comp, umin, umax, params, straggler;
  int eff_n;
} row;

static ar_status simulate_order(const ar_commsched_graph *g, const ar_spec *spec,
                                ar_commsched_order order, int reps,
                                const ar_commsched_sim_opts *so, row *out, double *sched_ms,
                                ar_err *err) {
  memset(out, 0, sizeof *out);
  *sched_ms = 0;
  int n = order == AR_COMMSCHED_ORDER_RANDOM ? reps : 1;
  for (int i = 0; i < n; i++) {
    ar_commsched_schedule_opts o = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
    o.order = order;
    o.seed = spec->seed;
    o.iteration = (uint64_t)i + 1;
    ar_commsched_schedule *s = NULL;
    AR_CHECK(ar_commsched_schedule_create(g, &o, &s, err));
    *sched_ms += 1e3 * ar_commsched_schedule_compute_s(s) / n;
    ar_commsched_sim_result r;
    ar_status st = ar_commsched_simulate(g, s, so, &r, err);
    ar_commsched_schedule_destroy(s);
    AR_CHECK(st);
    out->makespan += r.makespan_s / n;
    out->iteration += r.iteration_s / n;
    out->comm += r.metrics.comm_busy_s / n;
    out->comp += r.metrics.comp_busy_s / n;
    out->umin += r.metrics.u_min_s / n;
    out->umax += r.metrics.u_max_s / n;
    out->params += r.params_done_s / n;
    out->straggler += r.straggler_s / n;
    if (r.metrics.efficiency_defined) {
      out->eff += r.metrics.efficiency;
      out->eff_n++;
    }
  }
  out->eff = out->eff_n ? out->eff / out->eff_n : NAN;
  return AR_OK;
}

/* The simulator's options: the link and cluster from the arguments, the
 * message cost from the trace's fit unless the arguments set it. */
static ar_commsched_sim_opts sim_opts(const sim_args *a, double update_s,
                                      const ar_commsched_calib_result *cal) {
  ar_commsched_sim_opts so = AR_COMMSCHED_SIM_OPTS_INIT;
  so.workers = (uint32_t)a->workers;
  so.servers = (uint32_t)a->servers;
  so.bandwidth_Bps = a->gbps * 1e9 / 8.0;
  so.latency_s = a->latency_us * 1e-6;
  so.update_s = update_s / a->servers;
  if (isfinite(cal->message_s)) {
    so.message_s = cal->message_s;
    so.byte_s = cal->byte_s;
  }
  if (a->message_us >= 0)
    so.message_s = a->message_us * 1e-6;
  if (a->copy_gbps > 0)
    so.byte_s = 8.0 / (a->copy_gbps * 1e9);
  if (a->trace) /* the ops' medians, scaled to their means' total */
    so.compute_scale = cal->mean_scale;
  if (a->cores > 0 && a->workers > a->cores)
    so.compute_scale = (double)a->workers / a->cores;
  if (a->compute_scale > 0)
    so.compute_scale = a->compute_scale;
  so.late_update = a->late_update;
  so.overlap = !a->late_update && !a->no_overlap;
  return so;
}

/* The header lines of the table: the job, where the times came from. */
static void print_head(const sim_args *a, const ar_spec *spec, const ar_commsched_graph *g,
                       const ar_commsched_sim_opts *so, const ar_commsched_calib_result *cal,
                       int from_oracle, long rows) {
  size_t bytes = 0, nt = ar_commsched_graph_transfer_count(g);
  for (size_t t = 0; t < nt; t++)
    bytes += ar_commsched_graph_bytes(g, (uint32_t)t);
  printf("%s: %d layers, %zu transfers (%.2f MB), %d workers, %d servers, %.3g Gbit/s, "
         "latency %.0f us\n",
         spec->name, spec->n_layers, nt, (double)bytes / 1e6, a->workers, a->servers, a->gbps,
         a->latency_us);
  if (a->trace)
    printf("compute times: medians of %d ops from %s (the rest measured here, %ld rows "
           "per worker)\n", cal->ops_set, a->trace, rows);
  else if (a->oracle)
    printf("compute times: %d ops from %s (the rest measured here, %ld rows per worker)\n",
           from_oracle, a->oracle, rows);
  else
    printf("compute times: measured here, %ld rows per worker, 1 thread; update %.2f ms\n",
           rows, 1e3 * so->update_s);
  printf("per message: %.1f us + %.3f ns/byte (copy %.2f Gbit/s)%s; compute x %.3g\n",
         1e6 * so->message_s, 1e9 * so->byte_s, so->byte_s > 0 ? 8e-9 / so->byte_s : INFINITY,
         a->trace && isfinite(cal->message_s) ? " fitted on the trace" : "", so->compute_scale);
  if (a->trace)
    printf("fit samples: %ld idle transfers\n", cal->samples);
  printf("%s\n", so->overlap ? "iterations overlap (iter_ms: steady state; --no-overlap: one "
                              "alone)" : "one iteration alone (iter_ms = makespan_ms)");
  printf("%-7s %9s %12s %6s %9s %9s %9s %9s %11s %12s %9s\n", "order", "iter_ms", "makespan_ms",
         "E", "N_ms", "C_ms", "Umin_ms", "Umax_ms", "params_ms", "straggler_ms", "vs_random");
}

static const ar_commsched_order orders[4] = {AR_COMMSCHED_ORDER_NONE, AR_COMMSCHED_ORDER_RANDOM,
                                             AR_COMMSCHED_ORDER_TIC, AR_COMMSCHED_ORDER_TAC};

/* One line per order, as a table or JSON lines. */
static void print_rows(const sim_args *a, const ar_commsched_sim_opts *so, const row *rows_out,
                       const double *ms) {
  for (int i = 0; i < 4; i++) {
    const row *r = &rows_out[i];
    double vs = rows_out[1].iteration / r->iteration;
    if (a->json)
      printf("{\"order\": \"%s\", \"workers\": %d, \"servers\": %d, \"gbps\": %g, "
             "\"iteration_s\": %.9g, \"overlap\": %s, "
             "\"makespan_s\": %.9g, \"efficiency\": %.6g, \"comm_busy_s\": %.9g, "
             "\"comp_busy_s\": %.9g, \"straggler_s\": %.9g, \"speedup_vs_random\": %.6g, "
             "\"schedule_ms\": %.6g, \"message_s\": %.6g, \"byte_s\": %.6g, "
             "\"compute_scale\": %.6g}\n",
             ar_commsched_order_name(orders[i]), a->workers, a->servers, a->gbps, r->iteration,
             so->overlap ? "true" : "false", r->makespan,
             r->eff, r->comm, r->comp, r->straggler, vs, ms[i], so->message_s, so->byte_s,
             so->compute_scale);
    else
      printf("%-7s %9.3f %12.3f %6.3f %9.3f %9.3f %9.3f %9.3f %11.3f %12.3f %8.3fx\n",
             ar_commsched_order_name(orders[i]), 1e3 * r->iteration, 1e3 * r->makespan, r->eff, 1e3 * r->comm,
             1e3 * r->comp, 1e3 * r->umin, 1e3 * r->umax, 1e3 * r->params, 1e3 * r->straggler,
             vs);
  }
  if (!a->json)
    printf("random: mean of %d shuffles; tac schedule computed in %.3f ms\n", a->random_iters,
           ms[3]);
}

static int run(const sim_args *a, const ar_spec *spec) {
  ar_err err = AR_ERR_INIT;
  ar_commsched_graph *g = NULL;
  long rows = a->rows > 0 ? a->rows : (spec->train.batch + a->workers - 1) / a->workers;
  double update_s = 0.0;
  int from_oracle = 0;
  ar_status st;
  if (spec->graph && !spec->lowered) { /* a lowered chain's wire is the chain's */
    st = measure_net(spec, rows, a->servers, &g, &update_s, &err);
  } else {
    st = ar_dist_op_graph(spec, a->servers, &g, &err);
    if (st == AR_OK)
      st = measure(spec, rows, g, &update_s, &err);
  }
  if (st == AR_OK && a->oracle)
    st = ar_dist_read_oracle(a->oracle, g, &from_oracle, &err);
  ar_commsched_calib_result cal = {0, 0, NAN, NAN, 1.0};
  if (st == AR_OK && a->trace)
    st = ar_dist_read_trace(a->trace, g, &cal, &err);
  ar_commsched_sim_opts so = sim_opts(a, update_s, &cal);
  if (st == AR_OK && !a->json)
    print_head(a, spec, g, &so, &cal, from_oracle, rows);
  row rows_out[4];
  double ms[4];
  for (int i = 0; i < 4 && st == AR_OK; i++)
    st = simulate_order(g, spec, orders[i], a->random_iters, &so, &rows_out[i], &ms[i], &err);
  if (st == AR_OK)
    print_rows(a, &so, rows_out, ms);
  else
    fprintf(stderr, "accelrt simulate: error: %s\n", err.msg);
  ar_commsched_graph_destroy(g);
  return st == AR_OK ? CLI_OK : CLI_FAIL;
}

/* The engine `mpirun accelrt run` trains the job on: a chain is routed as
 * the same job under distributed: would be (ar_chain_route; the graph
 * engine does not yet run distributed chains, so today they stay on the
 * chain engine and its per-layer op graph).  -1 to go on, else the exit
 * status. */
static int route(ar_spec *spec) {
  const bool was = spec->distributed.enabled;
  spec->distributed.enabled = true;
  int rc = cli_route_chain(spec, NULL);
  spec->distributed.enabled = was;
  return rc;
}

int cli_simulate(int argc, char **argv) {
  sim_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) {
    ar_free(a.sets);
    return rc;
  }
  ar_spec *spec = NULL;
  ar_diags diags = {0, NULL};
  ar_status st = ar_spec_load(a.job, a.sets, a.n_sets, &spec, &diags);
  if (st != AR_OK) {
    if (diags.count)
      ar_diags_print(&diags, a.job, stderr);
    else
      fprintf(stderr, "%s: error: %s\n", a.job, ar_status_str(st));
    rc = st == AR_NOMEM ? CLI_FAIL : CLI_USAGE;
  } else if ((rc = route(spec)) < 0) {
    rc = run(&a, spec);
  }
  ar_diags_fini(&diags);
  ar_spec_destroy(spec);
  ar_free(a.sets);
  return rc;
}
