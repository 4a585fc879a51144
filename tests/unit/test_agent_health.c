/* Unit tests for kolo-worker's health bodies (worker/agent/health.c): /readyz says ready
 * exactly while registered, /metrics is valid Prometheus text with the state, job and
 * counters, and a job id cannot break the text format. The served endpoint runs against
 * real etcd in tests/integration/test_worker_health.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "worker/agent/health.h"

static void ready_means_registered(void **state) {
  (void)state;
  kolo_agent_health_state s = {0};
  strcpy(s.id, "ci-kolo-worker-2");
  char *body = kolo_agent_health_readyz_json(&s);
  assert_non_null(strstr(body, "\"ready\":false"));
  free(body);
  s.registered = 1;
  strcpy(s.state, "idle");
  body = kolo_agent_health_readyz_json(&s);
  assert_non_null(strstr(body, "\"ready\":true"));
  assert_non_null(strstr(body, "\"id\":\"ci-kolo-worker-2\""));
  assert_non_null(strstr(body, "\"state\":\"idle\""));
  free(body);
}

static void metrics_show_state_job_progress_and_counters(void **state) {
  (void)state;
  kolo_agent_health_state s = {0};
  s.registered = 1;
  strcpy(s.state, "busy");
  strcpy(s.job, "fmnist");
  s.epoch = 3;
  s.process_running = 1;
  s.has_progress = 1;
  s.step = 120;
  s.total_steps = 600;
  s.samples_per_sec = 2500.5;
  s.registrations = 2;
  s.leases_lost = 1;
  s.rings_sent = 3;
  char *text = kolo_agent_health_metrics_text(&s);
  assert_non_null(text);
  const char *want[] = {"kolo_worker_registered 1\n",
                        "kolo_worker_state{state=\"busy\"} 1\n",
                        "kolo_worker_state{state=\"idle\"} 0\n",
                        "kolo_worker_job{job=\"fmnist\"} 1\n",
                        "kolo_worker_epoch 3\n",
                        "kolo_worker_step 120\n",
                        "kolo_worker_total_steps 600\n",
                        "kolo_worker_samples_per_second 2500.5\n",
                        "kolo_worker_registrations_total 2\n",
                        "kolo_worker_leases_lost_total 1\n",
                        "kolo_worker_rings_sent_total 3\n",
                        "# TYPE kolo_worker_rings_sent_total counter\n"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (strstr(text, want[i]) == NULL) fail_msg("missing %s in:\n%s", want[i], text);
  /* every sample line is "name[{labels}] value" */
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    assert_non_null(strchr(line, ' '));
    assert_true(strncmp(line, "kolo_worker_", 12) == 0);
  }
  free(text);
}

static void no_progress_and_no_job_leave_those_series_out(void **state) {
  (void)state;
  kolo_agent_health_state s = {0};
  char *text = kolo_agent_health_metrics_text(&s);
  assert_null(strstr(text, "kolo_worker_step "));
  assert_null(strstr(text, "kolo_worker_job{"));
  assert_non_null(strstr(text, "kolo_worker_registered 0\n"));
  free(text);
}

static void label_values_are_escaped(void **state) {
  (void)state;
  kolo_agent_health_state s = {0};
  strcpy(s.job, "a\"b\\c\nd");
  char *text = kolo_agent_health_metrics_text(&s);
  assert_non_null(strstr(text, "kolo_worker_job{job=\"a\\\"b\\\\c\\nd\"} 1\n"));
  free(text);
}

static void a_bad_listen_address_is_refused(void **state) {
  (void)state;
  kolo_agent_health *h = NULL;
  int port = 0;
  const char *bad[] = {
      "", "nope", "1.2.3.4", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:70000", "host.example:80"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(kolo_agent_health_start(bad[i], &h, &port), KOLO_ERR_ADDRESS);
  assert_int_equal(kolo_agent_health_start("127.0.0.1:0", &h, &port), KOLO_OK);
  assert_true(port > 0);
  char taken[32];
  snprintf(taken, sizeof taken, "127.0.0.1:%d", port);
  kolo_agent_health *other = NULL;
  assert_int_equal(kolo_agent_health_start(taken, &other, NULL), KOLO_ERR_ADDRESS);
  kolo_agent_health_stop(h);
  kolo_agent_health_stop(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ready_means_registered),
      cmocka_unit_test(metrics_show_state_job_progress_and_counters),
      cmocka_unit_test(no_progress_and_no_job_leave_those_series_out),
      cmocka_unit_test(label_values_are_escaped),
      cmocka_unit_test(a_bad_listen_address_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
