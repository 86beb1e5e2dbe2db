/* ar_dist_run: one MPI rank's part of a parameter-server job — set-up
 * (MPI, roles, shards, this rank's ar_job, op graph), the iteration loop,
 * resume, teardown.  The iterations themselves are in server.c and
 * worker.c; data, model, evaluation, checkpoints and the summary are the
 * job's (runtime/engine). */
#define _GNU_SOURCE
#include "dist_impl.h"

#include "accelrt/net.h"
#include "accelrt/tenancy.h"

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void read_env(ar_dist_opts *o) {
  const char *v = getenv("ACCELRT_DIST_TIMEOUT");
  if (o->timeout_s <= 0 && v && atof(v) > 0)
    o->timeout_s = atof(v);
  if (o->timeout_s <= 0)
    o->timeout_s = 120.0;
  v = getenv("ACCELRT_DIST_FAULT");
  if (o->fail_rank < 0 && v) {
    int r;
    long long it;
    if (sscanf(v, "%d:%lld", &r, &it) == 2) {
      o->fail_rank = r;
      o->fail_iteration = it;
    }
  }
  v = getenv("ACCELRT_DIST_STAGE");
  if (v && strcmp(v, "1") == 0)
    o->stage = true;
  v = getenv("ACCELRT_DIST_PIECE");
  if (o->piece_bytes == 0 && v && atoll(v) > 0)
    o->piece_bytes = (size_t)atoll(v);
  /* An MPI count is an int: a piece is at most INT_MAX bytes (rounded
   * down to 64). */
  if (o->piece_bytes == 0 || o->piece_bytes > (size_t)INT_MAX)
    o->piece_bytes = (size_t)INT_MAX & ~(size_t)63;
}

/* Every rank learns whether every rank's step succeeded, so that a rank
 * that failed alone (a missing file on one machine) does not leave the
 * others waiting for the dead-peer timeout. */
static ar_status agree(ar__dist *c, ar_status mine, const char *what) {
  int ok = mine == AR_OK ? 1 : 0, all = 0;
  MPI_Request q;
  int rc = MPI_Iallreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c->cctl, &q);
  if (rc != MPI_SUCCESS)
    return mine != AR_OK ? mine : ar__dist_mpi_err(c, rc, "agreeing on %s", what);
  ar_status st = ar__dist_wait(c, &q, -1, what);
  if (mine != AR_OK)
    return mine;
  if (st != AR_OK)
    return st;
  if (!all)
    return ar_errf(c->err, AR_STATE, "rank %d: another rank failed during %s (its message "
                   "says why)", c->rank, what);
  return AR_OK;
}

/* This rank's number among the ranks of its machine and their count,
 * into c->local_index and c->local_count.  MPI_Comm_split_type is
 * collective: every rank calls this, once, at set-up (a call by the
 * workers alone waited forever for the servers). */
static void local_ranks(ar__dist *c) {
  MPI_Comm local;
  c->local_index = 0;
  c->local_count = 1;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(local, &c->local_index);
    MPI_Comm_size(local, &c->local_count);
    MPI_Comm_free(&local);
  }
}

static ar_status mpi_setup(ar__dist *c, bool *we_init) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int argc = 0;
    char **argv = NULL;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
      return ar_errf(c->err, AR_IO, "MPI_Init failed: start the job with mpirun -np N");
    *we_init = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size);
  local_ranks(c);
  MPI_Comm *comms[3] = {&c->cparam, &c->cgrad, &c->cctl};
  for (int i = 0; i < 3; i++) {
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, comms[i]);
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "duplicating MPI_COMM_WORLD");
    MPI_Comm_set_errhandler(*comms[i], MPI_ERRORS_RETURN);
  }
  int rc = MPI_Irecv(c->abort_msg, 3, MPI_INT64_T, MPI_ANY_SOURCE, AR__DIST_TAG_ABORT, c->cctl,
                     &c->abort_req);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "posting the abort receive");
  /* One clock for every rank's spans: rank 0's, at start. */
  double base = c->rank == 0 ? ar__dist_clock(c) : 0.0;
  AR_CHECK(ar__dist_bcast(c, &base, 1, MPI_DOUBLE, "the clock base"));
  c->clock0 = base;
  return AR_OK;
}

static ar_status check_roles(ar__dist *c) {
  const ar_spec *s = c->spec;
  c->S = s->distributed.servers > 0 ? s->distributed.servers : 1;
  c->W = c->size - c->S;
  if (c->W < 1)
    return ar_errf(c->err, AR_SPEC,
                   "distributed.servers is %d but the job has %d MPI rank%s: start it with "
                   "mpirun -np N where N > %d (servers plus at least one worker)",
                   c->S, c->size, c->size == 1 ? "" : "s", c->S);
  if (s->train.batch < c->W)
    return ar_errf(c->err, AR_SPEC,
                   "train.batch %d is smaller than the %d workers: every worker needs at least "
                   "one row; raise train.batch or start fewer ranks",
                   s->train.batch, c->W);
  if (s->distributed.n_workers > c->W)
    return ar_errf(c->err, AR_SPEC,
                   "distributed.workers lists %d workers but the job has %d (%d ranks, %d "
                   "server%s): shorten the list or start more ranks",
                   s->distributed.n_workers, c->W, c->size, c->S, c->S == 1 ? "" : "s");
  c->lowered = s->lowered;
  c->graph = s->graph && !s->lowered;
  if (c->graph && s->train.batch % c->W != 0)
    return ar_errf(c->err, AR_SPEC,
                   "train.batch %d does not divide among the %d workers: a graph model's "
                   "workers compute equal parts of each batch; make train.batch a multiple "
                   "of %d or start another number of ranks",
                   s->train.batch, c->W, c->W);
  c->server = c->rank < c->S;
  c->widx = c->server ? -1 : c->rank - c->S;
  /* Servers hear from every worker, so they notice a dead rank first and
   * relay its name; workers wait longer so that the relay reaches them
   * before their own timer names only their server. */
  if (!c->server)
    c->timeout_s *= 1.5;
  return AR_OK;
}

/* The device a worker computes on (into c->dev_name): its
 * distributed.workers entry, else the job's.  auto is a GPU when this
 * build has CUDA and a device is present (the ranks of one machine spread
 * over its GPUs by their local rank), otherwise the host; cuda:N must
 * exist, or the worker fails naming itself and what to set. */
static ar_status worker_device(ar__dist *c) {
  const ar_spec *s = c->spec;
  const char *dev = s->device;
  bool own = c->widx < s->distributed.n_workers && s->distributed.workers[c->widx].device;
  if (own)
    dev = s->distributed.workers[c->widx].device;
  char key[64];
  if (own)
    snprintf(key, sizeof key, "distributed.workers[%d].device", c->widx);
  else
    snprintf(key, sizeof key, "device (or distributed.workers[%d].device)", c->widx);
  snprintf(c->dev_name, sizeof c->dev_name, "host");
  /* A graph model's distributed workers run on the host in this version:
   * its tensors would move between MPI and device memory unstaged. */
  if (strcmp(dev, "host") == 0 || (c->spec->graph && strcmp(dev, "auto") == 0))
    return AR_OK;
  if (c->spec->graph)
    return ar_errf(c->err, AR_SPEC,
                   "worker %d (rank %d): device %s: a graph model's distributed workers run on "
                   "the host in this version; set %s to host or auto", c->widx, c->rank, dev,
                   key);
  char why[256] = "";
  int gpus = ar_cuda_device_count(why, sizeof why);
  if (strcmp(dev, "auto") == 0) {
    if (gpus > 0)
      snprintf(c->dev_name, sizeof c->dev_name, "cuda:%d", c->local_index % gpus);
    return AR_OK;
  }
  char *end = NULL;
  long n = strncmp(dev, "cuda:", 5) == 0 ? strtol(dev + 5, &end, 10) : -1;
  if (n < 0 || !end || end == dev + 5 || *end)
    return ar_errf(c->err, AR_SPEC, "worker %d (rank %d): unknown device '%s'; set %s to host, "
                   "auto or cuda:N", c->widx, c->rank, dev, key);
  if (gpus == 0)
    return ar_errf(c->err, AR_NODEVICE,
                   "worker %d (rank %d): device %s: no CUDA device here (%s); set %s to auto "
                   "or host", c->widx, c->rank, dev, why, key);
  if (n >= gpus)
    return ar_errf(c->err, AR_NODEVICE,
                   "worker %d (rank %d): device %s: this machine has %d CUDA device%s "
                   "(cuda:0 to cuda:%d); set %s to one of them, auto or host",
                   c->widx, c->rank, dev, gpus, gpus == 1 ? "" : "s", gpus - 1, key);
  snprintf(c->dev_name, sizeof c->dev_name, "cuda:%ld", n);
  return AR_OK;
}

/* Which layers every rank computes sampled: each worker decides from its
 * device and distributed.workers (sparse: dense keeps it dense), every
 * rank learns all of it, and the servers sample a layer (keep its sparse
 * Adam state, exchange it as rows) when any worker does.  wspec gets its
 * own copy of the layers with the modes this rank runs. */
static ar_status decide_sampling(ar__dist *c) {
  const ar_spec *s = c->spec;
  int n = s->n_layers;
  c->smask = ar_calloc((size_t)c->size * (size_t)n, 1);
  c->wlayers = ar_malloc((size_t)n * sizeof *c->wlayers);
  uint8_t *mine = ar_calloc((size_t)n, 1);
  ar_status st = AR_OK;
  if (!c->smask || !c->wlayers || !mine)
    st = ar_errf(c->err, AR_NOMEM, "out of memory for the layer table");
  snprintf(c->dev_name, sizeof c->dev_name, "host");
  if (st == AR_OK && !c->server) {
    /* Sampled layers are host-only: a GPU worker runs them dense. */
    st = worker_device(c);
    bool host = strcmp(c->dev_name, "host") == 0;
    bool dense = c->widx < s->distributed.n_workers && s->distributed.workers[c->widx].dense;
    for (int l = 0; l < n && st == AR_OK && (!s->graph || s->lowered); l++)
      mine[l] = !dense && ar_layer_sampled(s, l, host);
    /* MPI moves host memory: a GPU worker (or one told to) stages; a
     * graph model's nets live on the host. */
    c->staged = (!host || c->o.stage) && !s->graph;
  }
  st = agree(c, st, "choosing each worker's device");
  MPI_Request q;
  if (st == AR_OK) {
    int rc = MPI_Iallgather(mine, n, MPI_UINT8_T, c->smask, n, MPI_UINT8_T, c->cctl, &q);
    st = rc == MPI_SUCCESS ? ar__dist_wait(c, &q, -1, "the workers' sampled layers")
                           : ar__dist_mpi_err(c, rc, "sharing the workers' sampled layers");
  }
  ar_free(mine);
  /* Every rank learns where the workers compute (rank 0's summary). */
  char desc[AR__DIST_DEV_DESC] = "";
  if (!c->server)
    snprintf(desc, sizeof desc, "%s%s", c->dev_name,
             c->staged && strcmp(c->dev_name, "host") == 0 ? " (staged)" : "");
  c->wdesc = st == AR_OK ? ar_calloc((size_t)c->size, AR__DIST_DEV_DESC) : NULL;
  if (st == AR_OK && !c->wdesc)
    st = ar_errf(c->err, AR_NOMEM, "out of memory for the workers' devices");
  if (st == AR_OK) {
    int rc = MPI_Iallgather(desc, AR__DIST_DEV_DESC, MPI_CHAR, c->wdesc, AR__DIST_DEV_DESC,
                            MPI_CHAR, c->cctl, &q);
    st = rc == MPI_SUCCESS ? ar__dist_wait(c, &q, -1, "the workers' devices")
                           : ar__dist_mpi_err(c, rc, "sharing the workers' devices");
  }
  if (st != AR_OK)
    return st;
  for (int r = 0; r < c->S; r++)
    for (int l = 0; l < n; l++)
      for (int w = c->S; w < c->size; w++)
        c->smask[(size_t)r * (size_t)n + (size_t)l] |= c->smask[(size_t)w * (size_t)n + (size_t)l];
  for (int l = 0; l < n; l++) {
    c->wlayers[l] = s->layers[l];
    bool any = c->smask[(size_t)l] != 0, all = true;
    for (int w = c->S; w < c->size; w++)
      all = all && c->smask[(size_t)w * (size_t)n + (size_t)l];
    if (l == 0 && s->input.sparse && any && !all)
      return ar_errf(c->err, AR_SPEC,
                     "layer %s reads the sparse input and is sampled on some workers but dense "
                     "on others, whose weight layouts differ ((out, in) vs (in, out)): give "
                     "every worker the same distributed.workers[i].sparse for this job (GPU "
                     "workers compute it dense), or put a dense layer before it",
                     s->layers[l].name);
    if (s->layers[l].sparse.mode == AR_SPARSE_LSH || s->layers[l].sparse.mode == AR_SPARSE_AUTO)
      c->wlayers[l].sparse.mode =
          ar__dist_sampled(c, c->rank, l) ? AR_SPARSE_LSH : AR_SPARSE_DENSE;
  }
  return AR_OK;
}

/* The threads this rank computes with: workers compute, servers only sum
 * and step.  OMP_NUM_THREADS and SLURM_CPUS_PER_TASK (srun -c) already
 * count per rank; otherwise the ranks of one machine share the cores of
 * the mask they all inherited. */
static int rank_threads(const ar__dist *c) {
  if (c->server)
    return 1;
  if (c->spec->train.threads > 0)
    return ar_job_threads(c->spec);
  ar_host_cpus cpus;
  ar_host_cpus_get(&cpus);
  if (cpus.per_process)
    return cpus.threads;
  int local = c->local_count;
  return cpus.threads / local > 1 ? cpus.threads / local : 1;
}

/* This rank's job: a worker's computes its part of every global batch
 * (stepped with the per-layer hooks of worker.c); the servers' do not
 * step (remote), and rank 0's keeps the records.  Rank 0 resolves (and
 * maybe generates) the data first, and reads the checkpoint when
 * resuming; the others then find the data ready. */
static ar_status open_job(ar__dist *c, const ar_run_opts *opts) {
  c->wspec = *c->spec;
  c->wspec.layers = c->wlayers;
  c->wspec.device = c->dev_name;                /* the plan's kind of device */
  c->wspec.train.threads = rank_threads(c);     /* the plan's per-thread scratch */
  ar_job_opts jo = AR_JOB_OPTS_INIT;
  jo.records = c->rank == 0;
  jo.remote = c->server;
  jo.t0 = c->wall0;
  jo.trace = c->tl;
  if (!c->server) {
    ar__dist_worker_hooks(c);
    jo.parts = c->W;
    jo.part = c->widx;
    jo.hooks = &c->hooks;
  } else if (c->rank != 0) {
    jo.model_rows = 1; /* its shard only: it never evaluates */
  } else {
    jo.keys = ar__dist_keys;
    jo.keys_ctx = c;
  }
  ar_run_opts ro = *opts;
  ro.resume = opts->resume && c->rank == 0; /* the others get it from rank 0 */
  ar_status st = AR_OK;
  if (c->rank == 0)
    st = ar_job_open_ex(&c->wspec, &ro, &jo, &c->job, c->err);
  AR_CHECK(agree(c, st, "preparing the data"));
  /* Only rank 0 reads the checkpoint: whether it found one (a requeued job
   * may have none yet and start over) decides for every rank. */
  int resumed = c->rank == 0 && ar_job_resumed(c->job);
  AR_CHECK(ar__dist_bcast(c, &resumed, 1, MPI_INT, "whether the job resumes"));
  c->resumed = resumed != 0;
  if (c->rank != 0)
    AR_CHECK(ar_job_open_ex(&c->wspec, &ro, &jo, &c->job, c->err));
  c->total = ar_job_total(c->job);
  return AR_OK;
}

/* The device (a tenant's lane of a shared one with distributed.share) and
 * the job's model on it. */
static ar_status make_model(ar__dist *c) {
  const ar_spec *s = c->spec;
  const ar_plan *plan = ar_job_plan(c->job);
  ar_device_opts dopts = AR_DEVICE_OPTS_INIT;
  dopts.threads = c->wspec.train.threads;
  dopts.pin = false; /* several ranks per machine: let the OS place them */
  void *p = NULL, *e = NULL;
  if (!c->server && s->distributed.share_file) {
    /* A tenant of the shared device's lanes: the model lives in the
     * blocks the lanes give its exact plan (share.c); its host memory
     * lives as long as the model, so it is admitted with the persistent
     * block. */
    size_t admit_p, admit_e;
    ar_tenancy_admit_sizes(plan, &admit_p, &admit_e);
    AR_CHECK(ar__share_open(c, dopts.threads, admit_p, admit_e));
    ar__share_blocks(c, &c->dev, &p, &e);
    c->dev_borrowed = true;
  } else {
    if (strcmp(c->dev_name, "host") != 0) {
      /* A GPU worker's arena: runtime.memory when the job gives it, else
       * its plan plus room for cuBLAS's workspace and alignment, so that
       * several workers (and other jobs) fit on one GPU. */
      ar_device_opts jo = ar_job_device_opts(s);
      dopts.memory_bytes = jo.memory_bytes;
      dopts.memory_fraction = jo.memory_fraction;
      if (dopts.memory_bytes == 0 && dopts.memory_fraction == 0.0)
        dopts.memory_bytes = plan->persistent_bytes + plan->ephemeral_bytes + ((size_t)64 << 20);
    }
    if (ar_device_open(c->dev_name, &dopts, &c->dev, c->err) != AR_OK)
      return ar_err_wrap(c->err, "worker %d (rank %d): opening %s", c->widx, c->rank,
                         c->dev_name);
  }
  AR_CHECK(ar_job_start(c->job, c->dev, p, e, c->err));
  c->model = ar_job_model(c->job);
  c->net = ar_job_net(c->job);
  return AR_OK;
}

/* A transfer's pointers into its layer's model memory (again after the
 * blocks moved). */
static void bind_tensor(ar__dist_tensor *T, const ar_layer *L) {
  T->p = T->bias ? L->b : L->w;
  T->g = T->bias ? L->gb : L->gw;
  T->s1 = T->bias ? L->s1b : L->s1w;
  T->s2 = T->bias ? L->s2b : L->s2w;
}

/* Each message of a transfer is its pieces (at per-piece index T->slot). */
static ar_status make_slots(ar__dist *c) {
  for (int t = 0; t < c->nt; t++) {
    c->t[t].pieces = ar__dist_pieces(c, c->t[t].wire);
    c->t[t].slot = c->nslots;
    c->nslots += (size_t)c->t[t].pieces;
  }
  c->slot_t = ar_malloc(c->nslots * sizeof *c->slot_t);
  if (!c->slot_t)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the tensor table");
  for (int t = 0; t < c->nt; t++)
    for (int k = 0; k < c->t[t].pieces; k++)
      c->slot_t[c->t[t].slot + (size_t)k] = (uint32_t)t;
  return AR_OK;
}

/* Every layer's w and b is a transfer, ids 2l and 2l+1 (their servers
 * come from the op graph, see ar_dist_op_graph); a graph model's are its
 * net's parameters (graph.c). */
static ar_status make_tensors(ar__dist *c) {
  if (c->graph) {
    AR_CHECK(ar__dist_graph_tensors(c));
    return make_slots(c);
  }
  const ar_spec *s = c->spec;
  ar_model *m = c->model; /* NULL for a lowered chain: its net holds the layers */
  c->nt = 2 * s->n_layers;
  c->t = ar_calloc((size_t)c->nt, sizeof *c->t);
  if (!c->t)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the tensor table");
  const char *names[512];
  float *ptrs[512];
  int64_t counts[512];
  int nm = m ? ar_model_tensors(m, names, ptrs, counts, 512) : 0;
  for (int l = 0; l < s->n_layers; l++) {
    const char *lname = s->layers[l].name;
    const int64_t in = l == 0 ? s->input.features : s->layers[l - 1].width,
                  out = s->layers[l].width;
    for (int k = 0; k < 2; k++) {
      ar__dist_tensor *T = &c->t[2 * l + k];
      snprintf(T->name, sizeof T->name, "%s.%s", lname, k ? "b" : "w");
      for (char *p = T->name; *p; p++)
        if (*p == ' ' || *p == '\t' || *p == '#')
          *p = '_';
      T->layer = l;
      T->bias = k == 1;
      T->count = k ? out : in * out;
      T->bytes = (size_t)T->count * sizeof(float);
      if (m)
        bind_tensor(T, &m->layers[l]);
      T->rows = ar__dist_sampled(c, 0, l); /* rank 0 is a server */
      T->nrows = (uint32_t)out;
      T->row_len = k ? 1 : in;
      T->wire = T->rows ? ar__rows_wire(T) : T->bytes;
      c->rows_dense_bytes += T->rows ? T->bytes : 0;
      char last[96];
      snprintf(last, sizeof last, "%s.lsh.last", lname);
      for (int i = 0; i < nm && i < 512 && c->server && T->rows && !T->bias; i++)
        if (strcmp(names[i], last) == 0)
          T->last = ptrs[i];
      if (c->lowered && c->server && T->rows && !T->bias) /* the net's LAYER.lsh_last */
        T->last = ar_net_sampled_last(c->net, l);
      AR_ASSERT(!c->server || !T->rows || T->bias || T->last);
    }
  }
  if (c->lowered)
    AR_CHECK(ar__dist_lowered_bind(c));
  return make_slots(c);
}

void ar__dist_rebind(ar__dist *c, void *persistent, void *ephemeral) {
  ar_job_rebase(c->job, persistent, ephemeral);
  if (c->graph) {
    ar__dist_graph_bind(c);
    return;
  }
  if (c->lowered) { /* the same net, moved: the names still match */
    ar_status st = ar__dist_lowered_bind(c);
    AR_ASSERT(st == AR_OK);
    return;
  }
  for (int t = 0; t < c->nt; t++)
    bind_tensor(&c->t[t], &c->model->layers[c->t[t].layer]);
}

/* Rank 0 sends its whole model state to the other servers (resume). */
static ar_status send_state(ar__dist *c) {
  const char *names[512];
  float *ptrs[512];
  int64_t counts[512];
  int n = ar__dist_job_tensors(c, names, ptrs, counts, 512);
  if (n > 512)
    return ar_errf(c->err, AR_UNSUPPORTED, "the model has %d tensors; resume handles 512", n);
  size_t pieces = 0, nreq = 0;
  for (int i = 0; i < n; i++)
    pieces += (size_t)ar__dist_pieces(c, (size_t)counts[i] * sizeof(float));
  MPI_Request *req = ar_malloc((pieces * (size_t)c->S + 1) * sizeof *req);
  if (!req)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  ar_status st = AR_OK;
  for (int r = c->rank == 0 ? 1 : c->rank; r < (c->rank == 0 ? c->S : c->rank + 1); r++)
    for (int i = 0; i < n && st == AR_OK; i++) {
      size_t bytes = (size_t)counts[i] * sizeof(float);
      int k = ar__dist_pieces(c, bytes);
      st = ar__dist_post(c, c->rank == 0, ptrs[i], bytes, k, c->rank == 0 ? r : 0,
                         AR__DIST_TAG_GATHER + i, c->cctl, req + nreq, "moving", names[i]);
      if (st == AR_OK)
        nreq += (size_t)k;
    }
  for (size_t i = 0; i < nreq && st == AR_OK; i++)
    st = ar__dist_wait(c, &req[i], c->rank == 0 ? -1 : 0, "the checkpoint's state");
  ar_free(req);
  return st;
}

/* --resume: rank 0's job has loaded the checkpoint; rank 0 sends its
 * position and parameters to every rank and its whole state to the other
 * servers, so no other rank needs the file. */
static ar_status resume(ar__dist *c) {
  const ar_ckpt_state *pos = ar_job_state(c->job);
  int64_t hdr[5] = {pos->iteration, pos->epoch, pos->rows_in_epoch, pos->samples,
                    c->net ? ar_net_step(c->net) : c->model->step};
  double train_s = pos->train_s;
  AR_CHECK(ar__dist_bcast(c, hdr, 5, MPI_INT64_T, "the checkpoint state"));
  AR_CHECK(ar__dist_bcast(c, &train_s, 1, MPI_DOUBLE, "the checkpoint state"));
  ar_ckpt_state st = {hdr[0], hdr[1], hdr[2], hdr[3], train_s};
  c->iter = st.iteration;
  if (c->net)
    ar_net_set_step(c->net, hdr[4]);
  else
    ar_model_set_step(c->model, hdr[4]);
  /* The parameters go to every rank (their shapes are the same whatever a
   * rank samples); the whole state (optimizer, sparse Adam's row steps)
   * to the other servers, whose models have rank 0's plan. */
  for (int t = 0; t < c->nt; t++)
    AR_CHECK(ar__dist_bcast_bytes(c, ar__dist_param_buf(&c->t[t]), c->t[t].bytes, c->t[t].name));
  if (c->staged)
    AR_CHECK(ar__stage_reload(c));
  if (c->graph) { /* running statistics: the checkpoint's, on every rank */
    int ns = ar_net_states(c->net, NULL, NULL, NULL);
    const char *sn[512];
    float *sp[512];
    int64_t scnt[512];
    if (ns > 512)
      return ar_errf(c->err, AR_UNSUPPORTED, "the model has %d state tensors; resume handles "
                     "512", ns);
    ar_net_states(c->net, sn, sp, scnt);
    for (int i = 0; i < ns; i++)
      AR_CHECK(ar__dist_bcast_bytes(c, sp[i], (size_t)scnt[i] * sizeof(float), sn[i]));
  }
  if (c->server && c->S > 1)
    AR_CHECK(send_state(c));
  /* A worker's tables come from the weights it now holds, and its data
   * goes on from the checkpoint's position. */
  if (c->rank != 0)
    AR_CHECK(ar_job_resume_at(c->job, &st, c->err));
  return AR_OK;
}

static ar_status setup(ar__dist *c, const ar_run_opts *opts) {
  AR_CHECK(check_roles(c));
  /* The timeline: rank 0's environment decides for every rank. */
  ar_trace_opts to = AR_TRACE_OPTS_INIT;
  AR_CHECK(agree(c, c->rank == 0 ? ar_trace_opts_env(&to, c->err) : AR_OK,
                 "reading the trace options"));
  AR_CHECK(agree(c, ar__dist_tl_open(c, &to), "preparing the timeline"));
  AR_CHECK(decide_sampling(c));
  AR_CHECK(open_job(c, opts));
  ar_status st = make_model(c);
  if (st == AR_OK)
    st = make_tensors(c);
  if (st == AR_OK && c->staged)
    st = ar__stage_init(c);
  if (st == AR_OK)
    st = c->graph ? ar__dist_graph_ops(c) : ar__dist_graph_build(c);
  AR_CHECK(agree(c, st, "building the model"));
  c->order = ar__dist_order_of(c->spec->distributed.order);
  c->srep_len = ar__srep(c, AR__SREP_PARTS);
  AR_CHECK(ar__dist_schedule_from_file(c));
  if (c->resumed)
    AR_CHECK(resume(c));
  st = c->server ? ar__dist_server_init(c) : ar__dist_worker_init(c);
  if (st == AR_OK && c->rank == 0)
    st = ar__dist_report_init(c, c->resumed);
  return agree(c, st, "setting up the ranks");
}

/* Evaluation and checkpoints when the job asks for them: every server
 * sends its shard to rank 0, whose job evaluates or saves. */
static ar_status between_iterations(ar__dist *c, int64_t iter) {
  bool ev, ck;
  ar_job_due(c->job, iter, &ev, &ck);
  if (!ev && !ck)
    return AR_OK;
  AR_CHECK(ar__dist_graph_states(c)); /* graph models: worker 0's to rank 0 */
  if (!c->server)
    return AR_OK;
  AR_CHECK(ar__dist_gather(c));
  if (c->rank != 0)
    return AR_OK;
  if (ev)
    AR_CHECK(ar_job_evaluate(c->job, c->err));
  if (ck)
    AR_CHECK(ar_job_checkpoint(c->job, c->err));
  return AR_OK;
}

/* The vote on stopping at the end of an iteration (ar__dist.defer_stop):
 * the vote cast at the end of the iteration before is awaited -- every
 * rank cast it before this iteration's transfers, so the wait is short --
 * and, unless this is the last iteration, this one's is cast.  *stop when
 * the awaited vote says a rank had seen SIGINT or SIGTERM: every rank
 * learns it at the same iteration. */
static ar_status stop_vote(ar__dist *c, bool last, bool *stop) {
  *stop = false;
  if (c->stop_req != MPI_REQUEST_NULL) {
    AR_CHECK(ar__dist_wait(c, &c->stop_req, -1, "the ranks' vote on stopping"));
    c->vote_in = true;
  }
  if (c->vote_in) /* awaited here or tested by ar__dist_next_certain */
    *stop = c->stop_any != 0 && !last;
  c->vote_in = false;
  if (*stop || last)
    return AR_OK;
  c->stop_mine = ar_stop_signal() != 0;
  int rc = MPI_Iallreduce(&c->stop_mine, &c->stop_any, 1, MPI_INT, MPI_MAX, c->cctl,
                          &c->stop_req);
  return rc == MPI_SUCCESS ? AR_OK : ar__dist_mpi_err(c, rc, "voting on stopping");
}

ar_status ar__dist_next_certain(ar__dist *c, int64_t iter, bool *yes) {
  *yes = false;
  if (iter >= c->total || iter == c->first_iter + c->warmup - 1)
    return AR_OK;
  if (c->stop_req != MPI_REQUEST_NULL) {
    int flag = 0;
    int rc = MPI_Test(&c->stop_req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "the ranks' vote on stopping");
    if (!flag)
      return AR_OK;
    c->vote_in = true;
  }
  *yes = !(c->vote_in && c->stop_any != 0);
  return AR_OK;
}

static ar_status loop(ar__dist *c) {
  c->defer_stop = true;
  c->first_iter = c->iter + 1;
  int64_t left = c->total - c->iter;
  c->warmup = c->spec->distributed.trace_iterations;
  if (c->warmup > left)
    c->warmup = left > 0 ? left : 0;
  if (c->warmup <= 0)
    AR_CHECK(ar__dist_schedule_setup(c));
  for (int64_t iter = c->first_iter; iter <= c->total; iter++) {
    if (c->rank == c->o.fail_rank && iter == c->o.fail_iteration)
      raise(SIGKILL); /* fault injection (tests): die without a word */
    ar_commsched_schedule *s = NULL;
    bool owned = false;
    if (c->server)
      AR_CHECK(ar__dist_schedule_for(c, iter, &s, &owned));
    ar_status st;
    if (c->server) {
      st = ar__dist_server_iteration(c, iter, s);
    } else if (c->share) {
      /* A shared device: the lanes' policy grants the iteration. */
      st = ar__share_begin(c);
      if (st == AR_OK)
        st = ar__dist_worker_iteration(c, iter);
      ar__share_end(c, st, iter == c->total);
    } else {
      st = ar__dist_worker_iteration(c, iter);
    }
    if (owned)
      ar_commsched_schedule_destroy(s);
    AR_CHECK(st);
    c->iter = iter;
    if (iter == c->first_iter + c->warmup - 1)
      AR_CHECK(ar__dist_schedule_setup(c));
    AR_CHECK(between_iterations(c, iter));
    AR_CHECK(stop_vote(c, iter == c->total, &c->stopped));
    if (c->stopped)
      break;
  }
  if (c->linger_s > 0 && !c->server) {
    struct timespec ts = {(time_t)c->linger_s,
                          (long)((c->linger_s - (double)(time_t)c->linger_s) * 1e9)};
    nanosleep(&ts, NULL);
  }
  AR_CHECK(ar__dist_graph_states(c));
  if (c->server)
    AR_CHECK(ar__dist_gather(c));
  return AR_OK;
}

static void teardown(ar__dist *c) {
  if (c->server)
    ar__dist_server_fini(c);
  else
    ar__dist_worker_fini(c);
  if (c->rank == 0)
    ar__dist_report_fini(c);
  ar_commsched_schedule_destroy(c->sched);
  ar_commsched_graph_destroy(c->g);
  ar_free(c->fwd);
  ar_free(c->bwd);
  ar__dist_graph_fini(c);
  ar__stage_fini(c);
  for (int t = 0; c->t && t < c->nt; t++)
    ar_free(c->t[t].msg);
  ar_free(c->t);
  ar_free(c->slot_t);
  ar_job_close(c->job); /* the model, the data, rank 0's records */
  c->job = NULL;
  c->model = NULL;
  ar_free(c->smask);
  ar_free(c->wdesc);
  ar_free(c->wlayers);
  if (!c->dev_borrowed)
    ar_device_close(c->dev);
  ar__share_close(c, c->failed);
  ar__dist_tl_close(c);
}

/* The timeline of a run that succeeded (every rank takes part).  The run's
 * outcome stands: a trace that cannot be gathered or written is a
 * warning. */
static void write_timeline(ar__dist *c) {
  ar_err te = AR_ERR_INIT, *keep = c->err;
  c->err = &te;
  if (ar__dist_tl_write(c) != AR_OK)
    ar_log(AR_LOG_WARN, "rank %d: no trace.json: %s", c->rank, te.msg);
  c->err = keep;
}

/* The last barrier, on MPI_COMM_WORLD (after set-up nothing else uses it,
 * so only ranks at their end meet there).  A rank that died never comes:
 * the wait is bounded like any wait on a peer, by the dead-peer timeout
 * after a stop (every rank agreed, so all are alive and near) and by a few
 * seconds after a failure (a peer may be dead).  false when it timed out
 * (the request is left: MPI is not finalised then). */
#define END_GRACE_S 5.0
static bool end_barrier(ar__dist *c, bool failed) {
  MPI_Request q;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &q) != MPI_SUCCESS)
    return false;
  double wait = failed && c->timeout_s > END_GRACE_S ? END_GRACE_S : c->timeout_s;
  double until = ar_now() + wait;
  for (;;) {
    int flag = 0;
    if (MPI_Test(&q, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return false;
    if (flag)
      return true;
    if (ar_now() > until)
      return false;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

ar_status ar_dist_run_ex(const ar_spec *spec, const ar_run_opts *opts_in,
                         const ar_dist_opts *dopts, ar_summary *summary, ar_err *err) {
  ar_run_opts opts = opts_in ? *opts_in : (ar_run_opts)AR_RUN_OPTS_INIT;
  ar__dist c;
  memset(&c, 0, sizeof c);
  c.spec = spec;
  c.err = err;
  c.o = dopts ? *dopts : (ar_dist_opts)AR_DIST_OPTS_INIT;
  read_env(&c.o);
  c.timeout_s = c.o.timeout_s;
  c.piece = c.o.piece_bytes;
  /* Tests: a worker pauses this long between its last iteration and what
   * follows (its running statistics to rank 0, the teardown), so that
   * anything freeing its memory at the last iteration shows. */
  const char *lv = getenv("ACCELRT_DIST_LINGER");
  c.linger_s = lv && atof(lv) > 0 ? atof(lv) : 0.0;
  c.cparam = c.cgrad = c.cctl = MPI_COMM_NULL;
  c.abort_req = c.stop_req = MPI_REQUEST_NULL;
  c.wall0 = ar_now();
  bool we_init = false;
  ar__dist_install_signals();
  ar_status st = mpi_setup(&c, &we_init);
  if (st == AR_OK)
    st = setup(&c, &opts);
  if (st == AR_OK)
    st = loop(&c);
  if (st == AR_OK && c.rank == 0)
    st = ar_job_finish(c.job, c.stopped, summary, err);
  if (st == AR_OK)
    st = agree(&c, st, "finishing the job");
  if (st == AR_OK && c.tl)
    write_timeline(&c);
  int64_t stopped_at = c.iter;
  c.failed = st != AR_OK;
  teardown(&c);
  ar__dist_restore_signals();
  if (st == AR_OK && c.stopped && c.rank == 0)
    st = ar_errf(err, AR_INTERRUPTED,
                 "interrupted at iteration %lld, every rank with it; checkpoint written to "
                 "'%s/checkpoint.bin': continue with --resume",
                 (long long)stopped_at, spec->output.dir);
  else if (st == AR_OK && c.stopped)
    st = ar_errf(err, AR_INTERRUPTED,
                 "rank %d stopped at iteration %lld with the other ranks; rank 0 wrote the "
                 "checkpoint", c.rank, (long long)stopped_at);
  /* Each rank says how it ended before any exits: mpiexec kills the other
   * ranks as soon as one exits non-zero, which cut their lines. */
  if (st != AR_OK && c.o.on_end)
    c.o.on_end(c.o.ctx, st, err);
  bool in_step = c.cctl != MPI_COMM_NULL && end_barrier(&c, c.failed);
  if (c.failed || !in_step) {
    /* Leave MPI as it is: finalising with a dead peer can hang, and the
     * caller is about to exit non-zero. */
    return st;
  }
  if (c.abort_req != MPI_REQUEST_NULL) {
    MPI_Cancel(&c.abort_req);
    MPI_Request_free(&c.abort_req);
  }
  MPI_Comm *comms[3] = {&c.cparam, &c.cgrad, &c.cctl};
  for (int i = 0; i < 3; i++)
    if (*comms[i] != MPI_COMM_NULL)
      MPI_Comm_free(comms[i]);
  if (we_init)
    MPI_Finalize();
  return st;
}

ar_status ar_dist_run(const ar_spec *spec, const ar_run_opts *opts, ar_summary *summary,
                      ar_err *err) {
  return ar_dist_run_ex(spec, opts, NULL, summary, err);
}
