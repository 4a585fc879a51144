/* Implementation of capture.h. The thread polls an eventfd (commands from the agent's
 * loop) and the two pipes; everything it shares with the loop is under one mutex, and
 * capture_end waits on a condition variable until the thread has read both pipes to
 * their end (or the deadline passed). */
#define _GNU_SOURCE
#include "worker/agent/capture.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

#define LOG "logs"
#define READ_BYTES 65536
#define BATCH_FLUSH 65536
#define TAIL_LINE 240
#define SWEEP_EVERY_MS 60000
#define PIPE_BYTES (1 << 20)

typedef struct stream {
  int fd; /* read end, -1 once at EOF */
  int is_err;
  char partial[KOLO_AGENT_LOG_MAX_LINE];
  size_t n;
} stream;

struct kolo_agent_capture {
  kolo_agent_logstore *store;
  pthread_t thread;
  int wake;
  pthread_mutex_t lock;
  pthread_cond_t done_cond;
  int stop;
  /* the capture, under lock */
  int running; /* begin .. end */
  int ending;  /* end was asked: finish once both pipes are at EOF or at end_deadline */
  int64_t end_deadline_ms;
  char job[129];
  stream out, err;
  char tail[KOLO_AGENT_STDERR_TAIL_LINES][TAIL_LINE + 1];
  size_t tail_next, tail_count;
  /* the thread's own */
  char *batch;
  size_t batch_len;
  char *chunk;
};

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void poke(kolo_agent_capture *c) {
  uint64_t one = 1;
  ssize_t ignored = write(c->wake, &one, sizeof one);
  (void)ignored;
}

/* Length of the valid UTF-8 sequence at p (avail bytes), 0 if invalid. */
static size_t utf8_sequence(const unsigned char *p, size_t avail) {
  unsigned char b = p[0];
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF)
    need = 1;
  else if (b == 0xE0)
    need = 2, lo = 0xA0;
  else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
    need = 2;
  else if (b == 0xED)
    need = 2, hi = 0x9F;
  else if (b == 0xF0)
    need = 3, lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3)
    need = 3;
  else if (b == 0xF4)
    need = 3, hi = 0x8F;
  else
    return 0;
  if (avail < need + 1) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i <= need; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return need + 1;
}

size_t kolo_agent_sanitize_text(const char *in, size_t len, char *out, size_t cap) {
  size_t used = 0;
  if (cap == 0) return 0;
  const unsigned char *p = (const unsigned char *)in;
  for (size_t i = 0; i < len;) {
    size_t n = utf8_sequence(p + i, len - i);
    if (used + (n ? n : 1) >= cap) break;
    if (n == 0) {
      out[used++] = '?';
      i++;
    } else if (n == 1) {
      unsigned char ch = p[i++];
      out[used++] = (ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7F ? ' ' : (char)ch;
    } else {
      memcpy(out + used, p + i, n);
      used += n;
      i += n;
    }
  }
  out[used] = '\0';
  return used;
}

/* ---- the thread ---- */

static void flush_batch(kolo_agent_capture *c) {
  if (c->batch_len == 0) return;
  char job[129];
  pthread_mutex_lock(&c->lock);
  memcpy(job, c->job, sizeof job);
  pthread_mutex_unlock(&c->lock);
  kolo_agent_logstore_append(c->store, job, c->batch, c->batch_len);
  c->batch_len = 0;
}

static void emit_line(kolo_agent_capture *c, stream *st, const char *text, size_t len) {
  if (c->batch_len + len + 1 > BATCH_FLUSH + KOLO_AGENT_LOG_MAX_LINE + 1) flush_batch(c);
  memcpy(c->batch + c->batch_len, text, len);
  c->batch_len += len;
  c->batch[c->batch_len++] = '\n';
  if (st->is_err) {
    pthread_mutex_lock(&c->lock);
    size_t keep = len < TAIL_LINE ? len : TAIL_LINE;
    memcpy(c->tail[c->tail_next], text, keep);
    c->tail[c->tail_next][keep] = '\0';
    c->tail_next = (c->tail_next + 1) % KOLO_AGENT_STDERR_TAIL_LINES;
    if (c->tail_count < KOLO_AGENT_STDERR_TAIL_LINES) c->tail_count++;
    pthread_mutex_unlock(&c->lock);
  }
  if (c->batch_len >= BATCH_FLUSH) flush_batch(c);
}

/* Cuts data into lines; the unfinished last one waits in st->partial. */
static void feed(kolo_agent_capture *c, stream *st, const char *data, size_t len) {
  while (len > 0) {
    const char *nl = memchr(data, '\n', len);
    size_t piece = nl ? (size_t)(nl - data) : len;
    size_t room = KOLO_AGENT_LOG_MAX_LINE - st->n;
    if (piece > room) {
      /* a line too long: its first KOLO_AGENT_LOG_MAX_LINE bytes become a line */
      memcpy(st->partial + st->n, data, room);
      emit_line(c, st, st->partial, KOLO_AGENT_LOG_MAX_LINE);
      st->n = 0;
      data += room;
      len -= room;
      continue;
    }
    memcpy(st->partial + st->n, data, piece);
    st->n += piece;
    if (nl == NULL) break;
    emit_line(c, st, st->partial, st->n);
    st->n = 0;
    data += piece + 1;
    len -= piece + 1;
  }
}

static void close_stream(kolo_agent_capture *c, stream *st) {
  if (st->n > 0) emit_line(c, st, st->partial, st->n);
  st->n = 0;
  if (st->fd >= 0) close(st->fd);
  st->fd = -1;
}

/* Reads what one pipe has now; closes it at EOF. */
static void drain(kolo_agent_capture *c, stream *st) {
  for (int rounds = 0; rounds < 16 && st->fd >= 0; rounds++) {
    ssize_t n = read(st->fd, c->chunk, READ_BYTES);
    if (n > 0) {
      feed(c, st, c->chunk, (size_t)n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    close_stream(c, st);
  }
}

/* Ends the capture if it was asked to and the pipes are done (or the time is up). */
static void maybe_finish(kolo_agent_capture *c) {
  pthread_mutex_lock(&c->lock);
  int finish = c->running && c->ending &&
               ((c->out.fd < 0 && c->err.fd < 0) || mono_ms() >= c->end_deadline_ms || c->stop);
  pthread_mutex_unlock(&c->lock);
  if (!finish) return;
  close_stream(c, &c->out);
  close_stream(c, &c->err);
  flush_batch(c);
  pthread_mutex_lock(&c->lock);
  kolo_agent_logstore_finish(c->store, c->job);
  c->running = 0;
  c->ending = 0;
  pthread_cond_broadcast(&c->done_cond);
  pthread_mutex_unlock(&c->lock);
}

static void *capture_thread(void *arg) {
  kolo_agent_capture *c = arg;
  int64_t next_sweep = 0;
  for (;;) {
    struct pollfd fds[3];
    nfds_t n = 0;
    fds[n++] = (struct pollfd){.fd = c->wake, .events = POLLIN};
    pthread_mutex_lock(&c->lock);
    int stop = c->stop, running = c->running, ending = c->ending;
    if (running && c->out.fd >= 0) fds[n++] = (struct pollfd){.fd = c->out.fd, .events = POLLIN};
    if (running && c->err.fd >= 0) fds[n++] = (struct pollfd){.fd = c->err.fd, .events = POLLIN};
    pthread_mutex_unlock(&c->lock);
    if (stop && !running) break;
    poll(fds, n, ending ? 20 : 1000);
    uint64_t ignored;
    while (read(c->wake, &ignored, sizeof ignored) > 0) {
    }
    if (running) {
      drain(c, &c->out);
      drain(c, &c->err);
      flush_batch(c);
      maybe_finish(c);
    }
    if (mono_ms() >= next_sweep) {
      kolo_agent_logstore_sweep(c->store, (int64_t)time(NULL));
      next_sweep = mono_ms() + SWEEP_EVERY_MS;
    }
  }
  return NULL;
}

/* ---- the agent's side ---- */

kolo_status kolo_agent_capture_create(kolo_agent_logstore *store, kolo_agent_capture **out) {
  kolo_agent_capture *c = calloc(1, sizeof *c);
  if (c == NULL) return KOLO_ERR_NO_MEMORY;
  c->store = store;
  c->out.fd = c->err.fd = -1;
  c->err.is_err = 1;
  c->batch = malloc(BATCH_FLUSH + 2 * KOLO_AGENT_LOG_MAX_LINE + 2);
  c->chunk = malloc(READ_BYTES);
  c->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  pthread_mutex_init(&c->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->done_cond, &attr);
  pthread_condattr_destroy(&attr);
  if (c->batch == NULL || c->chunk == NULL || c->wake < 0 ||
      pthread_create(&c->thread, NULL, capture_thread, c) != 0) {
    if (c->wake >= 0) close(c->wake);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->done_cond);
    free(c->batch);
    free(c->chunk);
    free(c);
    return KOLO_ERR_SYSTEM;
  }
  *out = c;
  return KOLO_OK;
}

void kolo_agent_capture_destroy(kolo_agent_capture *c) {
  if (c == NULL) return;
  pthread_mutex_lock(&c->lock);
  c->stop = 1;
  if (c->running && !c->ending) {
    c->ending = 1;
    c->end_deadline_ms = mono_ms();
  }
  pthread_mutex_unlock(&c->lock);
  poke(c);
  pthread_join(c->thread, NULL);
  close(c->wake);
  pthread_mutex_destroy(&c->lock);
  pthread_cond_destroy(&c->done_cond);
  free(c->batch);
  free(c->chunk);
  free(c);
}

kolo_status kolo_agent_capture_begin(kolo_agent_capture *c, const char *job, int64_t epoch,
                                     uint32_t rank, int *out_fd, int *err_fd) {
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  kolo_status rc = KOLO_ERR_STATE;
  pthread_mutex_lock(&c->lock);
  if (c->running) goto fail;
  rc = kolo_agent_logstore_begin(c->store, job, epoch, rank);
  if (rc != KOLO_OK) goto fail;
  rc = KOLO_ERR_SYSTEM;
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    KOLO_LOGE(LOG, "cannot create output pipes: %s", strerror(errno));
    kolo_agent_logstore_finish(c->store, job);
    goto fail;
  }
  for (int i = 0; i < 2; i++) {
    int fd = i ? err_pipe[0] : out_pipe[0];
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES); /* best effort: a burst does not stall the process */
  }
  snprintf(c->job, sizeof c->job, "%s", job);
  c->out.fd = out_pipe[0];
  c->err.fd = err_pipe[0];
  c->out.n = c->err.n = 0;
  c->tail_next = c->tail_count = 0;
  c->running = 1;
  c->ending = 0;
  pthread_mutex_unlock(&c->lock);
  *out_fd = out_pipe[1];
  *err_fd = err_pipe[1];
  poke(c);
  return KOLO_OK;
fail:
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < 2; i++) {
    if (out_pipe[i] >= 0) close(out_pipe[i]);
    if (err_pipe[i] >= 0) close(err_pipe[i]);
  }
  return rc;
}

void kolo_agent_capture_segment(kolo_agent_capture *c, int64_t epoch, uint32_t rank) {
  pthread_mutex_lock(&c->lock);
  if (c->running) kolo_agent_logstore_segment(c->store, c->job, epoch, rank);
  pthread_mutex_unlock(&c->lock);
}

void kolo_agent_capture_end(kolo_agent_capture *c, int wait_ms, char *tail, size_t tail_len) {
  if (tail && tail_len) tail[0] = '\0';
  pthread_mutex_lock(&c->lock);
  if (!c->running) {
    pthread_mutex_unlock(&c->lock);
    return;
  }
  c->ending = 1;
  c->end_deadline_ms = mono_ms() + wait_ms;
  poke(c);
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += wait_ms / 1000 + 2; /* the thread gives up at wait_ms; this is a backstop */
  while (c->running && pthread_cond_timedwait(&c->done_cond, &c->lock, &deadline) != ETIMEDOUT) {
  }
  /* newest lines last; drop the oldest ones that do not fit */
  char joined[KOLO_AGENT_STDERR_TAIL_LINES * (TAIL_LINE + 1) + 1];
  size_t used = 0;
  for (size_t k = 0; k < c->tail_count; k++) {
    size_t index = (c->tail_next + KOLO_AGENT_STDERR_TAIL_LINES - c->tail_count + k) %
                   KOLO_AGENT_STDERR_TAIL_LINES;
    size_t n = strlen(c->tail[index]);
    memcpy(joined + used, c->tail[index], n);
    used += n;
    joined[used++] = '\n';
  }
  if (used > 0) used--; /* no trailing newline */
  pthread_mutex_unlock(&c->lock);
  if (tail == NULL || tail_len == 0) return;
  size_t start = 0;
  while (used - start >= tail_len) {
    const char *nl = memchr(joined + start, '\n', used - start);
    start = nl ? (size_t)(nl - joined) + 1 : used - (tail_len - 1);
  }
  kolo_agent_sanitize_text(joined + start, used - start, tail, tail_len);
}
