/* What the etcd records' owners (assignment.h, ringspec.h, membership.h, report.h) share:
 * a record's error goes into the caller's buffer, never into a thread-local. */
#ifndef KOLO_COORD_RECORD_H
#define KOLO_COORD_RECORD_H

#include <stddef.h>

#include "kolo/status.h"

/* Formats the error into err (when err is not NULL and err_len > 0) and returns rc (for
 * `return kolo_record_fail(...)`). */
kolo_status kolo_record_fail(kolo_status rc, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
