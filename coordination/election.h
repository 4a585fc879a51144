/* Leader election on etcd, following etcd's concurrency recipe: each candidate
 * creates <prefix><lease-hex> under its own lease (create-if-absent); the key
 * with the lowest create revision under the prefix leads; every other candidate
 * waits for the deletion of the key just below its own. A leader fences its
 * writes with compare CREATE(its key) == its create revision, so a leader whose
 * lease expired (deposed while paused, partitioned, ...) cannot write. */
#ifndef KOLO_COORD_ELECTION_H
#define KOLO_COORD_ELECTION_H

#include <stdint.h>

#include "coordination/etcd.h"

typedef struct kolo_election kolo_election;

/* Grants a lease of ttl_s seconds and keeps it alive; does not campaign yet.
 * prefix NULL = KOLO_KEY_LEADER_PREFIX ("/kolo/v1/leader/"); value is what
 * observers read (e.g. the candidate's address). lost (optional) is called on the
 * keep-alive thread when the lease is lost (leadership is gone then).
 * Blocks for at most the request deadline. */
kolo_status kolo_election_create(kolo_etcd *client, const char *prefix, const char *value,
                                 int64_t ttl_s, kolo_etcd_lease_lost_fn lost, void *user,
                                 kolo_election **out);

/* Enters the election (creates the candidate key unless it exists) and blocks
 * until this candidate leads (KOLO_OK), timeout_ms passes (KOLO_ERR_TIMEOUT; the
 * candidacy stays queued, call again to keep waiting), or the lease is lost
 * (KOLO_ERR_LEASE_LOST). timeout_ms <= 0 waits without bound. */
kolo_status kolo_election_campaign(kolo_election *e, int timeout_ms);

/* Whether this candidate won its last campaign and has not resigned or lost its
 * lease since (as far as it knows: use the fenced txn for writes that matter). */
int kolo_election_is_leader(const kolo_election *e);

/* This candidate's key ("<prefix><lease-hex>") and its create revision (0 before
 * campaigning). */
const char *kolo_election_key(const kolo_election *e);
int64_t kolo_election_revision(const kolo_election *e);

/* Runs txn with one more compare, CREATE(own key) == own revision. KOLO_OK when
 * etcd executed it (result->succeeded says whether the caller's compares held);
 * KOLO_ERR_NOT_LEADER when the fence failed (the candidate key is gone or was
 * re-created): nothing was written. Blocks for at most the request deadline. */
kolo_status kolo_election_fenced_txn(kolo_election *e, const kolo_etcd_txn *txn,
                                     kolo_etcd_txn_result *result);

/* Deletes the candidate key if it is still ours (the next candidate takes over)
 * and stops leading; campaign may be called again. Blocks for at most the deadline. */
kolo_status kolo_election_resign(kolo_election *e);

/* Resigns (best effort), stops the keep-alive, revokes the lease, frees.
 * Blocks for at most two request deadlines. NULL is ignored. */
void kolo_election_destroy(kolo_election *e);

/* Observes: the current leader's key-value (lowest create revision under prefix;
 * prefix NULL = the default). KOLO_ERR_NOT_FOUND when nobody campaigns.
 * Blocks for at most the request deadline. */
kolo_status kolo_election_leader(kolo_etcd *client, const char *prefix, kolo_etcd_kv *leader);

/* Called with the current leader's key-value, or NULL when nobody campaigns. */
typedef void (*kolo_election_observe_fn)(const kolo_etcd_kv *leader, void *user);

typedef struct kolo_election_observer kolo_election_observer;

/* Observes leadership changes: reads the leader and calls fn with it on the
 * caller's thread before returning, then calls fn on a watch thread each time
 * the leader (its key or create revision) changes. prefix NULL = the default.
 * Blocks for the initial read. */
kolo_status kolo_election_observe_start(kolo_etcd *client, const char *prefix,
                                        kolo_election_observe_fn fn, void *user,
                                        kolo_election_observer **out);

/* Stops the observer promptly and frees it. NULL is ignored. */
void kolo_election_observe_stop(kolo_election_observer *observer);

#endif
