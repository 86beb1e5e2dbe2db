/*
 * accelrt lanes: many jobs share one device through memory lanes and
 * iteration-granularity scheduling (Salus, Yu & Chowdhury, MLSys 2020).
 *
 * The library manages the offsets of one device arena of a fixed capacity.
 * It never touches device memory itself, except through the move callback
 * the caller hands to ar_lanes_defrag().  It knows bytes, jobs and
 * iterations only: the runtime tells it each job's exact persistent bytes P
 * (parameters, optimizer state) and ephemeral peak E (one iteration's
 * scratch), both from the engine's memory plan.
 *
 * Layout (Salus' memory model; the layout itself is ours):
 *
 *   0                                                       capacity
 *   | persistent blocks -> | ...free... | <- lane 2 | lane 1 | lane 0 |
 *
 *   - The persistent region grows from offset 0 upwards; each admitted job
 *     owns one block of P bytes there for its whole life.
 *   - The ephemeral region is carved downwards from the top into lanes, each
 *     one contiguous range.  The jobs of one lane time-share it: at most one
 *     iteration runs in a lane at a time, and lanes run concurrently.
 *   - Every offset and size is a multiple of opts.align (256 bytes by
 *     default); sizes are rounded up to it, with at least one unit each, and
 *     the usable capacity is rounded down to it.
 *
 * Safety condition (Salus, memory safety of lanes): the persistent bytes of all admitted jobs
 * plus, for each lane, the largest ephemeral peak among its jobs never
 * exceed the capacity.  Here it holds by construction, because blocks and
 * lanes are disjoint ranges of the arena and a lane is at least as large
 * as each of its jobs' peaks.
 *
 * Offsets move: ar_lanes_defrag() compacts persistent blocks downwards and
 * re-packs lanes upwards, so read a job's persistent offset and a lane's
 * offset again after every defragmentation (and a lane's offset at every
 * ar_lanes_pick()).
 *
 * Thread-safety: an ar_lanes handle is not thread-safe; one scheduler
 * thread owns it (several handles may be used by several threads).
 * Errors: functions returning ar_status write their message into the
 * handle's buffer, read with ar_lanes_errmsg().
 *
 * Tests: tests/lanes/test_admission.c (random job mixes under every
 * policy), tests/lanes/test_sched.c (pick orders), tests/lanes/test_defrag.c
 * (data survives every move, byte for byte), tests/lanes/test_offsets.c
 * (in-lane tensor offsets under random lifetimes).
 */
#ifndef ACCELRT_LANES_H
#define ACCELRT_LANES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accelrt/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ar_lanes ar_lanes;

/* Job identifiers are assigned by ar_lanes_submit(), from 1 upwards and
 * never reused within a handle.  0 is never a valid id. */
typedef uint64_t ar_lanes_job_id;
/* Lane identifiers are assigned when a lane is created, from 1 upwards and
 * never reused within a handle, so a destroyed lane's id stays dead. */
typedef uint32_t ar_lanes_lane_id;

typedef struct ar_lanes_opts {
  size_t capacity;  /* bytes of the device arena; required (> 0) */
  size_t align;     /* offset and size granularity, a power of two */
  const char *policy; /* "fifo", "pack", "srtf", "fair" or "priority" */
  /* Iteration time assumed for a job before its first measured iteration
   * (srtf's remaining-time estimate). */
  double default_iteration_s;
} ar_lanes_opts;

#define AR_LANES_OPTS_INIT {0, 256, "pack", 1.0}

/* What a job declares when it is submitted.  name is copied. */
typedef struct ar_lanes_job_desc {
  const char *name;       /* for messages; may be NULL ("job <id>") */
  size_t persistent;      /* P: bytes resident while admitted */
  size_t ephemeral;       /* E: exact peak bytes of one iteration */
  uint64_t iterations;    /* total iterations, >= 1 */
  int priority;           /* higher runs first under "priority" */
  double arrival;         /* seconds, any clock; orders fifo and ties */
} ar_lanes_job_desc;

#define AR_LANES_JOB_DESC_INIT {NULL, 0, 0, 1, 0, 0.0}

typedef enum ar_lanes_job_state {
  AR_LANES_QUEUED = 0,  /* waiting for memory (see reason) */
  AR_LANES_ADMITTED,    /* holds a persistent block and a place in a lane */
  AR_LANES_FINISHED,    /* left through ar_lanes_finish() */
  AR_LANES_CANCELLED    /* left through ar_lanes_cancel() */
} ar_lanes_job_state;

typedef struct ar_lanes_job_info {
  ar_lanes_job_state state;
  ar_lanes_lane_id lane;     /* 0 unless admitted */
  size_t persistent_offset;  /* valid while admitted; moves on defrag */
  size_t persistent;         /* P rounded up to the alignment */
  size_t ephemeral;          /* E rounded up to the alignment */
  uint64_t iterations_done;
  uint64_t iterations;
  double used_s;             /* measured device time so far */
  double remaining_s;        /* remaining iterations x median recent iteration time */
  int running;               /* 1 while one of its iterations runs */
  /* Why a queued job waits, e.g. "needs 3.1 GiB persistent + 700 MiB lane;
   * 2.0 GiB free; waiting for a job to finish".  Empty when not queued.
   * Borrowed: valid until the next call that changes the handle. */
  const char *reason;
} ar_lanes_job_info;

typedef struct ar_lanes_lane_info {
  ar_lanes_lane_id id;
  size_t offset;            /* moves on defrag */
  size_t size;              /* >= the largest ephemeral peak of its jobs */
  size_t jobs;              /* admitted jobs time-sharing it, >= 1 */
  ar_lanes_job_id running;  /* job running an iteration in it, or 0 */
} ar_lanes_lane_info;

/* Copies `bytes` from arena offset src_off to dst_off.  The ranges may
 * overlap (memmove semantics).  Called only from ar_lanes_defrag(). */
typedef void (*ar_lanes_move_fn)(void *ctx, size_t dst_off, size_t src_off,
                                 size_t bytes);

/* ---- lifecycle --------------------------------------------------------- */

/* Creates a lane manager for one arena.  opts is copied.  Returns AR_OK,
 * AR_INVALID (zero capacity, align not a power of two, unknown policy,
 * default_iteration_s not positive; the message names the value) or
 * AR_NOMEM.  *out is written only on success. */
ar_status ar_lanes_create(const ar_lanes_opts *opts, ar_lanes **out,
                          ar_err *err);
/* Frees the handle and everything it owns.  NULL is a no-op. */
void ar_lanes_destroy(ar_lanes *lanes);

/* The last error message of the handle (belongs to the handle). */
const char *ar_lanes_errmsg(const ar_lanes *lanes);

/* ---- jobs and admission ------------------------------------------------ */

/* Submits a job.  It is admitted at once when the policy and the free
 * memory allow (placement: see the policy files), otherwise it waits in
 * the queue with a reason.  Waiting jobs are retried whenever a job
 * leaves, on every submit and after every defragmentation.  Returns AR_OK
 * (*out holds the new id), AR_INVALID (zero iterations, or P + E can never
 * fit the capacity: the message gives the sizes) or AR_NOMEM (nothing
 * changed).  All host memory an admission can need is reserved here, so
 * ar_lanes_finish, ar_lanes_cancel and ar_lanes_defrag never fail for
 * lack of it. */
ar_status ar_lanes_submit(ar_lanes *lanes, const ar_lanes_job_desc *desc,
                          ar_lanes_job_id *out);
/* Whether a job of `persistent` bytes and ephemeral peak `ephemeral` can
 * ever be admitted to a handle made with opts: alone in the arena, sizes
 * rounded up to opts->align (one unit at least) within the capacity
 * rounded down, the test ar_lanes_submit applies.  No handle is needed
 * (`accelrt check` answers it before any memory exists).  false for an
 * align that is not a power of two.  Thread-safe. */
bool ar_lanes_fits_alone(const ar_lanes_opts *opts, size_t persistent, size_t ephemeral);

/* The job leaves after its last iteration (or whenever the caller decides
 * it is done): its persistent block is reclaimed, its lane is destroyed if
 * it was the last job there, and waiting jobs are retried.  The freed space
 * joins the free space around it at once when it borders it, otherwise at
 * the next ar_lanes_defrag().  Returns AR_OK, AR_NOTFOUND (unknown id) or
 * AR_STATE (not admitted, or running an iteration: finish it first). */
ar_status ar_lanes_finish(ar_lanes *lanes, ar_lanes_job_id job);

/* Cancels a queued or admitted job, like ar_lanes_finish() for an admitted
 * one.  Returns AR_OK, AR_NOTFOUND or AR_STATE (already gone, or running
 * an iteration: cancel it once ar_lanes_iteration_done() was called). */
ar_status ar_lanes_cancel(ar_lanes *lanes, ar_lanes_job_id job);

/* Fills *out.  Returns AR_OK or AR_NOTFOUND. */
ar_status ar_lanes_job(const ar_lanes *lanes, ar_lanes_job_id job,
                       ar_lanes_job_info *out);

/* Number of lanes that exist now, and the index-th of them in the order of
 * their offsets, highest first (index < count).  Indices change whenever a
 * lane is created or destroyed; ids do not.  ar_lanes_lane_at returns AR_OK
 * or AR_RANGE; ar_lanes_lane (by id) AR_OK or AR_NOTFOUND. */
size_t ar_lanes_lane_count(const ar_lanes *lanes);
ar_status ar_lanes_lane_at(const ar_lanes *lanes, size_t index,
                           ar_lanes_lane_info *out);
ar_status ar_lanes_lane(const ar_lanes *lanes, ar_lanes_lane_id lane,
                        ar_lanes_lane_info *out);

/* Totals: admitted and queued job counts, persistent bytes held, lane bytes
 * held; usable capacity (capacity rounded down to the alignment). */
typedef struct ar_lanes_usage {
  size_t admitted, queued;
  size_t persistent_bytes, lane_bytes, capacity;
} ar_lanes_usage;
void ar_lanes_usage_get(const ar_lanes *lanes, ar_lanes_usage *out);

/* Calls fn(ctx, offset, bytes) for every range of the arena that no
 * persistent block and no lane holds, lowest first (what a host arena may
 * hand back to the kernel: the runner's runtime/tenancy/runner.c). */
typedef void (*ar_lanes_range_fn)(void *ctx, size_t offset, size_t bytes);
void ar_lanes_free_each(const ar_lanes *lanes, ar_lanes_range_fn fn, void *ctx);

/* ---- defragmentation --------------------------------------------------- */

/* 1 when blocks or lanes have holes between them that ar_lanes_defrag()
 * would close, 0 when the layout is compact. */
int ar_lanes_fragmented(const ar_lanes *lanes);

/* Call only when every job is at an iteration boundary (no iteration runs
 * in any lane).  Compacts the persistent blocks towards offset 0 in offset
 * order, calling move(ctx, ...) for each block that moves; shrinks each
 * lane to the largest ephemeral peak of its jobs and re-packs the lanes
 * against the top of the arena, so all free space becomes one range
 * between the two regions (lanes hold no data between iterations, so they
 * move without copies).  Then waiting jobs are retried.  move may be NULL
 * only when the caller keeps no data in the arena.  Returns AR_OK or
 * AR_STATE (an iteration is running; nothing was moved). */
ar_status ar_lanes_defrag(ar_lanes *lanes, ar_lanes_move_fn move, void *ctx);

/* ---- iteration scheduler ----------------------------------------------- */

/* Chooses, by the policy, the job that runs the next iteration in `lane`
 * and marks the lane busy with it.  Jobs that have done all their
 * iterations are never picked.  Returns AR_OK (*out set), AR_NOTFOUND
 * (unknown lane, or no job in it has iterations left) or AR_STATE (an
 * iteration already runs in that lane). */
ar_status ar_lanes_pick(ar_lanes *lanes, ar_lanes_lane_id lane,
                        ar_lanes_job_id *out);

/* Records the end of the iteration `job` was picked for, which took
 * `seconds` of device time (>= 0), and frees its lane for the next pick.
 * Returns AR_OK, AR_NOTFOUND, AR_STATE (the job is not running) or
 * AR_INVALID (negative or non-finite seconds). */
ar_status ar_lanes_iteration_done(ar_lanes *lanes, ar_lanes_job_id job,
                                  double seconds);

/* ---- in-lane tensor offsets --------------------------------------------- */

/* One tensor of an iteration: its size and the steps (any integer clock,
 * e.g. op indices of one iteration) at which it is first and last used,
 * both inclusive.  Two tensors are live together when their intervals
 * [first_use, last_use] intersect. */
typedef struct ar_lanes_tensor {
  size_t bytes;
  int64_t first_use, last_use; /* first_use <= last_use */
} ar_lanes_tensor;

/* Static memory plan of one iteration inside a lane (Salus keeps one
 * iteration's ephemeral memory in its lane and frees all of it at the end;
 * the offsets inside are ours): assigns each tensor an offset so that no
 * two tensors live at the same time share a byte.  Greedy by size: tensors
 * are placed largest first (ties: earlier first_use, then lower index),
 * each into the smallest gap between the already placed tensors that
 * overlap it in time, or above the highest of them.
 *
 * Sizes are rounded up to `align` (a power of two; 0 means 64) and every
 * offset is a multiple of it.  Tensors of 0 bytes get offset 0 and take no
 * space.  The peak (the end of the highest tensor) is never larger than
 * the sum of the rounded sizes, and never below the largest sum of the
 * rounded sizes of the tensors live at one step.
 *
 * t (n) and offsets (n) are the caller's; *peak receives the peak.
 * Thread-safe (no shared state).  Returns AR_OK, AR_INVALID (NULL arrays
 * with n > 0, align not a power of two, first_use > last_use: the message
 * names the tensor), AR_RANGE (the sizes overflow size_t) or AR_NOMEM. */
ar_status ar_lanes_plan_offsets(const ar_lanes_tensor *t, size_t n,
                                size_t align, size_t *offsets, size_t *peak,
                                ar_err *err);

/* ---- testing ----------------------------------------------------------- */

/* Verifies the invariants: blocks and lanes inside the arena, aligned and
 * pairwise disjoint; the persistent region below the ephemeral region;
 * each lane as large as its jobs' peaks and counting them right; the
 * safety condition; the policy's admission limit.  (With disjointness,
 * ar_lanes_fragmented() == 0 already implies that blocks tile [0, sum of
 * P) and lanes tile the top of the arena.)
 * Returns AR_OK or AR_CORRUPT with the first broken invariant in err. */
ar_status ar_lanes_check(const ar_lanes *lanes, ar_err *err);

/* Formats a byte count as "3.1 GiB", "700 MiB", "512 B" into buf. */
const char *ar_lanes_fmt_bytes(size_t bytes, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif
