/* A job's ONNX model (include/accelrt/net.h: ar_net_build_onnx): the file
 * read through the job's identity (include/accelrt/onnx.h), its one input
 * checked against model.input, lowered for the job's batch with its f32
 * initializers as the parameters' exact initial values and batch
 * normalisation's statistics as state, and built as a trainable net. */
#include "accelrt/net.h"
#include "accelrt/onnx.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The input shape the job's data gives: (batch, model.input's dims). */
static ar_shape job_input(const ar_spec *s, int64_t batch) {
  ar_shape x = {0};
  x.d[0] = batch;
  if (s->input.kind == AR_INPUT_IMAGE) {
    x.nd = 4;
    for (int i = 0; i < 3; i++)
      x.d[1 + i] = s->input.image[i];
  } else {
    x.nd = 2;
    x.d[1] = s->input.features;
  }
  return x;
}

/* The model's input against the job's: rank, element type, and every
 * fixed dim (a fixed batch dim must be the batch). */
static ar_status check_input(const ar_spec *s, const ar_onnx_model *m, const ar_shape *want,
                             ar_err *err) {
  const char *file = s->file ? s->file : "<string>";
  if (ar_onnx_n_inputs(m) != 1 || ar_onnx_n_outputs(m) != 1)
    return ar_errf(err, AR_SPEC,
                   "%s: error: model.onnx: %s has %d inputs and %d outputs; a trained model has "
                   "one input (the batch) and one output (the logits)",
                   file, ar_onnx_path(m), ar_onnx_n_inputs(m), ar_onnx_n_outputs(m));
  const ar_onnx_io *io = ar_onnx_input(m, 0);
  const ar_dtype dt = s->input.kind == AR_INPUT_TOKENS ? AR_DT_I64 : AR_DT_F32;
  char a[64];
  ar_shape_str(want, a, sizeof a);
  if (io->dtype != dt)
    return ar_errf(err, AR_SPEC,
                   "%s: error: model.onnx: input '%s' of %s is %s, but model.input gives %s; "
                   "make them agree",
                   file, io->name, ar_onnx_path(m), ar_dtype_name(io->dtype), ar_dtype_name(dt));
  bool same = io->nd < 0 || io->nd == want->nd;
  for (int k = 0; same && io->nd >= 0 && k < io->nd; k++)
    same = io->dim[k] < 0 || io->dim[k] == want->d[k];
  if (!same)
    return ar_errf(err, AR_SPEC,
                   "%s: error: model.onnx: input '%s' of %s does not take batches of %s "
                   "(train.batch, then model.input); fix model.input or train.batch, or export "
                   "with a dynamic batch axis (dynamic_axes in torch.onnx.export)",
                   file, io->name, ar_onnx_path(m), a);
  return AR_OK;
}

ar_status ar_net_build_onnx(const ar_spec *spec, int64_t batch, const ar_fs *fs, ar_net **out,
                            ar_err *err) {
  *out = NULL;
  const char *file = spec->file ? spec->file : "<string>";
  ar_onnx_model *m = NULL;
  ar_err e = AR_ERR_INIT;
  ar_status st = ar_onnx_load(spec->onnx, fs, NULL, &m, &e);
  if (st == AR_UNSUPPORTED || st == AR_INVALID || st == AR_CORRUPT || st == AR_RANGE)
    return ar_errf(err, AR_SPEC, "%s: error: model.onnx: %s", file, e.msg);
  if (st != AR_OK)
    return ar_errf(err, st, "%s", e.msg);
  ar_shape x = job_input(spec, batch);
  st = check_input(spec, m, &x, err);
  ar_nn_graph *g = NULL;
  if (st == AR_OK) {
    ar_onnx_lower_opts o = AR_ONNX_LOWER_OPTS_INIT;
    o.input_shapes = &x;
    o.training = true;
    /* model.sparse's nodes: a MatMul or transB=0 Gemm head gets (out, in)
     * rows (ar__net_head_onnx checks the node). */
    const char *names[1] = {spec->n_onnx_sparse ? spec->onnx_sparse[0].name : NULL};
    o.sparse_nodes = names;
    o.n_sparse_nodes = spec->n_onnx_sparse ? 1 : 0;
    st = ar_onnx_lower(m, &o, &g, &e);
    if (st == AR_UNSUPPORTED || st == AR_INVALID || st == AR_RANGE)
      st = ar_errf(err, AR_SPEC, "%s: error: model.onnx: %s", file, e.msg);
    else if (st != AR_OK)
      st = ar_errf(err, st, "%s", e.msg);
  }
  if (st == AR_OK)
    st = ar_net_build_graph_train(g, spec, out, err);
  ar_nn_graph_destroy(g);
  ar_onnx_destroy(m);
  return st;
}
