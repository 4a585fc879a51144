/* Failure semantics of libkolo with real processes (collective_failure_rank) in a
 * ring on 127.0.0.1 built from explicit ring specs: a SIGKILLed rank becomes
 * KOLO_ERR_PEER_LOST naming it on every survivor within 1 s; a wrong secret and a
 * stale epoch are refused while the real ring forms; kolo_comm_abort from another
 * thread ends a pending wait and a new epoch works in the same processes; a
 * SIGSTOPped peer trips KOLO_TIMEOUT, or, with KOLO_PEER_TIMEOUT set, is found
 * by its neighbours' liveness beat (PEER_LOST naming it) well before. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

/* The bound is one second; under AddressSanitizer every reduction runs
 * several times slower, so there the bound only proves liveness. */
#if defined(__SANITIZE_ADDRESS__)
#define DETECTION_BOUND_S 3.0
#else
#define DETECTION_BOUND_S 1.0
#endif

#define MAX_HELPERS 8

typedef struct helper {
  pid_t pid;
  int to;   /* its stdin */
  int from; /* its stdout */
  char buffer[8192];
  size_t length;
  char address[256];
} helper;

typedef struct world {
  helper helpers[MAX_HELPERS];
  int count;
} world;

static char rank_path[512];

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static helper *start(world *w, const char *mode) {
  assert_true(w->count < MAX_HELPERS);
  helper *h = &w->helpers[w->count++];
  int in[2], out[2];
  assert_int_equal(pipe2(in, O_CLOEXEC), 0);
  assert_int_equal(pipe2(out, O_CLOEXEC), 0);
  h->pid = fork();
  assert_true(h->pid >= 0);
  if (h->pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    execl(rank_path, rank_path, mode, (char *)NULL);
    _exit(99);
  }
  close(in[0]);
  close(out[1]);
  h->to = in[1];
  h->from = out[0];
  h->length = 0;
  return h;
}

/* Next line from helper that starts with prefix (other lines are skipped), within
 * seconds; copies it into line. Fails the test on timeout or EOF. */
static void expect_line(helper *h, const char *prefix, double seconds, char *line, size_t size) {
  long long deadline = now_ns() + (long long)(seconds * 1e9);
  for (;;) {
    char *newline;
    while ((newline = memchr(h->buffer, '\n', h->length)) != NULL) {
      size_t n = (size_t)(newline - h->buffer);
      int match = strncmp(h->buffer, prefix, strlen(prefix)) == 0;
      if (match) {
        size_t copy = n < size - 1 ? n : size - 1;
        memcpy(line, h->buffer, copy);
        line[copy] = '\0';
      }
      memmove(h->buffer, newline + 1, h->length - n - 1);
      h->length -= n + 1;
      if (match) return;
    }
    long long left = deadline - now_ns();
    if (left <= 0) fail_msg("pid %d: no '%s' line within %.1f s", (int)h->pid, prefix, seconds);
    struct pollfd p = {.fd = h->from, .events = POLLIN};
    if (poll(&p, 1, (int)(left / 1000000) + 1) <= 0) continue;
    ssize_t got = read(h->from, h->buffer + h->length, sizeof h->buffer - h->length - 1);
    if (got <= 0) fail_msg("pid %d ended before a '%s' line", (int)h->pid, prefix);
    h->length += (size_t)got;
  }
}

static void read_address(helper *h) {
  char line[256];
  expect_line(h, "addr ", 10, line, sizeof line);
  snprintf(h->address, sizeof h->address, "%.200s", line + 5);
}

/* Sends "spec epoch rank size timeout secret peers..." to helper h. */
static void send_spec(helper *h, unsigned long long epoch, int rank, int size, int timeout_ms,
                      const char *secret, helper **peers) {
  char line[4096];
  int used =
      snprintf(line, sizeof line, "spec %llu %d %d %d %s", epoch, rank, size, timeout_ms, secret);
  for (int r = 0; r < size; r++)
    used += snprintf(line + used, sizeof line - (size_t)used, " %s", peers[r]->address);
  line[used++] = '\n';
  assert_int_equal(write(h->to, line, (size_t)used), used);
}

static int exit_status(helper *h, double seconds) {
  long long deadline = now_ns() + (long long)(seconds * 1e9);
  int status = 0;
  for (;;) {
    pid_t got = waitpid(h->pid, &status, WNOHANG);
    if (got == h->pid) {
      h->pid = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (now_ns() > deadline) fail_msg("pid %d did not exit within %.1f s", (int)h->pid, seconds);
    usleep(10000);
  }
}

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  *state = w;
  return 0;
}

/* Runs also when a test fails: every helper is killed and reaped. */
static int teardown(void **state) {
  world *w = *state;
  for (int i = 0; i < w->count; i++) {
    helper *h = &w->helpers[i];
    if (h->pid > 0) {
      kill(h->pid, SIGKILL);
      kill(h->pid, SIGCONT);
      waitpid(h->pid, NULL, 0);
    }
    close(h->to);
    close(h->from);
  }
  free(w);
  return 0;
}

/* Starts n helpers in mode and forms the ring (epoch 1, secret "s3cr3t"). */
static void form_ring(world *w, int n, const char *mode, int timeout_ms, helper **ring) {
  for (int r = 0; r < n; r++) ring[r] = start(w, mode);
  for (int r = 0; r < n; r++) read_address(ring[r]);
  for (int r = 0; r < n; r++) send_spec(ring[r], 1, r, n, timeout_ms, "s3cr3t", ring);
  char line[256];
  for (int r = 0; r < n; r++) {
    expect_line(ring[r], "created ", 30, line, sizeof line);
    if (strncmp(line, "created KOLO_OK ", 16) != 0) fail_msg("rank %d: %s", r, line);
  }
}

static void killed_rank_is_reported_as_peer_lost(void **state, int n, int victim) {
  world *w = *state;
  helper *ring[MAX_HELPERS];
  form_ring(w, n, "loop", 30000, ring);
  char line[512];
  for (int r = 0; r < n; r++) expect_line(ring[r], "ready", 10, line, sizeof line);
  usleep(300000); /* well inside the all-reduce loop */
  long long killed_at = now_ns();
  kill(ring[victim]->pid, SIGKILL);
  for (int r = 0; r < n; r++) {
    if (r == victim) continue;
    expect_line(ring[r], "error ", 10, line, sizeof line);
    char status[64], reported[64];
    int failed_rank = -9;
    long long at = 0;
    assert_int_equal(sscanf(line, "error %63s %d %lld %63s", status, &failed_rank, &at, reported),
                     4);
    double after_s = (double)(at - killed_at) / 1e9;
    print_message("rank %d: %s after %.3f s: %s\n", r, status, after_s, line);
    assert_string_equal(status, "KOLO_ERR_PEER_LOST");
    assert_string_equal(reported, "KOLO_ERR_PEER_LOST");
    assert_int_equal(failed_rank, victim);
    if (after_s > DETECTION_BOUND_S)
      fail_msg("rank %d learned of the death after %.3f s (limit %.0f s)", r, after_s,
               DETECTION_BOUND_S);
    expect_line(ring[r], "later ", 10, line, sizeof line);
    assert_non_null(strstr(line, "later KOLO_ERR_PEER_LOST "));
    assert_int_equal(exit_status(ring[r], 10), 0);
  }
}

static void a_killed_rank_of_two_is_peer_lost_within_a_second(void **state) {
  killed_rank_is_reported_as_peer_lost(state, 2, 1);
}

static void a_killed_rank_of_four_is_peer_lost_on_every_survivor_within_a_second(void **state) {
  killed_rank_is_reported_as_peer_lost(state, 4, 2);
}

/* Two real ranks (epoch 5, secret "s3cr3t") and four intruders: two with a wrong
 * secret, two with the stale epoch 4. Each kind has one intruder claiming rank 0
 * and one claiming rank 1, so whichever way the ring dials, one intruder of each
 * kind connects to a real rank. The intruders dial first, so their connections wait
 * in the real ranks' accept queues ahead of the real ones. Asserts the real ring
 * forms and works; returns what each intruder's kolo_comm_create said. */
static void run_intruders(world *w, char statuses[4][64]) {
  helper *ring[2], *intruders[4];
  ring[0] = start(w, "ring");
  ring[1] = start(w, "ring");
  read_address(ring[0]);
  read_address(ring[1]);
  const char *secrets[4] = {"wrong", "wrong", "s3cr3t", "s3cr3t"};
  unsigned long long epochs[4] = {5, 5, 4, 4};
  for (int i = 0; i < 4; i++) {
    intruders[i] = start(w, "intrude");
    read_address(intruders[i]);
  }
  for (int i = 0; i < 4; i++) {
    int claimed = i % 2;
    helper *peers[2] = {ring[0], ring[1]};
    peers[claimed] = intruders[i];
    send_spec(intruders[i], epochs[i], claimed, 2, 3000, secrets[i], peers);
  }
  usleep(500000);
  send_spec(ring[0], 5, 0, 2, 20000, "s3cr3t", ring);
  send_spec(ring[1], 5, 1, 2, 20000, "s3cr3t", ring);
  char line[256];
  for (int r = 0; r < 2; r++) {
    expect_line(ring[r], "created ", 30, line, sizeof line);
    if (strncmp(line, "created KOLO_OK ", 16) != 0) fail_msg("real rank %d: %s", r, line);
  }
  for (int r = 0; r < 2; r++) {
    expect_line(ring[r], "allreduce ", 30, line, sizeof line);
    assert_string_equal(line, "allreduce ok");
    assert_int_equal(exit_status(ring[r], 20), 0);
  }
  for (int i = 0; i < 4; i++) {
    expect_line(intruders[i], "created ", 20, line, sizeof line);
    statuses[i][0] = '\0';
    sscanf(line, "created %63s", statuses[i]);
    print_message("intruder %d (%s, claims rank %d): %s\n", i,
                  i / 2 ? "stale epoch" : "wrong secret", i % 2, statuses[i]);
  }
}

static const char *const refusal_codes[2] = {"KOLO_ERR_AUTH", "KOLO_ERR_STALE_EPOCH"};

static void a_wrong_secret_and_a_stale_epoch_never_join_and_the_ring_still_forms(void **state) {
  char statuses[4][64];
  run_intruders(*state, statuses);
  for (int i = 0; i < 4; i++) {
    /* never admitted; and a refusal, when reported, has its own name */
    if (strcmp(statuses[i], refusal_codes[i / 2]) != 0 &&
        strcmp(statuses[i], "KOLO_ERR_TIMEOUT") != 0) {
      fail_msg("intruder %d got %s, want %s (or a timeout)", i, statuses[i], refusal_codes[i / 2]);
    }
  }
}

/* Stricter: the intruder that dialled a real rank is told why, at once. */
static void a_refused_intruder_is_told_auth_or_stale_epoch(void **state) {
  char statuses[4][64];
  run_intruders(*state, statuses);
  for (int kind = 0; kind < 2; kind++) {
    int told = 0;
    for (int i = 2 * kind; i < 2 * kind + 2; i++)
      told += strcmp(statuses[i], refusal_codes[kind]) == 0;
    if (told == 0) {
      fail_msg("no %s intruder got %s (got %s and %s)", kind ? "stale-epoch" : "wrong-secret",
               refusal_codes[kind], statuses[2 * kind], statuses[2 * kind + 1]);
    }
  }
}

static void abort_from_another_thread_ends_a_pending_wait_and_the_next_epoch_works(void **state) {
  world *w = *state;
  helper *ring[2];
  form_ring(w, 2, "abort", 20000, ring);
  char line[256];
  for (int r = 0; r < 2; r++) {
    expect_line(ring[r], "allreduce ", 20, line, sizeof line);
    assert_string_equal(line, "allreduce ok");
  }
  char status[64];
  long long took = 0;
  expect_line(ring[0], "waited ", 10, line, sizeof line);
  assert_int_equal(sscanf(line, "waited %63s %lld", status, &took), 2);
  assert_string_equal(status, "KOLO_ERR_ABORTED");
  if (took > 1000000000LL) fail_msg("the wait ended %.3f s after the abort", (double)took / 1e9);
  expect_line(ring[0], "later ", 10, line, sizeof line);
  assert_string_equal(line, "later KOLO_ERR_ABORTED");
  /* the abort reaches the neighbour, whose next operation fails at once */
  int failed_rank = -9;
  expect_line(ring[1], "noticed ", 10, line, sizeof line);
  print_message("rank 1: %s\n", line);
  assert_int_equal(sscanf(line, "noticed %63s %d %lld", status, &failed_rank, &took), 3);
  if (strcmp(status, "KOLO_ERR_ABORTED") != 0 && strcmp(status, "KOLO_ERR_PEER_LOST") != 0) {
    fail_msg("rank 1 learned %s of rank 0's abort", status);
  }
  expect_line(ring[1], "waited ", 10, line, sizeof line);
  assert_int_equal(sscanf(line, "waited %63s %lld", status, &took), 2);
  if (strcmp(status, "KOLO_ERR_ABORTED") != 0 && strcmp(status, "KOLO_ERR_PEER_LOST") != 0) {
    fail_msg("rank 1's barrier ended with %s", status);
  }
  if (took > 1000000000LL) fail_msg("rank 1's barrier took %.3f s to fail", (double)took / 1e9);
  /* epoch 2 in the same processes */
  for (int r = 0; r < 2; r++) read_address(ring[r]);
  for (int r = 0; r < 2; r++) send_spec(ring[r], 2, r, 2, 20000, "s3cr3t", ring);
  for (int r = 0; r < 2; r++) {
    expect_line(ring[r], "created ", 20, line, sizeof line);
    if (strncmp(line, "created KOLO_OK ", 16) != 0) fail_msg("epoch 2, rank %d: %s", r, line);
    expect_line(ring[r], "epoch ", 10, line, sizeof line);
    assert_string_equal(line, "epoch 2");
    expect_line(ring[r], "allreduce ", 20, line, sizeof line);
    assert_string_equal(line, "allreduce ok");
  }
  for (int r = 0; r < 2; r++) assert_int_equal(exit_status(ring[r], 20), 0);
}

static void a_silent_peer_trips_the_timeout(void **state) {
  world *w = *state;
  helper *ring[2];
  setenv("KOLO_TIMEOUT", "2", 1); /* the spec says 0: the environment decides */
  form_ring(w, 2, "loop", 0, ring);
  unsetenv("KOLO_TIMEOUT");
  char line[512];
  for (int r = 0; r < 2; r++) expect_line(ring[r], "ready", 10, line, sizeof line);
  usleep(300000);
  long long stopped_at = now_ns();
  kill(ring[1]->pid, SIGSTOP);
  expect_line(ring[0], "error ", 15, line, sizeof line);
  char status[64];
  int failed_rank = -9;
  long long at = 0;
  assert_int_equal(sscanf(line, "error %63s %d %lld", status, &failed_rank, &at), 3);
  double after_s = (double)(at - stopped_at) / 1e9;
  print_message("rank 0: %s after %.3f s: %s\n", status, after_s, line);
  assert_string_equal(status, "KOLO_ERR_TIMEOUT");
  if (after_s < 1.5 || after_s > 6.0) fail_msg("timed out after %.3f s, want about 2 s", after_s);
  kill(ring[1]->pid, SIGKILL);
  kill(ring[1]->pid, SIGCONT);
}

static void a_silent_peer_is_found_by_the_beat_of_both_neighbours(void **state) {
  world *w = *state;
  helper *ring[3];
  setenv("KOLO_PEER_TIMEOUT", "0.5", 1); /* fixed rings judge only when asked */
  form_ring(w, 3, "loop", 30000, ring);
  unsetenv("KOLO_PEER_TIMEOUT");
  char line[512];
  for (int r = 0; r < 3; r++) expect_line(ring[r], "ready", 10, line, sizeof line);
  usleep(300000);
  long long stopped_at = now_ns();
  kill(ring[1]->pid, SIGSTOP);
  for (int r = 0; r < 3; r += 2) {
    expect_line(ring[r], "error ", 15, line, sizeof line);
    char status[64];
    int failed_rank = -9;
    long long at = 0;
    assert_int_equal(sscanf(line, "error %63s %d %lld", status, &failed_rank, &at), 3);
    double after_s = (double)(at - stopped_at) / 1e9;
    print_message("rank %d: %s naming %d after %.3f s: %s\n", r, status, failed_rank, after_s,
                  line);
    assert_string_equal(status, "KOLO_ERR_PEER_LOST");
    assert_int_equal(failed_rank, 1);
    /* 0.5 s, stretched by late beats on a loaded machine; the collective timeout is 30 s */
    if (after_s > 2 * DETECTION_BOUND_S + 1.0) fail_msg("found after %.3f s", after_s);
  }
  kill(ring[1]->pid, SIGKILL);
  kill(ring[1]->pid, SIGCONT);
}

int main(int argc, char **argv) {
  const char *dir = getenv("KOLO_TEST_DIR");
  snprintf(rank_path, sizeof rank_path, "%s/collective_failure_rank", dir ? dir : ".");
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_killed_rank_of_two_is_peer_lost_within_a_second, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          a_killed_rank_of_four_is_peer_lost_on_every_survivor_within_a_second, setup, teardown),
      cmocka_unit_test_setup_teardown(
          a_wrong_secret_and_a_stale_epoch_never_join_and_the_ring_still_forms, setup, teardown),
      cmocka_unit_test_setup_teardown(
          abort_from_another_thread_ends_a_pending_wait_and_the_next_epoch_works, setup, teardown),
      cmocka_unit_test_setup_teardown(a_silent_peer_is_found_by_the_beat_of_both_neighbours, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_silent_peer_trips_the_timeout, setup, teardown),
  };
  const struct CMUnitTest refusal_codes_tests[] = {
      cmocka_unit_test_setup_teardown(a_refused_intruder_is_told_auth_or_stale_epoch, setup,
                                      teardown),
  };
  /* run apart (see launcher/CMakeLists.txt: a known libkolo gap, registered WILL_FAIL) */
  if (argc > 1 && strcmp(argv[1], "refusal-codes") == 0) {
    return cmocka_run_group_tests(refusal_codes_tests, NULL, NULL);
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
