/* `--etcd auto`: a private single-member etcd started as a child process on 127.0.0.1
 * free ports with its data under <data-dir>/etcd, stopped when the server exits (and
 * killed by the kernel if the server dies first). */
#ifndef KOLO_SERVER_ETCD_CHILD_H
#define KOLO_SERVER_ETCD_CHILD_H

#include <stddef.h>
#include <sys/types.h>

#include "kolo/status.h"

typedef struct kolo_server_etcd_child kolo_server_etcd_child;

/* Starts etcd and waits (at most timeout_ms) until it answers. */
kolo_status kolo_server_etcd_child_start(const char *data_dir, int timeout_ms,
                                         kolo_server_etcd_child **out);
/* "http://127.0.0.1:<port>". */
const char *kolo_server_etcd_child_url(const kolo_server_etcd_child *child);
/* SIGTERM, SIGKILL after 5 s, reap, free. */
void kolo_server_etcd_child_stop(kolo_server_etcd_child *child);

#endif
