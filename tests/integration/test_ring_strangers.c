/* Strangers on the ring ports (issue #30, items 3 and 4): 200 TCP connections that connect to
 * each rank's data-plane listener and send nothing must not keep a 3-rank ring from forming
 * (before: each was read inline for up to a second, so 16 per port pushed formation past
 * 36 s). The ranks form with a 10 s deadline; the figures (formation time undisturbed and
 * with the strangers) are printed, not asserted. And a squatter listening where a rank's
 * neighbour should be never receives the ring's secret: the rank fails with KOLO_ERR_AUTH
 * when the squatter cannot prove that it knows it. */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kolo/kolo.h"

#define RANKS 3
#ifndef STRANGERS
#define STRANGERS 200
#endif

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A connection to address ("127.0.0.1:port") that will never say a word; -1 on failure. */
static int idle_stranger(const char *address) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  a.sin_port = htons((uint16_t)atoi(strrchr(address, ':') + 1));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Forms a ring of RANKS with strangers idle connections per port made first; returns how many
 * ranks failed, *seconds the slowest formation. */
static int form(int strangers, double *seconds) {
  kolo_listener *listeners[RANKS];
  char addresses[RANKS][64];
  const char *peers[RANKS];
  static int fds[RANKS * STRANGERS];
  int n_fds = 0;
  for (int r = 0; r < RANKS; r++) {
    assert_int_equal(kolo_listener_create("127.0.0.1:0", &listeners[r]), KOLO_OK);
    assert_int_equal(kolo_listener_address(listeners[r], addresses[r], sizeof addresses[r]),
                     KOLO_OK);
    peers[r] = addresses[r];
    for (int i = 0; i < strangers; i++) {
      int fd = idle_stranger(addresses[r]);
      assert_true(fd >= 0);
      fds[n_fds++] = fd;
    }
  }
  int pipes[RANKS][2];
  pid_t pids[RANKS];
  for (int r = 0; r < RANKS; r++) {
    assert_int_equal(pipe(pipes[r]), 0);
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(60);
      kolo_ring_spec spec = {.epoch = 1,
                             .rank = r,
                             .size = RANKS,
                             .peers = peers,
                             .secret = "strangers",
                             .timeout_ms = 10000};
      kolo_comm *comm = NULL;
      double start = now_s();
      kolo_status status = kolo_comm_create(&spec, listeners[r], &comm);
      double took = now_s() - start;
      if (write(pipes[r][1], &took, sizeof took) != sizeof took) _exit(3);
      if (status != KOLO_OK) {
        fprintf(stderr, "rank %d: create: %s\n", r, kolo_strerror(status));
        _exit(10);
      }
      float x = (float)r;
      status = kolo_allreduce(comm, &x, &x, 1, KOLO_FLOAT32, KOLO_SUM);
      kolo_comm_destroy(comm);
      _exit(status == KOLO_OK && x == 3.0f ? 0 : 11);
    }
    close(pipes[r][1]);
  }
  for (int r = 0; r < RANKS; r++) kolo_listener_destroy(listeners[r]);
  int failed = 0;
  *seconds = 0;
  for (int r = 0; r < RANKS; r++) {
    double took = 0;
    if (read(pipes[r][0], &took, sizeof took) == sizeof took && took > *seconds) *seconds = took;
    close(pipes[r][0]);
    int wstatus = 0;
    waitpid(pids[r], &wstatus, 0);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) failed++;
  }
  for (int i = 0; i < n_fds; i++) close(fds[i]);
  return failed;
}

static void idle_strangers_on_every_ring_port_do_not_stall_formation(void **state) {
  (void)state;
  struct rlimit nofile;
  getrlimit(RLIMIT_NOFILE, &nofile);
  if (nofile.rlim_cur < 2048 && nofile.rlim_max >= 2048) {
    nofile.rlim_cur = 2048;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  double quiet = 0, crowded = 0;
  assert_int_equal(form(0, &quiet), 0);
  assert_int_equal(form(STRANGERS, &crowded), 0);
  printf("ring of %d formed in %.3f s undisturbed, %.3f s with %d idle strangers per port\n", RANKS,
         quiet, crowded, STRANGERS);
}

#define SECRET "the-ring-secret-nobody-else-knows"

/* Listens on 127.0.0.1:0; *address gets "127.0.0.1:port". */
static int plain_listener(char *address, size_t length) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t len = sizeof a;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 16) == 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  snprintf(address, length, "127.0.0.1:%d", ntohs(a.sin_port));
  return fd;
}

static void a_squatter_on_the_neighbours_port_never_receives_the_secret(void **state) {
  (void)state;
  kolo_listener *listener = NULL;
  char addresses[2][64];
  assert_int_equal(kolo_listener_create("127.0.0.1:0", &listener), KOLO_OK);
  assert_int_equal(kolo_listener_address(listener, addresses[0], sizeof addresses[0]), KOLO_OK);
  int squatter = plain_listener(addresses[1], sizeof addresses[1]);
  const char *peers[2] = {addresses[0], addresses[1]};
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    kolo_ring_spec spec = {
        .epoch = 3, .rank = 0, .size = 2, .peers = peers, .secret = SECRET, .timeout_ms = 3000};
    kolo_comm *comm = NULL;
    kolo_status status = kolo_comm_create(&spec, listener, &comm);
    _exit(status == KOLO_ERR_AUTH ? 0 : 10 + (int)status);
  }
  kolo_listener_destroy(listener);
  /* the squatter takes what rank 0 sends and answers each connection with a made-up
   * challenge (it cannot prove the secret: it does not know it) */
  static char seen[1 << 16];
  size_t n_seen = 0;
  double until = now_s() + 2.0;
  struct timeval tv = {0, 200000};
  setsockopt(squatter, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int conns[8], n_conns = 0;
  while (now_s() < until && n_conns < 8) {
    int c = accept(squatter, NULL, NULL);
    if (c < 0) continue;
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t got = recv(c, seen + n_seen, sizeof seen - n_seen, 0);
    if (got > 0) n_seen += (size_t)got;
    uint8_t challenge[52] = {'K', 'C', 'H', 'L'};
    memset(challenge + 4, 0x5a, sizeof challenge - 4);
    if (send(c, challenge, sizeof challenge, MSG_NOSIGNAL) < 0) perror("squatter send");
    got = recv(c, seen + n_seen, sizeof seen - n_seen, 0); /* whatever comes after it */
    if (got > 0) n_seen += (size_t)got;
    conns[n_conns++] = c;
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  for (int i = 0; i < n_conns; i++) close(conns[i]);
  close(squatter);
  assert_true(n_seen > 0); /* it was dialled */
  assert_null(memmem(seen, n_seen, SECRET, strlen(SECRET)));
  assert_true(WIFEXITED(wstatus));
  assert_int_equal(WEXITSTATUS(wstatus), 0); /* rank 0 failed with KOLO_ERR_AUTH */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(idle_strangers_on_every_ring_port_do_not_stall_formation),
      cmocka_unit_test(a_squatter_on_the_neighbours_port_never_receives_the_secret),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
