/* Output capture of the kolo-worker agent: the training process writes its stdout and
 * stderr into two pipes; a capture thread reads them (so a slow etcd never blocks the
 * process on a full pipe), cuts the bytes into lines (at most KOLO_AGENT_LOG_MAX_LINE),
 * appends whole lines to the job's log store, keeps the last stderr lines for the
 * process's exit report, and applies the store's retention every minute. */
#ifndef KOLO_AGENT_CAPTURE_H
#define KOLO_AGENT_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "worker/agent/logstore.h"

/* How many stderr lines the exit report carries (each cut at 240 bytes). */
#define KOLO_AGENT_STDERR_TAIL_LINES 20

typedef struct kolo_agent_capture kolo_agent_capture;

/* Starts the capture thread over store (which stays the caller's). */
kolo_status kolo_agent_capture_create(kolo_agent_logstore *store, kolo_agent_capture **out);
/* Stops the thread (ending a capture still running) and frees. */
void kolo_agent_capture_destroy(kolo_agent_capture *c);

/* A process of job starts at (epoch, rank): *out_fd and *err_fd are the write ends of its
 * stdout and stderr pipes (close-on-exec; the child dup2s them; the caller closes them
 * once the child is forked). KOLO_ERR_STATE while another capture is running. */
kolo_status kolo_agent_capture_begin(kolo_agent_capture *c, const char *job, int64_t epoch,
                                     uint32_t rank, int *out_fd, int *err_fd);
/* The process now runs at (epoch, rank): later lines go to a new segment. */
void kolo_agent_capture_segment(kolo_agent_capture *c, int64_t epoch, uint32_t rank);
/* The process is gone: reads the pipes to their end (at most wait_ms), ends the job's
 * logs, and copies its last stderr lines, '\n'-separated, valid UTF-8 without control
 * characters, into tail (at most tail_len bytes with the NUL; the newest lines are kept).
 * Nothing happens if no capture runs (tail is then ""). */
void kolo_agent_capture_end(kolo_agent_capture *c, int wait_ms, char *tail, size_t tail_len);

/* Copies len bytes of in to out (capacity cap, NUL-terminated) as valid UTF-8: invalid
 * bytes become '?', control characters other than '\n' and '\t' become ' '. Returns the
 * length written. */
size_t kolo_agent_sanitize_text(const char *in, size_t len, char *out, size_t cap);

#endif
