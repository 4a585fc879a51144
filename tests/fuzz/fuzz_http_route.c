/* libFuzzer target: kolo-server's HTTP routing and query arguments
 * (server/http_route.c), as they meet a request once libmicrohttpd has split and
 * unescaped it. Input: a method byte, the URL path up to the first newline, then
 * query arguments one per line ("key=value", or "key" for a bare key).
 * Properties: no crash or leak; HEAD routes as GET; a matched route's method is
 * in the path's Allow set and a 405's is not; an id route's path is rebuilt
 * exactly from its id; only GET/HEAD routes go without the token; each route's
 * arguments either fill its request within their documented bounds or are
 * refused with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_route.h"

static void check(int ok, const char *what, const char *url) {
  if (ok) return;
  fprintf(stderr, "http route property failed: %s (url '%s')\n", what, url);
  abort();
}

static int method_allowed(const char *allow, const char *method) {
  size_t n = strlen(method);
  for (const char *p = allow; p && (p = strstr(p, method)) != NULL; p += n)
    if ((p == allow || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

/* The path an id route names, rebuilt from its id. */
static int rebuild(const kolo_server_route *m, char *out, size_t len) {
  const char *fmt = NULL;
  switch (m->kind) {
    case KOLO_ROUTE_GET_JOB:
      fmt = "/v1/jobs/%s";
      break;
    case KOLO_ROUTE_JOB_LOGS:
      fmt = "/v1/jobs/%s/logs";
      break;
    case KOLO_ROUTE_JOB_EVENTS:
      fmt = "/v1/jobs/%s/events";
      break;
    case KOLO_ROUTE_JOB_METRICS:
      fmt = "/v1/jobs/%s/metrics";
      break;
    case KOLO_ROUTE_CANCEL_JOB:
      fmt = "/v1/jobs/%s:cancel";
      break;
    case KOLO_ROUTE_PUT_JOB_BLOB:
      fmt = "/v1/jobs/%s/blob";
      break;
    case KOLO_ROUTE_SCALE_JOB:
      fmt = "/v1/jobs/%s:scale";
      break;
    case KOLO_ROUTE_DRAIN_WORKER:
      fmt = "/v1/workers/%s:drain";
      break;
    case KOLO_ROUTE_UNDRAIN_WORKER:
      fmt = "/v1/workers/%s:undrain";
      break;
    default:
      return 0;
  }
  snprintf(out, len, fmt, m->id);
  return 1;
}

static void check_route(const char *method, const char *url) {
  kolo_server_route m;
  kolo_server_route_match(method, url, &m);
  const char *allow = kolo_server_route_methods(url);
  if (m.kind == KOLO_ROUTE_NONE) {
    check(m.id[0] == '\0', "no route, no id", url);
    check(m.allow == NULL || (m.allow == allow && !method_allowed(allow, method)),
          "a 405 names what is allowed", url);
  } else {
    check(method_allowed(allow, strcmp(method, "HEAD") == 0 ? "GET" : method),
          "a route's method is allowed", url);
    char rebuilt[512];
    if (rebuild(&m, rebuilt, sizeof rebuilt)) {
      check(m.id[0] != '\0' && strlen(m.id) < KOLO_SERVER_ROUTE_ID_BYTES, "an id route has an id",
            url);
      check(strcmp(rebuilt, url) == 0, "an id route's path is its id's", url);
      if (m.kind < KOLO_ROUTE_DRAIN_WORKER || m.kind > KOLO_ROUTE_UNDRAIN_WORKER)
        check(strpbrk(m.id, "/:") == NULL, "a job id holds no / or :", url);
    } else {
      check(m.id[0] == '\0', "a fixed route has no id", url);
    }
  }
  if (kolo_server_route_public(m.kind))
    check(strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0,
          "only GET/HEAD routes skip the token", url);
  if (strcmp(method, "HEAD") == 0) {
    kolo_server_route g;
    kolo_server_route_match("GET", url, &g);
    check(g.kind == m.kind && strcmp(g.id, m.id) == 0, "HEAD routes as GET", url);
  }
}

typedef struct arg {
  char *key, *value; /* value NULL: a bare key */
} arg;

static void check_list(const arg *args, size_t n, const char *url) {
  Kolo__V1__ListJobsRequest *req = malloc(sizeof *req);
  kolo__v1__list_jobs_request__init(req);
  char err[256] = "";
  kolo_status rc = KOLO_OK;
  for (size_t i = 0; i < n && rc == KOLO_OK; i++)
    rc = kolo_server_query_list_jobs(req, args[i].key, args[i].value, err, sizeof err);
  if (rc == KOLO_OK) {
    check(req->page_size <= 1000, "page_size within 0..1000", url);
    for (size_t i = 0; i < req->n_labels; i++)
      check(req->labels[i]->key[0] != '\0', "a label has a key", url);
    protobuf_c_message_get_packed_size(&req->base);
  } else {
    check(rc != KOLO_ERR_INVALID_ARG || err[0] != '\0', "a refused argument says why", url);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void check_logs(const arg *args, size_t n, const char *url) {
  Kolo__V1__StreamLogsRequest req = KOLO__V1__STREAM_LOGS_REQUEST__INIT;
  uint32_t ranks[4];
  req.ranks = ranks;
  char err[256] = "";
  kolo_status rc = KOLO_OK;
  for (size_t i = 0; i < n && rc == KOLO_OK; i++)
    rc = kolo_server_query_logs(&req, ranks, 4, args[i].key, args[i].value, err, sizeof err);
  check(req.n_ranks <= 4, "at most max_ranks ranks", url);
  if (rc == KOLO_OK)
    check(req.tail <= 1000000000u && (req.follow == 0 || req.follow == 1),
          "tail and follow bounded", url);
  else
    check(err[0] != '\0', "a refused argument says why", url);
}

static void check_scalars(const arg *args, size_t n, const char *url) {
  char err[256];
  for (size_t i = 0; i < n; i++) {
    const char *v = args[i].value;
    kolo_server_query_allowed("jobs workers job", args[i].key, err, sizeof err);
    int flag = -1;
    if (kolo_server_query_flag("jobs", v, &flag, err, sizeof err) == KOLO_OK) {
      check(flag == 0 || flag == 1, "a flag is 0 or 1", url);
      if (v && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || v[0] == '\0'))
        check(flag == 1, "yes is 1", url);
    }
    uint64_t step = 0;
    if (v && kolo_server_query_since_step(v, &step, err, sizeof err) == KOLO_OK) {
      check(strspn(v, "0123456789") == strlen(v), "since_step is digits only", url);
      char again[32];
      snprintf(again, sizeof again, "%llu", (unsigned long long)step);
      size_t zeros = strspn(v, "0");
      check(strcmp(again, v[zeros] ? v + zeros : "0") == 0, "since_step reads its digits exactly",
            url);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const methods[] = {"GET",    "HEAD",  "POST",    "PUT",
                                        "DELETE", "PATCH", "OPTIONS", "get"};
  if (size < 1 || size > 4096) return 0;
  const char *method = methods[data[0] % 8];
  char *text = malloc(size);
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  char *url = text, *rest = strchr(text, '\n');
  if (rest) *rest++ = '\0';
  check_route(method, url);
  arg args[16];
  size_t n = 0;
  while (rest && n < 16) {
    char *line = rest;
    rest = strchr(rest, '\n');
    if (rest) *rest++ = '\0';
    char *eq = strchr(line, '=');
    if (eq) *eq = '\0';
    args[n++] = (arg){line, eq ? eq + 1 : NULL};
  }
  check_list(args, n, url);
  check_logs(args, n, url);
  check_scalars(args, n, url);
  free(text);
  return 0;
}
