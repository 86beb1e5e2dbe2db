/*
 * The enforcement gate (TicTac, sender-side enforcement; the rule and its
 * departures are stated in commsched.h).  Per destination it keeps:
 *
 *   counter   listed transfers gone (posted, or absent and reached);
 *   frontier  how many entries of `sorted` have number <= counter, i.e. the
 *             prefix of the order that may go now; absent transfers are
 *             counted when the frontier passes them, never earlier, so an
 *             absent transfer cannot let later ones overtake earlier ones;
 *   cursor    the first entry of `sorted` not gone yet, where next() starts
 *             looking: between cursor and frontier lie only members of the
 *             current group, so a lookup costs at most a group's size;
 *   fifo      unlisted transfers in offer order (they bypass the order).
 *
 * Invariant: counter == number of entries in sorted[0, frontier) that are
 * posted, done or absent-counted, and the frontier stops at the first entry
 * whose number exceeds the counter.  Everything is reset by begin(), and
 * every array is sized at create or load time, so a gate used for a
 * million iterations holds exactly what it held after the first.
 */
#include <stdbool.h>
#include <string.h>

#include "commsched_impl.h"

enum {
  ST_UNSEEN = 0,
  ST_OFFERED,
  ST_POSTED,
  ST_DONE,
  ST_ABSENT,        /* declared absent, not reached by the frontier yet */
  ST_ABSENT_COUNTED /* declared absent and counted */
};

typedef struct dest_state {
  uint32_t counter, frontier, cursor;
  uint32_t fifo_head, fifo_len;
  size_t inflight, waiting, posted_open;
  uint8_t *state;  /* (transfers) */
  size_t *bytes;   /* (transfers) bytes of each offered transfer */
  uint32_t *fifo;  /* (transfers) ring of unlisted offered transfers */
} dest_state;

struct ar_commsched_gate {
  ar_commsched_gate_opts o;
  uint64_t iteration;
  uint32_t listed;
  uint32_t *num;    /* (transfers) number, or NONE when unlisted */
  uint32_t *pos;    /* (transfers) index in sorted, or NONE */
  uint32_t *sorted; /* (listed) transfers in number order */
  dest_state *d;    /* (destinations) */
  size_t footprint;
};

ar_status ar_commsched_gate_create(const ar_commsched_gate_opts *opts,
                                   ar_commsched_gate **out, ar_err *err) {
  if (!opts || opts->destinations == 0 || opts->transfers == 0 ||
      opts->transfers == AR_COMMSCHED_NONE)
    return ar_errf(err, AR_INVALID,
                   "commsched gate: need at least one destination and one "
                   "transfer (got %u and %u)",
                   opts ? opts->destinations : 0, opts ? opts->transfers : 0);
  ar_commsched_gate *g = ar_calloc(1, sizeof *g);
  if (!g)
    return ar_errf(err, AR_NOMEM, "commsched gate: out of memory");
  g->o = *opts;
  size_t T = opts->transfers, D = opts->destinations;
  g->num = ar_malloc(T * sizeof *g->num);
  g->pos = ar_malloc(T * sizeof *g->pos);
  g->sorted = ar_malloc(T * sizeof *g->sorted);
  g->d = ar_calloc(D, sizeof *g->d);
  if (!g->num || !g->pos || !g->sorted || !g->d)
    goto nomem;
  for (size_t i = 0; i < D; i++) {
    g->d[i].state = ar_calloc(T, 1);
    g->d[i].bytes = ar_calloc(T, sizeof *g->d[i].bytes);
    g->d[i].fifo = ar_malloc(T * sizeof *g->d[i].fifo);
    if (!g->d[i].state || !g->d[i].bytes || !g->d[i].fifo)
      goto nomem;
  }
  for (size_t t = 0; t < T; t++)
    g->num[t] = g->pos[t] = AR_COMMSCHED_NONE;
  g->footprint = sizeof *g + T * 3 * sizeof(uint32_t) + D * sizeof(dest_state) +
                 D * T * (1 + sizeof(size_t) + sizeof(uint32_t));
  *out = g;
  return AR_OK;
nomem:
  ar_commsched_gate_destroy(g);
  return ar_errf(err, AR_NOMEM,
                 "commsched gate: out of memory for %zu destinations x %zu "
                 "transfers",
                 D, T);
}

void ar_commsched_gate_destroy(ar_commsched_gate *g) {
  if (!g)
    return;
  if (g->d)
    for (size_t i = 0; i < g->o.destinations; i++) {
      ar_free(g->d[i].state);
      ar_free(g->d[i].bytes);
      ar_free(g->d[i].fifo);
    }
  ar_free(g->d);
  ar_free(g->sorted);
  ar_free(g->pos);
  ar_free(g->num);
  ar_free(g);
}

/* Moves the frontier over every entry whose number the counter reached,
 * counting absent ones as it passes them (which may reach more). */
static void advance(const ar_commsched_gate *g, dest_state *d) {
  while (d->frontier < g->listed &&
         g->num[g->sorted[d->frontier]] <= d->counter) {
    uint32_t t = g->sorted[d->frontier++];
    if (d->state[t] == ST_ABSENT) {
      d->state[t] = ST_ABSENT_COUNTED;
      d->counter++;
    }
  }
}

static void reset_dest(const ar_commsched_gate *g, dest_state *d) {
  memset(d->state, 0, g->o.transfers);
  d->counter = d->frontier = d->cursor = 0;
  d->fifo_head = d->fifo_len = 0;
  d->inflight = d->waiting = d->posted_open = 0;
  advance(g, d);
}

static ar_status check_idle(const ar_commsched_gate *g, const char *what,
                            ar_err *err) {
  for (uint32_t i = 0; i < g->o.destinations; i++) {
    const dest_state *d = &g->d[i];
    if (d->waiting == 0 && d->posted_open == 0)
      continue;
    uint32_t t = 0;
    while (d->state[t] != ST_OFFERED && d->state[t] != ST_POSTED)
      t++;
    return ar_errf(err, AR_STATE,
                   "commsched gate: cannot %s in iteration %llu: transfer %u "
                   "to destination %u is still %s; post and release every "
                   "transfer (or skip it) first",
                   what, (unsigned long long)g->iteration, t, i,
                   d->state[t] == ST_OFFERED ? "waiting to be posted"
                                             : "in flight");
  }
  return AR_OK;
}

ar_status ar_commsched_gate_load(ar_commsched_gate *g,
                                 const ar_commsched_schedule *s,
                                 uint32_t channel, ar_err *err) {
  AR_CHECK(check_idle(g, "load a schedule", err));
  size_t n = s ? s->n : 0;
  for (size_t i = 0; i < n; i++)
    if (s->e[i].channel == channel && s->e[i].transfer >= g->o.transfers)
      return ar_errf(err, AR_RANGE,
                     "commsched gate: schedule lists transfer %u ('%s') but "
                     "the gate was made for %u transfers; raise "
                     "opts.transfers",
                     s->e[i].transfer, s->e[i].name, g->o.transfers);
  /* Entries are in priority order (ties by id), so the channel's entries
   * come out in number order; check they form a valid normalisation. */
  for (uint32_t t = 0; t < g->o.transfers; t++)
    g->num[t] = g->pos[t] = AR_COMMSCHED_NONE;
  uint32_t L = 0;
  for (size_t i = 0; i < n; i++) {
    const ar_commsched_entry *e = &s->e[i];
    if (e->channel != channel)
      continue;
    uint32_t prev = L ? g->num[g->sorted[L - 1]] : 0;
    int ok = L == 0 ? e->number == 0 : (e->number == prev || e->number == L);
    if (!ok) {
      for (uint32_t t = 0; t < g->o.transfers; t++)
        g->num[t] = g->pos[t] = AR_COMMSCHED_NONE;
      g->listed = 0;
      return ar_errf(err, AR_INVALID,
                     "commsched gate: transfer %u ('%s') has number %u at "
                     "place %u of channel %u; numbers must count the "
                     "transfers with a strictly smaller priority",
                     e->transfer, e->name, e->number, L, channel);
    }
    g->sorted[L] = e->transfer;
    g->num[e->transfer] = e->number;
    g->pos[e->transfer] = L;
    L++;
  }
  g->listed = L;
  g->iteration = 0;
  for (uint32_t i = 0; i < g->o.destinations; i++)
    reset_dest(g, &g->d[i]);
  return AR_OK;
}

ar_status ar_commsched_gate_begin(ar_commsched_gate *g, uint64_t iteration,
                                  ar_err *err) {
  AR_CHECK(check_idle(g, "begin a new iteration", err));
  g->iteration = iteration;
  for (uint32_t i = 0; i < g->o.destinations; i++)
    reset_dest(g, &g->d[i]);
  return AR_OK;
}

static ar_status check_ids(const ar_commsched_gate *g, uint32_t dest,
                           uint32_t transfer, ar_err *err) {
  if (dest >= g->o.destinations || transfer >= g->o.transfers)
    return ar_errf(err, AR_RANGE,
                   "commsched gate: destination %u / transfer %u out of "
                   "range (%u destinations, %u transfers)",
                   dest, transfer, g->o.destinations, g->o.transfers);
  return AR_OK;
}

ar_status ar_commsched_gate_offer(ar_commsched_gate *g, uint32_t dest,
                                  uint32_t transfer, size_t bytes,
                                  ar_err *err) {
  AR_CHECK(check_ids(g, dest, transfer, err));
  dest_state *d = &g->d[dest];
  if (d->state[transfer] != ST_UNSEEN)
    return ar_errf(err, AR_STATE,
                   "commsched gate: transfer %u to destination %u offered "
                   "twice (or after being skipped) in iteration %llu",
                   transfer, dest, (unsigned long long)g->iteration);
  d->state[transfer] = ST_OFFERED;
  d->bytes[transfer] = bytes;
  d->waiting++;
  if (g->num[transfer] == AR_COMMSCHED_NONE) {
    d->fifo[(d->fifo_head + d->fifo_len) % g->o.transfers] = transfer;
    d->fifo_len++;
  }
  return AR_OK;
}

static int fits(const ar_commsched_gate *g, const dest_state *d, size_t b) {
  return g->o.max_bytes_in_flight == 0 || d->inflight == 0 ||
         d->inflight + b <= g->o.max_bytes_in_flight;
}

static void post(dest_state *d, uint32_t t) {
  d->state[t] = ST_POSTED;
  d->inflight += d->bytes[t];
  d->waiting--;
  d->posted_open++;
}

/* The transfer next() would pop for d, or false when none may go now.
 * Moves only the cursor past entries already gone. */
static bool peek(const ar_commsched_gate *g, dest_state *d, uint32_t *out) {
  if (d->fifo_len > 0) {
    uint32_t t = d->fifo[d->fifo_head];
    if (!fits(g, d, d->bytes[t]))
      return false;
    *out = t;
    return true;
  }
  while (d->cursor < d->frontier) {
    uint8_t st = d->state[g->sorted[d->cursor]];
    if (st == ST_UNSEEN || st == ST_OFFERED)
      break;
    d->cursor++;
  }
  for (uint32_t i = d->cursor; i < d->frontier; i++) {
    uint32_t t = g->sorted[i];
    if (d->state[t] != ST_OFFERED)
      continue;
    if (!fits(g, d, d->bytes[t]))
      return false;
    *out = t;
    return true;
  }
  return false;
}

ar_status ar_commsched_gate_next_if(ar_commsched_gate *g, uint32_t dest,
                                    const uint32_t *key, uint32_t want,
                                    uint32_t *out) {
  if (dest >= g->o.destinations)
    return AR_RANGE;
  dest_state *d = &g->d[dest];
  uint32_t t;
  if (!peek(g, d, &t) || (key && key[t] != want))
    return AR_NOTFOUND;
  if (d->fifo_len > 0) {
    d->fifo_head = (d->fifo_head + 1) % g->o.transfers;
    d->fifo_len--;
    post(d, t);
  } else {
    post(d, t);
    d->counter++;
    advance(g, d);
  }
  *out = t;
  return AR_OK;
}

ar_status ar_commsched_gate_next(ar_commsched_gate *g, uint32_t dest,
                                 uint32_t *out) {
  return ar_commsched_gate_next_if(g, dest, NULL, 0, out);
}

ar_status ar_commsched_gate_release(ar_commsched_gate *g, uint32_t dest,
                                    uint32_t transfer, ar_err *err) {
  AR_CHECK(check_ids(g, dest, transfer, err));
  dest_state *d = &g->d[dest];
  if (d->state[transfer] != ST_POSTED)
    return ar_errf(err, AR_STATE,
                   "commsched gate: release of transfer %u to destination %u, "
                   "which is not in flight",
                   transfer, dest);
  d->state[transfer] = ST_DONE;
  d->inflight -= d->bytes[transfer];
  d->posted_open--;
  return AR_OK;
}

/* Marks a listed, unseen transfer absent; counts it at once when the
 * frontier has already passed it. */
static void mark_absent(const ar_commsched_gate *g, dest_state *d,
                        uint32_t t) {
  if (g->pos[t] < d->frontier) {
    d->state[t] = ST_ABSENT_COUNTED;
    d->counter++;
  } else {
    d->state[t] = ST_ABSENT;
  }
}

ar_status ar_commsched_gate_skip(ar_commsched_gate *g, uint32_t dest,
                                 uint32_t transfer, ar_err *err) {
  AR_CHECK(check_ids(g, dest, transfer, err));
  dest_state *d = &g->d[dest];
  if (g->num[transfer] == AR_COMMSCHED_NONE)
    return AR_OK;
  uint8_t st = d->state[transfer];
  if (st == ST_ABSENT || st == ST_ABSENT_COUNTED)
    return AR_OK;
  if (st != ST_UNSEEN)
    return ar_errf(err, AR_STATE,
                   "commsched gate: transfer %u to destination %u cannot be "
                   "skipped: it was already offered",
                   transfer, dest);
  mark_absent(g, d, transfer);
  advance(g, d);
  return AR_OK;
}

ar_status ar_commsched_gate_flush(ar_commsched_gate *g, uint32_t dest) {
  if (dest >= g->o.destinations)
    return AR_RANGE;
  dest_state *d = &g->d[dest];
  for (uint32_t i = d->cursor; i < g->listed; i++)
    if (d->state[g->sorted[i]] == ST_UNSEEN)
      mark_absent(g, d, g->sorted[i]);
  advance(g, d);
  return AR_OK;
}

ar_status ar_commsched_gate_info_get(const ar_commsched_gate *g, uint32_t dest,
                                     ar_commsched_gate_info *out) {
  if (dest >= g->o.destinations)
    return AR_RANGE;
  const dest_state *d = &g->d[dest];
  out->iteration = g->iteration;
  out->counter = d->counter;
  out->listed = g->listed;
  out->bytes_in_flight = d->inflight;
  out->waiting = d->waiting;
  out->footprint_bytes = g->footprint;
  return AR_OK;
}
