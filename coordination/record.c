/* Implementation of coordination/record.h. */
#include "coordination/record.h"

#include <stdarg.h>
#include <stdio.h>

kolo_status kolo_record_fail(kolo_status rc, char *err, size_t err_len, const char *fmt, ...) {
  if (err != NULL && err_len > 0) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, err_len, fmt, args);
    va_end(args);
  }
  return rc;
}
