/* kolo-server's HTTP front end (server/http_front.c) alone, with a 2 s timeout and a stand-in
 * engine that reads and drops what it is given, never answers, and closes when its stream
 * ends (as libmicrohttpd does with a request cut short): a request whose head or body is
 * trickled so that it never arrives whole within the timeout gets kolo's JSON 408 and the
 * close (a body sent a byte at a time kept libmicrohttpd's idle timeout from ever firing, so
 * such a client held its connection forever); a request that arrives whole in time is
 * forwarded whole and its connection is left open however long the answer takes (streams).
 * Real sockets on 127.0.0.1 port 0. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/http_front.h"

#define TIMEOUT_S 2
#define MAX_FDS 16

typedef struct engine {
  pthread_mutex_t lock;
  int fds[MAX_FDS];
  size_t received[MAX_FDS]; /* bytes read from each handed-over connection */
  int closed[MAX_FDS];      /* it saw the end of its stream and closed */
  int n, stop, wake[2];
  pthread_t thread;
} engine;

typedef struct fixture {
  engine e;
  kolo_server_http_front *front;
  int port;
} fixture;

static int hand_over(void *arg, int fd, const struct sockaddr *peer, socklen_t peer_len) {
  engine *e = arg;
  (void)peer;
  (void)peer_len;
  pthread_mutex_lock(&e->lock);
  int ok = e->n < MAX_FDS;
  if (ok) e->fds[e->n++] = fd;
  pthread_mutex_unlock(&e->lock);
  if (!ok) close(fd);
  char one = 1;
  if (write(e->wake[1], &one, 1) != 1) return -1;
  return ok ? 0 : -1;
}

/* Reads every handed-over connection and drops the bytes; closes one at its end of stream. */
static void *engine_run(void *arg) {
  engine *e = arg;
  for (;;) {
    struct pollfd p[MAX_FDS + 1];
    int idx[MAX_FDS + 1], n = 0;
    pthread_mutex_lock(&e->lock);
    if (e->stop) {
      pthread_mutex_unlock(&e->lock);
      return NULL;
    }
    for (int i = 0; i < e->n; i++)
      if (!e->closed[i]) {
        p[n] = (struct pollfd){e->fds[i], POLLIN, 0};
        idx[n++] = i;
      }
    pthread_mutex_unlock(&e->lock);
    p[n] = (struct pollfd){e->wake[0], POLLIN, 0};
    if (poll(p, (nfds_t)n + 1, 1000) < 0) continue;
    char buf[4096];
    if (p[n].revents && read(e->wake[0], buf, sizeof buf) < 0) continue;
    for (int k = 0; k < n; k++) {
      if (!p[k].revents) continue;
      ssize_t r = recv(p[k].fd, buf, sizeof buf, MSG_DONTWAIT);
      pthread_mutex_lock(&e->lock);
      if (r > 0) e->received[idx[k]] += (size_t)r;
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        close(p[k].fd);
        e->closed[idx[k]] = 1;
      }
      pthread_mutex_unlock(&e->lock);
    }
  }
}

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  pthread_mutex_init(&fx->e.lock, NULL);
  assert_int_equal(pipe(fx->e.wake), 0);
  assert_int_equal(pthread_create(&fx->e.thread, NULL, engine_run, &fx->e), 0);
  kolo_server_http_front_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.addr.sin_family = AF_INET;
  cfg.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cfg.max_connections = 64;
  cfg.timeout_s = TIMEOUT_S;
  cfg.hand_over = hand_over;
  cfg.arg = &fx->e;
  assert_int_equal(kolo_server_http_front_start(&cfg, &fx->front, &fx->port), KOLO_OK);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  kolo_server_http_front_stop(fx->front);
  pthread_mutex_lock(&fx->e.lock);
  fx->e.stop = 1;
  pthread_mutex_unlock(&fx->e.lock);
  char one = 1;
  assert_int_equal(write(fx->e.wake[1], &one, 1), 1);
  pthread_join(fx->e.thread, NULL);
  for (int i = 0; i < fx->e.n; i++)
    if (!fx->e.closed[i]) close(fx->e.fds[i]);
  close(fx->e.wake[0]);
  close(fx->e.wake[1]);
  pthread_mutex_destroy(&fx->e.lock);
  free(fx);
  return 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

static void send_all(int fd, const char *text) {
  size_t len = strlen(text);
  assert_int_equal(send(fd, text, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Sends one byte of `text` every 300 ms (from the start again when it runs out) until the
 * server answers or closes, or `seconds` pass; returns what it answered (NUL-terminated) and
 * whether it closed after it. */
static size_t trickle(int fd, const char *text, double seconds, char *out, size_t cap,
                      int *closed) {
  size_t len = 0, i = 0;
  *closed = 0;
  double end = now_s() + seconds;
  while (now_s() < end) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 300) > 0) {
      ssize_t n = recv(fd, out + len, cap - 1 - len, 0);
      if (n <= 0) {
        *closed = 1;
        break;
      }
      len += (size_t)n;
      continue;
    }
    if (len > 0) continue; /* an answer is coming: read it to the close */
    if (send(fd, text + i, 1, MSG_NOSIGNAL) != 1) break;
    if (text[++i] == '\0') i = 0;
  }
  out[len] = '\0';
  return len;
}

static void assert_408_json(const char *answer, size_t len, int closed) {
  assert_true(len > 0);
  assert_non_null(strstr(answer, "HTTP/1.1 408 "));
  assert_non_null(strstr(answer, "Content-Type: application/json"));
  assert_non_null(strstr(answer, "{\"error\":{\"code\":\"DEADLINE_EXCEEDED\""));
  assert_true(closed);
}

static void a_body_trickled_past_the_deadline_gets_a_json_408_and_the_close(void **state) {
  fixture *fx = *state;
  int fd = dial(fx->port);
  send_all(fd,
           "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
           "1000\r\n\r\n");
  char answer[4096];
  int closed;
  double t0 = now_s();
  size_t len = trickle(fd, "x", 4.0 * TIMEOUT_S + 2, answer, sizeof answer, &closed);
  double took = now_s() - t0;
  assert_408_json(answer, len, closed);
  assert_true(took >= TIMEOUT_S - 0.5);
  pthread_mutex_lock(&fx->e.lock);
  assert_int_equal(fx->e.n, 1);
  assert_true(fx->e.received[0] > 60); /* the head and the body bytes went through */
  assert_true(fx->e.closed[0]);        /* the engine's stream was ended */
  pthread_mutex_unlock(&fx->e.lock);
  close(fd);
}

static void a_later_request_head_trickled_past_the_deadline_gets_a_json_408(void **state) {
  fixture *fx = *state;
  int fd = dial(fx->port);
  send_all(fd, "GET /v1/stream?jobs=1 HTTP/1.1\r\nHost: x\r\n\r\n"); /* whole: forwarded */
  char answer[4096];
  int closed;
  size_t len = trickle(fd, "GET /v1/jobs HTTP/1.1\r\nX-Slow: ", 4.0 * TIMEOUT_S + 2, answer,
                       sizeof answer, &closed);
  assert_408_json(answer, len, closed);
  close(fd);
}

static void a_first_head_trickled_past_the_deadline_gets_a_json_408(void **state) {
  fixture *fx = *state;
  int fd = dial(fx->port);
  char answer[4096];
  int closed;
  size_t len = trickle(fd, "GET /v1/jobs HTTP/1.1\r\nX-Slow: ", 4.0 * TIMEOUT_S + 2, answer,
                       sizeof answer, &closed);
  assert_408_json(answer, len, closed);
  pthread_mutex_lock(&fx->e.lock);
  assert_int_equal(fx->e.n, 0); /* nothing whole ever reached the engine */
  pthread_mutex_unlock(&fx->e.lock);
  close(fd);
}

static void a_request_whole_in_time_is_forwarded_and_its_connection_kept_open(void **state) {
  fixture *fx = *state;
  int fd = dial(fx->port);
  static const char head[] =
      "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
      "5\r\n\r\n";
  send_all(fd, head);
  for (int i = 0; i < 5; i++) { /* the body over a second: well inside the deadline */
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    send_all(fd, "x");
  }
  /* the answer may take as long as it takes (a stream): nothing comes, nothing is closed */
  struct pollfd p = {fd, POLLIN, 0};
  assert_int_equal(poll(&p, 1, (2 * TIMEOUT_S + 2) * 1000), 0);
  pthread_mutex_lock(&fx->e.lock);
  assert_int_equal(fx->e.n, 1);
  assert_int_equal(fx->e.received[0], strlen(head) + 5);
  assert_false(fx->e.closed[0]);
  pthread_mutex_unlock(&fx->e.lock);
  close(fd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          a_body_trickled_past_the_deadline_gets_a_json_408_and_the_close, setup, teardown),
      cmocka_unit_test_setup_teardown(
          a_later_request_head_trickled_past_the_deadline_gets_a_json_408, setup, teardown),
      cmocka_unit_test_setup_teardown(a_first_head_trickled_past_the_deadline_gets_a_json_408,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          a_request_whole_in_time_is_forwarded_and_its_connection_kept_open, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
