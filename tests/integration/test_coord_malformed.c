/* Integration tests of the etcd client against a misbehaving peer: a loopback
 * HTTP server in the test answers each gateway path with a broken reply
 * (malformed JSON, a key that is not base64, a revision that is not a number, a
 * non-JSON error page, a garbage watch stream). Each becomes a kolo_status with a
 * clear message at once; nothing hangs and no state is invented. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordination/etcd.h"

typedef struct peer {
  int listen_fd;
  int port;
  pthread_t thread;
  atomic_int stop;
  atomic_int watch_connections;
} peer;

/* The canned broken reply for a request line. */
static const char *reply_for(const char *request, int *status) {
  *status = 200;
  if (strstr(request, "/v3/kv/put")) return "{\"header\":{\"revision\":";
  if (strstr(request, "/v3/kv/range"))
    return "{\"header\":{\"revision\":\"3\"},\"kvs\":[{\"key\":\"*not*base64\"}],\"count\":\"1\"}";
  if (strstr(request, "/v3/lease/grant")) return "{\"ID\":\"12ab\",\"TTL\":\"5\"}";
  if (strstr(request, "/v3/kv/deleterange")) {
    *status = 502;
    return "<html>bad gateway</html>";
  }
  if (strstr(request, "/v3/watch"))
    return "{\"result\":{\"created\":true}}\n{\"result\":{\"events\":[{\"kv\":{\"key\":\"%%\"}}]}}"
           "\n";
  return "{}";
}

/* Reads one request (headers + Content-Length body) and answers it. */
static void serve(peer *p, int fd) {
  char buf[65536];
  size_t got = 0;
  char *end = NULL;
  while (got < sizeof buf - 1) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 2000) <= 0) return;
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
    if (n <= 0) return;
    got += (size_t)n;
    buf[got] = '\0';
    end = strstr(buf, "\r\n\r\n");
    if (end) {
      const char *cl = strcasestr(buf, "Content-Length:");
      size_t body = cl ? (size_t)atol(cl + 15) : 0;
      if (got >= (size_t)(end + 4 - buf) + body) break;
    }
  }
  if (strstr(buf, "/v3/watch")) atomic_fetch_add(&p->watch_connections, 1);
  int status = 200;
  const char *body = reply_for(buf, &status);
  char head[256];
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: "
                   "%zu\r\nConnection: close\r\n\r\n",
                   status, status == 200 ? "OK" : "Bad Gateway", strlen(body));
  if (write(fd, head, (size_t)n) != n || write(fd, body, strlen(body)) != (ssize_t)strlen(body))
    return;
}

static void *peer_main(void *arg) {
  peer *p = arg;
  while (!atomic_load(&p->stop)) {
    struct pollfd pfd = {.fd = p->listen_fd, .events = POLLIN};
    if (poll(&pfd, 1, 100) <= 0) continue;
    int fd = accept(p->listen_fd, NULL, NULL);
    if (fd < 0) continue;
    serve(p, fd);
    close(fd);
  }
  return NULL;
}

typedef struct fixture {
  peer peer;
  kolo_etcd *client;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->peer.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (bind(f->peer.listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(f->peer.listen_fd, 16) != 0 ||
      getsockname(f->peer.listen_fd, (struct sockaddr *)&a, &len) != 0)
    return -1;
  f->peer.port = ntohs(a.sin_port);
  pthread_create(&f->peer.thread, NULL, peer_main, &f->peer);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", f->peer.port);
  const char *endpoints[] = {url};
  kolo_etcd_config config = {
      .endpoints = endpoints, .endpoint_count = 1, .request_timeout_ms = 2000};
  if (kolo_etcd_create(&config, &f->client) != KOLO_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_etcd_destroy(f->client);
  atomic_store(&f->peer.stop, 1);
  pthread_join(f->peer.thread, NULL);
  close(f->peer.listen_fd);
  free(f);
  return 0;
}

static void malformed_json_from_etcd_is_a_parse_error(void **state) {
  fixture *f = *state;
  int64_t rev = -1;
  assert_int_equal(kolo_etcd_put(f->client, kolo_etcd_str("/k"), kolo_etcd_str("v"), 0, NULL, &rev),
                   KOLO_ERR_PARSE);
  assert_non_null(strstr(kolo_etcd_last_error(), "malformed JSON reply"));
  assert_non_null(strstr(kolo_etcd_last_error(), "kv/put"));
}

static void a_key_that_is_not_base64_is_a_parse_error(void **state) {
  fixture *f = *state;
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/k"), &kv, NULL), KOLO_ERR_PARSE);
  assert_non_null(strstr(kolo_etcd_last_error(), "not valid base64"));
  assert_null(kv.key);
  kolo_etcd_range_result r;
  assert_int_equal(kolo_etcd_range_prefix(f->client, kolo_etcd_str("/"), 0, &r), KOLO_ERR_PARSE);
  assert_null(r.kvs);
  assert_int_equal(r.count, 0);
}

static void a_lease_id_that_is_not_a_number_is_a_parse_error(void **state) {
  fixture *f = *state;
  int64_t lease = -1;
  assert_int_equal(kolo_etcd_lease_grant(f->client, 5, &lease, NULL), KOLO_ERR_PARSE);
  assert_non_null(strstr(kolo_etcd_last_error(), "'ID'"));
  assert_int_equal(lease, 0);
}

static void a_non_json_error_page_is_a_protocol_error(void **state) {
  fixture *f = *state;
  assert_int_equal(kolo_etcd_delete(f->client, kolo_etcd_str("/k"), 0, NULL, NULL),
                   KOLO_ERR_PROTOCOL);
  assert_non_null(strstr(kolo_etcd_last_error(), "HTTP 502"));
}

static int got_update;
static void never(const kolo_etcd_watch_update *u, void *user) {
  (void)u;
  (void)user;
  got_update = 1;
}

static void a_garbage_watch_stream_is_dropped_and_retried_without_delivering(void **state) {
  fixture *f = *state;
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/w/"), .prefix = 1};
  assert_int_equal(kolo_etcd_watch_start(f->client, &opts, never, NULL, &w), KOLO_OK);
  struct timespec d = {0, 20 * 1000000L};
  for (int i = 0; i < 150 && atomic_load(&f->peer.watch_connections) < 3; i++) nanosleep(&d, NULL);
  kolo_etcd_watch_stop(w);
  assert_true(atomic_load(&f->peer.watch_connections) >= 3);
  assert_false(got_update);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(malformed_json_from_etcd_is_a_parse_error),
      cmocka_unit_test(a_key_that_is_not_base64_is_a_parse_error),
      cmocka_unit_test(a_lease_id_that_is_not_a_number_is_a_parse_error),
      cmocka_unit_test(a_non_json_error_page_is_a_protocol_error),
      cmocka_unit_test(a_garbage_watch_stream_is_dropped_and_retried_without_delivering),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
