/* Evaluation: one pass over a test split (exact, or by LSH retrieval),
 * and accelrt eval on a checkpoint, with inference tables for a sampled
 * output layer (lsh_infer.c). */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include "engine_impl.h"

#include "accelrt/lsh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ar__p_at(const ar_eval_acc *a, int i) {
  static const int ks[3] = {1, 3, 5};
  return a->rows ? 100.0 * a->hits[i] / ((double)a->rows * ks[i]) : -1.0;
}

/* One pass over the test split, at most max_points; ix: LSH inference
 * with those tables. */
ar_status ar__eval_pass(ar_model *m, ar_reader *r, ar_batch *b, int64_t max_points,
                        ar_lsh_index *ix, ar_eval_acc *acc, double *seconds, ar_err *err) {
  memset(acc, 0, sizeof *acc);
  AR_CHECK(ar_reader_rewind(r, 0, err));
  double t = 0;
  for (;;) {
    int64_t want = b->cap_rows;
    if (max_points > 0 && max_points - acc->rows < want)
      want = max_points - acc->rows;
    if (want <= 0)
      break;
    AR_CHECK(ar_reader_next(r, want, b, err));
    if (b->rows == 0)
      break;
    double t0 = ar_now();
    ar_status st = ix ? ar__lsh_index_eval_batch(m, ix, b, acc) : ar_model_eval_batch(m, b, acc);
    t += ar_now() - t0;
    if (st != AR_OK)
      return ar_errf(err, st, "evaluation: %s", m->err.msg);
  }
  *seconds = t;
  return AR_OK;
}

/* The hand-set inference settings, checked before anything is loaded. */
static ar_status check_opts(const ar_spec *spec, const ar_eval_opts *o, ar_err *err) {
  if (o->lsh_K < 0 || o->lsh_K > 64)
    return ar_errf(err, AR_INVALID, "--lsh-K %d: the codes per table must be 1 to 64", o->lsh_K);
  if (o->lsh_L < 0 || o->lsh_L > 1024)
    return ar_errf(err, AR_INVALID, "--lsh-L %d: the tables must be 1 to 1024", o->lsh_L);
  if (o->lsh_budget < 0)
    return ar_errf(err, AR_INVALID, "--lsh-budget %lld: the candidates per point must be >= 1",
                   (long long)o->lsh_budget);
  if (o->lsh_recall < 0 || o->lsh_recall > 1 || isnan(o->lsh_recall))
    return ar_errf(err, AR_INVALID, "--lsh-recall %g: the recall target must be in (0, 1]",
                   o->lsh_recall);
  if (o->lsh_probe < 0)
    return ar_errf(err, AR_INVALID, "--lsh-probe %lld: the probe needs >= 1 training point",
                   (long long)o->lsh_probe);
  const int lo = spec->n_layers - 1;
  if (spec->graph || !ar_layer_sampled(spec, lo, true)) {
    if (o->lsh_K || o->lsh_L || o->lsh_budget || o->lsh_recall > 0 || o->lsh_probe)
      return ar_errf(err, AR_INVALID, "the --lsh-* options set LSH inference, and the output "
                     "layer of job '%s' is not LSH-sampled; give it a sparse section (mode lsh) "
                     "or drop them", spec->name);
    return AR_OK;
  }
  if (o->lsh_budget > spec->layers[lo].width)
    return ar_errf(err, AR_INVALID, "--lsh-budget %lld: more candidates than the %lld outputs "
                   "of layer %s", (long long)o->lsh_budget, (long long)spec->layers[lo].width,
                   spec->layers[lo].name);
  if (o->lsh_K > 0 || o->lsh_L > 0) {
    ar_lsh_hash_opts ho;
    ar_lsh_tables_opts to;
    ar__sampled_opts(spec, lo, 1, o->lsh_K, &ho, &to);
    if (o->lsh_L > 0)
      ho.L = (uint32_t)o->lsh_L;
    ho.dim = 1;
    ar_lsh_hash_opts r;
    ar_err e = AR_ERR_INIT;
    if (ar_lsh_hash_opts_resolve(&ho, &r, &e) != AR_OK)
      return ar_errf(err, AR_INVALID, "--lsh-K/--lsh-L: %s", e.msg);
  }
  return AR_OK;
}

ar_status ar_eval_checkpoint(const ar_spec *spec, const char *ckpt, int64_t max_points,
                             int reps, const ar_eval_opts *opts, ar_eval_report *out,
                             ar_err *err) {
  /* A lowered chain with a sampled output layer: its checkpoint is the
   * chain's file, evaluated as the chain does (LSH inference, --lsh-*).
   * So is one whose sampled first layer reads the sparse input (the
   * graph scores it only in a training net, net_sampled_hidden.c). */
  if (spec->lowered && (ar_layer_sampled(spec, spec->n_layers - 1, true) ||
                        (ar_layer_sampled(spec, 0, true) && spec->input.kind == AR_INPUT_SPARSE))) {
    ar_spec chain = *spec;
    chain.graph = chain.lowered = false;
    return ar_eval_checkpoint(&chain, ckpt, max_points, reps, opts, out, err);
  }
  memset(out, 0, sizeof *out);
  ar_eval_opts none;
  memset(&none, 0, sizeof none);
  const ar_eval_opts *o = opts ? opts : &none;
  AR_CHECK(check_opts(spec, o, err));
  AR_CHECK(ar_mkdirs(spec->output.dir, err)); /* eval.json goes there */
  if (reps < 1)
    reps = 1;
  if (spec->graph)
    return ar__netjob_eval_checkpoint(spec, ckpt, max_points, reps, out, err);
  const char *train = NULL, *test = NULL;
  char *storage = NULL;
  ar_reader *rt = NULL, *rtrain = NULL;
  ar_lsh_index *ix = NULL;
  ar_device *dev = NULL;
  ar_model *m = NULL;
  ar_batch b;
  memset(&b, 0, sizeof b);
  if (!ar_fs_readable(NULL, ckpt))
    return ar_errf(err, AR_NOTFOUND, "no checkpoint at '%s'; train the job first (accelrt run) "
                   "or pass --checkpoint PATH", ckpt);
  ar_status st = ar_run_resolve_data(spec, NULL, &train, &test, &storage, err);
  if (st == AR_OK && !test)
    st = ar_errf(err, AR_NOTFOUND, "the job has no test split to evaluate on; set data.test");
  if (st == AR_OK) {
    ar_reader_opts ro = ar__job_reader_opts(spec, NULL, true);
    st = ar_reader_open(test, &ro, &rt, err);
  }
  /* The inference tables are chosen on training points: the model holds
   * rows of either split. */
  if (st == AR_OK && ar_layer_sampled(spec, spec->n_layers - 1, ar_spec_runs_on_host(spec))) {
    ar_reader_opts ro = ar__job_reader_opts(spec, NULL, true);
    st = ar_reader_open(train, &ro, &rtrain, err);
  }
  if (st == AR_OK) {
    const ar_data_stats *ds = ar_reader_stats(rt);
    int64_t nnz = ds->max_nnz < 1 ? 1 : ds->max_nnz, lab = ds->max_labels < 1 ? 1 : ds->max_labels;
    int64_t mnnz = nnz, mlab = lab;
    if (rtrain)
      ar_job_row_bounds(ar_reader_stats(rtrain), ds, &mnnz, &mlab);
    st = ar_batch_init(&b, spec->train.batch, nnz, lab);
    if (st != AR_OK)
      ar_errf(err, st, "out of host memory for a batch");
    ar_device_opts dopts = ar_job_device_opts(spec);
    if (st == AR_OK)
      st = ar_device_open(spec->device, &dopts, &dev, err);
    if (st == AR_OK)
      st = ar_model_create(dev, spec, mnnz, mlab, &m, err);
  }
  ar_ckpt_state cs;
  if (st == AR_OK)
    st = ar_checkpoint_load(m, &cs, NULL, ckpt, err);
  if (st == AR_OK && m->layers[m->n_layers - 1].smp) {
    if (!rtrain)
      st = ar_errf(err, AR_STATE, "the output layer is sampled but the job's plan says it is "
                   "not; no training points to choose the inference tables from");
    else
      st = ar__lsh_infer_choose(m, rtrain, o, out, &ix, err);
    if (st == AR_OK)
      st = ar__lsh_infer_recall(m, ix, rt, &b, max_points, out, err);
  }
  for (int pass = 0; st == AR_OK && pass < 2; pass++) {
    bool lsh = pass == 1;
    if (lsh && !ix)
      break;
    ar_eval_acc acc;
    double best = INFINITY;
    for (int k = 0; st == AR_OK && k < reps; k++) {
      double sec = 0;
      if (ix)
        ar__lsh_index_scored(ix, true);
      st = ar__eval_pass(m, rt, &b, max_points, lsh ? ix : NULL, &acc, &sec, err);
      best = sec < best ? sec : best;
    }
    if (st != AR_OK)
      break;
    out->points = acc.rows;
    double *p = lsh ? out->lsh_p_at : out->p_at;
    for (int i = 0; i < 3; i++)
      p[i] = ar__p_at(&acc, i);
    if (lsh) {
      out->lsh = true;
      out->lsh_seconds = best;
      out->lsh_samples_per_s = best > 0 ? (double)acc.rows / best : 0;
      out->lsh_active_mean = ar__lsh_index_scored(ix, false);
    } else {
      out->loss = acc.rows ? acc.loss_sum / (double)acc.rows : 0;
      out->seconds = best;
      out->samples_per_s = best > 0 ? (double)acc.rows / best : 0;
    }
  }
  if (st == AR_OK) {
    out->threads = ar_device_threads(dev);
    snprintf(out->device, sizeof out->device, "%s", ar_device_name(dev));
  }
  ar__lsh_index_destroy(ix);
  ar_model_destroy(m);
  ar_device_close(dev);
  ar_batch_fini(&b);
  ar_reader_close(rt);
  ar_reader_close(rtrain);
  ar_free(storage);
  return st;
}
