/* Unit tests for launcher/options.c: kolorun's command line, accepted forms and
 * the one-line reasons for bad usage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/options.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof(a[0])) - 1)

static void np_and_program_are_parsed(void **state) {
  (void)state;
  char *argv[] = {"kolorun", "-np", "4", "prog", "-x", "--np", NULL};
  kolo_launcher_options o;
  char error[128];
  assert_int_equal(kolo_launcher_options_parse(ARGC(argv), argv, &o, error, sizeof error), KOLO_OK);
  assert_int_equal(o.nprocs, 4);
  assert_string_equal(o.program[0], "prog");
  assert_string_equal(o.program[1], "-x"); /* the program's own flags are left alone */
  assert_string_equal(o.program[2], "--np");
  assert_null(o.program[3]);
  assert_string_equal(o.host, "127.0.0.1");
  assert_int_equal(o.host_given, 0);
  assert_true(o.timeout_s == 0);
}

static void timeout_host_and_double_dash_are_parsed(void **state) {
  (void)state;
  char *argv[] = {"kolorun", "--timeout=2.5", "--host", "localhost", "-np=2", "--", "-prog", NULL};
  kolo_launcher_options o;
  char error[128];
  assert_int_equal(kolo_launcher_options_parse(ARGC(argv), argv, &o, error, sizeof error), KOLO_OK);
  assert_int_equal(o.nprocs, 2);
  assert_true(o.timeout_s == 2.5);
  assert_string_equal(o.host, "localhost");
  assert_int_equal(o.host_given, 1);
  assert_string_equal(o.program[0], "-prog");
}

static void bad_usage_is_refused_with_a_reason(void **state) {
  (void)state;
  struct {
    char *argv[6];
    const char *reason;
  } cases[] = {
      {{"kolorun", NULL}, "missing -np"},
      {{"kolorun", "-np", "2", NULL}, "missing program"},
      {{"kolorun", "-np", "0", "prog", NULL}, "bad number of ranks '0'"},
      {{"kolorun", "-np", "two", "prog", NULL}, "bad number of ranks 'two'"},
      {{"kolorun", "-np", "99999", "prog", NULL}, "bad number of ranks"},
      {{"kolorun", "-np", NULL}, "needs a number"},
      {{"kolorun", "-np", "2", "--timeout", "-1", "prog"}, "bad timeout"},
      {{"kolorun", "-np", "2", "--timeout", "x", "prog"}, "bad timeout"},
      {{"kolorun", "-np", "2", "--bogus", "prog", NULL}, "unknown option '--bogus'"},
      {{
           "kolorun",
           "-np",
           "2",
           "--host",
           "",
           "prog",
       },
       "--host needs"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int argc = 0;
    while (argc < 6 && cases[i].argv[argc] != NULL) argc++;
    kolo_launcher_options o;
    char error[128] = "";
    assert_int_equal(kolo_launcher_options_parse(argc, cases[i].argv, &o, error, sizeof error),
                     KOLO_ERR_INVALID_ARG);
    if (strstr(error, cases[i].reason) == NULL) fail_msg("case %zu: '%s'", i, error);
    assert_null(strchr(error, '\n'));
  }
}

static void help_is_recognised(void **state) {
  (void)state;
  char *argv[] = {"kolorun", "--help", NULL};
  kolo_launcher_options o;
  assert_int_equal(kolo_launcher_options_parse(ARGC(argv), argv, &o, NULL, 0), KOLO_OK);
  assert_int_equal(o.help, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(np_and_program_are_parsed),
      cmocka_unit_test(timeout_host_and_double_dash_are_parsed),
      cmocka_unit_test(bad_usage_is_refused_with_a_reason),
      cmocka_unit_test(help_is_recognised),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
