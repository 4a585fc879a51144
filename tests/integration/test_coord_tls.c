/* Integration tests of the etcd client over TLS against a real etcd that
 * requires client certificates: a throwaway CA, server and client certificate
 * are made with the openssl CLI; a client with CA + client cert works (KV and
 * watch), one without its certificate or without trusting the CA is refused with
 * a clear error. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "coordination/etcd.h"
#include "tests/support/etcd_harness.h"

typedef struct fixture {
  char dir[256];
  char path[4][300]; /* ca.crt, server.crt, server.key, client.crt ... */
  char client_key[300];
  kolo_etcd_harness *etcd;
} fixture;

/* Makes ca.{key,crt}, server.{key,crt} (SAN IP:127.0.0.1), client.{key,crt}. */
static int make_certs(const char *dir) {
  char script[4096];
  snprintf(
      script, sizeof script,
      "set -e; cd '%s'; "
      "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; "
      "openssl req -x509 $K -keyout ca.key -out ca.crt -days 1 -subj /CN=kolo-test-ca 2>/dev/null; "
      "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > "
      "server.ext; "
      "printf 'extendedKeyUsage=clientAuth\\n' > client.ext; "
      "for n in server client; do "
      "  openssl req $K -keyout $n.key -out $n.csr -subj /CN=$n 2>/dev/null; "
      "  openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $n.crt -days 1 "
      "    -extfile $n.ext 2>/dev/null; "
      "done",
      dir);
  return system(script) == 0 ? 0 : -1;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  const char *tmp = getenv("TMPDIR");
  snprintf(f->dir, sizeof f->dir, "%s/kolo-tls-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (mkdtemp(f->dir) == NULL || make_certs(f->dir) != 0) return -1;
  const char *names[] = {"ca.crt", "server.crt", "server.key", "client.crt"};
  for (int i = 0; i < 4; i++) snprintf(f->path[i], sizeof f->path[i], "%s/%s", f->dir, names[i]);
  snprintf(f->client_key, sizeof f->client_key, "%s/client.key", f->dir);
  if (kolo_etcd_harness_start_tls(f->path[1], f->path[2], f->path[0], &f->etcd) != KOLO_OK)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_etcd_harness_destroy(f->etcd);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", f->dir);
  free(f);
  return 0;
}

static kolo_etcd *client(fixture *f, const char *ca, const char *cert, const char *key) {
  const char *endpoints[] = {kolo_etcd_harness_tls_url(f->etcd)};
  kolo_etcd_config config = {.endpoints = endpoints,
                             .endpoint_count = 1,
                             .request_timeout_ms = 3000,
                             .ca_file = ca,
                             .cert_file = cert,
                             .key_file = key};
  kolo_etcd *c = NULL;
  assert_int_equal(kolo_etcd_create(&config, &c), KOLO_OK);
  return c;
}

static void a_client_with_the_ca_and_a_client_certificate_reads_and_writes(void **state) {
  fixture *f = *state;
  assert_non_null(kolo_etcd_harness_tls_url(f->etcd));
  assert_int_equal(strncmp(kolo_etcd_harness_tls_url(f->etcd), "https://", 8), 0);
  kolo_etcd *c = client(f, f->path[0], f->path[3], f->client_key);
  assert_int_equal(
      kolo_etcd_put(c, kolo_etcd_str("/tls/k"), kolo_etcd_str("secret"), 0, NULL, NULL), KOLO_OK);
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(c, kolo_etcd_str("/tls/k"), &kv, NULL), KOLO_OK);
  assert_string_equal((char *)kv.value, "secret");
  kolo_etcd_kv_clear(&kv);
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

static void a_watch_over_tls_delivers_events(void **state) {
  fixture *f = *state;
  kolo_etcd *c = client(f, f->path[0], f->path[3], f->client_key);
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/tls/w/"), .prefix = 1};
  assert_int_equal(kolo_etcd_watch_start(c, &opts, count, &s, &w), KOLO_OK);
  struct timespec d = {0, 20 * 1000000L};
  for (int i = 0; i < 250 && !kolo_etcd_watch_connected(w); i++) nanosleep(&d, NULL);
  assert_true(kolo_etcd_watch_connected(w));
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/tls/w/1"), kolo_etcd_str("x"), 0, NULL, NULL),
                   KOLO_OK);
  int events = 0;
  for (int i = 0; i < 250 && events == 0; i++) {
    nanosleep(&d, NULL);
    pthread_mutex_lock(&s.lock);
    events = s.events;
    pthread_mutex_unlock(&s.lock);
  }
  kolo_etcd_watch_stop(w);
  assert_int_equal(events, 1);
  kolo_etcd_destroy(c);
}

static void a_client_without_its_certificate_is_refused(void **state) {
  fixture *f = *state;
  kolo_etcd *c = client(f, f->path[0], NULL, NULL);
  kolo_etcd_kv kv;
  kolo_status rc = kolo_etcd_get(c, kolo_etcd_str("/tls/k"), &kv, NULL);
  print_message("without a client certificate: %s: %s\n", kolo_status_name(rc),
                kolo_etcd_last_error());
  assert_int_not_equal(rc, KOLO_OK);
  assert_non_null(strstr(kolo_etcd_last_error(), kolo_etcd_harness_tls_url(f->etcd)));
  kolo_etcd_destroy(c);
}

static void a_client_that_does_not_trust_the_server_is_refused(void **state) {
  fixture *f = *state;
  /* Its own client certificate as the only trusted CA: the server's chain fails. */
  kolo_etcd *c = client(f, f->path[3], f->path[3], f->client_key);
  kolo_etcd_kv kv;
  kolo_status rc = kolo_etcd_get(c, kolo_etcd_str("/tls/k"), &kv, NULL);
  print_message("untrusted server: %s: %s\n", kolo_status_name(rc), kolo_etcd_last_error());
  assert_int_equal(rc, KOLO_ERR_UNAVAILABLE);
  assert_non_null(strstr(kolo_etcd_last_error(), "certificate"));
  kolo_etcd_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_client_with_the_ca_and_a_client_certificate_reads_and_writes),
      cmocka_unit_test(a_watch_over_tls_delivers_events),
      cmocka_unit_test(a_client_without_its_certificate_is_refused),
      cmocka_unit_test(a_client_that_does_not_trust_the_server_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
