/* Implementation of process.h: fork/exec with a death signal and its own
 * process group, the unix socket the process connects to, line framing, the
 * STOP -> SIGTERM -> SIGKILL escalation, and the shared memory a killed process
 * could not remove itself. */
#define _GNU_SOURCE
#include "worker/agent/process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

#define LOG "agent"
#define MAX_LINE KOLO_AGENT_MAX_LINE

struct kolo_agent_proc {
  pid_t pid;
  int reaped;
  int listen_fd;
  int conn_fd;
  int hello;
  int ever_hello; /* it said HELLO at least once */
  int version;    /* the agent protocol version of the connection's HELLO (0: none yet) */
  int hellos;     /* HELLOs accepted: a new one is a new connection (the fence's hold) */
  int exec_fd;    /* read end of a close-on-exec pipe: the child's words if exec failed */
  char start_error[256];
  char socket_path[108];
  char children_path[300]; /* <work_dir>/children: pids this worker started (sweep_orphans) */
  char *buffer;
  size_t filled;
  int stopping;
  int64_t term_at_ms, kill_at_ms;
};

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The child could not become the program: say why on stderr (the job's log) and on
 * the close-on-exec pipe (the agent's report), then exit 127. */
static void start_failed(int exec_fd, const char *what, const char *name) {
  char text[256];
  int n = snprintf(text, sizeof text, "its program could not be started: %s %s: %s", what, name,
                   strerror(errno));
  fprintf(stderr, "kolo-worker: %s\n", text);
  if (n > 0) {
    ssize_t ignored = write(exec_fd, text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
    (void)ignored;
  }
  _exit(127);
}

/* The child side of fork: never returns. */
static void exec_child(const kolo_agent_spawn *spawn, pid_t agent_pid, const char *socket_path,
                       int exec_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != agent_pid) _exit(126); /* the agent died before the prctl */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  int out_fd = spawn->stdout_fd >= 0 ? spawn->stdout_fd : null_fd;
  int err_fd = spawn->stderr_fd >= 0 ? spawn->stderr_fd : null_fd;
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO); /* dup2 clears close-on-exec */
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  if (null_fd > STDERR_FILENO) close(null_fd);
  const char *cwd = spawn->cwd && spawn->cwd[0] ? spawn->cwd : spawn->work_dir;
  if (chdir(cwd) != 0) start_failed(exec_fd, "cannot enter the folder", cwd);
  for (const char *const *e = spawn->env; e && *e; e++) putenv((char *)*e);
  setenv("KOLO_AGENT_SOCKET", socket_path, 1);
  if (spawn->listen_fd > STDERR_FILENO &&
      fcntl(spawn->listen_fd, F_SETFD, 0) == 0) { /* inherited */
    char fd_text[16];
    snprintf(fd_text, sizeof fd_text, "%d", spawn->listen_fd);
    setenv("KOLO_LISTEN_FD", fd_text, 1);
  }
  execvp(spawn->argv[0], (char *const *)spawn->argv);
  start_failed(exec_fd, "cannot execute", spawn->argv[0]);
}

/* The pids this worker's agents started, one per line in <work_dir>/children, so
 * that an agent started after one that was SIGKILLed (whose child then died by
 * its death signal, maybe while its ring formed) can remove the shared memory
 * that child left: nobody reaped it here. Best effort: a write that fails only
 * loses that cleanup. */
static void note_child(const char *path, pid_t pid) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  char line[24];
  int n = snprintf(line, sizeof line, "%d\n", (int)pid);
  ssize_t ignored = write(fd, line, (size_t)n);
  (void)ignored;
  close(fd);
}

static void remove_shm_of(pid_t pid);

#define MAX_CHILDREN 1024 /* a longer list is a damaged file: read no further */

static void sweep_file(const char *path) {
  char next[310];
  FILE *in = fopen(path, "re");
  if (in == NULL) return;
  snprintf(next, sizeof next, "%s.next", path);
  FILE *out = fopen(next, "we");
  int pid = 0, count = 0;
  while (count < MAX_CHILDREN && fscanf(in, "%d", &pid) == 1) {
    count++;
    if (pid <= 1) continue;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
      remove_shm_of((pid_t)pid); /* gone: nothing of a live process is named after it */
    } else if (out != NULL) {
      fprintf(out, "%d\n", pid); /* alive (or not ours to signal): look again later */
    }
  }
  fclose(in);
  if (out != NULL && fclose(out) == 0) rename(next, path);
}

void kolo_agent_proc_sweep_orphans(const char *work_dir) {
  char path[300];
  snprintf(path, sizeof path, "%s/children", work_dir);
  sweep_file(path);
}

kolo_status kolo_agent_proc_start(const kolo_agent_spawn *spawn, kolo_agent_proc **out) {
  if (spawn == NULL || spawn->argv == NULL || spawn->argv[0] == NULL || out == NULL)
    return KOLO_ERR_INVALID_ARG;
  kolo_agent_proc *proc = calloc(1, sizeof *proc);
  if (proc == NULL) return KOLO_ERR_NO_MEMORY;
  proc->conn_fd = -1;
  proc->listen_fd = -1;
  proc->pid = -1;
  proc->exec_fd = -1;
  proc->buffer = malloc(MAX_LINE);
  kolo_status status = KOLO_ERR_NO_MEMORY;
  if (proc->buffer == NULL) goto fail;
  status = KOLO_ERR_ADDRESS;
  if ((size_t)snprintf(proc->socket_path, sizeof proc->socket_path, "%s/agent.sock",
                       spawn->work_dir) >= sizeof proc->socket_path) {
    KOLO_LOGE(LOG, "work dir %s is too long for a unix socket path", spawn->work_dir);
    goto fail;
  }
  unlink(proc->socket_path);
  proc->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_un address;
  memset(&address, 0, sizeof address);
  address.sun_family = AF_UNIX;
  strcpy(address.sun_path, proc->socket_path);
  status = KOLO_ERR_SYSTEM;
  if (proc->listen_fd < 0 ||
      bind(proc->listen_fd, (struct sockaddr *)&address, sizeof address) != 0 ||
      listen(proc->listen_fd, 4) != 0) {
    KOLO_LOGE(LOG, "cannot listen on %s: %s", proc->socket_path, strerror(errno));
    goto fail;
  }
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) goto fail;
  pid_t agent_pid = getpid();
  proc->pid = fork();
  if (proc->pid == 0) exec_child(spawn, agent_pid, proc->socket_path, exec_pipe[1]);
  close(exec_pipe[1]);
  proc->exec_fd = exec_pipe[0];
  if (proc->pid < 0) goto fail;
  setpgid(proc->pid, proc->pid); /* also from here: no race with an early kill */
  snprintf(proc->children_path, sizeof proc->children_path, "%s/children", spawn->work_dir);
  note_child(proc->children_path, proc->pid);
  KOLO_LOGI(LOG, "started %s as pid %d", spawn->argv[0], (int)proc->pid);
  *out = proc;
  return KOLO_OK;
fail:
  kolo_agent_proc_destroy(proc);
  return status;
}

int kolo_agent_proc_poll_fds(const kolo_agent_proc *proc, int *fds) {
  int n = 0;
  if (proc == NULL) return 0;
  if (proc->conn_fd >= 0) fds[n++] = proc->conn_fd;
  if (proc->listen_fd >= 0) fds[n++] = proc->listen_fd;
  return n;
}

static void drop_connection(kolo_agent_proc *proc) {
  close(proc->conn_fd);
  proc->conn_fd = -1;
  proc->hello = 0;
  proc->version = 0;
}

/* A HELLO: the version decides whether the process may speak; 0 = refused. */
static int accept_hello(kolo_agent_proc *proc, const kolo_agent_msg *msg) {
  if (kolo_agent_version_supported(msg->hello.version)) {
    proc->hello = proc->ever_hello = 1;
    proc->version = msg->hello.version;
    proc->hellos++;
    return 1;
  }
  char reason[128];
  snprintf(reason, sizeof reason, "agent protocol version %d is not spoken by this kolo-worker",
           msg->hello.version);
  KOLO_LOGE(
      LOG, "process %lld speaks agent protocol version %d; this kolo-worker speaks %d..%d: refused",
      (long long)msg->hello.pid, msg->hello.version, KOLO_AGENT_PROTOCOL_MIN_VERSION,
      KOLO_AGENT_PROTOCOL_VERSION);
  kolo_agent_msg refusal = {
      .verb = KOLO_AGENT_REFUSED,
      .refused = {KOLO_AGENT_PROTOCOL_MIN_VERSION, KOLO_AGENT_PROTOCOL_VERSION},
      .text = reason};
  proc->hello = 1; /* just for this one line */
  kolo_agent_proc_send_msg(proc, &refusal);
  drop_connection(proc);
  return 0;
}

/* Parses and hands on one line; 0 when the connection was dropped. */
static int dispatch_line(kolo_agent_proc *proc, const char *line, size_t length,
                         kolo_agent_msg_fn fn, void *user) {
  kolo_agent_msg msg;
  char error[256];
  if (kolo_agent_msg_parse(line, length, KOLO_AGENT_TO_AGENT, &msg, error, sizeof error) !=
      KOLO_OK) {
    KOLO_LOGW(LOG, "ignored a malformed line from the process: %s", error);
    return 1;
  }
  int keep = msg.verb != KOLO_AGENT_HELLO || accept_hello(proc, &msg);
  if (keep) fn(&msg, user);
  kolo_agent_msg_clear(&msg);
  return keep;
}

void kolo_agent_proc_service(kolo_agent_proc *proc, kolo_agent_msg_fn fn, void *user) {
  if (proc == NULL) return;
  if (proc->listen_fd >= 0) {
    int fd = accept4(proc->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      if (proc->conn_fd >= 0) close(proc->conn_fd); /* a newer connection replaces it */
      proc->conn_fd = fd;
      proc->filled = 0;
      proc->hello = 0;
      proc->version = 0;
    }
  }
  while (proc->conn_fd >= 0) {
    ssize_t n = recv(proc->conn_fd, proc->buffer + proc->filled, MAX_LINE - 1 - proc->filled, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    if (n <= 0) {
      drop_connection(proc);
      break;
    }
    proc->filled += (size_t)n;
    char *start = proc->buffer, *newline;
    while ((newline = memchr(start, '\n', proc->filled - (size_t)(start - proc->buffer))) != NULL) {
      if (!dispatch_line(proc, start, (size_t)(newline - start), fn, user)) return;
      start = newline + 1;
    }
    proc->filled -= (size_t)(start - proc->buffer);
    memmove(proc->buffer, start, proc->filled);
    if (proc->filled == MAX_LINE - 1) proc->filled = 0; /* an endless line: dropped */
  }
}

int kolo_agent_proc_connected(const kolo_agent_proc *proc) {
  return proc != NULL && proc->conn_fd >= 0 && proc->hello;
}

kolo_status kolo_agent_proc_send(kolo_agent_proc *proc, const char *line) {
  if (!kolo_agent_proc_connected(proc)) return KOLO_ERR_STATE;
  size_t length = strlen(line), done = 0;
  int64_t deadline = now_ms() + 2000;
  while (done < length) {
    ssize_t n = send(proc->conn_fd, line + done, length - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR) && now_ms() < deadline) {
      usleep(1000);
    } else {
      return KOLO_ERR_PEER_LOST;
    }
  }
  return KOLO_OK;
}

kolo_status kolo_agent_proc_send_msg(kolo_agent_proc *proc, const kolo_agent_msg *msg) {
  char *line = NULL, error[256];
  kolo_status status = kolo_agent_msg_format(msg, &line, error, sizeof error);
  if (status != KOLO_OK) {
    KOLO_LOGE(LOG, "cannot send %s to the process: %s", kolo_agent_verb_name(msg->verb), error);
    return status;
  }
  status = kolo_agent_proc_send(proc, line);
  free(line);
  return status;
}

/* libkolo names its shared-memory rings /kolo-<pid>-<nonce> and unlinks each once
 * its peer mapped it; a process killed before that (SIGKILL while its ring forms)
 * cannot, so its parent removes what the dead pid left. Called only once the pid is
 * reaped; the names carry the pid, so nothing of a live process is touched. */
static void remove_shm_of(pid_t pid) {
  char prefix[32];
  int n = snprintf(prefix, sizeof prefix, "kolo-%d-", (int)pid);
  DIR *dir = opendir("/dev/shm");
  if (dir == NULL) return;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    if (strncmp(entry->d_name, prefix, (size_t)n) != 0) continue;
    char name[300];
    snprintf(name, sizeof name, "/%s", entry->d_name);
    if (shm_unlink(name) == 0) KOLO_LOGI(LOG, "removed %s left by process %d", name, (int)pid);
  }
  closedir(dir);
}

int kolo_agent_proc_reap(kolo_agent_proc *proc, int *code) {
  if (proc == NULL || proc->pid <= 0) return 0;
  if (proc->reaped) return 0;
  int wstatus = 0;
  pid_t r = waitpid(proc->pid, &wstatus, WNOHANG);
  if (r != proc->pid) return 0;
  proc->reaped = 1;
  *code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  /* the child wrote before it exited: the pipe holds its words, or EOF after an exec */
  ssize_t n = read(proc->exec_fd, proc->start_error, sizeof proc->start_error - 1);
  proc->start_error[n > 0 ? n : 0] = '\0';
  /* whatever the process left in its group goes with it */
  kill(-proc->pid, SIGKILL);
  remove_shm_of(proc->pid);
  if (proc->children_path[0]) sweep_file(proc->children_path); /* drops this pid */
  return 1;
}

const char *kolo_agent_proc_start_error(const kolo_agent_proc *proc) {
  return proc ? proc->start_error : "";
}

int kolo_agent_proc_said_hello(const kolo_agent_proc *proc) {
  return proc != NULL && proc->ever_hello;
}

int kolo_agent_proc_hold_connection(const kolo_agent_proc *proc) {
  if (!kolo_agent_proc_connected(proc) || proc->version < KOLO_AGENT_HOLD_VERSION) return 0;
  return proc->hellos;
}

pid_t kolo_agent_proc_pid(const kolo_agent_proc *proc) {
  return proc ? proc->pid : -1;
}

void kolo_agent_proc_pause(kolo_agent_proc *proc, int pause) {
  if (proc == NULL || proc->pid <= 0 || proc->reaped) return;
  kill(-proc->pid, pause ? SIGSTOP : SIGCONT);
}

void kolo_agent_proc_stop(kolo_agent_proc *proc, const char *reason, int grace_ms) {
  if (proc == NULL || proc->stopping) return;
  proc->stopping = 1;
  char text[KOLO_AGENT_MAX_REASON + 1];
  snprintf(text, sizeof text, "%s", reason && reason[0] ? reason : "stopped");
  for (char *c = text; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' '; /* one line, whatever the reason says */
  kolo_agent_msg stop = {.verb = KOLO_AGENT_STOP, .text = text};
  if (kolo_agent_proc_send_msg(proc, &stop) != KOLO_OK)
    grace_ms = 0; /* nobody to tell: signal now */
  proc->term_at_ms = now_ms() + grace_ms;
  proc->kill_at_ms = proc->term_at_ms + (grace_ms > 0 ? grace_ms : 1000);
  kolo_agent_proc_tick(proc);
}

void kolo_agent_proc_tick(kolo_agent_proc *proc) {
  if (proc == NULL || !proc->stopping || proc->reaped) return;
  int64_t now = now_ms();
  if (proc->kill_at_ms && now >= proc->kill_at_ms) {
    kill(-proc->pid, SIGKILL);
    proc->kill_at_ms = 0;
  } else if (proc->term_at_ms && now >= proc->term_at_ms) {
    kill(-proc->pid, SIGTERM);
    kill(-proc->pid, SIGCONT); /* a paused process (the fence) must run to take it */
    proc->term_at_ms = 0;
  }
}

void kolo_agent_proc_destroy(kolo_agent_proc *proc) {
  if (proc == NULL) return;
  if (proc->pid > 0 && !proc->reaped) {
    kill(-proc->pid, SIGKILL);
    kill(proc->pid, SIGKILL);
    waitpid(proc->pid, NULL, 0);
    remove_shm_of(proc->pid);
  }
  if (proc->conn_fd >= 0) close(proc->conn_fd);
  if (proc->exec_fd >= 0) close(proc->exec_fd);
  if (proc->listen_fd >= 0) {
    close(proc->listen_fd);
    unlink(proc->socket_path);
  }
  free(proc->buffer);
  free(proc);
}
