/* A rank program for test_kolorun: prints one line describing the environment and
 * file descriptors kolorun gave it, and on rank 0 proves KOLO_RENDEZVOUS_FD is the
 * listening socket behind KOLO_RENDEZVOUS by connecting to it and accepting. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *env(const char *name) {
  const char *value = getenv(name);
  return value ? value : "-";
}

static int is_listening(int fd) {
  int accepting = 0;
  socklen_t length = sizeof accepting;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) != 0) return 0;
  return accepting;
}

/* Connects to host:port and accepts the connection on listen_fd. */
static const char *check_accept(int listen_fd, const char *address) {
  char host[64];
  const char *colon = strrchr(address, ':');
  if (colon == NULL || (size_t)(colon - address) >= sizeof host) return "bad-address";
  memcpy(host, address, (size_t)(colon - address));
  host[colon - address] = '\0';
  struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
  if (inet_pton(AF_INET, host, &peer.sin_addr) != 1) return "bad-host";
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&peer, sizeof peer) != 0) return "connect-failed";
  int accepted = accept(listen_fd, NULL, NULL);
  close(fd);
  if (accepted < 0) return "accept-failed";
  close(accepted);
  return "ok";
}

int main(void) {
  int rendezvous_fd = getenv("KOLO_RENDEZVOUS_FD") ? atoi(getenv("KOLO_RENDEZVOUS_FD")) : -1;
  int listeners = 0, stray = 0;
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL) return 3;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    int fd = atoi(entry->d_name);
    if (fd == dirfd(dir) || fd <= 2) continue;
    if (is_listening(fd)) {
      listeners++;
    } else {
      struct stat st;
      /* a pipe left open by kolorun (a missing CLOEXEC) would be a stray FIFO */
      if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) stray++;
    }
  }
  closedir(dir);
  const char *accept_result = "-";
  if (rendezvous_fd >= 0) accept_result = check_accept(rendezvous_fd, env("KOLO_RENDEZVOUS"));
  struct stat in_stat;
  int stdin_null = fstat(0, &in_stat) == 0 && S_ISCHR(in_stat.st_mode);
  printf(
      "probe rank=%s size=%s lrank=%s lsize=%s epoch=%s rdvfd=%s listeners=%d accept=%s "
      "stray=%d stdin_null=%d host=%s secret=%s rdv=%s\n",
      env("KOLO_RANK"), env("KOLO_SIZE"), env("KOLO_LOCAL_RANK"), env("KOLO_LOCAL_SIZE"),
      env("KOLO_EPOCH"), rendezvous_fd >= 0 ? "set" : "-", listeners, accept_result, stray,
      stdin_null, env("KOLO_HOST"), env("KOLO_SECRET"), env("KOLO_RENDEZVOUS"));
  return 0;
}
