/* The monotonic clock in nanoseconds and deadlines on it (common/clock.c):
 * every network wait in kolo has a deadline made here. */
#ifndef KOLO_COMMON_CLOCK_H
#define KOLO_COMMON_CLOCK_H

#include <stdint.h>

/* Monotonic clock in nanoseconds, and a deadline that far in the future. */
int64_t kolo_now_ns(void);
int64_t kolo_deadline_after_ms(int64_t milliseconds);
/* Milliseconds left until deadline_ns, clamped to [0, INT32_MAX]. */
int kolo_ms_until(int64_t deadline_ns);

#endif
