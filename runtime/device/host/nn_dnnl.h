/*
 * oneDNN for the host nn kernels (nn_conv.c; pooling and batch
 * normalisation are native, nn_pool.c and nn_bnorm.c): the
 * process's CPU engine, primitives whose scratchpad lives in the op's
 * workspace, "ports" that wrap a caller's plain (row-major) tensor and
 * reorder it to or from the layout a primitive chose, and the OpenMP
 * thread count around each call.
 *
 * The workspace of one op is laid out as
 *   [pad to 64 bytes][scratchpad: the largest of the op's primitives]
 *   [buffers: reorder targets and the kernel's own scratch, 64-aligned]
 * Primitives of one op run one after the other, so they share the
 * scratchpad region; buffers are distinct because a reordered input must
 * survive until the primitive that reads it has run.  The region's size
 * is known only when every primitive is made, so buffer offsets are kept
 * relative to the buffer area (ar__dnnl_ws_base gives its start).
 */
#ifndef ACCELRT_NN_DNNL_H
#define ACCELRT_NN_DNNL_H

#include "nn/nn_impl.h"

#include <oneapi/dnnl/dnnl.h>

/* The workspace plan, grown while an op is prepared. */
typedef struct ar__dnnl_ws {
  size_t scratch;  /* the largest scratchpad of the op's primitives */
  size_t area;     /* bytes of the buffer area taken in this phase */
  size_t area_max; /* the largest of the phases before */
} ar__dnnl_ws;

/* Bytes prepare returns for this plan. */
size_t ar__dnnl_ws_bytes(const ar__dnnl_ws *ws);
/* The buffer area's start in a workspace of this plan. */
char *ar__dnnl_ws_base(const ar__dnnl_ws *ws, void *work);
/* Reserves n bytes (64-aligned) of the buffer area; returns the offset. */
size_t ar__dnnl_ws_take(ar__dnnl_ws *ws, size_t n);
/* Starts a new phase (the backward after the forward): its buffers reuse
 * the area of the phases before, which never run at the same time. */
void ar__dnnl_ws_phase(ar__dnnl_ws *ws);
/* Within a phase: the buffers taken from here on reuse the area from mark
 * (an earlier ar__dnnl_ws_take's offset, or the area then) up, whose
 * buffers are done before these are written. */
void ar__dnnl_ws_rewind(ar__dnnl_ws *ws, size_t mark);

/* The process's CPU engine (made once, never destroyed; NULL when oneDNN
 * fails to make one). */
dnnl_engine_t ar__dnnl_engine(void);

/* Attributes with the scratchpad in user mode (*attr destroyed by the
 * caller).  Returns the oneDNN status. */
dnnl_status_t ar__dnnl_attr(dnnl_primitive_attr_t *attr);

/* A primitive and its scratchpad memory (NULL when it needs none). */
typedef struct ar__dnnl_prim {
  dnnl_primitive_t p;
  dnnl_memory_t scratch;
} ar__dnnl_prim;

/* Makes the primitive of pd (which stays the caller's) and grows ws for
 * its scratchpad. */
dnnl_status_t ar__dnnl_prim_init(ar__dnnl_prim *pr, const_dnnl_primitive_desc_t pd,
                                 ar__dnnl_ws *ws);
void ar__dnnl_prim_fini(ar__dnnl_prim *pr);
/* Executes with args (room for one more: the scratchpad is appended) on s;
 * aborts on failure (a primitive that was made runs on the shapes it was
 * made for, so a failure here is a bug or oneDNN's). */
void ar__dnnl_prim_run(ar__dnnl_prim *pr, dnnl_stream_t s, const ar__dnnl_ws *ws, void *work,
                       int nargs, dnnl_exec_arg_t *args);

/* A tensor as a primitive sees it: `user` is plain and wraps the caller's
 * pointer; `inner` (NULL when the primitive takes the plain layout) is a
 * workspace buffer in the primitive's layout, filled from user before the
 * primitive (an input) or copied to user after it (an output). */
typedef struct ar__dnnl_port {
  dnnl_memory_t user, inner;
  ar__dnnl_prim reorder;
  size_t off;
  bool out;
} ar__dnnl_port;

/* user_md: the caller's layout; prim_md: the primitive's (from its pd). */
dnnl_status_t ar__dnnl_port_init(ar__dnnl_port *pt, const dnnl_memory_desc_t *user_md,
                                 const dnnl_memory_desc_t *prim_md, bool out, ar__dnnl_ws *ws);
/* The same, but when `like` (an input port of the same tensor) reorders
 * into the same layout, pt takes its buffer instead of a new one, and
 * *shared says so: a call that has just filled like's buffer may then use
 * ar__dnnl_port_bind on pt instead of reordering a second time. */
dnnl_status_t ar__dnnl_port_init_like(ar__dnnl_port *pt, const dnnl_memory_desc_t *user_md,
                                      const dnnl_memory_desc_t *prim_md, const ar__dnnl_port *like,
                                      bool *shared, ar__dnnl_ws *ws);
void ar__dnnl_port_fini(ar__dnnl_port *pt);
/* Points the port at p; an input is reordered now.  Returns the memory to
 * give the primitive. */
dnnl_memory_t ar__dnnl_port_in(ar__dnnl_port *pt, void *p, dnnl_stream_t s, const ar__dnnl_ws *ws,
                               void *work);
/* Points the port at p without reordering; returns the memory to give
 * the primitive. */
dnnl_memory_t ar__dnnl_port_bind(ar__dnnl_port *pt, void *p, const ar__dnnl_ws *ws, void *work);
/* After the primitive: an output in another layout is copied to user. */
void ar__dnnl_port_done(ar__dnnl_port *pt, dnnl_stream_t s, const ar__dnnl_ws *ws, void *work);

/* A plain f32 memory descriptor of shape dims (row-major). */
dnnl_status_t ar__dnnl_md_plain(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims);

/* Sets the OpenMP thread count of the calling thread to `threads` and
 * returns the previous one, for ar__dnnl_threads_leave. */
int ar__dnnl_threads_enter(int threads);
void ar__dnnl_threads_leave(int previous);

/* err from a failed oneDNN call made while preparing `what`. */
ar_status ar__dnnl_err(ar_err *err, dnnl_status_t s, const char *what);

#endif
