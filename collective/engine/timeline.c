/* The Chrome-trace writer of timeline.h. Events are formatted into a buffer
 * under a mutex and written at most every 100 ms (and at flush/close), each
 * write followed by the closing "]" and a seek back over it. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/engine/names.h"
#include "collective/engine/timeline.h"
#include "common/clock.h"
#include "common/log.h"

#define FLUSH_NS (100 * 1000000LL)
#define TAIL "\n]\n"

struct kolo_timeline {
  pthread_mutex_t mutex;
  FILE *file;
  int rank;
  int events;         /* written or buffered so far */
  kolo_names *tracks; /* track name -> tid (as a pointer-sized integer) */
  long next_tid;
  char *buffer;
  size_t length, capacity;
  int64_t flushed_ns;
};

static void append(kolo_timeline *t, const char *text, size_t length) {
  if (t->length + length + 1 > t->capacity) {
    size_t capacity = t->capacity ? t->capacity : 65536;
    while (capacity < t->length + length + 1) capacity *= 2;
    char *grown = realloc(t->buffer, capacity);
    if (grown == NULL) return; /* drop the event rather than fail training */
    t->buffer = grown;
    t->capacity = capacity;
  }
  memcpy(t->buffer + t->length, text, length);
  t->length += length;
}

static void appendf(kolo_timeline *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(kolo_timeline *t, const char *fmt, ...) {
  char line[512];
  va_list args;
  va_start(args, fmt);
  int length = vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  if (length > 0) append(t, line, (size_t)length < sizeof line ? (size_t)length : sizeof line - 1);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one. */
static int utf8_sequence(const unsigned char *s) {
  if (s[0] < 0x80) return 1;
  int length = s[0] >= 0xf0 && s[0] <= 0xf4  ? 4
               : s[0] >= 0xe0                ? 3
               : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
                                             : 0;
  if (length == 0) return 0;
  for (int i = 1; i < length; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
  }
  if (length == 3 && s[0] == 0xe0 && s[1] < 0xa0) return 0;  /* overlong */
  if (length == 3 && s[0] == 0xed && s[1] >= 0xa0) return 0; /* surrogates */
  if (length == 4 && s[0] == 0xf0 && s[1] < 0x90) return 0;
  if (length == 4 && s[0] == 0xf4 && s[1] >= 0x90) return 0;
  return length;
}

/* A JSON string: quotes, backslashes and control bytes escaped; bytes that are
 * not valid UTF-8 become U+FFFD, so the file always parses. */
static void append_string(kolo_timeline *t, const char *text) {
  append(t, "\"", 1);
  for (const unsigned char *s = (const unsigned char *)text; *s;) {
    if (*s == '"' || *s == '\\') {
      char escaped[2] = {'\\', (char)*s};
      append(t, escaped, 2);
      s++;
    } else if (*s < 0x20) {
      appendf(t, "\\u%04x", *s);
      s++;
    } else {
      int length = utf8_sequence(s);
      if (length == 0) {
        append(t, "\\ufffd", 6);
        s++;
      } else {
        append(t, (const char *)s, (size_t)length);
        s += length;
      }
    }
  }
  append(t, "\"", 1);
}

static void begin_event(kolo_timeline *t) {
  if (t->events++ > 0)
    append(t, ",\n", 2);
  else
    append(t, "\n", 1);
}

static long track_id(kolo_timeline *t, const char *track) {
  void *value = kolo_names_get(t->tracks, track);
  if (value != NULL) return (long)(intptr_t)value;
  long tid = ++t->next_tid;
  if (kolo_names_put(t->tracks, track, (void *)(intptr_t)tid) != KOLO_OK) return 0;
  begin_event(t);
  appendf(
      t,
      "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %ld, \"args\": {\"name\": ",
      t->rank, tid);
  append_string(t, track);
  append(t, "}}", 2);
  begin_event(t);
  appendf(t,
          "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %ld, "
          "\"args\": {\"sort_index\": %ld}}",
          t->rank, tid, tid);
  return tid;
}

/* Writes the buffer, then the tail, and seeks back over the tail (under mutex). */
static void write_out(kolo_timeline *t) {
  if (t->length > 0) {
    fwrite(t->buffer, 1, t->length, t->file);
    t->length = 0;
  }
  fputs(TAIL, t->file);
  fflush(t->file);
  fseek(t->file, -(long)strlen(TAIL), SEEK_CUR);
  t->flushed_ns = kolo_now_ns();
}

kolo_status kolo_timeline_open(const char *path, int rank, kolo_timeline **out) {
  *out = NULL;
  kolo_timeline *t = calloc(1, sizeof *t);
  if (t == NULL) return KOLO_ERR_NO_MEMORY;
  t->file = fopen(path, "w");
  if (t->file == NULL || kolo_names_create(&t->tracks) != KOLO_OK) {
    KOLO_LOGW("kolo", "rank %d: cannot write the timeline to %s; going on without one", rank, path);
    if (t->file) fclose(t->file);
    free(t);
    return KOLO_ERR_IO;
  }
  pthread_mutex_init(&t->mutex, NULL);
  t->rank = rank;
  fputs("[", t->file);
  begin_event(t);
  appendf(
      t,
      "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}",
      rank, rank);
  track_id(t, "engine");
  write_out(t);
  *out = t;
  return KOLO_OK;
}

kolo_status kolo_timeline_open_from_env(int rank, int size, kolo_timeline **out) {
  *out = NULL;
  const char *path = getenv("KOLO_TIMELINE");
  if (path == NULL || *path == '\0') return KOLO_OK;
  char name[4096];
  const char *marker = strstr(path, "%r");
  if (marker != NULL) {
    snprintf(name, sizeof name, "%.*s%d%s", (int)(marker - path), path, rank, marker + 2);
  } else if (rank > 0 && size > 1) {
    snprintf(name, sizeof name, "%s.%d", path, rank);
  } else {
    snprintf(name, sizeof name, "%s", path);
  }
  kolo_timeline_open(name, rank, out); /* a failure is logged; no timeline then */
  return KOLO_OK;
}

void kolo_timeline_event(kolo_timeline *t, const char *track, const char *phase, int64_t start_ns,
                         int64_t end_ns, const char *detail) {
  if (t == NULL) return;
  if (end_ns < start_ns) end_ns = start_ns;
  pthread_mutex_lock(&t->mutex);
  long tid = track_id(t, track);
  begin_event(t);
  appendf(
      t, "{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %ld, \"ts\": %.3f, \"dur\": %.3f",
      phase, t->rank, tid, (double)start_ns / 1000.0, (double)(end_ns - start_ns) / 1000.0);
  if (detail != NULL) {
    append(t, ", \"args\": {\"detail\": ", 21);
    append_string(t, detail);
    append(t, "}", 1);
  }
  append(t, "}", 1);
  if (kolo_now_ns() - t->flushed_ns >= FLUSH_NS) write_out(t);
  pthread_mutex_unlock(&t->mutex);
}

void kolo_timeline_flush(kolo_timeline *t) {
  if (t == NULL) return;
  pthread_mutex_lock(&t->mutex);
  write_out(t);
  pthread_mutex_unlock(&t->mutex);
}

void kolo_timeline_close(kolo_timeline *t) {
  if (t == NULL) return;
  kolo_timeline_flush(t);
  fclose(t->file);
  kolo_names_destroy(t->tracks);
  pthread_mutex_destroy(&t->mutex);
  free(t->buffer);
  free(t);
}
