/* Implementation of etcd_child.h: fork/exec of etcd with an unblocked signal mask (the
 * server blocks SIGTERM for sigwait), a readiness poll through the etcd client, and a
 * stop by PID. */
#define _GNU_SOURCE
#include "server/etcd_child.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "coordination/etcd.h"
#include "coordination/keys.h"

#define LOG "etcd-child"

struct kolo_server_etcd_child {
  pid_t pid;
  char url[64];
};

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
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

kolo_status kolo_server_etcd_child_start(const char *data_dir, int timeout_ms,
                                         kolo_server_etcd_child **out) {
  char dir[512], log_path[600], client_url[64], peer_url[64], cluster[96];
  snprintf(dir, sizeof dir, "%s/etcd", data_dir);
  if (mkdir(data_dir, 0700) != 0 && errno != EEXIST) return kolo_status_from_errno(errno);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return kolo_status_from_errno(errno);
  snprintf(log_path, sizeof log_path, "%s/etcd.log", data_dir);
  int cport = free_port(), pport = free_port();
  if (cport <= 0 || pport <= 0) return KOLO_ERR_ADDRESS;
  snprintf(client_url, sizeof client_url, "http://127.0.0.1:%d", cport);
  snprintf(peer_url, sizeof peer_url, "http://127.0.0.1:%d", pport);
  snprintf(cluster, sizeof cluster, "kolo=%s", peer_url);
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
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    const char *bin = getenv("KOLO_ETCD_BIN") ? getenv("KOLO_ETCD_BIN") : "etcd";
    execlp(bin, bin, "--name", "kolo", "--data-dir", dir, "--listen-client-urls", client_url,
           "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url,
           "--initial-advertise-peer-urls", peer_url, "--initial-cluster", cluster,
           "--force-new-cluster", "--log-level", "warn", (char *)NULL);
    _exit(127);
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
