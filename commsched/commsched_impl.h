/*
 * commsched/ private header: the graph's storage, the dependency classes
 * the wizard works on, and the schedule's storage.
 *
 * Dependency classes: compute ops whose sets of upstream recvs are equal
 * behave identically in every TicTac property (they have the same M, and
 * they are unlocked by the same recvs), so sealing groups them into
 * classes, each with one bitset over the transfers.  Compute ops with no
 * recv upstream belong to no class: they never wait for communication.
 */
#ifndef ACCELRT_COMMSCHED_IMPL_H
#define ACCELRT_COMMSCHED_IMPL_H

#include "accelrt/commsched.h"

typedef struct ar__cs_op {
  char *name; /* owned */
  ar_commsched_op_kind kind;
  double time_s;
  uint32_t transfer; /* recv: its transfer id; compute: AR_COMMSCHED_NONE */
  uint32_t cls;      /* compute: its class, or AR_COMMSCHED_NONE */
} ar__cs_op;

typedef struct ar__cs_recv {
  ar_commsched_op op;
  size_t bytes;
  uint32_t channel;
} ar__cs_recv;

struct ar_commsched_graph {
  ar__cs_op *ops; /* (nops) */
  size_t nops, cap_ops;
  ar__cs_recv *recvs; /* (nrecv), by transfer id */
  size_t nrecv, cap_recv;
  uint32_t *edges; /* (nedges, 2): from, to */
  size_t nedges, cap_edges;
  int sealed;
  /* Set by seal. */
  size_t words;       /* 64-bit words per transfer bitset */
  size_t nclass;
  uint64_t *cls_bits; /* (nclass, words) */
  /* users: for transfer r, the classes containing r are
   * users[user_off[r] .. user_off[r + 1]). */
  uint32_t *user_off; /* (nrecv + 1) */
  uint32_t *users;    /* (user_off[nrecv]) */
};

/* Time quantum of the wizard: times become integer nanoseconds so that
 * sums are exact and ties are decided exactly, whatever order they were
 * added in. */
int64_t ar__cs_ns(double seconds);

/* Priority per transfer (length g->nrecv), computed by tic.c / tac.c. */
ar_status ar__cs_tic(const ar_commsched_graph *g, uint32_t *prio, ar_err *err);
ar_status ar__cs_tac(const ar_commsched_graph *g, uint32_t *prio, ar_err *err);

/* Property state over the outstanding set R (wizard.c). */
typedef struct ar__cs_props {
  size_t n, words, nclass;
  uint64_t *R;       /* (words) outstanding transfers */
  size_t nR;
  int64_t *rtime;    /* (n) Time(r) */
  int64_t *ctime;    /* (nclass) sum of Time over the class's ops */
  int64_t *M;        /* (nclass) sum of Time(r) over deps ∩ R */
  uint32_t *cnt;     /* (nclass) |deps ∩ R| */
  uint32_t *x;       /* (nclass) xor of the transfers in deps ∩ R */
  int64_t *P;        /* (n) */
  int64_t *Mplus;    /* (n), AR__CS_INF when none */
  uint32_t *order;   /* (nclass) classes with cnt >= 2, ascending M */
  size_t norder;
  uint32_t *tmp;     /* (nclass) merge scratch */
  uint64_t *stamp;   /* (nclass) last removal that touched the class */
  uint64_t *painted; /* (words) */
  uint64_t step;
} ar__cs_props;

#define AR__CS_INF INT64_MAX

/* unit: 1 gives TIC's costs (every recv 1, compute 0); 0 the graph's
 * times in ns.  Computes M, cnt, P and the sorted order for R = all. */
ar_status ar__cs_props_init(ar__cs_props *p, const ar_commsched_graph *g,
                            int unit, ar_err *err);
void ar__cs_props_fini(ar__cs_props *p);
/* Recomputes Mplus for every r in R. */
void ar__cs_props_mplus(ar__cs_props *p, const ar_commsched_graph *g);
/* Removes transfer r from R, updating M, cnt, x, P and the order. */
void ar__cs_props_remove(ar__cs_props *p, const ar_commsched_graph *g,
                         uint32_t r);

struct ar_commsched_schedule {
  ar_commsched_order order;
  double compute_s;
  size_t n;
  ar_commsched_entry *e; /* (n) in priority order, ties by transfer id */
  char **names;          /* (n) owned, e[i].name == names[i] */
  uint32_t max_transfer; /* largest listed transfer id + 1 (0 when n == 0) */
  uint32_t *by_id;       /* (max_transfer) index into e, or NONE */
};

/* Builds a schedule of n listed transfers from parallel arrays (names are
 * copied), sorts it, normalises the numbers per channel (normalize.c) and
 * builds the id index.  Duplicate transfer ids give AR_INVALID. */
ar_status ar__cs_schedule_build(ar_commsched_order order, size_t n,
                                const uint32_t *transfer,
                                const char *const *names,
                                const uint32_t *channel,
                                const uint32_t *priority,
                                ar_commsched_schedule **out, ar_err *err);
/* Fills e[i].number for entries already in priority order. */
ar_status ar__cs_normalize(ar_commsched_entry *e, size_t n, ar_err *err);

#endif /* ACCELRT_COMMSCHED_IMPL_H */
