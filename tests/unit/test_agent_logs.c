/* Unit tests for the agent's job logs on a real temporary directory: the log store
 * (worker/agent/logstore.c: segments per epoch and rank, rotation, the job and total
 * caps, retention, tail, rank filter, cursors, waiting readers, reload after a restart)
 * and the capture (worker/agent/capture.c: real pipes cut into lines, long lines, the
 * last stderr lines, text sanitizing). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "worker/agent/capture.h"
#include "worker/agent/logstore.h"

typedef struct fixture {
  char dir[64];
  kolo_agent_logstore *store;
  kolo_agent_logstore_config cfg;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/kolo-logs-test-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  f->cfg = (kolo_agent_logstore_config){f->dir, 1 << 20, 4 << 20, 16 << 20, 3600};
  assert_int_equal(kolo_agent_logstore_open(&f->cfg, &f->store), KOLO_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_agent_logstore_close(f->store);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  assert_int_equal(system(cmd), 0);
  free(f);
  return 0;
}

static void reopen(fixture *f) {
  kolo_agent_logstore_close(f->store);
  assert_int_equal(kolo_agent_logstore_open(&f->cfg, &f->store), KOLO_OK);
}

static void append_line(kolo_agent_logstore *s, const char *job, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append_line(kolo_agent_logstore *s, const char *job, const char *fmt, ...) {
  char line[512];
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, args);
  va_end(args);
  line[n++] = '\n';
  assert_int_equal(kolo_agent_logstore_append(s, job, line, (size_t)n), KOLO_OK);
}

/* Reads every line now available (no waiting) as "e<epoch> r<rank> <text>\n". */
static char *read_all(kolo_agent_logstore *s, const char *job,
                      const kolo_agent_logreader_opts *opts, uint64_t *skipped,
                      kolo_agent_log_cursor *last) {
  kolo_agent_logreader *r = NULL;
  if (kolo_agent_logreader_open(s, job, opts, &r) != KOLO_OK) return NULL;
  size_t cap = 1 << 16, used = 0;
  char *out = malloc(cap);
  out[0] = '\0';
  kolo_agent_log_line line;
  while (kolo_agent_logreader_next(r, 0, &line, skipped) == KOLO_AGENT_LOG_LINE) {
    while (used + line.len + 64 > cap) out = realloc(out, cap *= 2);
    used += (size_t)snprintf(out + used, cap - used, "e%lld r%u %.*s\n", (long long)line.epoch,
                             line.rank, (int)line.len, line.text);
    if (last) *last = line.next;
  }
  kolo_agent_logreader_close(r);
  return out;
}

static void lines_come_back_in_order_with_their_epoch_and_rank(void **state) {
  fixture *f = *state;
  assert_int_equal(kolo_agent_logstore_begin(f->store, "job-1", 1, 2), KOLO_OK);
  append_line(f->store, "job-1", "first");
  append_line(f->store, "job-1", "second");
  assert_int_equal(kolo_agent_logstore_segment(f->store, "job-1", 2, 0), KOLO_OK);
  append_line(f->store, "job-1", "after the re-form");
  kolo_agent_logstore_finish(f->store, "job-1");
  char *all = read_all(f->store, "job-1", NULL, NULL, NULL);
  assert_string_equal(all, "e1 r2 first\ne1 r2 second\ne2 r0 after the re-form\n");
  free(all);
  /* the same lines after a restart of the agent */
  reopen(f);
  all = read_all(f->store, "job-1", NULL, NULL, NULL);
  assert_string_equal(all, "e1 r2 first\ne1 r2 second\ne2 r0 after the re-form\n");
  free(all);
}

static void a_rank_filter_and_a_tail_pick_the_last_lines_of_each_rank(void **state) {
  fixture *f = *state;
  assert_int_equal(kolo_agent_logstore_begin(f->store, "job-t", 1, 0), KOLO_OK);
  for (int i = 0; i < 5; i++) append_line(f->store, "job-t", "r0 line %d", i);
  assert_int_equal(kolo_agent_logstore_segment(f->store, "job-t", 2, 1), KOLO_OK);
  for (int i = 0; i < 3; i++) append_line(f->store, "job-t", "r1 line %d", i);
  assert_int_equal(kolo_agent_logstore_segment(f->store, "job-t", 3, 0), KOLO_OK);
  append_line(f->store, "job-t", "r0 line 5");
  uint32_t zero = 0, one = 1;
  kolo_agent_logreader_opts opts = {&zero, 1, 3, NULL};
  char *got = read_all(f->store, "job-t", &opts, NULL, NULL);
  assert_string_equal(got, "e1 r0 r0 line 3\ne1 r0 r0 line 4\ne3 r0 r0 line 5\n");
  free(got);
  opts = (kolo_agent_logreader_opts){&one, 1, 0, NULL};
  got = read_all(f->store, "job-t", &opts, NULL, NULL);
  assert_string_equal(got, "e2 r1 r1 line 0\ne2 r1 r1 line 1\ne2 r1 r1 line 2\n");
  free(got);
  opts = (kolo_agent_logreader_opts){NULL, 0, 1, NULL};
  got = read_all(f->store, "job-t", &opts, NULL, NULL);
  assert_string_equal(got, "e2 r1 r1 line 2\ne3 r0 r0 line 5\n");
  free(got);
  /* a tail longer than what exists gives everything */
  opts = (kolo_agent_logreader_opts){&one, 1, 100, NULL};
  got = read_all(f->store, "job-t", &opts, NULL, NULL);
  assert_string_equal(got, "e2 r1 r1 line 0\ne2 r1 r1 line 1\ne2 r1 r1 line 2\n");
  free(got);
}

static void a_cursor_resumes_right_after_the_last_line_read(void **state) {
  fixture *f = *state;
  assert_int_equal(kolo_agent_logstore_begin(f->store, "job-c", 1, 0), KOLO_OK);
  append_line(f->store, "job-c", "one");
  append_line(f->store, "job-c", "two");
  kolo_agent_log_cursor at = {0, 0};
  char *got = read_all(f->store, "job-c", NULL, NULL, &at);
  assert_string_equal(got, "e1 r0 one\ne1 r0 two\n");
  free(got);
  append_line(f->store, "job-c", "three");
  kolo_agent_logstore_segment(f->store, "job-c", 2, 0);
  append_line(f->store, "job-c", "four");
  kolo_agent_logreader_opts opts = {NULL, 0, 0, &at};
  got = read_all(f->store, "job-c", &opts, NULL, NULL);
  assert_string_equal(got, "e1 r0 three\ne2 r0 four\n");
  free(got);
}

static void rotation_and_the_job_cap_bound_the_disk_and_report_the_gap(void **state) {
  fixture *f = *state;
  kolo_agent_logstore_close(f->store);
  f->cfg.file_bytes = 1024;
  f->cfg.job_bytes = 4096;
  assert_int_equal(kolo_agent_logstore_open(&f->cfg, &f->store), KOLO_OK);
  assert_int_equal(kolo_agent_logstore_begin(f->store, "job-r", 1, 0), KOLO_OK);
  for (int i = 0; i < 400; i++) append_line(f->store, "job-r", "line %04d of the rotation test", i);
  assert_true(kolo_agent_logstore_bytes(f->store, "job-r") <= 4096 + 64);
  kolo_agent_logstore_finish(f->store, "job-r");
  uint64_t skipped = 0;
  char *got = read_all(f->store, "job-r", NULL, &skipped, NULL);
  assert_int_equal(skipped, 1);
  /* what is left is the newest lines, contiguous, ending with the last one */
  assert_non_null(strstr(got, "line 0399 of the rotation test\n"));
  assert_null(strstr(got, "line 0000 "));
  const char *first = strstr(got, "line ");
  int n = atoi(first + 5), count = 0;
  for (const char *p = got; (p = strstr(p, "line ")) != NULL; p += 5, count++)
    assert_int_equal(atoi(p + 5), n + count);
  assert_int_equal(n + count, 400);
  free(got);
  /* a tail still works across rotated files */
  kolo_agent_logreader_opts opts = {NULL, 0, 2, NULL};
  got = read_all(f->store, "job-r", &opts, NULL, NULL);
  assert_string_equal(
      got, "e1 r0 line 0398 of the rotation test\ne1 r0 line 0399 of the rotation test\n");
  free(got);
}

static void retention_and_the_total_cap_delete_finished_jobs_only(void **state) {
  fixture *f = *state;
  kolo_agent_logstore_close(f->store);
  f->cfg.file_bytes = 1024;
  f->cfg.job_bytes = 4096;
  f->cfg.total_bytes = 8192;
  f->cfg.retention_s = 100;
  assert_int_equal(kolo_agent_logstore_open(&f->cfg, &f->store), KOLO_OK);
  const char *jobs[] = {"old-1", "old-2", "live"};
  for (int j = 0; j < 3; j++) {
    assert_int_equal(kolo_agent_logstore_begin(f->store, jobs[j], 1, 0), KOLO_OK);
    for (int i = 0; i < 100; i++)
      append_line(f->store, jobs[j], "%s %03d .........................", jobs[j], i);
    if (j < 2) kolo_agent_logstore_finish(f->store, jobs[j]);
    struct timespec pause = {0, 20 * 1000000L};
    nanosleep(&pause, NULL);
  }
  /* over the total cap: the oldest finished job goes, the active one stays */
  kolo_agent_logstore_sweep(f->store, (int64_t)time(NULL));
  assert_false(kolo_agent_logstore_has(f->store, "old-1"));
  assert_true(kolo_agent_logstore_has(f->store, "old-2"));
  assert_true(kolo_agent_logstore_has(f->store, "live"));
  assert_true(kolo_agent_logstore_bytes(f->store, NULL) <= 8192 + 128);
  /* past the retention: finished jobs go, the active one stays */
  kolo_agent_logstore_sweep(f->store, (int64_t)time(NULL) + 1000);
  assert_false(kolo_agent_logstore_has(f->store, "old-2"));
  assert_true(kolo_agent_logstore_has(f->store, "live"));
  char path[128];
  struct stat st;
  snprintf(path, sizeof path, "%s/old-2", f->dir);
  assert_int_not_equal(stat(path, &st), 0);
}

static void a_reader_waits_while_the_job_runs_and_ends_after_it(void **state) {
  fixture *f = *state;
  assert_int_equal(kolo_agent_logstore_begin(f->store, "job-w", 1, 0), KOLO_OK);
  kolo_agent_logreader *r = NULL;
  assert_int_equal(kolo_agent_logreader_open(f->store, "job-w", NULL, &r), KOLO_OK);
  kolo_agent_log_line line;
  assert_int_equal(kolo_agent_logreader_next(r, 50, &line, NULL), KOLO_AGENT_LOG_WAIT);
  append_line(f->store, "job-w", "hello");
  assert_int_equal(kolo_agent_logreader_next(r, 50, &line, NULL), KOLO_AGENT_LOG_LINE);
  assert_int_equal(line.len, 5);
  assert_memory_equal(line.text, "hello", 5);
  assert_int_equal(kolo_agent_logreader_next(r, 50, &line, NULL), KOLO_AGENT_LOG_WAIT);
  kolo_agent_logstore_finish(f->store, "job-w");
  assert_int_equal(kolo_agent_logreader_next(r, 50, &line, NULL), KOLO_AGENT_LOG_END);
  kolo_agent_logreader_close(r);
}

static void unknown_and_invalid_jobs_are_refused(void **state) {
  fixture *f = *state;
  kolo_agent_logreader *r = NULL;
  assert_int_equal(kolo_agent_logreader_open(f->store, "nope", NULL, &r), KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_agent_logreader_open(f->store, "../etc", NULL, &r), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_agent_logstore_begin(f->store, "..", 1, 0), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_agent_logstore_begin(f->store, "a/b", 1, 0), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_agent_logstore_append(f->store, "nope", "x\n", 2), KOLO_ERR_STATE);
  kolo_agent_logstore_config bad = f->cfg;
  bad.job_bytes = bad.file_bytes;
  kolo_agent_logstore *other = NULL;
  assert_int_equal(kolo_agent_logstore_open(&bad, &other), KOLO_ERR_INVALID_ARG);
}

static void write_all(int fd, const char *text, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, text, len);
    assert_true(n > 0);
    text += n;
    len -= (size_t)n;
  }
}

static void the_capture_cuts_pipes_into_lines_and_keeps_the_stderr_tail(void **state) {
  fixture *f = *state;
  kolo_agent_capture *c = NULL;
  assert_int_equal(kolo_agent_capture_create(f->store, &c), KOLO_OK);
  int out = -1, err = -1;
  assert_int_equal(kolo_agent_capture_begin(c, "job-p", 3, 1, &out, &err), KOLO_OK);
  int out2, err2;
  assert_int_equal(kolo_agent_capture_begin(c, "job-q", 3, 1, &out2, &err2), KOLO_ERR_STATE);
  write_all(out, "hello ", 6);
  write_all(out, "world\n", 6);
  for (int i = 0; i < 30; i++) {
    char line[64];
    int n = snprintf(line, sizeof line, "error %d\n", i);
    write_all(err, line, (size_t)n);
  }
  write_all(err,
            "bad \xff"
            " byte\n",
            11);
  char *long_line = malloc(KOLO_AGENT_LOG_MAX_LINE + 11);
  memset(long_line, 'x', KOLO_AGENT_LOG_MAX_LINE + 10);
  long_line[KOLO_AGENT_LOG_MAX_LINE + 10] = '\n';
  write_all(out, long_line, KOLO_AGENT_LOG_MAX_LINE + 11);
  free(long_line);
  write_all(out, "no newline at the end", 21);
  close(out);
  close(err);
  char tail[2048];
  kolo_agent_capture_end(c, 2000, tail, sizeof tail);
  /* the last 20 stderr lines, oldest first, the bad byte replaced */
  assert_non_null(strstr(tail, "error 11\nerror 12\n"));
  assert_null(strstr(tail, "error 10\n"));
  assert_non_null(strstr(tail, "error 29\nbad ? byte"));
  assert_int_equal(tail[strlen(tail) - 1], 'e');
  kolo_agent_logstore_finish(f->store, "job-p");
  char *all = read_all(f->store, "job-p", NULL, NULL, NULL);
  assert_non_null(strstr(all, "e3 r1 hello world\n"));
  assert_non_null(strstr(all, "e3 r1 error 0\n"));
  char cut[64];
  snprintf(cut, sizeof cut, "x\ne3 r1 %s\n", "xxxxxxxxxx");
  assert_non_null(strstr(all, cut)); /* the long line: a full piece, then its last 10 bytes */
  assert_non_null(strstr(all, "e3 r1 no newline at the end\n"));
  free(all);
  /* nothing running: end is a no-op */
  kolo_agent_capture_end(c, 100, tail, sizeof tail);
  assert_string_equal(tail, "");
  kolo_agent_capture_destroy(c);
}

static void sanitizing_keeps_valid_utf8_and_replaces_the_rest(void **state) {
  (void)state;
  char out[64];
  kolo_agent_sanitize_text("caf\xc3\xa9 \xe2\x82\xac ok", 12, out, sizeof out);
  assert_string_equal(out, "caf\xc3\xa9 \xe2\x82\xac ok");
  kolo_agent_sanitize_text("a\xc3(b\x01\x7f\tc\n", 9, out, sizeof out);
  assert_string_equal(out, "a?(b  \tc\n");
  kolo_agent_sanitize_text("\xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf", 11, out, sizeof out);
  assert_string_equal(out, "??? ???? ??");
  assert_int_equal(kolo_agent_sanitize_text("abcdef", 6, out, 4), 3);
  assert_string_equal(out, "abc");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(lines_come_back_in_order_with_their_epoch_and_rank, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_rank_filter_and_a_tail_pick_the_last_lines_of_each_rank,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(a_cursor_resumes_right_after_the_last_line_read, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(rotation_and_the_job_cap_bound_the_disk_and_report_the_gap,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(retention_and_the_total_cap_delete_finished_jobs_only, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_reader_waits_while_the_job_runs_and_ends_after_it, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(unknown_and_invalid_jobs_are_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(the_capture_cuts_pipes_into_lines_and_keeps_the_stderr_tail,
                                      setup, teardown),
      cmocka_unit_test(sanitizing_keeps_valid_utf8_and_replaces_the_rest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
