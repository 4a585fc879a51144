/* The etcd client's core: configuration, the per-thread error message, and the
 * request engine every call goes through (JSON POST over libcurl with a deadline,
 * endpoint failover, auth token attach/refresh, etcd error mapping). */
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "coordination/etcd_internal.h"

#define COMPONENT "etcd"
#define MAX_REPLY_BYTES (64u << 20)

/* The calling thread's last error text (documented in etcd.h). */
static _Thread_local char last_error[512];

const char *kolo_etcd_last_error(void) {
  return last_error[0] ? last_error : "no error";
}

kolo_status kolo_etcd_fail(kolo_status status, const char *fmt, ...) {
  /* Format into a copy first: the arguments may point into last_error itself. */
  char text[sizeof last_error];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  memcpy(last_error, text, sizeof text);
  KOLO_LOGD(COMPONENT, "%s: %s", kolo_status_name(status), last_error);
  return status;
}

int64_t kolo_etcd_now_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

kolo_etcd_bytes kolo_etcd_str(const char *text) {
  kolo_etcd_bytes bytes = {text, text ? strlen(text) : 0};
  return bytes;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_code = CURLE_OK;

/* libcurl's global init must run once before any handle; pthread_once makes that
 * safe when several clients are created concurrently. */
static void curl_init_once(void) {
  curl_init_code = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static char *dup_or_null(const char *text) {
  return text ? strdup(text) : NULL;
}

/* Sets h's timeouts and limits from tuning (NULL or 0 = the defaults). */
static void tune(kolo_etcd *h, const kolo_etcd_config *tuning) {
  kolo_etcd_config none = {0};
  if (tuning == NULL) tuning = &none;
  h->request_timeout_ms = tuning->request_timeout_ms ? tuning->request_timeout_ms : 5000;
  h->connect_timeout_ms = tuning->connect_timeout_ms ? tuning->connect_timeout_ms : 1000;
  h->watch_idle_ms = tuning->watch_idle_ms ? tuning->watch_idle_ms : 15000;
  h->max_value_bytes = tuning->max_value_bytes ? tuning->max_value_bytes : (1u << 20);
}

static void core_free(kolo_etcd_core *c) {
  for (size_t i = 0; i < c->pool_count; i++) curl_easy_cleanup(c->pool[i]);
  free(c->pool);
  if (c->endpoints)
    for (size_t i = 0; i < c->endpoint_count; i++) free(c->endpoints[i]);
  free(c->endpoints);
  free(c->ca_file);
  free(c->cert_file);
  free(c->key_file);
  free(c->user);
  if (c->password) memset(c->password, 0, strlen(c->password));
  free(c->password);
  free(c->token);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* The shared part of a new client, or NULL when out of memory. */
static kolo_etcd_core *core_create(const kolo_etcd_config *config) {
  kolo_etcd_core *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  pthread_mutex_init(&c->lock, NULL);
  atomic_init(&c->handles, 1);
  c->endpoints = calloc(config->endpoint_count, sizeof *c->endpoints);
  if (c->endpoints == NULL) goto nomem;
  c->endpoint_count = config->endpoint_count;
  for (size_t i = 0; i < config->endpoint_count; i++) {
    /* Stored without a trailing slash so "<endpoint>/v3/..." is well formed. */
    c->endpoints[i] = strdup(config->endpoints[i]);
    if (c->endpoints[i] == NULL) goto nomem;
    size_t n = strlen(c->endpoints[i]);
    while (n > 0 && c->endpoints[i][n - 1] == '/') c->endpoints[i][--n] = '\0';
  }
  c->ca_file = dup_or_null(config->ca_file);
  c->cert_file = dup_or_null(config->cert_file);
  c->key_file = dup_or_null(config->key_file);
  c->user = dup_or_null(config->user);
  c->password = dup_or_null(config->password);
  if ((config->ca_file && !c->ca_file) || (config->cert_file && !c->cert_file) ||
      (config->key_file && !c->key_file) || (config->user && !c->user) ||
      (config->password && !c->password))
    goto nomem;
  return c;
nomem:
  core_free(c);
  return NULL;
}

kolo_status kolo_etcd_create(const kolo_etcd_config *config, kolo_etcd **out) {
  *out = NULL;
  if (config == NULL || config->endpoints == NULL || config->endpoint_count == 0)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "etcd client needs at least one endpoint");
  for (size_t i = 0; i < config->endpoint_count; i++) {
    const char *e = config->endpoints[i];
    if (e == NULL || (strncmp(e, "http://", 7) != 0 && strncmp(e, "https://", 8) != 0 &&
                      strncmp(e, "unix:///", 8) != 0))
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                            "etcd endpoint '%s' is not an http://, https:// or unix:/// URL",
                            e ? e : "(null)");
  }
  if ((config->user == NULL) != (config->password == NULL))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "etcd auth needs both user and password");
  if (config->request_timeout_ms < 0 || config->connect_timeout_ms < 0 || config->watch_idle_ms < 0)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "etcd timeouts must not be negative");
  pthread_once(&curl_once, curl_init_once);
  if (curl_init_code != CURLE_OK)
    return kolo_etcd_fail(KOLO_ERR_INTERNAL, "curl_global_init failed: %s",
                          curl_easy_strerror(curl_init_code));
  kolo_etcd *h = calloc(1, sizeof *h);
  if (h != NULL) h->core = core_create(config);
  if (h == NULL || h->core == NULL) {
    free(h);
    return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory creating the etcd client");
  }
  tune(h, config);
  *out = h;
  return KOLO_OK;
}

kolo_status kolo_etcd_share(kolo_etcd *client, const kolo_etcd_config *tuning, kolo_etcd **out) {
  *out = NULL;
  if (client == NULL) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "no etcd client to share");
  if (tuning != NULL && (tuning->request_timeout_ms < 0 || tuning->connect_timeout_ms < 0 ||
                         tuning->watch_idle_ms < 0))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "etcd timeouts must not be negative");
  kolo_etcd *h = calloc(1, sizeof *h);
  if (h == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory sharing the etcd client");
  h->core = client->core;
  atomic_fetch_add(&h->core->handles, 1);
  tune(h, tuning);
  *out = h;
  return KOLO_OK;
}

void kolo_etcd_destroy(kolo_etcd *h) {
  if (h == NULL) return;
  if (atomic_fetch_sub(&h->core->handles, 1) == 1) core_free(h->core);
  free(h);
}

int kolo_etcd_request_timeout_ms(const kolo_etcd *c) {
  return c->request_timeout_ms;
}

const char *kolo_etcd_endpoint(const kolo_etcd *c, size_t i) {
  return c->core->endpoints[i % c->core->endpoint_count];
}

/* ---- counters ---- */

const char *kolo_etcd_request_kind_name(kolo_etcd_request_kind kind) {
  static const char *const names[KOLO_ETCD_REQUEST_KINDS] = {"range", "txn",  "put",  "delete",
                                                             "lease", "auth", "other"};
  return (unsigned)kind < KOLO_ETCD_REQUEST_KINDS ? names[kind] : "other";
}

/* The kind of a request by its gateway path. */
static kolo_etcd_request_kind kind_of(const char *path) {
  if (strcmp(path, "kv/range") == 0) return KOLO_ETCD_REQ_RANGE;
  if (strcmp(path, "kv/txn") == 0) return KOLO_ETCD_REQ_TXN;
  if (strcmp(path, "kv/put") == 0) return KOLO_ETCD_REQ_PUT;
  if (strcmp(path, "kv/deleterange") == 0) return KOLO_ETCD_REQ_DELETE;
  if (strncmp(path, "lease/", 6) == 0) return KOLO_ETCD_REQ_LEASE;
  if (strncmp(path, "auth/", 5) == 0) return KOLO_ETCD_REQ_AUTH;
  return KOLO_ETCD_REQ_OTHER;
}

static void count_request(kolo_etcd *h, const char *path) {
  kolo_etcd_request_kind kind = kind_of(path);
  atomic_fetch_add(&h->requests[kind], 1);
  atomic_fetch_add(&h->core->requests[kind], 1);
}

void kolo_etcd_count_watch(kolo_etcd *h, int started, int running_delta) {
  atomic_fetch_add(&h->watches_started, (uint_fast64_t)started);
  atomic_fetch_add(&h->core->watches_started, (uint_fast64_t)started);
  atomic_fetch_add(&h->watches_running, running_delta);
  atomic_fetch_add(&h->core->watches_running, running_delta);
}

void kolo_etcd_note_write(kolo_etcd *h, int64_t revision) {
  long long seen = atomic_load(&h->written_revision);
  while (revision > seen && !atomic_compare_exchange_weak(&h->written_revision, &seen, revision)) {
  }
}

int64_t kolo_etcd_written_revision(const kolo_etcd *h) {
  return atomic_load(&((kolo_etcd *)h)->written_revision);
}

void kolo_etcd_stats_get(const kolo_etcd *client, int whole_client, kolo_etcd_stats *out) {
  kolo_etcd *h = (kolo_etcd *)client;
  memset(out, 0, sizeof *out);
  for (int k = 0; k < KOLO_ETCD_REQUEST_KINDS; k++)
    out->requests[k] =
        whole_client ? atomic_load(&h->core->requests[k]) : atomic_load(&h->requests[k]);
  out->watches_started =
      whole_client ? atomic_load(&h->core->watches_started) : atomic_load(&h->watches_started);
  out->watches_running =
      whole_client ? atomic_load(&h->core->watches_running) : atomic_load(&h->watches_running);
  out->handles = atomic_load(&h->core->handles);
}

/* ---- curl handle pool: reusing handles keeps their HTTP connections open. ---- */

static CURL *pool_take(kolo_etcd_core *c) {
  CURL *h = NULL;
  pthread_mutex_lock(&c->lock);
  if (c->pool_count > 0) h = c->pool[--c->pool_count];
  pthread_mutex_unlock(&c->lock);
  return h ? h : curl_easy_init();
}

static void pool_give(kolo_etcd_core *c, CURL *h) {
  curl_easy_reset(h);
  pthread_mutex_lock(&c->lock);
  if (c->pool_count == c->pool_cap && c->pool_cap < 16) {
    size_t cap = c->pool_cap ? c->pool_cap * 2 : 4;
    void **grown = realloc(c->pool, cap * sizeof *grown);
    if (grown) {
      c->pool = grown;
      c->pool_cap = cap;
    }
  }
  if (c->pool_count < c->pool_cap) {
    c->pool[c->pool_count++] = h;
    h = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  if (h) curl_easy_cleanup(h);
}

/* ---- errors ---- */

kolo_status kolo_etcd_error_status(int code, const char *message) {
  const char *m = message ? message : "";
  if (strstr(m, "too large")) return KOLO_ERR_TOO_LARGE;
  if (strstr(m, "user name is empty") || strstr(m, "permission denied")) return KOLO_ERR_AUTH;
  switch (code) {
    case 1:
      return KOLO_ERR_ABORTED;
    case 2:
      return strstr(m, "timed out") ? KOLO_ERR_TIMEOUT : KOLO_ERR_INTERNAL;
    case 3:
      return KOLO_ERR_INVALID_ARG;
    case 4:
      return KOLO_ERR_TIMEOUT;
    case 5:
      return KOLO_ERR_NOT_FOUND;
    case 6:
      return KOLO_ERR_EXISTS;
    case 7:
      return KOLO_ERR_AUTH;
    case 8:
      return KOLO_ERR_TOO_LARGE;
    case 9:
      return KOLO_ERR_STATE;
    case 10:
      return KOLO_ERR_ABORTED;
    case 11:
      return strstr(m, "compacted") ? KOLO_ERR_NOT_FOUND : KOLO_ERR_INVALID_ARG;
    case 12:
      return KOLO_ERR_UNSUPPORTED;
    case 14:
      return KOLO_ERR_UNAVAILABLE;
    case 16:
      return KOLO_ERR_AUTH;
    default:
      return KOLO_ERR_INTERNAL;
  }
}

/* ---- auth ---- */

void kolo_etcd_auth_invalidate(kolo_etcd *h) {
  kolo_etcd_core *c = h->core;
  pthread_mutex_lock(&c->lock);
  free(c->token);
  c->token = NULL;
  pthread_mutex_unlock(&c->lock);
}

/* auth/authenticate: trades user/password for a token. */
static kolo_status authenticate(kolo_etcd *h, int timeout_ms, const atomic_int *cancel) {
  kolo_etcd_core *c = h->core;
  json_t *body = json_pack("{s:s, s:s}", "name", c->user, "password", c->password);
  json_t *reply = NULL;
  if (body == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  kolo_status rc = kolo_etcd_call(h, "auth/authenticate", body, timeout_ms,
                                  KOLO_ETCD_IDEMPOTENT | KOLO_ETCD_NO_AUTH, cancel, &reply);
  json_decref(body);
  if (rc != KOLO_OK) {
    if (rc == KOLO_ERR_AUTH || rc == KOLO_ERR_INVALID_ARG || rc == KOLO_ERR_STATE)
      return kolo_etcd_fail(KOLO_ERR_AUTH, "etcd authentication as '%s' failed: %s", c->user,
                            kolo_etcd_last_error());
    return rc;
  }
  const char *token = json_string_value(json_object_get(reply, "token"));
  if (token == NULL || token[0] == '\0') {
    json_decref(reply);
    return kolo_etcd_fail(KOLO_ERR_PROTOCOL, "etcd auth/authenticate reply has no token");
  }
  char *copy = strdup(token);
  json_decref(reply);
  if (copy == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  pthread_mutex_lock(&c->lock);
  free(c->token);
  c->token = copy;
  pthread_mutex_unlock(&c->lock);
  return KOLO_OK;
}

kolo_status kolo_etcd_auth_header(kolo_etcd *h, char *buf, size_t size, int timeout_ms,
                                  const atomic_int *cancel) {
  kolo_etcd_core *c = h->core;
  buf[0] = '\0';
  if (c->user == NULL) return KOLO_OK;
  pthread_mutex_lock(&c->lock);
  int have = c->token != NULL;
  pthread_mutex_unlock(&c->lock);
  if (!have) {
    kolo_status rc = authenticate(h, timeout_ms, cancel);
    if (rc != KOLO_OK) return rc;
  }
  pthread_mutex_lock(&c->lock);
  if (c->token) snprintf(buf, size, "Authorization: %s", c->token);
  pthread_mutex_unlock(&c->lock);
  return KOLO_OK;
}

/* ---- the request engine ---- */

typedef struct reply_buffer {
  char *data;
  size_t len;
  size_t cap;
  int overflow;
} reply_buffer;

static size_t on_reply_data(char *ptr, size_t size, size_t nmemb, void *userdata) {
  reply_buffer *b = userdata;
  size_t n = size * nmemb;
  if (b->len + n + 1 > MAX_REPLY_BYTES) {
    b->overflow = 1;
    return 0;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n + 1) cap *= 2;
    char *grown = realloc(b->data, cap);
    if (grown == NULL) return 0;
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, ptr, n);
  b->len += n;
  b->data[b->len] = '\0';
  return n;
}

/* Runs a transfer that cancel can abort: through a multi handle polled every
 * 50 ms, so a keep-alive stopping mid-request waits at most that long. */
static CURLcode perform_cancellable(CURL *h, const atomic_int *cancel) {
  CURLM *multi = curl_multi_init();
  if (multi == NULL) return CURLE_OUT_OF_MEMORY;
  CURLcode result = CURLE_ABORTED_BY_CALLBACK;
  curl_multi_add_handle(multi, h);
  int running = 1;
  while (!atomic_load(cancel)) {
    if (curl_multi_perform(multi, &running) != CURLM_OK) {
      result = CURLE_RECV_ERROR;
      break;
    }
    if (!running) {
      int pending;
      CURLMsg *msg;
      result = CURLE_RECV_ERROR;
      while ((msg = curl_multi_info_read(multi, &pending)) != NULL)
        if (msg->msg == CURLMSG_DONE) result = msg->data.result;
      break;
    }
    curl_multi_poll(multi, NULL, 0, 50, NULL);
  }
  curl_multi_remove_handle(multi, h);
  curl_multi_cleanup(multi);
  return result;
}

/* Whether a transport failure happened before the request could have reached etcd,
 * so that sending it to another endpoint cannot apply it twice. */
static int failed_before_sending(CURLcode code, CURL *h) {
  if (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
      code == CURLE_COULDNT_RESOLVE_PROXY || code == CURLE_SSL_CONNECT_ERROR)
    return 1;
  if (code == CURLE_OPERATION_TIMEDOUT) {
    /* Nothing was sent if the transfer never got past connecting. */
    curl_off_t pretransfer_us = 0;
    curl_easy_getinfo(h, CURLINFO_PRETRANSFER_TIME_T, &pretransfer_us);
    return pretransfer_us == 0;
  }
  return 0;
}

/* Applies the TLS settings of the client to a handle. */
void kolo_etcd_set_url(void *handle, const char *endpoint, const char *path) {
  char url[1024];
  int unix_socket = strncmp(endpoint, "unix://", 7) == 0;
  snprintf(url, sizeof url, "%s/v3/%s", unix_socket ? "http://localhost" : endpoint, path);
  curl_easy_setopt(handle, CURLOPT_URL, url);
  /* a pooled handle keeps its options: the socket path is set or cleared every time */
  curl_easy_setopt(handle, CURLOPT_UNIX_SOCKET_PATH, unix_socket ? endpoint + 7 : NULL);
}

void kolo_etcd_apply_tls(const kolo_etcd *client, void *handle) {
  const kolo_etcd_core *c = client->core;
  CURL *h = handle;
  if (c->ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
  if (c->cert_file) curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
  if (c->key_file) curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
}

/* Parses an HTTP reply: an etcd error object becomes a status, other JSON objects
 * are returned. */
static kolo_status parse_reply(const char *path, const char *endpoint, long http_status,
                               reply_buffer *b, json_t **reply, int *grpc_code) {
  json_error_t error;
  *grpc_code = 0;
  json_t *json = json_loadb(b->data ? b->data : "", b->len, 0, &error);
  if (json == NULL || !json_is_object(json)) {
    json_decref(json);
    if (http_status != 200)
      return kolo_etcd_fail(KOLO_ERR_PROTOCOL, "etcd %s at %s: HTTP %ld with a non-JSON body", path,
                            endpoint, http_status);
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd %s at %s: malformed JSON reply: %s", path, endpoint,
                          json ? "not an object" : error.text);
  }
  json_t *err = json_object_get(json, "error");
  if (err != NULL || http_status != 200) {
    json_t *code = json_object_get(json, "code");
    json_t *message = json_object_get(json, "message");
    const char *text = json_string_value(message);
    if (text == NULL) text = json_string_value(err);
    if (text == NULL) text = "(no message)";
    *grpc_code = json_is_integer(code) ? (int)json_integer_value(code) : 2;
    kolo_status st = kolo_etcd_error_status(*grpc_code, text);
    kolo_etcd_fail(st, "etcd %s at %s: %s (HTTP %ld, code %d)", path, endpoint, text, http_status,
                   *grpc_code);
    json_decref(json);
    return st;
  }
  *reply = json;
  return KOLO_OK;
}

/* Copies src into dst (size bytes), truncating; always NUL-terminates. */
static void copy_text(char *dst, size_t size, const char *src) {
  if (size == 0) return;
  size_t n = strnlen(src, size - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

kolo_status kolo_etcd_call(kolo_etcd *client, const char *path, json_t *body, int timeout_ms,
                           int flags, const atomic_int *cancel, json_t **reply) {
  kolo_etcd_core *c = client->core;
  *reply = NULL;
  char *text = json_dumps(body, JSON_COMPACT);
  if (text == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "cannot serialize etcd request");
  int64_t deadline =
      kolo_etcd_now_ms() + (timeout_ms > 0 ? timeout_ms : client->request_timeout_ms);
  kolo_status rc = KOLO_ERR_UNAVAILABLE;
  int auth_retried = 0;
again:;
  char auth[1024] = "";
  if (!(flags & KOLO_ETCD_NO_AUTH)) {
    /* Logging in spends the same deadline as the request itself. */
    int64_t left = deadline - kolo_etcd_now_ms();
    if (left <= 0) {
      rc = kolo_etcd_fail(KOLO_ERR_TIMEOUT, "etcd %s: deadline passed while authenticating", path);
      goto out;
    }
    rc = kolo_etcd_auth_header(client, auth, sizeof auth, (int)left, cancel);
    if (rc != KOLO_OK) goto out;
  }
  size_t start = atomic_load(&c->current);
  char first_error[256] = "";
  for (size_t k = 0; k < c->endpoint_count; k++) {
    size_t index = (start + k) % c->endpoint_count;
    const char *endpoint = c->endpoints[index];
    int64_t remaining = deadline - kolo_etcd_now_ms();
    if (remaining <= 0) {
      rc = kolo_etcd_fail(KOLO_ERR_TIMEOUT, "etcd %s: no answer within the deadline (%s)", path,
                          first_error[0] ? first_error : "no endpoint tried");
      break;
    }
    CURL *h = pool_take(c);
    if (h == NULL) {
      rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "curl_easy_init failed");
      break;
    }
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Expect:");
    if (auth[0]) headers = curl_slist_append(headers, auth);
    reply_buffer b = {0};
    char curl_error[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_error);
    kolo_etcd_set_url(h, endpoint, path);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_reply_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)remaining);
    curl_easy_setopt(
        h, CURLOPT_CONNECTTIMEOUT_MS,
        (long)(remaining < client->connect_timeout_ms ? remaining : client->connect_timeout_ms));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    kolo_etcd_apply_tls(client, h);
    count_request(client, path);
    CURLcode code = cancel ? perform_cancellable(h, cancel) : curl_easy_perform(h);
    long http_status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http_status);
    int retry_elsewhere = 0;
    if (code == CURLE_OK) {
      atomic_store(&c->current, index);
      int grpc_code = 0;
      rc = parse_reply(path, endpoint, http_status, &b, reply, &grpc_code);
      /* Retry an idempotent request elsewhere when this member cannot serve it. */
      if (rc == KOLO_ERR_UNAVAILABLE && (flags & KOLO_ETCD_IDEMPOTENT)) retry_elsewhere = 1;
      if (rc == KOLO_ERR_AUTH && grpc_code == 16 && c->user && !(flags & KOLO_ETCD_NO_AUTH) &&
          !auth_retried) {
        /* The token expired (or etcd restarted): authenticate again, once. */
        auth_retried = 1;
        free(b.data);
        curl_slist_free_all(headers);
        pool_give(c, h);
        kolo_etcd_auth_invalidate(client);
        goto again;
      }
    } else if (code == CURLE_ABORTED_BY_CALLBACK) {
      rc = kolo_etcd_fail(KOLO_ERR_ABORTED, "etcd %s at %s: cancelled", path, endpoint);
    } else if (b.overflow) {
      rc = kolo_etcd_fail(KOLO_ERR_TOO_LARGE, "etcd %s at %s: reply larger than %u bytes", path,
                          endpoint, MAX_REPLY_BYTES);
    } else {
      int before = failed_before_sending(code, h);
      retry_elsewhere = before || (flags & KOLO_ETCD_IDEMPOTENT);
      if (code == CURLE_OPERATION_TIMEDOUT && (!before || kolo_etcd_now_ms() >= deadline))
        rc = kolo_etcd_fail(KOLO_ERR_TIMEOUT, "etcd %s at %s: no reply within the deadline", path,
                            endpoint);
      else
        rc = kolo_etcd_fail(KOLO_ERR_UNAVAILABLE, "etcd unavailable: %s at %s: %s%s%s%s", path,
                            endpoint, curl_easy_strerror(code), curl_error[0] ? " (" : "",
                            curl_error, curl_error[0] ? ")" : "");
      if (first_error[0] == '\0') copy_text(first_error, sizeof first_error, last_error);
    }
    free(b.data);
    curl_slist_free_all(headers);
    pool_give(c, h);
    if (!retry_elsewhere) break;
    if (c->endpoint_count > 1)
      KOLO_LOGD(COMPONENT, "failing over from %s: %s", endpoint, kolo_etcd_last_error());
  }
  if (rc != KOLO_OK && c->endpoint_count > 1 && first_error[0] &&
      strcmp(first_error, last_error) != 0 && rc != KOLO_ERR_TIMEOUT) {
    char both[sizeof last_error];
    copy_text(both, sizeof both, last_error);
    size_t used = strlen(both);
    copy_text(both + used, sizeof both - used, "; first: ");
    used = strlen(both);
    copy_text(both + used, sizeof both - used, first_error);
    kolo_etcd_fail(rc, "%s", both);
  }
out:
  free(text);
  return rc;
}
