/* kolo_train_checkpoint: atomic, checksummed checkpoint files of the training
 * state and the newest-valid-first restore that skips damaged ones. */
#include "worker/train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/log.h"

#define LOG_TAG "train"
#define MAGIC "KOLOCKPT"
#define HEADER_BYTES 32

/* CRC32 (zlib) over any length. */
static uint32_t crc32_of(const void *data, size_t length) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const Bytef *p = data;
  while (length > 0) {
    uInt chunk = length > (1u << 30) ? (1u << 30) : (uInt)length;
    crc = crc32(crc, p, chunk);
    p += chunk;
    length -= chunk;
  }
  return (uint32_t)crc;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Writes all of buffer to fd. */
static kolo_status write_all(int fd, const void *buffer, size_t length) {
  const char *p = buffer;
  while (length > 0) {
    ssize_t n = write(fd, p, length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return kolo_status_from_errno(errno) == KOLO_ERR_SYSTEM ? KOLO_ERR_IO
                                                              : kolo_status_from_errno(errno);
    }
    p += n;
    length -= (size_t)n;
  }
  return KOLO_OK;
}

/* Is name "ckpt-<12 digits>.kolo"? */
static int is_checkpoint_name(const char *name) {
  if (strncmp(name, "ckpt-", 5) != 0 || strlen(name) != 5 + 12 + 5) return 0;
  for (int i = 5; i < 17; i++) {
    if (name[i] < '0' || name[i] > '9') return 0;
  }
  return strcmp(name + 17, ".kolo") == 0;
}

static int compare_names_desc(const void *a, const void *b) {
  return -strcmp(*(char *const *)a, *(char *const *)b);
}

/* The checkpoint file names in dir, newest (largest step) first. */
static kolo_status list_checkpoints(const char *dir, char ***names, size_t *count) {
  *names = NULL;
  *count = 0;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? KOLO_ERR_NOT_FOUND : KOLO_ERR_IO;
  kolo_status rc = KOLO_OK;
  size_t cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!is_checkpoint_name(e->d_name)) continue;
    if (*count == cap) {
      cap = cap ? cap * 2 : 16;
      char **grown = realloc(*names, cap * sizeof *grown);
      if (!grown) {
        rc = KOLO_ERR_NO_MEMORY;
        break;
      }
      *names = grown;
    }
    (*names)[*count] = strdup(e->d_name);
    if (!(*names)[*count]) {
      rc = KOLO_ERR_NO_MEMORY;
      break;
    }
    (*count)++;
  }
  closedir(d);
  if (*count) qsort(*names, *count, sizeof **names, compare_names_desc);
  return rc;
}

static void free_names(char **names, size_t count) {
  for (size_t i = 0; i < count; i++) free(names[i]);
  free(names);
}

kolo_status kolo_train_checkpoint_write(const char *dir, kolo_train_state *state, char *path,
                                        size_t path_length) {
  if (!dir || !state) return KOLO_ERR_INVALID_ARG;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    KOLO_LOGE(LOG_TAG, "checkpoint dir %s: %s", dir, strerror(errno));
    return KOLO_ERR_IO;
  }
  const void *blob = kolo_train_state_data(state);
  size_t size = kolo_train_state_size(state);
  uint8_t header[HEADER_BYTES];
  memcpy(header, MAGIC, 8);
  put32(header + 8, KOLO_TRAIN_CHECKPOINT_VERSION);
  put32(header + 12, HEADER_BYTES);
  put64(header + 16, size);
  put32(header + 24, crc32_of(blob, size));
  put32(header + 28, crc32_of(header, 28));

  char final_path[4096], tmp_path[4200];
  unsigned long long step = kolo_train_state_header_of(state)->step;
  snprintf(final_path, sizeof final_path, "%s/ckpt-%012llu.kolo", dir, step);
  snprintf(tmp_path, sizeof tmp_path, "%s.tmp.%ld", final_path, (long)getpid());
  kolo_status rc = KOLO_OK;
  int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    KOLO_LOGE(LOG_TAG, "checkpoint %s: %s", tmp_path, strerror(errno));
    return KOLO_ERR_IO;
  }
  rc = write_all(fd, header, sizeof header);
  if (rc == KOLO_OK) rc = write_all(fd, blob, size);
  if (rc == KOLO_OK && fsync(fd) != 0) rc = KOLO_ERR_IO;
  if (close(fd) != 0 && rc == KOLO_OK) rc = KOLO_ERR_IO;
  if (rc == KOLO_OK && rename(tmp_path, final_path) != 0) rc = KOLO_ERR_IO;
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG_TAG, "checkpoint %s: write failed: %s", final_path, strerror(errno));
    unlink(tmp_path);
    return rc;
  }
  /* make the rename durable */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  if (path) snprintf(path, path_length, "%s", final_path);

  char **names = NULL;
  size_t count = 0;
  if (list_checkpoints(dir, &names, &count) == KOLO_OK) {
    for (size_t i = KOLO_TRAIN_CHECKPOINT_KEEP; i < count; i++) {
      char old[4400];
      snprintf(old, sizeof old, "%s/%s", dir, names[i]);
      unlink(old);
    }
  }
  free_names(names, count);
  return KOLO_OK;
}

kolo_status kolo_train_checkpoint_read(const char *path, kolo_train_state *state) {
  if (!path || !state) return KOLO_ERR_INVALID_ARG;
  FILE *f = fopen(path, "rb");
  if (!f) return errno == ENOENT ? KOLO_ERR_NOT_FOUND : KOLO_ERR_IO;
  uint8_t header[HEADER_BYTES];
  void *blob = NULL;
  kolo_status rc = KOLO_OK;
  if (fread(header, 1, sizeof header, f) != sizeof header) {
    KOLO_LOGW(LOG_TAG, "checkpoint %s: truncated header", path);
    rc = KOLO_ERR_CORRUPT;
    goto out;
  }
  if (memcmp(header, MAGIC, 8) != 0 || get32(header + 28) != crc32_of(header, 28)) {
    KOLO_LOGW(LOG_TAG, "checkpoint %s: bad magic or header checksum", path);
    rc = KOLO_ERR_CORRUPT;
    goto out;
  }
  if (get32(header + 8) != KOLO_TRAIN_CHECKPOINT_VERSION || get32(header + 12) != HEADER_BYTES) {
    KOLO_LOGW(LOG_TAG, "checkpoint %s: unsupported version %u", path, get32(header + 8));
    rc = KOLO_ERR_CORRUPT;
    goto out;
  }
  uint64_t size = get64(header + 16);
  if (size != kolo_train_state_size(state)) {
    KOLO_LOGW(LOG_TAG, "checkpoint %s: %llu bytes of state, this run needs %zu (another model?)",
              path, (unsigned long long)size, kolo_train_state_size(state));
    rc = KOLO_ERR_INVALID_ARG;
    goto out;
  }
  blob = malloc(size ? size : 1);
  if (!blob) {
    rc = KOLO_ERR_NO_MEMORY;
    goto out;
  }
  if (fread(blob, 1, size, f) != size) {
    KOLO_LOGW(LOG_TAG, "checkpoint %s: truncated (payload shorter than %llu bytes)", path,
              (unsigned long long)size);
    rc = KOLO_ERR_CORRUPT;
    goto out;
  }
  if (fgetc(f) != EOF) {
    KOLO_LOGW(LOG_TAG, "checkpoint %s: trailing bytes after the payload", path);
    rc = KOLO_ERR_CORRUPT;
    goto out;
  }
  if (crc32_of(blob, size) != get32(header + 24)) {
    KOLO_LOGW(LOG_TAG, "checkpoint %s: payload checksum mismatch", path);
    rc = KOLO_ERR_CORRUPT;
    goto out;
  }
  rc = kolo_train_state_load(state, blob, size);
out:
  free(blob);
  fclose(f);
  return rc;
}

/* Temp files "ckpt-<step>.kolo.tmp.<pid>" left by a writer killed mid-write (51-63 MiB each)
 * are removed when no process <pid> runs here and the file has not changed for
 * STALE_TEMP_S (so a live writer on another host sharing the directory keeps its own). */
#define STALE_TEMP_S 60
static void remove_stale_temps(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  time_t now = time(NULL);
  while (d && (e = readdir(d)) != NULL) {
    const char *tmp = strstr(e->d_name, ".kolo.tmp.");
    char *end = NULL;
    long pid = tmp && strncmp(e->d_name, "ckpt-", 5) == 0 ? strtol(tmp + 10, &end, 10) : 0;
    if (pid <= 0 || *end != '\0' || (kill((pid_t)pid, 0) == 0 || errno != ESRCH)) continue;
    char full[4400];
    struct stat st;
    snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
    if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime >= STALE_TEMP_S &&
        unlink(full) == 0)
      KOLO_LOGI(LOG_TAG, "removed %s, left by a writer that is gone", full);
  }
  if (d) closedir(d);
}

kolo_status kolo_train_checkpoint_restore_latest(const char *dir, kolo_train_state *state,
                                                 char *path, size_t path_length) {
  if (!dir || !state) return KOLO_ERR_INVALID_ARG;
  remove_stale_temps(dir);
  char **names = NULL;
  size_t count = 0;
  kolo_status rc = list_checkpoints(dir, &names, &count);
  if (rc != KOLO_OK) {
    free_names(names, count);
    return rc;
  }
  rc = KOLO_ERR_NOT_FOUND;
  for (size_t i = 0; i < count; i++) {
    char full[4400];
    snprintf(full, sizeof full, "%s/%s", dir, names[i]);
    kolo_status r = kolo_train_checkpoint_read(full, state);
    if (r == KOLO_OK) {
      if (path) snprintf(path, path_length, "%s", full);
      rc = KOLO_OK;
      break;
    }
    KOLO_LOGW(LOG_TAG, "skipping checkpoint %s: %s", full, kolo_strerror(r));
  }
  free_names(names, count);
  return rc;
}
