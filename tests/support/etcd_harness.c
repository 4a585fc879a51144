/* Implementation of tests/support/etcd_harness.h: fork/exec of /usr/bin/etcd on
 * free loopback ports, a raw-socket GET /health poll with a deadline, and
 * cleanup by PID and nftw. */
#define _GNU_SOURCE
#include "tests/support/etcd_harness.h"
#include "tests/support/ports.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_EXTRA 16

struct kolo_etcd_harness {
  char dir[256];
  char url[64];
  int client_port;
  int peer_port;
  pid_t pid;
  char *extra[MAX_EXTRA + 1];
  int tls_port; /* 0 without TLS */
  char tls_url[64];
  char *tls_files[3]; /* cert, key, CA */
  int port_fds[3];    /* client, peer, TLS port: held (tests/support/ports.h), also while
                         etcd is stopped or restarting, so nobody else is given them */
};

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Lets go of the harness's holds on etcd's ports. */
static void release_ports(kolo_etcd_harness *h) {
  for (int i = 0; i < 3; i++) {
    if (h->port_fds[i] >= 0) close(h->port_fds[i]);
    h->port_fds[i] = -1;
  }
}

/* One GET /health; 1 when etcd reports healthy. */
static int healthy(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int ok = 0;
  char buf[2048];
  size_t got = 0;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) goto out;
  const char req[] = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) goto out;
  long long deadline = now_ms() + 2000;
  while (got < sizeof buf - 1) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    long long left = deadline - now_ms();
    if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  buf[got] = '\0';
  ok = strstr(buf, "\"health\":\"true\"") != NULL;
out:
  close(fd);
  return ok;
}

static void print_log_tail(const kolo_etcd_harness *h) {
  char path[300];
  snprintf(path, sizeof path, "%s/etcd.log", h->dir);
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, size > 3000 ? size - 3000 : 0, SEEK_SET);
  char buf[3001];
  size_t n = fread(buf, 1, 3000, f);
  buf[n] = '\0';
  fclose(f);
  fprintf(stderr, "---- tail of %s ----\n%s\n----\n", path, buf);
}

/* fork + exec etcd with output appended to <dir>/etcd.log. */
static int spawn(kolo_etcd_harness *h) {
  char data[300], log[300], name_arg[64], client[64], peer[64], cluster[96];
  snprintf(data, sizeof data, "%s/data", h->dir);
  snprintf(log, sizeof log, "%s/etcd.log", h->dir);
  char listen[160], advertise[160], cert_arg[600], key_arg[600], ca_arg[600];
  snprintf(client, sizeof client, "http://127.0.0.1:%d", h->client_port);
  snprintf(listen, sizeof listen, "%s", client);
  snprintf(advertise, sizeof advertise, "%s", client);
  if (h->tls_port) {
    snprintf(listen, sizeof listen, "%s,https://127.0.0.1:%d", client, h->tls_port);
    snprintf(advertise, sizeof advertise, "https://127.0.0.1:%d", h->tls_port);
    snprintf(cert_arg, sizeof cert_arg, "--cert-file=%s", h->tls_files[0]);
    snprintf(key_arg, sizeof key_arg, "--key-file=%s", h->tls_files[1]);
    snprintf(ca_arg, sizeof ca_arg, "--trusted-ca-file=%s", h->tls_files[2]);
  }
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", h->peer_port);
  snprintf(cluster, sizeof cluster, "kolo=%s", peer);
  snprintf(name_arg, sizeof name_arg, "kolo");
  const char *bin = getenv("KOLO_ETCD_BIN");
  if (bin == NULL || bin[0] == '\0') bin = "/usr/bin/etcd";
  const char *argv[64] = {bin,       "--name",
                          name_arg,  "--data-dir",
                          data,      "--listen-client-urls",
                          listen,    "--advertise-client-urls",
                          advertise, "--listen-peer-urls",
                          peer,      "--initial-advertise-peer-urls",
                          peer,      "--initial-cluster",
                          cluster,   "--experimental-watch-progress-notify-interval=1s",
                          NULL};
  int argc = 0;
  while (argv[argc]) argc++;
  if (h->tls_port) {
    argv[argc++] = cert_arg;
    argv[argc++] = key_arg;
    argv[argc++] = ca_arg;
    argv[argc++] = "--client-cert-auth";
  }
  for (int i = 0; h->extra[i] && argc < 62; i++) argv[argc++] = h->extra[i];
  argv[argc] = NULL;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      if (fd > 2) close(fd);
    }
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    for (int f = 3; f < 1024; f++) close(f);
    execv(bin, (char *const *)argv);
    dprintf(STDERR_FILENO, "exec %s failed: %s\n", bin, strerror(errno));
    _exit(127);
  }
  h->pid = pid;
  return 0;
}

/* Waits for health within 30 s; fails early when the process exits. */
static kolo_status wait_healthy(kolo_etcd_harness *h) {
  long long deadline = now_ms() + 30000;
  while (now_ms() < deadline) {
    int st;
    if (waitpid(h->pid, &st, WNOHANG) == h->pid) {
      h->pid = -1;
      return KOLO_ERR_UNAVAILABLE;
    }
    if (healthy(h->client_port)) return KOLO_OK;
    usleep(50 * 1000);
  }
  return KOLO_ERR_TIMEOUT;
}

static kolo_status reap(kolo_etcd_harness *h, int sig, int grace_ms) {
  if (h->pid <= 0) return KOLO_OK;
  kill(h->pid, sig);
  long long deadline = now_ms() + grace_ms;
  for (;;) {
    int st;
    pid_t r = waitpid(h->pid, &st, WNOHANG);
    if (r == h->pid || (r < 0 && errno == ECHILD)) break;
    if (now_ms() >= deadline) {
      kill(h->pid, SIGKILL);
      waitpid(h->pid, &st, 0);
      break;
    }
    usleep(10 * 1000);
  }
  h->pid = -1;
  return KOLO_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

/* Starts etcd; with tls_files (cert, key, CA) it also serves TLS clients. */
static kolo_status start(const char *const *extra_args, const char *const *tls_files,
                         kolo_etcd_harness **out) {
  *out = NULL;
  kolo_etcd_harness *h = calloc(1, sizeof *h);
  if (h == NULL) return KOLO_ERR_NO_MEMORY;
  h->pid = -1;
  h->port_fds[0] = h->port_fds[1] = h->port_fds[2] = -1;
  for (int i = 0; tls_files && i < 3; i++) {
    h->tls_files[i] = strdup(tls_files[i]);
    if (h->tls_files[i] == NULL) {
      kolo_etcd_harness_destroy(h);
      return KOLO_ERR_NO_MEMORY;
    }
  }
  for (int i = 0; extra_args && extra_args[i] && i < MAX_EXTRA; i++) {
    h->extra[i] = strdup(extra_args[i]);
    if (h->extra[i] == NULL) {
      kolo_etcd_harness_destroy(h);
      return KOLO_ERR_NO_MEMORY;
    }
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(h->dir, sizeof h->dir, "%s/kolo-etcd-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (mkdtemp(h->dir) == NULL) {
    fprintf(stderr, "etcd harness: mkdtemp failed: %s\n", strerror(errno));
    h->dir[0] = '\0';
    kolo_etcd_harness_destroy(h);
    return KOLO_ERR_SYSTEM;
  }
  kolo_status rc = KOLO_ERR_UNAVAILABLE;
  /* The ports are held (ports.h); a failed start still tries fresh ones. */
  for (int attempt = 0; attempt < 3 && rc != KOLO_OK; attempt++) {
    release_ports(h);
    h->client_port = kolo_test_hold_port(&h->port_fds[0]);
    h->peer_port = kolo_test_hold_port(&h->port_fds[1]);
    if (h->client_port <= 0 || h->peer_port <= 0 || h->client_port == h->peer_port) continue;
    snprintf(h->url, sizeof h->url, "http://127.0.0.1:%d", h->client_port);
    if (tls_files) {
      h->tls_port = kolo_test_hold_port(&h->port_fds[2]);
      if (h->tls_port <= 0 || h->tls_port == h->client_port || h->tls_port == h->peer_port)
        continue;
      snprintf(h->tls_url, sizeof h->tls_url, "https://127.0.0.1:%d", h->tls_port);
    }
    if (spawn(h) != 0) {
      rc = KOLO_ERR_SYSTEM;
      break;
    }
    rc = wait_healthy(h);
    if (rc != KOLO_OK) {
      reap(h, SIGKILL, 0);
      /* A half-initialised data dir remembers the old peer URL: start clean. */
      char data[300];
      snprintf(data, sizeof data, "%s/data", h->dir);
      nftw(data, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
  }
  if (rc != KOLO_OK) {
    fprintf(stderr, "etcd harness: etcd did not become healthy: %s\n", kolo_strerror(rc));
    print_log_tail(h);
    kolo_etcd_harness_destroy(h);
    return rc;
  }
  *out = h;
  return KOLO_OK;
}

kolo_status kolo_etcd_harness_start(const char *const *extra_args, kolo_etcd_harness **out) {
  return start(extra_args, NULL, out);
}

kolo_status kolo_etcd_harness_start_tls(const char *cert_file, const char *key_file,
                                        const char *ca_file, kolo_etcd_harness **out) {
  if (cert_file == NULL || key_file == NULL || ca_file == NULL) return KOLO_ERR_INVALID_ARG;
  const char *files[3] = {cert_file, key_file, ca_file};
  return start(NULL, files, out);
}

const char *kolo_etcd_harness_tls_url(const kolo_etcd_harness *h) {
  return h->tls_port ? h->tls_url : NULL;
}

const char *kolo_etcd_harness_url(const kolo_etcd_harness *h) {
  return h->url;
}
const char *kolo_etcd_harness_dir(const kolo_etcd_harness *h) {
  return h->dir;
}
pid_t kolo_etcd_harness_pid(const kolo_etcd_harness *h) {
  return h->pid;
}

kolo_status kolo_etcd_harness_stop(kolo_etcd_harness *h) {
  return reap(h, SIGTERM, 5000);
}

kolo_status kolo_etcd_harness_kill(kolo_etcd_harness *h) {
  return reap(h, SIGKILL, 0);
}

kolo_status kolo_etcd_harness_restart(kolo_etcd_harness *h) {
  reap(h, SIGTERM, 5000);
  if (spawn(h) != 0) return KOLO_ERR_SYSTEM;
  kolo_status rc = wait_healthy(h);
  if (rc != KOLO_OK) {
    fprintf(stderr, "etcd harness: restarted etcd did not become healthy: %s\n", kolo_strerror(rc));
    print_log_tail(h);
    reap(h, SIGKILL, 0);
  }
  return rc;
}

void kolo_etcd_harness_destroy(kolo_etcd_harness *h) {
  if (h == NULL) return;
  reap(h, SIGKILL, 0);
  release_ports(h);
  const char *keep = getenv("KOLO_ETCD_KEEP");
  if (h->dir[0] && !(keep && strcmp(keep, "1") == 0))
    nftw(h->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  for (int i = 0; i < MAX_EXTRA; i++) free(h->extra[i]);
  for (int i = 0; i < 3; i++) free(h->tls_files[i]);
  free(h);
}
