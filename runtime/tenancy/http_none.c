/*
 * The HTTP endpoint in a build without libmicrohttpd (http.h): it is
 * absent, and says so.  CMake compiles this file instead of http.c when
 * the library was not found (or ACCELRT_HTTP=OFF).
 */
#include "http.h"

bool ar__http_available(void) { return false; }

ar_status ar__http_listen(const char *addr, ar__http **out, ar_err *err) {
  (void)addr;
  (void)out;
  return ar_errf(err, AR_UNSUPPORTED,
                 "this accelrt was built without the HTTP endpoint (libmicrohttpd was not "
                 "found when it was configured); install libmicrohttpd-dev and rebuild");
}

const char *ar__http_url(const ar__http *h) {
  (void)h;
  return "";
}

ar_status ar__http_start(ar__http *h, const ar__http_opts *opts, ar_err *err) {
  (void)h;
  (void)opts;
  return ar_errf(err, AR_UNSUPPORTED, "this accelrt was built without the HTTP endpoint");
}

void ar__http_stop(ar__http *h) { (void)h; }
