/* Leader election among kolo-server replicas through libkolo_coord's election (the etcd
 * recipe): each replica puts /kolo/v1/leader/<lease-hex> = its name under a lease it keeps
 * alive; the key with the lowest create revision leads. A replica that dies stops renewing, its key
 * goes with its lease, and the next one leads within the TTL (plus one poll interval). Only the
 * leader runs scheduling work (none yet: that lands with the worker issue); every replica serves
 * reads and the txn-guarded writes. */
#ifndef KOLO_SERVER_LEADER_H
#define KOLO_SERVER_LEADER_H

#include <stddef.h>
#include <stdint.h>

#include "coordination/etcd.h"
#include "kolo/status.h"

typedef struct kolo_server_leader kolo_server_leader;

/* Starts campaigning in a thread of its own, on a handle of etcd (the binary's one client,
 * kolo_etcd_share) with 1 s request deadlines: a campaign and the lease's renewals must
 * answer well within the TTL. etcd must outlive the leader. */
kolo_status kolo_server_leader_start(kolo_etcd *etcd, const char *name, int ttl_s,
                                     kolo_server_leader **out);
/* Resigns (revokes the lease, so another replica leads at once) and frees. */
void kolo_server_leader_stop(kolo_server_leader *l);

/* The leader's etcd handle (for its counters, kolo_etcd_stats_get). */
const kolo_etcd *kolo_server_leader_etcd(const kolo_server_leader *leader);

/* 1 if a leader is known; its name goes to leader_name, *is_me says whether it is us. */
int kolo_server_leader_get(kolo_server_leader *l, char *leader_name, size_t len, int *is_me);

/* For fencing leader-only writes: compare CREATE(key) == create_revision in the txn.
 * KOLO_ERR_NOT_LEADER if this replica does not lead now. */
kolo_status kolo_server_leader_fence(kolo_server_leader *l, char *key, size_t len,
                                     int64_t *create_revision);

#endif
