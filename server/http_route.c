/* Implementation of http_route.h: path matching in the order http_api.c serves
 * routes, and the query-argument rules of each route. */
#define _GNU_SOURCE
#include "server/http_route.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "server/pb_check.h"

/* Splits "/v1/jobs/<id>[suffix]" into id and suffix ("", "/events", ":cancel", ":scale"). */
static int job_path(const char *url, char *id, size_t id_len, const char **suffix) {
  const char *p = url + strlen("/v1/jobs/");
  size_t n = strcspn(p, "/:");
  if (n == 0 || n >= id_len) return 0;
  memcpy(id, p, n);
  id[n] = '\0';
  *suffix = p + n;
  return 1;
}

const char *kolo_server_route_methods(const char *url) {
  static const char *const get_routes[] = {"/healthz",    "/readyz",    "/metrics", "/v1/stream",
                                           "/v1/workers", "/v1/demand", "/",        "/ui"};
  for (size_t i = 0; i < sizeof get_routes / sizeof get_routes[0]; i++)
    if (strcmp(url, get_routes[i]) == 0) return "GET, HEAD";
  if (strcmp(url, "/v1/jobs") == 0) return "GET, HEAD, POST";
  if (strncmp(url, "/ui/", 4) == 0) return "GET, HEAD";
  if (strncmp(url, "/v1/workers/", 12) == 0) {
    const char *colon = strrchr(url + 12, ':');
    if (colon && colon > url + 12 &&
        (strcmp(colon, ":drain") == 0 || strcmp(colon, ":undrain") == 0))
      return "POST";
    return NULL;
  }
  char id[KOLO_SERVER_ROUTE_ID_BYTES];
  const char *suffix = "";
  if (strncmp(url, "/v1/jobs/", 9) == 0 && job_path(url, id, sizeof id, &suffix)) {
    if (suffix[0] == '\0' || strcmp(suffix, "/logs") == 0 || strcmp(suffix, "/events") == 0 ||
        strcmp(suffix, "/metrics") == 0)
      return "GET, HEAD";
    if (strcmp(suffix, ":cancel") == 0 || strcmp(suffix, ":scale") == 0 ||
        strcmp(suffix, "/blob") == 0)
      return "POST";
  }
  return NULL;
}

/* Whether method is one of allow's comma-separated words. */
static int allowed(const char *allow, const char *method) {
  size_t mlen = strlen(method);
  for (const char *p = allow; p && (p = strstr(p, method)) != NULL; p += mlen)
    if ((p == allow || p[-1] == ' ') && (p[mlen] == ',' || p[mlen] == '\0')) return 1;
  return 0;
}

/* POST /v1/workers/<id>:drain|:undrain */
static kolo_server_route_kind worker_route(const char *url, char *id) {
  const char *w = url + 12;
  const char *colon = strrchr(w, ':');
  if (colon == NULL || colon == w || (size_t)(colon - w) >= KOLO_SERVER_ROUTE_ID_BYTES)
    return KOLO_ROUTE_NONE;
  kolo_server_route_kind kind = strcmp(colon, ":drain") == 0     ? KOLO_ROUTE_DRAIN_WORKER
                                : strcmp(colon, ":undrain") == 0 ? KOLO_ROUTE_UNDRAIN_WORKER
                                                                 : KOLO_ROUTE_NONE;
  if (kind != KOLO_ROUTE_NONE) {
    memcpy(id, w, (size_t)(colon - w));
    id[colon - w] = '\0';
  }
  return kind;
}

static kolo_server_route_kind job_route(const char *url, int get, int post, char *id) {
  const char *suffix = "";
  if (!job_path(url, id, KOLO_SERVER_ROUTE_ID_BYTES, &suffix)) return KOLO_ROUTE_NONE;
  if (get && suffix[0] == '\0') return KOLO_ROUTE_GET_JOB;
  if (get && strcmp(suffix, "/logs") == 0) return KOLO_ROUTE_JOB_LOGS;
  if (get && strcmp(suffix, "/events") == 0) return KOLO_ROUTE_JOB_EVENTS;
  if (get && strcmp(suffix, "/metrics") == 0) return KOLO_ROUTE_JOB_METRICS;
  if (post && strcmp(suffix, ":cancel") == 0) return KOLO_ROUTE_CANCEL_JOB;
  if (post && strcmp(suffix, ":scale") == 0) return KOLO_ROUTE_SCALE_JOB;
  if (post && strcmp(suffix, "/blob") == 0) return KOLO_ROUTE_PUT_JOB_BLOB;
  return KOLO_ROUTE_NONE;
}

static kolo_server_route_kind match_kind(const char *url, int get, int post, char *id) {
  static const struct {
    const char *path;
    kolo_server_route_kind get, post;
  } fixed[] = {
      {"/healthz", KOLO_ROUTE_HEALTHZ, KOLO_ROUTE_NONE},
      {"/readyz", KOLO_ROUTE_READYZ, KOLO_ROUTE_NONE},
      {"/metrics", KOLO_ROUTE_METRICS, KOLO_ROUTE_NONE},
      {"/v1/stream", KOLO_ROUTE_STREAM, KOLO_ROUTE_NONE},
      {"/v1/jobs", KOLO_ROUTE_LIST_JOBS, KOLO_ROUTE_SUBMIT_JOB},
      {"/v1/workers", KOLO_ROUTE_LIST_WORKERS, KOLO_ROUTE_NONE},
      {"/v1/demand", KOLO_ROUTE_DEMAND, KOLO_ROUTE_NONE},
  };
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    if (strcmp(url, fixed[i].path) == 0)
      return get ? fixed[i].get : post ? fixed[i].post : KOLO_ROUTE_NONE;
  if (get && (strcmp(url, "/") == 0 || strcmp(url, "/ui") == 0 || strncmp(url, "/ui/", 4) == 0))
    return KOLO_ROUTE_UI;
  if (post && strncmp(url, "/v1/workers/", 12) == 0) return worker_route(url, id);
  if (strncmp(url, "/v1/jobs/", 9) == 0) return job_route(url, get, post, id);
  return KOLO_ROUTE_NONE;
}

void kolo_server_route_match(const char *method, const char *url, kolo_server_route *out) {
  memset(out, 0, sizeof *out);
  int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0,
      post = strcmp(method, "POST") == 0;
  out->kind = match_kind(url, get, post, out->id);
  if (out->kind == KOLO_ROUTE_NONE) {
    out->id[0] = '\0';
    const char *allow = kolo_server_route_methods(url);
    out->allow = allowed(allow, method) ? NULL : allow; /* allowed but unmatched: 404 */
  }
}

int kolo_server_route_public(kolo_server_route_kind kind) {
  return kind == KOLO_ROUTE_HEALTHZ || kind == KOLO_ROUTE_READYZ || kind == KOLO_ROUTE_UI;
}

/* ---- query arguments ---- */

static kolo_status refuse(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kolo_status refuse(char *err, size_t err_len, const char *fmt, ...) {
  if (err != NULL && err_len > 0) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, err_len, fmt, args);
    va_end(args);
  }
  return KOLO_ERR_INVALID_ARG;
}

int kolo_server_query_allowed(const char *names, const char *key, char *err, size_t err_len) {
  size_t n = strlen(key);
  for (const char *p = names; *p;) {
    size_t len = strcspn(p, " ");
    if (len == n && strncmp(p, key, n) == 0) return 1;
    p += len;
    while (*p == ' ') p++;
  }
  refuse(err, err_len, "%.64s: unknown query parameter", key);
  return 0;
}

static kolo_status add_label(Kolo__V1__ListJobsRequest *r, const char *value, char *err,
                             size_t err_len) {
  const char *eq = strchr(value, '=');
  Kolo__V1__ListJobsRequest__LabelsEntry **grown =
      realloc(r->labels, (r->n_labels + 1) * sizeof *grown);
  if (grown) r->labels = grown;
  if (eq == NULL || eq == value || grown == NULL)
    return refuse(err, err_len, "labels: expected label=key=value");
  Kolo__V1__ListJobsRequest__LabelsEntry *e = malloc(sizeof *e);
  if (e == NULL) return KOLO_ERR_NO_MEMORY;
  kolo__v1__list_jobs_request__labels_entry__init(e);
  e->key = strndup(value, (size_t)(eq - value));
  e->value = strdup(eq + 1);
  r->labels[r->n_labels++] = e;
  if (e->key == NULL || e->value == NULL) return KOLO_ERR_NO_MEMORY;
  return KOLO_OK;
}

kolo_status kolo_server_query_list_jobs(Kolo__V1__ListJobsRequest *r, const char *key,
                                        const char *value, char *err, size_t err_len) {
  if (value == NULL) value = "";
  if (!kolo_server_utf8_valid(key, strlen(key)) || !kolo_server_utf8_valid(value, strlen(value)))
    return refuse(err, err_len, "query: a parameter is not valid UTF-8");
  if (strcmp(key, "phase") == 0) {
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value_by_name(&kolo__v1__phase__descriptor, value);
    if (v == NULL) return refuse(err, err_len, "phase: unknown phase '%.64s'", value);
    r->phase = (Kolo__V1__Phase)v->value;
  } else if (strcmp(key, "label") == 0) {
    return add_label(r, value, err, err_len);
  } else if (strcmp(key, "page_size") == 0) {
    char *end;
    long n = strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || n < 0 || n > 1000)
      return refuse(err, err_len, "page_size: expected 0..1000");
    r->page_size = (uint32_t)n;
  } else if (strcmp(key, "page_token") == 0) {
    kolo_codec_set_string(&r->page_token, value);
  } else {
    return refuse(err, err_len, "%.64s: unknown query parameter", key);
  }
  return KOLO_OK;
}

static int query_u32(const char *value, uint32_t max, uint32_t *out) {
  if (value == NULL || *value < '0' || *value > '9') return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(value, &end, 10);
  if (*end != '\0' || errno == ERANGE || v > max) return 0;
  *out = (uint32_t)v;
  return 1;
}

kolo_status kolo_server_query_logs(Kolo__V1__StreamLogsRequest *req, uint32_t *ranks,
                                   size_t max_ranks, const char *key, const char *value, char *err,
                                   size_t err_len) {
  uint32_t v = 0;
  if (strcmp(key, "rank") == 0) {
    if (!query_u32(value, UINT32_MAX, &v) || req->n_ranks >= max_ranks)
      return refuse(err, err_len, "rank: expected at most %zu ranks, each a number", max_ranks);
    ranks[req->n_ranks++] = v;
  } else if (strcmp(key, "tail") == 0) {
    if (!query_u32(value, 1000000000u, &req->tail))
      return refuse(err, err_len, "tail: expected a number of lines (0 = all)");
  } else if (strcmp(key, "follow") == 0) {
    if (value && (strcmp(value, "1") == 0 || strcmp(value, "true") == 0))
      req->follow = 1;
    else if (value && (strcmp(value, "0") == 0 || strcmp(value, "false") == 0))
      req->follow = 0;
    else
      return refuse(err, err_len, "follow: expected 1 or 0");
  } else {
    return refuse(err, err_len, "%.64s: unknown query parameter", key);
  }
  return KOLO_OK;
}

kolo_status kolo_server_query_since_step(const char *value, uint64_t *out, char *err,
                                         size_t err_len) {
  char *end;
  errno = 0;
  unsigned long long n = strtoull(value, &end, 10);
  if (value[0] < '0' || value[0] > '9' || *end != '\0' || errno == ERANGE)
    return refuse(err, err_len, "since_step: expected a non-negative integer");
  *out = (uint64_t)n;
  return KOLO_OK;
}

kolo_status kolo_server_query_flag(const char *name, const char *value, int *out, char *err,
                                   size_t err_len) {
  *out = 0;
  if (value == NULL) return KOLO_OK;
  if (strcmp(value, "1") == 0 || strcmp(value, "true") == 0 || value[0] == '\0')
    *out = 1;
  else if (strcmp(value, "0") != 0 && strcmp(value, "false") != 0)
    return refuse(err, err_len, "%s: expected 1, true, 0 or false", name);
  return KOLO_OK;
}
