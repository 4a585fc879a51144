/* The agent protocol's codec (common/agent_proto.c): every message round-trips,
 * the unversioned HELLO reads as version 1, and each kind of bad line is refused
 * with an error that names the field (counts, ranges, signs, leading zeros,
 * control bytes, double spaces, wrong direction, long tokens). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/agent_proto.h"
#include "kolo/mode.h"

static kolo_status parse(const char *line, kolo_agent_direction d, kolo_agent_msg *m, char *error) {
  return kolo_agent_msg_parse(line, strlen(line), d, m, error, 256);
}

/* Parses line and expects a refusal whose error contains want. */
static void refused(const char *line, kolo_agent_direction d, const char *want) {
  kolo_agent_msg m;
  char error[256];
  kolo_status status = parse(line, d, &m, error);
  if (status != KOLO_ERR_PARSE || strstr(error, want) == NULL)
    fail_msg("'%s': got %s '%s', want an error with '%s'", line, kolo_status_name(status), error,
             want);
  assert_int_equal(m.verb, KOLO_AGENT_NONE);
  assert_null(m.storage_);
}

static void to_agent(const char *line) {
  refused(line, KOLO_AGENT_TO_AGENT, "");
}
static void to_process(const char *line) {
  refused(line, KOLO_AGENT_TO_PROCESS, "");
}

/* Formats m, checks the line, parses it back and compares. */
static void round_trip(const kolo_agent_msg *m, const char *want_line) {
  char *line = NULL, error[256] = "";
  kolo_status status = kolo_agent_msg_format(m, &line, error, sizeof error);
  if (status != KOLO_OK) fail_msg("format: %s: %s", kolo_status_name(status), error);
  assert_string_equal(line, want_line);
  kolo_agent_msg back;
  kolo_agent_direction d = m->verb >= KOLO_AGENT_RING ? KOLO_AGENT_TO_PROCESS : KOLO_AGENT_TO_AGENT;
  assert_int_equal(kolo_agent_msg_parse(line, strlen(line) - 1, d, &back, error, sizeof error),
                   KOLO_OK);
  assert_true(kolo_agent_msg_equal(&back, m));
  kolo_agent_msg_clear(&back);
  free(line);
}

static void every_message_round_trips(void **state) {
  (void)state;
  round_trip(
      &(kolo_agent_msg){.verb = KOLO_AGENT_HELLO, .hello = {4242, KOLO_AGENT_PROTOCOL_VERSION}},
      "HELLO 4242 4\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_MODE, .mode = {KOLO_MODE_DILOCO}},
             "MODE DILOCO\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_MODE, .mode = {KOLO_MODE_LOCAL_SGD}},
             "MODE LOCAL_SGD\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_FORMED, .formed = {7, 1, 3}}, "FORMED 7 1 3\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_FAILED, .failed = {7, "KOLO_ERR_PEER_LOST", -1}},
             "FAILED 7 KOLO_ERR_PEER_LOST -1\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_REPORT, .text = "{\"step\": 3}"},
             "REPORT {\"step\": 3}\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_STOP, .text = "job cancelled"},
             "STOP job cancelled\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_LEAVE, .text = "drained"}, "LEAVE drained\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_HOLD, .text = "no lease renewal for 2500 ms"},
             "HOLD no lease renewal for 2500 ms\n");
  round_trip(&(kolo_agent_msg){.verb = KOLO_AGENT_RELEASE, .text = "etcd renewed the lease"},
             "RELEASE etcd renewed the lease\n");
  round_trip(
      &(kolo_agent_msg){.verb = KOLO_AGENT_REFUSED, .refused = {1, 2}, .text = "process speaks 9"},
      "REFUSED 1 2 process speaks 9\n");
  const char *peers[] = {"h0:1", "h1:2", "h2:3"};
  kolo_agent_msg ring = {.verb = KOLO_AGENT_RING,
                         .ring = {.epoch = 9,
                                  .rank = 2,
                                  .size = 3,
                                  .local_rank = 0,
                                  .local_size = 1,
                                  .timeout_ms = 30000,
                                  .secret = "s3cr3t",
                                  .listen_address = "0.0.0.0:3",
                                  .peers = peers}};
  round_trip(&ring, "RING 9 2 3 0 1 30000 s3cr3t 0.0.0.0:3 h0:1 h1:2 h2:3\n");
  ring.ring.planned = 1;
  ring.ring.secret = "";
  round_trip(&ring, "RING 9 2 3 0 1 30000 - 0.0.0.0:3 h0:1 h1:2 h2:3 planned\n");
}

static void a_parsed_ring_has_its_fields(void **state) {
  (void)state;
  kolo_agent_msg m;
  char error[256];
  assert_int_equal(parse("RING 9223372036854775807 1 2 1 2 0 - l:1 a:1 b:2 planned",
                         KOLO_AGENT_TO_PROCESS, &m, error),
                   KOLO_OK);
  assert_int_equal(m.verb, KOLO_AGENT_RING);
  assert_true(m.ring.epoch == (uint64_t)INT64_MAX);
  assert_int_equal(m.ring.rank, 1);
  assert_int_equal(m.ring.size, 2);
  assert_string_equal(m.ring.secret, "");
  assert_string_equal(m.ring.listen_address, "l:1");
  assert_string_equal(m.ring.peers[0], "a:1");
  assert_string_equal(m.ring.peers[1], "b:2");
  assert_true(m.ring.planned);
  kolo_agent_msg_clear(&m);
  assert_null(m.storage_);
  kolo_agent_msg_clear(&m); /* twice is fine */
}

static void an_unversioned_hello_is_version_one_and_supported(void **state) {
  (void)state;
  kolo_agent_msg m;
  char error[256];
  assert_int_equal(parse("HELLO 17", KOLO_AGENT_TO_AGENT, &m, error), KOLO_OK);
  assert_int_equal(m.hello.pid, 17);
  assert_int_equal(m.hello.version, 1);
  assert_true(kolo_agent_version_supported(m.hello.version));
  kolo_agent_msg_clear(&m);
  assert_int_equal(parse("HELLO 17 5", KOLO_AGENT_TO_AGENT, &m, error), KOLO_OK);
  assert_int_equal(m.hello.version, 5);
  assert_false(kolo_agent_version_supported(5)); /* parses, but this agent does not speak it */
  assert_true(kolo_agent_version_supported(2));  /* before MODE: still accepted */
  assert_true(kolo_agent_version_supported(3));  /* before HOLD: still accepted (SIGSTOP fence) */
  assert_true(kolo_agent_version_supported(4));
  assert_true(kolo_agent_version_supported(KOLO_AGENT_PROTOCOL_VERSION));
  assert_false(kolo_agent_version_supported(0));
  kolo_agent_msg_clear(&m);
}

static void numbers_are_plain_decimals_in_range(void **state) {
  (void)state;
  refused("HELLO 0 2", KOLO_AGENT_TO_AGENT, "'pid' is 0, want 1..");
  refused("HELLO -5 2", KOLO_AGENT_TO_AGENT, "'pid' is not a decimal");
  refused("HELLO +5 2", KOLO_AGENT_TO_AGENT, "'pid' is not a decimal");
  refused("HELLO 05 2", KOLO_AGENT_TO_AGENT, "'pid' is not a decimal");
  refused("HELLO 5x 2", KOLO_AGENT_TO_AGENT, "'pid' is not a decimal");
  refused("HELLO 2147483648 2", KOLO_AGENT_TO_AGENT, "'pid' is 2147483648");
  refused("HELLO 5 0", KOLO_AGENT_TO_AGENT, "'version' is 0");
  refused("HELLO 5 65536", KOLO_AGENT_TO_AGENT, "'version' is 65536");
  refused("FORMED 9223372036854775808 0 1", KOLO_AGENT_TO_AGENT, "'epoch' is out of range");
  refused("FORMED 99999999999999999999 0 1", KOLO_AGENT_TO_AGENT, "'epoch' is not a decimal");
  refused("FORMED 1 3 3", KOLO_AGENT_TO_AGENT, "rank 3 is not below size 3");
  refused("FORMED 1 0 0", KOLO_AGENT_TO_AGENT, "'size' is 0");
  refused("FAILED 1 KOLO_ERR_X -2", KOLO_AGENT_TO_AGENT, "'failed_rank' is -2");
  refused("FAILED 1 KOLO_ERR_X -0", KOLO_AGENT_TO_AGENT, "'failed_rank' is not a decimal");
  refused("RING 1 0 1 1 1 0 - l a", KOLO_AGENT_TO_PROCESS,
          "local_rank 1 is not below local_size 1");
  refused("RING 1 0 1 0 2 0 - l a", KOLO_AGENT_TO_PROCESS, "'local_size' is 2, want 1..1");
  refused("RING 1 0 65537 0 1 0 - l a", KOLO_AGENT_TO_PROCESS, "'size' is 65537");
  refused("RING 1 0 1 0 1 2147483648 - l a", KOLO_AGENT_TO_PROCESS, "'timeout_ms' is 2147483648");
}

static void field_counts_are_exact(void **state) {
  (void)state;
  refused("HELLO", KOLO_AGENT_TO_AGENT, "HELLO: missing field 'pid'");
  refused("HELLO 5 2 x", KOLO_AGENT_TO_AGENT, "unexpected text after the last field");
  refused("FORMED 1 0", KOLO_AGENT_TO_AGENT, "missing field 'size'");
  refused("FORMED 1 0 1 1", KOLO_AGENT_TO_AGENT, "unexpected text");
  refused("FAILED 1 KOLO_OK", KOLO_AGENT_TO_AGENT, "missing field 'failed_rank'");
  refused("RING 1 0 2 0 1 0 - l a", KOLO_AGENT_TO_PROCESS, "missing field 'address_1'");
  refused("RING 1 0 1 0 1 0 - l a b", KOLO_AGENT_TO_PROCESS,
          "want 'planned' or nothing after the 1 addresses");
  refused("RING 1 0 1 0 1 0 - l a planned x", KOLO_AGENT_TO_PROCESS, "unexpected text");
  refused("REFUSED 1 2", KOLO_AGENT_TO_PROCESS, "missing reason");
  refused("REFUSED 2 1 why", KOLO_AGENT_TO_PROCESS, "'max_version' is 1, want 2..");
  refused("STOP", KOLO_AGENT_TO_PROCESS, "STOP: missing reason");
  refused("HOLD", KOLO_AGENT_TO_PROCESS, "HOLD: missing reason");
  refused("RELEASE", KOLO_AGENT_TO_PROCESS, "RELEASE: missing reason");
  refused("REPORT", KOLO_AGENT_TO_AGENT, "missing JSON object");
  refused("REPORT [1]", KOLO_AGENT_TO_AGENT, "not a JSON object");
}

static void spacing_control_bytes_and_lengths_are_strict(void **state) {
  (void)state;
  to_agent("");
  refused("HELLO  5", KOLO_AGENT_TO_AGENT, "empty field 'pid'");
  refused("HELLO 5 ", KOLO_AGENT_TO_AGENT, "empty field 'version'");
  refused(" HELLO 5", KOLO_AGENT_TO_AGENT, "unknown verb ''");
  refused("HELLO\t5", KOLO_AGENT_TO_AGENT, "control byte 0x09 at offset 5");
  refused("HELLO 5\r", KOLO_AGENT_TO_AGENT, "control byte 0x0d");
  refused("hello 5", KOLO_AGENT_TO_AGENT, "unknown verb 'hello'");
  refused("HELLOX 5", KOLO_AGENT_TO_AGENT, "unknown verb 'HELLOX'");
  refused("STOPPED now", KOLO_AGENT_TO_PROCESS, "unknown verb");
  refused("FAILED 1 kolo_err 0", KOLO_AGENT_TO_AGENT, "not a status name");
  kolo_agent_msg m;
  char error[256];
  /* a NUL inside the line (length says more than strlen) */
  assert_int_equal(
      kolo_agent_msg_parse("HELLO 5\0 2", 10, KOLO_AGENT_TO_AGENT, &m, error, sizeof error),
      KOLO_ERR_PARSE);
  assert_non_null(strstr(error, "control byte 0x00 at offset 7"));
  char long_token[400];
  memset(long_token, 'a', sizeof long_token - 1);
  long_token[sizeof long_token - 1] = '\0';
  char line[600];
  snprintf(line, sizeof line, "RING 1 0 1 0 1 0 %s l a", long_token);
  refused(line, KOLO_AGENT_TO_PROCESS, "'secret' is longer than 255 bytes");
  char reason[300];
  memset(reason, 'r', sizeof reason - 1);
  reason[sizeof reason - 1] = '\0';
  snprintf(line, sizeof line, "STOP %s", reason);
  refused(line, KOLO_AGENT_TO_PROCESS, "reason is longer than 200 bytes");
  char *huge = malloc(KOLO_AGENT_MAX_LINE + 1);
  memset(huge, ' ', KOLO_AGENT_MAX_LINE);
  memcpy(huge, "REPORT {", 8);
  huge[KOLO_AGENT_MAX_LINE - 1] = '}';
  huge[KOLO_AGENT_MAX_LINE] = '\0';
  refused(huge, KOLO_AGENT_TO_AGENT, "longer than 65535 bytes");
  free(huge);
}

static void a_verb_is_refused_in_the_wrong_direction(void **state) {
  (void)state;
  refused("RING 1 0 1 0 1 0 - l a", KOLO_AGENT_TO_AGENT,
          "RING: sent by the agent, not the process");
  refused("HELLO 5 2", KOLO_AGENT_TO_PROCESS, "HELLO: sent by the process, not the agent");
  to_process("REPORT {}");
  to_agent("STOP now");
  refused("HOLD etcd silent", KOLO_AGENT_TO_AGENT, "HOLD: sent by the agent, not the process");
  refused("RELEASE etcd back", KOLO_AGENT_TO_AGENT, "RELEASE: sent by the agent, not the process");
}

/* MODE (version 3) names one mode in its canonical spelling, process -> agent only. */
static void a_mode_line_names_exactly_one_known_mode(void **state) {
  (void)state;
  kolo_agent_msg m;
  char error[256];
  assert_int_equal(parse("MODE ASYNC", KOLO_AGENT_TO_AGENT, &m, error), KOLO_OK);
  assert_int_equal(m.verb, KOLO_AGENT_MODE);
  assert_int_equal(m.mode.mode, KOLO_MODE_ASYNC);
  kolo_agent_msg_clear(&m);
  refused("MODE", KOLO_AGENT_TO_AGENT, "missing field 'mode'");
  refused("MODE HOGWILD", KOLO_AGENT_TO_AGENT, "field 'mode' is not a mode");
  refused("MODE async", KOLO_AGENT_TO_AGENT, "field 'mode' is not a mode");
  refused("MODE SYNC ASYNC", KOLO_AGENT_TO_AGENT, "unexpected text after the last field");
  refused("MODE SYNC", KOLO_AGENT_TO_PROCESS, "MODE: sent by the process, not the agent");
  char *line = NULL;
  kolo_agent_msg bad = {.verb = KOLO_AGENT_MODE, .mode = {9}};
  assert_int_equal(kolo_agent_msg_format(&bad, &line, error, sizeof error), KOLO_ERR_INVALID_ARG);
  assert_null(line);
}

static void format_refuses_what_would_not_read_back(void **state) {
  (void)state;
  char *line = (char *)1, error[256];
  const char *spaced[] = {"a b", "planned"};
  kolo_agent_msg ring = {.verb = KOLO_AGENT_RING,
                         .ring = {.epoch = 1,
                                  .rank = 0,
                                  .size = 2,
                                  .local_rank = 0,
                                  .local_size = 1,
                                  .listen_address = "l",
                                  .peers = spaced}};
  assert_int_equal(kolo_agent_msg_format(&ring, &line, error, sizeof error), KOLO_ERR_INVALID_ARG);
  assert_null(line);
  assert_non_null(strstr(error, "RING"));
  const char *missing[] = {"a", NULL};
  ring.ring.peers = missing;
  assert_int_equal(kolo_agent_msg_format(&ring, &line, error, sizeof error), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(error, "address_1"));
  kolo_agent_msg stop = {.verb = KOLO_AGENT_STOP, .text = "two\nlines"};
  assert_int_equal(kolo_agent_msg_format(&stop, &line, error, sizeof error), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(error, "control byte 0x0a"));
  kolo_agent_msg hello = {.verb = KOLO_AGENT_HELLO, .hello = {-1, 2}};
  assert_int_equal(kolo_agent_msg_format(&hello, &line, error, sizeof error), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(error, "'pid'"));
  kolo_agent_msg none = {0};
  assert_int_equal(kolo_agent_msg_format(&none, &line, error, sizeof error), KOLO_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_message_round_trips),
      cmocka_unit_test(a_parsed_ring_has_its_fields),
      cmocka_unit_test(an_unversioned_hello_is_version_one_and_supported),
      cmocka_unit_test(numbers_are_plain_decimals_in_range),
      cmocka_unit_test(field_counts_are_exact),
      cmocka_unit_test(spacing_control_bytes_and_lengths_are_strict),
      cmocka_unit_test(a_verb_is_refused_in_the_wrong_direction),
      cmocka_unit_test(format_refuses_what_would_not_read_back),
      cmocka_unit_test(a_mode_line_names_exactly_one_known_mode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
