/* A real etcd (Debian etcd-server, /usr/bin/etcd) for integration tests: one
 * single-member server on 127.0.0.1 with freshly picked free ports and a temp
 * data dir, started as a child process, stopped by PID. Used by every component
 * whose tests need etcd. The child dies with the test process (PR_SET_PDEATHSIG),
 * so a crashed test leaves no etcd behind; its log is <dir>/etcd.log.
 *
 *   kolo_etcd_harness *etcd;
 *   if (kolo_etcd_harness_start(NULL, &etcd) != KOLO_OK) fail;
 *   const char *url = kolo_etcd_harness_url(etcd);   // "http://127.0.0.1:PORT"
 *   ... kolo_etcd_harness_stop / _kill / _restart ...
 *   kolo_etcd_harness_destroy(etcd);                   // kills it, removes the dir
 *
 * Environment: KOLO_ETCD_BIN overrides the binary; KOLO_ETCD_KEEP=1 keeps the
 * data dir for a post-mortem. */
#ifndef KOLO_TESTS_ETCD_HARNESS_H
#define KOLO_TESTS_ETCD_HARNESS_H

#include <sys/types.h>

#include "kolo/status.h"

typedef struct kolo_etcd_harness kolo_etcd_harness;

/* Starts etcd and waits (at most 30 s) until GET /health says true. extra_args is
 * an optional NULL-terminated list of further etcd flags (e.g. "--auth-token-ttl=1").
 * Progress notifications are sent every second (watches notice a dead server).
 * On failure the last lines of etcd's log go to stderr. */
kolo_status kolo_etcd_harness_start(const char *const *extra_args, kolo_etcd_harness **out);

/* Like kolo_etcd_harness_start, and etcd also serves clients over TLS on a third
 * port (kolo_etcd_harness_tls_url) with the given server certificate and key
 * (PEM files), requiring client certificates signed by ca_file. The plain HTTP
 * URL keeps working (health checks use it). */
kolo_status kolo_etcd_harness_start_tls(const char *cert_file, const char *key_file,
                                        const char *ca_file, kolo_etcd_harness **out);

/* "https://127.0.0.1:<port>" for a harness started with TLS, else NULL. */
const char *kolo_etcd_harness_tls_url(const kolo_etcd_harness *etcd);

/* The client URL, "http://127.0.0.1:<port>"; the same across restarts. */
const char *kolo_etcd_harness_url(const kolo_etcd_harness *etcd);

/* The temp directory (data dir is <dir>/data, log is <dir>/etcd.log). */
const char *kolo_etcd_harness_dir(const kolo_etcd_harness *etcd);

/* The server's PID, or -1 while it is stopped. */
pid_t kolo_etcd_harness_pid(const kolo_etcd_harness *etcd);

/* SIGTERM, then SIGKILL after 5 s; waits for the process. No-op when stopped. */
kolo_status kolo_etcd_harness_stop(kolo_etcd_harness *etcd);

/* SIGKILL (a crash); waits for the process. No-op when stopped. */
kolo_status kolo_etcd_harness_kill(kolo_etcd_harness *etcd);

/* Starts a stopped server again on the same data dir and ports and waits for
 * health (at most 30 s). Stops it first if it is running. */
kolo_status kolo_etcd_harness_restart(kolo_etcd_harness *etcd);

/* Kills the server if running, removes the temp directory, frees. NULL is ignored. */
void kolo_etcd_harness_destroy(kolo_etcd_harness *etcd);

#endif
