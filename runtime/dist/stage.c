/* A worker whose model lives in device memory that MPI cannot read (a CUDA
 * GPU): its parameters and gradients go through host staging buffers.
 *
 *   parameters  each tensor is received (MPI_Imrecv, or a rows message
 *               applied by rows.c) into its host copy hp; when both
 *               tensors of layer l are in, wait_layer (worker.c) copies
 *               them into the model (copy_in) before the layer runs, so
 *               TicTac's per-layer wait is kept: a layer's copy-in happens
 *               as soon as its tensors arrived, while later layers' are
 *               still on the wire;
 *   gradients   after layer l's backward, its gw and gb are copied out
 *               (copy_out waits for the layer's work on the device's
 *               queue) into hg and sent from there.
 *
 * Invariant: between iterations hp equals the model's parameters.  The
 * worker never steps (the servers do), so the model changes only by these
 * copies; a rows message changes hp at its rows only, and only those rows
 * are copied in when a few contiguous runs of them are cheaper than the
 * whole tensor (every copy call on a GPU waits for the queue).
 *
 * The host copies are one block from ar_device_host_alloc: page-locked on
 * CUDA (copies at the link's full rate), plain memory on the host.  A host
 * worker stages too when ar_dist_opts.stage (ACCELRT_DIST_STAGE=1) says
 * so: the same code then runs on a CPU, which is how the tests cover it;
 * the copies are exact, so a staged worker computes bit for bit what an
 * unstaged one does. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include <string.h>

/* A copy call on a GPU waits for its queue: about the time the link
 * moves this many bytes (10 us at 25 GB/s).  Rows are copied run by run
 * only while the runs cost less than the whole tensor. */
#define ROW_CALL_BYTES ((size_t)256 << 10)

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static ar_status dev_err(ar__dist *c, ar_status st, const char *what, const ar__dist_tensor *T) {
  return ar_errf(c->err, st, "worker %d: %s '%s' (%zu bytes) on %s: %s", c->widx, what,
                 T->name, T->bytes, c->dev_name, ar_device_errmsg(c->dev));
}

ar_status ar__stage_init(ar__dist *c) {
  size_t total = 0;
  for (int t = 0; t < c->nt; t++)
    total += 2 * round64(c->t[t].bytes);
  if (ar_device_host_alloc(c->dev, total, &c->stage) != AR_OK)
    return ar_errf(c->err, AR_NOMEM, "worker %d: host staging buffers for %s (%zu bytes): %s",
                   c->widx, c->dev_name, total, ar_device_errmsg(c->dev));
  c->stage_bytes = total;
  unsigned char *p = c->stage;
  for (int t = 0; t < c->nt; t++) {
    ar__dist_tensor *T = &c->t[t];
    T->hp = (float *)p;
    p += round64(T->bytes);
    T->hg = (float *)p;
    p += round64(T->bytes);
    ar_status st = ar_device_copy_out(c->dev, T->hp, T->p, T->bytes);
    if (st != AR_OK)
      return dev_err(c, st, "copying out the initial parameters of", T);
  }
  return AR_OK;
}

void ar__stage_fini(ar__dist *c) {
  if (!c->stage)
    return;
  for (int t = 0; c->t && t < c->nt; t++)
    c->t[t].hp = c->t[t].hg = NULL;
  ar_device_host_free(c->dev, c->stage);
  c->stage = NULL;
  c->stage_bytes = 0;
}

/* Rows [a, b) of tensor T from hp into the model. */
static ar_status rows_in(ar__dist *c, const ar__dist_tensor *T, size_t a, size_t b) {
  size_t k = (size_t)T->row_len;
  ar_status st = ar_device_copy_in(c->dev, T->p + a * k, T->hp + a * k,
                                   (b - a) * k * sizeof(float));
  return st == AR_OK ? AR_OK : dev_err(c, st, "copying in rows of", T);
}

ar_status ar__stage_params_in(ar__dist *c, int l) {
  /* On the host a copy call costs nothing beyond its bytes. */
  size_t call = strcmp(c->dev_name, "host") == 0 ? 0 : ROW_CALL_BYTES;
  for (int t = 2 * l; t <= 2 * l + 1; t++) {
    const ar__dist_tensor *T = &c->t[t];
    ar__rows r = {0, 0, NULL, NULL};
    if (T->rows)
      ar__rows_view(T->msg, &r);
    size_t runs = 0;
    for (uint32_t i = 0; r.ids && i < r.n; i++)
      runs += i == 0 || r.ids[i] != r.ids[i - 1] + 1;
    size_t row_bytes = (size_t)T->row_len * sizeof(float);
    if (!r.ids || runs * call + (size_t)r.n * row_bytes >= T->bytes) {
      ar_status st = ar_device_copy_in(c->dev, T->p, T->hp, T->bytes);
      if (st != AR_OK)
        return dev_err(c, st, "copying in", T);
      continue;
    }
    for (uint32_t i = 0; i < r.n;) {
      uint32_t j = i + 1;
      while (j < r.n && r.ids[j] == r.ids[j - 1] + 1)
        j++;
      AR_CHECK(rows_in(c, T, r.ids[i], (size_t)r.ids[j - 1] + 1));
      i = j;
    }
  }
  return AR_OK;
}

ar_status ar__stage_grads_out(ar__dist *c, int l) {
  for (int t = 2 * l; t <= 2 * l + 1; t++) {
    const ar__dist_tensor *T = &c->t[t];
    ar_status st = ar_device_copy_out(c->dev, T->hg, T->g, T->bytes);
    if (st != AR_OK)
      return dev_err(c, st, "copying out the gradient of", T);
  }
  return AR_OK;
}

ar_status ar__stage_reload(ar__dist *c) {
  for (int t = 0; t < c->nt; t++) {
    const ar__dist_tensor *T = &c->t[t];
    ar_status st = ar_device_copy_in(c->dev, T->p, T->hp, T->bytes);
    if (st != AR_OK)
      return dev_err(c, st, "copying in", T);
  }
  return AR_OK;
}
