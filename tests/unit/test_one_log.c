/* One log state per process: a program linked with libkolo.so (and not with the static
 * kolo_common) sets the log level through kolo/log.h, and libkolo's own messages follow
 * it, because both are the one definition inside libkolo. With kolo_common linked into
 * the program as well, the program calls its own copy (the dladdr case fails; checked
 * once by adding kolo_common to this test's LIBS), and which copy libkolo's messages
 * consult depends on symbol interposition, not on the code. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kolo/kolo.h"
#include "kolo/log.h"

/* Runs a one-rank ring's create/destroy with stderr sent to a file; returns what was written. */
static char *stderr_of_a_ring_of_one(void) {
  char path[] = "/tmp/kolo-test-one-log-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  int saved = dup(STDERR_FILENO);
  assert_true(saved >= 0);
  assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
  const char *peers[] = {"127.0.0.1:0"};
  kolo_ring_spec spec = {
      .epoch = 1, .rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .peers = peers};
  kolo_comm *comm = NULL;
  kolo_status status = kolo_comm_create(&spec, NULL, &comm);
  if (status == KOLO_OK) kolo_comm_destroy(comm);
  kolo_log(KOLO_LOG_DEBUG, "test", "the program's own debug line");
  dup2(saved, STDERR_FILENO);
  close(saved);
  assert_int_equal(status, KOLO_OK);
  off_t size = lseek(fd, 0, SEEK_END);
  char *text = calloc(1, (size_t)size + 1);
  assert_non_null(text);
  assert_int_equal(pread(fd, text, (size_t)size, 0), size);
  close(fd);
  return text;
}

static void libkolo_follows_the_level_the_program_sets(void **state) {
  (void)state;
  kolo_log_set_level(KOLO_LOG_ERROR);
  char *quiet = stderr_of_a_ring_of_one();
  assert_null(strstr(quiet, "joined the ring"));
  assert_null(strstr(quiet, "the program's own debug line"));
  free(quiet);

  kolo_log_set_level(KOLO_LOG_DEBUG);
  char *loud = stderr_of_a_ring_of_one();
  assert_non_null(strstr(loud, "DEBUG kolo["));
  assert_non_null(strstr(loud, "joined the ring"));
  assert_non_null(strstr(loud, "the program's own debug line"));
  free(loud);
  kolo_log_set_level(KOLO_LOG_INFO);
}

static void the_log_functions_the_program_calls_are_libkolos(void **state) {
  (void)state;
  void *const functions[] = {(void *)kolo_log, (void *)kolo_log_set_level, (void *)kolo_log_enabled,
                             (void *)kolo_strerror};
  for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++) {
    Dl_info info;
    assert_true(dladdr(functions[i], &info) != 0);
    assert_non_null(info.dli_fname);
    assert_non_null(strstr(info.dli_fname, "libkolo.so"));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(libkolo_follows_the_level_the_program_sets),
      cmocka_unit_test(the_log_functions_the_program_calls_are_libkolos),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
