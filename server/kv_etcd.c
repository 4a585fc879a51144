/* kv.h over etcd through libkolo_coord (coordination/etcd.h): prefix ranges as one
 * consistent snapshot, txns with EQUAL compares on create/mod revisions, and a prefix
 * watch that the client resumes (or resyncs after a compaction) by itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "coordination/etcd.h"
#include "coordination/keys.h"
#include "server/kv.h"

#define LOG "etcd"

typedef struct etcd_kv {
  kolo_server_kv base;
  kolo_etcd *client;
  kolo_etcd_watch *watch;
  kolo_server_kv_watch_fn fn;
  void *arg;
} etcd_kv;

static kolo_status copy_kv(const kolo_etcd_kv *src, kolo_server_kv_item *dst) {
  dst->key = strndup((const char *)src->key, src->key_len);
  dst->value = malloc(src->value_len + 1);
  if (dst->key == NULL || dst->value == NULL) return KOLO_ERR_NO_MEMORY;
  if (src->value_len) memcpy(dst->value, src->value, src->value_len);
  dst->value[src->value_len] = '\0';
  dst->value_len = src->value_len;
  dst->create_revision = src->create_revision;
  dst->mod_revision = src->mod_revision;
  dst->lease = src->lease;
  return KOLO_OK;
}

static kolo_status etcd_range(kolo_server_kv *kv, const char *prefix, kolo_server_kv_item **items,
                              size_t *count, int64_t *revision) {
  etcd_kv *e = (etcd_kv *)kv;
  kolo_etcd_range_result res;
  memset(&res, 0, sizeof res);
  kolo_status rc = kolo_etcd_range_prefix(e->client, kolo_etcd_str(prefix), 500, &res);
  if (rc != KOLO_OK) {
    KOLO_LOGW(LOG, "range %s: %s", prefix, kolo_etcd_last_error());
    return rc;
  }
  kolo_server_kv_item *out = calloc(res.count + 1, sizeof *out);
  size_t n = 0;
  rc = out ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  for (size_t i = 0; i < res.count && rc == KOLO_OK; i++, n++) rc = copy_kv(&res.kvs[i], &out[i]);
  *revision = res.revision;
  kolo_etcd_range_result_free(&res);
  if (rc != KOLO_OK) {
    kolo_server_kv_items_free(out, n);
    return rc;
  }
  *items = out;
  *count = n;
  return KOLO_OK;
}

static kolo_status etcd_txn(kolo_server_kv *kv, const kolo_server_kv_compare *compares,
                            size_t n_compares, const kolo_server_kv_put *puts, size_t n_puts,
                            int64_t *revision) {
  etcd_kv *e = (etcd_kv *)kv;
  kolo_etcd_compare *cmps = calloc(n_compares + 1, sizeof *cmps);
  kolo_etcd_op *ops = calloc(n_puts + 1, sizeof *ops);
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (cmps == NULL || ops == NULL) goto out;
  for (size_t i = 0; i < n_compares; i++) {
    cmps[i].target =
        compares[i].target == KOLO_SERVER_KV_CREATE ? KOLO_ETCD_CMP_CREATE : KOLO_ETCD_CMP_MOD;
    cmps[i].result = KOLO_ETCD_EQUAL;
    cmps[i].key = kolo_etcd_str(compares[i].key);
    cmps[i].number = compares[i].revision;
  }
  for (size_t i = 0; i < n_puts; i++) {
    ops[i].kind = puts[i].value ? KOLO_ETCD_OP_PUT : KOLO_ETCD_OP_DELETE;
    ops[i].key = kolo_etcd_str(puts[i].key);
    if (puts[i].value) ops[i].value = kolo_etcd_str(puts[i].value);
    ops[i].lease = puts[i].lease;
  }
  kolo_etcd_txn txn = {cmps, n_compares, ops, n_puts, NULL, 0};
  kolo_etcd_txn_result res;
  memset(&res, 0, sizeof res);
  rc = kolo_etcd_txn_run(e->client, &txn, &res);
  if (rc != KOLO_OK) {
    KOLO_LOGW(LOG, "txn: %s", kolo_etcd_last_error());
    goto out;
  }
  rc = res.succeeded ? KOLO_OK : KOLO_ERR_CONFLICT;
  if (revision) *revision = res.revision;
  kolo_etcd_txn_result_free(&res);
out:
  free(cmps);
  free(ops);
  return rc;
}

static void on_update(const kolo_etcd_watch_update *update, void *user) {
  etcd_kv *e = user;
  int reset = update->kind == KOLO_ETCD_WATCH_RESYNC;
  size_t n = reset ? update->kv_count : update->event_count;
  kolo_server_kv_event *events = calloc(n + 1, sizeof *events);
  if (events == NULL) return;
  size_t filled = 0;
  for (size_t i = 0; i < n; i++) {
    const kolo_etcd_kv *kv = reset ? &update->kvs[i] : &update->events[i].kv;
    events[i].is_delete = !reset && update->events[i].type == KOLO_ETCD_EVENT_DELETE;
    if (copy_kv(kv, &events[i].item) != KOLO_OK) break;
    filled++;
  }
  e->fn(e->arg, events, filled, update->revision, reset);
  for (size_t i = 0; i < n; i++) {
    free(events[i].item.key);
    free(events[i].item.value);
  }
  free(events);
}

static kolo_status etcd_start_watch(kolo_server_kv *kv, const char *prefix, int64_t start_revision,
                                    kolo_server_kv_watch_fn fn, void *arg) {
  etcd_kv *e = (etcd_kv *)kv;
  e->fn = fn;
  e->arg = arg;
  kolo_etcd_watch_opts opts = {kolo_etcd_str(prefix), 1, start_revision, 0};
  kolo_status rc = kolo_etcd_watch_start(e->client, &opts, on_update, e, &e->watch);
  if (rc != KOLO_OK) KOLO_LOGE(LOG, "watch %s: %s", prefix, kolo_etcd_last_error());
  return rc;
}

static void etcd_stop_watch(kolo_server_kv *kv) {
  etcd_kv *e = (etcd_kv *)kv;
  kolo_etcd_watch_stop(e->watch);
  e->watch = NULL;
}

static int etcd_healthy(kolo_server_kv *kv) {
  etcd_kv *e = (etcd_kv *)kv;
  kolo_etcd_kv out;
  memset(&out, 0, sizeof out);
  kolo_status rc = kolo_etcd_get(e->client, kolo_etcd_str(KOLO_KEY_HEALTH), &out, NULL);
  kolo_etcd_kv_clear(&out);
  return rc == KOLO_OK || rc == KOLO_ERR_NOT_FOUND;
}

static void etcd_destroy(kolo_server_kv *kv) {
  etcd_kv *e = (etcd_kv *)kv;
  if (e == NULL) return;
  kolo_etcd_watch_stop(e->watch);
  kolo_etcd_destroy(e->client);
  free(e);
}

static const kolo_server_kv_ops etcd_ops = {etcd_range,      etcd_txn,     etcd_start_watch,
                                            etcd_stop_watch, etcd_healthy, etcd_destroy};

kolo_status kolo_server_kv_etcd_create(kolo_etcd *etcd, kolo_server_kv **out) {
  etcd_kv *e = calloc(1, sizeof *e);
  if (e == NULL) return KOLO_ERR_NO_MEMORY;
  e->base.ops = &etcd_ops;
  kolo_etcd_config tuning = {.request_timeout_ms = 3000, .watch_idle_ms = 5000};
  kolo_status rc = kolo_etcd_share(etcd, &tuning, &e->client);
  if (rc != KOLO_OK) {
    etcd_destroy(&e->base);
    return rc;
  }
  *out = &e->base;
  return KOLO_OK;
}

const kolo_etcd *kolo_server_kv_etcd_handle(const kolo_server_kv *kv) {
  return ((const etcd_kv *)kv)->client;
}
