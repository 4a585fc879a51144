/* The elastic state behind kolo_elastic (include/kolo/elastic.h), collective/elastic.c's alone
 * (elastic_hold.c is handed the few members the hold touches). Internal to libkolo. */
#ifndef KOLO_COLLECTIVE_ELASTIC_INTERNAL_H
#define KOLO_COLLECTIVE_ELASTIC_INTERNAL_H

#include <pthread.h>

#include "collective/state_sync.h"
#include "common/agent_proto.h"
#include "kolo/elastic.h"

#define MAX_BUFFERS 256

/* A RING message as parsed (it owns its strings). */
typedef struct ring_announcement {
  kolo_agent_msg msg;
  uint64_t epoch;
  int planned;          /* switch at the next commit instead of aborting the current ring */
  int64_t switch_by_ns; /* planned: abort the current ring if no commit came by then (0: none) */
} ring_announcement;

typedef kolo_state_buffer state_buffer; /* collective/state_sync.h */

struct kolo_elastic {
  int agent_fd; /* -1 without an agent */
  pthread_t reader;
  int reader_started;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  kolo_comm *comm;
  ring_announcement *pending; /* newest announced ring not yet formed */
  int stop_requested;
  int leave_requested; /* LEAVE: stop at the next commit */
  int refused;         /* REFUSED: the agent does not speak our protocol version */
  int agent_gone;
  int reconfigurations;
  uint64_t commits; /* kolo_elastic_commit calls: a process that never commits waits for none */
  state_buffer buffers[MAX_BUFFERS];
  int buffer_count;
  kolo_elastic_reset_fn reset;
  void *reset_user;
  pthread_mutex_t write_mutex;
  int cuda_device; /* >= 0: the rings are in CUDA mode on this device (carried across re-forms) */
  int held;        /* HOLD: the agent's partition fence holds the process (elastic_hold.c) */
};

/* elastic_agent.c: the link to the agent. */
void kolo_elastic_free_announcement(ring_announcement *ring);
kolo_status kolo_elastic_send_line(kolo_elastic *elastic, const char *line);
/* Formats msg and sends it (a message that cannot be formatted is a bug: logged). */
kolo_status kolo_elastic_send_msg(kolo_elastic *elastic, const kolo_agent_msg *msg);
/* The reader thread's body (argument: the kolo_elastic); returns when the socket closes. */
void *kolo_elastic_reader_main(void *argument);

#endif
