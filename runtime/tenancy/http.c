/*
 * The service's HTTP endpoint for operators (http.h), on libmicrohttpd:
 * one internal thread polls every connection and answers each request
 * from a fresh snapshot; a sampler thread keeps the history the status
 * page draws and closes connections that outlive their deadline (the
 * library's own timeout only measures silence, so a client trickling a
 * byte at a time would otherwise keep a connection for ever).
 */
#define _GNU_SOURCE
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* What one connection may buffer: its request line and headers must fit
 * (a larger header is refused with 431). */
#define CONN_MEMORY (16 * 1024)
/* Live connections the deadline table follows (the library admits at most
 * AR__HTTP_MAX_CONNS; the rest is slack for ones closing). */
#define TRACKED (2 * AR__HTTP_MAX_CONNS)
/* How often the sampler looks at the deadlines. */
#define TICK_MS 250

typedef struct tracked {
  struct MHD_Connection *c; /* NULL: a free entry */
  int fd;
  double since; /* ar_now() when accepted */
  bool shut;    /* its deadline passed and it was shut down */
} tracked;

struct ar__http {
  int lfd;
  bool v6;
  char url[96];
  ar__http_opts o;
  struct MHD_Daemon *d;
  pthread_t sampler;
  bool sampler_ok;
  /* mu guards everything below; it is taken after, never around, the
   * snapshot function (which takes the service's and runner's locks). */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  ar__mhist hist;
  tracked conns[TRACKED];
};

bool ar__http_available(void) { return true; }

/* ---- the address ----------------------------------------------------------------- */

static bool parse_port(const char *p, int *out) {
  if (!*p || strlen(p) > 5)
    return false;
  int v = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9')
      return false;
    v = v * 10 + (*p - '0');
  }
  *out = v;
  return v <= 65535;
}

/* Splits "ADDR:PORT", "[V6]:PORT", ":PORT" or "PORT" into host (127.0.0.1
 * when missing) and port. */
static bool split_addr(const char *addr, char *host, size_t cap, int *port) {
  const char *colon = strrchr(addr, ':');
  const char *p = colon ? colon + 1 : addr;
  size_t hl = colon ? (size_t)(colon - addr) : 0;
  const char *h = addr;
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
    h++;
    hl -= 2;
  } else if (memchr(addr, ':', hl)) {
    return false; /* an IPv6 address needs its brackets */
  }
  if (hl >= cap || !parse_port(p, port))
    return false;
  if (hl == 0 || (hl == 9 && !strncmp(h, "localhost", 9)))
    snprintf(host, cap, "127.0.0.1");
  else {
    memcpy(host, h, hl);
    host[hl] = '\0';
  }
  return true;
}

static ar_status bind_listen(ar__http *h, const char *addr, const struct addrinfo *ai,
                             ar_err *err) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return ar_errf(err, AR_IO, "--http %s: socket: %s", addr, strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (ai->ai_family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return ar_errf(err, AR_IO, "--http %s: cannot listen there: %s%s", addr, strerror(e),
                   e == EADDRINUSE ? "; pick another port"
                   : e == EACCES   ? "; ports under 1024 need root"
                                   : "");
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET6) {
      const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
      inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
      port = ntohs(s6->sin6_port);
    } else {
      const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
      inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
      port = ntohs(s4->sin_port);
    }
  }
  h->v6 = ai->ai_family == AF_INET6;
  snprintf(h->url, sizeof h->url, h->v6 ? "http://[%s]:%d/" : "http://%s:%d/", ip, port);
  h->lfd = fd;
  return AR_OK;
}

ar_status ar__http_listen(const char *addr, ar__http **out, ar_err *err) {
  char host[64];
  int port = 0;
  if (!addr || !split_addr(addr, host, sizeof host, &port))
    return ar_errf(err, AR_INVALID,
                   "--http takes ADDRESS:PORT with a numeric address (127.0.0.1:9464, "
                   "[::1]:9464, 0.0.0.0:9464) or a PORT alone (loopback), got '%s'",
                   addr ? addr : "");
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  char ps[8];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &ai) != 0 || !ai)
    return ar_errf(err, AR_INVALID,
                   "--http: '%s' is not a numeric IPv4 or IPv6 address (names are not "
                   "looked up); give e.g. 127.0.0.1:9464",
                   host);
  ar__http *h = ar_calloc(1, sizeof *h);
  if (!h) {
    freeaddrinfo(ai);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  h->lfd = -1;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL); /* its waits are ticks: a clock step is harmless */
  ar_status st = bind_listen(h, addr, ai, err);
  freeaddrinfo(ai);
  if (st != AR_OK) {
    ar__http_stop(h);
    return st;
  }
  *out = h;
  return AR_OK;
}

const char *ar__http_url(const ar__http *h) { return h->url; }

/* ---- answers ---------------------------------------------------------------------- */

static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, const char *type,
                                 const char *body, size_t len, enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, mode);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  /* One request per connection, as on the service's socket: the deadline
   * then bounds a whole exchange. */
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET");
  if (!strncmp(type, "text/html", 9)) {
    /* The page loads nothing from anywhere but this endpoint, and no other
     * site may frame it. */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src "
                            "'unsafe-inline'; connect-src 'self'; img-src data:; base-uri "
                            "'none'; form-action 'none'; frame-ancestors 'none'");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
  }
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *text) {
  return send_body(c, status, "text/plain; charset=utf-8", text, strlen(text),
                   MHD_RESPMEM_PERSISTENT);
}

/* A request announcing a body (this endpoint reads none). */
static bool has_body(struct MHD_Connection *c) {
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
  return (cl && strcmp(cl, "0") != 0) ||
         MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding") != NULL;
}

static enum MHD_Result send_sbuf(struct MHD_Connection *c, const char *type, ar_sbuf *b) {
  enum MHD_Result ret =
      b->oom ? send_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "the server is out of memory\n")
             : send_body(c, MHD_HTTP_OK, type, b->buf ? b->buf : "", b->len,
                         MHD_RESPMEM_MUST_COPY);
  ar_sbuf_fini(b);
  return ret;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
  ar__http *h = cls;
  (void)version;
  (void)upload;
  if (*con_cls) /* answered at its first call; a body that follows ends it */
    return MHD_NO;
  *con_cls = h;
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
    return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET is served here\n");
  if (*upload_size > 0 || has_body(c))
    return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "a request here takes no body\n");
  bool metrics = !strcmp(url, "/metrics"), status = !strcmp(url, "/status.json");
  if (!strcmp(url, "/"))
    return send_body(c, MHD_HTTP_OK, "text/html; charset=utf-8", ar__status_page,
                     strlen(ar__status_page), MHD_RESPMEM_PERSISTENT);
  if (!metrics && !status)
    return send_text(c, MHD_HTTP_NOT_FOUND,
                     "not found; this endpoint serves /metrics, /status.json and /\n");
  ar__msnap s;
  h->o.snap(h->o.ctx, &s);
  ar_sbuf b = {0};
  pthread_mutex_lock(&h->mu);
  if (metrics)
    ar__metrics_prometheus(&s, ar__mhist_rate(&h->hist), &b);
  else
    ar__metrics_status_json(&s, &h->hist, AR__HTTP_PERIOD_S, &b);
  pthread_mutex_unlock(&h->mu);
  return send_sbuf(c, metrics ? "text/plain; version=0.0.4; charset=utf-8" : "application/json",
                   &b);
}

/* ---- deadlines and history --------------------------------------------------------- */

/* Follows connections from accept to close (the library's thread). */
static void notify(void *cls, struct MHD_Connection *c, void **socket_context,
                   enum MHD_ConnectionNotificationCode toe) {
  ar__http *h = cls;
  (void)socket_context;
  pthread_mutex_lock(&h->mu);
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    for (size_t i = 0; ci && i < TRACKED; i++)
      if (!h->conns[i].c) {
        h->conns[i] = (tracked){c, ci->connect_fd, ar_now(), false};
        break;
      }
  } else {
    /* Called before the library closes the descriptor, so the sampler,
     * which shuts descriptors down under mu, never touches a reused one. */
    for (size_t i = 0; i < TRACKED; i++)
      if (h->conns[i].c == c)
        h->conns[i].c = NULL;
  }
  pthread_mutex_unlock(&h->mu);
}

/* Shuts down connections past their deadline (h->mu held); the library
 * then sees them end and cleans up. */
static void enforce_deadlines(ar__http *h) {
  double now = ar_now(), limit = h->o.deadline_ms / 1000.0;
  for (size_t i = 0; i < TRACKED; i++) {
    tracked *t = &h->conns[i];
    if (t->c && !t->shut && now - t->since > limit) {
      shutdown(t->fd, SHUT_RDWR);
      t->shut = true;
    }
  }
}

static void *sampler_main(void *arg) {
  ar__http *h = arg;
  double next = 0;
  pthread_mutex_lock(&h->mu);
  while (!h->stop) {
    enforce_deadlines(h);
    if (ar_now() >= next) {
      next = ar_now() + AR__HTTP_PERIOD_S;
      pthread_mutex_unlock(&h->mu);
      ar__msnap s;
      h->o.snap(h->o.ctx, &s);
      pthread_mutex_lock(&h->mu);
      ar__mhist_push(&h->hist, &s);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += TICK_MS * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    if (!h->stop)
      pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
    msg[--n] = '\0';
  ar_log(AR_LOG_WARN, "serve --http: %s", msg);
}

ar_status ar__http_start(ar__http *h, const ar__http_opts *opts, ar_err *err) {
  if (!opts->snap || opts->deadline_ms < 1 || opts->max_per_ip < 1)
    return ar_errf(err, AR_INVALID, "http: a snapshot function and positive limits are needed");
  h->o = *opts;
  unsigned secs = (unsigned)((opts->deadline_ms + 999) / 1000);
  h->d = MHD_start_daemon(
      MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | (h->v6 ? MHD_USE_IPv6 : 0), 0, NULL,
      NULL, answer, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_LISTEN_SOCKET,
      h->lfd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)AR__HTTP_MAX_CONNS,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)opts->max_per_ip,
      MHD_OPTION_CONNECTION_TIMEOUT, secs, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      (size_t)CONN_MEMORY, MHD_OPTION_NOTIFY_CONNECTION, notify, h, MHD_OPTION_END);
  if (!h->d)
    return ar_errf(err, AR_IO, "http: libmicrohttpd could not start serving %s (see the log "
                   "above)", h->url);
  h->lfd = -1; /* the library's now; it closes it when it stops */
  if (pthread_create(&h->sampler, NULL, sampler_main, h) != 0)
    return ar_errf(err, AR_NOMEM, "http: cannot start the sampler thread");
  h->sampler_ok = true;
  return AR_OK;
}

void ar__http_stop(ar__http *h) {
  if (!h)
    return;
  if (h->sampler_ok) {
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->sampler, NULL);
  }
  if (h->d)
    MHD_stop_daemon(h->d);
  if (h->lfd >= 0)
    close(h->lfd);
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->mu);
  ar_free(h);
}
