/* The monotonic clock and deadlines every wait in kolo is measured by. */
#include "common/clock.h"

#include <stdint.h>
#include <time.h>

int64_t kolo_now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
}

int64_t kolo_deadline_after_ms(int64_t milliseconds) {
  return kolo_now_ns() + milliseconds * 1000000LL;
}

int kolo_ms_until(int64_t deadline_ns) {
  int64_t left = deadline_ns - kolo_now_ns();
  if (left <= 0) return 0;
  left = (left + 999999) / 1000000;
  return left > INT32_MAX ? INT32_MAX : (int)left;
}
