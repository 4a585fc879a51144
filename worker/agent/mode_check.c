/* Implementation of mode_check.h: a three-state judgement per process (waiting for MODE,
 * acknowledged, failed), its reasons worded for the job's FAILED error. */
#include "worker/agent/mode_check.h"

#include <stdio.h>
#include <string.h>

void kolo_agent_mode_check_start(kolo_agent_mode_check *check, kolo_mode expected) {
  memset(check, 0, sizeof *check);
  check->expected = expected;
}

/* The process did something a program of the expected mode acknowledges first. */
static int unacknowledged(kolo_agent_mode_check *c, const char *what) {
  if (c->expected == KOLO_MODE_SYNC || c->acknowledged != 0 || c->failure[0]) return 0;
  const char *name = kolo_mode_name(c->expected);
  if (c->version > 0 && c->version < 3)
    snprintf(c->failure, sizeof c->failure,
             "the program did not acknowledge mode %s (it would have run SYNC): its libkolo "
             "speaks agent protocol version %d, which cannot; use a libkolo and kolo package "
             "of this kolo (%s before acknowledging)",
             name, c->version, what);
  else
    snprintf(c->failure, sizeof c->failure,
             "the program did not acknowledge mode %s (it would have run SYNC): use "
             "kolo.torch's DistributedOptimizer or call kolo_elastic_acknowledge_mode() "
             "(%s before acknowledging)",
             name, what);
  return 1;
}

int kolo_agent_mode_check_msg(kolo_agent_mode_check *c, const kolo_agent_msg *msg, int has_step) {
  if (c->failure[0]) return 0;
  switch (msg->verb) {
    case KOLO_AGENT_HELLO:
      c->version = msg->hello.version;
      return 0;
    case KOLO_AGENT_MODE:
      if ((kolo_mode)msg->mode.mode != c->expected) {
        snprintf(c->failure, sizeof c->failure,
                 "the program runs mode %s, but the job asked for mode %s",
                 kolo_mode_name((kolo_mode)msg->mode.mode), kolo_mode_name(c->expected));
        return 1;
      }
      c->acknowledged = c->expected;
      return 0;
    case KOLO_AGENT_REPORT:
      return has_step ? unacknowledged(c, "it reported progress") : 0;
    default:
      return 0;
  }
}

int kolo_agent_mode_check_exit(kolo_agent_mode_check *c, int code) {
  if (code != 0) return 0; /* a crash: its own reason */
  return unacknowledged(c, "it finished");
}
