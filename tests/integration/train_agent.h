/* The test agent of kolo-train's elastic tests (test_train_elastic.c,
 * test_train_elastic_modes.c): the agent side of the protocol in
 * collective/elastic.c on a unix socket, real kolo-train processes that form
 * the rings it announces, and run_job: three processes, one SIGKILLed once
 * rank 0 reports a step, the survivors re-formed without it. Header-only
 * (static functions and the test's settings g_dataset, g_extra_args): include
 * it after cmocka.h in one test file. */
#ifndef KOLO_TESTS_TRAIN_AGENT_H
#define KOLO_TESTS_TRAIN_AGENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/agent_proto.h"
#include "tests/support/ports.h"

#define PROCS 3
/* Fashion-MNIST epochs per run */
#define FASHION_EPOCHS 3
#define TEXT_(x) #x
#define TEXT(x) TEXT_(x)
#define FASHION_EPOCHS_TEXT TEXT(FASHION_EPOCHS)

typedef struct agent {
  int active; /* started and not yet stopped */
  char dir[64];
  char socket_path[128];
  /* this run's ring secret: other tests on the machine pick ports the same way,
   * and a port taken over by a foreign ring must be refused, not joined */
  char secret[64];
  int listen_fd;
  pid_t pids[PROCS];
  int conns[PROCS];
  int ports[PROCS];
  int port_fds[PROCS]; /* each held while the test runs (tests/support/ports.h) */
  char buffer[PROCS][65536];
  size_t filled[PROCS];
  char mode[PROCS][32]; /* the mode each process acknowledged (its MODE line), "" = none */
} agent;

__attribute__((unused)) static const char *g_dataset = "synthetic";
/* more kolo-train flags for every process (NULL-terminated; NULL = none) */
__attribute__((unused)) static const char *const *g_extra_args = NULL;
/* more environment for every process ("NAME=value", NULL-terminated; NULL = none) */
__attribute__((unused)) static const char *const *g_extra_env = NULL;

__attribute__((unused)) static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((unused)) static void agent_start(agent *g) {
  memset(g, 0, sizeof *g);
  strcpy(g->dir, "/tmp/kolo-train-elastic-XXXXXX");
  assert_non_null(mkdtemp(g->dir));
  snprintf(g->socket_path, sizeof g->socket_path, "%s/agent.sock", g->dir);
  g->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strcpy(a.sun_path, g->socket_path);
  assert_int_equal(bind(g->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(g->listen_fd, 8), 0);
  for (int i = 0; i < PROCS; i++) g->conns[i] = g->port_fds[i] = -1;
  snprintf(g->secret, sizeof g->secret, "elastic-%d-%ld", (int)getpid(),
           (long)(now_seconds() * 1e6));
  g->active = 1;
}

/* Starts kolo-train number i (learning rate lr) with stdout/stderr in the
 * agent dir; accepts its connection. */
__attribute__((unused)) static void agent_spawn_lr(agent *g, int i, const char *lr) {
  char program[512], out[160];
  snprintf(program, sizeof program, "%s/kolo-train", getenv("KOLO_BIN_DIR"));
  snprintf(out, sizeof out, "%s/out.%d", g->dir, i);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("KOLO_AGENT_SOCKET", g->socket_path, 1);
    setenv("KOLO_TIMEOUT", "20", 1);
    /* kolo-train's gradients are named (negotiated) operations: ranks that
     * disagree on them wait for the engine's stall timeout (300 s by default),
     * not the ring's; fail such a hang as fast as a ring timeout */
    setenv("KOLO_STALL_TIMEOUT", "20", 1);
    unsetenv("KOLO_SIZE");
    for (size_t k = 0; g_extra_env && g_extra_env[k]; k++) putenv(strdup(g_extra_env[k]));
    int fashion = strcmp(g_dataset, "fashion") == 0;
    const char *argv[48] = {program,
                            "--dataset",
                            fashion ? "fashion-mnist" : "synthetic",
                            "--model",
                            "mlp",
                            "--hidden",
                            fashion ? "128" : "32",
                            "--epochs",
                            fashion ? FASHION_EPOCHS_TEXT : "6",
                            "--batch",
                            fashion ? "32" : "16",
                            "--lr",
                            lr,
                            "--log-every",
                            "10",
                            "--commit-every",
                            "10",
                            "--json"};
    size_t argc = 18;
    for (size_t k = 0; g_extra_args && g_extra_args[k] && argc < 47; k++)
      argv[argc++] = g_extra_args[k];
    execv(program, (char *const *)argv);
    _exit(127);
  }
  g->pids[i] = pid;
  struct pollfd p = {.fd = g->listen_fd, .events = POLLIN};
  assert_int_equal(poll(&p, 1, 20000), 1);
  g->conns[i] = accept4(g->listen_fd, NULL, NULL, SOCK_CLOEXEC);
  assert_true(g->conns[i] >= 0);
  if (g->port_fds[i] >= 0) close(g->port_fds[i]);
  g->ports[i] = kolo_test_hold_port(&g->port_fds[i]);
  assert_true(g->ports[i] > 0);
}

__attribute__((unused)) static void agent_spawn(agent *g, int i) {
  agent_spawn_lr(g, i, "0.02");
}

/* Sends RING <epoch> to each member (process indexes, in rank order), through
 * the agent protocol's codec. */
__attribute__((unused)) static void agent_announce(agent *g, uint64_t epoch, const int *members,
                                                   int size) {
  char addresses[64][32];
  const char *peers[64];
  assert_true(size <= 64);
  for (int r = 0; r < size; r++) {
    snprintf(addresses[r], sizeof addresses[r], "127.0.0.1:%d", g->ports[members[r]]);
    peers[r] = addresses[r];
  }
  for (int rank = 0; rank < size; rank++) {
    kolo_agent_msg msg = {.verb = KOLO_AGENT_RING,
                          .ring = {.epoch = epoch,
                                   .rank = rank,
                                   .size = size,
                                   .local_rank = rank,
                                   .local_size = size,
                                   .timeout_ms = 20000,
                                   .secret = g->secret,
                                   .listen_address = peers[rank],
                                   .peers = peers}};
    char *line = NULL;
    assert_int_equal(kolo_agent_msg_format(&msg, &line, NULL, 0), KOLO_OK);
    assert_int_equal(write(g->conns[members[rank]], line, strlen(line)), (ssize_t)strlen(line));
    free(line);
  }
}

/* Drops whole progress reports from process i's buffer (the oldest first)
 * until a quarter of it is free; if there are none, the oldest lines. */
__attribute__((unused)) static void make_room(agent *g, int i) {
  const char *progress = "REPORT {\"event\":\"progress\"";
  size_t want = sizeof g->buffer[i] / 4, at = 0;
  while (sizeof g->buffer[i] - 1 - g->filled[i] < want && at < g->filled[i]) {
    char *line = g->buffer[i] + at, *nl = memchr(line, '\n', g->filled[i] - at);
    if (nl == NULL) break;
    size_t length = (size_t)(nl - line) + 1;
    if (strncmp(line, progress, strlen(progress)) == 0) {
      memmove(line, nl + 1, g->filled[i] - at - length);
      g->filled[i] -= length;
    } else {
      at += length;
    }
  }
  while (sizeof g->buffer[i] - 1 - g->filled[i] < want) {
    char *nl = memchr(g->buffer[i], '\n', g->filled[i]);
    size_t length = nl ? (size_t)(nl - g->buffer[i]) + 1 : g->filled[i];
    memmove(g->buffer[i], g->buffer[i] + length, g->filled[i] - length);
    g->filled[i] -= length;
  }
}

/* Reads what every process has sent into its buffer, waiting up to wait_ms for
 * something: a process whose socket nobody reads would block on its reports
 * (a unix socket holds a few hundred of them). */
__attribute__((unused)) static void agent_pump(agent *g, int wait_ms) {
  struct pollfd p[PROCS];
  int which[PROCS], n = 0;
  for (int i = 0; i < PROCS; i++) {
    if (g->conns[i] < 0) continue;
    which[n] = i;
    p[n++] = (struct pollfd){.fd = g->conns[i], .events = POLLIN};
  }
  if (n == 0 || poll(p, (nfds_t)n, wait_ms) <= 0) return;
  for (int k = 0; k < n; k++) {
    int i = which[k];
    if (!p[k].revents) continue;
    make_room(g, i);
    ssize_t got =
        read(g->conns[i], g->buffer[i] + g->filled[i], sizeof g->buffer[i] - 1 - g->filled[i]);
    if (got <= 0) {
      close(g->conns[i]);
      g->conns[i] = -1;
      continue;
    }
    g->filled[i] += (size_t)got;
  }
}

/* Reads process i's lines until one starts with prefix and, if given,
 * contains needle with a number >= min after it (a needle followed by text
 * counts as 0); fails after timeout_s. The line is copied into copy (optional). */
__attribute__((unused)) static void agent_wait_line(agent *g, int i, const char *prefix,
                                                    const char *needle, long min, double timeout_s,
                                                    char *copy, size_t copy_len) {
  double start = now_seconds();
  for (;;) {
    char *nl;
    while ((nl = memchr(g->buffer[i], '\n', g->filled[i])) != NULL) {
      *nl = '\0';
      int match = strncmp(g->buffer[i], prefix, strlen(prefix)) == 0;
      if (match && needle) {
        char *at = strstr(g->buffer[i], needle);
        match = at && atol(at + strlen(needle)) >= min;
      }
      if (match && copy) snprintf(copy, copy_len, "%s", g->buffer[i]);
      if (strncmp(g->buffer[i], "MODE ", 5) == 0)
        snprintf(g->mode[i], sizeof g->mode[i], "%s", g->buffer[i] + 5);
      size_t used = (size_t)(nl - g->buffer[i]) + 1;
      memmove(g->buffer[i], nl + 1, g->filled[i] - used);
      g->filled[i] -= used;
      if (match) return;
    }
    if (now_seconds() - start > timeout_s || g->conns[i] < 0) {
      char cmd[256];
      snprintf(cmd, sizeof cmd,
               "for f in '%s'/out.*; do echo \"== $f\"; grep -v progress $f | tail -25; done >&2",
               g->dir);
      if (system(cmd) != 0) fprintf(stderr, "cannot show %s/out.%d\n", g->dir, i);
      fail_msg("process %d: no '%s' line %s", i, prefix,
               g->conns[i] < 0 ? "before it closed its socket" : "in time");
    }
    agent_pump(g, 100);
  }
}

__attribute__((unused)) static void agent_wait(agent *g, int i, const char *prefix,
                                               const char *needle, long min, double timeout_s) {
  agent_wait_line(g, i, prefix, needle, min, timeout_s, NULL, 0);
}

/* Waits (bounded) for process i to exit; its exit status, or -1 if it had to be killed. */
__attribute__((unused)) static int agent_wait_exit(agent *g, int i, double timeout_s) {
  double start = now_seconds();
  int status = 0;
  while (now_seconds() - start < timeout_s) {
    /* keep draining every socket so no process blocks on a full buffer */
    agent_pump(g, 50);
    if (waitpid(g->pids[i], &status, WNOHANG) == g->pids[i]) {
      g->pids[i] = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  kill(g->pids[i], SIGKILL);
  waitpid(g->pids[i], NULL, 0);
  g->pids[i] = 0;
  return -1;
}

/* Kills whatever is left and removes the directory. */
__attribute__((unused)) static void agent_stop(agent *g) {
  if (!g->active) return;
  g->active = 0;
  for (int i = 0; i < PROCS; i++) {
    if (g->conns[i] >= 0) close(g->conns[i]);
    if (g->pids[i] > 0) {
      kill(g->pids[i], SIGKILL);
      waitpid(g->pids[i], NULL, 0);
    }
  }
  for (int i = 0; i < PROCS; i++)
    if (g->port_fds[i] >= 0) close(g->port_fds[i]);
  close(g->listen_fd);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g->dir);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", g->dir);
}

/* The "done" JSON line of process i's stdout: accuracy and reconfigurations. */
__attribute__((unused)) static void read_done(agent *g, int i, double *accuracy,
                                              int *reconfigurations) {
  char path[160], line[1024];
  snprintf(path, sizeof path, "%s/out.%d", g->dir, i);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  *accuracy = -1;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "\"event\":\"done\"")) continue;
    *accuracy = atof(strstr(line, "\"accuracy\":") + 11);
    *reconfigurations = atoi(strstr(line, "\"reconfigurations\":") + 19);
  }
  fclose(f);
  if (*accuracy < 0) {
    snprintf(line, sizeof line, "cat '%s'", path);
    if (system(line) != 0) fprintf(stderr, "cannot show %s\n", path);
    fail_msg("process %d printed no done line", i);
  }
}

/* The number after "name": in a JSON line (-1 when absent). */
__attribute__((unused)) static long long json_number(const char *line, const char *name) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", name);
  const char *at = strstr(line, key);
  return at ? atoll(at + strlen(key)) : -1;
}

typedef struct grown {
  double accuracy;          /* rank 0's final test accuracy */
  int exits[PROCS];         /* exit status of each process (-1 = had to be killed) */
  long long steps[PROCS];   /* steps each process finished with ("done" report) */
  char synced[PROCS][1024]; /* each process's "synced" report at the re-form */
  long long left_at;        /* the step rank 0 was at when it left its first ring */
  int reconfigurations;     /* rank 0's count ("done" line) */
  char mode[PROCS][32];     /* the mode each process acknowledged to the agent */
} grown;

/* The step at which process i first left its ring to re-form (its log line
 * "rank R: <why> at step N; re-forming the ring"), or -1. Read from its output
 * file, which keeps every line (reports to the agent may be dropped when the
 * agent is slow to read). */
__attribute__((unused)) static long long reform_step(agent *g, int i) {
  char path[160], line[1024];
  snprintf(path, sizeof path, "%s/out.%d", g->dir, i);
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  long long step = -1;
  while (step < 0 && fgets(line, sizeof line, f)) {
    char *end = strstr(line, "; re-forming the ring");
    if (end == NULL) continue;
    *end = '\0';
    char *at = strstr(line, " at step ");
    while (at && strstr(at + 1, " at step ")) at = strstr(at + 1, " at step ");
    if (at) step = atoll(at + strlen(" at step "));
  }
  fclose(f);
  return step;
}

/* One 3-process run; kill_at > 0 SIGKILLs process 1 once rank 0 reports that
 * step, and the survivors (0 and 2) re-form without it. */
__attribute__((unused)) static void run_job(agent *a, long kill_at, grown *out) {
  memset(out, 0, sizeof *out);
  agent_stop(a);
  agent_start(a);
  for (int i = 0; i < PROCS; i++) agent_spawn(a, i);
  int ring1[3] = {0, 1, 2};
  agent_announce(a, 1, ring1, 3);
  for (int i = 0; i < PROCS; i++) agent_wait(a, i, "FORMED 1", NULL, 0, 60);
  int left[2] = {0, 2}, n = kill_at > 0 ? 2 : 3;
  if (kill_at > 0) {
    agent_wait(a, 0, "REPORT {\"event\":\"progress\"", "\"step\":", kill_at, 120);
    kill(a->pids[1], SIGKILL);
    waitpid(a->pids[1], NULL, 0);
    a->pids[1] = 0;
    agent_announce(a, 2, left, 2);
    for (int k = 0; k < 2; k++) {
      agent_wait(a, left[k], "FORMED 2", NULL, 0, 60);
      agent_wait_line(a, left[k], "REPORT {\"event\":\"synced\"", "\"synced_reason\":\"reform", 0,
                      60, out->synced[left[k]], sizeof out->synced[left[k]]);
    }
  }
  for (int k = 0; k < n; k++) {
    int i = kill_at > 0 ? left[k] : k;
    char done[1024] = "";
    agent_wait_line(a, i, "REPORT {\"event\":\"done\"", NULL, 0, 240, done, sizeof done);
    out->steps[i] = json_number(done, "steps");
    out->exits[i] = agent_wait_exit(a, i, 240);
  }
  if (out->exits[0] == 0) read_done(a, 0, &out->accuracy, &out->reconfigurations);
  out->left_at = kill_at > 0 ? reform_step(a, 0) : -1;
  memcpy(out->mode, a->mode, sizeof out->mode);
  agent_stop(a);
}

#endif
