/* `--etcd auto`: a private single-member etcd started as a child process, stopped when the
 * server exits (and killed by the kernel if the server dies first). It listens on unix sockets
 * only (client and peer), in <data-dir>/run, a directory of mode 0700 like <data-dir> and its
 * data in <data-dir>/etcd: no other local user can reach it (a TCP port on 127.0.0.1 is open
 * to every local user, and its URL shows in `ps`). Periodic auto-compaction (10 min) and a
 * 2 GiB backend quota, as the Helm chart's etcd. */
#ifndef KOLO_SERVER_ETCD_CHILD_H
#define KOLO_SERVER_ETCD_CHILD_H

#include <stddef.h>
#include <limits.h>
#include <sys/types.h>

#include "kolo/status.h"

typedef struct kolo_server_etcd_child kolo_server_etcd_child;

/* Starts etcd and waits (at most timeout_ms) until it answers. */
kolo_status kolo_server_etcd_child_start(const char *data_dir, int timeout_ms,
                                         kolo_server_etcd_child **out);
#define KOLO_SERVER_ETCD_CHILD_URL_BYTES (PATH_MAX + 32)

/* "unix:///<abs data-dir>/run/client.sock:0" (kolo's etcd clients take unix:/// URLs). */
const char *kolo_server_etcd_child_url(const kolo_server_etcd_child *child);
/* SIGTERM, SIGKILL after 5 s, reap, free. */
void kolo_server_etcd_child_stop(kolo_server_etcd_child *child);

#endif
