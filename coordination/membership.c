/* Implementation of coordination/membership.h: the worker record (kolo.v1.WorkerRecord
 * in proto/kolo/v1/records.proto, JSON through the one codec, codec/) and its rules,
 * registration under a kept-alive lease, and the coordinator's list and snapshot watch. */
#include "coordination/membership.h"

#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/log.h"
#include "coordination/etcd_internal.h"
#include "coordination/keys.h"
#include "coordination/record.h"
#include "common/checks.h"
#include "kolo/v1/records.pb-c.h"

#define COMPONENT "membership"
#define MAX_LABELS 64

void kolo_worker_entries_free(kolo_worker_entry *entries, size_t count) {
  for (size_t i = 0; entries && i < count; i++)
    if (entries[i].record) protobuf_c_message_free_unpacked(&entries[i].record->base, NULL);
  free(entries);
}

int kolo_member_address_valid(const char *address) {
  if (address == NULL) return 0;
  size_t n = strlen(address);
  if (n < 3 || n > 300) return 0;
  const char *colon = strrchr(address, ':');
  if (colon == NULL || colon == address) return 0;
  const char *port = colon + 1;
  if (*port == '\0' || strlen(port) > 5) return 0;
  long value = 0;
  for (const char *p = port; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
    value = value * 10 + (*p - '0');
  }
  if (value < 1 || value > 65535) return 0;
  size_t host_len = (size_t)(colon - address);
  if (address[0] == '[') {
    /* "[v6]:port": brackets around the host, hex digits, colons and dots inside. */
    if (host_len < 3 || address[host_len - 1] != ']') return 0;
    for (size_t i = 1; i + 1 < host_len; i++) {
      char c = address[i];
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
            c == ':' || c == '.'))
        return 0;
    }
    return 1;
  }
  for (size_t i = 0; i < host_len; i++) {
    char c = address[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
          c == '-' || c == '_'))
      return 0;
  }
  return 1;
}

static int printable(const char *s, size_t max) {
  if (s == NULL) return 0;
  size_t n = strlen(s);
  if (n == 0 || n > max) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
  return 1;
}

int kolo_member_host_valid(const char *host) {
  return printable(host, 255);
}

/* The optional parts: the logs endpoint and the labels. */
static kolo_status check_logs_and_labels(const Kolo__V1__WorkerRecord *m, char *err,
                                         size_t err_len) {
  if ((m->logs_url == NULL) != (m->logs_token == NULL))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record %s: logs_url and logs_token go together", m->id);
  if (m->logs_url != NULL &&
      (!printable(m->logs_url, 255) ||
       (strncmp(m->logs_url, "http://", 7) != 0 && strncmp(m->logs_url, "https://", 8) != 0)))
    return kolo_record_fail(
        KOLO_ERR_INVALID_ARG, err, err_len,
        "worker record %s: logs_url must be an http(s):// URL of 1-255 printable characters",
        m->id);
  if (m->logs_token != NULL &&
      (strlen(m->logs_token) < 16 || strlen(m->logs_token) > 128 ||
       strspn(m->logs_token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") !=
           strlen(m->logs_token)))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record %s: logs_token must be 16-128 of [A-Za-z0-9]", m->id);
  for (size_t i = 0; i < m->n_labels; i++) {
    const Kolo__V1__WorkerRecord__LabelsEntry *l = m->labels[i];
    if (l == NULL || !printable(l->key, 128) || l->value == NULL || strlen(l->value) > 1024)
      return kolo_record_fail(
          KOLO_ERR_INVALID_ARG, err, err_len,
          "worker record %s: label %zu is not a short printable key with a value", m->id, i);
    for (size_t k = 0; k < i; k++)
      if (strcmp(m->labels[k]->key, l->key) == 0)
        return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                                "worker record %s: label '%s' appears twice", m->id, l->key);
  }
  return KOLO_OK;
}

kolo_status kolo_member_validate(const Kolo__V1__WorkerRecord *m, char *err, size_t err_len) {
  if (m == NULL)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "worker record is NULL");
  static const char *names[] = {"id", "host", "address", "state", "cpus", "gpus"};
  int present[] = {m->id != NULL,    m->host != NULL, m->address != NULL,
                   m->state != NULL, m->has_cpus,     m->has_gpus};
  for (size_t i = 0; i < 6; i++)
    if (!present[i])
      return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "worker record: missing '%s'",
                              names[i]);
  if (m->cpus < 0 || m->cpus > 65535)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record: 'cpus' out of range");
  if (m->gpus < 0 || m->gpus > 65535)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record: 'gpus' out of range");
  if (m->has_registered_unix_ms && m->registered_unix_ms <= 0)
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len,
                            "worker record: 'registered_unix_ms' is not a positive integer");
  if (m->n_labels > MAX_LABELS)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record: more than %d labels", MAX_LABELS);
  if (!kolo_keys_name_valid(m->id))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record: id '%.64s' is not valid (1-128 of A-Z a-z 0-9 . _ -)",
                            m->id);
  if (!kolo_member_host_valid(m->host))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record %s: host must be 1-255 printable characters", m->id);
  if (!kolo_member_address_valid(m->address))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record %s: address '%.64s' is not host:port", m->id,
                            m->address);
  if (m->state[0] == '\0' || strlen(m->state) > 32 ||
      strspn(m->state, "abcdefghijklmnopqrstuvwxyz_") != strlen(m->state))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "worker record %s: state must be 1-32 of [a-z_]", m->id);
  return check_logs_and_labels(m, err, err_len);
}

/* ---- the record as kolo.v1.WorkerRecord (records.proto), through the one codec ---- */

static int by_label_key(const void *a, const void *b) {
  const Kolo__V1__WorkerRecord__LabelsEntry *x = *(Kolo__V1__WorkerRecord__LabelsEntry *const *)a,
                                            *y = *(Kolo__V1__WorkerRecord__LabelsEntry *const *)b;
  return strcmp(x->key, y->key);
}

kolo_status kolo_member_write(const Kolo__V1__WorkerRecord *m, char **json, char *err,
                              size_t err_len) {
  if (json == NULL) return KOLO_ERR_INVALID_ARG;
  *json = NULL;
  if (m == NULL)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "worker record is NULL");
  Kolo__V1__WorkerRecord r = *m; /* a shallow copy with the record's presence */
  r.has_cpus = r.has_gpus = 1;
  r.has_registered_unix_ms = m->registered_unix_ms > 0;
  if (r.labels == NULL) r.n_labels = 0;
  KOLO_CHECK(kolo_member_validate(&r, err, err_len));
  Kolo__V1__WorkerRecord__LabelsEntry **sorted = calloc(r.n_labels + 1, sizeof *sorted);
  if (sorted == NULL)
    return kolo_record_fail(KOLO_ERR_NO_MEMORY, err, err_len,
                            "out of memory encoding a worker record");
  if (r.n_labels) memcpy(sorted, r.labels, r.n_labels * sizeof *sorted);
  qsort(sorted, r.n_labels, sizeof *sorted, by_label_key); /* keys in order, as always */
  r.labels = sorted;
  *json = kolo_codec_dump(&r.base, 0);
  free(sorted);
  return *json ? KOLO_OK
               : kolo_record_fail(KOLO_ERR_NO_MEMORY, err, err_len,
                                  "out of memory encoding a worker record");
}

/* Words a codec fault for this record's readers. */
static kolo_status fault_error(kolo_status rc, const kolo_codec_fault *f, char *err,
                               size_t err_len) {
  if (rc == KOLO_ERR_NO_MEMORY)
    return kolo_record_fail(rc, err, err_len, "out of memory reading a worker record");
  if (f->kind != KOLO_CODEC_FAULT_TYPE || f->field == NULL)
    return kolo_record_fail(
        KOLO_ERR_PARSE, err, err_len, "worker record: %s",
        f->kind == KOLO_CODEC_FAULT_TYPE ? "malformed JSON: not an object" : f->message);
  if (strncmp(f->path, "labels.", 7) == 0)
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len,
                            "worker record: label '%.64s' is not a string", f->path + 7);
  const char *what = f->field->type == PROTOBUF_C_TYPE_STRING       ? "a string"
                     : f->field->label == PROTOBUF_C_LABEL_REPEATED ? "an object"
                                                                    : "an integer";
  return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "worker record: '%s' is not %s",
                          f->field->name, what);
}

kolo_status kolo_member_read(const char *text, size_t len, Kolo__V1__WorkerRecord **out, char *err,
                             size_t err_len) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  kolo_status rc =
      kolo_codec_read(text, text ? len : 0, &kolo__v1__worker_record__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, &msg, &fault);
  if (rc != KOLO_OK) return fault_error(rc, &fault, err, err_len);
  rc = kolo_member_validate((Kolo__V1__WorkerRecord *)msg, err, err_len);
  if (rc != KOLO_OK) {
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
  }
  *out = (Kolo__V1__WorkerRecord *)msg;
  return KOLO_OK;
}

/* ---- registration ---- */

struct kolo_membership {
  kolo_etcd *client;
  char key[256];
  char *id;
  int64_t lease;
  kolo_etcd_keepalive *keepalive;
};

kolo_status kolo_membership_register(kolo_etcd *client, const Kolo__V1__WorkerRecord *m,
                                     int64_t ttl_s, kolo_etcd_lease_lost_fn lost, void *user,
                                     kolo_membership **out) {
  *out = NULL;
  char *json = NULL;
  char err[256];
  kolo_status rc = kolo_member_write(m, &json, err, sizeof err);
  if (rc != KOLO_OK) return kolo_etcd_fail(rc, "%s", err);
  kolo_membership *r = calloc(1, sizeof *r);
  if (r == NULL || (r->id = strdup(m->id)) == NULL) {
    rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  r->client = client;
  rc = kolo_keys_worker(m->id, r->key, sizeof r->key);
  int64_t granted = 0;
  if (rc == KOLO_OK) rc = kolo_etcd_lease_grant(client, ttl_s, &r->lease, &granted);
  if (rc != KOLO_OK) goto fail;
  kolo_etcd_kv existing;
  rc = kolo_etcd_create_key(client, kolo_etcd_str(r->key), kolo_etcd_str(json), r->lease, &existing,
                            NULL);
  if (rc == KOLO_ERR_EXISTS) {
    rc = kolo_etcd_fail(
        KOLO_ERR_EXISTS,
        "worker '%s' is already registered (lease %llx); it expires within its TTL if dead", m->id,
        (unsigned long long)existing.lease);
    kolo_etcd_kv_clear(&existing);
  }
  /* patient: a worker keeps its record through an etcd outage; only etcd saying
   * the lease is gone counts (docs/ELASTIC.md, "etcd outages") */
  if (rc == KOLO_OK)
    rc = kolo_etcd_keepalive_start_mode(client, r->lease, granted, KOLO_ETCD_KEEPALIVE_PATIENT,
                                        lost, user, &r->keepalive);
  if (rc != KOLO_OK) goto fail;
  free(json);
  KOLO_LOGI(COMPONENT, "registered worker %s at %s (lease %llx, TTL %lld s)", m->id, r->key,
            (unsigned long long)r->lease, (long long)granted);
  *out = r;
  return KOLO_OK;
fail:
  free(json);
  if (r) {
    if (r->lease) {
      /* Keep the message of the real failure. */
      char saved[512];
      snprintf(saved, sizeof saved, "%s", kolo_etcd_last_error());
      kolo_etcd_lease_revoke(client, r->lease);
      kolo_etcd_fail(rc, "%s", saved);
    }
    free(r->id);
    free(r);
  }
  return rc;
}

kolo_status kolo_membership_update(kolo_membership *r, const Kolo__V1__WorkerRecord *m) {
  if (m == NULL || m->id == NULL || strcmp(m->id, r->id) != 0)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "worker record update must keep the id '%s'",
                          r->id);
  char *json = NULL;
  char err[256];
  kolo_status rc = kolo_member_write(m, &json, err, sizeof err);
  if (rc != KOLO_OK) return kolo_etcd_fail(rc, "%s", err);
  /* Only while the record is still ours: compare LEASE(key) == our lease. */
  kolo_etcd_compare cmp = {.target = KOLO_ETCD_CMP_LEASE,
                           .result = KOLO_ETCD_EQUAL,
                           .key = kolo_etcd_str(r->key),
                           .number = r->lease};
  kolo_etcd_op put = {.kind = KOLO_ETCD_OP_PUT,
                      .key = kolo_etcd_str(r->key),
                      .value = kolo_etcd_str(json),
                      .lease = r->lease};
  kolo_etcd_txn txn = {&cmp, 1, &put, 1, NULL, 0};
  kolo_etcd_txn_result result;
  rc = kolo_etcd_txn_run(r->client, &txn, &result);
  if (rc == KOLO_ERR_NOT_FOUND)
    rc = kolo_etcd_fail(KOLO_ERR_LEASE_LOST, "worker %s: lease lost: %s", r->id,
                        kolo_etcd_last_error());
  if (rc == KOLO_OK) {
    if (!result.succeeded)
      rc = kolo_etcd_fail(KOLO_ERR_LEASE_LOST,
                          "worker %s: the record is no longer held by lease %llx", r->id,
                          (unsigned long long)r->lease);
    kolo_etcd_txn_result_free(&result);
  }
  free(json);
  return rc;
}

int64_t kolo_membership_lease(const kolo_membership *r) {
  return r->lease;
}

int kolo_membership_alive(const kolo_membership *r) {
  return kolo_etcd_keepalive_alive(r->keepalive);
}

int64_t kolo_membership_renewed_ms(const kolo_membership *r) {
  return kolo_etcd_keepalive_renewed_ms(r->keepalive);
}

kolo_status kolo_membership_deregister(kolo_membership *r) {
  if (r == NULL) return KOLO_OK;
  kolo_etcd_keepalive_stop(r->keepalive);
  kolo_status rc = kolo_etcd_lease_revoke(r->client, r->lease);
  if (rc == KOLO_ERR_NOT_FOUND) rc = KOLO_OK; /* already expired: the record is gone */
  free(r->id);
  free(r);
  return rc;
}

void kolo_membership_abandon(kolo_membership *r) {
  if (r == NULL) return;
  kolo_etcd_keepalive_stop(r->keepalive);
  free(r->id);
  free(r);
}

/* ---- list and watch ---- */

static int by_id(const void *a, const void *b) {
  return strcmp(((const kolo_worker_entry *)a)->record->id,
                ((const kolo_worker_entry *)b)->record->id);
}

/* Decodes one kv into m, checking the key matches the id inside. */
static kolo_status member_from_kv(const kolo_etcd_kv *kv, kolo_worker_entry *m) {
  char err[256];
  memset(m, 0, sizeof *m);
  kolo_status rc =
      kolo_member_read((const char *)kv->value, kv->value_len, &m->record, err, sizeof err);
  if (rc != KOLO_OK) return kolo_etcd_fail(rc, "%s", err);
  const char *suffix = (const char *)kv->key + strlen(KOLO_KEY_WORKERS_PREFIX);
  if (kv->key_len <= strlen(KOLO_KEY_WORKERS_PREFIX) || strcmp(suffix, m->record->id) != 0) {
    protobuf_c_message_free_unpacked(&m->record->base, NULL);
    m->record = NULL;
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "worker record at '%.100s' has another id",
                          (const char *)kv->key);
  }
  m->lease = kv->lease;
  m->mod_revision = kv->mod_revision;
  return KOLO_OK;
}

/* Decodes kvs into a sorted member array, skipping bad records. */
kolo_status kolo_members_from_kvs(const kolo_etcd_kv *kvs, size_t n, kolo_worker_entry **members,
                                  size_t *count) {
  *members = NULL;
  *count = 0;
  if (n == 0) return KOLO_OK;
  kolo_worker_entry *out = calloc(n, sizeof *out);
  if (out == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (member_from_kv(&kvs[i], &out[k]) == KOLO_OK)
      k++;
    else
      KOLO_LOGW(COMPONENT, "skipping worker record %.100s: %s", (const char *)kvs[i].key,
                kolo_etcd_last_error());
  }
  qsort(out, k, sizeof *out, by_id);
  *members = out;
  *count = k;
  return KOLO_OK;
}

kolo_status kolo_membership_list(kolo_etcd *client, kolo_worker_entry **members, size_t *count,
                                 int64_t *revision) {
  *members = NULL;
  *count = 0;
  kolo_etcd_range_result r;
  kolo_status rc = kolo_etcd_range_prefix(client, kolo_etcd_str(KOLO_KEY_WORKERS_PREFIX), 0, &r);
  if (rc != KOLO_OK) return rc;
  if (revision) *revision = r.revision;
  rc = kolo_members_from_kvs(r.kvs, r.count, members, count);
  kolo_etcd_range_result_free(&r);
  return rc;
}

struct kolo_membership_watch {
  kolo_membership_fn fn;
  void *user;
  kolo_worker_entry *members; /* sorted by id; touched only by the watch thread after start */
  size_t count;
  kolo_etcd_watch *watch;
};

/* Removes the member with this id, if present. */
static void remove_member(kolo_membership_watch *w, const char *id) {
  for (size_t i = 0; i < w->count; i++) {
    if (strcmp(w->members[i].record->id, id) == 0) {
      protobuf_c_message_free_unpacked(&w->members[i].record->base, NULL);
      memmove(&w->members[i], &w->members[i + 1], (w->count - i - 1) * sizeof *w->members);
      w->count--;
      return;
    }
  }
}

static void on_change(const kolo_etcd_watch_update *u, void *user) {
  kolo_membership_watch *w = user;
  if (u->kind == KOLO_ETCD_WATCH_RESYNC) {
    kolo_worker_entry *fresh = NULL;
    size_t n = 0;
    if (kolo_members_from_kvs(u->kvs, u->kv_count, &fresh, &n) != KOLO_OK) return;
    kolo_worker_entries_free(w->members, w->count);
    w->members = fresh;
    w->count = n;
    w->fn(w->members, w->count, w->user);
    return;
  }
  for (size_t i = 0; i < u->event_count; i++) {
    const kolo_etcd_event *e = &u->events[i];
    const char *key = (const char *)e->kv.key;
    if (e->kv.key_len <= strlen(KOLO_KEY_WORKERS_PREFIX)) continue;
    const char *id = key + strlen(KOLO_KEY_WORKERS_PREFIX);
    remove_member(w, id);
    if (e->type == KOLO_ETCD_EVENT_DELETE) continue;
    kolo_worker_entry m;
    if (member_from_kv(&e->kv, &m) != KOLO_OK) {
      KOLO_LOGW(COMPONENT, "ignoring worker record %.100s: %s", key, kolo_etcd_last_error());
      continue;
    }
    kolo_worker_entry *grown = realloc(w->members, (w->count + 1) * sizeof *grown);
    if (grown == NULL) {
      protobuf_c_message_free_unpacked(&m.record->base, NULL);
      continue;
    }
    w->members = grown;
    w->members[w->count++] = m;
    qsort(w->members, w->count, sizeof *w->members, by_id);
  }
  w->fn(w->members, w->count, w->user);
}

kolo_status kolo_membership_watch_start(kolo_etcd *client, kolo_membership_fn fn, void *user,
                                        kolo_membership_watch **out) {
  *out = NULL;
  if (fn == NULL) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "membership watch needs a callback");
  kolo_membership_watch *w = calloc(1, sizeof *w);
  if (w == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  w->fn = fn;
  w->user = user;
  int64_t revision = 0;
  kolo_status rc = kolo_membership_list(client, &w->members, &w->count, &revision);
  if (rc != KOLO_OK) {
    free(w);
    return rc;
  }
  fn(w->members, w->count, user);
  kolo_etcd_watch_opts opts = {
      .key = kolo_etcd_str(KOLO_KEY_WORKERS_PREFIX), .prefix = 1, .start_revision = revision + 1};
  rc = kolo_etcd_watch_start(client, &opts, on_change, w, &w->watch);
  if (rc != KOLO_OK) {
    kolo_worker_entries_free(w->members, w->count);
    free(w);
    return rc;
  }
  *out = w;
  return KOLO_OK;
}

void kolo_membership_watch_stop(kolo_membership_watch *w) {
  if (w == NULL) return;
  kolo_etcd_watch_stop(w->watch);
  kolo_worker_entries_free(w->members, w->count);
  free(w);
}
