/* Implementation of txn.h: three growable arrays (compares, operations, owned
 * strings) and one kolo_etcd_txn_run. */
#include "scheduler/txn.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define LOG "sched"

struct kolo_sched_txn {
  kolo_etcd_compare *cmps;
  size_t nc, cap_c;
  kolo_etcd_op *ops;
  size_t no, cap_o;
  char **owned;
  size_t n_owned, cap_owned;
  int broken;
};

/* Makes room for one more element in array (count used of cap); 0 when out of memory. */
#define GROW(array, count, cap) \
  ((count) < (cap) || grow_to((void *)&(array), &(cap), sizeof *(array)))

static int grow_to(void *array_pointer, size_t *cap, size_t size) {
  void *items;
  memcpy(&items, array_pointer, sizeof items);
  size_t cap2 = *cap ? *cap * 2 : 16;
  void *grown = realloc(items, cap2 * size);
  if (grown == NULL) return 0;
  memcpy(array_pointer, &grown, sizeof grown);
  *cap = cap2;
  return 1;
}

kolo_sched_txn *kolo_sched_txn_create(void) {
  return calloc(1, sizeof(kolo_sched_txn));
}

void kolo_sched_txn_destroy(kolo_sched_txn *t) {
  if (t == NULL) return;
  for (size_t i = 0; i < t->n_owned; i++) free(t->owned[i]);
  free(t->owned);
  free(t->cmps);
  free(t->ops);
  free(t);
}

/* Takes ownership of text; "" (and the txn broken) when it cannot. */
static const char *keep(kolo_sched_txn *t, char *text) {
  if (text == NULL || !GROW(t->owned, t->n_owned, t->cap_owned)) {
    free(text);
    t->broken = 1;
    return "";
  }
  t->owned[t->n_owned++] = text;
  return text;
}

void kolo_sched_txn_put(kolo_sched_txn *t, char *key, char *value) {
  const char *k = keep(t, key), *v = keep(t, value);
  if (!GROW(t->ops, t->no, t->cap_o)) {
    t->broken = 1;
    return;
  }
  t->ops[t->no++] =
      (kolo_etcd_op){.kind = KOLO_ETCD_OP_PUT, .key = kolo_etcd_str(k), .value = kolo_etcd_str(v)};
}

void kolo_sched_txn_delete(kolo_sched_txn *t, char *key) {
  const char *k = keep(t, key);
  if (!GROW(t->ops, t->no, t->cap_o)) {
    t->broken = 1;
    return;
  }
  t->ops[t->no++] = (kolo_etcd_op){.kind = KOLO_ETCD_OP_DELETE, .key = kolo_etcd_str(k)};
}

void kolo_sched_txn_compare(kolo_sched_txn *t, kolo_etcd_cmp_target target, char *key,
                            int64_t number) {
  const char *k = keep(t, key);
  if (!GROW(t->cmps, t->nc, t->cap_c)) {
    t->broken = 1;
    return;
  }
  t->cmps[t->nc++] = (kolo_etcd_compare){
      .target = target, .result = KOLO_ETCD_EQUAL, .key = kolo_etcd_str(k), .number = number};
}

kolo_status kolo_sched_txn_commit(kolo_sched_txn *t, kolo_etcd *etcd, kolo_sched_fence_fn fence,
                                  void *fence_arg) {
  char key[512];
  int64_t revision = 0;
  kolo_status rc = fence(fence_arg, key, sizeof key, &revision);
  if (rc != KOLO_OK) return rc;
  kolo_sched_txn_compare(t, KOLO_ETCD_CMP_CREATE, strdup(key), revision);
  if (t->broken) {
    KOLO_LOGE(LOG, "out of memory building a decision's txn; skipped");
    return KOLO_ERR_NO_MEMORY;
  }
  kolo_etcd_txn request = {t->cmps, t->nc, t->ops, t->no, NULL, 0};
  kolo_etcd_txn_result result;
  memset(&result, 0, sizeof result);
  rc = kolo_etcd_txn_run(etcd, &request, &result);
  if (rc == KOLO_OK && !result.succeeded) rc = KOLO_ERR_CONFLICT;
  if (rc != KOLO_OK && rc != KOLO_ERR_CONFLICT)
    KOLO_LOGW(LOG, "txn failed: %s", kolo_etcd_last_error());
  kolo_etcd_txn_result_free(&result);
  return rc;
}
