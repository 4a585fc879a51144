/* kolo-server's HTTP door rules against requests a web browser is made to send (issue #30):
 * pure functions over a request's method and header values, no I/O, called by http_api.c
 * when a request's head is whole and before any body byte is read.
 *
 * - Host: a browser tricked by DNS rebinding sends the attacker's name in Host. Answered are
 *   IP literals, `localhost` and `*.localhost`, single-label names (no dot: no one outside
 *   can make a browser resolve one to this server), and the names of --http-allowed-hosts
 *   (`*` = any). A request without Host (HTTP/1.0 tools) passes: browsers always send it.
 * - Origin / Sec-Fetch-Site on a state-changing request (any method but GET and HEAD): a
 *   page of another origin is refused: Sec-Fetch-Site other than same-origin or none, an
 *   Origin of `null` or one whose host[:port] is not the request's Host.
 * - Content-Type on a state-changing request: a body must be sent as application/json (the
 *   one type a page of another origin cannot send without a CORS preflight, which kolo never
 *   grants); a Content-Type of another type is refused even with an empty body.
 * The dashboard's own requests (same origin, JSON bodies) pass every rule. */
#ifndef KOLO_SERVER_HTTP_GUARD_H
#define KOLO_SERVER_HTTP_GUARD_H

#include <stddef.h>

/* What the rules look at; NULL = the header is absent. */
typedef struct kolo_server_http_guard_request {
  const char *method;
  const char *host;
  const char *origin;
  const char *sec_fetch_site;
  const char *content_type;
  int has_body; /* a Content-Length above 0 or Transfer-Encoding: chunked */
} kolo_server_http_guard_request;

/* A refusal: the HTTP status, kolo's error code name and a message. */
typedef struct kolo_server_http_guard_refusal {
  int status;
  const char *code;
  char message[200];
} kolo_server_http_guard_refusal;

/* Whether host (a Host header value, "name[:port]" or "[v6]:port") is one this server
 * answers to; allowed is the comma-separated --http-allowed-hosts list (NULL or "" = none). */
int kolo_server_http_host_allowed(const char *host, const char *allowed);

/* 1 if the request passes the rules above (Host is checked only when check_host is set), else
 * 0 with out filled (403 PERMISSION_DENIED, 415 INVALID_ARGUMENT). */
int kolo_server_http_guard_check(const kolo_server_http_guard_request *req, const char *allowed,
                                 int check_host, kolo_server_http_guard_refusal *out);

#endif
