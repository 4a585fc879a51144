/* Implementation of http_stream.h. Lock order: hub->lock (the list of streams) before a
 * stream's lock, and a stream's lock before hub->workers_lock; the store's locks are taken last
 * and never held across calls into this file. */
#include "server/http_stream.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "codec/codec.h"

#define LOG "stream"
#define BLOCK_BYTES (16 * 1024)

typedef struct stream stream;

struct kolo_server_stream_hub {
  kolo_server_store *store;
  size_t max_streams;
  pthread_mutex_t lock; /* streams, n_streams, stop */
  pthread_cond_t cond;
  stream *streams;
  size_t n_streams;
  int stop;
  atomic_int closing; /* read by readers under their stream lock, so not under hub->lock */
  atomic_int dirty;   /* the view changed since the last tick */
  pthread_t thread;
  int has_thread;
  pthread_mutex_t workers_lock; /* workers_json, workers_mark */
  char *workers_json;
  uint64_t workers_mark; /* the store's workers mark workers_json was read at (0 = never) */
};

struct stream {
  kolo_server_stream_hub *hub;
  struct MHD_Connection *conn;
  kolo_server_stream_topics topics;
  pthread_mutex_t lock;
  int suspended; /* MHD_suspend_connection called and not yet resumed */
  int ping;      /* send a comment if nothing else is due */
  int ended;     /* the last event is queued (unknown job, hub closing) */
  int linked;    /* in hub->streams */
  char *buf;     /* pending bytes: buf[off..len) */
  size_t off, len, cap;
  kolo_server_store_marks sent; /* what the client has (marks of the last events) */
  uint64_t workers_sent;
  uint64_t last_step; /* newest point sent */
  stream *prev, *next;
};

/* ---- building events (stream lock held) ---- */

static void append(stream *st, const char *text, size_t n) {
  if (st->len + n + 1 > st->cap) {
    size_t cap = (st->len + n + 1) * 2;
    char *grown = realloc(st->buf, cap);
    if (grown == NULL) return; /* dropped: the next change sends a whole state again */
    st->buf = grown;
    st->cap = cap;
  }
  memcpy(st->buf + st->len, text, n);
  st->len += n;
}

static void emit(stream *st, const char *event, const char *json) {
  if (json == NULL) return;
  append(st, "event: ", 7);
  append(st, event, strlen(event));
  append(st, "\ndata: ", 7);
  append(st, json, strlen(json)); /* compact JSON: no newline inside */
  append(st, "\n\n", 2);
}

static void emit_metrics(stream *st) {
  Kolo__V1__JobMetrics *m = NULL;
  /* from the newest point sent, included: it may have been rewritten (a final accuracy) */
  uint64_t since = st->last_step ? st->last_step - 1 : 0;
  if (kolo_server_store_metrics(st->hub->store, st->topics.job, since, &m) != KOLO_OK) return;
  if (m->n_points > 0) st->last_step = m->points[m->n_points - 1]->step;
  char *json = kolo_codec_dump(&m->base, 0);
  emit(st, "metrics", json);
  free(json);
  protobuf_c_message_free_unpacked(&m->base, NULL);
}

static void emit_job(stream *st, const kolo_server_store_marks *m) {
  if (m->job == 0) {
    char message[160];
    snprintf(message, sizeof message,
             "{\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"no job %.64s\"}}", st->topics.job);
    emit(st, "error", message);
    st->ended = 1;
    return;
  }
  if (m->job != st->sent.job) {
    char *json = NULL;
    if (kolo_server_store_get_json(st->hub->store, st->topics.job, &json) == KOLO_OK) {
      emit(st, "job", json);
      st->sent.job = m->job;
    }
    free(json);
  }
  if (m->history != st->sent.history) {
    emit_metrics(st);
    st->sent.history = m->history;
  }
}

/* Queues every event whose topic changed since it was last sent. */
static void build(stream *st) {
  kolo_server_stream_hub *hub = st->hub;
  kolo_server_store_marks m;
  kolo_server_store_get_marks(hub->store, st->topics.job[0] ? st->topics.job : NULL, &m);
  if (st->topics.jobs && m.list != st->sent.list) {
    char *json = NULL;
    int full = 0;
    uint64_t mark = 0;
    if (kolo_server_store_jobs_json(hub->store, st->sent.list, &json, &full, &mark) == KOLO_OK) {
      emit(st, full ? "jobs" : "jobs_changed", json);
      st->sent.list = mark;
    }
    free(json);
  }
  if (st->topics.workers) {
    pthread_mutex_lock(&hub->workers_lock);
    if (hub->workers_json && hub->workers_mark != st->workers_sent) {
      emit(st, "workers", hub->workers_json);
      st->workers_sent = hub->workers_mark;
    }
    pthread_mutex_unlock(&hub->workers_lock);
  }
  if (st->topics.job[0]) emit_job(st, &m);
  if (st->len == 0 && st->ping) append(st, ": ping\n\n", 9);
  st->ping = 0;
}

/* ---- the response ---- */

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max) {
  stream *st = cls;
  (void)pos;
  pthread_mutex_lock(&st->lock);
  if (st->off == st->len) {
    st->off = st->len = 0;
    if (!st->ended) {
      if (atomic_load(&st->hub->closing))
        st->ended = 1;
      else
        build(st);
    }
  }
  ssize_t n;
  if (st->off < st->len) {
    size_t take = st->len - st->off < max ? st->len - st->off : max;
    memcpy(buf, st->buf + st->off, take);
    st->off += take;
    n = (ssize_t)take;
  } else if (st->ended || atomic_load(&st->hub->closing)) {
    /* closing is checked again under the stream lock: hub_close resumes whoever suspended before */
    n = MHD_CONTENT_READER_END_OF_STREAM;
  } else {
    /* nothing to say: sleep until the hub wakes us (a change, a ping or the end) */
    st->suspended = 1;
    MHD_suspend_connection(st->conn);
    n = 0;
  }
  pthread_mutex_unlock(&st->lock);
  return n;
}

static void release(void *cls) {
  stream *st = cls;
  kolo_server_stream_hub *hub = st->hub;
  pthread_mutex_lock(&hub->lock);
  if (st->linked) {
    if (st->prev)
      st->prev->next = st->next;
    else
      hub->streams = st->next;
    if (st->next) st->next->prev = st->prev;
    hub->n_streams--;
  }
  pthread_mutex_unlock(&hub->lock);
  pthread_mutex_destroy(&st->lock);
  free(st->buf);
  free(st);
}

kolo_status kolo_server_stream_open(kolo_server_stream_hub *hub, struct MHD_Connection *conn,
                                    const kolo_server_stream_topics *topics,
                                    struct MHD_Response **out) {
  stream *st = calloc(1, sizeof *st);
  if (st == NULL) return KOLO_ERR_NO_MEMORY;
  st->hub = hub;
  st->conn = conn;
  st->topics = *topics;
  pthread_mutex_init(&st->lock, NULL);
  append(st, "retry: 3000\n\n", 13);
  struct MHD_Response *resp =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, BLOCK_BYTES, reader, st, release);
  if (resp == NULL) {
    pthread_mutex_destroy(&st->lock);
    free(st->buf);
    free(st);
    return KOLO_ERR_NO_MEMORY;
  }
  pthread_mutex_lock(&hub->lock);
  kolo_status rc = KOLO_OK;
  if (atomic_load(&hub->closing) || hub->n_streams >= hub->max_streams) {
    rc = KOLO_ERR_UNAVAILABLE;
  } else {
    st->linked = 1;
    st->next = hub->streams;
    if (hub->streams) hub->streams->prev = st;
    hub->streams = st;
    hub->n_streams++;
  }
  pthread_mutex_unlock(&hub->lock);
  if (rc != KOLO_OK) {
    MHD_destroy_response(resp); /* frees st through release (not linked) */
    return rc;
  }
  if (topics->workers) atomic_store(&hub->dirty, 1); /* the hub reads the workers if it has none */
  MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
  MHD_add_response_header(resp, "Cache-Control", "no-store");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  *out = resp;
  return KOLO_OK;
}

/* ---- the hub ---- */

/* Wakes every stream (ping: a comment if nothing else is due). hub->lock held. */
static void wake_all(kolo_server_stream_hub *hub, int ping) {
  for (stream *st = hub->streams; st; st = st->next) {
    pthread_mutex_lock(&st->lock);
    if (ping) st->ping = 1;
    if (st->suspended) {
      st->suspended = 0;
      MHD_resume_connection(st->conn);
    }
    pthread_mutex_unlock(&st->lock);
  }
}

static int any_wants_workers(kolo_server_stream_hub *hub) {
  pthread_mutex_lock(&hub->lock);
  int want = 0;
  for (stream *st = hub->streams; st && !want; st = st->next) want = st->topics.workers;
  pthread_mutex_unlock(&hub->lock);
  return want;
}

/* Builds the workers list once for every stream when they changed (from the store's records,
 * no stream lock held). */
static void refresh_workers(kolo_server_stream_hub *hub) {
  kolo_server_store_marks m;
  kolo_server_store_get_marks(hub->store, NULL, &m);
  pthread_mutex_lock(&hub->workers_lock);
  int fresh = hub->workers_json != NULL && hub->workers_mark == m.workers;
  pthread_mutex_unlock(&hub->workers_lock);
  if (fresh || !any_wants_workers(hub)) return;
  Kolo__V1__ListWorkersResponse *all = NULL;
  if (kolo_server_store_list_workers(hub->store, &all) != KOLO_OK) return; /* retried next change */
  char *json = kolo_codec_dump(&all->base, 0);
  protobuf_c_message_free_unpacked(&all->base, NULL);
  if (json == NULL) return;
  pthread_mutex_lock(&hub->workers_lock);
  free(hub->workers_json);
  hub->workers_json = json;
  hub->workers_mark = m.workers;
  pthread_mutex_unlock(&hub->workers_lock);
}

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void *run(void *arg) {
  kolo_server_stream_hub *hub = arg;
  int64_t last_ping = mono_ms();
  pthread_mutex_lock(&hub->lock);
  while (!hub->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)KOLO_SERVER_STREAM_TICK_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (!hub->stop && pthread_cond_timedwait(&hub->cond, &hub->lock, &until) != ETIMEDOUT) {
    }
    if (hub->stop) break;
    int changed = atomic_exchange(&hub->dirty, 0);
    int ping = mono_ms() - last_ping >= KOLO_SERVER_STREAM_PING_MS;
    if (!changed && !ping) continue;
    if (ping) last_ping = mono_ms();
    pthread_mutex_unlock(&hub->lock);
    if (changed) refresh_workers(hub);
    pthread_mutex_lock(&hub->lock);
    wake_all(hub, ping);
  }
  pthread_mutex_unlock(&hub->lock);
  return NULL;
}

static void on_change(void *arg) {
  kolo_server_stream_hub *hub = arg;
  atomic_store(&hub->dirty, 1);
}

kolo_status kolo_server_stream_hub_create(kolo_server_store *store, size_t max_streams,
                                          kolo_server_stream_hub **out) {
  kolo_server_stream_hub *hub = calloc(1, sizeof *hub);
  if (hub == NULL) return KOLO_ERR_NO_MEMORY;
  hub->store = store;
  hub->max_streams = max_streams ? max_streams : KOLO_SERVER_STREAM_MAX;
  pthread_mutex_init(&hub->lock, NULL);
  pthread_cond_init(&hub->cond, NULL);
  pthread_mutex_init(&hub->workers_lock, NULL);
  if (pthread_create(&hub->thread, NULL, run, hub) != 0) {
    kolo_server_stream_hub_destroy(hub);
    return KOLO_ERR_SYSTEM;
  }
  hub->has_thread = 1;
  kolo_server_store_set_change_fn(store, on_change, hub);
  *out = hub;
  return KOLO_OK;
}

void kolo_server_stream_hub_close(kolo_server_stream_hub *hub) {
  if (hub == NULL) return;
  atomic_store(&hub->closing, 1);
  pthread_mutex_lock(&hub->lock);
  wake_all(hub, 0);
  pthread_mutex_unlock(&hub->lock);
}

void kolo_server_stream_hub_destroy(kolo_server_stream_hub *hub) {
  if (hub == NULL) return;
  kolo_server_store_set_change_fn(hub->store, NULL, NULL);
  if (hub->has_thread) {
    pthread_mutex_lock(&hub->lock);
    hub->stop = 1;
    pthread_cond_broadcast(&hub->cond);
    pthread_mutex_unlock(&hub->lock);
    pthread_join(hub->thread, NULL);
  }
  if (hub->n_streams) KOLO_LOGW(LOG, "%zu streams still open at exit", hub->n_streams);
  pthread_mutex_destroy(&hub->lock);
  pthread_cond_destroy(&hub->cond);
  pthread_mutex_destroy(&hub->workers_lock);
  free(hub->workers_json);
  free(hub);
}

size_t kolo_server_stream_count(kolo_server_stream_hub *hub) {
  pthread_mutex_lock(&hub->lock);
  size_t n = hub->n_streams;
  pthread_mutex_unlock(&hub->lock);
  return n;
}
