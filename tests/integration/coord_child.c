/* Implementation of coord_child.h: fork/exec with pipes, poll-based line reads. */
#define _GNU_SOURCE
#include "coord_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int coord_child_start(coord_child *c, const char *program, const char *const *argv) {
  memset(c, 0, sizeof *c);
  c->pid = -1;
  c->in = c->out = -1;
  char path[1024];
  const char *dir = getenv("KOLO_TEST_DIR");
  snprintf(path, sizeof path, "%s/%s", dir && dir[0] ? dir : ".", program);
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) return -1;
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    execv(path, (char *const *)argv);
    dprintf(STDERR_FILENO, "exec %s failed: %s\n", path, strerror(errno));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  c->pid = pid;
  c->in = to_child[1];
  c->out = from_child[0];
  return 0;
}

int coord_child_read_line(coord_child *c, char *line, size_t size, int timeout_ms) {
  long long deadline = now_ms() + timeout_ms;
  for (;;) {
    char *nl = memchr(c->buf, '\n', c->len);
    if (nl) {
      size_t n = (size_t)(nl - c->buf);
      size_t copy = n < size - 1 ? n : size - 1;
      memcpy(line, c->buf, copy);
      line[copy] = '\0';
      memmove(c->buf, nl + 1, c->len - n - 1);
      c->len -= n + 1;
      return 0;
    }
    long long left = deadline - now_ms();
    if (left <= 0 || c->len == sizeof c->buf) return -1;
    struct pollfd p = {.fd = c->out, .events = POLLIN};
    if (poll(&p, 1, (int)left) <= 0) return -1;
    ssize_t got = read(c->out, c->buf + c->len, sizeof c->buf - c->len);
    if (got <= 0) return -1;
    c->len += (size_t)got;
  }
}

int coord_child_expect(coord_child *c, const char *prefix, char *line, size_t size,
                       int timeout_ms) {
  long long deadline = now_ms() + timeout_ms;
  for (;;) {
    long long left = deadline - now_ms();
    if (left <= 0) return -1;
    if (coord_child_read_line(c, line, size, (int)left) != 0) return -1;
    if (strncmp(line, prefix, strlen(prefix)) == 0) return 0;
  }
}

int coord_child_send(coord_child *c, const char *line) {
  size_t n = strlen(line);
  if (write(c->in, line, n) != (ssize_t)n) return -1;
  return write(c->in, "\n", 1) == 1 ? 0 : -1;
}

void coord_child_signal(coord_child *c, int sig) {
  if (c->pid > 0) kill(c->pid, sig);
}

void coord_child_stop(coord_child *c) {
  if (c->pid > 0) {
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = -1;
  }
  if (c->in >= 0) close(c->in);
  if (c->out >= 0) close(c->out);
  c->in = c->out = -1;
}
