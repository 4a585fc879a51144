/* Drain marks: /kolo/v1/drain/<worker id>, written by kolo-server (DrainWorker) and read by
 * the scheduler and ListWorkers. A mark belongs to one registration (incarnation) of a
 * worker: kolo-server writes it under that registration's lease, so etcd deletes it when the
 * lease ends (the worker exited, was revoked or expired), and it names the lease, so a mark
 * that outlived its registration anyway (written without a lease by an older kolo-server) is
 * ignored by everyone instead of draining the worker's next incarnation forever.
 *
 * The mark is kolo.v1.DrainMark (proto/kolo/v1/records.proto) in the one JSON codec (codec/).
 * JSON form: {"draining":true,"lease":<lease id>,"time_unix_ms":<when it was drained>} */
#ifndef KOLO_COORD_DRAIN_H
#define KOLO_COORD_DRAIN_H

#include <stddef.h>
#include <stdint.h>

/* The mark's value for the registration holding lease (malloc'd; NULL when out of memory). */
char *kolo_drain_mark_json(int64_t lease, int64_t time_unix_ms);

/* Whether a mark's value drains the registration that holds lease: it must decode as a
 * DrainMark (fields a newer writer added are skipped, integers are JSON integers) with
 * "draining": true and "lease" equal to lease. Anything else (malformed, a legacy mark
 * without a lease, another incarnation's lease) drains nothing. */
int kolo_drain_mark_applies(const char *value, size_t len, int64_t lease);

typedef struct kolo_etcd kolo_etcd;

/* Whether worker_id's drain mark in etcd applies to the registration holding lease (reads
 * the mark; 0 when there is none, it cannot be read, or it names another lease). The one
 * reader for kolo-worker's agent and bench/scale's simulated agents. */
int kolo_drain_marked(kolo_etcd *etcd, const char *worker_id, int64_t lease);

#endif
