/* kolo-server's settings: command-line flags and an optional `--config FILE` of
 * `key = value` lines using the same names as the long flags (flags win). */
#ifndef KOLO_SERVER_OPTIONS_H
#define KOLO_SERVER_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "coordination/etcd_access.h"
#include "kolo/status.h"

typedef struct kolo_server_options {
  char etcd[1024];              /* "auto", "none" (in-memory, nothing persists) or client URLs */
  kolo_etcd_access etcd_access; /* --etcd-ca/-cert/-key/-user/-password-file (password loaded) */
  char data_dir[512];           /* where --etcd auto keeps its data */
  char grpc_listen[256];
  char http_listen[256];         /* "off" disables HTTP */
  char http_allowed_hosts[1024]; /* Host names answered besides IPs and single labels */
  size_t max_message_bytes;
  size_t max_blob_bytes; /* PutJobBlob: the largest blob (server/blob.h) */
  char tls_cert[512];
  char tls_key[512];
  char token_file[512];
  char port_file[512];
  char name[128]; /* replica name in the election */
  int threads;    /* gRPC completion-queue threads */
  int http_threads;
  int grace_ms; /* SIGTERM: how long in-flight calls may take */
  int leader_ttl_s;
  char log_level[16];
  int metrics_points;      /* metrics history: points kept per job */
  int metrics_interval_ms; /* metrics history: at most one point per job this often */
  int max_log_streams;     /* StreamLogs + GET .../logs at once */
} kolo_server_options;

/* Fills opts from defaults, then the config file (if --config), then the flags.
 * KOLO_ERR_INVALID_ARG with a message in err for a bad flag, key or value;
 * KOLO_ERR_ABORTED after printing the usage for --help. */
kolo_status kolo_server_options_parse(int argc, char **argv, kolo_server_options *opts, char *err,
                                      size_t err_len);

void kolo_server_options_usage(FILE *out);

/* The bearer token in a --token-file's text, trimmed in place: surrounding whitespace
 * (a trailing newline) goes; what is left must be 1-4096 visible ASCII characters with no
 * space inside, else KOLO_ERR_INVALID_ARG with the reason in err (a file of only
 * whitespace would otherwise make every request need an empty or blank token). */
kolo_status kolo_server_token_parse(char *text, const char **token, char *err, size_t err_len);

#endif
