/* Integration tests of etcd authentication against a real etcd with auth
 * enabled and a 1 s token TTL: the client logs in on first use, re-authenticates
 * when its token expires, and a wrong password or a missing user is a clear
 * KOLO_ERR_AUTH. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "coordination/etcd_internal.h"
#include "tests/support/etcd_harness.h"

typedef struct fixture {
  kolo_etcd_harness *etcd;
} fixture;

/* One raw gateway call that must succeed (setting up users and roles). */
static int admin(kolo_etcd *c, const char *path, const char *body_text) {
  json_error_t e;
  json_t *body = json_loads(body_text, 0, &e), *reply = NULL;
  kolo_status rc = kolo_etcd_call(c, path, body, 0, 0, NULL, &reply);
  json_decref(body);
  json_decref(reply);
  if (rc != KOLO_OK) print_error("%s: %s\n", path, kolo_etcd_last_error());
  return rc == KOLO_OK ? 0 : -1;
}

static kolo_etcd *client(fixture *f, const char *user, const char *password) {
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd_config config = {.endpoints = endpoints,
                             .endpoint_count = 1,
                             .request_timeout_ms = 2000,
                             .user = user,
                             .password = password};
  kolo_etcd *c = NULL;
  if (kolo_etcd_create(&config, &c) != KOLO_OK) return NULL;
  return c;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  const char *args[] = {"--auth-token=simple", "--auth-token-ttl=1", NULL};
  if (kolo_etcd_harness_start(args, &f->etcd) != KOLO_OK) return -1;
  kolo_etcd *c = client(f, NULL, NULL);
  int bad = c == NULL || admin(c, "auth/user/add", "{\"name\":\"root\",\"password\":\"s3cret\"}") ||
            admin(c, "auth/role/add", "{\"name\":\"root\"}") ||
            admin(c, "auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}") ||
            admin(c, "auth/enable", "{}");
  kolo_etcd_destroy(c);
  *state = f;
  return bad ? -1 : 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_etcd_harness_destroy(f->etcd);
  free(f);
  return 0;
}

static void the_client_logs_in_and_refreshes_an_expired_token(void **state) {
  fixture *f = *state;
  kolo_etcd *c = client(f, "root", "s3cret");
  assert_non_null(c);
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/a/k"), kolo_etcd_str("1"), 0, NULL, NULL),
                   KOLO_OK);
  char first[1024];
  assert_int_equal(kolo_etcd_auth_header(c, first, sizeof first, 0, NULL), KOLO_OK);
  /* Idle past the 1 s token TTL: etcd forgets the token. */
  struct timespec d = {2, 500 * 1000000L};
  nanosleep(&d, NULL);
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/a/k"), kolo_etcd_str("2"), 0, NULL, NULL),
                   KOLO_OK);
  char second[1024];
  assert_int_equal(kolo_etcd_auth_header(c, second, sizeof second, 0, NULL), KOLO_OK);
  assert_string_not_equal(first, second); /* a new token was fetched */
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(c, kolo_etcd_str("/a/k"), &kv, NULL), KOLO_OK);
  assert_string_equal((char *)kv.value, "2");
  kolo_etcd_kv_clear(&kv);
  kolo_etcd_destroy(c);
}

static void a_wrong_password_is_an_auth_error(void **state) {
  fixture *f = *state;
  kolo_etcd *c = client(f, "root", "wrong");
  assert_non_null(c);
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/a/k"), kolo_etcd_str("x"), 0, NULL, NULL),
                   KOLO_ERR_AUTH);
  assert_non_null(strstr(kolo_etcd_last_error(), "authentication as 'root' failed"));
  kolo_etcd_destroy(c);
}

static void a_client_without_credentials_is_refused(void **state) {
  fixture *f = *state;
  kolo_etcd *c = client(f, NULL, NULL);
  assert_non_null(c);
  kolo_etcd_kv kv;
  kolo_status rc = kolo_etcd_get(c, kolo_etcd_str("/a/k"), &kv, NULL);
  assert_int_equal(rc, KOLO_ERR_AUTH);
  assert_non_null(strstr(kolo_etcd_last_error(), "user name is empty"));
  kolo_etcd_destroy(c);
}

typedef struct seen {
  pthread_mutex_t lock;
  int events;
} seen;

static void count(const kolo_etcd_watch_update *u, void *user) {
  seen *s = user;
  pthread_mutex_lock(&s->lock);
  s->events += (int)u->event_count;
  pthread_mutex_unlock(&s->lock);
}

static int wait_events(seen *s, int n) {
  for (int i = 0; i < 250; i++) {
    pthread_mutex_lock(&s->lock);
    int got = s->events;
    pthread_mutex_unlock(&s->lock);
    if (got >= n) return got;
    struct timespec d = {0, 20 * 1000000L};
    nanosleep(&d, NULL);
  }
  return -1;
}

static void a_watch_reauthenticates_after_etcd_forgets_its_token(void **state) {
  fixture *f = *state;
  kolo_etcd *c = client(f, "root", "s3cret");
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/aw/"), .prefix = 1};
  assert_int_equal(kolo_etcd_watch_start(c, &opts, count, &s, &w), KOLO_OK);
  for (int i = 0; i < 250 && !kolo_etcd_watch_connected(w); i++) {
    struct timespec d = {0, 20 * 1000000L};
    nanosleep(&d, NULL);
  }
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/aw/1"), kolo_etcd_str("x"), 0, NULL, NULL),
                   KOLO_OK);
  assert_int_equal(wait_events(&s, 1), 1);
  /* A restart drops every simple token: both the watch and the KV calls log in again. */
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  /* The write goes through another client, so the watch must log in by itself. */
  kolo_etcd *other = client(f, "root", "s3cret");
  assert_int_equal(kolo_etcd_put(other, kolo_etcd_str("/aw/2"), kolo_etcd_str("y"), 0, NULL, NULL),
                   KOLO_OK);
  kolo_etcd_destroy(other);
  assert_int_equal(wait_events(&s, 2), 2);
  kolo_etcd_watch_stop(w);
  kolo_etcd_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_client_logs_in_and_refreshes_an_expired_token),
      cmocka_unit_test(a_wrong_password_is_an_auth_error),
      cmocka_unit_test(a_client_without_credentials_is_refused),
      cmocka_unit_test(a_watch_reauthenticates_after_etcd_forgets_its_token),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
