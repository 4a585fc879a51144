/* Watches: one thread per watch holds a streaming POST /v3/watch open (curl
 * multi, so that stop can wake it at once), delivers events in order, resumes
 * from the last delivered revision + 1 after a broken stream, and after a
 * compaction re-lists the range, reports a resync and continues from its head. */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "coordination/etcd_internal.h"

#define COMPONENT "etcd-watch"
#define MAX_LINE_BYTES (64u << 20)

struct kolo_etcd_watch {
  kolo_etcd *client;
  unsigned char *key;
  size_t key_len;
  int prefix;
  int prev_kv;
  kolo_etcd_watch_fn fn;
  void *user;
  pthread_t thread;
  CURLM *multi;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  atomic_int stopping;
  atomic_int connected;
  atomic_llong next_revision; /* 0 until the first stream is created */
  /* Per-stream state, touched only by the watch thread. */
  char *line;
  size_t line_len;
  size_t line_cap;
  int compacted; /* the stream was cancelled because history is compacted */
  int64_t compact_revision;
  int stream_failed;           /* a message was an error or unparsable */
  size_t endpoint;             /* endpoint index for the next stream */
  int64_t last_data_ms;        /* when the stream last delivered a byte */
  uint64_t cluster_id;         /* the etcd cluster the resume point belongs to */
  int64_t max_header_revision; /* highest store revision etcd has reported */
};

/* Delivers the events of one message that are new (revision >= next_revision). */
static void deliver_events(kolo_etcd_watch *w, kolo_etcd_watch_message *m) {
  int64_t next = atomic_load(&w->next_revision);
  size_t first = 0;
  while (first < m->event_count && m->events[first].kv.mod_revision < next) first++;
  if (first == m->event_count) return;
  kolo_etcd_watch_update u = {
      .kind = KOLO_ETCD_WATCH_EVENTS,
      .revision = m->events[m->event_count - 1].kv.mod_revision,
      .events = m->events + first,
      .event_count = m->event_count - first,
  };
  w->fn(&u, w->user);
  atomic_store(&w->next_revision, u.revision + 1);
}

/* Handles one complete line of the stream. Returns 0 to abort the stream. */
static int handle_line(kolo_etcd_watch *w, const char *line, size_t len) {
  while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ')) len--;
  if (len == 0) return 1;
  kolo_etcd_watch_message m;
  kolo_status rc = kolo_etcd_watch_message_parse(line, len, &m);
  if (rc != KOLO_OK) {
    /* An expired token (or an etcd restart, which forgets simple tokens): the
     * next stream authenticates again. */
    if (rc == KOLO_ERR_AUTH && w->client->core->user) kolo_etcd_auth_invalidate(w->client);
    KOLO_LOGW(COMPONENT, "dropping the stream: %s", kolo_etcd_last_error());
    w->stream_failed = 1;
    return 0;
  }
  int keep = 1;
  if (m.created) {
    /* etcd's data was wiped or restored from an older backup: another cluster id,
     * or a store revision below the last one delivered, which etcd itself reported
     * (max_header_revision guards a caller's start_revision in the future).
     * Resuming is meaningless then; re-list and continue from the new head. (A
     * follower lagging behind what the leader already delivered would also trip
     * this: the cost is one spurious resync.) */
    int other_cluster = m.cluster_id != 0 && w->cluster_id != 0 && m.cluster_id != w->cluster_id;
    int64_t delivered = atomic_load(&w->next_revision) - 1;
    int went_back = m.header_revision > 0 && w->max_header_revision >= delivered &&
                    m.header_revision < delivered;
    if (m.cluster_id != 0) w->cluster_id = m.cluster_id;
    if (other_cluster || went_back) {
      KOLO_LOGW(COMPONENT,
                "etcd history restarted (cluster %" PRIu64 ", revision %" PRId64 " < %" PRId64
                "): resyncing",
                m.cluster_id, m.header_revision, delivered);
      w->max_header_revision = m.header_revision;
      w->compacted = 1;
      w->compact_revision = 0;
      kolo_etcd_watch_message_clear(&m);
      return 0;
    }
  }
  if (m.header_revision > w->max_header_revision) w->max_header_revision = m.header_revision;
  if (m.created) {
    atomic_store(&w->connected, 1);
    /* Watching "from now": nothing at or below the creation revision will come. */
    if (atomic_load(&w->next_revision) == 0) atomic_store(&w->next_revision, m.header_revision + 1);
  }
  if (m.canceled) {
    if (m.compact_revision > 0) {
      w->compacted = 1;
      w->compact_revision = m.compact_revision;
    } else {
      KOLO_LOGW(COMPONENT, "etcd cancelled the watch: %s",
                m.cancel_reason ? m.cancel_reason : "(no reason)");
      if (m.cancel_reason && strstr(m.cancel_reason, "Unauthenticated") && w->client->core->user)
        kolo_etcd_auth_invalidate(w->client);
      w->stream_failed = 1;
    }
    keep = 0;
  } else if (m.event_count > 0) {
    deliver_events(w, &m);
  }
  kolo_etcd_watch_message_clear(&m);
  return keep;
}

/* curl write callback: splits the stream into lines (one JSON message each). */
static size_t on_stream_data(char *ptr, size_t size, size_t nmemb, void *userdata) {
  kolo_etcd_watch *w = userdata;
  size_t n = size * nmemb;
  if (atomic_load(&w->stopping)) return 0;
  w->last_data_ms = kolo_etcd_now_ms();
  for (size_t i = 0; i < n; i++) {
    if (ptr[i] == '\n') {
      int keep = handle_line(w, w->line ? w->line : "", w->line_len);
      w->line_len = 0;
      /* Time spent in the callback is not silence of the stream. */
      w->last_data_ms = kolo_etcd_now_ms();
      if (!keep) return 0;
      continue;
    }
    if (w->line_len + 1 >= w->line_cap) {
      size_t cap = w->line_cap ? w->line_cap * 2 : 4096;
      char *grown = cap <= MAX_LINE_BYTES ? realloc(w->line, cap) : NULL;
      if (grown == NULL) {
        KOLO_LOGW(COMPONENT, "watch message larger than %u bytes; dropping the stream",
                  MAX_LINE_BYTES);
        w->stream_failed = 1;
        return 0;
      }
      w->line = grown;
      w->line_cap = cap;
    }
    w->line[w->line_len++] = ptr[i];
  }
  return n;
}

/* Builds the WatchCreateRequest for the current resume point. */
static json_t *create_request(kolo_etcd_watch *w) {
  json_t *req = json_object();
  kolo_etcd_bytes key = {w->key, w->key_len};
  kolo_status rc = req ? kolo_etcd_json_set_bytes(req, "key", key) : KOLO_ERR_NO_MEMORY;
  if (rc == KOLO_OK && w->prefix) {
    unsigned char *end = NULL;
    size_t end_len = 0;
    rc = kolo_etcd_prefix_end(key, &end, &end_len);
    if (rc == KOLO_OK)
      rc = kolo_etcd_json_set_bytes(req, "range_end", (kolo_etcd_bytes){end, end_len});
    free(end);
  }
  int64_t next = atomic_load(&w->next_revision);
  if (rc == KOLO_OK && next > 0) rc = kolo_etcd_json_set_int64(req, "start_revision", next);
  if (rc == KOLO_OK && w->prev_kv) json_object_set_new(req, "prev_kv", json_true());
  if (rc == KOLO_OK) json_object_set_new(req, "progress_notify", json_true());
  json_t *body = rc == KOLO_OK ? json_pack("{s:o}", "create_request", req) : NULL;
  if (body == NULL) json_decref(req);
  return body;
}

/* Runs one stream until it breaks, is cancelled, or stop is requested. */
static void run_stream(kolo_etcd_watch *w) {
  kolo_etcd *c = w->client;
  json_t *body = create_request(w);
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  CURL *h = curl_easy_init();
  char auth[1024] = "";
  struct curl_slist *headers = NULL;
  if (text == NULL || h == NULL) {
    KOLO_LOGW(COMPONENT, "out of memory starting a watch stream");
    goto out;
  }
  if (kolo_etcd_auth_header(c, auth, sizeof auth, 0, &w->stopping) != KOLO_OK) {
    KOLO_LOGW(COMPONENT, "watch cannot authenticate: %s", kolo_etcd_last_error());
    goto out;
  }
  const char *endpoint = kolo_etcd_endpoint(c, w->endpoint);
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Expect:");
  if (auth[0]) headers = curl_slist_append(headers, auth);
  kolo_etcd_set_url(h, endpoint, "watch");
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, w);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  kolo_etcd_apply_tls(c, h);
  w->line_len = 0;
  w->compacted = 0;
  w->stream_failed = 0;
  curl_multi_add_handle(w->multi, h);
  int running = 1;
  w->last_data_ms = kolo_etcd_now_ms();
  while (running && !atomic_load(&w->stopping)) {
    CURLMcode mc = curl_multi_perform(w->multi, &running);
    if (mc != CURLM_OK) break;
    if (!running) break;
    /* A dead etcd behind a live connection (frozen, partitioned): no byte for
     * watch_idle_ms breaks the stream. etcd's progress notifications keep a
     * healthy idle stream talking. */
    if (kolo_etcd_now_ms() - w->last_data_ms > c->watch_idle_ms) {
      KOLO_LOGW(COMPONENT, "watch stream at %s silent for %d ms: reconnecting", endpoint,
                c->watch_idle_ms);
      break;
    }
    curl_multi_poll(w->multi, NULL, 0, 250, NULL);
  }
  int pending;
  CURLMsg *msg;
  while ((msg = curl_multi_info_read(w->multi, &pending)) != NULL) {
    if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK && !w->compacted &&
        !atomic_load(&w->stopping))
      KOLO_LOGD(COMPONENT, "watch stream at %s ended: %s", endpoint,
                curl_easy_strerror(msg->data.result));
  }
  long http_status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http_status);
  if (http_status == 401 && c->core->user) kolo_etcd_auth_invalidate(c);
  curl_multi_remove_handle(w->multi, h);
out:
  atomic_store(&w->connected, 0);
  curl_slist_free_all(headers);
  if (h) curl_easy_cleanup(h);
  free(text);
}

/* After a compaction: reads the whole range at one revision, reports it as a
 * resync and moves the resume point past it. */
static kolo_status resync(kolo_etcd_watch *w) {
  kolo_etcd_range_result r = {0};
  kolo_etcd_bytes key = {w->key, w->key_len};
  kolo_status rc;
  if (w->prefix) {
    rc = kolo_etcd_range_prefix(w->client, key, 0, &r);
  } else {
    kolo_etcd_range_opts opts = {.key = key};
    rc = kolo_etcd_range(w->client, &opts, &r);
  }
  if (rc != KOLO_OK) return rc;
  kolo_etcd_watch_update u = {
      .kind = KOLO_ETCD_WATCH_RESYNC,
      .revision = r.revision,
      .kvs = r.kvs,
      .kv_count = r.count,
      .compact_revision = w->compact_revision,
  };
  if (w->compact_revision > 0)
    KOLO_LOGI(COMPONENT, "history compacted at %" PRId64 ": resynced %zu keys at revision %" PRId64,
              w->compact_revision, r.count, r.revision);
  else
    KOLO_LOGI(COMPONENT, "history restarted: resynced %zu keys at revision %" PRId64, r.count,
              r.revision);
  w->fn(&u, w->user);
  atomic_store(&w->next_revision, r.revision + 1);
  kolo_etcd_range_result_free(&r);
  return KOLO_OK;
}

/* Sleeps up to ms unless stop is requested. */
static void backoff(kolo_etcd_watch *w, int64_t ms) {
  struct timespec until = kolo_etcd_monotonic_after(ms);
  pthread_mutex_lock(&w->lock);
  while (!atomic_load(&w->stopping))
    if (pthread_cond_timedwait(&w->wake, &w->lock, &until) == ETIMEDOUT) break;
  pthread_mutex_unlock(&w->lock);
}

static void *watch_main(void *arg) {
  kolo_etcd_watch *w = arg;
  int64_t delay = 50;
  while (!atomic_load(&w->stopping)) {
    int64_t started = kolo_etcd_now_ms();
    run_stream(w);
    if (atomic_load(&w->stopping)) break;
    if (w->compacted) {
      if (resync(w) == KOLO_OK) {
        delay = 50;
        continue;
      }
      KOLO_LOGW(COMPONENT, "resync after compaction failed: %s", kolo_etcd_last_error());
      w->compacted = 0;
    }
    /* A stream that lived a while was healthy: reconnect quickly. */
    if (kolo_etcd_now_ms() - started > 2000) delay = 50;
    w->endpoint++;
    backoff(w, delay);
    delay = delay * 2 > 1000 ? 1000 : delay * 2;
  }
  return NULL;
}

kolo_status kolo_etcd_watch_start(kolo_etcd *c, const kolo_etcd_watch_opts *opts,
                                  kolo_etcd_watch_fn fn, void *user, kolo_etcd_watch **out) {
  *out = NULL;
  if (c == NULL || opts == NULL || fn == NULL || opts->key.data == NULL || opts->key.len == 0 ||
      opts->start_revision < 0)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "watch needs a client, a key and a callback");
  kolo_etcd_watch *w = calloc(1, sizeof *w);
  if (w == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  w->client = c;
  w->key = malloc(opts->key.len);
  w->multi = curl_multi_init();
  if (w->key == NULL || w->multi == NULL) {
    free(w->key);
    if (w->multi) curl_multi_cleanup(w->multi);
    free(w);
    return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  }
  memcpy(w->key, opts->key.data, opts->key.len);
  w->key_len = opts->key.len;
  w->prefix = opts->prefix;
  w->prev_kv = opts->prev_kv;
  w->fn = fn;
  w->user = user;
  w->endpoint = atomic_load(&c->core->current);
  atomic_init(&w->stopping, 0);
  atomic_init(&w->connected, 0);
  atomic_init(&w->next_revision, opts->start_revision);
  pthread_mutex_init(&w->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&w->wake, &attr);
  pthread_condattr_destroy(&attr);
  int err = pthread_create(&w->thread, NULL, watch_main, w);
  if (err != 0) {
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    curl_multi_cleanup(w->multi);
    free(w->key);
    free(w);
    return kolo_etcd_fail(kolo_status_from_errno(err), "cannot start the watch thread: %s",
                          strerror(err));
  }
  kolo_etcd_count_watch(c, 1, 1);
  *out = w;
  return KOLO_OK;
}

int64_t kolo_etcd_watch_next_revision(const kolo_etcd_watch *w) {
  return atomic_load(&w->next_revision);
}

int kolo_etcd_watch_connected(const kolo_etcd_watch *w) {
  return atomic_load(&w->connected);
}

void kolo_etcd_watch_stop(kolo_etcd_watch *w) {
  if (w == NULL) return;
  if (pthread_equal(pthread_self(), w->thread)) {
    KOLO_LOGE(COMPONENT, "kolo_etcd_watch_stop called from its own callback; ignored");
    return;
  }
  pthread_mutex_lock(&w->lock);
  atomic_store(&w->stopping, 1);
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->lock);
  curl_multi_wakeup(w->multi);
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->wake);
  pthread_mutex_destroy(&w->lock);
  curl_multi_cleanup(w->multi);
  kolo_etcd_count_watch(w->client, 0, -1);
  free(w->line);
  free(w->key);
  free(w);
}
