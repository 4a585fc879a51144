/* Implementation of supervise.h. One thread, one poll loop: a signalfd (SIGCHLD,
 * SIGINT, SIGTERM blocked and read as events) plus two pipes per rank. The ranks
 * share one new process group led by rank 0, so a stop signal also reaches what
 * they started themselves; PR_SET_PDEATHSIG kills a rank if kolorun dies. */
#define _GNU_SOURCE /* pipe2, F_SETPIPE_SZ */
#include "launcher/supervise.h"

#include "common/mode_env.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher/stream.h"

typedef struct rank_proc {
  pid_t pid;   /* 0 before it started */
  int running; /* started and not reaped */
  int ended;   /* reaped, status not yet reported */
  int status;  /* wait status once ended */
  int fds[2];  /* read ends of its stdout and stderr pipes; -1 once closed */
  kolo_launcher_stream *streams[2];
} rank_proc;

typedef struct supervisor {
  const kolo_launcher_options *options;
  rank_proc *ranks;
  int running;  /* ranks not reaped yet */
  int open_fds; /* pipe read ends still open */
  pid_t group;  /* process group of the ranks (rank 0's pid) */
  int signal_fd;
  int exit_code;
  int failed;   /* a failure (or the timeout) has been reported */
  int stopping; /* SIGTERM sent by kolorun; SIGKILL follows at kill_at */
  double kill_at;
  double timeout_at;  /* 0 = no --timeout */
  double drain_until; /* 0 = not draining yet */
} supervisor;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- setup ---- */

/* 32 lowercase hex characters from 16 bytes of /dev/urandom. */
static int make_secret(char out[33]) {
  unsigned char bytes[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = read(fd, bytes + got, sizeof bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return -1;
    }
    got += (size_t)n;
  }
  close(fd);
  for (size_t i = 0; i < sizeof bytes; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
  return 0;
}

/* Binds a CLOEXEC listening socket on host:0 and writes the address ranks connect to. */
static int open_rendezvous(const char *host, int backlog, char *address, size_t length) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *info = NULL;
  int rc = getaddrinfo(host, "0", &hints, &info);
  if (rc != 0) {
    fprintf(stderr, "kolorun: cannot resolve --host '%s': %s\n", host, gai_strerror(rc));
    return -1;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) goto fail;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, info->ai_addr, info->ai_addrlen) != 0) goto fail;
  if (listen(fd, backlog) != 0) goto fail;
  struct sockaddr_in bound;
  socklen_t bound_length = sizeof bound;
  if (getsockname(fd, (struct sockaddr *)&bound, &bound_length) != 0) goto fail;
  char ip[INET_ADDRSTRLEN];
  if (bound.sin_addr.s_addr == htonl(INADDR_ANY)) {
    snprintf(ip, sizeof ip, "127.0.0.1");
  } else {
    inet_ntop(AF_INET, &bound.sin_addr, ip, sizeof ip);
  }
  snprintf(address, length, "%s:%u", ip, (unsigned)ntohs(bound.sin_port));
  freeaddrinfo(info);
  return fd;
fail:
  fprintf(stderr, "kolorun: cannot listen on %s: %s\n", host, strerror(errno));
  if (fd >= 0) close(fd);
  freeaddrinfo(info);
  return -1;
}

/* In the child between fork and exec: only async-signal-safe-ish work on a
 * single-threaded image, then exec. Never returns. */
static void exec_rank(const kolo_launcher_options *options, int rank, pid_t group, int out_pipe,
                      int err_pipe, int rendezvous_fd, const char *rendezvous, const char *secret,
                      pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127); /* kolorun already died */
  setpgid(0, group);
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    if (null_fd != STDIN_FILENO) close(null_fd);
  }
  dup2(out_pipe, STDOUT_FILENO);
  dup2(err_pipe, STDERR_FILENO);
  char number[32];
  snprintf(number, sizeof number, "%d", rank);
  setenv("KOLO_RANK", number, 1);
  setenv("KOLO_LOCAL_RANK", number, 1);
  snprintf(number, sizeof number, "%d", options->nprocs);
  setenv("KOLO_SIZE", number, 1);
  setenv("KOLO_LOCAL_SIZE", number, 1);
  setenv("KOLO_RENDEZVOUS", rendezvous, 1);
  setenv("KOLO_SECRET", secret, 1);
  setenv("KOLO_EPOCH", "1", 1);
  if (options->host_given) setenv("KOLO_HOST", options->host, 1);
  kolo_mode_env mode_env; /* --mode: every KOLO_MODE* variable; else the caller's pass through */
  if (options->mode_given && kolo_mode_env_format(&options->mode, &mode_env) == KOLO_OK)
    for (int i = 0; i < KOLO_MODE_ENV_COUNT; i++) putenv(mode_env.entries[i]);
  if (rank == 0) {
    int flags = fcntl(rendezvous_fd, F_GETFD);
    if (flags >= 0) fcntl(rendezvous_fd, F_SETFD, flags & ~FD_CLOEXEC);
    snprintf(number, sizeof number, "%d", rendezvous_fd);
    setenv("KOLO_RENDEZVOUS_FD", number, 1);
  } else {
    unsetenv("KOLO_RENDEZVOUS_FD");
  }
  signal(SIGPIPE, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(options->program[0], options->program);
  int err = errno;
  dprintf(STDERR_FILENO, "kolorun: cannot run '%s': %s\n", options->program[0], strerror(err));
  _exit(err == ENOENT ? 127 : 126);
}

/* ---- running ---- */

/* Sends sig to every rank still running (and, through the group, their children). */
static void signal_all(supervisor *sv, int sig) {
  if (sv->ranks[0].running && sv->group > 0) {
    kill(-sv->group, sig);
  }
  for (int r = 0; r < sv->options->nprocs; r++) {
    if (sv->ranks[r].running && (!sv->ranks[0].running || getpgid(sv->ranks[r].pid) != sv->group)) {
      kill(sv->ranks[r].pid, sig);
    }
  }
}

static void stop_all(supervisor *sv) {
  if (sv->stopping) return;
  sv->stopping = 1;
  sv->kill_at = now_s() + KOLO_LAUNCHER_GRACE_S;
  signal_all(sv, SIGTERM);
}

static void close_pipe(supervisor *sv, rank_proc *proc, int which) {
  if (proc->fds[which] < 0) return;
  kolo_launcher_stream_finish(proc->streams[which]);
  close(proc->fds[which]);
  proc->fds[which] = -1;
  sv->open_fds--;
}

/* Reads what the pipe holds now; closes it at EOF. */
static void pump(supervisor *sv, rank_proc *proc, int which) {
  char buffer[65536];
  for (;;) {
    if (proc->fds[which] < 0) return;
    ssize_t n = read(proc->fds[which], buffer, sizeof buffer);
    if (n > 0) {
      kolo_launcher_stream_feed(proc->streams[which], buffer, (size_t)n);
      if ((size_t)n < sizeof buffer) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close_pipe(sv, proc, which);
    return;
  }
}

static void report_exit(supervisor *sv, int rank, int status) {
  rank_proc *proc = &sv->ranks[rank];
  proc->running = 0;
  sv->running--;
  /* Its output is already in the pipes: relay it before the verdict line. */
  pump(sv, proc, 0);
  pump(sv, proc, 1);
  int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok || sv->failed) return;
  sv->failed = 1;
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "kolorun: rank %d killed by signal %d\n", rank, WTERMSIG(status));
    sv->exit_code = 128 + WTERMSIG(status);
  } else {
    fprintf(stderr, "kolorun: rank %d exited with status %d\n", rank, WEXITSTATUS(status));
    sv->exit_code = WEXITSTATUS(status);
  }
  fflush(stderr);
  stop_all(sv);
}

/* Marks every rank that has ended (not yet reported). */
static void collect_ended(supervisor *sv) {
  int count = sv->options->nprocs;
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    for (int r = 0; r < count; r++) {
      if (sv->ranks[r].running && sv->ranks[r].pid == pid) {
        sv->ranks[r].ended = 1;
        sv->ranks[r].status = status;
        break;
      }
    }
  }
}

/* Reports the ended ranks: those killed by a signal first (the likely cause;
 * the others usually failed because they lost it as a peer), then the rest. */
static int report_ended(supervisor *sv, int signaled_only) {
  int reported = 0;
  for (int r = 0; r < sv->options->nprocs; r++) {
    rank_proc *proc = &sv->ranks[r];
    if (!proc->running || !proc->ended) continue;
    if (signaled_only && !WIFSIGNALED(proc->status)) continue;
    report_exit(sv, r, proc->status);
    reported = 1;
  }
  return reported;
}

static void reap(supervisor *sv) {
  collect_ended(sv);
  report_ended(sv, 1);
  int own_failure = 0;
  for (int r = 0; r < sv->options->nprocs; r++) {
    rank_proc *proc = &sv->ranks[r];
    if (proc->running && proc->ended &&
        !(WIFEXITED(proc->status) && WEXITSTATUS(proc->status) == 0)) {
      own_failure = 1;
    }
  }
  /* A rank that failed on its own is often the echo of a killed peer still
   * being torn down by the kernel (its sockets close before its parent is
   * told): give the others up to 200 ms before naming anyone. */
  for (int wait = 0; own_failure && !sv->failed && wait < 20; wait++) {
    struct timespec pause = {0, 10 * 1000000L};
    nanosleep(&pause, NULL);
    collect_ended(sv);
    if (report_ended(sv, 1)) break;
  }
  report_ended(sv, 0);
}

static void handle_signals(supervisor *sv) {
  struct signalfd_siginfo info;
  for (;;) {
    ssize_t n = read(sv->signal_fd, &info, sizeof info);
    if (n < 0 && errno == EINTR) continue;
    if (n != (ssize_t)sizeof info) return;
    if (info.ssi_signo == SIGCHLD) {
      reap(sv);
    } else {
      signal_all(sv, (int)info.ssi_signo);
    }
  }
}

static void check_deadlines(supervisor *sv, double now) {
  if (sv->timeout_at > 0 && now >= sv->timeout_at && sv->running > 0 && !sv->failed) {
    sv->failed = 1;
    sv->exit_code = KOLO_LAUNCHER_EXIT_TIMEOUT;
    fprintf(stderr, "kolorun: timeout after %g s, stopping %d running rank(s)\n",
            sv->options->timeout_s, sv->running);
    fflush(stderr);
    stop_all(sv);
  }
  if (sv->stopping && sv->kill_at > 0 && now >= sv->kill_at && sv->running > 0) {
    signal_all(sv, SIGKILL);
    sv->kill_at = 0;
  }
  if (sv->running == 0 && sv->drain_until == 0) {
    /* A rank's own children may keep its pipes open; do not wait on them long. */
    sv->drain_until = now + 1.0;
  }
  if (sv->drain_until > 0 && now >= sv->drain_until) {
    for (int r = 0; r < sv->options->nprocs; r++) {
      close_pipe(sv, &sv->ranks[r], 0);
      close_pipe(sv, &sv->ranks[r], 1);
    }
  }
}

static int next_wait_ms(const supervisor *sv, double now) {
  double next = -1;
  double candidates[3] = {sv->running > 0 && !sv->failed ? sv->timeout_at : 0,
                          sv->stopping && sv->running > 0 ? sv->kill_at : 0, sv->drain_until};
  for (int i = 0; i < 3; i++) {
    if (candidates[i] > 0 && (next < 0 || candidates[i] < next)) next = candidates[i];
  }
  if (next < 0) return -1;
  double ms = (next - now) * 1000.0 + 1.0;
  return ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
}

static void loop(supervisor *sv) {
  int n = sv->options->nprocs;
  struct pollfd *fds = calloc((size_t)(2 * n + 1), sizeof *fds);
  int *owner = calloc((size_t)(2 * n + 1), sizeof *owner);
  if (fds == NULL || owner == NULL) {
    fprintf(stderr, "kolorun: out of memory\n");
    sv->exit_code = 1;
    stop_all(sv);
  }
  while (sv->running > 0 || sv->open_fds > 0) {
    double now = now_s();
    check_deadlines(sv, now);
    if (sv->running == 0 && sv->open_fds == 0) break;
    if (fds == NULL || owner == NULL) {
      /* Degraded: no relaying, just wait for the ranks. */
      usleep(100000);
      reap(sv);
      continue;
    }
    int count = 0;
    fds[count++] = (struct pollfd){.fd = sv->signal_fd, .events = POLLIN};
    for (int r = 0; r < n; r++) {
      for (int w = 0; w < 2; w++) {
        if (sv->ranks[r].fds[w] < 0) continue;
        owner[count] = 2 * r + w;
        fds[count++] = (struct pollfd){.fd = sv->ranks[r].fds[w], .events = POLLIN};
      }
    }
    int ready = poll(fds, (nfds_t)count, next_wait_ms(sv, now));
    if (ready < 0 && errno != EINTR) {
      fprintf(stderr, "kolorun: poll: %s\n", strerror(errno));
      break;
    }
    if (ready <= 0) continue;
    for (int i = 1; i < count; i++) {
      if (fds[i].revents == 0) continue;
      pump(sv, &sv->ranks[owner[i] / 2], owner[i] % 2);
    }
    if (fds[0].revents != 0) handle_signals(sv);
  }
  free(fds);
  free(owner);
}

static int make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return 0;
}

int kolo_launcher_run(const kolo_launcher_options *options) {
  supervisor sv = {.options = options, .signal_fd = -1, .exit_code = 0};
  int n = options->nprocs;
  int rendezvous_fd = -1;
  char rendezvous[64];
  char secret[33];
  sigset_t handled, previous;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);

  sv.ranks = calloc((size_t)n, sizeof *sv.ranks);
  if (sv.ranks == NULL) {
    fprintf(stderr, "kolorun: out of memory\n");
    return 1;
  }
  for (int r = 0; r < n; r++) sv.ranks[r].fds[0] = sv.ranks[r].fds[1] = -1;
  if (make_secret(secret) != 0) {
    fprintf(stderr, "kolorun: cannot read /dev/urandom: %s\n", strerror(errno));
    sv.exit_code = 1;
    goto out;
  }
  rendezvous_fd = open_rendezvous(options->host, n + 16, rendezvous, sizeof rendezvous);
  if (rendezvous_fd < 0) {
    sv.exit_code = 1;
    goto out;
  }
  /* Block before forking so no SIGCHLD or forwarded signal is lost. */
  sigprocmask(SIG_BLOCK, &handled, &previous);
  signal(SIGPIPE, SIG_IGN);
  sv.signal_fd = signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sv.signal_fd < 0) {
    fprintf(stderr, "kolorun: signalfd: %s\n", strerror(errno));
    sv.exit_code = 1;
    goto out;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t self = getpid();
  for (int r = 0; r < n; r++) {
    rank_proc *proc = &sv.ranks[r];
    int out_pipe[2], err_pipe[2];
    if (make_pipe(out_pipe) != 0) goto start_failed;
    if (make_pipe(err_pipe) != 0) {
      close(out_pipe[0]);
      close(out_pipe[1]);
      goto start_failed;
    }
    if (kolo_launcher_stream_create(r, STDOUT_FILENO, &proc->streams[0]) != KOLO_OK ||
        kolo_launcher_stream_create(r, STDERR_FILENO, &proc->streams[1]) != KOLO_OK) {
      errno = ENOMEM;
      close(out_pipe[0]);
      close(out_pipe[1]);
      close(err_pipe[0]);
      close(err_pipe[1]);
      goto start_failed;
    }
    pid_t pid = fork();
    if (pid < 0) {
      close(out_pipe[0]);
      close(out_pipe[1]);
      close(err_pipe[0]);
      close(err_pipe[1]);
      goto start_failed;
    }
    if (pid == 0) {
      exec_rank(options, r, r == 0 ? 0 : sv.group, out_pipe[1], err_pipe[1], rendezvous_fd,
                rendezvous, secret, self);
    }
    if (r == 0) sv.group = pid;
    setpgid(pid, sv.group); /* also here: whichever of parent and child runs first */
    close(out_pipe[1]);
    close(err_pipe[1]);
    proc->pid = pid;
    proc->running = 1;
    proc->fds[0] = out_pipe[0];
    proc->fds[1] = err_pipe[0];
    sv.running++;
    sv.open_fds += 2;
  }
  /* Rank 0 holds its own copy; once it is gone, others get a refused connection. */
  close(rendezvous_fd);
  rendezvous_fd = -1;
  if (options->timeout_s > 0) sv.timeout_at = now_s() + options->timeout_s;
  loop(&sv);
  goto out;

start_failed:
  fprintf(stderr, "kolorun: cannot start all ranks: %s\n", strerror(errno));
  sv.exit_code = 1;
  sv.failed = 1;
  stop_all(&sv);
  loop(&sv);
out:
  if (rendezvous_fd >= 0) close(rendezvous_fd);
  if (sv.signal_fd >= 0) close(sv.signal_fd);
  for (int r = 0; r < n; r++) {
    if (sv.ranks[r].fds[0] >= 0) close(sv.ranks[r].fds[0]);
    if (sv.ranks[r].fds[1] >= 0) close(sv.ranks[r].fds[1]);
    kolo_launcher_stream_destroy(sv.ranks[r].streams[0]);
    kolo_launcher_stream_destroy(sv.ranks[r].streams[1]);
  }
  free(sv.ranks);
  fflush(stdout);
  return sv.exit_code;
}
