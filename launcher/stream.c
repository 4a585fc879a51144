/* Implementation of stream.h: one growable buffer per rank and pipe; each complete
 * line goes out in a single writev so lines of different ranks never interleave. */
#include "launcher/stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

struct kolo_launcher_stream {
  int out_fd;
  char prefix[24];
  size_t prefix_length;
  char *held; /* bytes of the current, unfinished line */
  size_t held_length;
  size_t held_capacity;
  int mid_line; /* a piece of an over-long line went out without its newline */
};

kolo_status kolo_launcher_stream_create(int rank, int out_fd, kolo_launcher_stream **out) {
  if (out == NULL || rank < 0 || out_fd < 0) return KOLO_ERR_INVALID_ARG;
  kolo_launcher_stream *stream = calloc(1, sizeof *stream);
  if (stream == NULL) return KOLO_ERR_NO_MEMORY;
  stream->out_fd = out_fd;
  stream->prefix_length = (size_t)snprintf(stream->prefix, sizeof stream->prefix, "[%d] ", rank);
  *out = stream;
  return KOLO_OK;
}

/* Writes all iov entries, retrying on short writes and EINTR; gives up on errors. */
static void write_all(int fd, struct iovec *iov, int count) {
  while (count > 0) {
    ssize_t written = writev(fd, iov, count);
    if (written < 0) {
      if (errno == EINTR) continue;
      return;
    }
    size_t left = (size_t)written;
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++;
      count--;
    }
    if (count > 0) {
      iov->iov_base = (char *)iov->iov_base + left;
      iov->iov_len -= left;
    }
  }
}

/* Writes the prefix (unless continuing an over-long line), a and b, then a newline if asked. */
static void emit(kolo_launcher_stream *stream, const char *a, size_t a_length, const char *b,
                 size_t b_length, int newline) {
  struct iovec iov[4];
  int count = 0;
  if (!stream->mid_line) iov[count++] = (struct iovec){stream->prefix, stream->prefix_length};
  if (a_length > 0) iov[count++] = (struct iovec){(void *)a, a_length};
  if (b_length > 0) iov[count++] = (struct iovec){(void *)b, b_length};
  if (newline) iov[count++] = (struct iovec){"\n", 1};
  write_all(stream->out_fd, iov, count);
  stream->mid_line = !newline;
}

static kolo_status hold(kolo_launcher_stream *stream, const char *data, size_t length) {
  if (stream->held_length + length > stream->held_capacity) {
    size_t capacity = stream->held_capacity ? stream->held_capacity : 256;
    while (capacity < stream->held_length + length) capacity *= 2;
    char *grown = realloc(stream->held, capacity);
    if (grown == NULL) return KOLO_ERR_NO_MEMORY;
    stream->held = grown;
    stream->held_capacity = capacity;
  }
  memcpy(stream->held + stream->held_length, data, length);
  stream->held_length += length;
  return KOLO_OK;
}

kolo_status kolo_launcher_stream_feed(kolo_launcher_stream *stream, const char *data,
                                      size_t length) {
  if (stream == NULL || (data == NULL && length > 0)) return KOLO_ERR_INVALID_ARG;
  while (length > 0) {
    const char *newline = memchr(data, '\n', length);
    if (newline == NULL) break;
    size_t line_length = (size_t)(newline - data);
    emit(stream, stream->held, stream->held_length, data, line_length, 1);
    stream->held_length = 0;
    data += line_length + 1;
    length -= line_length + 1;
  }
  if (length == 0) return KOLO_OK;
  if (stream->held_length + length > KOLO_LAUNCHER_STREAM_MAX_LINE) {
    emit(stream, stream->held, stream->held_length, data, length, 0);
    stream->held_length = 0;
    return KOLO_OK;
  }
  return hold(stream, data, length);
}

void kolo_launcher_stream_finish(kolo_launcher_stream *stream) {
  if (stream == NULL) return;
  if (stream->held_length > 0 || stream->mid_line) {
    emit(stream, stream->held, stream->held_length, NULL, 0, 1);
  }
  stream->held_length = 0;
  stream->mid_line = 0;
}

void kolo_launcher_stream_destroy(kolo_launcher_stream *stream) {
  if (stream == NULL) return;
  free(stream->held);
  free(stream);
}
