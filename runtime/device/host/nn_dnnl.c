/*
 * oneDNN for the host nn kernels: engine, primitives with user-mode
 * scratchpads in the workspace, ports (plain <-> the primitive's layout),
 * threads.  nn_dnnl.h states the workspace layout.
 */
#include "nn_dnnl.h"

#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#define WS_ALIGN 64

static size_t align_up(size_t n) { return (n + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN; }

size_t ar__dnnl_ws_bytes(const ar__dnnl_ws *ws) {
  size_t area = ws->area > ws->area_max ? ws->area : ws->area_max;
  size_t n = align_up(ws->scratch) + area;
  /* The caller's workspace need not be aligned: room to align its start. */
  return n ? n + WS_ALIGN : 0;
}

static char *ws_start(void *work) {
  return (char *)(((uintptr_t)work + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN);
}

char *ar__dnnl_ws_base(const ar__dnnl_ws *ws, void *work) {
  return ws_start(work) + align_up(ws->scratch);
}

size_t ar__dnnl_ws_take(ar__dnnl_ws *ws, size_t n) {
  size_t off = ws->area;
  ws->area += align_up(n);
  return off;
}

void ar__dnnl_ws_phase(ar__dnnl_ws *ws) { ar__dnnl_ws_rewind(ws, 0); }

void ar__dnnl_ws_rewind(ar__dnnl_ws *ws, size_t mark) {
  if (ws->area > ws->area_max)
    ws->area_max = ws->area;
  ws->area = mark;
}

static dnnl_status_t port_make(ar__dnnl_port *pt, const dnnl_memory_desc_t *user_md,
                               const dnnl_memory_desc_t *prim_md, bool out,
                               const ar__dnnl_port *like, bool *shared, ar__dnnl_ws *ws);

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_make(void) {
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
    engine = NULL;
}

dnnl_engine_t ar__dnnl_engine(void) {
  pthread_once(&engine_once, engine_make);
  return engine;
}

dnnl_status_t ar__dnnl_attr(dnnl_primitive_attr_t *attr) {
  dnnl_status_t s = dnnl_primitive_attr_create(attr);
  if (s != dnnl_success)
    return s;
  s = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
  if (s != dnnl_success) {
    dnnl_primitive_attr_destroy(*attr);
    *attr = NULL;
  }
  return s;
}

dnnl_status_t ar__dnnl_prim_init(ar__dnnl_prim *pr, const_dnnl_primitive_desc_t pd,
                                 ar__dnnl_ws *ws) {
  pr->p = NULL;
  pr->scratch = NULL;
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t n = md ? dnnl_memory_desc_get_size(md) : 0;
  if (n) {
    dnnl_status_t s = dnnl_memory_create(&pr->scratch, md, ar__dnnl_engine(), DNNL_MEMORY_NONE);
    if (s != dnnl_success)
      return s;
    if (n > ws->scratch)
      ws->scratch = n;
  }
  dnnl_status_t s = dnnl_primitive_create(&pr->p, pd);
  if (s != dnnl_success) {
    ar__dnnl_prim_fini(pr);
    return s;
  }
  return dnnl_success;
}

void ar__dnnl_prim_fini(ar__dnnl_prim *pr) {
  if (pr->p)
    dnnl_primitive_destroy(pr->p);
  if (pr->scratch)
    dnnl_memory_destroy(pr->scratch);
  pr->p = NULL;
  pr->scratch = NULL;
}

void ar__dnnl_prim_run(ar__dnnl_prim *pr, dnnl_stream_t s, const ar__dnnl_ws *ws, void *work,
                       int nargs, dnnl_exec_arg_t *args) {
  (void)ws;
  if (pr->scratch) {
    AR_ASSERT(work);
    AR_ASSERT(dnnl_memory_set_data_handle(pr->scratch, ws_start(work)) == dnnl_success);
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pr->scratch};
  }
  dnnl_status_t st = dnnl_primitive_execute(pr->p, s, nargs, args);
  if (st != dnnl_success)
    fprintf(stderr, "accelrt: oneDNN failed to execute a primitive (status %d)\n", (int)st);
  AR_ASSERT(st == dnnl_success);
}

dnnl_status_t ar__dnnl_md_plain(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims) {
  static const dnnl_format_tag_t tags[] = {
      dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde, dnnl_abcdef};
  AR_ASSERT(nd >= 1 && nd <= 6);
  return dnnl_memory_desc_init_by_tag(md, nd, dims, dnnl_f32, tags[nd]);
}

dnnl_status_t ar__dnnl_port_init(ar__dnnl_port *pt, const dnnl_memory_desc_t *user_md,
                                 const dnnl_memory_desc_t *prim_md, bool out, ar__dnnl_ws *ws) {
  return port_make(pt, user_md, prim_md, out, NULL, NULL, ws);
}

dnnl_status_t ar__dnnl_port_init_like(ar__dnnl_port *pt, const dnnl_memory_desc_t *user_md,
                                      const dnnl_memory_desc_t *prim_md, const ar__dnnl_port *like,
                                      bool *shared, ar__dnnl_ws *ws) {
  return port_make(pt, user_md, prim_md, false, like, shared, ws);
}

static dnnl_status_t port_make(ar__dnnl_port *pt, const dnnl_memory_desc_t *user_md,
                               const dnnl_memory_desc_t *prim_md, bool out,
                               const ar__dnnl_port *like, bool *shared, ar__dnnl_ws *ws) {
  dnnl_engine_t e = ar__dnnl_engine();
  dnnl_primitive_desc_t rpd = NULL;
  dnnl_primitive_attr_t attr = NULL;
  pt->user = pt->inner = NULL;
  pt->reorder = (ar__dnnl_prim){0};
  pt->off = 0;
  pt->out = out;
  dnnl_status_t s = dnnl_memory_create(&pt->user, user_md, e, DNNL_MEMORY_NONE);
  if (s != dnnl_success || dnnl_memory_desc_equal(user_md, prim_md))
    goto done;
  s = dnnl_memory_create(&pt->inner, prim_md, e, DNNL_MEMORY_NONE);
  if (s != dnnl_success)
    goto done;
  const dnnl_memory_desc_t *like_md = NULL;
  if (like && like->inner)
    dnnl_memory_get_memory_desc(like->inner, &like_md);
  if (like_md && dnnl_memory_desc_equal(like_md, prim_md)) {
    pt->off = like->off;
    *shared = true;
  } else {
    pt->off = ar__dnnl_ws_take(ws, dnnl_memory_desc_get_size(prim_md));
  }
  s = ar__dnnl_attr(&attr);
  if (s != dnnl_success)
    goto done;
  s = out ? dnnl_reorder_primitive_desc_create(&rpd, prim_md, e, user_md, e, attr)
          : dnnl_reorder_primitive_desc_create(&rpd, user_md, e, prim_md, e, attr);
  if (s != dnnl_success)
    goto done;
  s = ar__dnnl_prim_init(&pt->reorder, rpd, ws);
done:
  if (rpd)
    dnnl_primitive_desc_destroy(rpd);
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success)
    ar__dnnl_port_fini(pt);
  return s;
}

void ar__dnnl_port_fini(ar__dnnl_port *pt) {
  ar__dnnl_prim_fini(&pt->reorder);
  if (pt->user)
    dnnl_memory_destroy(pt->user);
  if (pt->inner)
    dnnl_memory_destroy(pt->inner);
  pt->user = pt->inner = NULL;
}

dnnl_memory_t ar__dnnl_port_bind(ar__dnnl_port *pt, void *p, const ar__dnnl_ws *ws, void *work) {
  AR_ASSERT(dnnl_memory_set_data_handle(pt->user, p) == dnnl_success);
  if (!pt->inner)
    return pt->user;
  AR_ASSERT(dnnl_memory_set_data_handle(pt->inner, ar__dnnl_ws_base(ws, work) + pt->off) ==
            dnnl_success);
  return pt->inner;
}

dnnl_memory_t ar__dnnl_port_in(ar__dnnl_port *pt, void *p, dnnl_stream_t s, const ar__dnnl_ws *ws,
                               void *work) {
  dnnl_memory_t m = ar__dnnl_port_bind(pt, p, ws, work);
  if (pt->inner && !pt->out) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, pt->user}, {DNNL_ARG_TO, pt->inner}};
    ar__dnnl_prim_run(&pt->reorder, s, ws, work, 2, args);
  }
  return m;
}

void ar__dnnl_port_done(ar__dnnl_port *pt, dnnl_stream_t s, const ar__dnnl_ws *ws, void *work) {
  if (!pt->inner || !pt->out)
    return;
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, pt->inner}, {DNNL_ARG_TO, pt->user}};
  ar__dnnl_prim_run(&pt->reorder, s, ws, work, 2, args);
}

int ar__dnnl_threads_enter(int threads) {
  int previous = omp_get_max_threads();
  omp_set_num_threads(threads > 0 ? threads : 1);
  return previous;
}

void ar__dnnl_threads_leave(int previous) { omp_set_num_threads(previous); }

ar_status ar__dnnl_err(ar_err *err, dnnl_status_t s, const char *what) {
  if (s == dnnl_out_of_memory)
    return ar_errf(err, AR_NOMEM, "oneDNN ran out of memory making the %s", what);
  if (s == dnnl_unimplemented)
    return ar_errf(err, AR_UNSUPPORTED,
                   "oneDNN has no implementation of the %s for these shapes and attributes", what);
  return ar_errf(err, AR_INVALID, "oneDNN refused the %s (status %d)", what, (int)s);
}
