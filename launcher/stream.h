/* Line prefixing for kolorun: bytes read from one rank's stdout or stderr pipe
 * are cut into lines and written as "[<rank>] line\n" to an output descriptor.
 * Partial lines are held until their newline arrives or the pipe reaches EOF. */
#ifndef KOLO_LAUNCHER_STREAM_H
#define KOLO_LAUNCHER_STREAM_H

#include <stddef.h>

#include "kolo/status.h"

typedef struct kolo_launcher_stream kolo_launcher_stream;

/* A line longer than this is written in pieces (only the first carries the prefix),
 * so a rank that never prints a newline cannot make kolorun grow without bound. */
#define KOLO_LAUNCHER_STREAM_MAX_LINE (1u << 20)

/* Creates a stream that writes rank's lines to out_fd (which it does not own). */
kolo_status kolo_launcher_stream_create(int rank, int out_fd, kolo_launcher_stream **out);

/* Takes length bytes of the rank's output; writes every line they complete. Write
 * errors (a closed terminal) are ignored: a rank's output never stops the job. */
kolo_status kolo_launcher_stream_feed(kolo_launcher_stream *stream, const char *data,
                                      size_t length);

/* End of the rank's output: writes a held partial line, with a newline added. */
void kolo_launcher_stream_finish(kolo_launcher_stream *stream);

/* Frees the stream (without writing what it holds); NULL is a no-op. */
void kolo_launcher_stream_destroy(kolo_launcher_stream *stream);

#endif
