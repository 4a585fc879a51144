/* The engine's timeline: KOLO_TIMELINE=path writes a Chrome trace (JSON array
 * of complete "X" events; loads in Perfetto and chrome://tracing) with one row
 * per tensor and the phases it went through on this rank: NEGOTIATE,
 * WAIT_FOR_DATA (agreed, queued behind earlier work), MEMCPY_IN_FUSION_BUFFER,
 * the collective (ALLREDUCE, ALLGATHER, ...), MEMCPY_OUT_FUSION_BUFFER; and an
 * "engine" row with every negotiation cycle. Rank 0 writes path, rank r > 0
 * path.r (or each rank the path with "%r" replaced by its rank), pid = rank.
 * The file is valid JSON after every flush (the closing bracket is written each
 * time and overwritten by the next events), so an abort or a peer loss leaves a
 * file that parses. Thread-safe; a NULL timeline ignores every call. */
#ifndef KOLO_COLLECTIVE_TIMELINE_H
#define KOLO_COLLECTIVE_TIMELINE_H

#include <stdint.h>

#include "kolo/status.h"

typedef struct kolo_timeline kolo_timeline;

/* *out = NULL when KOLO_TIMELINE is unset or empty; an unwritable path is
 * logged and ignored (training goes on without a timeline). */
kolo_status kolo_timeline_open_from_env(int rank, int size, kolo_timeline **out);
/* Opens path (as written, no rank suffix). */
kolo_status kolo_timeline_open(const char *path, int rank, kolo_timeline **out);
void kolo_timeline_close(kolo_timeline *timeline); /* flushes; NULL is a no-op */

/* One phase [start_ns, end_ns] (CLOCK_MONOTONIC) on the row of track (a tensor
 * name, or "engine"); detail, when not NULL, goes into args.detail. */
void kolo_timeline_event(kolo_timeline *timeline, const char *track, const char *phase,
                         int64_t start_ns, int64_t end_ns, const char *detail);
/* Writes what is buffered and leaves the file valid JSON. */
void kolo_timeline_flush(kolo_timeline *timeline);

#endif
