/* kolo-server's HTTP front end: it owns the listening socket, frames every client's requests
 * itself (http_frame.h) and hands libmicrohttpd only well-framed bytes, over one end of a
 * socketpair per client, relaying its answers back verbatim. A stream that breaks HTTP's
 * syntax or kolo's limits is answered here with kolo's JSON error body (after the answers to
 * the requests before it), because libmicrohttpd 0.9.75 answers those itself with HTML and
 * has no hook to change them. With a certificate it also terminates TLS (GnuTLS, which
 * libmicrohttpd used for HTTPS), so HTTPS answers are the same. One thread, one epoll set
 * for every connection: an open stream (WatchJob over HTTP, /v1/stream, logs) holds no
 * thread; every buffer is bounded and every wait has a deadline. */
#ifndef KOLO_SERVER_HTTP_FRONT_H
#define KOLO_SERVER_HTTP_FRONT_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "kolo/status.h"

typedef struct kolo_server_http_front_config {
  struct sockaddr_in addr; /* where to listen; port 0 picks a free one */
  int max_connections;     /* clients at once; past it a client gets 503 (0 = 4096) */
  int timeout_s;           /* a stalled client or engine is dropped after this (0 = 60) */
  /* Hands the engine its end of a new client's socketpair, which it owns from then on (it
   * closes it, also when it fails). peer = the client's address. Returns 0, or -1 if the
   * engine refused it (the client then gets 503). Called on the front end's thread. */
  int (*hand_over)(void *arg, int fd, const struct sockaddr *peer, socklen_t peer_len);
  void *arg;
  /* both set: the front end terminates TLS (GnuTLS) with this PEM certificate chain and key,
   * so the engine only ever sees plain HTTP */
  const char *tls_cert_pem, *tls_key_pem;
} kolo_server_http_front_config;

typedef struct kolo_server_http_front kolo_server_http_front;

/* Binds and starts the front end's thread. KOLO_ERR_ADDRESS if the address cannot be bound,
 * KOLO_ERR_INVALID_ARG if the TLS certificate or key does not load. */
kolo_status kolo_server_http_front_start(const kolo_server_http_front_config *config,
                                         kolo_server_http_front **out, int *bound_port);
/* Stops accepting, closes every client connection, joins the thread, frees. */
void kolo_server_http_front_stop(kolo_server_http_front *f);

/* Writes into buf (at most cap bytes) a whole HTTP/1.1 answer with kolo's JSON error body
 * {"error":{"code":code,"message":message}} and Connection: close. Returns its length, or
 * 0 if it does not fit. */
size_t kolo_server_http_front_error_answer(int status, const char *code, const char *message,
                                           char *buf, size_t cap);

#endif
