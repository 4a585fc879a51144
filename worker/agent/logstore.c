/* Implementation of logstore.h. One mutex guards the job table; a condition variable
 * (monotonic clock) wakes readers on every append, new segment and finish. Readers never
 * keep pointers into the table across an unlock: they look their job up by id each time
 * and read files with their own descriptors, so a segment deleted under a reader (the
 * job cap) stays readable through an open descriptor or is skipped. */
#define _GNU_SOURCE
#include "worker/agent/logstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "coordination/keys.h"

#define LOG "logs"
#define READ_CHUNK (4 * KOLO_AGENT_LOG_MAX_LINE)

typedef struct segment {
  uint64_t seq;
  int64_t epoch;
  uint32_t rank;
  uint64_t bytes;
} segment;

typedef struct job_logs {
  char id[129];
  segment *segs; /* by seq */
  size_t n, cap;
  uint64_t bytes;
  uint64_t next_seq;
  uint64_t deleted_below; /* segments with seq <= this were deleted by the job cap */
  int active;
  int64_t epoch; /* of the live segment */
  uint32_t rank;
  int fd;          /* the live (last) segment while active, else -1 */
  int64_t last_ms; /* wall time of the last line (or the newest file's mtime) */
  int write_failed;
} job_logs;

struct kolo_agent_logstore {
  kolo_agent_logstore_config cfg;
  char dir[2048];
  pthread_mutex_t lock;
  pthread_cond_t changed;
  job_logs **jobs;
  size_t n_jobs, cap_jobs;
  int shutdown;
};

typedef struct rank_start {
  uint32_t rank;
  uint64_t seq, offset; /* lines of rank before (seq, offset) are not wanted */
  uint64_t need;
} rank_start;

struct kolo_agent_logreader {
  kolo_agent_logstore *store;
  char job[129];
  uint32_t *ranks;
  size_t n_ranks;
  rank_start *starts;
  size_t n_starts;
  int report_gaps;
  kolo_agent_log_cursor cur;
  int fd;
  uint64_t fd_seq;
  char *buf;
  uint64_t buf_off;
  size_t buf_len;
};

static int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void segment_path(const kolo_agent_logstore *s, const char *job, const segment *seg,
                         char *out, size_t len) {
  snprintf(out, len, "%s/%s/%08" PRIu64 "-e%" PRId64 "-r%" PRIu32 ".log", s->dir, job, seg->seq,
           seg->epoch, seg->rank);
}

/* "<seq>-e<epoch>-r<rank>.log" -> seg (bytes left 0); 0 if name is something else. */
static int parse_segment_name(const char *name, segment *seg) {
  int used = -1;
  memset(seg, 0, sizeof *seg);
  if (sscanf(name, "%" SCNu64 "-e%" SCNd64 "-r%" SCNu32 ".log%n", &seg->seq, &seg->epoch,
             &seg->rank, &used) != 3)
    return 0;
  return used > 0 && name[used] == '\0' && seg->seq > 0;
}

static int by_seq(const void *a, const void *b) {
  const segment *x = a, *y = b;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static job_logs *find_job(const kolo_agent_logstore *s, const char *id) {
  for (size_t i = 0; i < s->n_jobs; i++)
    if (strcmp(s->jobs[i]->id, id) == 0) return s->jobs[i];
  return NULL;
}

static job_logs *add_job(kolo_agent_logstore *s, const char *id) {
  if (s->n_jobs == s->cap_jobs) {
    size_t cap = s->cap_jobs ? s->cap_jobs * 2 : 16;
    job_logs **grown = realloc(s->jobs, cap * sizeof *grown);
    if (grown == NULL) return NULL;
    s->jobs = grown;
    s->cap_jobs = cap;
  }
  job_logs *j = calloc(1, sizeof *j);
  if (j == NULL) return NULL;
  snprintf(j->id, sizeof j->id, "%s", id);
  j->fd = -1;
  j->next_seq = 1;
  j->last_ms = wall_ms();
  s->jobs[s->n_jobs++] = j;
  return j;
}

static int push_segment_entry(job_logs *j, const segment *seg) {
  if (j->n == j->cap) {
    size_t cap = j->cap ? j->cap * 2 : 8;
    segment *grown = realloc(j->segs, cap * sizeof *grown);
    if (grown == NULL) return -1;
    j->segs = grown;
    j->cap = cap;
  }
  j->segs[j->n++] = *seg;
  j->bytes += seg->bytes;
  if (seg->seq >= j->next_seq) j->next_seq = seg->seq + 1;
  return 0;
}

/* Loads <dir>/<id>/ into the table. */
static void load_job(kolo_agent_logstore *s, const char *id) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", s->dir, id);
  DIR *d = opendir(path);
  if (d == NULL) return;
  job_logs *j = add_job(s, id);
  struct stat st;
  if (j != NULL && stat(path, &st) == 0) j->last_ms = (int64_t)st.st_mtime * 1000;
  struct dirent *e;
  while (j != NULL && (e = readdir(d)) != NULL) {
    segment seg;
    if (!parse_segment_name(e->d_name, &seg)) continue;
    char file[4096 + 300];
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    if (stat(file, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    seg.bytes = (uint64_t)st.st_size;
    if ((int64_t)st.st_mtime * 1000 > j->last_ms) j->last_ms = (int64_t)st.st_mtime * 1000;
    push_segment_entry(j, &seg);
  }
  closedir(d);
  if (j != NULL && j->n > 1) qsort(j->segs, j->n, sizeof *j->segs, by_seq);
}

kolo_status kolo_agent_logstore_open(const kolo_agent_logstore_config *cfg,
                                     kolo_agent_logstore **out) {
  if (cfg == NULL || cfg->dir == NULL || cfg->dir[0] == '\0' || strlen(cfg->dir) >= 2048 ||
      cfg->file_bytes < 1024 || cfg->job_bytes < 2 * cfg->file_bytes ||
      cfg->total_bytes < cfg->job_bytes || cfg->retention_s < 0)
    return KOLO_ERR_INVALID_ARG;
  if (mkdir(cfg->dir, 0700) != 0 && errno != EEXIST) {
    KOLO_LOGE(LOG, "cannot create the log directory %s: %s", cfg->dir, strerror(errno));
    return KOLO_ERR_IO;
  }
  /* job output is private: this user's folder, 0700 (one made 0755 by an older kolo too) */
  struct stat st;
  if (stat(cfg->dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      ((st.st_mode & 077) != 0 && chmod(cfg->dir, 0700) != 0)) {
    KOLO_LOGE(LOG, "the log directory %s is not a private directory of this user", cfg->dir);
    return KOLO_ERR_STATE;
  }
  DIR *d = opendir(cfg->dir);
  if (d == NULL) {
    KOLO_LOGE(LOG, "cannot read the log directory %s: %s", cfg->dir, strerror(errno));
    return KOLO_ERR_IO;
  }
  kolo_agent_logstore *s = calloc(1, sizeof *s);
  if (s == NULL) {
    closedir(d);
    return KOLO_ERR_NO_MEMORY;
  }
  s->cfg = *cfg;
  snprintf(s->dir, sizeof s->dir, "%s", cfg->dir);
  s->cfg.dir = s->dir;
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&s->changed, &attr);
  pthread_condattr_destroy(&attr);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (kolo_keys_name_valid(e->d_name) && e->d_name[0] != '.') load_job(s, e->d_name);
  closedir(d);
  *out = s;
  return KOLO_OK;
}

static void free_job(job_logs *j) {
  if (j->fd >= 0) close(j->fd);
  free(j->segs);
  free(j);
}

void kolo_agent_logstore_shutdown(kolo_agent_logstore *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->lock);
  s->shutdown = 1;
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->lock);
}

void kolo_agent_logstore_close(kolo_agent_logstore *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->n_jobs; i++) free_job(s->jobs[i]);
  free(s->jobs);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->changed);
  free(s);
}

/* ---- the writer ---- */

static void drop_first_segment(kolo_agent_logstore *s, job_logs *j) {
  char path[4096];
  segment_path(s, j->id, &j->segs[0], path, sizeof path);
  if (unlink(path) != 0 && errno != ENOENT)
    KOLO_LOGW(LOG, "cannot delete %s: %s", path, strerror(errno));
  j->bytes -= j->segs[0].bytes;
  if (j->segs[0].seq > j->deleted_below) j->deleted_below = j->segs[0].seq;
  memmove(j->segs, j->segs + 1, (j->n - 1) * sizeof *j->segs);
  j->n--;
}

/* Closes the live file; an empty live segment is removed (nothing to serve). */
static void close_live(kolo_agent_logstore *s, job_logs *j) {
  if (j->fd < 0) return;
  close(j->fd);
  j->fd = -1;
  if (j->n > 0 && j->segs[j->n - 1].bytes == 0) {
    char path[4096];
    segment_path(s, j->id, &j->segs[j->n - 1], path, sizeof path);
    unlink(path);
    j->n--;
  }
}

static kolo_status open_segment(kolo_agent_logstore *s, job_logs *j, int64_t epoch, uint32_t rank) {
  close_live(s, j);
  segment seg = {j->next_seq, epoch, rank, 0};
  j->epoch = epoch;
  j->rank = rank;
  char path[4096];
  segment_path(s, j->id, &seg, path, sizeof path);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    KOLO_LOGW(LOG, "cannot create %s: %s (this output is not kept)", path, strerror(errno));
    return KOLO_ERR_IO;
  }
  if (push_segment_entry(j, &seg) != 0) {
    close(fd);
    unlink(path);
    return KOLO_ERR_NO_MEMORY;
  }
  j->fd = fd;
  return KOLO_OK;
}

kolo_status kolo_agent_logstore_begin(kolo_agent_logstore *s, const char *job, int64_t epoch,
                                      uint32_t rank) {
  if (!kolo_keys_name_valid(job)) return KOLO_ERR_INVALID_ARG;
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  pthread_mutex_lock(&s->lock);
  job_logs *j = find_job(s, job);
  if (j == NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", s->dir, job);
    struct stat st;
    if ((mkdir(path, 0700) != 0 && errno != EEXIST) || lstat(path, &st) != 0 ||
        !S_ISDIR(st.st_mode)) { /* never through a link */
      KOLO_LOGW(LOG, "cannot create %s: %s (this output is not kept)", path, strerror(errno));
      rc = KOLO_ERR_IO;
      goto out;
    }
    j = add_job(s, job);
    if (j == NULL) goto out;
  }
  j->active = 1;
  j->write_failed = 0;
  j->last_ms = wall_ms();
  rc = open_segment(s, j, epoch, rank);
  pthread_cond_broadcast(&s->changed);
out:
  pthread_mutex_unlock(&s->lock);
  return rc;
}

kolo_status kolo_agent_logstore_segment(kolo_agent_logstore *s, const char *job, int64_t epoch,
                                        uint32_t rank) {
  kolo_status rc = KOLO_ERR_STATE;
  pthread_mutex_lock(&s->lock);
  job_logs *j = find_job(s, job);
  if (j != NULL && j->active) {
    const segment *live = j->fd >= 0 && j->n ? &j->segs[j->n - 1] : NULL;
    j->write_failed = 0;
    rc = live && live->epoch == epoch && live->rank == rank ? KOLO_OK
                                                            : open_segment(s, j, epoch, rank);
    pthread_cond_broadcast(&s->changed);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

kolo_status kolo_agent_logstore_append(kolo_agent_logstore *s, const char *job, const char *data,
                                       size_t len) {
  kolo_status rc = KOLO_ERR_STATE;
  pthread_mutex_lock(&s->lock);
  job_logs *j = find_job(s, job);
  if (j == NULL || !j->active) goto out;
  if (j->fd < 0) {
    /* the last segment could not be created: try once more, then drop until the next one */
    if (j->write_failed) goto out;
    if (open_segment(s, j, j->epoch, j->rank) != KOLO_OK) {
      j->write_failed = 1;
      goto out;
    }
  }
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(j->fd, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!j->write_failed)
        KOLO_LOGW(LOG, "cannot write the output of job %s: %s (dropped until the next segment)",
                  job, n < 0 ? strerror(errno) : "short write");
      j->write_failed = 1;
      rc = KOLO_ERR_IO;
      break;
    }
    done += (size_t)n;
  }
  segment *live = &j->segs[j->n - 1];
  live->bytes += done;
  j->bytes += done;
  j->last_ms = wall_ms();
  if (done == len) rc = KOLO_OK;
  if (live->bytes >= s->cfg.file_bytes) open_segment(s, j, live->epoch, live->rank);
  while (j->bytes > s->cfg.job_bytes && j->n > 1) drop_first_segment(s, j);
  pthread_cond_broadcast(&s->changed);
out:
  pthread_mutex_unlock(&s->lock);
  return rc;
}

void kolo_agent_logstore_finish(kolo_agent_logstore *s, const char *job) {
  pthread_mutex_lock(&s->lock);
  job_logs *j = find_job(s, job);
  if (j != NULL) {
    close_live(s, j);
    j->active = 0;
    j->last_ms = wall_ms();
    pthread_cond_broadcast(&s->changed);
  }
  pthread_mutex_unlock(&s->lock);
}

static void remove_job(kolo_agent_logstore *s, size_t index) {
  job_logs *j = s->jobs[index];
  while (j->n > 0) drop_first_segment(s, j);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", s->dir, j->id);
  if (rmdir(path) != 0 && errno != ENOENT)
    KOLO_LOGW(LOG, "cannot remove %s: %s", path, strerror(errno));
  KOLO_LOGI(LOG, "deleted the logs of job %s", j->id);
  free_job(j);
  s->jobs[index] = s->jobs[--s->n_jobs];
}

void kolo_agent_logstore_sweep(kolo_agent_logstore *s, int64_t now_s) {
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < s->n_jobs;) {
    job_logs *j = s->jobs[i];
    if (!j->active && j->last_ms / 1000 + s->cfg.retention_s < now_s)
      remove_job(s, i);
    else
      i++;
  }
  for (;;) {
    uint64_t total = 0;
    long oldest = -1;
    for (size_t i = 0; i < s->n_jobs; i++) {
      total += s->jobs[i]->bytes;
      if (!s->jobs[i]->active && (oldest < 0 || s->jobs[i]->last_ms < s->jobs[oldest]->last_ms))
        oldest = (long)i;
    }
    if (total <= s->cfg.total_bytes || oldest < 0) break;
    remove_job(s, (size_t)oldest);
  }
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->lock);
}

uint64_t kolo_agent_logstore_bytes(kolo_agent_logstore *s, const char *job) {
  uint64_t total = 0;
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < s->n_jobs; i++)
    if (job == NULL || strcmp(s->jobs[i]->id, job) == 0) total += s->jobs[i]->bytes;
  pthread_mutex_unlock(&s->lock);
  return total;
}

int kolo_agent_logstore_has(kolo_agent_logstore *s, const char *job) {
  pthread_mutex_lock(&s->lock);
  int found = find_job(s, job) != NULL;
  pthread_mutex_unlock(&s->lock);
  return found;
}

/* ---- readers ---- */

static int wanted(const kolo_agent_logreader *r, uint32_t rank) {
  if (r->n_ranks == 0) return 1;
  for (size_t i = 0; i < r->n_ranks; i++)
    if (r->ranks[i] == rank) return 1;
  return 0;
}

static rank_start *start_of(kolo_agent_logreader *r, uint32_t rank) {
  for (size_t i = 0; i < r->n_starts; i++)
    if (r->starts[i].rank == rank) return &r->starts[i];
  return NULL;
}

/* Where the last need lines of a file of size bytes start: returns how many lines it
 * holds, up to need; *pos is the start of the earliest of them. */
static uint64_t tail_in_file(int fd, uint64_t size, uint64_t need, uint64_t *pos, char *block) {
  uint64_t count = 0;
  *pos = 0;
  if (size == 0 || need == 0) return 0;
  /* a line starts at 0 and after every '\n' except the last byte's */
  uint64_t end = size - 1;
  while (end > 0) {
    uint64_t begin = end > READ_CHUNK ? end - READ_CHUNK : 0;
    ssize_t got = pread(fd, block, (size_t)(end - begin), (off_t)begin);
    if (got != (ssize_t)(end - begin)) return count; /* deleted or truncated under us */
    for (uint64_t b = end; b > begin; b--) {
      if (block[b - 1 - begin] != '\n') continue;
      *pos = b;
      if (++count == need) return count;
    }
    end = begin;
  }
  *pos = 0;
  return count + 1;
}

/* Computes the per-rank starts of the last tail lines, over a copy of the segments. */
static kolo_status compute_tail(kolo_agent_logreader *r, const segment *segs, size_t n,
                                uint64_t tail) {
  char *block = malloc(READ_CHUNK);
  if (block == NULL) return KOLO_ERR_NO_MEMORY;
  for (size_t k = n; k-- > 0;) {
    const segment *seg = &segs[k];
    if (!wanted(r, seg->rank)) continue;
    rank_start *st = start_of(r, seg->rank);
    if (st == NULL) {
      rank_start *grown = realloc(r->starts, (r->n_starts + 1) * sizeof *grown);
      if (grown == NULL) {
        free(block);
        return KOLO_ERR_NO_MEMORY;
      }
      r->starts = grown;
      st = &r->starts[r->n_starts++];
      *st = (rank_start){seg->rank, 0, 0, tail};
    }
    if (st->need == 0) continue;
    char path[4096];
    segment_path(r->store, r->job, seg, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    uint64_t pos = 0, found = fd >= 0 ? tail_in_file(fd, seg->bytes, st->need, &pos, block) : 0;
    if (fd >= 0) close(fd);
    st->seq = seg->seq;
    st->offset = pos;
    st->need -= found < st->need ? found : st->need;
  }
  free(block);
  return KOLO_OK;
}

kolo_status kolo_agent_logreader_open(kolo_agent_logstore *s, const char *job,
                                      const kolo_agent_logreader_opts *opts,
                                      kolo_agent_logreader **out) {
  if (!kolo_keys_name_valid(job)) return KOLO_ERR_INVALID_ARG;
  kolo_agent_logreader *r = calloc(1, sizeof *r);
  if (r == NULL) return KOLO_ERR_NO_MEMORY;
  r->store = s;
  r->fd = -1;
  snprintf(r->job, sizeof r->job, "%s", job);
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  segment *copy = NULL;
  size_t n = 0;
  r->buf = malloc(READ_CHUNK);
  if (r->buf == NULL) goto fail;
  if (opts && opts->n_ranks) {
    r->ranks = malloc(opts->n_ranks * sizeof *r->ranks);
    if (r->ranks == NULL) goto fail;
    memcpy(r->ranks, opts->ranks, opts->n_ranks * sizeof *r->ranks);
    r->n_ranks = opts->n_ranks;
  }
  pthread_mutex_lock(&s->lock);
  job_logs *j = find_job(s, job);
  if (j != NULL && j->n > 0) {
    copy = malloc(j->n * sizeof *copy);
    if (copy) memcpy(copy, j->segs, j->n * sizeof *copy);
    n = copy ? j->n : 0;
  }
  pthread_mutex_unlock(&s->lock);
  rc = KOLO_ERR_NOT_FOUND;
  if (j == NULL) goto fail;
  if (opts && opts->after) {
    r->cur = *opts->after;
    r->report_gaps = 1;
  } else if (opts && opts->tail) {
    rc = compute_tail(r, copy, n, opts->tail);
    if (rc != KOLO_OK) goto fail;
  } else {
    r->report_gaps = 1;
  }
  free(copy);
  *out = r;
  return KOLO_OK;
fail:
  free(copy);
  kolo_agent_logreader_close(r);
  return rc;
}

void kolo_agent_logreader_close(kolo_agent_logreader *r) {
  if (r == NULL) return;
  if (r->fd >= 0) close(r->fd);
  free(r->buf);
  free(r->ranks);
  free(r->starts);
  free(r);
}

/* Reads a line of segment seg at r->cur.offset (without the lock). 1 = line filled,
 * 0 = no complete line yet (live segment), -1 = the file is gone. */
static int read_line(kolo_agent_logreader *r, const segment *seg, int live,
                     kolo_agent_log_line *line) {
  if (r->fd < 0 || r->fd_seq != seg->seq) {
    if (r->fd >= 0) close(r->fd);
    char path[4096];
    segment_path(r->store, r->job, seg, path, sizeof path);
    r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    r->fd_seq = seg->seq;
    r->buf_len = 0;
    if (r->fd < 0) return -1;
  }
  uint64_t off = r->cur.offset;
  for (int attempt = 0; attempt < 2; attempt++) {
    if (off >= r->buf_off && off < r->buf_off + r->buf_len) {
      const char *start = r->buf + (off - r->buf_off);
      size_t avail = r->buf_len - (size_t)(off - r->buf_off);
      const char *nl = memchr(start, '\n', avail);
      int cut = nl == NULL && avail == READ_CHUNK;
      int last = nl == NULL && !live && off + avail >= seg->bytes;
      if (nl || cut || last) {
        line->text = start;
        line->len = nl ? (size_t)(nl - start) : avail;
        line->epoch = seg->epoch;
        line->rank = seg->rank;
        line->next = (kolo_agent_log_cursor){seg->seq, off + line->len + (nl ? 1 : 0)};
        return 1;
      }
      if (off + avail >= seg->bytes) return 0;
    }
    uint64_t want = seg->bytes - off < READ_CHUNK ? seg->bytes - off : READ_CHUNK;
    ssize_t got = pread(r->fd, r->buf, (size_t)want, (off_t)off);
    if (got <= 0) return got < 0 ? -1 : 0;
    r->buf_off = off;
    r->buf_len = (size_t)got;
  }
  return 0;
}

static int wait_until(kolo_agent_logstore *s, const struct timespec *deadline) {
  return pthread_cond_timedwait(&s->changed, &s->lock, deadline) == ETIMEDOUT;
}

kolo_agent_log_next kolo_agent_logreader_next(kolo_agent_logreader *r, int wait_ms,
                                              kolo_agent_log_line *line, uint64_t *skipped) {
  kolo_agent_logstore *s = r->store;
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += wait_ms / 1000;
  deadline.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->lock);
  for (;;) {
    job_logs *j = find_job(s, r->job);
    if (s->shutdown || j == NULL) break;
    size_t i = 0;
    while (i < j->n && j->segs[i].seq < r->cur.seq) i++;
    if (i == j->n) {
      if (!j->active) break;
      if (wait_until(s, &deadline)) {
        pthread_mutex_unlock(&s->lock);
        return KOLO_AGENT_LOG_WAIT;
      }
      continue;
    }
    segment seg = j->segs[i];
    if (seg.seq != r->cur.seq) {
      if (r->report_gaps && skipped && j->deleted_below > 0 && r->cur.seq <= j->deleted_below)
        (*skipped)++;
      r->cur = (kolo_agent_log_cursor){seg.seq, 0};
    }
    rank_start *st = start_of(r, seg.rank);
    if (!wanted(r, seg.rank) || (st && st->seq > seg.seq)) {
      r->cur = (kolo_agent_log_cursor){seg.seq + 1, 0};
      continue;
    }
    if (st && st->seq == seg.seq && r->cur.offset < st->offset) r->cur.offset = st->offset;
    int live = j->active && i == j->n - 1;
    if (r->cur.offset >= seg.bytes) {
      if (!live) {
        r->cur = (kolo_agent_log_cursor){seg.seq + 1, 0};
        continue;
      }
      if (wait_until(s, &deadline)) {
        pthread_mutex_unlock(&s->lock);
        return KOLO_AGENT_LOG_WAIT;
      }
      continue;
    }
    pthread_mutex_unlock(&s->lock);
    int got = read_line(r, &seg, live, line);
    if (got == 1) {
      r->cur = line->next;
      return KOLO_AGENT_LOG_LINE;
    }
    pthread_mutex_lock(&s->lock);
    if (got < 0) {
      r->cur = (kolo_agent_log_cursor){seg.seq + 1, 0}; /* deleted under us */
      continue;
    }
    if (wait_until(s, &deadline)) {
      pthread_mutex_unlock(&s->lock);
      return KOLO_AGENT_LOG_WAIT;
    }
  }
  pthread_mutex_unlock(&s->lock);
  return KOLO_AGENT_LOG_END;
}
