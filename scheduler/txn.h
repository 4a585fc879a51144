/* A fenced etcd txn under construction, for the scheduler's writes. Compares
 * and operations grow with the decision (no fixed limit); the builder owns the
 * key and value strings it is given. kolo_sched_txn_commit adds the election
 * fence (CREATE(leader key) == the leader's create revision), so a deposed
 * leader writes nothing. A failed allocation marks the txn broken and commit
 * refuses it: a decision is written whole or not at all. */
#ifndef KOLO_SCHED_TXN_H
#define KOLO_SCHED_TXN_H

#include <stdint.h>

#include "coordination/etcd.h"
#include "scheduler/scheduler.h"

typedef struct kolo_sched_txn kolo_sched_txn;

/* A new empty txn; NULL when out of memory. */
kolo_sched_txn *kolo_sched_txn_create(void);

void kolo_sched_txn_destroy(kolo_sched_txn *t);

/* Each takes ownership of key and value (malloc'd; NULL marks the txn broken). */
void kolo_sched_txn_put(kolo_sched_txn *t, char *key, char *value);
void kolo_sched_txn_delete(kolo_sched_txn *t, char *key);
/* compare target(key) == number */
void kolo_sched_txn_compare(kolo_sched_txn *t, kolo_etcd_cmp_target target, char *key,
                            int64_t number);

/* Runs t fenced by the leader key from fence. KOLO_OK only when every compare
 * held; KOLO_ERR_CONFLICT when one did not (nothing written); KOLO_ERR_NOT_LEADER
 * from the fence; KOLO_ERR_NO_MEMORY for a broken txn. Blocks for at most the
 * etcd request deadline. */
kolo_status kolo_sched_txn_commit(kolo_sched_txn *t, kolo_etcd *etcd, kolo_sched_fence_fn fence,
                                  void *fence_arg);

#endif
