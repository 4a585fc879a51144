/* Strangers on the ring ports (issue #30, item 3): 200 TCP connections that connect to each
 * rank's data-plane listener and send nothing must not keep a 3-rank ring from forming
 * (before: each was read inline for up to a second, so 16 per port pushed formation past
 * 36 s). The ranks form with a 10 s deadline; the figures (formation time undisturbed and
 * with the strangers) are printed, not asserted. */
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(idle_strangers_on_every_ring_port_do_not_stall_formation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
