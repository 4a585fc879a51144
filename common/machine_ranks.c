/* Implementation of machine_ranks.h: a directory of locked files, one per
 * registration ("<pid>-<random>"). A registration is made as a hidden temporary
 * (".tmp-XXXXXX", skipped by counts), locked, then renamed into place, so a
 * counter never takes a live registration's file for a dead one's. A count
 * tries each file's lock: held means live (counted by the pid in its name, so a
 * process with two communicators counts once), free means its process ended
 * (the file is removed). */
#define _GNU_SOURCE
#include "common/machine_ranks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct kolo_machine_ranks {
  char *dir;
  char *path; /* this registration's file */
  int fd;     /* holds the lock */
};

const char *kolo_machine_ranks_dir(char *buffer, size_t size) {
  const char *dir = getenv("KOLO_RANKS_DIR");
  if (dir != NULL && *dir != '\0')
    snprintf(buffer, size, "%s", dir);
  else
    snprintf(buffer, size, "/tmp/kolo-ranks-%u", (unsigned)getuid());
  return buffer;
}

kolo_status kolo_machine_ranks_create(const char *dir, kolo_machine_ranks **out) {
  kolo_status status = KOLO_ERR_NO_MEMORY;
  kolo_machine_ranks *r = calloc(1, sizeof *r);
  char *temp = NULL;
  if (out == NULL || dir == NULL) {
    free(r);
    return KOLO_ERR_INVALID_ARG;
  }
  *out = NULL;
  if (r == NULL) goto out;
  r->fd = -1;
  r->dir = strdup(dir);
  size_t cap = strlen(dir) + 64;
  temp = malloc(cap);
  r->path = malloc(cap);
  if (r->dir == NULL || temp == NULL || r->path == NULL) goto out;
  status = KOLO_ERR_SYSTEM;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) goto out;
  struct stat st; /* in a shared /tmp: ours, a real directory, or none */
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) goto out;
  snprintf(temp, cap, "%s/.tmp-XXXXXX", dir);
  r->fd = mkostemp(temp, O_CLOEXEC);
  if (r->fd < 0) goto out;
  snprintf(r->path, cap, "%s/%ld-%s", dir, (long)getpid(), temp + strlen(dir) + 6);
  if (flock(r->fd, LOCK_EX | LOCK_NB) != 0 || rename(temp, r->path) != 0) {
    unlink(temp);
    goto out;
  }
  *out = r;
  r = NULL;
  status = KOLO_OK;
out:
  free(temp);
  kolo_machine_ranks_destroy(r);
  return status;
}

/* Adds pid to the n distinct pids in seen (at most max); returns the new n. */
static int add_pid(long *seen, int n, int max, long pid) {
  for (int i = 0; i < n; i++)
    if (seen[i] == pid) return n;
  if (n < max) seen[n++] = pid;
  return n;
}

int kolo_machine_ranks_count(kolo_machine_ranks *ranks) {
  if (ranks == NULL) return -1;
  DIR *d = opendir(ranks->dir);
  long *seen = malloc(KOLO_MACHINE_RANKS_MAX * sizeof *seen);
  int n = -1;
  if (d == NULL || seen == NULL) goto out;
  n = add_pid(seen, 0, KOLO_MACHINE_RANKS_MAX, (long)getpid());
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end = NULL;
    long pid = strtol(e->d_name, &end, 10);
    if (e->d_name[0] == '.' || end == e->d_name || *end != '-' || pid <= 0) continue;
    int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      unlinkat(dirfd(d), e->d_name, 0); /* its process ended: nobody holds it */
    } else if (errno == EWOULDBLOCK) {
      n = add_pid(seen, n, KOLO_MACHINE_RANKS_MAX, pid);
    }
    close(fd);
  }
out:
  if (d != NULL) closedir(d);
  free(seen);
  return n;
}

void kolo_machine_ranks_destroy(kolo_machine_ranks *ranks) {
  if (ranks == NULL) return;
  if (ranks->fd >= 0) {
    unlink(ranks->path);
    close(ranks->fd);
  }
  free(ranks->dir);
  free(ranks->path);
  free(ranks);
}
