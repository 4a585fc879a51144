/* Implementation of logserver.h: request parsing, the token check, and a content-reader
 * callback that turns a log-store reader into records. The callback may block (one
 * thread per connection): it waits up to a second for a line and sends a heartbeat
 * otherwise, so a server that went away is noticed within a second. */
#define _GNU_SOURCE
#include "worker/agent/logserver.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "coordination/keys.h"

#define LOG "logs"
#define MAX_RANKS 64
#define HEARTBEAT_MS 1000
#define RECORD_MAX (KOLO_AGENT_LOG_MAX_LINE + 128)

struct kolo_agent_logserver {
  struct MHD_Daemon *daemon;
  char *token_header;
  kolo_agent_logstore *store;
};

typedef struct query {
  uint32_t ranks[MAX_RANKS];
  size_t n_ranks;
  uint64_t tail;
  int follow;
  int has_after;
  kolo_agent_log_cursor after;
  char err[160];
} query;

/* One streaming answer. */
typedef struct answer {
  kolo_agent_logreader *reader; /* NULL: the job is unknown here */
  int follow;
  int ended;
  char record[RECORD_MAX];
  size_t record_len, record_sent;
} answer;

static int parse_u64(const char *text, uint64_t max, uint64_t *out) {
  if (text == NULL || *text < '0' || *text > '9') return 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (*end != '\0' || v > max) return 0;
  *out = v;
  return 1;
}

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value) {
  query *q = cls;
  (void)kind;
  uint64_t v = 0;
  if (q->err[0]) return MHD_YES;
  if (strcmp(key, "rank") == 0) {
    if (!parse_u64(value, UINT32_MAX, &v) || q->n_ranks == MAX_RANKS)
      snprintf(q->err, sizeof q->err, "rank: expected at most %d ranks of 0..%u", MAX_RANKS,
               UINT32_MAX);
    else
      q->ranks[q->n_ranks++] = (uint32_t)v;
  } else if (strcmp(key, "tail") == 0) {
    if (!parse_u64(value, 1000000000, &q->tail))
      snprintf(q->err, sizeof q->err, "tail: expected 0..1000000000");
  } else if (strcmp(key, "follow") == 0) {
    if (!parse_u64(value, 1, &v)) snprintf(q->err, sizeof q->err, "follow: expected 0 or 1");
    q->follow = (int)v;
  } else if (strcmp(key, "after") == 0) {
    char seq[32], off[32];
    const char *colon = value ? strchr(value, ':') : NULL;
    if (colon && (size_t)(colon - value) < sizeof seq && strlen(colon + 1) < sizeof off) {
      memcpy(seq, value, (size_t)(colon - value));
      seq[colon - value] = '\0';
      snprintf(off, sizeof off, "%s", colon + 1);
    }
    if (colon == NULL || !parse_u64(seq, UINT64_MAX, &q->after.seq) ||
        !parse_u64(off, UINT64_MAX, &q->after.offset))
      snprintf(q->err, sizeof q->err, "after: expected SEQ:OFFSET");
    q->has_after = 1;
  } else {
    snprintf(q->err, sizeof q->err, "%.64s: unknown query parameter", key);
  }
  return MHD_YES;
}

/* Fills a->record with the next record, waiting up to wait_ms for a line; returns 0 when
 * there is none: the stream is over, or (quiet = 1) nothing came within wait_ms. */
static int next_record(answer *a, int wait_ms, int quiet) {
  a->record_len = a->record_sent = 0;
  if (a->ended) return 0;
  if (a->reader == NULL) {
    a->ended = 1;
    a->record_len = (size_t)snprintf(a->record, sizeof a->record, "E none\n");
    return 1;
  }
  kolo_agent_log_line line;
  uint64_t skipped = 0;
  kolo_agent_log_next got = kolo_agent_logreader_next(a->reader, wait_ms, &line, &skipped);
  if (skipped)
    a->record_len = (size_t)snprintf(a->record, sizeof a->record, "G %" PRIu64 "\n", skipped);
  if (got == KOLO_AGENT_LOG_LINE) {
    size_t text = line.len > KOLO_AGENT_LOG_MAX_LINE ? KOLO_AGENT_LOG_MAX_LINE : line.len;
    int head = snprintf(a->record + a->record_len, sizeof a->record - a->record_len,
                        "L %" PRIu64 " %" PRIu64 " %" PRId64 " %" PRIu32 " ", line.next.seq,
                        line.next.offset, line.epoch, line.rank);
    a->record_len += (size_t)head;
    memcpy(a->record + a->record_len, line.text, text);
    a->record_len += text;
    a->record[a->record_len++] = '\n';
    return 1;
  }
  if (got == KOLO_AGENT_LOG_WAIT && a->follow) {
    if (quiet) return a->record_len > 0;
    a->record_len +=
        (size_t)snprintf(a->record + a->record_len, sizeof a->record - a->record_len, "H\n");
    return 1;
  }
  a->ended = 1;
  a->record_len +=
      (size_t)snprintf(a->record + a->record_len, sizeof a->record - a->record_len, "E done\n");
  return 1;
}

/* Fills buf with whole records as far as they are ready; blocks (up to a heartbeat) only
 * while buf is still empty. */
static ssize_t read_answer(void *cls, uint64_t pos, char *buf, size_t max) {
  answer *a = cls;
  (void)pos;
  size_t used = 0;
  while (used < max) {
    if (a->record_sent == a->record_len) {
      int ready =
          used == 0 ? next_record(a, a->follow ? HEARTBEAT_MS : 0, 0) : next_record(a, 0, 1);
      if (!ready) break;
    }
    size_t n = a->record_len - a->record_sent;
    if (n > max - used) n = max - used;
    memcpy(buf + used, a->record + a->record_sent, n);
    a->record_sent += n;
    used += n;
  }
  if (used == 0) return MHD_CONTENT_READER_END_OF_STREAM;
  return (ssize_t)used;
}

static void free_answer(void *cls) {
  answer *a = cls;
  kolo_agent_logreader_close(a->reader);
  free(a);
}

static enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, const char *code,
                                  const char *message) {
  char body[400];
  snprintf(body, sizeof body, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}", code, message);
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
  if (resp == NULL) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", "application/json");
  enum MHD_Result ret = MHD_queue_response(conn, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static int same_secret(const char *given, const char *want) {
  if (given == NULL) return 0;
  size_t len = strlen(given), want_len = strlen(want);
  unsigned diff = (unsigned)(len ^ want_len);
  for (size_t k = 0; k < want_len; k++)
    diff |= (unsigned)((uint8_t)given[k < len ? k : 0] ^ (uint8_t)want[k]);
  return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  kolo_agent_logserver *srv = cls;
  (void)version;
  (void)upload;
  if (*con_cls == NULL) {
    *con_cls = srv; /* first call: headers only */
    return MHD_YES;
  }
  if (*upload_size > 0) {
    *upload_size = 0; /* no bodies here */
    return MHD_YES;
  }
  const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
  if (!same_secret(auth, srv->token_header))
    return reply_json(conn, MHD_HTTP_UNAUTHORIZED, "UNAUTHENTICATED",
                      "missing or wrong bearer token");
  const char *prefix = "/v1/logs/";
  if (strcmp(method, "GET") != 0 || strncmp(url, prefix, strlen(prefix)) != 0)
    return reply_json(conn, MHD_HTTP_NOT_FOUND, "NOT_FOUND", "no such route");
  const char *job = url + strlen(prefix);
  if (!kolo_keys_name_valid(job))
    return reply_json(conn, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "bad job id");
  query q;
  memset(&q, 0, sizeof q);
  MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, query_arg, &q);
  if (q.err[0]) return reply_json(conn, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", q.err);
  answer *a = calloc(1, sizeof *a);
  if (a == NULL) return MHD_NO;
  a->follow = q.follow;
  kolo_agent_logreader_opts opts = {q.ranks, q.n_ranks, q.tail, q.has_after ? &q.after : NULL};
  kolo_status rc = kolo_agent_logreader_open(srv->store, job, &opts, &a->reader);
  if (rc != KOLO_OK && rc != KOLO_ERR_NOT_FOUND) {
    free(a);
    return reply_json(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", kolo_strerror(rc));
  }
  struct MHD_Response *resp =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, read_answer, a, free_answer);
  if (resp == NULL) {
    free_answer(a);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
  enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return ret;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  char line[512];
  (void)cls;
  vsnprintf(line, sizeof line, fmt, ap);
  line[strcspn(line, "\n")] = '\0';
  KOLO_LOGD(LOG, "libmicrohttpd: %s", line);
}

/* host:port -> an IPv4 socket address (a name is resolved; "" binds every address). */
static kolo_status listen_address(const char *listen, struct sockaddr_in *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  const char *colon = listen ? strrchr(listen, ':') : NULL;
  char host[256];
  if (colon == NULL || (size_t)(colon - listen) >= sizeof host) return KOLO_ERR_ADDRESS;
  memcpy(host, listen, (size_t)(colon - listen));
  host[colon - listen] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535) return KOLO_ERR_ADDRESS;
  addr->sin_port = htons((uint16_t)port);
  if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0) {
    addr->sin_addr.s_addr = htonl(INADDR_ANY);
    return KOLO_OK;
  }
  if (inet_pton(AF_INET, host, &addr->sin_addr) == 1) return KOLO_OK;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *found = NULL;
  if (getaddrinfo(host, NULL, &hints, &found) != 0 || found == NULL) return KOLO_ERR_ADDRESS;
  addr->sin_addr = ((struct sockaddr_in *)found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return KOLO_OK;
}

kolo_status kolo_agent_logserver_start(const kolo_agent_logserver_config *cfg,
                                       kolo_agent_logserver **out, int *bound_port) {
  if (cfg == NULL || cfg->store == NULL || cfg->token == NULL || cfg->token[0] == '\0')
    return KOLO_ERR_INVALID_ARG;
  struct sockaddr_in addr;
  if (listen_address(cfg->listen, &addr) != KOLO_OK) {
    KOLO_LOGE(LOG, "--logs-listen '%s' is not host:port of an IPv4 address",
              cfg->listen ? cfg->listen : "");
    return KOLO_ERR_ADDRESS;
  }
  kolo_agent_logserver *srv = calloc(1, sizeof *srv);
  if (srv == NULL) return KOLO_ERR_NO_MEMORY;
  srv->store = cfg->store;
  if (asprintf(&srv->token_header, "Bearer %s", cfg->token) < 0) {
    free(srv);
    return KOLO_ERR_NO_MEMORY;
  }
  srv->daemon = MHD_start_daemon(
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
      NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)KOLO_AGENT_LOGSERVER_CONNECTIONS,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)KOLO_AGENT_LOGSERVER_PER_CLIENT,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
      MHD_OPTION_END);
  if (srv->daemon == NULL) {
    KOLO_LOGE(LOG, "cannot serve logs on %s", cfg->listen);
    free(srv->token_header);
    free(srv);
    return KOLO_ERR_ADDRESS;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
  *bound_port = info ? (int)info->port : (int)ntohs(addr.sin_port);
  *out = srv;
  return KOLO_OK;
}

void kolo_agent_logserver_stop(kolo_agent_logserver *srv) {
  if (srv == NULL) return;
  kolo_agent_logstore_shutdown(srv->store);
  MHD_stop_daemon(srv->daemon);
  free(srv->token_header);
  free(srv);
}
