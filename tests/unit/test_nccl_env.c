/* Unit tests for collective/nccl/nccl_env.c: NCCL_COMM_BLOCKING is read the way
 * NCCL reads it (environment first, then the first conf file that sets it,
 * first line wins, strtoll base 0), so kolo can refuse a setting that would make
 * communicator creation block with no deadline. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl_internal.h"

static void a_conf_line_gives_its_value_and_the_first_one_wins(void **state) {
  (void)state;
  char value[32];
  const char *text =
      "# NCCL_COMM_BLOCKING=1\nNCCL_DEBUG=WARN\nNCCL_COMM_BLOCKING=0x1\n"
      "NCCL_COMM_BLOCKING=0\n";
  assert_int_equal(kolo_nccl_conf_value(text, "NCCL_COMM_BLOCKING", value, sizeof value), 1);
  assert_string_equal(value, "0x1"); /* the comment is skipped, the later line ignored */
  assert_int_equal(kolo_nccl_conf_value(text, "NCCL_DEBUG", value, sizeof value), 1);
  assert_string_equal(value, "WARN");
  /* a longer name with the same prefix is another variable */
  assert_int_equal(
      kolo_nccl_conf_value("NCCL_COMM_BLOCKINGX=1", "NCCL_COMM_BLOCKING", value, sizeof value), 0);
  /* no trailing newline; value truncated to the buffer */
  assert_int_equal(
      kolo_nccl_conf_value("NCCL_COMM_BLOCKING=123456", "NCCL_COMM_BLOCKING", value, 4), 1);
  assert_string_equal(value, "123");
  assert_int_equal(kolo_nccl_conf_value("", "NCCL_COMM_BLOCKING", value, sizeof value), 0);
  assert_int_equal(kolo_nccl_conf_value(NULL, "NCCL_COMM_BLOCKING", value, sizeof value), 0);
}

static void only_a_value_parsing_as_one_forces_blocking(void **state) {
  (void)state;
  assert_true(kolo_nccl_blocking_value("1"));
  assert_true(kolo_nccl_blocking_value("0x1"));
  assert_true(kolo_nccl_blocking_value("1yes")); /* strtoll stops at the 'y', as NCCL's does */
  assert_false(kolo_nccl_blocking_value("0"));
  assert_false(kolo_nccl_blocking_value("2"));
  assert_false(kolo_nccl_blocking_value("yes"));
  assert_false(kolo_nccl_blocking_value(""));
  assert_false(kolo_nccl_blocking_value(NULL));
}

static void the_environment_is_read_before_the_conf_files(void **state) {
  (void)state;
  char dir[] = "/tmp/kolo-nccl-conf-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[sizeof dir + 16];
  snprintf(path, sizeof path, "%s/nccl.conf", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("NCCL_COMM_BLOCKING=1\n", f);
  fclose(f);
  char source[256];
  setenv("NCCL_CONF_FILE", path, 1);
  unsetenv("NCCL_COMM_BLOCKING");
  assert_int_equal(kolo_nccl_blocking_forced(source, sizeof source), 1);
  assert_string_equal(source, path);
  setenv("NCCL_COMM_BLOCKING", "0", 1); /* the environment overrides the file */
  assert_int_equal(kolo_nccl_blocking_forced(source, sizeof source), 0);
  setenv("NCCL_COMM_BLOCKING", "1", 1);
  assert_int_equal(kolo_nccl_blocking_forced(source, sizeof source), 1);
  assert_string_equal(source, "the environment");
  unsetenv("NCCL_COMM_BLOCKING");
  unlink(path);
  assert_int_equal(kolo_nccl_blocking_forced(NULL, 0), 0);
  unsetenv("NCCL_CONF_FILE");
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_conf_line_gives_its_value_and_the_first_one_wins),
      cmocka_unit_test(only_a_value_parsing_as_one_forces_blocking),
      cmocka_unit_test(the_environment_is_read_before_the_conf_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
