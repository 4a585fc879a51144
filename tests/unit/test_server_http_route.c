/* kolo-server's HTTP routing and query rules (server/http_route.c): each route by
 * method and path, ids out of paths, 405 versus 404, HEAD as GET, which routes
 * skip the token, and the query arguments' bounds and messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/http_route.h"

static kolo_server_route match(const char *method, const char *url) {
  kolo_server_route m;
  kolo_server_route_match(method, url, &m);
  return m;
}

static void each_route_is_found_by_method_and_path(void **state) {
  (void)state;
  assert_int_equal(match("GET", "/healthz").kind, KOLO_ROUTE_HEALTHZ);
  assert_int_equal(match("HEAD", "/readyz").kind, KOLO_ROUTE_READYZ);
  assert_int_equal(match("GET", "/v1/jobs").kind, KOLO_ROUTE_LIST_JOBS);
  assert_int_equal(match("POST", "/v1/jobs").kind, KOLO_ROUTE_SUBMIT_JOB);
  assert_int_equal(match("GET", "/ui/app.js").kind, KOLO_ROUTE_UI);
  kolo_server_route m = match("GET", "/v1/jobs/mnist-1/logs");
  assert_int_equal(m.kind, KOLO_ROUTE_JOB_LOGS);
  assert_string_equal(m.id, "mnist-1");
  m = match("POST", "/v1/jobs/a:cancel");
  assert_int_equal(m.kind, KOLO_ROUTE_CANCEL_JOB);
  assert_string_equal(m.id, "a");
  m = match("POST", "/v1/workers/w:1:drain"); /* the last colon splits */
  assert_int_equal(m.kind, KOLO_ROUTE_DRAIN_WORKER);
  assert_string_equal(m.id, "w:1");
  assert_int_equal(match("HEAD", "/v1/jobs/x/events").kind, KOLO_ROUTE_JOB_EVENTS);
}

static void a_wrong_method_is_405_with_allow_and_an_unknown_path_404(void **state) {
  (void)state;
  kolo_server_route m = match("DELETE", "/v1/jobs/x");
  assert_int_equal(m.kind, KOLO_ROUTE_NONE);
  assert_string_equal(m.allow, "GET, HEAD");
  assert_string_equal(match("GET", "/v1/jobs/x:cancel").allow, "POST");
  assert_string_equal(match("PUT", "/v1/jobs").allow, "GET, HEAD, POST");
  assert_string_equal(match("POST", "/ui").allow, "GET, HEAD"); /* was a 404 */
  assert_null(match("GET", "/nope").allow);
  assert_null(match("GET", "/v1/jobs/x/nope").allow);
  assert_null(match("GET", "/v1/jobs/").allow); /* no id */
  char long_id[300] = "/v1/jobs/";
  memset(long_id + 9, 'a', 200);
  assert_int_equal(match("GET", long_id).kind, KOLO_ROUTE_NONE); /* an id of 128 bytes or more */
  assert_null(match("GET", long_id).allow);
}

static void only_health_readiness_and_the_dashboard_skip_the_token(void **state) {
  (void)state;
  assert_true(kolo_server_route_public(KOLO_ROUTE_HEALTHZ));
  assert_true(kolo_server_route_public(KOLO_ROUTE_UI));
  assert_false(kolo_server_route_public(KOLO_ROUTE_METRICS));
  assert_false(kolo_server_route_public(KOLO_ROUTE_GET_JOB));
  assert_int_equal(match("POST", "/healthz").kind, KOLO_ROUTE_NONE);
}

static void query_arguments_are_bounded_and_refusals_name_them(void **state) {
  (void)state;
  char err[256];
  Kolo__V1__ListJobsRequest *list = malloc(sizeof *list);
  kolo__v1__list_jobs_request__init(list);
  assert_int_equal(kolo_server_query_list_jobs(list, "page_size", "1000", err, sizeof err),
                   KOLO_OK);
  assert_int_equal(list->page_size, 1000);
  assert_int_equal(kolo_server_query_list_jobs(list, "page_size", "1001", err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "page_size: expected 0..1000");
  assert_int_equal(kolo_server_query_list_jobs(list, "label", "team=a=b", err, sizeof err),
                   KOLO_OK);
  assert_string_equal(list->labels[0]->key, "team");
  assert_string_equal(list->labels[0]->value, "a=b");
  assert_int_equal(kolo_server_query_list_jobs(list, "label", "=x", err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_server_query_list_jobs(list, "phase", "NOPE", err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "phase: unknown phase 'NOPE'");
  assert_int_equal(kolo_server_query_list_jobs(list, "colour", "red", err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "colour: unknown query parameter");
  protobuf_c_message_free_unpacked(&list->base, NULL);

  Kolo__V1__StreamLogsRequest logs = KOLO__V1__STREAM_LOGS_REQUEST__INIT;
  uint32_t ranks[2];
  logs.ranks = ranks;
  assert_int_equal(kolo_server_query_logs(&logs, ranks, 2, "rank", "3", err, sizeof err), KOLO_OK);
  assert_int_equal(kolo_server_query_logs(&logs, ranks, 2, "rank", "4", err, sizeof err), KOLO_OK);
  assert_int_equal(kolo_server_query_logs(&logs, ranks, 2, "rank", "5", err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(logs.n_ranks, 2);
  assert_int_equal(kolo_server_query_logs(&logs, ranks, 2, "tail", "1000000001", err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_server_query_logs(&logs, ranks, 2, "follow", NULL, err, sizeof err),
                   KOLO_ERR_INVALID_ARG);

  uint64_t step = 0;
  assert_int_equal(kolo_server_query_since_step("18446744073709551615", &step, err, sizeof err),
                   KOLO_OK);
  assert_true(step == UINT64_MAX);
  assert_int_equal(kolo_server_query_since_step("18446744073709551616", &step, err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_server_query_since_step("-1", &step, err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  int flag = -1;
  assert_int_equal(kolo_server_query_flag("jobs", "", &flag, err, sizeof err), KOLO_OK);
  assert_int_equal(flag, 1);
  assert_int_equal(kolo_server_query_flag("jobs", NULL, &flag, err, sizeof err), KOLO_OK);
  assert_int_equal(flag, 0);
  assert_int_equal(kolo_server_query_flag("jobs", "yes", &flag, err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "jobs: expected 1, true, 0 or false");
  assert_true(kolo_server_query_allowed("jobs workers job", "job", err, sizeof err));
  assert_false(kolo_server_query_allowed("jobs workers job", "jo", err, sizeof err));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(each_route_is_found_by_method_and_path),
      cmocka_unit_test(a_wrong_method_is_405_with_allow_and_an_unknown_path_404),
      cmocka_unit_test(only_health_readiness_and_the_dashboard_skip_the_token),
      cmocka_unit_test(query_arguments_are_bounded_and_refusals_name_them),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
