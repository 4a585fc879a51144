/* Implementation of http_guard.h: parsing of Host and Origin authorities and the three
 * rules, in the order a refusal is most telling (Host, then Origin, then Content-Type). */
#include "server/http_guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define NAME_BYTES 256

/* Splits a Host value (or an Origin's authority) into its lower-case host name (without a
 * port, one trailing dot or IPv6 brackets) and tells whether it is an IP literal; 0 if it is
 * malformed. */
static int host_name(const char *host, size_t len, char *name, int *literal) {
  *literal = 0;
  if (len == 0 || len >= NAME_BYTES) return 0;
  const char *end = host + len, *port = NULL;
  if (host[0] == '[') {
    const char *close = memchr(host, ']', len);
    if (close == NULL || (close + 1 < end && close[1] != ':')) return 0;
    port = close + 1 < end ? close + 1 : NULL;
    size_t n = (size_t)(close - host - 1);
    memcpy(name, host + 1, n);
    name[n] = '\0';
    struct in6_addr a6;
    if (inet_pton(AF_INET6, name, &a6) != 1) return 0;
    *literal = 1;
  } else {
    const char *colon = memchr(host, ':', len);
    size_t n = colon ? (size_t)(colon - host) : len;
    port = colon;
    for (size_t i = 0; i < n; i++) name[i] = (char)tolower((unsigned char)host[i]);
    name[n] = '\0';
    if (n > 1 && name[n - 1] == '.') name[n - 1] = '\0';
    if (name[0] == '\0' || strchr(name, ':') != NULL) return 0;
    struct in_addr a4;
    *literal = inet_pton(AF_INET, name, &a4) == 1;
  }
  if (port) { /* ":digits" to the end */
    if (port + 1 >= end || end - port > 6) return 0;
    long value = 0;
    for (const char *p = port + 1; p < end; p++) {
      if (*p < '0' || *p > '9') return 0;
      value = value * 10 + (*p - '0');
    }
    if (value > 65535) return 0;
  }
  return 1;
}

/* Whether name matches an entry of the comma-separated list: exact, "*.suffix" for its
 * subdomains, or "*" (only when any_ok). */
static int listed(const char *name, const char *allowed, int any_ok) {
  for (const char *p = allowed; p && *p;) {
    while (*p == ' ' || *p == ',') p++;
    size_t n = strcspn(p, ", ");
    if (n == 1 && p[0] == '*') {
      if (any_ok) return 1;
    } else if (n > 2 && p[0] == '*' && p[1] == '.') {
      size_t len = strlen(name), sfx = n - 1; /* ".suffix" */
      if (len > sfx && strncasecmp(name + len - sfx, p + 1, sfx) == 0) return 1;
    } else if (n > 0 && strlen(name) == n && strncasecmp(name, p, n) == 0) {
      return 1;
    }
    p += n;
  }
  return 0;
}

int kolo_server_http_host_allowed(const char *host, const char *allowed) {
  char name[NAME_BYTES];
  int literal;
  if (host == NULL) return 1;
  if (!host_name(host, strlen(host), name, &literal)) return 0;
  if (literal || strchr(name, '.') == NULL) return 1; /* an IP or a single label (localhost) */
  size_t len = strlen(name);
  if (len > 10 && strcmp(name + len - 10, ".localhost") == 0) return 1;
  return listed(name, allowed, 1);
}

/* Whether an Origin value names the request's own origin (its authority is Host), or a host
 * the operator listed by name (a proxy in front that rewrites Host). */
static int same_origin(const char *origin, const char *host, const char *allowed) {
  const char *sep = strstr(origin, "://");
  if (sep == NULL || host == NULL) return 0;
  const char *authority = sep + 3;
  if (strcasecmp(authority, host) == 0) return 1;
  char name[NAME_BYTES];
  int literal;
  if (!host_name(authority, strlen(authority), name, &literal)) return 0;
  return listed(name, allowed, 0);
}

static int refuse(kolo_server_http_guard_refusal *out, int status, const char *code,
                  const char *message, const char *detail) {
  out->status = status;
  out->code = code;
  snprintf(out->message, sizeof out->message, "%s%.80s", message, detail ? detail : "");
  return 0;
}

static int json_type(const char *content_type) {
  const char *p = content_type;
  while (*p == ' ' || *p == '\t') p++;
  static const char json[] = "application/json";
  if (strncasecmp(p, json, sizeof json - 1) != 0) return 0;
  p += sizeof json - 1;
  while (*p == ' ' || *p == '\t') p++;
  return *p == '\0' || *p == ';';
}

int kolo_server_http_guard_check(const kolo_server_http_guard_request *req, const char *allowed,
                                 int check_host, kolo_server_http_guard_refusal *out) {
  if (check_host && !kolo_server_http_host_allowed(req->host, allowed))
    return refuse(out, 403, "PERMISSION_DENIED",
                  "this server does not answer to the host name in Host (add it to "
                  "--http-allowed-hosts): ",
                  req->host);
  if (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0) return 1;
  const char *site = req->sec_fetch_site;
  if (site && strcasecmp(site, "same-origin") != 0 && strcasecmp(site, "none") != 0)
    return refuse(out, 403, "PERMISSION_DENIED",
                  "a request from another web site is refused: Sec-Fetch-Site: ", site);
  if (req->origin && !same_origin(req->origin, req->host, allowed))
    return refuse(out, 403, "PERMISSION_DENIED",
                  "a request from another origin is refused: ", req->origin);
  if (req->content_type ? !json_type(req->content_type) : req->has_body)
    return refuse(out, 415, "INVALID_ARGUMENT",
                  "a request body must be sent as Content-Type: application/json, not ",
                  req->content_type ? req->content_type : "none");
  return 1;
}
