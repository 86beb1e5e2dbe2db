/* The service's client side: one request, its replies (tenancy.h). */
#define _GNU_SOURCE
#include "accelrt/tenancy.h"

#include "protocol.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static ar_status connect_server(const char *path, int *out, ar_err *err) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a.sun_path)
    return ar_errf(err, AR_INVALID, "socket path '%s' is too long", path);
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    ar_status st = ar_errf(err, AR_IO, "cannot reach the server at %s (%s); start it with "
                           "'accelrt serve' or give its --socket", path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return st;
  }
  *out = fd;
  return AR_OK;
}

/* The wire message of a request. */
static ar_status encode(const ar_client_request *q, ar__msg *m, ar_err *err) {
  static const ar__msg_op ops[] = {AR__OP_NONE, AR__OP_SUBMIT, AR__OP_PS, AR__OP_LOGS,
                                   AR__OP_CANCEL};
  memset(m, 0, sizeof *m);
  if ((unsigned)q->op < 1 || (unsigned)q->op > AR_CLIENT_CANCEL)
    return ar_errf(err, AR_INVALID, "unknown request %d", (int)q->op);
  if (q->n_sets < 0 || q->n_sets > AR_CLIENT_MAX_SETS)
    return ar_errf(err, AR_INVALID, "at most %d --set", AR_CLIENT_MAX_SETS);
  m->op = ops[q->op];
  m->version = AR__PROTO_VERSION;
  m->has_id = q->op == AR_CLIENT_LOGS || q->op == AR_CLIENT_CANCEL;
  m->id = q->id;
  m->follow = q->follow;
  m->keep = q->keep_generated;
  m->json = q->json && (q->op == AR_CLIENT_PS || q->op == AR_CLIENT_LOGS);
  if (q->op != AR_CLIENT_SUBMIT)
    return AR_OK;
  m->yaml = (ar__mstr){q->yaml, q->yaml_len};
  m->file = (ar__mstr){q->file, q->file ? strlen(q->file) : 0};
  m->base = (ar__mstr){q->base, q->base ? strlen(q->base) : 0};
  m->cwd = (ar__mstr){q->cwd, q->cwd ? strlen(q->cwd) : 0};
  for (int i = 0; i < q->n_sets; i++)
    m->sets[i] = (ar__mstr){q->sets[i], strlen(q->sets[i])};
  m->n_sets = q->n_sets;
  return AR_OK;
}

ar_status ar_client_call(const char *socket_path, const ar_client_request *req,
                         ar_client_text_fn on_text, void *ctx, ar_err *err) {
  ar__msg m;
  AR_CHECK(encode(req, &m, err));
  int fd = -1;
  AR_CHECK(connect_server(socket_path, &fd, err));
  /* A server that refuses the connection says why before closing it: the
   * reply is read even when sending failed. */
  ar_err werr = AR_ERR_INIT;
  bool sent = ar__msg_write(fd, &m, &werr) == AR_OK;
  uint8_t *buf = NULL;
  size_t n = 0;
  ar_status st = AR_IO;
  for (;;) {
    ar__msg r;
    ar_err rerr = AR_ERR_INIT;
    if (ar__msg_read(fd, &buf, &n, 0, &rerr) != AR_OK ||
        ar__msg_decode(buf, n, &r, &rerr) != AR_OK) {
      st = sent ? ar_errf(err, AR_IO, "the server's reply: %s", rerr.msg)
                : ar_errf(err, AR_IO, "%s", werr.msg);
      break;
    }
    if (r.op == AR__OP_DATA || r.op == AR__OP_OK) {
      if (on_text && r.text.n)
        on_text(ctx, r.text.p, r.text.n);
      if (r.op == AR__OP_DATA)
        continue;
    }
    if (r.op == AR__OP_OK || r.op == AR__OP_END)
      st = AR_OK;
    else if (r.op == AR__OP_ERROR)
      st = ar_errf(err, AR_STATE, "%.*s", (int)r.text.n, r.text.p);
    else
      st = ar_errf(err, AR_IO, "the server sent a request, not a reply");
    break;
  }
  ar_free(buf);
  close(fd);
  return st;
}
