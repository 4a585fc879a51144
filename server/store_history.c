/* The store's history side: each job's metrics points (/kolo/v1/metrics/<id>/<step>, written
 * by the leader's recorder) and ring epochs (/kolo/v1/jobs/<id>/ring/<epoch>, written by the
 * scheduler) as the watch delivers them, the reads over them (GetJobMetrics, the recorder's
 * plan, /metrics gauges), the change marks of server-sent events and the cached job list. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "coordination/etcd.h"
#include "coordination/ringspec.h"
#include "server/history.h"
#include "codec/codec.h"
#include "server/store_internal.h"
#include "kolo/mode.h"

#define LOG "store"
#define LIST_JSON_JOBS 1000

void kolo_server_store_metrics_key(char *out, size_t len, const char *id, uint64_t step) {
  if (kolo_keys_metrics(id, step, out, len) != KOLO_OK && len > 0) out[0] = '\0';
}

/* ---- applying keys (write lock held) ---- */

/* Index of the point at step in e, or -(insertion point) - 1. */
static long find_point(const entry *e, uint64_t step) {
  size_t lo = 0, hi = e->n_points;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (e->points[mid]->step == step) return (long)mid;
    if (e->points[mid]->step < step)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -(long)lo - 1;
}

static void remove_point(entry *e, size_t at) {
  protobuf_c_message_free_unpacked(&e->points[at]->base, NULL);
  memmove(&e->points[at], &e->points[at + 1], (e->n_points - at - 1) * sizeof *e->points);
  memmove(&e->point_revs[at], &e->point_revs[at + 1],
          (e->n_points - at - 1) * sizeof *e->point_revs);
  e->n_points--;
}

static int insert_point(entry *e, Kolo__V1__MetricPoint *p, int64_t revision) {
  long at = find_point(e, p->step);
  if (at >= 0) {
    protobuf_c_message_free_unpacked(&e->points[at]->base, NULL);
    e->points[at] = p;
    e->point_revs[at] = revision;
    return 1;
  }
  if (e->n_points == e->cap_points) {
    size_t cap = e->cap_points ? e->cap_points * 2 : 64;
    Kolo__V1__MetricPoint **points = realloc(e->points, cap * sizeof *points);
    if (points == NULL) return 0;
    e->points = points;
    int64_t *revs = realloc(e->point_revs, cap * sizeof *revs);
    if (revs == NULL) return 0;
    e->point_revs = revs;
    e->cap_points = cap;
  }
  size_t pos = (size_t)(-at - 1);
  memmove(&e->points[pos + 1], &e->points[pos], (e->n_points - pos) * sizeof *e->points);
  memmove(&e->point_revs[pos + 1], &e->point_revs[pos],
          (e->n_points - pos) * sizeof *e->point_revs);
  e->points[pos] = p;
  e->point_revs[pos] = revision;
  e->n_points++;
  return 1;
}

/* Splits "<prefix><id>/<number>" (the number all digits); 0 if the key is not of that shape. */
static int split_key(const char *key, const char *prefix, char *id, size_t id_len,
                     uint64_t *number) {
  const char *rest = key + strlen(prefix);
  const char *slash = strchr(rest, '/');
  if (slash == NULL || slash == rest || (size_t)(slash - rest) >= id_len) return 0;
  const char *digits = slash + 1;
  if (*digits == '\0' || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 20)
    return 0;
  memcpy(id, rest, (size_t)(slash - rest));
  id[slash - rest] = '\0';
  *number = strtoull(digits, NULL, 10);
  return 1;
}

void kolo_server_store_apply_point(kolo_server_store *s, const char *key,
                                   const kolo_server_kv_item *item, int is_delete) {
  char id[KOLO_SERVER_ID_MAX + 1];
  uint64_t step;
  if (!split_key(key, KOLO_KEY_METRICS_PREFIX, id, sizeof id, &step)) return;
  if (is_delete) {
    long at = kolo_server_store_find_entry(s, id);
    if (at < 0) return;
    entry *e = s->entries[at];
    long p = find_point(e, step);
    if (p >= 0) remove_point(e, (size_t)p);
    e->history_batch = s->batch;
    return;
  }
  ProtobufCMessage *msg = NULL;
  char err[256];
  if (kolo_codec_parse(item->value, item->value_len, &kolo__v1__metric_point__descriptor, &msg, err,
                       sizeof err) != KOLO_OK) {
    KOLO_LOGW(LOG, "ignoring %s: %s", key, err);
    return;
  }
  Kolo__V1__MetricPoint *p = (Kolo__V1__MetricPoint *)msg;
  entry *e = p->step == step ? kolo_server_store_entry_for(s, id) : NULL;
  if (e == NULL || !insert_point(e, p, item->mod_revision)) {
    if (e == NULL && p->step != step)
      KOLO_LOGW(LOG, "ignoring %s: its point says step %" PRIu64, key, p->step);
    protobuf_c_message_free_unpacked(msg, NULL);
    return;
  }
  e->history_batch = s->batch;
}

/* A ring epoch from the ring record, read through its codec (coordination/ringspec.h):
 * members by rank with host and address; the secret is never copied. NULL (the caller
 * logs it) for a record that does not decode. */
static Kolo__V1__RingEpoch *ring_from_record(const char *text, size_t len) {
  Kolo__V1__RingRecord *ring = NULL;
  if (kolo_ringspec_read(text, len, &ring, NULL, 0) != KOLO_OK) return NULL;
  Kolo__V1__RingEpoch *r = malloc(sizeof *r);
  if (r == NULL) goto out;
  kolo__v1__ring_epoch__init(r);
  r->epoch = (uint64_t)ring->epoch;
  r->members = calloc(ring->n_members + 1, sizeof *r->members);
  if (r->members == NULL) {
    free(r);
    r = NULL;
    goto out;
  }
  for (size_t i = 0; i < ring->n_members; i++) {
    Kolo__V1__Member *member = malloc(sizeof *member);
    if (member == NULL) break;
    kolo__v1__member__init(member);
    kolo_codec_set_string(&member->worker_id, ring->members[i]->worker_id);
    kolo_codec_set_string(&member->host, ring->members[i]->host);
    kolo_codec_set_string(&member->address, ring->members[i]->address);
    member->rank = (uint32_t)i;
    r->members[r->n_members++] = member;
  }
out:
  protobuf_c_message_free_unpacked(&ring->base, NULL);
  return r;
}

void kolo_server_store_apply_ring(entry *e, const kolo_server_kv_item *item, int is_delete) {
  /* "/kolo/v1/jobs/<id>/ring/<epoch>" (the caller found e by <id>) */
  const char *digits = strstr(item->key + strlen(KOLO_KEY_JOBS_PREFIX), "/ring/");
  if (digits == NULL) return;
  digits += strlen("/ring/");
  size_t n_digits = strlen(digits);
  if (n_digits == 0 || n_digits > 20 || strspn(digits, "0123456789") != n_digits) return;
  uint64_t epoch = strtoull(digits, NULL, 10);
  size_t at = 0;
  while (at < e->n_rings && e->rings[at]->epoch < epoch) at++;
  int exists = at < e->n_rings && e->rings[at]->epoch == epoch;
  if (is_delete) {
    if (!exists) return;
    protobuf_c_message_free_unpacked(&e->rings[at]->base, NULL);
    memmove(&e->rings[at], &e->rings[at + 1], (e->n_rings - at - 1) * sizeof *e->rings);
    e->n_rings--;
    return;
  }
  Kolo__V1__RingEpoch *r = ring_from_record(item->value, item->value_len);
  if (r == NULL || r->epoch != epoch) {
    KOLO_LOGW(LOG, "ignoring ring record %s: %s", item->key,
              r ? "its epoch is not its key's" : kolo_etcd_last_error());
    if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
    return;
  }
  if (exists) {
    protobuf_c_message_free_unpacked(&e->rings[at]->base, NULL);
    e->rings[at] = r;
    return;
  }
  if (e->n_rings == e->cap_rings) {
    size_t cap = e->cap_rings ? e->cap_rings * 2 : 8;
    Kolo__V1__RingEpoch **grown = realloc(e->rings, cap * sizeof *grown);
    if (grown == NULL) {
      protobuf_c_message_free_unpacked(&r->base, NULL);
      return;
    }
    e->rings = grown;
    e->cap_rings = cap;
  }
  memmove(&e->rings[at + 1], &e->rings[at], (e->n_rings - at) * sizeof *e->rings);
  e->rings[at] = r;
  e->n_rings++;
}

void kolo_server_store_history_free(entry *e) {
  for (size_t i = 0; i < e->n_points; i++)
    protobuf_c_message_free_unpacked(&e->points[i]->base, NULL);
  free(e->points);
  free(e->point_revs);
  for (size_t i = 0; i < e->n_rings; i++)
    protobuf_c_message_free_unpacked(&e->rings[i]->base, NULL);
  free(e->rings);
}

/* ---- reads ---- */

static entry *visible(kolo_server_store *s, const char *id) {
  long at = kolo_server_store_find_entry(s, id);
  return at >= 0 && s->entries[at]->packed ? s->entries[at] : NULL;
}

kolo_status kolo_server_store_metrics(kolo_server_store *s, const char *id, uint64_t since_step,
                                      Kolo__V1__JobMetrics **out) {
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  Kolo__V1__JobMetrics *m = NULL;
  pthread_rwlock_rdlock(&s->lock);
  entry *e = visible(s, id);
  if (e == NULL) goto out;
  rc = KOLO_ERR_NO_MEMORY;
  m = malloc(sizeof *m);
  if (m == NULL) goto out;
  kolo__v1__job_metrics__init(m);
  m->points = calloc(e->n_points + 1, sizeof *m->points);
  m->rings = calloc(e->n_rings + 1, sizeof *m->rings);
  if (kolo_codec_set_string(&m->id, e->id) != KOLO_OK || m->points == NULL || m->rings == NULL)
    goto out;
  long first = find_point(e, since_step + 1);
  for (size_t i = first >= 0 ? (size_t)first : (size_t)(-first - 1); i < e->n_points; i++) {
    m->points[m->n_points] = (Kolo__V1__MetricPoint *)kolo_codec_copy(&e->points[i]->base);
    if (m->points[m->n_points] == NULL) goto out;
    m->n_points++;
  }
  for (size_t i = 0; i < e->n_rings; i++) {
    m->rings[m->n_rings] = (Kolo__V1__RingEpoch *)kolo_codec_copy(&e->rings[i]->base);
    if (m->rings[m->n_rings] == NULL) goto out;
    m->n_rings++;
  }
  rc = KOLO_OK;
out:
  pthread_rwlock_unlock(&s->lock);
  if (rc != KOLO_OK && m) protobuf_c_message_free_unpacked(&m->base, NULL);
  if (rc == KOLO_OK) *out = m;
  return rc;
}

/* The write that takes e's series one point further, if any. */
static int plan_entry(const entry *e, size_t max_points, kolo_server_history_write *w) {
  Kolo__V1__MetricPoint next;
  if (e->status == NULL || !kolo_server_history_point_of(e->status, &next)) return 0;
  kolo_server_history_plan plan = kolo_server_history_plan_next(
      (const Kolo__V1__MetricPoint *const *)e->points, e->n_points, &next, max_points);
  if (plan.action == KOLO_SERVER_HISTORY_SKIP) return 0;
  memset(w, 0, sizeof *w);
  snprintf(w->id, sizeof w->id, "%s", e->id);
  w->point = next;
  long gone = plan.action == KOLO_SERVER_HISTORY_REPLACE ? (long)e->n_points - 1 : plan.drop;
  if (gone >= 0 && e->points[gone]->step == next.step) {
    w->point_rev = e->point_revs[gone]; /* the same key, rewritten */
  } else if (gone >= 0) {
    w->has_delete = 1;
    w->delete_step = e->points[gone]->step;
    w->delete_rev = e->point_revs[gone];
  }
  return 1;
}

kolo_status kolo_server_store_history_writes(kolo_server_store *s, size_t max_points,
                                             size_t max_writes, kolo_server_history_write **out,
                                             size_t *n) {
  *out = NULL;
  *n = 0;
  if (max_writes == 0) return KOLO_OK;
  kolo_server_history_write *w = calloc(max_writes, sizeof *w);
  if (w == NULL) return KOLO_ERR_NO_MEMORY;
  pthread_rwlock_rdlock(&s->lock);
  for (size_t i = 0; i < s->count && *n < max_writes; i++)
    if (s->entries[i]->packed && plan_entry(s->entries[i], max_points, &w[*n])) (*n)++;
  pthread_rwlock_unlock(&s->lock);
  if (*n == 0) {
    free(w);
    return KOLO_OK;
  }
  *out = w;
  return KOLO_OK;
}

/* Gauge order: unfinished jobs first, newest created first; then finished, latest first. */
static int gauge_order(const void *a, const void *b) {
  const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
  int xf = kolo_job_status_final(x->status->phase), yf = kolo_job_status_final(y->status->phase);
  if (xf != yf) return xf - yf;
  int64_t xt = xf ? x->status->finished_unix_ms : x->status->created_unix_ms;
  int64_t yt = xf ? y->status->finished_unix_ms : y->status->created_unix_ms;
  if (xt != yt) return xt > yt ? -1 : 1;
  return strcmp(x->id, y->id);
}

size_t kolo_server_store_job_gauges(kolo_server_store *s, kolo_server_job_gauge *out, size_t max,
                                    size_t *left_out) {
  size_t written = 0, known = 0;
  *left_out = 0;
  pthread_rwlock_rdlock(&s->lock);
  entry **order = calloc(s->count + 1, sizeof *order);
  for (size_t i = 0; order && i < s->count; i++)
    if (s->entries[i]->packed) order[known++] = s->entries[i];
  if (order) qsort(order, known, sizeof *order, gauge_order);
  for (size_t i = 0; order && i < known && written < max; i++) {
    const entry *e = order[i];
    const Kolo__V1__Progress *p = e->status->progress;
    kolo_server_job_gauge *g = &out[written++];
    memset(g, 0, sizeof *g);
    snprintf(g->id, sizeof g->id, "%s", e->id);
    g->phase = e->status->phase;
    g->epoch = e->status->epoch;
    g->ring_size = (uint32_t)e->status->n_members;
    g->reconfigurations = e->status->reconfigurations;
    g->false_losses = e->status->false_losses;
    if (p) {
      g->step = p->step;
      g->total_steps = p->total_steps;
      g->loss = p->loss;
      g->accuracy = p->accuracy;
      g->samples_per_sec = p->samples_per_sec;
      g->rounds = p->rounds;
      g->bytes_sent = p->bytes_sent;
      g->staleness = p->staleness;
      g->blocked_seconds = p->blocked_seconds;
    }
    int mode = e->spec ? (int)e->spec->mode : 0;
    snprintf(g->mode, sizeof g->mode, "%s", mode ? kolo_mode_name((kolo_mode)mode) : "SYNC");
  }
  *left_out = known - written;
  pthread_rwlock_unlock(&s->lock);
  free(order);
  return written;
}

/* ---- change marks and the jobs list for streams ---- */

void kolo_server_store_set_change_fn(kolo_server_store *s, kolo_server_store_change_fn fn,
                                     void *arg) {
  pthread_mutex_lock(
      &s->sub_lock); /* on_watch calls it under sub_lock: none is in flight after this */
  s->on_change = fn;
  s->on_change_arg = arg;
  pthread_mutex_unlock(&s->sub_lock);
}

void kolo_server_store_get_marks(kolo_server_store *s, const char *id,
                                 kolo_server_store_marks *out) {
  memset(out, 0, sizeof *out);
  pthread_rwlock_rdlock(&s->lock);
  out->list = s->list_batch;
  out->workers = s->workers_batch;
  entry *e = id ? visible(s, id) : NULL;
  if (e) {
    out->job = e->job_batch;
    out->history = e->history_batch ? e->history_batch : 1;
  }
  pthread_rwlock_unlock(&s->lock);
}

typedef struct text {
  char *buf;
  size_t len, cap;
  int failed;
} text;

static void put_text(text *t, const char *s, size_t n) {
  if (t->failed) return;
  if (t->len + n + 1 > t->cap) {
    size_t cap = (t->len + n + 1) * 2;
    char *grown = realloc(t->buf, cap);
    if (grown == NULL) {
      t->failed = 1;
      return;
    }
    t->buf = grown;
    t->cap = cap;
  }
  memcpy(t->buf + t->len, s, n);
  t->len += n;
  t->buf[t->len] = '\0';
}

/* {"jobs":[<summaries of the chosen entries>],"next_page_token":"..."}; read lock held. */
static void jobs_json(kolo_server_store *s, uint64_t since, text *t) {
  size_t n = 0;
  const char *next = "";
  static const char head[] = "{\"jobs\":[", mid[] = "],\"next_page_token\":\"", tail[] = "\"}";
  put_text(t, head, sizeof head - 1);
  for (size_t i = 0; i < s->count; i++) {
    entry *e = s->entries[i];
    if (e->packed == NULL || e->summary_batch <= since) continue;
    if (n == LIST_JSON_JOBS) {
      next = s->entries[i - 1]->id; /* ListJobs' paging: the last id shown */
      break;
    }
    if (n++) put_text(t, ",", 1);
    put_text(t, e->summary, strlen(e->summary));
  }
  put_text(t, mid, sizeof mid - 1);
  json_t *token = json_string(next); /* a view id may hold anything but '/': encode it */
  char *quoted = token ? json_dumps(token, JSON_ENCODE_ANY) : NULL;
  json_decref(token);
  if (quoted == NULL || strlen(quoted) < 2) t->failed = 1;
  if (quoted && strlen(quoted) >= 2) put_text(t, quoted + 1, strlen(quoted) - 2);
  free(quoted);
  put_text(t, tail, sizeof tail - 1);
}

kolo_status kolo_server_store_jobs_json(kolo_server_store *s, uint64_t since, char **json,
                                        int *full, uint64_t *mark) {
  text t = {0};
  pthread_rwlock_rdlock(&s->lock);
  *mark = s->list_batch;
  *full = since == 0 || s->removed_batch > since;
  if (!*full) {
    size_t changed = 0;
    for (size_t i = 0; i < s->count; i++)
      changed += s->entries[i]->packed && s->entries[i]->summary_batch > since;
    *full = changed > LIST_JSON_JOBS;
  }
  jobs_json(s, *full ? 0 : since, &t);
  pthread_rwlock_unlock(&s->lock);
  if (t.failed) {
    free(t.buf);
    return KOLO_ERR_NO_MEMORY;
  }
  *json = t.buf;
  return KOLO_OK;
}
