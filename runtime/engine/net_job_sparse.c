/* A graph model over sparse input's part of the job (net_job.c calls it):
 * its data are the chain's (XC or LibSVM files, or data.generate, read by
 * ar_reader in the chain's order and shuffle), so the batches, epochs, the
 * position a checkpoint keeps and the P@k evaluation are the chain's; the
 * net (net_sparse_in.c) trains on them. */
#include "engine_impl.h"

#include <string.h>

ar_status ar__netjob_open_sparse(run_ctx *c) {
  const ar_spec *s = c->spec;
  if (c->jo.parts > 1 && !s->lowered)
    return ar_errf(c->err, AR_UNSUPPORTED,
                   "%s: a distributed graph model over sparse input is not built in this "
                   "version; write the model as a chain of dense items (without `inputs:`)",
                   s->file ? s->file : "job file");
  const char *train = NULL, *test = NULL;
  AR_CHECK(ar_run_resolve_data(s, &c->opts, &train, &test, &c->data_storage, c->err));
  ar_reader_opts ro = ar__job_reader_opts(s, &c->opts, false);
  AR_CHECK(ar_reader_open(train, &ro, &c->train, c->err));
  const ar_data_stats *ts = ar_reader_stats(c->train);
  if (ts->points == 0)
    return ar_errf(c->err, AR_PARSE, "%s: error: the training file has no data points", train);
  if (test && c->jo.records) {
    ro = ar__job_reader_opts(s, &c->opts, true);
    AR_CHECK(ar_reader_open(test, &ro, &c->test, c->err));
  }
  if (c->opts.resume)
    AR_CHECK(ar_checkpoint_check_data(&c->st, ts->points, c->ckpt_path, c->err));
  ar_job_row_bounds(ts, c->test ? ar_reader_stats(c->test) : NULL, &c->max_nnz, &c->max_labels);
  /* A part of a distributed (lowered) chain computes the chain's slice of
   * each global batch (train.c, next_batch): at most ceil(B / parts) rows,
   * a shorter slice padded. */
  int32_t B = s->train.batch, rows = (int32_t)((B + c->jo.parts - 1) / c->jo.parts);
  if (ar_batch_init(&c->batch, B, c->max_nnz, c->max_labels) != AR_OK ||
      (c->jo.parts > 1 && ar_batch_init(&c->part, rows, c->max_nnz, c->max_labels) != AR_OK))
    return ar_errf(c->err, AR_NOMEM, "out of host memory for a batch of %d rows", B);
  c->mspec = *s;
  AR_CHECK(ar_net_build_sparse(&c->mspec, rows, c->max_nnz, c->max_labels, &c->net, c->err));
  AR_CHECK(ar__netjob_copy_plan(c));
  int64_t per_epoch = (ts->points + B - 1) / B;
  c->total = s->train.iterations;
  if (s->train.epochs > 0 && (c->total == 0 || s->train.epochs * per_epoch < c->total))
    c->total = s->train.epochs * per_epoch;
  ar_net_set_total(c->net, c->total);
  return AR_OK;
}

ar_status ar__netjob_seek_sparse(run_ctx *c, bool resumed) {
  if (!resumed)
    return ar_reader_rewind(c->train, 0, c->err);
  AR_CHECK(ar_checkpoint_check_data(&c->st, ar_reader_stats(c->train)->points, c->ckpt_path,
                                    c->err));
  AR_CHECK(ar_reader_rewind(c->train, (uint64_t)c->st.epoch, c->err));
  return ar_reader_skip(c->train, c->st.rows_in_epoch, c->err);
}

/* The next batch as the chain reads it (a new epoch when the data ran
 * out), trained on; a part trains on its slice, its gradient divided by
 * the global batch's rows, as a chain's part (train.c, next_batch). */
ar_status ar__netjob_step_sparse(run_ctx *c) {
  double t0 = c->trace ? ar_now() : 0.0;
  AR_CHECK(ar__job_read_batch(c));
  const ar_batch *mine = &c->batch;
  if (c->jo.parts > 1) {
    int64_t R = c->batch.rows, p = c->jo.part, n = c->jo.parts;
    ar__job_slice_batch(&c->batch, R * p / n, R * (p + 1) / n, &c->part);
    mine = &c->part;
    ar_net_set_grad_rows(c->net, R);
  }
  ar_status st = ar_net_stage_sparse(c->net, mine, c->err);
  if (st != AR_OK)
    return ar_err_wrap(c->err, "iteration %lld", (long long)c->st.iteration + 1);
  if (c->trace)
    ar_trace_add_span(c->trace, AR_TRACE_STEPS, "data", "batch", NULL, t0, ar_now(), false);
  double loss = 0, lr = 0;
  st = ar_net_train(c->net, &loss, &lr, c->err);
  if (st != AR_OK)
    return ar_err_wrap(c->err, "training");
  c->last_lr = lr;
  c->last_rows = mine->rows;
  /* A part's loss as the chain's part reports it: its mean as a float,
   * or with a sampled head the sum of its rows' losses.  A lowered chain
   * reports so on one part too: a distributed run's only worker is one
   * part, and rank 0 logs the parts' sum over the rows unrounded (in
   * double the mean times the rows moved the logged loss's last digits
   * off the chain's). */
  if (c->jo.parts == 1 && !c->spec->lowered)
    c->last_loss_sum = loss * (double)mine->rows;
  else if (ar_net_head_sampled(c->net))
    c->last_loss_sum = ar_net_head_loss_sum(c->net);
  else
    c->last_loss_sum = (double)(float)loss * (double)mine->rows;
  return AR_OK;
}

/* P@1, 3, 5 over the test split's first train.eval_points points (accelrt
 * eval's --points), as the chain's evaluation. */
ar_status ar__netjob_eval_sparse(run_ctx *c, ar_eval_acc *acc) {
  if (!c->test)
    return AR_OK;
  int64_t most = c->eval_max > 0 ? c->eval_max : c->spec->train.eval_points;
  AR_CHECK(ar_reader_rewind(c->test, 0, c->err));
  for (;;) {
    int64_t want = c->spec->train.batch;
    if (most > 0 && most - acc->rows < want)
      want = most - acc->rows;
    if (want <= 0)
      break;
    AR_CHECK(ar_reader_next(c->test, want, &c->batch, c->err));
    if (c->batch.rows == 0)
      break;
    AR_CHECK(ar_net_stage_sparse(c->net, &c->batch, c->err));
    AR_CHECK(ar_net_eval(c->net, c->batch.rows, acc, c->err));
  }
  return AR_OK;
}

void ar__netjob_close_sparse(run_ctx *c) {
  ar_reader_close(c->train);
  ar_reader_close(c->test);
  c->train = c->test = NULL;
  ar_batch_fini(&c->batch);
}
