/*
 * runtime/tenancy private header: the service's HTTP endpoint for
 * operators (`accelrt serve --http ADDR:PORT`), built on libmicrohttpd.
 *
 * GET /metrics      Prometheus text (metrics.h)
 * GET /status.json  the status page's data: aggregates, lanes, history
 * GET /             the status page (self-contained HTML, status_page.c)
 * Anything else is 404, another method 405, a request with a body 413; a
 * request whose header does not fit the connection's memory is refused by
 * libmicrohttpd (431).  Aggregates only: the port is not authenticated.
 *
 * Bounds, like the service's socket: at most AR__HTTP_MAX_CONNS
 * connections, max_per_ip from one address, and each connection closed
 * deadline_ms after it was accepted however it trickles (a response is
 * "Connection: close": one request per connection).
 *
 * Two steps, so that a port under 1024 can be bound by a server started as
 * root before it gives up its capabilities: ar__http_listen binds (no
 * thread), ar__http_start serves from a thread of libmicrohttpd and a
 * sampler thread that takes a snapshot every AR__HTTP_PERIOD_S for the
 * history and enforces the deadline.
 *
 * Tests: tests/tenancy/metrics.sh.
 */
#ifndef ACCELRT_TENANCY_HTTP_H
#define ACCELRT_TENANCY_HTTP_H

#include "accelrt/base.h"
#include "metrics.h"

#include <stdbool.h>

#define AR__HTTP_MAX_CONNS 64
#define AR__HTTP_PERIOD_S 2.0

typedef struct ar__http ar__http;

/* Fills *out with the aggregates now; called from the endpoint's threads,
 * so it takes the locks it needs, one after the other (the service takes
 * its own inside the runner's, so holding its own while asking the runner
 * would deadlock). */
typedef void (*ar__http_snap_fn)(void *ctx, ar__msnap *out);

typedef struct ar__http_opts {
  int deadline_ms; /* a connection's whole life */
  int max_per_ip;  /* connections from one address */
  ar__http_snap_fn snap;
  void *ctx;
} ar__http_opts;

/* Whether this build has the endpoint (libmicrohttpd found at configure). */
bool ar__http_available(void);

/* Parses addr ("ADDR:PORT", "[V6ADDR]:PORT", ":PORT" or "PORT"; a missing
 * address is 127.0.0.1; PORT 0 picks a free one) and binds a listening
 * socket there.  AR_INVALID for an address it cannot read, AR_IO when the
 * bind fails (in use, not permitted), AR_UNSUPPORTED without
 * libmicrohttpd; with what to do in err. */
ar_status ar__http_listen(const char *addr, ar__http **out, ar_err *err);
/* "http://127.0.0.1:9464/" with the port actually bound (borrowed). */
const char *ar__http_url(const ar__http *h);
/* Serves (see the top).  opts is copied.  AR_NOMEM, AR_IO. */
ar_status ar__http_start(ar__http *h, const ar__http_opts *opts, ar_err *err);
/* Stops serving, joins its threads, closes the socket, frees.  NULL is a
 * no-op. */
void ar__http_stop(ar__http *h);

/* The status page (status_page.c), NUL-terminated. */
extern const char ar__status_page[];

#endif
