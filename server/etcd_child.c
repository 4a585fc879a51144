/* Implementation of etcd_child.h: a private directory for etcd's sockets, fork/exec of etcd
 * with an unblocked signal mask (the server blocks SIGTERM for sigwait) in that directory, a
 * readiness poll through the etcd client over the socket, and a stop by PID. */
#define _GNU_SOURCE
#include "server/etcd_child.h"

#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "coordination/etcd.h"
#include "coordination/keys.h"

#define LOG "etcd-child"

struct kolo_server_etcd_child {
  pid_t pid;
  char url[KOLO_SERVER_ETCD_CHILD_URL_BYTES];
};

/* Makes dir (mode 0700) or takes it as it is if it exists, is a directory (not a link) and is
 * ours; then makes sure nobody else may enter it. */
static kolo_status private_dir(const char *dir) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return kolo_status_from_errno(errno);
  struct stat st;
  if (lstat(dir, &st) != 0) return kolo_status_from_errno(errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    KOLO_LOGE(LOG, "%s is not a directory of this user: refusing to use it", dir);
    return KOLO_ERR_STATE;
  }
  if ((st.st_mode & 077) != 0 && chmod(dir, 0700) != 0) return kolo_status_from_errno(errno);
  return KOLO_OK;
}

/* <data-dir>: made 0700 if new; else a directory of this user or root that no one else may
 * write (another user could otherwise swap the private directories inside for links). */
static kolo_status data_dir_ok(const char *dir) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return kolo_status_from_errno(errno);
  struct stat st;
  if (stat(dir, &st) != 0) return kolo_status_from_errno(errno);
  if (!S_ISDIR(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0) ||
      (st.st_mode & 022) != 0) {
    KOLO_LOGE(LOG, "--data-dir %s must be a directory of this user that others cannot write", dir);
    return KOLO_ERR_STATE;
  }
  return KOLO_OK;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static int answers(const char *url) {
  const char *eps[1] = {url};
  kolo_etcd_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.endpoints = eps;
  cfg.endpoint_count = 1;
  cfg.request_timeout_ms = 1000;
  cfg.connect_timeout_ms = 300;
  kolo_etcd *client = NULL;
  if (kolo_etcd_create(&cfg, &client) != KOLO_OK) return 0;
  kolo_etcd_kv kv;
  memset(&kv, 0, sizeof kv);
  kolo_status rc = kolo_etcd_get(client, kolo_etcd_str(KOLO_KEY_HEALTH), &kv, NULL);
  kolo_etcd_kv_clear(&kv);
  kolo_etcd_destroy(client);
  return rc == KOLO_OK || rc == KOLO_ERR_NOT_FOUND;
}

/* etcd names a unix socket after its URL's "host:port", in its working directory. */
#define CLIENT_SOCKET "client.sock:0"
#define PEER_SOCKET "peer.sock:0"

/* The private directories: <data_dir> and <data_dir>/etcd (the data), <data_dir>/run (the
 * sockets), all 0700; run's absolute path into run_path. */
static kolo_status make_dirs(const char *data_dir, char *dir, size_t dir_len, char *run_path) {
  char run[600];
  kolo_status rc = data_dir_ok(data_dir);
  snprintf(run, sizeof run, "%s/run", data_dir);
  if (rc == KOLO_OK) rc = private_dir(run);
  if (rc != KOLO_OK) return rc;
  if (realpath(data_dir, dir) == NULL || strlen(dir) + 6 > dir_len)
    return kolo_status_from_errno(errno);
  strcat(dir, "/etcd");
  if ((rc = private_dir(dir)) != KOLO_OK) return rc;
  if (realpath(run, run_path) == NULL) return kolo_status_from_errno(errno);
  char sock[PATH_MAX + 32];
  snprintf(sock, sizeof sock, "%s/" CLIENT_SOCKET, run_path);
  if (strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
    KOLO_LOGE(LOG, "--data-dir %s is too long a path for etcd's socket (%s)", data_dir, sock);
    return KOLO_ERR_INVALID_ARG;
  }
  unlink(sock); /* a socket left by a killed etcd: etcd cannot listen over it */
  snprintf(sock, sizeof sock, "%s/" PEER_SOCKET, run_path);
  unlink(sock);
  return KOLO_OK;
}

/* In the child: etcd on unix sockets only (in run, entered first), with compaction and a
 * quota like the Helm chart's etcd. Never returns. */
static void exec_etcd(const char *dir, const char *run, const char *log_path) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  if (chdir(run) != 0) _exit(127);
  const char *bin = getenv("KOLO_ETCD_BIN") ? getenv("KOLO_ETCD_BIN") : "etcd";
  const char *client = "unix://" CLIENT_SOCKET, *peer = "unix://" PEER_SOCKET;
  execlp(bin, bin, "--name", "kolo", "--data-dir", dir, "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer,
         "--initial-advertise-peer-urls", peer, "--initial-cluster", "kolo=unix://" PEER_SOCKET,
         "--force-new-cluster", "--auto-compaction-mode", "periodic", "--auto-compaction-retention",
         "10m", "--quota-backend-bytes", "2147483648", "--log-level", "warn", (char *)NULL);
  _exit(127);
}

kolo_status kolo_server_etcd_child_start(const char *data_dir, int timeout_ms,
                                         kolo_server_etcd_child **out) {
  char dir[PATH_MAX + 8], run[PATH_MAX], log_path[600],
      client_url[KOLO_SERVER_ETCD_CHILD_URL_BYTES];
  kolo_status made = make_dirs(data_dir, dir, sizeof dir, run);
  if (made != KOLO_OK) return made;
  snprintf(log_path, sizeof log_path, "%s/etcd.log", data_dir);
  snprintf(client_url, sizeof client_url, "unix://%s/" CLIENT_SOCKET, run);
  kolo_server_etcd_child *child = calloc(1, sizeof *child);
  if (child == NULL) return KOLO_ERR_NO_MEMORY;
  snprintf(child->url, sizeof child->url, "%s", client_url);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    free(child);
    return KOLO_ERR_SYSTEM;
  }
  if (pid == 0) {
    if (getppid() != parent) _exit(127);
    exec_etcd(dir, run, log_path);
  }
  child->pid = pid;
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      KOLO_LOGE(LOG, "etcd exited during start (see %s)", log_path);
      free(child);
      return KOLO_ERR_UNAVAILABLE;
    }
    if (answers(client_url)) break;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > timeout_ms) {
      KOLO_LOGE(LOG, "etcd did not answer within %d ms (see %s)", timeout_ms, log_path);
      child->url[0] = '\0';
      kolo_server_etcd_child_stop(child);
      return KOLO_ERR_TIMEOUT;
    }
    sleep_ms(100);
  }
  KOLO_LOGI(LOG, "private etcd pid %d at %s, data in %s", (int)pid, client_url, dir);
  *out = child;
  return KOLO_OK;
}

const char *kolo_server_etcd_child_url(const kolo_server_etcd_child *child) {
  return child->url;
}

void kolo_server_etcd_child_stop(kolo_server_etcd_child *child) {
  if (child == NULL) return;
  kill(child->pid, SIGTERM);
  int status;
  for (int i = 0; i < 500; i++) {
    if (waitpid(child->pid, &status, WNOHANG) == child->pid) goto done;
    sleep_ms(10);
  }
  kill(child->pid, SIGKILL);
  waitpid(child->pid, &status, 0);
done:
  KOLO_LOGI(LOG, "private etcd pid %d stopped", (int)child->pid);
  free(child);
}
