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

/* --mode and its options (include/kolo/mode.h): the mode's defaults with the options applied;
 * an option without --mode, or one the mode does not use, or out of range, is refused. */
static void mode_options_build_the_spec_every_rank_gets(void **state) {
  (void)state;
  char *argv[] = {"kolorun",       "-np",  "2",    "--mode", "diloco", "--outer-momentum=0",
                  "--compression", "INT8", "prog", "--mode", NULL};
  kolo_launcher_options o;
  char error[256] = "";
  assert_int_equal(kolo_launcher_options_parse(ARGC(argv), argv, &o, error, sizeof error), KOLO_OK);
  assert_int_equal(o.mode_given, 1);
  assert_int_equal(o.mode.mode, KOLO_MODE_DILOCO);
  assert_true(o.mode.outer_momentum == 0.0 && o.mode.outer_lr == 0.7); /* given; default */
  assert_int_equal(o.mode.compression, KOLO_COMPRESSION_INT8);
  assert_string_equal(o.program[1], "--mode"); /* the program's own */
  char *plain[] = {"kolorun", "-np", "1", "prog", NULL};
  assert_int_equal(kolo_launcher_options_parse(ARGC(plain), plain, &o, error, sizeof error),
                   KOLO_OK);
  assert_int_equal(o.mode_given, 0); /* the caller's KOLO_MODE* pass through */
  struct {
    char *argv[8];
    const char *reason;
  } cases[] = {
      {{"kolorun", "-np", "2", "--outer-lr", "0.5", "prog", NULL}, "--outer-lr needs --mode"},
      {{"kolorun", "-np", "2", "--mode", "fast", "prog", NULL}, "bad --mode 'fast'"},
      {{"kolorun", "-np", "2", "--mode", "ASYNC", "--fragments", "2", "prog"},
       "--fragments is not an option of mode ASYNC"},
      {{"kolorun", "-np", "2", "--mode", "DILOCO", "--outer-momentum", "1", "prog"},
       "--mode DILOCO: outer_momentum: must be in [0, 1), got 1"},
      {{"kolorun", "-np", "2", "--mode", "ASYNC", "--max-staleness", "x", "prog"},
       "bad --max-staleness 'x'"},
      {{"kolorun", "-np", "2", "--mode", NULL}, "--mode needs a mode"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int argc = 0;
    while (argc < 8 && cases[i].argv[argc] != NULL) argc++;
    assert_int_equal(kolo_launcher_options_parse(argc, cases[i].argv, &o, error, sizeof error),
                     KOLO_ERR_INVALID_ARG);
    if (strstr(error, cases[i].reason) == NULL) fail_msg("case %zu: '%s'", i, error);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(np_and_program_are_parsed),
      cmocka_unit_test(timeout_host_and_double_dash_are_parsed),
      cmocka_unit_test(bad_usage_is_refused_with_a_reason),
      cmocka_unit_test(help_is_recognised),
      cmocka_unit_test(mode_options_build_the_spec_every_rank_gets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
