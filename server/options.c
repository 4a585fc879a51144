/* Implementation of options.h: one table of settings drives flags, the config file and
 * the usage text. */
#include "server/options.h"

#include "common/checks.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum kind { TEXT, INT, SIZE } kind;

typedef struct setting {
  const char *name;
  kind type;
  size_t offset;
  size_t size; /* TEXT: buffer size */
  const char *help;
} setting;

#define TEXT_OPT(field, name, help)                                                              \
  {                                                                                              \
    name, TEXT, offsetof(kolo_server_options, field), sizeof(((kolo_server_options *)0)->field), \
        help                                                                                     \
  }
#define INT_OPT(field, name, help) \
  { name, INT, offsetof(kolo_server_options, field), 0, help }

static const setting settings[] = {
    TEXT_OPT(
        etcd, "etcd",
        "etcd client URLs (comma-separated), 'auto' (private etcd child) or 'none' (memory only)"),
    TEXT_OPT(etcd_access.ca_file, "etcd-ca",
             "PEM CA bundle to verify etcd (https:// endpoints; default: the system's)"),
    TEXT_OPT(etcd_access.cert_file, "etcd-cert",
             "PEM client certificate for etcd (with --etcd-key)"),
    TEXT_OPT(etcd_access.key_file, "etcd-key", "PEM private key of --etcd-cert"),
    TEXT_OPT(etcd_access.user, "etcd-user", "etcd user (auth; with --etcd-password-file)"),
    TEXT_OPT(etcd_access.password_file, "etcd-password-file",
             "file whose first line is --etcd-user's password"),
    TEXT_OPT(data_dir, "data-dir", "data directory of --etcd auto (default ./kolo-data)"),
    TEXT_OPT(grpc_listen, "grpc-listen",
             "gRPC address (default 127.0.0.1:7070; port 0 = any free port)"),
    TEXT_OPT(http_listen, "http-listen", "HTTP address (default 127.0.0.1:7080; 'off' disables)"),
    TEXT_OPT(http_allowed_hosts, "http-allowed-hosts",
             "host names the HTTP API answers to besides IP addresses, localhost and names "
             "without a dot (comma-separated; *.example.com for subdomains; * = any)"),
    {"max-message-bytes", SIZE, offsetof(kolo_server_options, max_message_bytes), 0,
     "largest request accepted, bytes (default 4194304)"},
    {"max-blob-bytes", SIZE, offsetof(kolo_server_options, max_blob_bytes), 0,
     "largest job blob (kolo.Runner payload) accepted by PutJobBlob, bytes (default 67108864)"},
    TEXT_OPT(tls_cert, "tls-cert", "PEM certificate: serve gRPC and HTTP over TLS"),
    TEXT_OPT(tls_key, "tls-key", "PEM private key for --tls-cert"),
    TEXT_OPT(token_file, "token-file", "file holding a bearer token every request must carry"),
    TEXT_OPT(port_file, "port-file", "write the bound ports here (grpc_port=N, http_port=N)"),
    TEXT_OPT(name, "name", "replica name in the leader election (default host-pid)"),
    INT_OPT(threads, "threads", "gRPC completion-queue threads (default 4)"),
    INT_OPT(http_threads, "http-threads", "HTTP worker threads (default 2)"),
    INT_OPT(grace_ms, "grace-ms",
            "on SIGTERM, how long calls in flight may still take (default 5000)"),
    INT_OPT(leader_ttl_s, "leader-ttl", "leader lease TTL in seconds (default 3)"),
    TEXT_OPT(log_level, "log-level",
             "error, warn, info or debug (default info, or KOLO_LOG_LEVEL)"),
    INT_OPT(metrics_points, "metrics-points",
            "metrics history: points kept per job, 3-100000 (default 2000)"),
    INT_OPT(metrics_interval_ms, "metrics-interval-ms",
            "metrics history: at most one point per job this often, 100-3600000 ms (default 1000)"),
    INT_OPT(max_log_streams, "max-log-streams", "job log streams served at once (default 64)"),
};
#define N_SETTINGS (sizeof settings / sizeof settings[0])

void kolo_server_options_usage(FILE *out) {
  fprintf(out, "usage: kolo-server [--config FILE] [--flag value ...]\n\n");
  fprintf(out, "  --config FILE          key = value lines with the flag names below\n");
  for (size_t i = 0; i < N_SETTINGS; i++)
    fprintf(out, "  --%-20s %s\n", settings[i].name, settings[i].help);
}

static const setting *find(const char *name) {
  for (size_t i = 0; i < N_SETTINGS; i++)
    if (strcmp(settings[i].name, name) == 0) return &settings[i];
  return NULL;
}

static kolo_status set(kolo_server_options *o, const setting *s, const char *value, char *err,
                       size_t err_len) {
  char *field = (char *)o + s->offset;
  if (s->type == TEXT) {
    if (strlen(value) >= s->size) {
      snprintf(err, err_len, "%s: value too long", s->name);
      return KOLO_ERR_INVALID_ARG;
    }
    snprintf(field, s->size, "%s", value);
    return KOLO_OK;
  }
  char *end;
  errno = 0;
  long long n = strtoll(value, &end, 10);
  if (errno || *value == '\0' || *end != '\0' || n < 0 || (s->type == INT && n > INT_MAX)) {
    snprintf(err, err_len, "%s: expected a non-negative integer, got '%.64s'", s->name, value);
    return KOLO_ERR_INVALID_ARG;
  }
  if (s->type == INT)
    *(int *)field = (int)n;
  else
    *(size_t *)field = (size_t)n;
  return KOLO_OK;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

static kolo_status load_file(kolo_server_options *o, const char *path, char *err, size_t err_len) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, err_len, "config %.200s: %s", path, strerror(errno));
    return KOLO_ERR_INVALID_ARG;
  }
  char line[2048];
  int number = 0;
  kolo_status rc = KOLO_OK;
  while (rc == KOLO_OK && fgets(line, sizeof line, f)) {
    number++;
    char *text = trim(line);
    if (*text == '\0' || *text == '#') continue;
    char *eq = strchr(text, '=');
    if (eq == NULL) {
      snprintf(err, err_len, "config %.200s:%d: expected key = value", path, number);
      rc = KOLO_ERR_INVALID_ARG;
      break;
    }
    *eq = '\0';
    char *key = trim(text), *value = trim(eq + 1);
    const setting *s = find(key);
    if (s == NULL) {
      snprintf(err, err_len, "config %.200s:%d: unknown key '%.64s'", path, number, key);
      rc = KOLO_ERR_INVALID_ARG;
      break;
    }
    rc = set(o, s, value, err, err_len);
  }
  fclose(f);
  return rc;
}

kolo_status kolo_server_options_parse(int argc, char **argv, kolo_server_options *o, char *err,
                                      size_t err_len) {
  memset(o, 0, sizeof *o);
  snprintf(o->etcd, sizeof o->etcd, "auto");
  snprintf(o->data_dir, sizeof o->data_dir, "./kolo-data");
  snprintf(o->grpc_listen, sizeof o->grpc_listen, "127.0.0.1:7070");
  snprintf(o->http_listen, sizeof o->http_listen, "127.0.0.1:7080");
  o->max_message_bytes = 4u << 20;
  o->max_blob_bytes = 64u << 20;
  o->threads = 4;
  o->http_threads = 2;
  o->grace_ms = 5000;
  o->leader_ttl_s = 3;
  o->metrics_points = 2000;
  o->metrics_interval_ms = 1000;
  o->max_log_streams = 64;
  char host[64] = "kolo";
  gethostname(host, sizeof host - 1);
  snprintf(o->name, sizeof o->name, "%.64s-%d", host, (int)getpid());
  /* The config file first, so flags override it. */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 || strncmp(argv[i], "--config=", 9) == 0) {
      const char *path = argv[i][8] == '=' ? argv[i] + 9 : (i + 1 < argc ? argv[i + 1] : NULL);
      if (path == NULL) {
        snprintf(err, err_len, "--config needs a file");
        return KOLO_ERR_INVALID_ARG;
      }
      KOLO_CHECK(load_file(o, path, err, err_len));
    }
  }
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      kolo_server_options_usage(stdout);
      return KOLO_ERR_ABORTED;
    }
    if (strncmp(arg, "--", 2) != 0) {
      snprintf(err, err_len, "unexpected argument '%.64s'", arg);
      return KOLO_ERR_INVALID_ARG;
    }
    char name[64];
    const char *value = NULL;
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, arg + 2, n);
    name[n] = '\0';
    if (eq)
      value = eq + 1;
    else if (i + 1 < argc)
      value = argv[++i];
    if (strcmp(name, "config") == 0) continue;
    const setting *s = find(name);
    if (s == NULL) {
      snprintf(err, err_len, "unknown flag --%s", name);
      return KOLO_ERR_INVALID_ARG;
    }
    if (value == NULL) {
      snprintf(err, err_len, "--%s needs a value", name);
      return KOLO_ERR_INVALID_ARG;
    }
    KOLO_CHECK(set(o, s, value, err, err_len));
  }
  const char *listens[2][2] = {{"grpc-listen", o->grpc_listen}, {"http-listen", o->http_listen}};
  for (int k = 0; k < 2; k++) {
    if (k == 1 && strcmp(o->http_listen, "off") == 0) continue;
    const char *colon = strrchr(listens[k][1], ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (colon == NULL || colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535) {
      snprintf(err, err_len, "%s: expected HOST:PORT with a port 0-65535, got '%.200s'",
               listens[k][0], listens[k][1]);
      return KOLO_ERR_INVALID_ARG;
    }
  }
  /* auto (a private etcd child) and none take their endpoints elsewhere, or none */
  if (strcmp(o->etcd, "auto") != 0 && strcmp(o->etcd, "none") != 0)
    KOLO_CHECK(kolo_etcd_access_set_endpoints(&o->etcd_access, o->etcd, err, err_len));
  KOLO_CHECK(kolo_etcd_access_load(&o->etcd_access, err, err_len));
  if ((o->tls_cert[0] != '\0') != (o->tls_key[0] != '\0')) {
    snprintf(err, err_len, "--tls-cert and --tls-key go together");
    return KOLO_ERR_INVALID_ARG;
  }
  if (o->max_message_bytes < 1024) {
    snprintf(err, err_len, "max-message-bytes: at least 1024");
    return KOLO_ERR_INVALID_ARG;
  }
  if (o->max_log_streams < 1 || o->max_log_streams > 4096) {
    snprintf(err, err_len, "max-log-streams: 1..4096");
    return KOLO_ERR_INVALID_ARG;
  }
  if (o->threads < 1 || o->http_threads < 1) {
    snprintf(err, err_len, "threads: at least 1");
    return KOLO_ERR_INVALID_ARG;
  }
  if (o->metrics_points < 3 || o->metrics_points > 100000) {
    snprintf(err, err_len, "metrics-points: expected 3-100000");
    return KOLO_ERR_INVALID_ARG;
  }
  if (o->metrics_interval_ms < 100 || o->metrics_interval_ms > 3600000) {
    snprintf(err, err_len, "metrics-interval-ms: expected 100-3600000");
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

kolo_status kolo_server_token_parse(char *text, const char **token, char *err, size_t err_len) {
  char *t = trim(text);
  size_t n = strlen(t);
  if (n == 0) {
    snprintf(err, err_len, "the token file holds no token (empty or only whitespace)");
    return KOLO_ERR_INVALID_ARG;
  }
  if (n > 4096) {
    snprintf(err, err_len, "the token is longer than 4096 characters");
    return KOLO_ERR_INVALID_ARG;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)t[i];
    if (c <= ' ' || c >= 0x7f) {
      snprintf(err, err_len, "the token has a space, control or non-ASCII character at offset %zu",
               i);
      return KOLO_ERR_INVALID_ARG;
    }
  }
  *token = t;
  return KOLO_OK;
}
