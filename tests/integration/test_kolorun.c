/* Integration tests for kolorun: runs the real binary against small rank programs
 * (/bin/sh scripts and test_kolorun_probe) and checks environment, output prefixes,
 * failure handling, signal forwarding, the timeout, bad usage and orphan cleanup. */
#define _GNU_SOURCE /* pipe2, F_SETPIPE_SZ */
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* One kolorun run: its pid and everything it wrote. */
typedef struct job {
  pid_t pid;
  int fds[2];    /* stdout, stderr read ends; -1 at EOF */
  char *text[2]; /* what was read, NUL-terminated */
  size_t length[2];
  int status;
  int reaped;
  double started, ended;
  char scratch[256];
} job;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *bin_path(const char *var, const char *name, char *buffer, size_t length) {
  const char *dir = getenv(var);
  snprintf(buffer, length, "%s/%s", dir ? dir : ".", name);
  return buffer;
}

static char kolorun_path[512], probe_path[512];

/* Starts kolorun with args (NULL-terminated, without argv[0]). */
static void job_start(job *j, const char *const *args) {
  const char *argv[32];
  int argc = 0;
  argv[argc++] = kolorun_path;
  for (; args[argc - 1] != NULL && argc < 31; argc++) argv[argc] = args[argc - 1];
  argv[argc] = NULL;
  int out[2], err[2];
  assert_int_equal(pipe2(out, O_CLOEXEC), 0);
  assert_int_equal(pipe2(err, O_CLOEXEC), 0);
  j->started = now_s();
  j->pid = fork();
  assert_true(j->pid >= 0);
  if (j->pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    close_range(3, ~0U, 0); /* so the probe's count of stray pipes sees only kolorun's */
    execv(argv[0], (char *const *)argv);
    _exit(99);
  }
  close(out[1]);
  close(err[1]);
  j->fds[0] = out[0];
  j->fds[1] = err[0];
  for (int w = 0; w < 2; w++) {
    fcntl(j->fds[w], F_SETFL, O_NONBLOCK);
    j->text[w] = calloc(1, 1);
    j->length[w] = 0;
  }
}

/* Reads what is available within wait_ms; returns 1 once both pipes are at EOF. */
static int job_pump(job *j, int wait_ms) {
  struct pollfd fds[2];
  int count = 0, which[2];
  for (int w = 0; w < 2; w++) {
    if (j->fds[w] < 0) continue;
    which[count] = w;
    fds[count++] = (struct pollfd){.fd = j->fds[w], .events = POLLIN};
  }
  if (count == 0) return 1;
  if (poll(fds, (nfds_t)count, wait_ms) <= 0) return 0;
  for (int i = 0; i < count; i++) {
    if (fds[i].revents == 0) continue;
    int w = which[i];
    char buffer[4096];
    ssize_t n = read(j->fds[w], buffer, sizeof buffer);
    if (n > 0) {
      j->text[w] = realloc(j->text[w], j->length[w] + (size_t)n + 1);
      memcpy(j->text[w] + j->length[w], buffer, (size_t)n);
      j->length[w] += (size_t)n;
      j->text[w][j->length[w]] = '\0';
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close(j->fds[w]);
      j->fds[w] = -1;
    }
  }
  return j->fds[0] < 0 && j->fds[1] < 0;
}

/* Waits until stream `which` contains needle; fails the test after seconds. */
static void job_expect(job *j, int which, const char *needle, double seconds) {
  double deadline = now_s() + seconds;
  while (strstr(j->text[which], needle) == NULL) {
    if (now_s() > deadline)
      fail_msg("no '%s' within %.1f s; got:\n%s", needle, seconds, j->text[which]);
    if (job_pump(j, 50) && strstr(j->text[which], needle) == NULL) {
      fail_msg("kolorun ended without '%s'; got:\n%s", needle, j->text[which]);
    }
  }
}

/* Reads to EOF and reaps kolorun; kills it and fails the test after seconds. */
static void job_finish(job *j, double seconds) {
  double deadline = now_s() + seconds;
  while (!job_pump(j, 50)) {
    if (now_s() > deadline) fail_msg("kolorun still running after %.1f s", seconds);
  }
  while (waitpid(j->pid, &j->status, 0) < 0 && errno == EINTR) {
  }
  j->reaped = 1;
  j->ended = now_s();
}

static int job_exit_code(const job *j) {
  if (WIFEXITED(j->status)) return WEXITSTATUS(j->status);
  return 1000 + WTERMSIG(j->status);
}

static int setup(void **state) {
  job *j = calloc(1, sizeof *j);
  j->fds[0] = j->fds[1] = -1;
  *state = j;
  return 0;
}

/* Also runs when a test fails: no kolorun (and so no rank, via PDEATHSIG) survives. */
static int teardown(void **state) {
  job *j = *state;
  if (j->pid > 0 && !j->reaped) {
    kill(j->pid, SIGKILL);
    waitpid(j->pid, NULL, 0);
  }
  for (int w = 0; w < 2; w++) {
    if (j->fds[w] >= 0) close(j->fds[w]);
    free(j->text[w]);
  }
  free(j);
  return 0;
}

/* Value of "key=" in the line of text that starts with prefix; "" if absent. */
static const char *field(const char *text, const char *prefix, const char *key, char *out,
                         size_t length) {
  out[0] = '\0';
  const char *line = strstr(text, prefix);
  if (line == NULL) return out;
  const char *end = strchr(line, '\n');
  char pattern[64];
  snprintf(pattern, sizeof pattern, " %s=", key);
  const char *at = strstr(line, pattern);
  if (at == NULL || (end != NULL && at > end)) return out;
  at += strlen(pattern);
  size_t n = strcspn(at, " \n");
  if (n >= length) n = length - 1;
  memcpy(out, at, n);
  out[n] = '\0';
  return out;
}

static void every_rank_gets_its_rank_and_the_shared_job_environment(void **state) {
  job *j = *state;
  const char *args[] = {"-np", "3", probe_path, NULL};
  job_start(j, args);
  job_finish(j, 30);
  assert_int_equal(job_exit_code(j), 0);
  char secret0[64], rdv0[64], value[64];
  for (int r = 0; r < 3; r++) {
    char expect[160];
    snprintf(expect, sizeof expect, "[%d] probe rank=%d size=3 lrank=%d lsize=3 epoch=1 ", r, r, r);
    if (strstr(j->text[0], expect) == NULL) fail_msg("missing '%s' in:\n%s", expect, j->text[0]);
    char prefix[16];
    snprintf(prefix, sizeof prefix, "[%d] probe", r);
    /* only rank 0 inherits the listening rendezvous socket, and it is the real one */
    assert_string_equal(field(j->text[0], prefix, "rdvfd", value, sizeof value),
                        r == 0 ? "set" : "-");
    assert_string_equal(field(j->text[0], prefix, "listeners", value, sizeof value),
                        r == 0 ? "1" : "0");
    assert_string_equal(field(j->text[0], prefix, "accept", value, sizeof value),
                        r == 0 ? "ok" : "-");
    /* no pipe of kolorun's leaks into a rank; stdin is /dev/null */
    assert_string_equal(field(j->text[0], prefix, "stray", value, sizeof value), "0");
    assert_string_equal(field(j->text[0], prefix, "stdin_null", value, sizeof value), "1");
    /* without --host, KOLO_HOST is left to the caller's environment */
    const char *outer_host = getenv("KOLO_HOST");
    assert_string_equal(field(j->text[0], prefix, "host", value, sizeof value),
                        outer_host ? outer_host : "-");
    char secret[64], rdv[64];
    field(j->text[0], prefix, "secret", secret, sizeof secret);
    field(j->text[0], prefix, "rdv", rdv, sizeof rdv);
    assert_int_equal(strlen(secret), 32);
    assert_int_equal(strspn(secret, "0123456789abcdef"), 32);
    assert_true(strncmp(rdv, "127.0.0.1:", 10) == 0 && atoi(rdv + 10) > 0);
    if (r == 0) {
      strcpy(secret0, secret);
      strcpy(rdv0, rdv);
    } else {
      assert_string_equal(secret, secret0);
      assert_string_equal(rdv, rdv0);
    }
  }
  assert_int_equal(j->length[1], 0); /* nothing on stderr */
}

static void host_sets_the_rendezvous_address_and_kolo_host(void **state) {
  job *j = *state;
  const char *args[] = {"--host", "localhost", "-np", "2", probe_path, NULL};
  job_start(j, args);
  job_finish(j, 30);
  assert_int_equal(job_exit_code(j), 0);
  char value[64];
  for (int r = 0; r < 2; r++) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "[%d] probe", r);
    assert_string_equal(field(j->text[0], prefix, "host", value, sizeof value), "localhost");
    field(j->text[0], prefix, "rdv", value, sizeof value);
    assert_true(strncmp(value, "127.0.0.1:", 10) == 0); /* resolved, numeric */
  }
  assert_string_equal(field(j->text[0], "[0] probe", "accept", value, sizeof value), "ok");
}

static void two_jobs_get_different_secrets(void **state) {
  job *j = *state;
  const char *args[] = {"-np", "1", probe_path, NULL};
  char first[64], second[64];
  job_start(j, args);
  job_finish(j, 30);
  field(j->text[0], "[0] probe", "secret", first, sizeof first);
  job other = {.fds = {-1, -1}};
  job_start(&other, args);
  job_finish(&other, 30);
  field(other.text[0], "[0] probe", "secret", second, sizeof second);
  free(other.text[0]);
  free(other.text[1]);
  assert_int_equal(strlen(first), 32);
  assert_string_not_equal(first, second);
}

static void output_lines_are_prefixed_and_partial_lines_held(void **state) {
  job *j = *state;
  const char *args[] = {
      "-np", "2", "/bin/sh", "-c", "printf 'one\\ntw'; sleep 0.3; printf 'o\\nthree'; echo err >&2",
      NULL};
  job_start(j, args);
  job_finish(j, 30);
  assert_int_equal(job_exit_code(j), 0);
  for (int r = 0; r < 2; r++) {
    const char *lines[] = {"one\n", "two\n", "three\n"};
    for (int i = 0; i < 3; i++) {
      char expect[32];
      snprintf(expect, sizeof expect, "[%d] %s", r, lines[i]);
      if (strstr(j->text[0], expect) == NULL) fail_msg("missing '%s' in:\n%s", expect, j->text[0]);
    }
    char expect[32];
    snprintf(expect, sizeof expect, "[%d] err\n", r);
    assert_non_null(strstr(j->text[1], expect));
  }
  assert_null(strstr(j->text[0], "err"));
  /* every line, on both streams, starts with a rank prefix */
  for (int w = 0; w < 2; w++) {
    for (const char *line = j->text[w]; *line; line = strchr(line, '\n') + 1) {
      assert_true(line[0] == '[');
      assert_non_null(strchr(line, '\n'));
    }
  }
}

/* --mode gives every rank the whole KOLO_MODE* environment of the mode (its defaults, the
 * options applied), which kolo_mode_from_env reads; a variable the caller had is replaced. */
static void mode_options_give_every_rank_the_mode_environment(void **state) {
  job *j = *state;
  setenv("KOLO_MODE_MAX_STALENESS", "7", 1); /* the caller's own: not passed on under --mode */
  const char *args[] = {
      "-np",
      "2",
      "--mode",
      "diloco",
      "--outer-lr",
      "0.5",
      "--sync-every",
      "20",
      "/bin/sh",
      "-c",
      "echo mode=$KOLO_MODE lr=$KOLO_MODE_OUTER_LR m=$KOLO_MODE_OUTER_MOMENTUM "
      "h=$KOLO_MODE_SYNC_EVERY s=$KOLO_MODE_MAX_STALENESS c=$KOLO_MODE_COMPRESSION",
      NULL};
  job_start(j, args);
  unsetenv("KOLO_MODE_MAX_STALENESS");
  job_finish(j, 30);
  assert_int_equal(job_exit_code(j), 0);
  for (int r = 0; r < 2; r++) {
    char expect[128];
    snprintf(expect, sizeof expect, "[%d] mode=DILOCO lr=0.5 m=0.9 h=20 s=0 c=none\n", r);
    if (strstr(j->text[0], expect) == NULL) fail_msg("missing '%s' in:\n%s", expect, j->text[0]);
  }
}

static void a_mode_option_the_mode_does_not_use_is_refused(void **state) {
  job *j = *state;
  const char *args[] = {"-np", "1", "--mode", "ASYNC", "--outer-lr", "0.5", "/bin/true", NULL};
  job_start(j, args);
  job_finish(j, 30);
  assert_int_equal(job_exit_code(j), 2);
  assert_non_null(strstr(j->text[1], "--outer-lr is not an option of mode ASYNC"));
}

static void a_failing_rank_stops_the_others_and_is_named(void **state) {
  job *j = *state;
  const char *args[] = {
      "-np",     "3",  "--",
      "/bin/sh", "-c", "if [ \"$KOLO_RANK\" = 2 ]; then echo bye >&2; exit 3; fi; exec sleep 30",
      NULL};
  job_start(j, args);
  job_finish(j, 20);
  assert_int_equal(job_exit_code(j), 3);
  const char *verdict = strstr(j->text[1], "kolorun: rank 2 exited with status 3\n");
  assert_non_null(verdict);
  const char *last_words = strstr(j->text[1], "[2] bye\n");
  assert_non_null(last_words);
  assert_true(last_words < verdict);       /* the rank's own output comes first */
  assert_true(j->ended - j->started < 10); /* the sleeping ranks were stopped */
}

static void a_rank_killed_by_a_signal_is_named(void **state) {
  job *j = *state;
  const char *args[] = {"-np",
                        "3",
                        "/bin/sh",
                        "-c",
                        "if [ \"$KOLO_RANK\" = 1 ]; then kill -KILL $$; fi; exec sleep 30",
                        NULL};
  job_start(j, args);
  job_finish(j, 20);
  assert_non_null(strstr(j->text[1], "kolorun: rank 1 killed by signal 9\n"));
  assert_int_equal(job_exit_code(j), 128 + 9);
  assert_true(j->ended - j->started < 10);
}

static void a_rank_ignoring_sigterm_is_killed_after_the_grace_period(void **state) {
  job *j = *state;
  char flag[] = "/tmp/kolorun-test-XXXXXX";
  int fd = mkstemp(flag);
  assert_true(fd >= 0);
  close(fd);
  unlink(flag);
  setenv("KOLORUN_TEST_FLAG", flag, 1);
  /* rank 1 ignores SIGTERM, then tells rank 0 to fail */
  const char *args[] = {
      "-np",
      "2",
      "/bin/sh",
      "-c",
      "if [ \"$KOLO_RANK\" = 1 ]; then trap '' TERM; touch \"$KOLORUN_TEST_FLAG\";"
      " while :; do sleep 0.2; done; fi;"
      " while [ ! -e \"$KOLORUN_TEST_FLAG\" ]; do sleep 0.05; done; exit 1",
      NULL};
  job_start(j, args);
  job_finish(j, 20);
  unlink(flag);
  unsetenv("KOLORUN_TEST_FLAG");
  assert_int_equal(job_exit_code(j), 1);
  assert_non_null(strstr(j->text[1], "kolorun: rank 0 exited with status 1\n"));
  double took = j->ended - j->started;
  if (took < 2.9 || took > 10) fail_msg("took %.2f s, expected the 3 s grace then SIGKILL", took);
}

static void forwarded_signal(void **state, int sig, const char *name) {
  job *j = *state;
  char script[256];
  snprintf(script, sizeof script,
           "trap 'echo got-%s; exit 0' %s; echo ready; while :; do sleep 0.1; done", name, name);
  const char *args[] = {"-np", "2", "/bin/sh", "-c", script, NULL};
  job_start(j, args);
  job_expect(j, 0, "[0] ready\n", 20);
  job_expect(j, 0, "[1] ready\n", 20);
  kill(j->pid, sig);
  job_finish(j, 20);
  char expect[32];
  for (int r = 0; r < 2; r++) {
    snprintf(expect, sizeof expect, "[%d] got-%s\n", r, name);
    if (strstr(j->text[0], expect) == NULL) fail_msg("missing '%s' in:\n%s", expect, j->text[0]);
  }
  assert_int_equal(job_exit_code(j), 0); /* the ranks handled it and exited 0 */
}

static void sigterm_is_forwarded_to_every_rank(void **state) {
  forwarded_signal(state, SIGTERM, "TERM");
}

static void sigint_is_forwarded_to_every_rank(void **state) {
  forwarded_signal(state, SIGINT, "INT");
}

static void the_timeout_stops_everything_with_status_124(void **state) {
  job *j = *state;
  const char *args[] = {"--timeout", "0.5", "-np", "2", "sleep", "30", NULL};
  job_start(j, args);
  job_finish(j, 20);
  assert_int_equal(job_exit_code(j), 124);
  assert_non_null(strstr(j->text[1], "kolorun: timeout after 0.5 s"));
  assert_true(j->ended - j->started < 5);
}

static void bad_usage_exits_2_with_a_one_line_reason(void **state) {
  (void)state;
  const char *cases[][6] = {
      {NULL},
      {"-np", "0", "true", NULL},
      {"-np", "2", NULL},
      {"-np", "2", "--timeout", "soon", "true", NULL},
      {"--frobnicate", "-np", "2", "true", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    job bad = {.fds = {-1, -1}};
    job_start(&bad, cases[i]);
    job_finish(&bad, 10);
    int code = job_exit_code(&bad);
    int lines = 0;
    for (const char *c = bad.text[1]; *c; c++) lines += *c == '\n';
    int starts = strncmp(bad.text[1], "kolorun: ", 9) == 0;
    free(bad.text[0]);
    free(bad.text[1]);
    if (code != 2 || lines != 1 || !starts) fail_msg("case %zu: exit %d, %d lines", i, code, lines);
  }
}

static void a_missing_program_fails_its_rank_with_127(void **state) {
  job *j = *state;
  const char *args[] = {"-np", "2", "/nonexistent/kolo-program", NULL};
  job_start(j, args);
  job_finish(j, 20);
  assert_int_equal(job_exit_code(j), 127);
  assert_non_null(strstr(j->text[1], "cannot run '/nonexistent/kolo-program'"));
  assert_non_null(strstr(j->text[1], "exited with status 127\n"));
}

/* Whether pid is gone (or a zombie waiting for init, which no longer runs). */
static int process_gone(pid_t pid) {
  char path[64], stat[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 1;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = '\0';
  const char *paren = strrchr(stat, ')');
  return paren != NULL && (paren[2] == 'Z' || paren[2] == 'X');
}

static void ranks_do_not_outlive_a_killed_kolorun(void **state) {
  job *j = *state;
  const char *args[] = {"-np", "2", "/bin/sh", "-c", "echo pid=$$; exec sleep 30", NULL};
  job_start(j, args);
  job_expect(j, 0, "[0] pid=", 20);
  job_expect(j, 0, "[1] pid=", 20);
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "[%d] pid=", r);
    pids[r] = (pid_t)atoi(strstr(j->text[0], prefix) + strlen(prefix));
    assert_true(pids[r] > 0);
    assert_false(process_gone(pids[r]));
  }
  kill(j->pid, SIGKILL);
  waitpid(j->pid, &j->status, 0);
  j->reaped = 1;
  double deadline = now_s() + 5;
  for (int r = 0; r < 2; r++) {
    while (!process_gone(pids[r])) {
      if (now_s() > deadline) {
        kill(pids[r], SIGKILL);
        fail_msg("rank %d (pid %d) outlived kolorun", r, (int)pids[r]);
      }
      usleep(20000);
    }
  }
}

int main(void) {
  bin_path("KOLO_BIN_DIR", "kolorun", kolorun_path, sizeof kolorun_path);
  bin_path("KOLO_TEST_DIR", "test_kolorun_probe", probe_path, sizeof probe_path);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(every_rank_gets_its_rank_and_the_shared_job_environment,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(host_sets_the_rendezvous_address_and_kolo_host, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(two_jobs_get_different_secrets, setup, teardown),
      cmocka_unit_test_setup_teardown(output_lines_are_prefixed_and_partial_lines_held, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_failing_rank_stops_the_others_and_is_named, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_rank_killed_by_a_signal_is_named, setup, teardown),
      cmocka_unit_test_setup_teardown(a_rank_ignoring_sigterm_is_killed_after_the_grace_period,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(sigterm_is_forwarded_to_every_rank, setup, teardown),
      cmocka_unit_test_setup_teardown(sigint_is_forwarded_to_every_rank, setup, teardown),
      cmocka_unit_test_setup_teardown(the_timeout_stops_everything_with_status_124, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(bad_usage_exits_2_with_a_one_line_reason, setup, teardown),
      cmocka_unit_test_setup_teardown(a_missing_program_fails_its_rank_with_127, setup, teardown),
      cmocka_unit_test_setup_teardown(ranks_do_not_outlive_a_killed_kolorun, setup, teardown),
      cmocka_unit_test_setup_teardown(mode_options_give_every_rank_the_mode_environment, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_mode_option_the_mode_does_not_use_is_refused, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
