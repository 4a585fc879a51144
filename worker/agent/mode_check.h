/* The agent's check that a training process runs the mode its job asked for (issue 26:
 * nobody silently runs another mode). The process acknowledges its mode with the agent
 * protocol's MODE line (kolo_elastic_acknowledge_mode); for a job whose mode is not SYNC,
 * the check fails the process when its first progress REPORT (one with a "step"), or a
 * successful exit, comes before a matching MODE line, or when MODE names another mode
 * (for a SYNC job too). A process of agent protocol version 1 or 2 cannot say MODE: it
 * acknowledges nothing. A process that crashes (exits non-zero) before acknowledging is
 * not judged here: its crash is the reason, reported as ever. Pure: no I/O; the agent
 * stops the process and reports the failure (permanent: the job fails at once). */
#ifndef KOLO_AGENT_MODE_CHECK_H
#define KOLO_AGENT_MODE_CHECK_H

#include <stddef.h>

#include "common/agent_proto.h"
#include "kolo/mode.h"

#define KOLO_AGENT_MODE_REASON 400 /* bytes of a failure's reason, its NUL included */

typedef struct kolo_agent_mode_check {
  kolo_mode expected;                   /* the job's mode */
  kolo_mode acknowledged;               /* 0 until MODE */
  int version;                          /* the process's agent protocol version (HELLO); 0 before */
  char failure[KOLO_AGENT_MODE_REASON]; /* "" while the process passes */
} kolo_agent_mode_check;

/* A fresh check for a process of a job in mode expected. */
void kolo_agent_mode_check_start(kolo_agent_mode_check *check, kolo_mode expected);

/* Takes one message of the process (has_step: a REPORT whose object has "step"). Returns
 * 1 when the process fails the check with this message (the reason is in check->failure;
 * only the first failure counts), 0 otherwise. */
int kolo_agent_mode_check_msg(kolo_agent_mode_check *check, const kolo_agent_msg *msg,
                              int has_step);

/* The process exited with code: 1 when that fails the check (see above), 0 otherwise. */
int kolo_agent_mode_check_exit(kolo_agent_mode_check *check, int code);

#endif
