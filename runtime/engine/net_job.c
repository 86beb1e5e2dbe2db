/* A graph model's part of the job (runtime/engine/train.c holds the life
 * cycle): its dense dataset (include/accelrt/tdata.h), the graph and its
 * plan, a training step on full batches in the epoch's order, evaluation
 * in batches padded to the planned size, and checkpoints. */
#define _POSIX_C_SOURCE 200809L /* struct stat's st_mtim */
#include "engine_impl.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>

const char *ar__job_device_name(const ar_spec *spec) {
  /* `auto` means the host for graph models: their CUDA kernels (issue 15)
   * have not run on a GPU yet; `cuda:N` asks for them. */
  if (spec->graph && !strcmp(spec->device, "auto"))
    return "host";
  return spec->device;
}

static ar_status open_split(const ar_spec *s, const ar_fs *fs, const char *path,
                            const char *labels, ar_tdata **out, ar_err *err) {
  if (s->data.format == AR_FMT_NPY)
    return ar_tdata_open_npy(path, fs, out, err);
  if (s->data.format == AR_FMT_IDX)
    return ar_tdata_open_idx(path, labels, fs, out, err);
  return ar_errf(err, AR_SPEC,
                 "%s: a graph model reads data.format idx or npy (one class per point), not "
                 "xc or libsvm",
                 s->file ? s->file : "job file");
}

/* The data's examples must be what model.input says. */
static ar_status check_shape(run_ctx *c, const ar_tdata *d, const char *path) {
  const ar_spec *s = c->spec;
  ar_tdata_info in;
  ar_tdata_get_info(d, &in);
  int64_t elems = 1;
  for (int i = 0; i < in.nd; i++)
    elems *= in.dims[i];
  bool tokens = s->input.kind == AR_INPUT_TOKENS;
  if (tokens != (in.type == AR_TDATA_I64))
    return ar_errf(c->err, AR_SPEC, "%s: the examples are %s, but model.input is %s; %s", path,
                   in.type == AR_TDATA_I64 ? "token ids (i64)" : "values (u8 or f32)",
                   tokens ? "tokens" : "not tokens",
                   tokens ? "give a token dataset" : "use model.input.tokens");
  if (s->bce != (in.targets > 0))
    return ar_errf(c->err, AR_SPEC,
                   "%s: the labels are %s, but model.loss is %s; %s", path,
                   in.targets ? "multi-hot targets (y.npy of shape (N, C))" : "class ids",
                   s->bce ? "sigmoid_bce" : "softmax_ce",
                   s->bce ? "give y.npy of shape (N, C), u8 or f32 (format npy)"
                          : "set model.loss: sigmoid_bce for multi-label targets");
  bool same = elems == s->input.features;
  if (s->input.kind == AR_INPUT_IMAGE)
    same = in.nd == 3 && in.dims[0] == s->input.image[0] && in.dims[1] == s->input.image[1] &&
           in.dims[2] == s->input.image[2];
  if (!same) {
    char shape[96] = "";
    size_t at = 0;
    for (int i = 0; i < in.nd && at < sizeof shape; i++)
      at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", i ? "x" : "",
                             (long long)in.dims[i]);
    return ar_errf(c->err, AR_SPEC,
                   "%s: each example is %s (%lld values), but model.input asks for %lld; fix "
                   "model.input",
                   path, shape, (long long)elems, (long long)s->input.features);
  }
  return AR_OK;
}

/* What data.generate asks of the token generator.  labels > 2: the digit
 * rule (tdata.h); 0 keeps the two-class marker rule. */
static ar_tokens_spec tokens_spec(const ar_spec *s) {
  const ar_gen_spec *g = &s->data.gen;
  return (ar_tokens_spec){g->train_points, g->test_points, s->input.features, s->input.vocab,
                          g->labels > 2 ? g->labels : 0};
}

/* data.generate for a token model: the set in output.dir/data/{train,test},
 * made once per parameters (a stamp names them) and reused by reruns. */
static ar_status generate_tokens(run_ctx *c, const char **train, const char **test) {
  const ar_spec *s = c->spec;
  const ar_fs *fs = c->opts.fs;
  const ar_gen_spec *g = &s->data.gen;
  char stamp[256];
  /* labels > 2: the digit rule (tdata.h); the stamp of the two-class set
   * is unchanged, so existing data stays valid. */
  const int64_t labels = g->labels > 2 ? g->labels : 0;
  char lab[48] = "";
  if (labels)
    snprintf(lab, sizeof lab, " labels=%lld", (long long)labels);
  snprintf(stamp, sizeof stamp, "tokens train_points=%lld test_points=%lld seq=%lld vocab=%lld "
           "seed=%llu%s\n", (long long)g->train_points, (long long)g->test_points,
           (long long)s->input.features, (long long)s->input.vocab,
           (unsigned long long)s->seed, lab);
  char *dir = ar_path_join(s->output.dir, "data");
  if (!dir)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  size_t n = strlen(dir) + 32;
  c->data_storage = ar_malloc(3 * n);
  if (!c->data_storage) {
    ar_free(dir);
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  }
  char *trp = c->data_storage, *tep = trp + n, *stp = trp + 2 * n;
  snprintf(trp, n, "%s/train", dir);
  snprintf(tep, n, "%s/test", dir);
  snprintf(stp, n, "%s/generated", dir);
  ar_status st = ar_fs_mkdirs(fs, dir, c->err);
  bool fresh = st == AR_OK && ar__stamp_matches(fs, stp, stamp);
  if (st == AR_OK && !fresh) {
    ar_fs_unlink(fs, stp, false, NULL);
    ar_log(AR_LOG_INFO, "generating a token dataset into %s/", dir);
    ar_tokens_spec ts = tokens_spec(s);
    st = ar_tdata_generate_tokens(&ts, s->seed, dir, fs, c->err);
    if (st == AR_OK)
      st = ar_fs_write_atomic(fs, stp, stamp, strlen(stamp), c->err);
  }
  ar_free(dir);
  *train = trp;
  *test = g->test_points > 0 ? tep : NULL;
  return st;
}

ar_status ar__netjob_copy_plan(run_ctx *c) {
  const ar_plan *p = ar_net_plan(c->net);
  c->plan = *p;
  c->plan.entries = ar_malloc((size_t)(p->count ? p->count : 1) * sizeof *p->entries);
  if (!c->plan.entries)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  memcpy(c->plan.entries, p->entries, (size_t)p->count * sizeof *p->entries);
  return AR_OK;
}

ar_status ar__netjob_open_data(run_ctx *c) {
  const ar_spec *s = c->spec;
  if (ar_spec_reads_rows(s))
    return ar__netjob_open_sparse(c);
  const char *train = s->data.train, *test = s->data.test;
  if (s->data.generate)
    AR_CHECK(generate_tokens(c, &train, &test));
  if (!train)
    return ar_errf(c->err, AR_SPEC, "a graph model needs data.train (idx or npy)");
  AR_CHECK(open_split(s, c->opts.fs, train, s->data.train_labels, &c->ttrain, c->err));
  AR_CHECK(check_shape(c, c->ttrain, train));
  if (test && c->jo.records) {
    AR_CHECK(open_split(s, c->opts.fs, test, s->data.test_labels, &c->ttest, c->err));
    AR_CHECK(check_shape(c, c->ttest, test));
  }
  ar_tdata_info ti;
  ar_tdata_get_info(c->ttrain, &ti);
  if (ti.count < s->train.batch)
    return ar_errf(c->err, AR_SPEC,
                   "%s: %lld training points, fewer than one batch (train.batch %d); lower "
                   "train.batch",
                   train, (long long)ti.count, s->train.batch);
  c->mspec = *s;
  /* A part of a distributed job computes its equal share of each global
   * batch (runtime/dist checks that the batch divides). */
  int64_t rows = s->train.batch / c->jo.parts;
  if (s->onnx) /* the model file is the job's, opened with its identity */
    AR_CHECK(ar_net_build_onnx(&c->mspec, rows, c->opts.fs, &c->net, c->err));
  else
    AR_CHECK(ar_net_build(&c->mspec, rows, &c->net, c->err));
  if (c->jo.parts > 1) /* the parts' gradients sum to the batch mean */
    ar_net_set_grad_rows(c->net, s->train.batch);
  if (s->bce && ti.targets != ar_net_classes(c->net))
    return ar_errf(c->err, AR_SPEC,
                   "%s: y.npy holds %lld targets per point, but the model's output has %lld "
                   "classes; they must match",
                   train, (long long)ti.targets, (long long)ar_net_classes(c->net));
  AR_CHECK(ar__netjob_copy_plan(c));
  /* The datasets are held in memory (mapped or decompressed): host bytes
   * (ar_job_data_bytes gives the same without opening them). */
  size_t data = ti.bytes;
  if (c->ttest) {
    ar_tdata_info te;
    ar_tdata_get_info(c->ttest, &te);
    data += te.bytes;
  }
  ar_plan_add_host(&c->plan, data);
  if (s->input.kind == AR_INPUT_IMAGE && s->data.normalize) {
    int64_t ch = s->input.image[0];
    c->mean = ar_calloc((size_t)ch, sizeof *c->mean);
    c->std = ar_calloc((size_t)ch, sizeof *c->std);
    if (!c->mean || !c->std)
      return ar_errf(c->err, AR_NOMEM, "out of memory");
    AR_CHECK(ar_tdata_channel_stats(c->ttrain, c->mean, c->std, c->err));
    for (int64_t i = 0; i < ch; i++)
      if (!(c->std[i] > 0))
        c->std[i] = 1.0f;
  }
  c->order = ar_malloc((size_t)ti.count * sizeof *c->order);
  c->eval_idx = ar_malloc((size_t)s->train.batch * sizeof *c->eval_idx);
  if (!c->order || !c->eval_idx)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the epoch order");
  c->order_epoch = -1;
  int64_t per_epoch = ti.count / s->train.batch; /* full batches only */
  c->total = s->train.iterations;
  if (s->train.epochs > 0 && (c->total == 0 || s->train.epochs * per_epoch < c->total))
    c->total = s->train.epochs * per_epoch;
  ar_net_set_total(c->net, c->total);
  return AR_OK;
}

/* A net on its own blocks is refused before allocating when the device
 * cannot hold the plan, as a chain's model is (model.c, own_blocks). */
ar_status ar__netjob_fit(run_ctx *c, ar_device *dev, const void *persistent) {
  if (persistent) /* the lanes' blocks: admission checked them */
    return AR_OK;
  ar_mem_limit lim;
  ar_mem_limit_get(c->spec, dev, &lim);
  return ar_plan_fit(&c->plan, c->spec, &lim, c->err);
}

/* The bytes an idx split takes in memory, remembered per file: a jobs
 * file names the same dataset in many jobs, and an idx.gz file is read
 * whole to learn its size (Fashion-MNIST: about 0.5 s each).  An entry
 * holds while the files are the same ones (device, inode, size and
 * modification time; the labels file's too when it is named; one found
 * by the naming rule must hold as many labels as there are images, which
 * the run checks).  npy headers are read without decompressing: not
 * remembered. */
typedef struct {
  int format;
  struct stat st[2]; /* the split's file and its labels' (zeroed if none) */
  char path[512], labels[512];
  size_t bytes;
} split_memo;

static split_memo memo[8];
static size_t memo_next;
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;

static bool same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Fills key from the files; false when a name is too long or a file
 * cannot be stat'ed (then nothing is remembered: open_split reports). */
static bool memo_key(const ar_spec *s, const char *path, const char *labels, split_memo *key) {
  memset(key, 0, sizeof *key);
  if (s->data.format != AR_FMT_IDX)
    return false;
  key->format = (int)s->data.format;
  if (strlen(path) >= sizeof key->path || (labels && strlen(labels) >= sizeof key->labels))
    return false;
  strcpy(key->path, path);
  if (labels)
    strcpy(key->labels, labels);
  if (stat(path, &key->st[0]) != 0 || (labels && stat(labels, &key->st[1]) != 0))
    return false;
  return true;
}

static bool memo_find(const split_memo *key, size_t *bytes) {
  bool hit = false;
  pthread_mutex_lock(&memo_lock);
  for (size_t i = 0; i < sizeof memo / sizeof memo[0] && !hit; i++) {
    const split_memo *m = &memo[i];
    if (m->path[0] && m->format == key->format && !strcmp(m->path, key->path) &&
        !strcmp(m->labels, key->labels) && same_file(&m->st[0], &key->st[0]) &&
        same_file(&m->st[1], &key->st[1])) {
      *bytes = m->bytes;
      hit = true;
    }
  }
  pthread_mutex_unlock(&memo_lock);
  return hit;
}

static void memo_put(const split_memo *key, size_t bytes) {
  pthread_mutex_lock(&memo_lock);
  split_memo *m = &memo[memo_next++ % (sizeof memo / sizeof memo[0])];
  *m = *key;
  m->bytes = bytes;
  pthread_mutex_unlock(&memo_lock);
}

ar_status ar_job_data_bytes(const ar_spec *spec, bool with_test, size_t *out, ar_err *err) {
  *out = 0;
  if (!spec->graph || ar_spec_reads_rows(spec))
    return AR_OK; /* read in batches by ar_reader, counted in the batch's staging */
  if (spec->data.generate) { /* open_data generates a token set */
    ar_tokens_spec ts = tokens_spec(spec);
    *out = ar_tdata_tokens_bytes(&ts, false) + (with_test ? ar_tdata_tokens_bytes(&ts, true) : 0);
    return AR_OK;
  }
  const char *paths[2] = {spec->data.train, with_test ? spec->data.test : NULL};
  const char *labels[2] = {spec->data.train_labels, spec->data.test_labels};
  for (int k = 0; k < 2; k++) {
    if (!paths[k])
      continue;
    split_memo key;
    size_t bytes = 0;
    bool keyed = memo_key(spec, paths[k], labels[k], &key);
    if (!keyed || !memo_find(&key, &bytes)) {
      ar_tdata *d = NULL;
      AR_CHECK(open_split(spec, NULL, paths[k], labels[k], &d, err));
      ar_tdata_info ti;
      ar_tdata_get_info(d, &ti);
      ar_tdata_close(d);
      bytes = ti.bytes;
      if (keyed)
        memo_put(&key, bytes);
    }
    *out += bytes;
  }
  return AR_OK;
}

ar_status ar__netjob_start(run_ctx *c, ar_device *dev, void *persistent, void *ephemeral) {
  AR_CHECK(ar_net_start(c->net, dev, persistent, ephemeral, c->err));
  if (c->hooks.before || c->hooks.after || c->hooks.step)
    ar_net_set_hooks(c->net, &c->hooks);
  if (c->opts.resume)
    AR_CHECK(ar__netjob_load(c));
  return ar_net_sparse_input(c->net) ? ar__netjob_seek_sparse(c, c->opts.resume) : AR_OK;
}

static void stage(run_ctx *c, ar_tdata *d, const int64_t *idx, int64_t n, bool train,
                  uint64_t epoch) {
  ar_tdata_aug aug = {c->mean, c->std, 0, false, c->spec->seed};
  if (train) {
    aug.crop_pad = c->spec->data.crop_pad;
    aug.flip = c->spec->data.flip;
  }
  bool tokens = c->spec->input.kind == AR_INPUT_TOKENS;
  void *x = ar_net_x(c->net);
  ar_tdata_batch(d, idx, n, &aug, epoch, ar_device_threads(c->dev), tokens ? NULL : x,
                 tokens ? x : NULL, c->spec->bce ? NULL : ar_net_y(c->net));
  if (c->spec->bce)
    ar_tdata_targets(d, idx, n, ar_net_targets(c->net));
}

void ar__netjob_stage_first(run_ctx *c) {
  ar_tdata *d = c->ttest ? c->ttest : c->ttrain;
  ar_tdata_info ti;
  ar_tdata_get_info(d, &ti);
  for (int64_t r = 0; r < c->spec->train.batch; r++)
    c->eval_idx[r] = r < ti.count ? r : 0;
  stage(c, d, c->eval_idx, c->spec->train.batch, false, 0);
}

ar_status ar__netjob_step(run_ctx *c) {
  if (ar_net_sparse_input(c->net))
    return ar__netjob_step_sparse(c);
  const ar_spec *s = c->spec;
  int64_t B = s->train.batch;
  ar_tdata_info ti;
  ar_tdata_get_info(c->ttrain, &ti);
  if (c->st.rows_in_epoch + B > ti.count) { /* the tail is dropped */
    c->st.epoch++;
    c->st.rows_in_epoch = 0;
  }
  if (c->order_epoch != c->st.epoch) {
    ar_tdata_order(ti.count, s->data.shuffle_window != 0, s->seed, (uint64_t)c->st.epoch,
                   c->order);
    c->order_epoch = c->st.epoch;
  }
  double t0 = c->trace ? ar_now() : 0.0;
  int64_t rows = B / c->jo.parts, first = c->st.rows_in_epoch + rows * c->jo.part;
  stage(c, c->ttrain, c->order + first, rows, true, (uint64_t)c->st.epoch);
  if (c->trace)
    ar_trace_add_span(c->trace, AR_TRACE_STEPS, "data", "batch", NULL, t0, ar_now(), false);
  double loss = 0, lr = 0;
  ar_status st = ar_net_train(c->net, &loss, &lr, c->err);
  if (st != AR_OK) {
    ar_err_wrap(c->err, "training");
    return st;
  }
  c->last_lr = lr;
  c->last_loss_sum = loss * (double)rows;
  c->last_rows = rows;
  c->batch.rows = B; /* the global batch's rows */
  return AR_OK;
}

ar_status ar__netjob_eval(run_ctx *c, ar_eval_acc *acc) {
  if (c->net && ar_net_sparse_input(c->net))
    return ar__netjob_eval_sparse(c, acc);
  if (!c->ttest)
    return AR_OK;
  ar_tdata_info te;
  ar_tdata_get_info(c->ttest, &te);
  int64_t B = c->spec->train.batch / c->jo.parts, total = te.count;
  int64_t most = c->eval_max > 0 ? c->eval_max : c->spec->train.eval_points;
  if (most > 0 && most < total)
    total = most;
  int64_t *idx = c->eval_idx; /* allocated with the data: evaluation runs inside the loop */
  ar_status st = AR_OK;
  for (int64_t at = 0; at < total && st == AR_OK; at += B) {
    int64_t rows = total - at < B ? total - at : B;
    for (int64_t r = 0; r < B; r++)
      idx[r] = at + (r < rows ? r : 0); /* padded with a real example */
    stage(c, c->ttest, idx, B, false, 0);
    st = ar_net_eval(c->net, rows, acc, c->err);
  }
  return st;
}

_Static_assert(AR_NN_MAX_DIMS <= AR__CKPT_MAX_DIMS, "a graph tensor's dims fit a checkpoint's");

/* The tensors a checkpoint keeps, as the format's list. */
static ar_status ckpt_list(run_ctx *c, ar__ckpt_tensors *t) {
  int n = ar_net_tensors(c->net, NULL, NULL, NULL, NULL);
  size_t m = (size_t)(n ? n : 1);
  t->dev = ar_net_device(c->net);
  t->n = n;
  t->names = ar_malloc(m * sizeof *t->names);
  t->ptrs = ar_malloc(m * sizeof *t->ptrs);
  t->counts = ar_malloc(m * sizeof *t->counts);
  ar_shape *sh = ar_malloc(m * sizeof *sh);
  ar__ckpt_shape *cs = ar_calloc(m, sizeof *cs);
  t->shapes = cs;
  if (!t->names || !t->ptrs || !t->counts || !sh || !cs) {
    ar_free(sh);
    return ar_errf(c->err, AR_NOMEM, "out of memory listing the checkpoint's tensors");
  }
  ar_net_tensors(c->net, t->names, t->ptrs, t->counts, sh);
  for (int i = 0; i < n; i++) {
    cs[i].dtype = AR__CKPT_F32;
    cs[i].nd = sh[i].nd;
    memcpy(cs[i].d, sh[i].d, (size_t)sh[i].nd * sizeof sh[i].d[0]);
  }
  ar_free(sh);
  /* A lowered chain's file is the chain's: its names and order. */
  return c->spec->lowered ? ar__lower_ckpt_list(c->spec, t, c->err) : AR_OK;
}

static void ckpt_free(ar__ckpt_tensors *t) {
  ar_free(t->names);
  ar_free(t->ptrs);
  ar_free(t->counts);
  ar_free((void *)t->shapes);
}

ar_status ar__netjob_save(run_ctx *c) {
  ar__ckpt_tensors t = {0};
  ar_status st = ckpt_list(c, &t);
  if (st == AR_OK)
    st = ar_net_model_layout(c->net, true, c->err);
  if (st == AR_OK) {
    st = ar__checkpoint_save_tensors(&t, ar_net_step(c->net), &c->st, c->opts.fs, c->ckpt_path,
                                     c->err);
    ar_status back = ar_net_model_layout(c->net, false, c->err);
    if (st == AR_OK)
      st = back;
  }
  ckpt_free(&t);
  return st;
}

ar_status ar__netjob_load(run_ctx *c) {
  ar__ckpt_tensors t = {0};
  int64_t step = 0;
  ar_status st = ckpt_list(c, &t);
  if (st == AR_OK)
    st = ar__checkpoint_load_tensors(&t, &step, &c->st, c->opts.fs, c->ckpt_path, c->err);
  if (st == AR_OK)
    st = ar_net_model_layout(c->net, false, c->err);
  ckpt_free(&t);
  if (st == AR_OK) {
    ar_net_set_step(c->net, step);
    st = ar_net_resumed(c->net, c->err); /* a sampled head's tables, rebuilt */
  }
  return st;
}

void ar__netjob_close(run_ctx *c) {
  if (c->net && ar_net_sparse_input(c->net))
    ar__netjob_close_sparse(c);
  ar_net_destroy(c->net);
  c->net = NULL;
  ar_tdata_close(c->ttrain);
  ar_tdata_close(c->ttest);
  ar_free(c->order);
  ar_free(c->eval_idx);
  ar_free(c->mean);
  ar_free(c->std);
}

ar_status ar__netjob_eval_checkpoint(const ar_spec *spec, const char *ckpt, int64_t max_points,
                                     int reps, ar_eval_report *out, ar_err *err) {
  if (!ar_fs_readable(NULL, ckpt))
    return ar_errf(err, AR_NOTFOUND, "no checkpoint at '%s'; train the job first (accelrt run) "
                   "or pass --checkpoint PATH", ckpt);
  run_ctx *c = ar_calloc(1, sizeof *c);
  if (!c)
    return ar_errf(err, AR_NOMEM, "out of memory");
  c->spec = spec;
  c->opts = (ar_run_opts)AR_RUN_OPTS_INIT;
  c->jo = (ar_job_opts)AR_JOB_OPTS_INIT;
  c->jo.records = true; /* the test split is opened; nothing of the run is written */
  c->err = err;
  c->eval_max = max_points;
  c->ckpt_path = ar_strdup(ckpt);
  ar_status st = c->ckpt_path ? ar__netjob_open_data(c) : ar_errf(err, AR_NOMEM, "out of memory");
  const bool sparse = st == AR_OK && ar_net_sparse_input(c->net);
  if (st == AR_OK && !(sparse ? (void *)c->test : (void *)c->ttest))
    st = ar_errf(err, AR_NOTFOUND, "the job has no test split to evaluate on; set data.test");
  ar_device_opts dopts = ar_job_device_opts(spec);
  if (st == AR_OK)
    st = ar_device_open(ar__job_device_name(spec), &dopts, &c->dev, err);
  if (st == AR_OK)
    st = ar_net_start(c->net, c->dev, NULL, NULL, err);
  if (st == AR_OK)
    st = ar__netjob_load(c);
  double best = INFINITY;
  ar_eval_acc acc;
  for (int k = 0; st == AR_OK && k < reps; k++) {
    memset(&acc, 0, sizeof acc);
    double t0 = ar_now();
    st = ar__netjob_eval(c, &acc);
    double sec = ar_now() - t0;
    best = sec < best ? sec : best;
  }
  if (st == AR_OK) {
    out->single_label = !sparse; /* sparse input: P@k, as a chain's */
    out->points = acc.rows;
    out->top1 = acc.rows ? 100.0 * acc.hits[0] / (double)acc.rows : 0;
    out->top5 = acc.rows ? 100.0 * acc.hits[2] / (double)acc.rows : 0;
    out->p_at[0] = out->top1;
    out->p_at[1] = out->p_at[2] = -1;
    for (int i = 0; sparse && i < 3; i++)
      out->p_at[i] = ar__p_at(&acc, i);
    out->loss = acc.rows ? acc.loss_sum / (double)acc.rows : 0;
    out->seconds = best;
    out->samples_per_s = best > 0 ? (double)acc.rows / best : 0;
    out->threads = ar_device_threads(c->dev);
    snprintf(out->device, sizeof out->device, "%s", ar_device_name(c->dev));
  }
  ar__netjob_free(c);
  return st;
}

void ar__netjob_free(run_ctx *c) {
  ar__netjob_close(c);
  ar_device_close(c->dev);
  ar_plan_fini(&c->plan);
  ar_free(c->data_storage);
  ar_free(c->ckpt_path);
  ar_free(c);
}
