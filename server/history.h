/* A job's metrics history as pure decisions, no I/O: which point a job's status stands for,
 * and how a new point enters a bounded series so that it stays evenly thinned with its first
 * and newest points kept and the points where the ring re-formed preferred. The recorder
 * (recorder.c) applies the decisions to etcd; every replica's view mirrors what it wrote.
 * tests/unit/test_server_history.c pins the rules down. */
#ifndef KOLO_SERVER_HISTORY_H
#define KOLO_SERVER_HISTORY_H

#include <stddef.h>

#include "kolo/v1/job.pb-c.h"

#define KOLO_SERVER_HISTORY_DEFAULT_POINTS 2000
#define KOLO_SERVER_HISTORY_MIN_POINTS 3
#define KOLO_SERVER_HISTORY_MAX_POINTS 100000

/* The point status stands for now (step, time, loss, accuracy, samples/s, ring size, epoch).
 * (accuracy, train_accuracy and test_accuracy as the status has them). Returns 0 (and leaves
 * *out alone) when it has no progress yet (step 0). */
int kolo_server_history_point_of(const Kolo__V1__JobStatus *status, Kolo__V1__MetricPoint *out);

/* Whether point p opens a new ring epoch compared with the point before it. */
int kolo_server_history_is_reform(const Kolo__V1__MetricPoint *before,
                                  const Kolo__V1__MetricPoint *p);

typedef enum kolo_server_history_action {
  KOLO_SERVER_HISTORY_SKIP = 0, /* nothing new (same or older step, same values) */
  KOLO_SERVER_HISTORY_APPEND,   /* add the point after the last one */
  KOLO_SERVER_HISTORY_REPLACE,  /* the point takes the last one's place (the last was a
                                   provisional newest point, closer to its predecessor than
                                   the series' spacing) */
} kolo_server_history_action;

typedef struct kolo_server_history_plan {
  kolo_server_history_action action;
  long drop; /* APPEND: index of the point to remove so the series keeps max points, else -1 */
} kolo_server_history_plan;

/* How next enters series[0..n) (ordered by step, at most max points, max >= 3):
 *  - a step not above the last one is skipped, unless it is the same step with other values
 *    (a final accuracy, a new epoch): then it replaces the last point;
 *  - the newest point is provisional: while the last two points are closer than the spacing
 *    of the rest ((last fixed - first) / (max - 1)), a new one replaces the last instead of
 *    being appended, so the tail is never denser than the whole (re-form points are never
 *    provisional);
 *  - past max points, the interior point whose neighbours are closest is dropped (never the
 *    first or the newest; re-form points only if nothing else is left; ties: the oldest),
 *    which keeps the spacing within about a factor of two across the series. */
kolo_server_history_plan kolo_server_history_plan_next(const Kolo__V1__MetricPoint *const *series,
                                                       size_t n, const Kolo__V1__MetricPoint *next,
                                                       size_t max);

#endif
