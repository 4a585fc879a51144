/* Error-propagation macros in the style of NCCL's checks.h: a return form and a
 * goto form. Log once where an error starts, not at every level it passes. */
#ifndef KOLO_COMMON_CHECKS_H
#define KOLO_COMMON_CHECKS_H

#include "kolo/status.h"

/* Returns the status from the enclosing function if call fails. */
#define KOLO_CHECK(call)                                \
  do {                                                  \
    kolo_status check_status_ = (call);                 \
    if (check_status_ != KOLO_OK) return check_status_; \
  } while (0)

/* Stores the status in rc and jumps to label if call fails. */
#define KOLO_CHECK_GOTO(call, rc, label) \
  do {                                   \
    (rc) = (call);                       \
    if ((rc) != KOLO_OK) goto label;     \
  } while (0)

/* Sets rc to code and jumps to label when cond is false. */
#define KOLO_REQUIRE_GOTO(cond, code, rc, label) \
  do {                                           \
    if (!(cond)) {                               \
      (rc) = (code);                             \
      goto label;                                \
    }                                            \
  } while (0)

#endif
