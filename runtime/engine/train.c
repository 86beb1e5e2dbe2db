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
#include <unistd.h>



struct ar_job {
  const ar_spec *spec;
  ar_run_opts opts;
  ar_device *dev; /* borrowed */
  ar_model *model;
  ar_reader *train, *test;
  ar_batch batch;
  int64_t max_nnz, max_labels;
  ar_plan plan; /* computed at open, before the model exists */
  FILE *metrics;
  ar_progress *progress;
  ar_ckpt_state st;
  char *ckpt_path, *metrics_path, *summary_path, *data_storage;
  double loss_window;
  int64_t loss_window_n;
  double last_train_loss;
  ar_eval_acc last_eval;
  int64_t last_eval_iter;
  int64_t total; /* iterations the job runs */
  double wall0;
  bool started;
  ar_err *err; /* the caller's, for the call at hand */
};
typedef struct ar_job run_ctx;

/* The sampled layers' statistics since the start (or resume) of the run:
 * "LAYER.lsh_active_mean", the time split of the sampled work, rebuilds,
 * and the tables' memory. */
static void json_sampled(ar_json *j, const ar_model *m) {
  for (int l = 0; m && l < m->n_layers; l++) {
    if (!m->layers[l].smp)
      continue;
    ar_sampled_stats st;
    ar_model_sampled_stats(m, l, &st);
    char key[96];
    const char *n = m->layers[l].name;
#define KEY(what) (snprintf(key, sizeof key, "%s.lsh_%s", n, what), key)
    ar_json_num(j, KEY("active_mean"), st.samples ? (double)st.active_sum / (double)st.samples : 0);
    ar_json_num(j, KEY("touched_mean"),
                m->step ? (double)st.touched_sum / (double)m->step : 0);
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
#undef KEY
  }
}

static ar_status evaluate(run_ctx *c, ar_eval_acc *acc) {
  memset(acc, 0, sizeof *acc);
  if (!c->test)
    return AR_OK;
  double seconds;
  return ar__eval_pass(c->model, c->test, &c->batch, c->spec->train.eval_points, false, acc, &seconds,
                   c->err);
}

static ar_status eval_and_log(run_ctx *c) {
  ar_eval_acc acc;
  double t0 = ar_now();
  AR_CHECK(evaluate(c, &acc));
  double eval_s = ar_now() - t0;
  c->last_eval = acc;
  c->last_eval_iter = c->st.iteration;
  double train_loss = c->loss_window_n ? c->loss_window / (double)c->loss_window_n
                                       : c->last_train_loss;
  c->last_train_loss = train_loss;
  c->loss_window = 0;
  c->loss_window_n = 0;
  ar_json *j = ar_json_begin();
  ar_json_int(j, "iteration", c->st.iteration);
  ar_json_num(j, "epoch", c->st.epoch);
  ar_json_int(j, "samples", c->st.samples);
  ar_json_num(j, "train_loss", train_loss);
  if (acc.rows) {
    ar_json_num(j, "test_loss", acc.loss_sum / (double)acc.rows);
    ar_json_num(j, "p_at_1", ar__p_at(&acc, 0));
    ar_json_num(j, "p_at_3", ar__p_at(&acc, 1));
    ar_json_num(j, "p_at_5", ar__p_at(&acc, 2));
    ar_json_int(j, "test_points", acc.rows);
  }
  ar_json_num(j, "samples_per_s", c->st.train_s > 0 ? (double)c->st.samples / c->st.train_s : 0);
  ar_json_num(j, "train_s", c->st.train_s);
  ar_json_num(j, "eval_s", eval_s);
  json_sampled(j, c->model);
  const char *text = ar_json_end(j);
  ar_status st = AR_OK;
  if (!text || fputs(text, c->metrics) < 0 || fflush(c->metrics) != 0)
    st = ar_errf(c->err, AR_IO, "cannot append to '%s': %s", c->metrics_path, strerror(errno));
  ar_json_destroy(j);
  if (st == AR_OK && acc.rows) {
    char line[256];
    snprintf(line, sizeof line,
             "eval @ iter %lld: test loss %.4f  P@1 %.2f  P@3 %.2f  P@5 %.2f (%lld points)",
             (long long)c->st.iteration, acc.loss_sum / (double)acc.rows, ar__p_at(&acc, 0),
             ar__p_at(&acc, 1), ar__p_at(&acc, 2), (long long)acc.rows);
    ar_progress_note(c->progress, line);
  }
  return st;
}

static ar_status write_summary(run_ctx *c, ar_summary *s) {
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
  ar_json_num(j, "epochs", (double)s->epochs_done);
  ar_json_num(j, "wall_s", s->wall_s);
  ar_json_num(j, "train_s", s->train_s);
  ar_json_int(j, "peak_rss_bytes", s->peak_rss_bytes);
  ar_json_int(j, "persistent_bytes", (int64_t)c->model->plan.persistent_bytes);
  ar_json_int(j, "ephemeral_bytes", (int64_t)c->model->plan.ephemeral_bytes);
  ar_json_int(j, "host_bytes", (int64_t)c->model->plan.host_bytes);
  ar_json_str(j, "device", s->device);
  ar_json_int(j, "threads", s->threads);
  ar_json_int(j, "batch", c->spec->train.batch);
  ar_json_bool(j, "interrupted", s->interrupted);
  json_sampled(j, c->model);
  const char *text = ar_json_end(j);
  ar_status st = text ? ar_fs_write_atomic(c->opts.fs, c->summary_path, text, strlen(text), c->err)
                      : ar_errf(c->err, AR_NOMEM, "out of memory writing the summary");
  ar_json_destroy(j);
  return st;
}

static ar_status open_readers(run_ctx *c, const char *train, const char *test) {
  ar_reader_opts ro = ar__job_reader_opts(c->spec, &c->opts, false);
  AR_CHECK(ar_reader_open(train, &ro, &c->train, c->err));
  if (ar_reader_stats(c->train)->points == 0)
    return ar_errf(c->err, AR_PARSE, "%s: error: the training file has no data points", train);
  if (test) {
    ro = ar__job_reader_opts(c->spec, &c->opts, true);
    AR_CHECK(ar_reader_open(test, &ro, &c->test, c->err));
  }
  return AR_OK;
}

ar_device_opts ar_job_device_opts(const ar_spec *spec) {
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = spec->train.threads > 0 ? spec->train.threads : ar_topology_cores();
  o.memory_bytes = spec->runtime.memory_bytes;
  o.memory_fraction = spec->runtime.memory_fraction;
  return o;
}

ar_status ar_job_open(const ar_spec *spec, const ar_run_opts *opts, ar_job **out,
                      ar_err *err) {
  *out = NULL;
  run_ctx *c = ar_calloc(1, sizeof *c);
  if (!c)
    return ar_errf(err, AR_NOMEM, "out of memory");
  c->spec = spec;
  c->opts = opts ? *opts : (ar_run_opts)AR_RUN_OPTS_INIT;
  c->err = err;
  c->wall0 = ar_now();
  c->last_eval_iter = -1;
  const char *train_path = NULL, *test_path = NULL;
  ar_status st = ar_fs_mkdirs(c->opts.fs, spec->output.dir, err);
  if (st != AR_OK)
    goto fail;
  c->ckpt_path = ar_path_join(spec->output.dir, "checkpoint.bin");
  c->metrics_path = ar_path_join(spec->output.dir, "metrics.jsonl");
  c->summary_path = ar_path_join(spec->output.dir, "summary.json");
  if (!c->ckpt_path || !c->metrics_path || !c->summary_path) {
    st = ar_errf(err, AR_NOMEM, "out of memory");
    goto fail;
  }
  if (c->opts.resume && !ar_fs_readable(c->opts.fs, c->ckpt_path)) {
    st = ar_errf(err, AR_NOTFOUND, "--resume: no checkpoint at '%s'; run without --resume to "
                 "start afresh", c->ckpt_path);
    goto fail;
  }
  /* A resumed job knows its position before it has a model, so that a
   * scheduler sees its remaining iterations (srtf). */
  if (c->opts.resume) {
    st = ar_checkpoint_peek(c->opts.fs, c->ckpt_path, &c->st, err);
    if (st != AR_OK)
      goto fail;
  }
  st = ar_run_resolve_data(spec, &c->opts, &train_path, &test_path, &c->data_storage, err);
  if (st != AR_OK)
    goto fail;
  st = open_readers(c, train_path, test_path);
  if (st != AR_OK)
    goto fail;
  const ar_data_stats *ts = ar_reader_stats(c->train);
  if (c->opts.resume) {
    st = ar_checkpoint_check_data(&c->st, ts->points, c->ckpt_path, err);
    if (st != AR_OK)
      goto fail;
  }
  ar_job_row_bounds(ts, c->test ? ar_reader_stats(c->test) : NULL, &c->max_nnz, &c->max_labels);
  st = ar_batch_init(&c->batch, spec->train.batch, c->max_nnz, c->max_labels);
  if (st != AR_OK) {
    ar_errf(err, st, "out of host memory for a batch of %d rows", spec->train.batch);
    goto fail;
  }
  st = ar_plan_compute(spec, c->max_nnz, c->max_labels, &c->plan, err);
  if (st != AR_OK)
    goto fail;
  int64_t per_epoch = (ts->points + spec->train.batch - 1) / spec->train.batch;
  c->total = spec->train.iterations;
  if (spec->train.epochs > 0 && (c->total == 0 || spec->train.epochs * per_epoch < c->total))
    c->total = spec->train.epochs * per_epoch;
  *out = c;
  return AR_OK;
fail:
  ar_job_close(c);
  return st;
}

const ar_plan *ar_job_plan(const ar_job *j) { return &j->plan; }
ar_model *ar_job_model(ar_job *j) { return j->model; }
bool ar_job_done(const ar_job *j) { return j->st.iteration >= j->total; }
int64_t ar_job_iteration(const ar_job *j) { return j->st.iteration; }
int64_t ar_job_total(const ar_job *j) { return j->total; }

ar_status ar_job_start(ar_job *c, ar_device *dev, void *persistent, void *ephemeral,
                       ar_err *err) {
  if (c->started)
    return ar_errf(err, AR_STATE, "job already started");
  c->err = err;
  c->dev = dev;
  const ar_spec *spec = c->spec;
  AR_CHECK(ar_model_create_in(dev, spec, c->max_nnz, c->max_labels, persistent, ephemeral,
                              &c->model, err));
  c->started = true;
  if (c->opts.resume) {
    AR_CHECK(ar_checkpoint_load(c->model, &c->st, c->opts.fs, c->ckpt_path, err));
    /* Checked again: the file may have been replaced since ar_job_open. */
    AR_CHECK(ar_checkpoint_check_data(&c->st, ar_reader_stats(c->train)->points, c->ckpt_path,
                                      err));
    AR_CHECK(ar_reader_rewind(c->train, (uint64_t)c->st.epoch, err));
    AR_CHECK(ar_reader_skip(c->train, c->st.rows_in_epoch, err));
    AR_CHECK(ar_trim_lines(c->opts.fs, c->metrics_path, c->st.iteration, "iteration",
                           err));
  } else {
    AR_CHECK(ar_reader_rewind(c->train, 0, err));
  }
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

void ar_job_rebase(ar_job *j, void *new_persistent, void *new_ephemeral) {
  if (j->model)
    ar_model_rebase(j->model, new_persistent, new_ephemeral);
}

ar_status ar_job_step(ar_job *c, ar_err *err) {
  const ar_spec *spec = c->spec;
  c->err = err;
  if (!c->started || ar_job_done(c))
    return ar_errf(err, AR_STATE, "no iteration to run");
  double t0 = ar_now();
  ar_status st = ar_reader_next(c->train, spec->train.batch, &c->batch, err);
  if (st == AR_OK && c->batch.rows == 0) {
    c->st.epoch++;
    c->st.rows_in_epoch = 0;
    st = ar_reader_rewind(c->train, (uint64_t)c->st.epoch, err);
    if (st == AR_OK)
      st = ar_reader_next(c->train, spec->train.batch, &c->batch, err);
  }
  if (st != AR_OK)
    return st;
  float loss = 0.0f;
  st = ar_model_train_batch(c->model, &c->batch, &loss);
  if (st != AR_OK)
    return ar_errf(err, st, "iteration %lld: %s", (long long)c->st.iteration + 1,
                   c->model->err.msg);
  if (!isfinite(loss))
    return ar_errf(err, AR_RANGE, "iteration %lld: the loss became %f; lower "
                   "train.optimizer's lr", (long long)c->st.iteration + 1, (double)loss);
  c->st.train_s += ar_now() - t0;
  c->st.iteration++;
  c->st.rows_in_epoch += c->batch.rows;
  c->st.samples += c->batch.rows;
  c->loss_window += loss;
  c->loss_window_n++;
  ar_progress_update(c->progress, c->st.iteration, c->st.epoch, loss,
                     (double)c->st.samples / c->st.train_s);
  if (spec->train.eval_every > 0 && c->st.iteration % spec->train.eval_every == 0 &&
      c->st.iteration < c->total)
    AR_CHECK(eval_and_log(c));
  if (spec->train.checkpoint_every > 0 && c->st.iteration % spec->train.checkpoint_every == 0 &&
      c->st.iteration < c->total)
    AR_CHECK(ar_checkpoint_save(c->model, &c->st, c->opts.fs, c->ckpt_path, err));
  return AR_OK;
}

ar_status ar_job_checkpoint(ar_job *j, ar_err *err) {
  if (!j->started)
    return ar_errf(err, AR_STATE, "job not started");
  return ar_checkpoint_save(j->model, &j->st, j->opts.fs, j->ckpt_path, err);
}

ar_status ar_job_finish(ar_job *c, bool interrupted, ar_summary *summary, ar_err *err) {
  c->err = err;
  if (!c->started)
    return ar_errf(err, AR_STATE, "job not started");
  bool finished = !interrupted;
  if (finished && c->last_eval_iter != c->st.iteration)
    AR_CHECK(eval_and_log(c));
  ar_progress_finish(c->progress);
  AR_CHECK(ar_checkpoint_save(c->model, &c->st, c->opts.fs, c->ckpt_path, err));
  ar_summary s;
  memset(&s, 0, sizeof s);
  const ar_data_stats *ts = ar_reader_stats(c->train);
  s.iterations = c->st.iteration;
  s.samples = c->st.samples;
  s.train_s = c->st.train_s;
  s.samples_per_s = c->st.train_s > 0 ? (double)c->st.samples / c->st.train_s : 0.0;
  s.epochs_done = ts->points ? (double)c->st.samples / (double)ts->points : 0.0;
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
  ar_plan_fini(&c->plan);
  ar_batch_fini(&c->batch);
  ar_reader_close(c->test);
  ar_reader_close(c->train);
  ar_free(c->data_storage);
  ar_free(c->ckpt_path);
  ar_free(c->metrics_path);
  ar_free(c->summary_path);
  ar_free(c);
}

ar_status ar_run(const ar_spec *spec, const ar_run_opts *opts, ar_summary *summary,
                 ar_err *err) {
  ar_stop_signals_install(false);
  ar_job *j = NULL;
  ar_device *dev = NULL;
  ar_status st = ar_job_open(spec, opts, &j, err);
  if (st == AR_OK) {
    ar_device_opts dopts = ar_job_device_opts(spec);
    st = ar_device_open(spec->device, &dopts, &dev, err);
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
  ar_job_close(j);
  ar_device_close(dev);
  ar_stop_signals_restore();
  return st;
}

