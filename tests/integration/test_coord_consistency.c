/* Integration tests of the etcd client's two consistency promises, against a real
 * etcd (tests/support/etcd_harness):
 * - a write is never sent twice: when the endpoint a write went to takes the request
 *   and then fails (closes without answering, or stays silent past the deadline), the
 *   client reports the failure instead of re-sending the write to the next endpoint,
 *   since the first may have applied it; a read that got an empty reply fails over;
 * - a paged prefix read is one snapshot: every page is read at the first page's
 *   revision, so writes made while the pages are fetched never show up in the result
 *   (checked against one unpaged read at that revision). */
#define _GNU_SOURCE /* memmem */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordination/etcd.h"
#include "tests/support/etcd_harness.h"

typedef struct fixture {
  kolo_etcd_harness *etcd;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL || kolo_etcd_harness_start(NULL, &f->etcd) != KOLO_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_etcd_harness_destroy(f->etcd);
  free(f);
  return 0;
}

static kolo_etcd *client_for(const char *const *endpoints, size_t n, int timeout_ms) {
  kolo_etcd_config config = {.endpoints = endpoints,
                             .endpoint_count = n,
                             .request_timeout_ms = timeout_ms,
                             .connect_timeout_ms = 300};
  kolo_etcd *c = NULL;
  assert_int_equal(kolo_etcd_create(&config, &c), KOLO_OK);
  return c;
}

/* ---- an endpoint that takes requests and never answers them ---- */

typedef struct black_hole {
  int listen_fd;
  int hang; /* 1: keep the connection open, silent; 0: close it after the request */
  atomic_int requests;
  atomic_int stop;
  pthread_t thread;
  char url[64];
} black_hole;

static void *black_hole_main(void *arg) {
  black_hole *b = arg;
  while (!atomic_load(&b->stop)) {
    struct pollfd p = {.fd = b->listen_fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue;
    int fd = accept(b->listen_fd, NULL, NULL);
    if (fd < 0) continue;
    char buffer[8192];
    ssize_t n = 0;
    /* read until the request's headers have arrived (the body follows at once) */
    for (int i = 0; i < 40 && n >= 0; i++) {
      struct pollfd q = {.fd = fd, .events = POLLIN};
      if (poll(&q, 1, 50) <= 0) continue;
      n = read(fd, buffer, sizeof buffer);
      if (n > 0 && memmem(buffer, (size_t)n, "POST ", 5) != NULL) {
        atomic_fetch_add(&b->requests, 1);
        break;
      }
    }
    if (b->hang) {
      while (!atomic_load(&b->stop)) {
        struct timespec t = {0, 20 * 1000000L};
        nanosleep(&t, NULL);
      }
    }
    close(fd);
  }
  return NULL;
}

static void black_hole_start(black_hole *b, int hang) {
  memset(b, 0, sizeof *b);
  b->hang = hang;
  b->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(b->listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
  assert_int_equal(listen(b->listen_fd, 16), 0);
  socklen_t len = sizeof addr;
  getsockname(b->listen_fd, (struct sockaddr *)&addr, &len);
  snprintf(b->url, sizeof b->url, "http://127.0.0.1:%d", ntohs(addr.sin_port));
  assert_int_equal(pthread_create(&b->thread, NULL, black_hole_main, b), 0);
}

static void black_hole_stop(black_hole *b) {
  atomic_store(&b->stop, 1);
  pthread_join(b->thread, NULL);
  close(b->listen_fd);
}

static int key_exists(fixture *f, const char *key) {
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 1, 2000);
  kolo_etcd_kv kv = {0};
  kolo_status rc = kolo_etcd_get(c, kolo_etcd_str(key), &kv, NULL);
  kolo_etcd_kv_clear(&kv);
  kolo_etcd_destroy(c);
  assert_true(rc == KOLO_OK || rc == KOLO_ERR_NOT_FOUND);
  return rc == KOLO_OK;
}

static void write_is_not_resent(void **state, int hang) {
  fixture *f = *state;
  black_hole hole;
  black_hole_start(&hole, hang);
  const char *endpoints[] = {hole.url, kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 2, 1000);
  kolo_status rc = kolo_etcd_put(c, kolo_etcd_str("/once"), kolo_etcd_str("1"), 0, NULL, NULL);
  assert_int_not_equal(rc, KOLO_OK);
  printf("put through a %s endpoint: %s (%s)\n", hang ? "silent" : "closing", kolo_status_name(rc),
         kolo_etcd_last_error());
  assert_int_equal(atomic_load(&hole.requests), 1); /* sent once, to the first endpoint */
  assert_false(key_exists(f, "/once"));             /* and never to the second */
  kolo_etcd_destroy(c);

  /* a read is safe to repeat: an endpoint that answers nothing fails it over to the
   * live one (a silent one holds it to its deadline, like a frozen etcd) */
  if (hang) {
    black_hole_stop(&hole);
    return;
  }
  const char *live[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *writer = client_for(live, 1, 2000);
  assert_int_equal(
      kolo_etcd_put(writer, kolo_etcd_str("/read-me"), kolo_etcd_str("x"), 0, NULL, NULL), KOLO_OK);
  kolo_etcd_destroy(writer);
  c = client_for(endpoints, 2, 1000);
  kolo_etcd_kv kv = {0};
  assert_int_equal(kolo_etcd_get(c, kolo_etcd_str("/read-me"), &kv, NULL), KOLO_OK);
  assert_string_equal((const char *)kv.value, "x");
  kolo_etcd_kv_clear(&kv);
  kolo_etcd_destroy(c);
  black_hole_stop(&hole);
}

static void a_write_whose_endpoint_closed_after_taking_it_is_not_resent(void **state) {
  write_is_not_resent(state, 0);
}

static void a_write_whose_endpoint_went_silent_is_not_resent(void **state) {
  write_is_not_resent(state, 1);
}

/* ---- paged reads at one revision ---- */

#define PAGED_KEYS 150

typedef struct churn {
  const char *url;
  atomic_int stop;
  atomic_int writes;
} churn;

/* Rewrites, adds and deletes keys under /p/ until told to stop. */
static void *churn_main(void *arg) {
  churn *ch = arg;
  const char *endpoints[] = {ch->url};
  kolo_etcd_config config = {
      .endpoints = endpoints, .endpoint_count = 1, .request_timeout_ms = 2000};
  kolo_etcd *c = NULL;
  if (kolo_etcd_create(&config, &c) != KOLO_OK) return NULL;
  for (int i = 0; !atomic_load(&ch->stop); i++) {
    char key[32], value[32];
    snprintf(key, sizeof key, "/p/%03d", i % PAGED_KEYS);
    snprintf(value, sizeof value, "changed-%d", i);
    kolo_etcd_put(c, kolo_etcd_str(key), kolo_etcd_str(value), 0, NULL, NULL);
    snprintf(key, sizeof key, "/p/%03d-new", i % PAGED_KEYS);
    kolo_etcd_put(c, kolo_etcd_str(key), kolo_etcd_str("new"), 0, NULL, NULL);
    snprintf(key, sizeof key, "/p/%03d", (i * 7 + 3) % PAGED_KEYS);
    kolo_etcd_delete(c, kolo_etcd_str(key), 0, NULL, NULL);
    atomic_fetch_add(&ch->writes, 3);
  }
  kolo_etcd_destroy(c);
  return NULL;
}

static void a_paged_prefix_read_is_one_snapshot_while_keys_change(void **state) {
  fixture *f = *state;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 1, 5000);
  for (int i = 0; i < PAGED_KEYS; i++) {
    char key[32];
    snprintf(key, sizeof key, "/p/%03d", i);
    assert_int_equal(kolo_etcd_put(c, kolo_etcd_str(key), kolo_etcd_str("original"), 0, NULL, NULL),
                     KOLO_OK);
  }
  churn ch = {.url = endpoints[0]};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, churn_main, &ch), 0);
  while (atomic_load(&ch.writes) < 30) {
    struct timespec t = {0, 2 * 1000000L};
    nanosleep(&t, NULL);
  }
  kolo_etcd_range_result paged = {0};
  int writes_before = atomic_load(&ch.writes);
  assert_int_equal(kolo_etcd_range_prefix(c, kolo_etcd_str("/p/"), 2, &paged), KOLO_OK);
  int writes_during = atomic_load(&ch.writes) - writes_before;
  atomic_store(&ch.stop, 1);
  pthread_join(thread, NULL);
  printf("paged read of %zu keys at revision %lld; %d writes while it ran\n", paged.count,
         (long long)paged.revision, writes_during);
  assert_true(writes_during > 0); /* the pages really were fetched while keys changed */

  kolo_etcd_range_opts at = {.key = kolo_etcd_str("/p/"), .prefix = 1, .revision = paged.revision};
  kolo_etcd_range_result snapshot = {0};
  assert_int_equal(kolo_etcd_range(c, &at, &snapshot), KOLO_OK);
  assert_int_equal(paged.count, snapshot.count);
  for (size_t i = 0; i < paged.count; i++) {
    assert_string_equal((const char *)paged.kvs[i].key, (const char *)snapshot.kvs[i].key);
    assert_string_equal((const char *)paged.kvs[i].value, (const char *)snapshot.kvs[i].value);
    assert_int_equal(paged.kvs[i].mod_revision, snapshot.kvs[i].mod_revision);
  }
  kolo_etcd_range_result_free(&paged);
  kolo_etcd_range_result_free(&snapshot);
  kolo_etcd_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_write_whose_endpoint_closed_after_taking_it_is_not_resent,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(a_write_whose_endpoint_went_silent_is_not_resent, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_paged_prefix_read_is_one_snapshot_while_keys_change, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
