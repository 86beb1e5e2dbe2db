/* accelrt export (runtime.h: ar_export_onnx): a graph model's checkpoint
 * as an ONNX inference graph.  The net is built and started on the host
 * device as `accelrt eval` does, the checkpoint loaded into it (which
 * checks it is this model's), its inference graph taken (net.h:
 * ar_net_graph) and a second one of the net built for one more row, which
 * tells the exporter which dims follow the batch; the file is written
 * atomically, so a failure never leaves a partial OUT.onnx.  A chain
 * model's graph is export_chain.c's. */
#include "engine_impl.h"
#include "accelrt/net.h"
#include "accelrt/onnx.h"

#include <stdio.h>
#include <string.h>

/* The graph of the same model for batch + 1 rows, shapes only.  An
 * imported model whose input has a fixed batch axis cannot be built so:
 * *out stays NULL and the export keeps that batch (AR_OK). */
static ar_status probe_graph(run_ctx *c, ar_nn_graph **out) {
  ar_spec s = c->mspec;
  s.train.batch = c->mspec.train.batch + 1;
  ar_net *n = NULL;
  ar_err e = AR_ERR_INIT;
  ar_status st = s.onnx ? ar_net_build_onnx(&s, s.train.batch, c->opts.fs, &n, &e)
                        : ar_net_build(&s, s.train.batch, &n, &e);
  if (st == AR_SPEC && s.onnx)
    return AR_OK;
  if (st == AR_OK)
    st = ar_net_graph(n, false, out, &e);
  ar_net_destroy(n);
  return st == AR_OK ? AR_OK : ar_errf(c->err, st, "%s", e.msg);
}

static ar_status write_pb(const char *dir, const char *name, const ar_onnx_tensor *t,
                          ar_err *err) {
  void *bytes = NULL;
  size_t len = 0;
  AR_CHECK(ar_onnx_pack_tensor(t, &bytes, &len, err));
  char *path = ar_path_join(dir, name);
  ar_status st = path ? ar_write_file_atomic(path, bytes, len, err)
                      : ar_errf(err, AR_NOMEM, "out of memory");
  ar_free(path);
  ar_free(bytes);
  return st;
}

/* DIR/model.onnx and DIR/test_data_set_0/{input_0,output_0}.pb: the first
 * evaluation batch as the net sees it and the net's logits for it. */
static ar_status write_test_data(run_ctx *c, const char *dir, const ar_nn_graph *g,
                                 const void *model, size_t model_len) {
  ar_net *n = c->net;
  const ar_nn_gtensor *x = &g->tensors[g->inputs[0]], *y = &g->tensors[g->outputs[0]];
  float *logits = ar_malloc((size_t)ar_shape_count(&y->shape) * sizeof *logits);
  if (!logits)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  ar__netjob_stage_first(c);
  ar_status st = ar_net_eval_logits(n, logits, c->err);
  char *sets = ar_path_join(dir, "test_data_set_0"), *mpath = ar_path_join(dir, "model.onnx");
  if (st == AR_OK && (!sets || !mpath))
    st = ar_errf(c->err, AR_NOMEM, "out of memory");
  if (st == AR_OK)
    st = ar_mkdirs(sets, c->err);
  if (st == AR_OK)
    st = ar_write_file_atomic(mpath, model, model_len, c->err);
  ar_onnx_tensor in = {x->name, x->dtype, x->shape, ar_net_x(n), 0};
  ar_onnx_tensor out = {y->name, AR_DT_F32, y->shape, logits, 0};
  if (st == AR_OK)
    st = write_pb(sets, "input_0.pb", &in, c->err);
  if (st == AR_OK)
    st = write_pb(sets, "output_0.pb", &out, c->err);
  ar_free(sets);
  ar_free(mpath);
  ar_free(logits);
  return st;
}

/* The graph and its probe written as ONNX at o->out (atomically); the
 * packed model is kept in *bytes for the test folder (ar_free). */
static ar_status write_model(const ar_nn_graph *g, const ar_nn_graph *probe,
                             const ar_export_opts *o, void **bytes, size_t *len, ar_err *err) {
  ar_onnx_export_opts eo = AR_ONNX_EXPORT_OPTS_INIT;
  eo.opset = o->opset;
  eo.probe = probe;
  eo.version = o->version;
  AR_CHECK(ar_onnx_export(g, &eo, bytes, len, err));
  return ar_write_file_atomic(o->out, *bytes, *len, err);
}

/* A chain model (export_chain.c) from its checkpoint. */
static ar_status export_chain(const ar_spec *spec, const char *ckpt, const ar_export_opts *o,
                              ar_err *err) {
  if (o->test_dir)
    return ar_errf(err, AR_UNSUPPORTED,
                   "--test-data is written for graph models only; this job's chain model reads "
                   "sparse rows (export without it)");
  ar_device_opts dopts = ar_job_device_opts(spec);
  ar_device *dev = NULL;
  ar_model *m = NULL;
  ar_nn_graph *g = NULL, *probe = NULL;
  void *bytes = NULL;
  size_t len = 0;
  ar_ckpt_state cs;
  ar_status st = ar_device_open("host", &dopts, &dev, err);
  if (st == AR_OK)
    st = ar_model_create(dev, spec, 1, 1, &m, err);
  if (st == AR_OK)
    st = ar_checkpoint_load(m, &cs, NULL, ckpt, err);
  if (st == AR_OK)
    st = ar__chain_graph(m, spec->train.batch, true, &g, err);
  if (st == AR_OK)
    st = ar__chain_graph(m, spec->train.batch + 1, false, &probe, err);
  if (st == AR_OK)
    st = write_model(g, probe, o, &bytes, &len, err);
  ar_free(bytes);
  ar_nn_graph_destroy(probe);
  ar_nn_graph_destroy(g);
  ar_model_destroy(m);
  ar_device_close(dev);
  return st;
}

static ar_status export_net(run_ctx *c, const ar_export_opts *o) {
  AR_CHECK(ar__netjob_open_data(c));
  ar_device_opts dopts = ar_job_device_opts(c->spec);
  AR_CHECK(ar_device_open("host", &dopts, &c->dev, c->err));
  AR_CHECK(ar_net_start(c->net, c->dev, NULL, NULL, c->err));
  AR_CHECK(ar__netjob_load(c)); /* another model's checkpoint is refused, named */
  ar_nn_graph *g = NULL, *probe = NULL;
  void *bytes = NULL;
  size_t len = 0;
  ar_status st = ar_net_graph(c->net, true, &g, c->err);
  if (st == AR_OK)
    st = probe_graph(c, &probe);
  if (st == AR_OK)
    st = write_model(g, probe, o, &bytes, &len, c->err);
  if (st == AR_OK && o->test_dir)
    st = write_test_data(c, o->test_dir, g, bytes, len);
  ar_free(bytes);
  ar_nn_graph_destroy(probe);
  ar_nn_graph_destroy(g);
  return st;
}

ar_status ar_export_onnx(const ar_spec *spec, const ar_export_opts *o, ar_err *err) {
  if (o->opset < AR_ONNX_EXPORT_OPSET_MIN || o->opset > AR_ONNX_EXPORT_OPSET_MAX)
    return ar_errf(err, AR_INVALID, "--opset %d is not exported; choose %d to %d", o->opset,
                   AR_ONNX_EXPORT_OPSET_MIN, AR_ONNX_EXPORT_OPSET_MAX);
  char *ckpt = o->checkpoint ? ar_strdup(o->checkpoint)
                             : ar_path_join(spec->output.dir, "checkpoint.bin");
  if (!ckpt)
    return ar_errf(err, AR_NOMEM, "out of memory");
  if (!ar_fs_readable(NULL, ckpt)) {
    ar_status st = ar_errf(err, AR_NOTFOUND, "no checkpoint at '%s'; train the job first "
                           "(accelrt run) or pass --checkpoint PATH", ckpt);
    ar_free(ckpt);
    return st;
  }
  if (spec->graph && !spec->lowered && spec->input.kind == AR_INPUT_SPARSE && !spec->onnx) {
    ar_free(ckpt);
    return ar_errf(err, AR_UNSUPPORTED, "a layer fed by sparse input has no ONNX form in this "
                   "version (job '%s' is a graph model over model.input.sparse); export the "
                   "model written as a chain of dense layers (without `inputs:`)", spec->name);
  }
  /* A lowered chain's checkpoint is the chain's file: its export too. */
  if (!spec->graph || spec->lowered) {
    ar_spec chain = *spec;
    chain.graph = chain.lowered = false;
    ar_status st = export_chain(&chain, ckpt, o, err);
    ar_free(ckpt);
    return st;
  }
  run_ctx *c = ar_calloc(1, sizeof *c);
  if (!c) {
    ar_free(ckpt);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  c->spec = spec;
  c->opts = (ar_run_opts)AR_RUN_OPTS_INIT;
  c->jo = (ar_job_opts)AR_JOB_OPTS_INIT;
  c->jo.records = true; /* the test split is opened (test data); nothing of the run is written */
  c->err = err;
  c->ckpt_path = ckpt;
  ar_status st = export_net(c, o);
  ar__netjob_free(c);
  return st;
}
