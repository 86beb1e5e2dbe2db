/* One job end to end on one device: the job's life cycle (open, start,
 * step, checkpoint, finish), its evaluation lines, metrics and summary,
 * and ar_run.  Its data (generated or read) is prepared by job_data.c;
 * checkpoint evaluation and LSH inference are in eval.c. */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include "engine_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>





/* The sampled layers' statistics since the start (or resume) of the run:
 * "LAYER.lsh_active_mean", the time split of the sampled work, rebuilds,
 * and the tables' memory. */
static void json_sampled_one(ar_json *j, const char *n, const ar_sampled_stats *s) {
  const ar_sampled_stats st = *s;
  char key[96];
#define KEY(what) (snprintf(key, sizeof key, "%s.lsh_%s", n, what), key)
  {
    ar_json_num(j, KEY("active_mean"), st.samples ? (double)st.active_sum / (double)st.samples : 0);
    /* Per step of this process: the run's step count would spread a
     * resumed run's sum over the steps before its resume too. */
    ar_json_num(j, KEY("touched_mean"), st.steps ? (double)st.touched_sum / (double)st.steps : 0);
    /* query and compute are summed over the threads that ran them (CPU
     * seconds); update and rehash are wall seconds of the step. */
    ar_json_num(j, KEY("query_cpu_s"), st.query_s);
    ar_json_num(j, KEY("compute_cpu_s"), st.compute_s);
    ar_json_num(j, KEY("update_s"), st.update_s);
    ar_json_num(j, KEY("rehash_s"), st.rehash_s);
    ar_json_int(j, KEY("rehashes"), st.rehashes);
    ar_json_num(j, KEY("first_build_s"), st.first_build_s);
    ar_json_int(j, KEY("reinserted_rows"), st.reinserted);
    ar_json_int(j, KEY("tables_bytes"), (int64_t)st.tables_bytes);
  }
#undef KEY
}

/* The sampled layers of a chain model, or a graph model's hidden sampled
 * items and its sampled head (the chain's order). */
static void json_sampled(ar_json *j, const run_ctx *c) {
  const ar_model *m = c->model;
  for (int l = 0; m && l < m->n_layers; l++) {
    if (!m->layers[l].smp)
      continue;
    ar_sampled_stats st;
    ar_model_sampled_stats(m, l, &st);
    json_sampled_one(j, m->layers[l].name, &st);
  }
  ar_sampled_stats st;
  const char *name;
  for (int i = 0; c->net && (name = ar__net_hid_stats(c->net, i, &st)) != NULL; i++)
    json_sampled_one(j, name, &st);
  name = c->net ? ar__net_head_stats(c->net, &st) : NULL;
  if (name)
    json_sampled_one(j, name, &st);
}

static ar_status append_line(run_ctx *c, ar_json *j) {
  const char *text = ar_json_end(j);
  ar_status st = AR_OK;
  if (!text || fputs(text, c->metrics) < 0 || fflush(c->metrics) != 0)
    st = ar_errf(c->err, AR_IO, "cannot append to '%s': %s", c->metrics_path, strerror(errno));
  ar_json_destroy(j);
  return st;
}

/* A graph model's evaluation reports top-1 and top-5 (also as p_at_1);
 * a chain's, and a graph's over sparse input (multi-label), P@1, 3, 5. */
static bool single_label(const run_ctx *c) { return c->net && !ar_net_sparse_input(c->net); }

static ar_status eval_and_log(run_ctx *c) {
  ar_eval_acc acc;
  memset(&acc, 0, sizeof acc);
  double t0 = ar_now(), seconds;
  if (c->net)
    AR_CHECK(ar__netjob_eval(c, &acc));
  else if (c->test)
    AR_CHECK(ar__eval_pass(c->model, c->test, &c->batch, c->spec->train.eval_points, NULL, &acc,
                           &seconds, c->err));
  double eval_s = ar_now() - t0;
  ar_trace_add_span(c->trace, AR_TRACE_STEPS, "eval", "evaluation", NULL, t0, t0 + eval_s, false);
  c->last_eval = acc;
  c->last_eval_iter = c->st.iteration;
  double train_loss = c->loss_window_n ? c->loss_window / (double)c->loss_window_n
                                       : c->last_train_loss;
  c->last_train_loss = train_loss;
  c->loss_window = 0;
  c->loss_window_n = 0;
  ar_json *j = ar_json_begin();
  ar_json_int(j, "iteration", c->st.iteration);
  if (c->jo.remote) /* its file has iteration lines too */
    ar_json_str(j, "kind", "eval");
  ar_json_num(j, "epoch", (double)c->st.epoch);
  ar_json_int(j, "samples", c->st.samples);
  ar_json_num(j, "train_loss", train_loss);
  if (acc.rows && single_label(c)) {
    ar_json_num(j, "test_loss", acc.loss_sum / (double)acc.rows);
    ar_json_num(j, "top1", 100.0 * acc.hits[0] / (double)acc.rows);
    ar_json_num(j, "top5", 100.0 * acc.hits[2] / (double)acc.rows);
    ar_json_num(j, "p_at_1", 100.0 * acc.hits[0] / (double)acc.rows);
    ar_json_int(j, "test_points", acc.rows);
  } else if (acc.rows) {
    ar_json_num(j, "test_loss", acc.loss_sum / (double)acc.rows);
    ar_json_num(j, "p_at_1", ar__p_at(&acc, 0));
    ar_json_num(j, "p_at_3", ar__p_at(&acc, 1));
    ar_json_num(j, "p_at_5", ar__p_at(&acc, 2));
    ar_json_int(j, "test_points", acc.rows);
  }
  ar_json_num(j, "samples_per_s", c->st.train_s > 0 ? (double)c->st.samples / c->st.train_s : 0);
  ar_json_num(j, "train_s", c->st.train_s);
  ar_json_num(j, "eval_s", eval_s);
  if (!c->jo.remote)
    json_sampled(j, c);
  AR_CHECK(append_line(c, j));
  if (acc.rows && single_label(c)) {
    char line[256];
    snprintf(line, sizeof line, "eval @ iter %lld: test loss %.4f  top-1 %.2f  top-5 %.2f (%lld points)",
             (long long)c->st.iteration, acc.loss_sum / (double)acc.rows,
             100.0 * acc.hits[0] / (double)acc.rows, 100.0 * acc.hits[2] / (double)acc.rows,
             (long long)acc.rows);
    ar_progress_note(c->progress, line);
  } else if (acc.rows) {
    char line[256];
    snprintf(line, sizeof line,
             "eval @ iter %lld: test loss %.4f  P@1 %.2f  P@3 %.2f  P@5 %.2f (%lld points)",
             (long long)c->st.iteration, acc.loss_sum / (double)acc.rows, ar__p_at(&acc, 0),
             ar__p_at(&acc, 1), ar__p_at(&acc, 2), (long long)acc.rows);
    ar_progress_note(c->progress, line);
  }
  return AR_OK;
}

static ar_status write_summary(run_ctx *c, ar_summary *s) {
  ar_json *j = ar_json_begin();
  ar_json_str(j, "name", c->spec->name);
  ar_json_num(j, "samples_per_s", s->samples_per_s);
  ar_json_num(j, "loss", s->loss);
  ar_json_num(j, "train_loss", s->train_loss);
  if (single_label(c) && c->last_eval.rows) {
    ar_json_num(j, "top1", 100.0 * c->last_eval.hits[0] / (double)c->last_eval.rows);
    ar_json_num(j, "top5", 100.0 * c->last_eval.hits[2] / (double)c->last_eval.rows);
    ar_json_num(j, "p_at_1", s->p_at[0]);
  } else if (s->p_at[0] >= 0) {
    ar_json_num(j, "p_at_1", s->p_at[0]);
    ar_json_num(j, "p_at_3", s->p_at[1]);
    ar_json_num(j, "p_at_5", s->p_at[2]);
  }
  ar_json_int(j, "iterations", s->iterations);
  ar_json_int(j, "samples", s->samples);
  ar_json_num(j, "epochs", (double)s->epochs_done);
  ar_json_num(j, "wall_s", s->wall_s);
  ar_json_num(j, "train_s", s->train_s);
  if (c->train_cpu_s > 0)
    ar_json_num(j, "train_cpu_s", c->train_cpu_s);
  ar_json_int(j, "peak_rss_bytes", s->peak_rss_bytes);
  ar_json_int(j, "persistent_bytes", (int64_t)c->plan.persistent_bytes);
  if (!c->jo.remote) {
    ar_json_int(j, "ephemeral_bytes", (int64_t)c->plan.ephemeral_bytes);
    ar_json_int(j, "host_bytes", (int64_t)c->plan.host_bytes);
  }
  ar_json_str(j, "device", s->device);
  ar_json_int(j, "threads", s->threads);
  ar_json_int(j, "batch", c->spec->train.batch);
  ar_json_bool(j, "interrupted", s->interrupted);
  if (!c->jo.remote)
    json_sampled(j, c);
  if (c->jo.keys)
    c->jo.keys(c->jo.keys_ctx, AR_JOB_OUT_SUMMARY, j);
  const char *text = ar_json_end(j);
  ar_status st = text ? ar_fs_write_atomic(c->opts.fs, c->summary_path, text, strlen(text), c->err)
                      : ar_errf(c->err, AR_NOMEM, "out of memory writing the summary");
  ar_json_destroy(j);
  return st;
}

/* The training split, and the test split when the job evaluates. */
static ar_status open_readers(run_ctx *c, const char *train, const char *test) {
  ar_reader_opts ro = ar__job_reader_opts(c->spec, &c->opts, false);
  AR_CHECK(ar_reader_open(train, &ro, &c->train, c->err));
  if (ar_reader_stats(c->train)->points == 0)
    return ar_errf(c->err, AR_PARSE, "%s: error: the training file has no data points", train);
  if (test && c->jo.records) {
    ro = ar__job_reader_opts(c->spec, &c->opts, true);
    AR_CHECK(ar_reader_open(test, &ro, &c->test, c->err));
  }
  return AR_OK;
}

ar_device_opts ar_job_device_opts(const ar_spec *spec) {
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = ar_job_threads(spec);
  o.memory_bytes = spec->runtime.memory_bytes;
  o.memory_fraction = spec->runtime.memory_fraction;
  return o;
}

/* --resume goes on with the seed the run was started with, as its
 * job.resolved.yaml (written at its start) says: another seed draws
 * other generated data, other shuffles and other sampling, so the
 * checkpoint would go on training on another run's data without a word.
 * A folder whose file cannot be read or parsed (written by hand, or by
 * an older build) is not checked. */
static ar_status check_resume_seed(run_ctx *c) {
  const ar_spec *spec = c->spec;
  char *path = ar_path_join(spec->output.dir, "job.resolved.yaml");
  if (!path)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  char *text = NULL;
  size_t len = 0;
  ar_err e = AR_ERR_INIT;
  ar_spec *was = NULL;
  if (ar_fs_readable(c->opts.fs, path) &&
      ar_fs_read_all(c->opts.fs, path, AR_SPEC_MAX_BYTES, &text, &len, &e) == AR_OK)
    (void)ar_spec_parse(text, len, path, NULL, NULL, 0, false, &was, NULL);
  ar_free(text);
  ar_status st = AR_OK;
  if (was && was->seed != spec->seed)
    st = ar_errf(c->err, AR_SPEC, "--resume: the run in '%s' was started with seed %llu (%s) but "
                 "this job has seed %llu, which would go on with other data, shuffles and "
                 "samples; resume with --set seed=%llu, or start afresh (--overwrite, or another "
                 "output.dir)", spec->output.dir, (unsigned long long)was->seed, path,
                 (unsigned long long)spec->seed, (unsigned long long)was->seed);
  ar_spec_destroy(was);
  ar_free(path);
  return st;
}

/* The output paths; with opts.resume the checkpoint's position, which a
 * scheduler needs before the job has a model (srtf: the iterations left). */
static ar_status open_outputs(run_ctx *c) {
  const ar_spec *spec = c->spec;
  c->ckpt_path = ar_path_join(spec->output.dir, "checkpoint.bin");
  c->metrics_path = ar_path_join(spec->output.dir, "metrics.jsonl");
  c->summary_path = ar_path_join(spec->output.dir, "summary.json");
  if (!c->ckpt_path || !c->metrics_path || !c->summary_path)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  if (c->jo.records) {
    AR_CHECK(ar_fs_mkdirs(c->opts.fs, spec->output.dir, c->err));
    if (c->opts.overwrite)
      AR_CHECK(ar_run_clear_outputs(c->opts.fs, spec->output.dir, c->err));
    if (c->opts.resume && ar_fs_readable(c->opts.fs, c->ckpt_path))
      AR_CHECK(check_resume_seed(c)); /* before the file is rewritten */
    if (c->opts.run_json)
      AR_CHECK(ar_run_describe(c->opts.fs, spec->output.dir, spec->resolved, c->opts.run_json,
                               c->err));
  }
  if (c->opts.resume && !ar_fs_readable(c->opts.fs, c->ckpt_path)) {
    /* A job requeued (Slurm) before its first checkpoint: nothing to
     * continue from, so it starts over. */
    ar_log(AR_LOG_WARN, "--resume: no checkpoint at '%s' yet; job '%s' starts from the "
           "beginning", c->ckpt_path, spec->name);
    c->opts.resume = false;
  }
  if (!c->opts.resume)
    return AR_OK;
  return ar_checkpoint_peek(c->opts.fs, c->ckpt_path, &c->st, c->err);
}

/* Readers, batches, the plan and the iteration count. */
static ar_status open_data(run_ctx *c) {
  const ar_spec *spec = c->spec;
  if (spec->graph)
    return ar__netjob_open_data(c);
  const char *train_path = NULL, *test_path = NULL;
  AR_CHECK(ar_run_resolve_data(spec, &c->opts, &train_path, &test_path, &c->data_storage,
                               c->err));
  AR_CHECK(open_readers(c, train_path, test_path));
  const ar_data_stats *ts = ar_reader_stats(c->train);
  if (c->opts.resume)
    AR_CHECK(ar_checkpoint_check_data(&c->st, ts->points, c->ckpt_path, c->err));
  ar_job_row_bounds(ts, c->test ? ar_reader_stats(c->test) : NULL, &c->max_nnz, &c->max_labels);
  int32_t B = spec->train.batch, rows = c->jo.model_rows;
  if (rows <= 0)
    rows = (int32_t)((B + c->jo.parts - 1) / c->jo.parts);
  c->mspec = *spec;
  c->mspec.train.batch = rows;
  ar_status st = ar_batch_init(&c->batch, B, c->max_nnz, c->max_labels);
  if (st == AR_OK && c->jo.parts > 1)
    st = ar_batch_init(&c->part, rows, c->max_nnz, c->max_labels);
  if (st != AR_OK)
    return ar_errf(c->err, st, "out of host memory for a batch of %d rows", B);
  AR_CHECK(ar_plan_compute(&c->mspec, c->max_nnz, c->max_labels, &c->plan, c->err));
  int64_t per_epoch = (ts->points + B - 1) / B;
  c->total = spec->train.iterations;
  if (spec->train.epochs > 0 && (c->total == 0 || spec->train.epochs * per_epoch < c->total))
    c->total = spec->train.epochs * per_epoch;
  return AR_OK;
}

ar_status ar_job_open_ex(const ar_spec *spec, const ar_run_opts *opts, const ar_job_opts *jopts,
                         ar_job **out, ar_err *err) {
  *out = NULL;
  run_ctx *c = ar_calloc(1, sizeof *c);
  if (!c)
    return ar_errf(err, AR_NOMEM, "out of memory");
  c->spec = spec;
  c->opts = opts ? *opts : (ar_run_opts)AR_RUN_OPTS_INIT;
  c->jo = jopts ? *jopts : (ar_job_opts)AR_JOB_OPTS_INIT;
  AR_ASSERT(c->jo.parts >= 1 && c->jo.part >= 0 && c->jo.part < c->jo.parts);
  if (c->jo.hooks)
    c->hooks = *c->jo.hooks;
  c->jo.hooks = NULL;
  c->err = err;
  c->wall0 = c->jo.t0 > 0 ? c->jo.t0 : ar_now();
  c->last_eval_iter = -1;
  c->trace = c->jo.trace;
  ar_trace_track(c->trace, AR_TRACE_ITERATIONS, "iterations", false);
  ar_trace_track(c->trace, AR_TRACE_STEPS, "steps", false);
  ar_status st = open_outputs(c);
  if (st == AR_OK)
    st = open_data(c);
  if (st != AR_OK) {
    ar_job_close(c);
    return st;
  }
  *out = c;
  return AR_OK;
}

ar_status ar_job_open(const ar_spec *spec, const ar_run_opts *opts, ar_job **out,
                      ar_err *err) {
  return ar_job_open_ex(spec, opts, NULL, out, err);
}

const ar_plan *ar_job_plan(const ar_job *j) { return &j->plan; }
bool ar_job_resumed(const ar_job *j) { return j->opts.resume; }
ar_model *ar_job_model(ar_job *j) { return j->model; }
struct ar_net *ar_job_net(ar_job *j) { return j->net; }
bool ar_job_done(const ar_job *j) { return j->st.iteration >= j->total; }
int64_t ar_job_iteration(const ar_job *j) { return j->st.iteration; }
int64_t ar_job_total(const ar_job *j) { return j->total; }
const ar_ckpt_state *ar_job_state(const ar_job *j) { return &j->st; }
double ar_job_last_loss_sum(const ar_job *j) { return j->last_loss_sum; }
int64_t ar_job_last_rows(const ar_job *j) { return j->last_rows; }
double ar_job_last_loss(const ar_job *j) { return j->last_iter_loss; }

/* The position c->st: checked against the training data, and a job that
 * reads training batches seeks there. */
static ar_status seek(run_ctx *c) {
  AR_CHECK(ar_checkpoint_check_data(&c->st, ar_reader_stats(c->train)->points, c->ckpt_path,
                                    c->err));
  if (c->jo.remote)
    return AR_OK;
  AR_CHECK(ar_reader_rewind(c->train, (uint64_t)c->st.epoch, c->err));
  return ar_reader_skip(c->train, c->st.rows_in_epoch, c->err);
}

ar_status ar_job_start(ar_job *c, ar_device *dev, void *persistent, void *ephemeral,
                       ar_err *err) {
  if (c->started)
    return ar_errf(err, AR_STATE, "job already started");
  c->err = err;
  c->dev = dev;
  if (c->net) {
    AR_CHECK(ar__netjob_fit(c, dev, persistent));
    c->started = true;
    AR_CHECK(ar__netjob_start(c, dev, persistent, ephemeral));
  } else {
    AR_CHECK(ar_model_create_in(dev, &c->mspec, c->max_nnz, c->max_labels, persistent,
                                ephemeral, &c->model, err));
    c->started = true;
  }
  c->sync_layers = strcmp(ar_device_name(dev), "host") != 0;
  if (c->model) {
    c->model->trace = c->trace;
    if (c->model->n_sampled)
      ar_trace_track(c->trace, AR_TRACE_LSH, "lsh tables", false);
  } else {
    ar_net_set_trace(c->net, c->trace);
  }
  if (c->net) {
    /* the position came with the checkpoint */
  } else if (c->opts.resume) {
    AR_CHECK(ar_checkpoint_load(c->model, &c->st, c->opts.fs, c->ckpt_path, err));
    /* Checked again: the file may have been replaced since ar_job_open. */
    AR_CHECK(seek(c));
  } else if (!c->jo.remote) {
    AR_CHECK(ar_reader_rewind(c->train, 0, err));
  }
  if (!c->jo.records)
    return AR_OK;
  if (c->opts.resume)
    AR_CHECK(ar_trim_lines(c->opts.fs, c->metrics_path, c->st.iteration, "iteration", err));
  AR_CHECK(ar_fs_open_write(c->opts.fs, c->metrics_path, c->opts.resume, &c->metrics, err));
  c->progress = ar_progress_create(c->opts.progress, c->opts.quiet, c->total);
  if (c->opts.resume) {
    char line[160];
    snprintf(line, sizeof line, "resumed from %s at iteration %lld (epoch %lld)", c->ckpt_path,
             (long long)c->st.iteration, (long long)c->st.epoch);
    ar_progress_note(c->progress, line);
  }
  return AR_OK;
}

ar_status ar_job_resume_at(ar_job *c, const ar_ckpt_state *st, ar_err *err) {
  c->err = err;
  if (!c->started || c->opts.resume)
    return ar_errf(err, AR_STATE, "a job resumes at a position once, after its start");
  c->st = *st;
  if (c->net)
    return ar_net_sparse_input(c->net) ? ar__netjob_seek_sparse(c, true) : AR_OK;
  if (!c->jo.remote && c->model->n_sampled && ar_model_sampled_rebuild(c->model) != AR_OK)
    return ar_errf(err, AR_STATE, "%s", c->model->err.msg);
  return seek(c);
}

void ar_job_rebase(ar_job *j, void *new_persistent, void *new_ephemeral) {
  if (j->model)
    ar_model_rebase(j->model, new_persistent, new_ephemeral);
  if (j->net)
    ar_net_rebase(j->net, new_persistent, new_ephemeral);
}

void ar_job_due(const ar_job *j, int64_t iteration, bool *eval, bool *checkpoint) {
  const ar_spec *s = j->spec;
  bool before_end = iteration < j->total;
  *eval = before_end && s->train.eval_every > 0 && iteration % s->train.eval_every == 0;
  *checkpoint = before_end && s->train.checkpoint_every > 0 &&
                iteration % s->train.checkpoint_every == 0;
}

void ar__job_slice_batch(const ar_batch *src, int64_t lo, int64_t hi, ar_batch *dst) {
  int64_t f0 = src->row_ptr[lo], l0 = src->lab_ptr[lo];
  int64_t nf = src->row_ptr[hi] - f0, nl = src->lab_ptr[hi] - l0;
  dst->rows = hi - lo;
  for (int64_t r = 0; r <= hi - lo; r++) {
    dst->row_ptr[r] = src->row_ptr[lo + r] - f0;
    dst->lab_ptr[r] = src->lab_ptr[lo + r] - l0;
  }
  memcpy(dst->idx, src->idx + f0, (size_t)nf * sizeof *dst->idx);
  memcpy(dst->val, src->val + f0, (size_t)nf * sizeof *dst->val);
  memcpy(dst->lab, src->lab + l0, (size_t)nl * sizeof *dst->lab);
}

ar_status ar__job_read_batch(run_ctx *c) {
  int32_t B = c->spec->train.batch;
  AR_CHECK(ar_reader_next(c->train, B, &c->batch, c->err));
  if (c->batch.rows == 0) {
    c->st.epoch++;
    c->st.rows_in_epoch = 0;
    AR_CHECK(ar_reader_rewind(c->train, (uint64_t)c->st.epoch, c->err));
    AR_CHECK(ar_reader_next(c->train, B, &c->batch, c->err));
  }
  return AR_OK;
}

/* Reads the next global batch and loads this job's rows of it into the
 * model. */
static ar_status next_batch(run_ctx *c) {
  double t0 = c->trace ? ar_now() : 0.0;
  AR_CHECK(ar__job_read_batch(c));
  const ar_batch *mine = &c->batch;
  if (c->jo.parts > 1) {
    int64_t R = c->batch.rows, p = c->jo.part, n = c->jo.parts;
    ar__job_slice_batch(&c->batch, R * p / n, R * (p + 1) / n, &c->part);
    mine = &c->part;
    /* The parts' gradients sum to the mean over the global batch. */
    c->model->grad_rows = R;
  }
  ar_status st = ar_model_load(c->model, mine);
  if (st != AR_OK)
    return ar_errf(c->err, st, "iteration %lld: %s", (long long)c->st.iteration + 1,
                   c->model->err.msg);
  if (c->trace)
    ar_trace_add_span(c->trace, AR_TRACE_STEPS, "data", "batch", NULL, t0, ar_now(), false);
  return AR_OK;
}

static ar_status hook(run_ctx *c, ar_status (*fn)(void *, ar_job_phase, int), ar_job_phase ph,
                      int l) {
  return fn ? fn(c->hooks.ctx, ph, l) : AR_OK;
}

static ar_status model_err(run_ctx *c, ar_status st) {
  return ar_errf(c->err, st, "iteration %lld: %s", (long long)c->st.iteration + 1,
                 c->model->err.msg);
}

/* The optimizer: dense layers as a whole, sampled ones on their touched
 * rows, then their tables on SLIDE's schedule. */
static ar_status local_step(run_ctx *c) {
  ar_model *m = c->model;
  ar_model_advance_step(m);
  for (int l = 0; l < m->n_layers; l++) {
    if (!m->layers[l].smp) {
      ar_model_step_layer(m, l);
      continue;
    }
    if (ar_model_sampled_step(m, l) != AR_OK || ar_model_sampled_rehash(m, l) != AR_OK)
      return model_err(c, AR_STATE);
  }
  return AR_OK;
}

/* The end of a phase of the iteration that began at t0 (a detailed
 * iteration's span): on a device other than the host the layer's work is
 * waited for first, so the span is its time, not its launch's. */
static ar_status phase_done(run_ctx *c, const char *what, const char *layer, double t0) {
  if (c->sync_layers && ar_device_sync(c->dev) != AR_OK)
    return ar_errf(c->err, AR_DEVICE, "iteration %lld: %s %s on %s: %s",
                   (long long)c->st.iteration + 1, what, layer ? layer : "",
                   ar_device_name(c->dev), ar_device_errmsg(c->dev));
  ar_trace_add_span(c->trace, AR_TRACE_STEPS, what, what, layer, t0, ar_now(), true);
  return AR_OK;
}

/* One iteration on the loaded rows, a layer at a time with the hooks
 * around each (dense layers through the device, sampled ones per sample);
 * *loss_sum: the rows' summed losses.  No rows (a part whose share of a
 * short last batch is empty): the gradients are zero.  In a detailed
 * iteration each layer's forward and backward and the loss are spans of
 * the timeline, the hooks left out (a worker's wait for its parameters
 * shows as the gap before a forward). */
static ar_status train_layers(run_ctx *c, double *loss_sum) {
  ar_model *m = c->model;
  const ar_job_hooks *h = &c->hooks;
  int n = m->n_layers;
  bool any = m->rows > 0, det = ar_trace_detail(c->trace);
  double lsum = 0.0, t0 = 0.0;
  for (int l = 0; l < n; l++) {
    AR_CHECK(hook(c, h->before, AR_JOB_FORWARD, l));
    t0 = det ? ar_now() : 0.0;
    if (any && ar_model_train_forward_layer(m, l, &lsum) != AR_OK)
      return model_err(c, AR_STATE);
    AR_CHECK(hook(c, h->after, AR_JOB_FORWARD, l));
    if (det)
      AR_CHECK(phase_done(c, "forward", m->layers[l].name, t0));
  }
  AR_CHECK(hook(c, h->before, AR_JOB_LOSS, n - 1));
  t0 = det ? ar_now() : 0.0;
  *loss_sum = 0.0;
  if (any)
    *loss_sum = m->layers[n - 1].smp ? lsum : (double)ar_model_loss(m, true) * (double)m->rows;
  if (m->loss_status != AR_OK)
    return model_err(c, m->loss_status);
  AR_CHECK(hook(c, h->after, AR_JOB_LOSS, n - 1));
  if (det)
    AR_CHECK(phase_done(c, "loss", NULL, t0));
  for (int l = n - 1; l >= 0; l--) {
    AR_CHECK(hook(c, h->before, AR_JOB_BACKWARD, l));
    t0 = det ? ar_now() : 0.0;
    if (any) {
      if (ar_model_train_backward_layer(m, l) != AR_OK)
        return model_err(c, AR_STATE);
    } else if (!m->layers[l].smp) { /* a sampled layer's rows are zero */
      ar_device_fill(m->dev, m->layers[l].gw, m->layers[l].in * m->layers[l].out, 0.0f);
      ar_device_fill(m->dev, m->layers[l].gb, m->layers[l].out, 0.0f);
    }
    AR_CHECK(hook(c, h->after, AR_JOB_BACKWARD, l));
    if (det)
      AR_CHECK(phase_done(c, "backward", m->layers[l].name, t0));
  }
  t0 = c->trace ? ar_now() : 0.0;
  ar_status st;
  if (!h->step) {
    st = local_step(c);
  } else {
    ar_model_advance_step(m);
    st = h->step(h->ctx);
  }
  if (c->trace && st == AR_OK)
    ar_trace_add_span(c->trace, AR_TRACE_STEPS, "optimizer", h->step ? "remote step" : "optimizer",
                      NULL, t0, ar_now(), false);
  return st;
}

/* An iteration done (here or, for a remote job, elsewhere) of `rows`
 * global rows with mean loss `loss`: the counts, the loss window and the
 * progress.  The caller has moved the data position. */
static void count_iteration(run_ctx *c, int64_t rows, double loss, double seconds) {
  c->st.train_s += seconds;
  c->st.iteration++;
  c->st.samples += rows;
  c->loss_window += loss;
  c->loss_window_n++;
  c->last_train_loss = loss;
  c->last_iter_loss = loss;
  ar_progress_update(c->progress, c->st.iteration, c->st.epoch, loss, c->st.samples);
}

static ar_status loss_err(run_ctx *c, double loss) {
  return ar_errf(c->err, AR_RANGE, "iteration %lld: the loss became %f; lower "
                 "train.optimizer's lr", (long long)c->st.iteration + 1, loss);
}

/* A checkpoint of either kind of model. */
static ar_status save(run_ctx *c) {
  double t0 = ar_now();
  ar_status st = c->net ? ar__netjob_save(c)
                        : ar_checkpoint_save(c->model, &c->st, c->opts.fs, c->ckpt_path, c->err);
  if (st == AR_OK)
    ar_trace_add_span(c->trace, AR_TRACE_STEPS, "checkpoint", "checkpoint", NULL, t0, ar_now(),
                      false);
  return st;
}

/* The process's CPU seconds, every thread's (spinning OpenMP threads too). */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ar_status ar_job_step(ar_job *c, ar_err *err) {
  c->err = err;
  if (!c->started || ar_job_done(c) || c->jo.remote)
    return ar_errf(err, AR_STATE, "no iteration to run");
  ar_trace_iteration(c->trace, c->st.iteration + 1);
  double t0 = ar_now(), cpu0 = cpu_now();
  int64_t rows;
  if (c->net) {
    AR_CHECK(ar__netjob_step(c));
    rows = c->batch.rows;
  } else {
    AR_CHECK(next_batch(c));
    AR_CHECK(train_layers(c, &c->last_loss_sum));
    rows = c->last_rows = c->model->rows;
  }
  /* As a float, the mean every run of this job has always logged. */
  float loss = rows ? (float)(c->last_loss_sum / (double)rows) : 0.0f;
  if (c->jo.parts == 1 && !isfinite(loss))
    return loss_err(c, (double)loss);
  c->st.rows_in_epoch += c->batch.rows;
  double t1 = ar_now();
  c->train_cpu_s += cpu_now() - cpu0;
  ar_trace_add_span(c->trace, AR_TRACE_ITERATIONS, "iteration", "iteration", NULL, t0, t1, false);
  count_iteration(c, c->batch.rows, loss, t1 - t0);
  if (!c->jo.records)
    return AR_OK;
  if (c->net && c->spec->train.log_every > 0 && c->st.iteration % c->spec->train.log_every == 0) {
    ar_json *j = ar_json_begin();
    ar_json_str(j, "kind", "train");
    ar_json_int(j, "iteration", c->st.iteration);
    ar_json_num(j, "epoch", (double)c->st.epoch);
    ar_json_num(j, "train_loss", (double)loss);
    ar_json_num(j, "lr", c->last_lr);
    AR_CHECK(append_line(c, j));
  }
  bool ev, ck;
  ar_job_due(c, c->st.iteration, &ev, &ck);
  if (ev)
    AR_CHECK(eval_and_log(c));
  if (ck)
    AR_CHECK(save(c));
  return AR_OK;
}

ar_status ar_job_record(ar_job *c, const ar_job_result *r, ar_err *err) {
  c->err = err;
  if (!c->started || !c->jo.remote)
    return ar_errf(err, AR_STATE, "only a remote job records iterations");
  if (!isfinite(r->loss))
    return loss_err(c, r->loss);
  c->st.epoch = r->epoch;
  c->st.rows_in_epoch = r->rows_in_epoch;
  count_iteration(c, r->rows, r->loss, r->seconds);
  if (!c->jo.records)
    return AR_OK;
  ar_json *j = ar_json_begin();
  ar_json_int(j, "iteration", c->st.iteration);
  ar_json_str(j, "kind", "iteration");
  ar_json_num(j, "train_loss", r->loss);
  if (c->jo.keys)
    c->jo.keys(c->jo.keys_ctx, AR_JOB_OUT_ITERATION, j);
  return append_line(c, j);
}

static ar_status need_records(const run_ctx *c, ar_err *err) {
  if (!c->started)
    return ar_errf(err, AR_STATE, "job not started");
  if (!c->jo.records)
    return ar_errf(err, AR_STATE, "the job keeps no records");
  return AR_OK;
}

ar_status ar_job_evaluate(ar_job *j, ar_err *err) {
  j->err = err;
  AR_CHECK(need_records(j, err));
  return eval_and_log(j);
}

ar_status ar_job_checkpoint(ar_job *j, ar_err *err) {
  AR_CHECK(need_records(j, err));
  j->err = err;
  return save(j);
}

ar_status ar_job_finish(ar_job *c, bool interrupted, ar_summary *summary, ar_err *err) {
  c->err = err;
  AR_CHECK(need_records(c, err));
  bool finished = !interrupted;
  if (finished && c->last_eval_iter != c->st.iteration)
    AR_CHECK(eval_and_log(c));
  ar_progress_finish(c->progress);
  AR_CHECK(save(c));
  ar_summary s;
  memset(&s, 0, sizeof s);
  int64_t points = 0;
  if (c->ttrain) {
    ar_tdata_info ti;
    ar_tdata_get_info(c->ttrain, &ti);
    points = ti.count;
  } else {
    points = ar_reader_stats(c->train)->points;
  }
  s.iterations = c->st.iteration;
  s.samples = c->st.samples;
  s.train_s = c->st.train_s;
  s.samples_per_s = c->st.train_s > 0 ? (double)c->st.samples / c->st.train_s : 0.0;
  s.epochs_done = points ? (double)c->st.samples / (double)points : 0.0;
  s.train_loss = c->loss_window_n ? c->loss_window / (double)c->loss_window_n : c->last_train_loss;
  s.loss = c->last_eval.rows ? c->last_eval.loss_sum / (double)c->last_eval.rows : s.train_loss;
  for (int i = 0; i < 3; i++)
    s.p_at[i] = c->last_eval.rows ? ar__p_at(&c->last_eval, i) : -1.0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  s.peak_rss_bytes = (int64_t)ru.ru_maxrss * 1024;
  s.threads = ar_device_threads(c->dev);
  if (strcmp(ar_device_name(c->dev), "host") != 0)
    snprintf(s.device, sizeof s.device, "%s:%d", ar_device_name(c->dev), ar_device_index(c->dev));
  else
    snprintf(s.device, sizeof s.device, "host");
  s.interrupted = !finished;
  s.wall_s = ar_now() - c->wall0;
  AR_CHECK(write_summary(c, &s));
  if (summary)
    *summary = s;
  return AR_OK;
}

void ar_job_close(ar_job *c) {
  if (!c)
    return;
  if (c->progress)
    ar_progress_finish(c->progress);
  ar_progress_destroy(c->progress);
  if (c->metrics)
    fclose(c->metrics);
  ar_model_destroy(c->model);
  ar__netjob_close(c);
  ar_plan_fini(&c->plan);
  ar_batch_fini(&c->batch);
  ar_batch_fini(&c->part);
  ar_reader_close(c->test);
  ar_reader_close(c->train);
  ar_free(c->data_storage);
  ar_free(c->ckpt_path);
  ar_free(c->metrics_path);
  ar_free(c->summary_path);
  ar_free(c);
}

/* ar_run's output.dir/trace.json, once the job started (a run that
 * failed or was stopped shows how far it got).  The run's outcome stands:
 * a trace that cannot be written is a warning. */
static void write_trace(const ar_job *j, const ar_device *dev) {
  char name[512], *path = ar_path_join(j->spec->output.dir, "trace.json");
  if (!strcmp(ar_device_name(dev), "host"))
    snprintf(name, sizeof name, "accelrt run %s on host", j->spec->name);
  else
    snprintf(name, sizeof name, "accelrt run %s on %s:%d", j->spec->name, ar_device_name(dev),
             ar_device_index(dev));
  ar_err e = AR_ERR_INIT;
  if (!path || ar_trace_write(j->trace, name, j->opts.fs, path, &e) != AR_OK)
    ar_log(AR_LOG_WARN, "no trace.json: %s", path ? e.msg : "out of memory");
  ar_free(path);
}

ar_status ar_run(const ar_spec *spec, const ar_run_opts *opts, ar_summary *summary,
                 ar_err *err) {
  ar_trace_opts to = AR_TRACE_OPTS_INIT;
  ar_job_opts jo = AR_JOB_OPTS_INIT;
  AR_CHECK(ar_trace_opts_env(&to, err));
  AR_CHECK(ar_trace_create(&to, &jo.trace, err));
  ar_stop_signals_install(false);
  ar_job *j = NULL;
  ar_device *dev = NULL;
  ar_status st = ar_job_open_ex(spec, opts, &jo, &j, err);
  if (st == AR_OK) {
    ar_device_opts dopts = ar_job_device_opts(spec);
    st = ar_device_open(ar__job_device_name(spec), &dopts, &dev, err);
  }
  if (st == AR_OK)
    st = ar_job_start(j, dev, NULL, NULL, err);
  while (st == AR_OK && !ar_stop_signal() && !ar_job_done(j))
    st = ar_job_step(j, err);
  if (st == AR_OK) {
    bool interrupted = !ar_job_done(j);
    st = ar_job_finish(j, interrupted, summary, err);
    if (st == AR_OK && interrupted)
      st = ar_errf(err, AR_INTERRUPTED, "interrupted at iteration %lld; checkpoint written to "
                   "'%s': continue with --resume", (long long)ar_job_iteration(j), j->ckpt_path);
  }
  if (j && j->started && j->trace)
    write_trace(j, dev);
  ar_job_close(j);
  ar_device_close(dev);
  ar_trace_destroy(jo.trace);
  ar_stop_signals_restore();
  return st;
}

