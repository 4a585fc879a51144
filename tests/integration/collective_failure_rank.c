/* One rank for test_collective_failure, driven over stdin/stdout so the test can
 * place it in a ring with an explicit kolo_ring_spec. It binds a listener, prints
 * "addr <host:port>", reads "spec <epoch> <rank> <size> <timeout_ms> <secret|-> <peers...>",
 * creates the communicator, prints "created <STATUS> <t_ns>" and then acts by mode:
 *   intrude  exit after create (used with a wrong secret or a stale epoch)
 *   ring     one checked all-reduce, prints "allreduce ok|bad", then a barrier
 *   loop     prints "ready", all-reduces 16 MiB until one fails: "error <STATUS> <rank> <t_ns>"
 *   abort    see run_abort below: abort from a thread, then a new communicator for epoch+1
 * Times are CLOCK_MONOTONIC nanoseconds, comparable between processes on one host. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kolo/kolo.h"

#define MAX_RANKS 16

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vprintf(fmt, args);
  va_end(args);
  fflush(stdout);
}

typedef struct spec_line {
  char text[4096];
  char *peers[MAX_RANKS];
  kolo_ring_spec spec;
} spec_line;

/* Reads and parses one "spec ..." line from stdin; 0 on success. */
static int read_spec(spec_line *s) {
  if (fgets(s->text, sizeof s->text, stdin) == NULL) return -1;
  s->text[strcspn(s->text, "\n")] = '\0';
  char *save = NULL;
  char *word = strtok_r(s->text, " ", &save);
  if (word == NULL || strcmp(word, "spec") != 0) return -1;
  char *fields[5];
  for (int i = 0; i < 5; i++) {
    fields[i] = strtok_r(NULL, " ", &save);
    if (fields[i] == NULL) return -1;
  }
  memset(&s->spec, 0, sizeof s->spec);
  s->spec.epoch = strtoull(fields[0], NULL, 10);
  s->spec.rank = atoi(fields[1]);
  s->spec.size = atoi(fields[2]);
  s->spec.timeout_ms = atoi(fields[3]);
  s->spec.secret = strcmp(fields[4], "-") == 0 ? NULL : fields[4];
  s->spec.local_rank = s->spec.rank;
  s->spec.local_size = s->spec.size;
  if (s->spec.size < 1 || s->spec.size > MAX_RANKS) return -1;
  for (int r = 0; r < s->spec.size; r++) {
    s->peers[r] = strtok_r(NULL, " ", &save);
    if (s->peers[r] == NULL) return -1;
  }
  s->spec.peers = (const char *const *)s->peers;
  return 0;
}

/* Listener, address line, spec, create: the start of every mode. */
static kolo_status join(spec_line *s, kolo_comm **comm) {
  kolo_listener *listener = NULL;
  kolo_status status = kolo_listener_create("127.0.0.1:0", &listener);
  if (status != KOLO_OK) {
    say("created %s %lld\n", kolo_status_name(status), now_ns());
    return status;
  }
  char address[128];
  kolo_listener_address(listener, address, sizeof address);
  say("addr %s\n", address);
  if (read_spec(s) != 0) {
    fprintf(stderr, "collective_failure_rank: bad spec line\n");
    kolo_listener_destroy(listener);
    exit(2);
  }
  status = kolo_comm_create(&s->spec, listener, comm);
  say("created %s %lld\n", kolo_status_name(status), now_ns());
  return status;
}

/* Sum of (rank + 1) over the ring, checked; returns 0 when right. */
static int checked_allreduce(kolo_comm *comm) {
  int n = kolo_comm_size(comm);
  double values[1001];
  for (int i = 0; i < 1001; i++) values[i] = kolo_comm_rank(comm) + 1 + i;
  kolo_status status = kolo_allreduce(comm, values, values, 1001, KOLO_FLOAT64, KOLO_SUM);
  if (status != KOLO_OK) {
    say("allreduce %s\n", kolo_status_name(status));
    return -1;
  }
  for (int i = 0; i < 1001; i++) {
    if (values[i] != (double)n * (n + 1) / 2 + (double)n * i) {
      say("allreduce bad\n");
      return -1;
    }
  }
  say("allreduce ok\n");
  return 0;
}

static int run_loop(kolo_comm *comm) {
  size_t count = 4u << 20; /* 16 MiB of float32: the pipelined path */
  float *buffer = calloc(count, sizeof *buffer);
  if (buffer == NULL) return 1;
  say("ready\n");
  for (long iteration = 0;; iteration++) {
    kolo_status status = kolo_allreduce(comm, buffer, buffer, count, KOLO_FLOAT32, KOLO_SUM);
    if (status != KOLO_OK) {
      long long at = now_ns();
      int failed_rank = -2;
      kolo_status reported = kolo_comm_error(comm, &failed_rank);
      char message[256];
      kolo_comm_error_message(comm, message, sizeof message);
      say("error %s %d %lld %s %ld %s\n", kolo_status_name(status), failed_rank, at,
          kolo_status_name(reported), iteration, message);
      /* later operations fail at once with the same error */
      long long before = now_ns();
      kolo_status later = kolo_barrier(comm);
      say("later %s %lld\n", kolo_status_name(later), now_ns() - before);
      free(buffer);
      return 0;
    }
  }
}

typedef struct aborter {
  kolo_comm *comm;
  long long at;
} aborter;

static void *abort_later(void *arg) {
  aborter *a = arg;
  usleep(300000);
  a->at = now_ns();
  kolo_comm_abort(a->comm);
  return NULL;
}

/* Rank 0 starts an all-reduce nobody else joins and aborts it from a second thread.
 * The other ranks issue nothing: they watch kolo_comm_error until the abort reaches
 * them ("noticed"), and then a barrier must fail at once ("waited"). Then every rank
 * builds a communicator for epoch+1 (new listener, new spec). */
static int run_abort(spec_line *first, kolo_comm *comm) {
  if (checked_allreduce(comm) != 0) return 1;
  if (kolo_comm_rank(comm) == 0) {
    float value = 1;
    kolo_request *request = NULL;
    kolo_status status =
        kolo_allreduce_async(comm, &value, &value, 1, KOLO_FLOAT32, KOLO_SUM, &request);
    if (status != KOLO_OK) {
      say("pending %s\n", kolo_status_name(status));
      return 1;
    }
    aborter a = {.comm = comm};
    pthread_t thread;
    pthread_create(&thread, NULL, abort_later, &a);
    status = kolo_wait(request);
    long long returned = now_ns();
    pthread_join(thread, NULL);
    say("waited %s %lld\n", kolo_status_name(status), returned - a.at);
    kolo_status later = kolo_barrier(comm);
    say("later %s\n", kolo_status_name(later));
  } else {
    long long before = now_ns();
    int failed_rank = -1;
    kolo_status noticed = KOLO_OK;
    while (now_ns() - before < 5000000000LL) {
      noticed = kolo_comm_error(comm, &failed_rank);
      if (noticed != KOLO_OK) break;
      usleep(2000);
    }
    say("noticed %s %d %lld\n", kolo_status_name(noticed), failed_rank, now_ns() - before);
    before = now_ns();
    kolo_status status = kolo_barrier(comm);
    say("waited %s %lld\n", kolo_status_name(status), now_ns() - before);
  }
  kolo_comm_destroy(comm);
  (void)first;
  spec_line second;
  kolo_comm *next = NULL;
  if (join(&second, &next) != KOLO_OK) return 1;
  say("epoch %llu\n", (unsigned long long)kolo_comm_epoch(next));
  int rc = checked_allreduce(next);
  kolo_barrier(next);
  kolo_comm_destroy(next);
  return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: collective_failure_rank intrude|ring|loop|abort\n");
    return 2;
  }
  const char *mode = argv[1];
  spec_line s;
  kolo_comm *comm = NULL;
  kolo_status status = join(&s, &comm);
  if (strcmp(mode, "intrude") == 0) {
    if (comm != NULL) kolo_comm_destroy(comm);
    return 0;
  }
  if (status != KOLO_OK) return 1;
  int rc = 0;
  if (strcmp(mode, "ring") == 0) {
    rc = checked_allreduce(comm) == 0 ? 0 : 1;
    kolo_barrier(comm);
  } else if (strcmp(mode, "loop") == 0) {
    rc = run_loop(comm);
  } else if (strcmp(mode, "abort") == 0) {
    rc = run_abort(&s, comm);
    comm = NULL;
  } else {
    rc = 2;
  }
  if (comm != NULL) kolo_comm_destroy(comm);
  return rc;
}
