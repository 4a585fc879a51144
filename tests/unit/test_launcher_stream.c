/* Unit tests for launcher/stream.c: kolorun's per-rank line prefixing, with the
 * output captured through a pipe. */
#define _GNU_SOURCE /* memfd_create */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "launcher/stream.h"

/* Output is captured in a memory file, so nothing blocks however much is written. */
typedef struct capture {
  int fds[2]; /* both the same memfd: [1] is written by the stream */
  off_t read_at;
  char text[8192];
} capture;

static void capture_open(capture *c) {
  int fd = memfd_create("stream-test", MFD_CLOEXEC);
  assert_true(fd >= 0);
  c->fds[0] = c->fds[1] = fd;
  c->read_at = 0;
}

/* Everything written since the last read, NUL-terminated. */
static const char *capture_read(capture *c) {
  ssize_t n = pread(c->fds[0], c->text, sizeof c->text - 1, c->read_at);
  if (n > 0) c->read_at += n;
  c->text[n > 0 ? n : 0] = '\0';
  return c->text;
}

static void capture_close(capture *c) {
  close(c->fds[0]);
}

static void complete_lines_get_the_rank_prefix(void **state) {
  (void)state;
  capture c;
  capture_open(&c);
  kolo_launcher_stream *s = NULL;
  assert_int_equal(kolo_launcher_stream_create(3, c.fds[1], &s), KOLO_OK);
  assert_int_equal(kolo_launcher_stream_feed(s, "alpha\nbeta\n", 11), KOLO_OK);
  assert_string_equal(capture_read(&c), "[3] alpha\n[3] beta\n");
  kolo_launcher_stream_destroy(s);
  capture_close(&c);
}

static void a_partial_line_is_held_until_its_newline(void **state) {
  (void)state;
  capture c;
  capture_open(&c);
  kolo_launcher_stream *s = NULL;
  assert_int_equal(kolo_launcher_stream_create(0, c.fds[1], &s), KOLO_OK);
  assert_int_equal(kolo_launcher_stream_feed(s, "par", 3), KOLO_OK);
  assert_string_equal(capture_read(&c), "");
  assert_int_equal(kolo_launcher_stream_feed(s, "tial\nnext", 9), KOLO_OK);
  assert_string_equal(capture_read(&c), "[0] partial\n");
  kolo_launcher_stream_finish(s);
  assert_string_equal(capture_read(&c), "[0] next\n");
  kolo_launcher_stream_destroy(s);
  capture_close(&c);
}

static void finish_without_held_bytes_writes_nothing(void **state) {
  (void)state;
  capture c;
  capture_open(&c);
  kolo_launcher_stream *s = NULL;
  assert_int_equal(kolo_launcher_stream_create(1, c.fds[1], &s), KOLO_OK);
  assert_int_equal(kolo_launcher_stream_feed(s, "x\n", 2), KOLO_OK);
  kolo_launcher_stream_finish(s);
  assert_string_equal(capture_read(&c), "[1] x\n");
  kolo_launcher_stream_destroy(s);
  capture_close(&c);
}

static void empty_lines_are_kept(void **state) {
  (void)state;
  capture c;
  capture_open(&c);
  kolo_launcher_stream *s = NULL;
  assert_int_equal(kolo_launcher_stream_create(12, c.fds[1], &s), KOLO_OK);
  assert_int_equal(kolo_launcher_stream_feed(s, "\n\n", 2), KOLO_OK);
  assert_string_equal(capture_read(&c), "[12] \n[12] \n");
  kolo_launcher_stream_destroy(s);
  capture_close(&c);
}

static void an_over_long_line_is_written_in_pieces_with_one_prefix(void **state) {
  (void)state;
  int fd = memfd_create("stream-test", MFD_CLOEXEC);
  assert_true(fd >= 0);
  size_t big = KOLO_LAUNCHER_STREAM_MAX_LINE + 10;
  char *data = malloc(big);
  assert_non_null(data);
  memset(data, 'z', big);
  kolo_launcher_stream *s = NULL;
  assert_int_equal(kolo_launcher_stream_create(2, fd, &s), KOLO_OK);
  assert_int_equal(kolo_launcher_stream_feed(s, data, big), KOLO_OK);
  assert_int_equal(kolo_launcher_stream_feed(s, "end\n", 4), KOLO_OK);
  size_t expect = 4 + big + 4;
  char *got = malloc(expect + 16);
  assert_non_null(got);
  ssize_t have = pread(fd, got, expect + 16, 0);
  assert_int_equal(have, (ssize_t)expect);
  assert_memory_equal(got, "[2] z", 5);
  assert_memory_equal(got + expect - 5, "zend\n", 5);
  assert_null(memchr(got, '[', expect) != got ? NULL : memchr(got + 1, '[', expect - 1));
  kolo_launcher_stream_destroy(s);
  free(got);
  free(data);
  close(fd);
}

static void bad_arguments_are_refused(void **state) {
  (void)state;
  kolo_launcher_stream *s = NULL;
  assert_int_equal(kolo_launcher_stream_create(-1, 1, &s), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_launcher_stream_create(0, -1, &s), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_launcher_stream_feed(NULL, "x", 1), KOLO_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(complete_lines_get_the_rank_prefix),
      cmocka_unit_test(a_partial_line_is_held_until_its_newline),
      cmocka_unit_test(finish_without_held_bytes_writes_nothing),
      cmocka_unit_test(empty_lines_are_kept),
      cmocka_unit_test(an_over_long_line_is_written_in_pieces_with_one_prefix),
      cmocka_unit_test(bad_arguments_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
