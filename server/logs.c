/* Implementation of logs.h. Each stream's thread owns its curl multi handle and its
 * sources (one per worker of the job, never freed before the stream, so consumers may
 * read a source's worker id from a queued line); the queue between that thread and the
 * consumer is under the stream's mutex. Records from an agent are parsed as they arrive
 * (worker/agent/logserver.h gives the format). */
#define _GNU_SOURCE
#include "server/logs.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "coordination/etcd.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "coordination/ringspec.h"
#include "server/job_model.h"
#include "server/service.h"

#define LOG "logs"
#define MAX_SOURCES 1024
#define RECORD_MAX (16384 + 512)
#define REFRESH_MS 1000
#define RETRY_MS 1000
#define FINAL_GRACE_MS 30000
#define MAX_FAILURES 3
#define POLL_MS 200

struct kolo_server_logs {
  kolo_server_logs_config cfg;
  pthread_mutex_t lock;
  int streams;
};

typedef struct item {
  struct item *next;
  uint32_t rank;
  uint64_t epoch;
  int notice;
  size_t source;
  size_t len;
  char text[];
} item;

typedef enum src_state { SRC_NEW, SRC_RUNNING, SRC_WAIT, SRC_DONE, SRC_GONE } src_state;
typedef enum src_end { END_NOTHING = 0, END_DONE, END_NONE } src_end;

typedef struct source {
  kolo_server_logstream *stream;
  size_t index;
  char worker[129];
  src_state state;
  int64_t retry_at;
  int has_cursor;
  uint64_t seq, offset;
  int64_t done_epoch;
  int failures;
  CURL *easy;
  struct curl_slist *headers;
  char *rec;
  size_t rec_len;
  int paused;
  src_end end;
  int protocol_error;
  char last_notice[256];
} source;

struct kolo_server_logstream {
  kolo_server_logs *logs;
  char job[64];
  uint32_t ranks[KOLO_SERVER_LOGS_MAX_RANKS];
  size_t n_ranks;
  uint32_t tail;
  int follow;
  kolo_server_logstream_notify notify;
  void *arg;
  pthread_t thread;
  int thread_started;
  CURLM *multi;
  atomic_int stop;
  atomic_int watch_fd;
  source *sources[MAX_SOURCES];
  size_t n_sources;
  /* the queue, under lock */
  pthread_mutex_t lock;
  item *head, *last;
  size_t queued_bytes;
  int want_notify, ended;
  kolo_status end_rc;
  char end_message[256];
  int64_t last_take_ms;
  /* the consumer's formatted text not yet handed out */
  char *text;
  size_t text_len, text_sent, text_cap;
  /* the thread's view of the job */
  int64_t job_epoch;
  int job_final;
  int64_t final_at;
};

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

kolo_status kolo_server_logs_create(const kolo_server_logs_config *cfg, kolo_server_logs **out) {
  if (cfg == NULL || cfg->store == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_server_logs *logs = calloc(1, sizeof *logs);
  if (logs == NULL) return KOLO_ERR_NO_MEMORY;
  logs->cfg = *cfg;
  if (logs->cfg.max_streams <= 0) logs->cfg.max_streams = 64;
  if (logs->cfg.buffer_bytes == 0) logs->cfg.buffer_bytes = 256 * 1024;
  if (logs->cfg.stall_ms <= 0) logs->cfg.stall_ms = 120000;
  pthread_mutex_init(&logs->lock, NULL);
  *out = logs;
  return KOLO_OK;
}

void kolo_server_logs_destroy(kolo_server_logs *logs) {
  if (logs == NULL) return;
  pthread_mutex_destroy(&logs->lock);
  free(logs);
}

/* ---- the queue ---- */

static void push_item(kolo_server_logstream *s, item *it) {
  pthread_mutex_lock(&s->lock);
  if (s->last)
    s->last->next = it;
  else
    s->head = it;
  s->last = it;
  s->queued_bytes += it->len + sizeof *it;
  int notify = s->want_notify;
  s->want_notify = 0;
  pthread_mutex_unlock(&s->lock);
  if (notify) s->notify(s->arg);
}

static void queue_line(source *src, uint32_t rank, uint64_t epoch, const char *text, size_t len,
                       int notice) {
  item *it = malloc(sizeof *it + len);
  if (it == NULL) return;
  *it = (item){NULL, rank, epoch, notice, src->index, len};
  memcpy(it->text, text, len);
  push_item(src->stream, it);
}

static void notice(source *src, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notice(source *src, const char *fmt, ...) {
  char text[256];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  if (strcmp(text, src->last_notice) == 0) return; /* said already */
  snprintf(src->last_notice, sizeof src->last_notice, "%s", text);
  queue_line(src, 0, 0, text, strlen(text), 1);
}

/* Pops items up to max_bytes of text (at least one); NULL if none. */
static item *pop_items(kolo_server_logstream *s, size_t max_bytes,
                       kolo_server_logstream_state *state) {
  pthread_mutex_lock(&s->lock);
  item *first = s->head;
  if (first == NULL) {
    *state = s->ended ? KOLO_SERVER_LOGS_END : KOLO_SERVER_LOGS_EMPTY;
    if (!s->ended) s->want_notify = 1;
    pthread_mutex_unlock(&s->lock);
    return NULL;
  }
  size_t bytes = 0;
  item *it = first, *prev = NULL;
  while (it && (prev == NULL || bytes + it->len + 64 <= max_bytes)) {
    bytes += it->len + 64;
    s->queued_bytes -= it->len + sizeof *it;
    prev = it;
    it = it->next;
  }
  prev->next = NULL;
  s->head = it;
  if (it == NULL) s->last = NULL;
  s->last_take_ms = mono_ms();
  pthread_mutex_unlock(&s->lock);
  *state = KOLO_SERVER_LOGS_DATA;
  if (s->multi) curl_multi_wakeup(s->multi); /* paused transfers may go on */
  return first;
}

static void free_items(item *it) {
  while (it) {
    item *next = it->next;
    free(it);
    it = next;
  }
}

kolo_server_logstream_state kolo_server_logstream_take_chunk(kolo_server_logstream *s,
                                                             size_t max_bytes, uint8_t **packed,
                                                             size_t *len) {
  kolo_server_logstream_state state;
  *packed = NULL;
  *len = 0;
  item *items = pop_items(s, max_bytes, &state);
  if (items == NULL) return state;
  size_t n = 0;
  for (item *it = items; it; it = it->next) n++;
  Kolo__V1__LogChunk chunk = KOLO__V1__LOG_CHUNK__INIT;
  Kolo__V1__LogLine *lines = calloc(n, sizeof *lines);
  Kolo__V1__LogLine **ptrs = calloc(n, sizeof *ptrs);
  if (lines && ptrs) {
    size_t i = 0;
    for (item *it = items; it; it = it->next, i++) {
      kolo__v1__log_line__init(&lines[i]);
      lines[i].rank = it->rank;
      lines[i].epoch = it->epoch;
      lines[i].worker_id = s->sources[it->source]->worker;
      lines[i].text.data = (uint8_t *)it->text;
      lines[i].text.len = it->len;
      lines[i].notice = it->notice;
      ptrs[i] = &lines[i];
    }
    chunk.n_lines = n;
    chunk.lines = ptrs;
    *len = kolo__v1__log_chunk__get_packed_size(&chunk);
    *packed = malloc(*len + 1);
    if (*packed) kolo__v1__log_chunk__pack(&chunk, *packed);
  }
  free(lines);
  free(ptrs);
  free_items(items);
  return *packed ? KOLO_SERVER_LOGS_DATA : KOLO_SERVER_LOGS_EMPTY;
}

static void text_append(kolo_server_logstream *s, const char *data, size_t len) {
  if (len == 0) return;
  if (s->text_len + len > s->text_cap) {
    size_t cap = (s->text_len + len) * 2;
    char *grown = realloc(s->text, cap);
    if (grown == NULL) return;
    s->text = grown;
    s->text_cap = cap;
  }
  memcpy(s->text + s->text_len, data, len);
  s->text_len += len;
}

kolo_server_logstream_state kolo_server_logstream_take_text(kolo_server_logstream *s, char *buf,
                                                            size_t cap, size_t *len) {
  *len = 0;
  if (s->text_sent == s->text_len) {
    kolo_server_logstream_state state;
    item *items = pop_items(s, cap, &state);
    if (items == NULL) return state;
    s->text_len = s->text_sent = 0;
    for (item *it = items; it; it = it->next) {
      char head[48];
      int n = it->notice        ? snprintf(head, sizeof head, "[kolo] ")
              : s->n_ranks == 1 ? 0
                                : snprintf(head, sizeof head, "[%" PRIu32 "] ", it->rank);
      text_append(s, head, (size_t)n);
      text_append(s, it->text, it->len);
      text_append(s, "\n", 1);
    }
    free_items(items);
  }
  size_t n = s->text_len - s->text_sent;
  if (n > cap) n = cap;
  memcpy(buf, s->text + s->text_sent, n);
  s->text_sent += n;
  *len = n;
  return KOLO_SERVER_LOGS_DATA;
}

kolo_status kolo_server_logstream_end_status(kolo_server_logstream *s, char *message, size_t len) {
  pthread_mutex_lock(&s->lock);
  kolo_status rc = s->ended ? s->end_rc : KOLO_OK;
  if (message && len) snprintf(message, len, "%s", s->end_message);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* ---- one worker's transfer ---- */

static void handle_record(source *src, char *rec, size_t len) {
  rec[len] = '\0';
  if (len >= 2 && rec[0] == 'L' && rec[1] == ' ') {
    char *p = rec + 2, *end;
    uint64_t v[4];
    for (int i = 0; i < 4; i++) {
      v[i] = strtoull(p, &end, 10);
      if (end == p || *end != ' ') {
        src->protocol_error = 1;
        return;
      }
      p = end + 1;
    }
    src->seq = v[0];
    src->offset = v[1];
    src->has_cursor = 1;
    src->failures = 0;
    queue_line(src, (uint32_t)v[3], v[2], p, len - (size_t)(p - rec), 0);
  } else if (len >= 1 && rec[0] == 'G') {
    src->last_notice[0] = '\0';
    notice(src,
           "worker %s deleted some earlier output of this job (it keeps at most --log-job-size per "
           "job)",
           src->worker);
  } else if (len == 1 && rec[0] == 'H') {
    src->failures = 0;
  } else if (strcmp(rec, "E done") == 0) {
    src->end = END_DONE;
  } else if (strcmp(rec, "E none") == 0) {
    src->end = END_NONE;
  } else {
    src->protocol_error = 1;
  }
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg) {
  source *src = arg;
  kolo_server_logstream *s = src->stream;
  size_t n = size * nmemb;
  pthread_mutex_lock(&s->lock);
  int full = s->queued_bytes >= s->logs->cfg.buffer_bytes;
  pthread_mutex_unlock(&s->lock);
  if (full) {
    src->paused = 1;
    return CURL_WRITEFUNC_PAUSE;
  }
  size_t left = n;
  while (left > 0 && !src->protocol_error) {
    char *nl = memchr(data, '\n', left);
    size_t piece = nl ? (size_t)(nl - data) : left;
    if (src->rec_len + piece >= RECORD_MAX) {
      src->protocol_error = 1;
      break;
    }
    memcpy(src->rec + src->rec_len, data, piece);
    src->rec_len += piece;
    if (nl == NULL) break;
    handle_record(src, src->rec, src->rec_len);
    src->rec_len = 0;
    data += piece + 1;
    left -= piece + 1;
  }
  return src->protocol_error ? 0 : n;
}

/* The store's records under prefix as its watch-fed view holds them now (no etcd read). */
static kolo_status view_records(kolo_server_logstream *s, const char *prefix,
                                kolo_etcd_range_result *out) {
  const char *prefixes[1] = {prefix};
  return kolo_server_store_read_records(s->logs->cfg.store, prefixes, 1, 0, 0, out, NULL, NULL);
}

/* Whether url and token are fit to put in a request: http(s)://host:port of URL characters,
 * and a token of letters and digits, each fitting its buffer. */
static int endpoint_ok(const char *u, size_t url_len, const char *t, size_t token_len) {
  return u && t && (strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0) &&
         strlen(u) < url_len && strlen(t) < token_len &&
         strspn(u, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.:/[]-_") ==
             strlen(u) &&
         strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == strlen(t);
}

/* logs_url and logs_token of a worker from its record (the view's copy, decoded by
 * coordination/membership.h); 0 if it has none. */
static int worker_endpoint(kolo_server_logstream *s, const char *worker, char *url, size_t url_len,
                           char *token, size_t token_len) {
  char key[256];
  if (kolo_keys_worker(worker, key, sizeof key) != KOLO_OK) return -1;
  kolo_etcd_range_result r;
  if (view_records(s, key, &r) != KOLO_OK) return -1;
  int found = 0;
  for (size_t i = 0; i < r.count && !found; i++) {
    if (strcmp((const char *)r.kvs[i].key, key) != 0) continue; /* w1 also finds w10 */
    Kolo__V1__WorkerRecord *m = NULL;
    char err[256];
    if (kolo_member_read((const char *)r.kvs[i].value, r.kvs[i].value_len, &m, err, sizeof err) !=
        KOLO_OK) {
      KOLO_LOGW(LOG, "%s: %s", key, err);
      continue;
    }
    if (endpoint_ok(m->logs_url, url_len, m->logs_token, token_len)) {
      snprintf(url, url_len, "%s", m->logs_url);
      snprintf(token, token_len, "%s", m->logs_token);
      found = 1;
    }
    protobuf_c_message_free_unpacked(&m->base, NULL);
  }
  kolo_etcd_range_result_free(&r);
  return found;
}

/* Tries src again after delay_ms while a followed job runs; otherwise a failed transfer
 * (not a missing worker) gets a few quick retries. */
static void retry_later(kolo_server_logstream *s, source *src, int64_t delay_ms, int transient) {
  int again = (s->follow && !s->job_final) || (transient && src->failures < MAX_FAILURES);
  src->state = again ? SRC_WAIT : SRC_GONE;
  src->retry_at = mono_ms() + delay_ms;
}

static void start_source(kolo_server_logstream *s, source *src) {
  char base[300], token[160];
  int found = worker_endpoint(s, src->worker, base, sizeof base, token, sizeof token);
  if (found <= 0) {
    src->failures++;
    notice(src,
           found < 0 ? "the logs of worker %s cannot be looked up now (etcd unavailable)"
                     : "worker %s is not registered now: its logs cannot be reached",
           src->worker);
    retry_later(s, src, 2000, 0);
    return;
  }
  char url[1024];
  int used = snprintf(url, sizeof url, "%s/v1/logs/%s?follow=%d", base, s->job, s->follow);
  if (src->has_cursor)
    used += snprintf(url + used, sizeof url - (size_t)used, "&after=%" PRIu64 ":%" PRIu64, src->seq,
                     src->offset);
  else if (s->tail)
    used += snprintf(url + used, sizeof url - (size_t)used, "&tail=%" PRIu32, s->tail);
  for (size_t i = 0; i < s->n_ranks; i++)
    used += snprintf(url + used, sizeof url - (size_t)used, "&rank=%" PRIu32, s->ranks[i]);
  char auth[200];
  snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
  src->easy = curl_easy_init();
  src->headers = curl_slist_append(NULL, auth);
  if (src->easy == NULL || src->headers == NULL) {
    if (src->easy) curl_easy_cleanup(src->easy);
    curl_slist_free_all(src->headers);
    src->easy = NULL;
    src->headers = NULL;
    src->failures++;
    retry_later(s, src, RETRY_MS, 1);
    return;
  }
  curl_easy_setopt(src->easy, CURLOPT_URL, url);
  curl_easy_setopt(src->easy, CURLOPT_HTTPHEADER, src->headers);
  curl_easy_setopt(src->easy, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(src->easy, CURLOPT_WRITEDATA, src);
  curl_easy_setopt(src->easy, CURLOPT_PRIVATE, src);
  curl_easy_setopt(src->easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(src->easy, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
  /* the agent sends a heartbeat every second while following: 15 s of silence = dead */
  curl_easy_setopt(src->easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(src->easy, CURLOPT_LOW_SPEED_TIME, 15L);
  curl_easy_setopt(src->easy, CURLOPT_PROTOCOLS_STR, "http,https");
  src->rec_len = 0;
  src->end = END_NOTHING;
  src->protocol_error = 0;
  src->paused = 0;
  src->state = SRC_RUNNING;
  curl_multi_add_handle(s->multi, src->easy);
}

/* Why a transfer failed, in kolo's words (a user reading `kolo logs` never sees libcurl's,
 * which name neither the worker nor what to do). */
static void transfer_failure(CURLcode res, char *why, size_t len) {
  switch (res) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
      snprintf(why, len, "nothing answers at its log address (the worker stopped or moved?)");
      break;
    case CURLE_OPERATION_TIMEDOUT:
      snprintf(why, len, "it sent nothing for 15 s");
      break;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
      snprintf(why, len, "the connection closed before the end of its log (the worker stopped?)");
      break;
    default:
      snprintf(why, len, "the transfer failed (curl code %d)", (int)res);
  }
}

static void finish_source(kolo_server_logstream *s, source *src, CURLcode res) {
  long code = 0;
  curl_easy_getinfo(src->easy, CURLINFO_RESPONSE_CODE, &code);
  curl_multi_remove_handle(s->multi, src->easy);
  curl_easy_cleanup(src->easy);
  curl_slist_free_all(src->headers);
  src->easy = NULL;
  src->headers = NULL;
  if (res == CURLE_OK && code == 200 && src->end == END_DONE) {
    src->state = SRC_DONE;
    src->done_epoch = s->job_epoch;
    src->failures = 0;
    return;
  }
  if (res == CURLE_OK && code == 200 && src->end == END_NONE) {
    /* the worker has not started the job's process yet (or never will) */
    src->state = s->follow && !s->job_final ? SRC_WAIT : SRC_DONE;
    src->retry_at = mono_ms() + RETRY_MS;
    return;
  }
  char why[160];
  if (src->protocol_error)
    snprintf(why, sizeof why, "malformed answer");
  else if (res != CURLE_OK)
    transfer_failure(res, why, sizeof why);
  else if (code != 200)
    snprintf(why, sizeof why, "HTTP %ld", code);
  else
    snprintf(why, sizeof why, "the stream ended early");
  src->failures++;
  notice(src, "the logs of worker %s are not reachable: %s", src->worker, why);
  retry_later(s, src, RETRY_MS * (src->failures < 5 ? src->failures : 5), 1);
}

/* ---- the stream's thread ---- */

static source *find_source(kolo_server_logstream *s, const char *worker) {
  for (size_t i = 0; i < s->n_sources; i++)
    if (strcmp(s->sources[i]->worker, worker) == 0) return s->sources[i];
  return NULL;
}

static source *ensure_source(kolo_server_logstream *s, const char *worker) {
  if (worker == NULL || !kolo_keys_name_valid(worker)) return NULL;
  source *src = find_source(s, worker);
  if (src || s->n_sources == MAX_SOURCES) return src;
  src = calloc(1, sizeof *src);
  if (src == NULL) return NULL;
  src->rec = malloc(RECORD_MAX + 1);
  if (src->rec == NULL) {
    free(src);
    return NULL;
  }
  src->stream = s;
  src->index = s->n_sources;
  snprintf(src->worker, sizeof src->worker, "%s", worker);
  src->state = SRC_NEW;
  s->sources[s->n_sources++] = src;
  return src;
}

/* Every worker that was ever in the job's rings (the view's copy of the ring records). */
static void add_ring_members(kolo_server_logstream *s) {
  char prefix[160];
  if (kolo_keys_job(s->job, "ring/", prefix, sizeof prefix) != KOLO_OK) return;
  kolo_etcd_range_result r;
  if (view_records(s, prefix, &r) != KOLO_OK) return;
  for (size_t i = 0; i < r.count; i++) {
    Kolo__V1__RingRecord *ring = NULL;
    char err[256];
    if (kolo_ringspec_read((const char *)r.kvs[i].value, r.kvs[i].value_len, &ring, err,
                           sizeof err) != KOLO_OK) {
      KOLO_LOGW(LOG, "%s: %s", (const char *)r.kvs[i].key, err);
      continue;
    }
    for (size_t k = 0; k < ring->n_members; k++) ensure_source(s, ring->members[k]->worker_id);
    protobuf_c_message_free_unpacked(&ring->base, NULL);
  }
  kolo_etcd_range_result_free(&r);
}

static void refresh(kolo_server_logstream *s, int with_rings) {
  Kolo__V1__Job *job = NULL;
  kolo_status rc = kolo_server_store_get(s->logs->cfg.store, s->job, &job);
  int was_final = s->job_final;
  if (rc == KOLO_ERR_NOT_FOUND) s->job_final = 1; /* deleted */
  if (rc == KOLO_OK && job->status) {
    s->job_epoch = (int64_t)job->status->epoch;
    if (kolo_job_status_final(job->status->phase)) s->job_final = 1;
    for (size_t i = 0; i < job->status->n_members; i++) {
      source *src = ensure_source(s, job->status->members[i]->worker_id);
      /* a worker that finished and is in a newer ring again runs the job again */
      if (src && src->state == SRC_DONE && s->follow && !s->job_final &&
          s->job_epoch > src->done_epoch) {
        src->state = SRC_WAIT;
        src->retry_at = mono_ms();
      }
    }
  }
  if (job) protobuf_c_message_free_unpacked(&job->base, NULL);
  if (s->job_final && !was_final) {
    s->final_at = mono_ms();
    with_rings = 1; /* members that came and went since the last look */
  }
  if (with_rings) add_ring_members(s);
}

/* Whether the stream is over. */
static int finished(kolo_server_logstream *s, int64_t now) {
  int pending = 0;
  for (size_t i = 0; i < s->n_sources; i++) {
    source *src = s->sources[i];
    if (s->job_final && src->state == SRC_WAIT && src->failures == 0)
      src->state = SRC_DONE; /* never started */
    if (src->state == SRC_NEW || src->state == SRC_RUNNING || src->state == SRC_WAIT) pending = 1;
  }
  if (!pending && (!s->follow || s->job_final)) return 1;
  if (s->follow && s->job_final && now - s->final_at > FINAL_GRACE_MS) {
    for (size_t i = 0; i < s->n_sources; i++)
      if (s->sources[i]->state == SRC_RUNNING || s->sources[i]->state == SRC_WAIT)
        notice(s->sources[i], "stopped waiting for the last lines of worker %s",
               s->sources[i]->worker);
    return 1;
  }
  return 0;
}

static void end_stream(kolo_server_logstream *s, kolo_status rc, const char *message) {
  pthread_mutex_lock(&s->lock);
  if (!s->ended) {
    s->ended = 1;
    s->end_rc = rc;
    snprintf(s->end_message, sizeof s->end_message, "%s", message ? message : "");
  }
  s->want_notify = 0;
  pthread_mutex_unlock(&s->lock);
  s->notify(s->arg);
}

/* A consumer that takes nothing while the buffer is full, or whose socket hung up. */
static int consumer_gone(kolo_server_logstream *s, int64_t now) {
  pthread_mutex_lock(&s->lock);
  int stalled =
      s->queued_bytes >= s->logs->cfg.buffer_bytes && now - s->last_take_ms > s->logs->cfg.stall_ms;
  int has_room = s->queued_bytes < s->logs->cfg.buffer_bytes / 2;
  pthread_mutex_unlock(&s->lock);
  if (stalled) {
    char message[128];
    snprintf(message, sizeof message, "the log reader took nothing for %d s",
             s->logs->cfg.stall_ms / 1000);
    end_stream(s, KOLO_ERR_TOO_LARGE, message);
    return 1;
  }
  int fd = atomic_load(&s->watch_fd);
  if (fd >= 0) {
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      end_stream(s, KOLO_ERR_ABORTED, "the log reader went away");
      return 1;
    }
  }
  for (size_t i = 0; has_room && i < s->n_sources; i++) {
    source *src = s->sources[i];
    if (src->paused && src->easy) {
      src->paused = 0;
      curl_easy_pause(src->easy, CURLPAUSE_CONT);
    }
  }
  return 0;
}

static void *stream_thread(void *arg) {
  kolo_server_logstream *s = arg;
  int64_t next_refresh = 0;
  int first = 1;
  while (!atomic_load(&s->stop)) {
    int64_t now = mono_ms();
    if (now >= next_refresh && (first || s->follow)) {
      refresh(s, first);
      first = 0;
      next_refresh = now + REFRESH_MS;
    }
    for (size_t i = 0; i < s->n_sources; i++) {
      source *src = s->sources[i];
      if (src->state == SRC_NEW || (src->state == SRC_WAIT && now >= src->retry_at))
        start_source(s, src);
    }
    int running = 0;
    curl_multi_perform(s->multi, &running);
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(s->multi, &left)) != NULL) {
      if (msg->msg != CURLMSG_DONE) continue;
      source *src = NULL;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&src);
      if (src) finish_source(s, src, msg->data.result);
    }
    if (consumer_gone(s, mono_ms())) return NULL;
    if (finished(s, mono_ms())) {
      end_stream(s, KOLO_OK, NULL);
      return NULL;
    }
    curl_multi_poll(s->multi, NULL, 0, POLL_MS, NULL);
  }
  end_stream(s, KOLO_ERR_ABORTED, "closed");
  return NULL;
}

/* ---- open / close ---- */

static kolo_status check_request(const Kolo__V1__StreamLogsRequest *req, char *err,
                                 size_t err_len) {
  kolo_status rc = kolo_server_service_check_id(req->id, err, err_len);
  if (rc != KOLO_OK) return rc;
  if (req->n_ranks > KOLO_SERVER_LOGS_MAX_RANKS) {
    snprintf(err, err_len, "ranks: at most %d", KOLO_SERVER_LOGS_MAX_RANKS);
    return KOLO_ERR_INVALID_ARG;
  }
  if (req->tail > 1000000000u) {
    snprintf(err, err_len, "tail: at most 1000000000");
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

kolo_status kolo_server_logstream_open(kolo_server_logs *logs,
                                       const Kolo__V1__StreamLogsRequest *req,
                                       kolo_server_logstream_notify notify, void *arg,
                                       kolo_server_logstream **out, char *err, size_t err_len) {
  err[0] = '\0';
  kolo_status rc = check_request(req, err, err_len);
  if (rc != KOLO_OK) return rc;
  uint8_t *probe = NULL;
  size_t probe_len = 0;
  rc = kolo_server_store_get_packed(logs->cfg.store, req->id, &probe, &probe_len);
  free(probe);
  if (rc == KOLO_ERR_NOT_FOUND) snprintf(err, err_len, "no job %.100s", req->id);
  if (rc != KOLO_OK) return rc;
  pthread_mutex_lock(&logs->lock);
  int full = logs->streams >= logs->cfg.max_streams;
  if (!full) logs->streams++;
  pthread_mutex_unlock(&logs->lock);
  if (full) {
    snprintf(err, err_len, "too many log streams at once (%d); try again later",
             logs->cfg.max_streams);
    return KOLO_ERR_UNAVAILABLE; /* as too many event streams: HTTP 503, gRPC UNAVAILABLE */
  }
  kolo_server_logstream *s = calloc(1, sizeof *s);
  if (s == NULL) goto no_memory;
  s->logs = logs;
  snprintf(s->job, sizeof s->job, "%s", req->id);
  if (req->n_ranks) memcpy(s->ranks, req->ranks, req->n_ranks * sizeof *s->ranks);
  s->n_ranks = req->n_ranks;
  s->tail = req->tail;
  s->follow = req->follow;
  s->notify = notify;
  s->arg = arg;
  atomic_init(&s->watch_fd, -1);
  pthread_mutex_init(&s->lock, NULL);
  s->last_take_ms = mono_ms();
  s->multi = curl_multi_init();
  if (s->multi == NULL || pthread_create(&s->thread, NULL, stream_thread, s) != 0) {
    if (s->multi) curl_multi_cleanup(s->multi);
    pthread_mutex_destroy(&s->lock);
    free(s);
    goto no_memory;
  }
  s->thread_started = 1;
  *out = s;
  return KOLO_OK;
no_memory:
  pthread_mutex_lock(&logs->lock);
  logs->streams--;
  pthread_mutex_unlock(&logs->lock);
  return KOLO_ERR_NO_MEMORY;
}

void kolo_server_logstream_watch_fd(kolo_server_logstream *s, int fd) {
  atomic_store(&s->watch_fd, fd);
}

void kolo_server_logstream_close(kolo_server_logstream *s) {
  if (s == NULL) return;
  atomic_store(&s->stop, 1);
  curl_multi_wakeup(s->multi);
  if (s->thread_started) pthread_join(s->thread, NULL);
  for (size_t i = 0; i < s->n_sources; i++) {
    source *src = s->sources[i];
    if (src->easy) {
      curl_multi_remove_handle(s->multi, src->easy);
      curl_easy_cleanup(src->easy);
    }
    curl_slist_free_all(src->headers);
    free(src->rec);
    free(src);
  }
  curl_multi_cleanup(s->multi);
  free_items(s->head);
  free(s->text);
  pthread_mutex_destroy(&s->lock);
  kolo_server_logs *logs = s->logs;
  free(s);
  pthread_mutex_lock(&logs->lock);
  logs->streams--;
  pthread_mutex_unlock(&logs->lock);
}
