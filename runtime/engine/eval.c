/* Evaluation: one pass over a test split (exact, or by LSH retrieval),
 * and accelrt eval on a checkpoint with the inference K of the output
 * layer's tables. */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include "engine_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ar__p_at(const ar_eval_acc *a, int i) {
  static const int ks[3] = {1, 3, 5};
  return a->rows ? 100.0 * a->hits[i] / ((double)a->rows * ks[i]) : -1.0;
}

/* One pass over the test split, at most max_points; lsh: LSH inference. */
ar_status ar__eval_pass(ar_model *m, ar_reader *r, ar_batch *b, int64_t max_points, bool lsh,
                           ar_eval_acc *acc, double *seconds, ar_err *err) {
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
    ar_status st = lsh ? ar_model_eval_batch_lsh(m, b, acc) : ar_model_eval_batch(m, b, acc);
    t += ar_now() - t0;
    if (st != AR_OK)
      return ar_errf(err, st, "evaluation: %s", m->err.msg);
  }
  *seconds = t;
  return AR_OK;
}

/* Candidates the output layer's tables retrieve per point on the first
 * `points` test points. */
static ar_status retrieved(ar_model *m, ar_reader *r, ar_batch *b, int64_t points, double *mean,
                           ar_err *err) {
  ar_eval_acc acc;
  double sec = 0;
  ar_sampled_stats ss;
  ar_model_sampled_stats_reset(m);
  AR_CHECK(ar__eval_pass(m, r, b, points, true, &acc, &sec, err));
  ar_model_sampled_stats(m, m->n_layers - 1, &ss);
  *mean = ss.samples ? (double)ss.active_sum / (double)ss.samples : 0;
  return AR_OK;
}

/* The K the output layer's tables use for inference.  The automatic K is
 * sized for training, where random negatives top up every active set; at
 * inference nothing tops up, and when the weights have concentrated, a
 * fine K leaves most of the budget empty (10,000 labels after 2 epochs of
 * the quick-start job: 40% of it, P@1 47 where scoring every label gives
 * 77).  So with sparse.K automatic, K steps down from the automatic one
 * until the tables retrieve 90% of the budget on a probe of the test
 * points (only the inputs are read, never the labels), or the K that
 * retrieved most is kept. */
static ar_status inference_K(const ar_spec *spec, ar_model *m, ar_reader *rt, ar_batch *b,
                             int64_t max_points, ar_eval_report *out, ar_err *err) {
  int l = m->n_layers - 1;
  int K0 = ar_model_sampled_K(m, l);
  out->lsh_K = out->lsh_K_auto = K0;
  if (spec->layers[l].sparse.K > 0)
    return AR_OK; /* the job file chose K */
  int64_t probe = max_points > 0 && max_points < 512 ? max_points : 512;
  double want = 0.9 * (double)ar_layer_budget(spec, l);
  double got = 0, best = -1;
  int best_K = K0;
  for (int K = K0; K >= 1 && K >= K0 - 8; K--) {
    if (ar_model_sampled_set_K(m, l, K) != AR_OK)
      return ar_errf(err, AR_STATE, "rebuilding the output layer's tables with K=%d: %s", K,
                     m->err.msg);
    AR_CHECK(retrieved(m, rt, b, probe, &got, err));
    if (K == K0)
      out->lsh_active_auto = got;
    if (got > best) {
      best = got;
      best_K = K;
    }
    if (got >= want)
      break;
  }
  if (best_K != ar_model_sampled_K(m, l) && ar_model_sampled_set_K(m, l, best_K) != AR_OK)
    return ar_errf(err, AR_STATE, "rebuilding the output layer's tables with K=%d: %s", best_K,
                   m->err.msg);
  out->lsh_K = best_K;
  return AR_OK;
}

ar_status ar_eval_checkpoint(const ar_spec *spec, const char *ckpt, int64_t max_points,
                             int reps, ar_eval_report *out, ar_err *err) {
  memset(out, 0, sizeof *out);
  AR_CHECK(ar_mkdirs(spec->output.dir, err)); /* eval.json goes there */
  if (reps < 1)
    reps = 1;
  if (spec->graph)
    return ar__netjob_eval_checkpoint(spec, ckpt, max_points, reps, out, err);
  const char *train = NULL, *test = NULL;
  char *storage = NULL;
  ar_reader *rt = NULL;
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
  if (st == AR_OK) {
    const ar_data_stats *ds = ar_reader_stats(rt);
    int64_t nnz = ds->max_nnz < 1 ? 1 : ds->max_nnz, lab = ds->max_labels < 1 ? 1 : ds->max_labels;
    st = ar_batch_init(&b, spec->train.batch, nnz, lab);
    if (st != AR_OK)
      ar_errf(err, st, "out of host memory for a batch");
    ar_device_opts dopts = ar_job_device_opts(spec);
    if (st == AR_OK)
      st = ar_device_open(spec->device, &dopts, &dev, err);
    if (st == AR_OK)
      st = ar_model_create(dev, spec, nnz, lab, &m, err);
  }
  ar_ckpt_state cs;
  if (st == AR_OK)
    st = ar_checkpoint_load(m, &cs, NULL, ckpt, err);
  if (st == AR_OK && m->layers[m->n_layers - 1].smp)
    st = inference_K(spec, m, rt, &b, max_points, out, err);
  for (int pass = 0; st == AR_OK && pass < 2; pass++) {
    bool lsh = pass == 1;
    if (lsh && !m->layers[m->n_layers - 1].smp)
      break;
    ar_eval_acc acc;
    double best = INFINITY;
    ar_sampled_stats ss;
    for (int k = 0; st == AR_OK && k < reps; k++) {
      double sec = 0;
      ar_model_sampled_stats_reset(m);
      st = ar__eval_pass(m, rt, &b, max_points, lsh, &acc, &sec, err);
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
      ar_model_sampled_stats(m, m->n_layers - 1, &ss);
      out->lsh_active_mean = ss.samples ? (double)ss.active_sum / (double)ss.samples : 0;
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
  ar_model_destroy(m);
  ar_device_close(dev);
  ar_batch_fini(&b);
  ar_reader_close(rt);
  ar_free(storage);
  return st;
}
