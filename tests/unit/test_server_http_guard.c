/* kolo-server's door rules against browser-made requests (server/http_guard.c): which Host
 * names are answered (DNS rebinding), which Origin / Sec-Fetch-Site a state-changing request
 * may carry, and that a body must be JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/http_guard.h"

static void hosts_are_ips_single_labels_localhost_and_the_listed_names(void **state) {
  (void)state;
  const char *list = "kolo.example.com, *.corp.example";
  const char *yes[] = {NULL,
                       "127.0.0.1",
                       "127.0.0.1:7080",
                       "[::1]:7080",
                       "[fe80::1]",
                       "localhost",
                       "LOCALHOST:7080",
                       "a.localhost",
                       "kolo-server:7080",
                       "kolo.example.com",
                       "Kolo.Example.Com.:443",
                       "a.corp.example",
                       "b.a.corp.example"};
  const char *no[] = {"evil.example",
                      "evil.example:7080",
                      "127.0.0.1.nip.io",
                      "corp.example",
                      "localhost.evil.example",
                      "kolo.example.com.evil",
                      "",
                      ":7080",
                      "a:b:c",
                      "[::1",
                      "[nope]:1",
                      "x:70800",
                      "x:7a",
                      "127.0.0.1:"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    assert_true(kolo_server_http_host_allowed(yes[i], list));
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    assert_false(kolo_server_http_host_allowed(no[i], list));
  assert_true(kolo_server_http_host_allowed("evil.example", "*"));
  assert_false(kolo_server_http_host_allowed("evil.example", NULL));
}

static int check(const char *method, const char *host, const char *origin, const char *site,
                 const char *type, int body, int *status) {
  kolo_server_http_guard_request r = {method, host, origin, site, type, body};
  kolo_server_http_guard_refusal no;
  memset(&no, 0, sizeof no);
  int ok = kolo_server_http_guard_check(&r, "kolo.example.com", 1, &no);
  *status = ok ? 0 : no.status;
  if (!ok) assert_non_null(strstr(no.message, " "));
  return ok;
}

static void a_state_changing_request_must_come_from_its_own_origin(void **state) {
  (void)state;
  int st;
  const char *h = "127.0.0.1:7080", *json = "application/json";
  assert_true(check("POST", h, "http://127.0.0.1:7080", "same-origin", json, 1, &st));
  assert_true(check("POST", h, NULL, NULL, json, 1, &st));   /* curl */
  assert_true(check("POST", h, NULL, "none", NULL, 0, &st)); /* typed in */
  assert_true(check("POST", "kolo-svc:7080", "https://kolo.example.com", NULL, json, 1, &st));
  assert_false(check("POST", h, "http://evil.example", NULL, json, 1, &st));
  assert_int_equal(st, 403);
  assert_false(check("POST", h, "null", NULL, json, 1, &st));
  assert_false(check("POST", h, "http://127.0.0.1:7081", NULL, json, 1, &st));
  assert_false(check("POST", h, NULL, "cross-site", json, 1, &st));
  assert_false(check("POST", h, NULL, "same-site", json, 1, &st));
  assert_false(check("DELETE", h, "http://evil.example", NULL, NULL, 0, &st));
  /* reads: the browser keeps another origin from reading the answer */
  assert_true(check("GET", h, "http://evil.example", "cross-site", NULL, 0, &st));
  assert_false(check("GET", "evil.example:7080", NULL, NULL, NULL, 0, &st));
  assert_int_equal(st, 403);
}

static void a_body_must_be_json(void **state) {
  (void)state;
  int st;
  const char *h = "localhost";
  assert_true(check("POST", h, NULL, NULL, "application/json; charset=utf-8", 1, &st));
  assert_true(check("POST", h, NULL, NULL, " Application/JSON", 1, &st));
  assert_false(check("POST", h, NULL, NULL, "text/plain", 1, &st));
  assert_int_equal(st, 415);
  assert_false(check("POST", h, NULL, NULL, "application/x-www-form-urlencoded", 0, &st));
  assert_false(check("POST", h, NULL, NULL, "application/jsonp", 1, &st));
  assert_false(check("POST", h, NULL, NULL, NULL, 1, &st));
  assert_int_equal(st, 415);
  assert_true(check("GET", h, NULL, NULL, "text/plain", 1, &st));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hosts_are_ips_single_labels_localhost_and_the_listed_names),
      cmocka_unit_test(a_state_changing_request_must_come_from_its_own_origin),
      cmocka_unit_test(a_body_must_be_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
