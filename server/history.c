/* Implementation of history.h. */
#include "server/history.h"

#include <stdint.h>

int kolo_server_history_point_of(const Kolo__V1__JobStatus *status, Kolo__V1__MetricPoint *out) {
  if (status == NULL || status->progress == NULL || status->progress->step == 0) return 0;
  const Kolo__V1__Progress *p = status->progress;
  kolo__v1__metric_point__init(out);
  out->step = p->step;
  out->time_unix_ms = status->updated_unix_ms;
  out->loss = p->loss;
  out->accuracy = p->accuracy;
  out->train_accuracy = p->train_accuracy;
  out->test_accuracy = p->test_accuracy;
  out->samples_per_sec = p->samples_per_sec;
  out->rounds = p->rounds;
  out->bytes_sent = p->bytes_sent;
  out->staleness = p->staleness;
  out->blocked_seconds = p->blocked_seconds;
  out->ring_size = (uint32_t)status->n_members;
  out->epoch = status->epoch;
  return 1;
}

int kolo_server_history_is_reform(const Kolo__V1__MetricPoint *before,
                                  const Kolo__V1__MetricPoint *p) {
  return before != NULL && p->epoch > before->epoch;
}

static int same_values(const Kolo__V1__MetricPoint *a, const Kolo__V1__MetricPoint *b) {
  return a->loss == b->loss && a->accuracy == b->accuracy &&
         a->train_accuracy == b->train_accuracy && a->test_accuracy == b->test_accuracy &&
         a->samples_per_sec == b->samples_per_sec && a->ring_size == b->ring_size &&
         a->epoch == b->epoch && a->rounds == b->rounds && a->bytes_sent == b->bytes_sent &&
         a->staleness == b->staleness && a->blocked_seconds == b->blocked_seconds;
}

/* The interior point to drop from series + next (n + 1 points; index n is next). */
static long victim(const Kolo__V1__MetricPoint *const *series, size_t n,
                   const Kolo__V1__MetricPoint *next) {
  long best = -1, best_marker = -1;
  uint64_t best_gap = UINT64_MAX, best_marker_gap = UINT64_MAX;
  for (size_t i = 1; i < n; i++) {
    uint64_t right = i + 1 < n ? series[i + 1]->step : next->step;
    uint64_t gap = right - series[i - 1]->step;
    if (kolo_server_history_is_reform(series[i - 1], series[i])) {
      if (gap < best_marker_gap) {
        best_marker_gap = gap;
        best_marker = (long)i;
      }
    } else if (gap < best_gap) {
      best_gap = gap;
      best = (long)i;
    }
  }
  return best >= 0 ? best : best_marker;
}

kolo_server_history_plan kolo_server_history_plan_next(const Kolo__V1__MetricPoint *const *series,
                                                       size_t n, const Kolo__V1__MetricPoint *next,
                                                       size_t max) {
  kolo_server_history_plan plan = {KOLO_SERVER_HISTORY_SKIP, -1};
  if (max < KOLO_SERVER_HISTORY_MIN_POINTS) max = KOLO_SERVER_HISTORY_MIN_POINTS;
  if (n == 0) {
    plan.action = KOLO_SERVER_HISTORY_APPEND;
    return plan;
  }
  const Kolo__V1__MetricPoint *last = series[n - 1];
  if (next->step < last->step) return plan;
  if (next->step == last->step) {
    if (!same_values(next, last)) plan.action = KOLO_SERVER_HISTORY_REPLACE;
    return plan;
  }
  if (n >= 3 && next->epoch == last->epoch) {
    const Kolo__V1__MetricPoint *fixed = series[n - 2];
    int last_is_reform = kolo_server_history_is_reform(fixed, last);
    /* the tail is provisional while (last - fixed) < (fixed - first) / (max - 1) */
    if (!last_is_reform &&
        (last->step - fixed->step) * (uint64_t)(max - 1) < fixed->step - series[0]->step) {
      plan.action = KOLO_SERVER_HISTORY_REPLACE;
      return plan;
    }
  }
  plan.action = KOLO_SERVER_HISTORY_APPEND;
  if (n + 1 > max) plan.drop = victim(series, n, next);
  return plan;
}
