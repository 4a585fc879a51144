/* One supervised training process of the kolo-worker agent: started in its own
 * process group with PR_SET_PDEATHSIG, connected back over a unix socket (the
 * agent protocol of common/agent_proto.h), stopped with STOP then signals. */
#ifndef KOLO_AGENT_PROCESS_H
#define KOLO_AGENT_PROCESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/agent_proto.h"
#include "kolo/status.h"

typedef struct kolo_agent_proc kolo_agent_proc;

typedef struct kolo_agent_spawn {
  const char *const *argv; /* argv[0] is looked up in PATH */
  const char *const *env;  /* extra "K=V" entries, NULL-terminated; may be NULL */
  const char *cwd;         /* NULL or "" = the agent's work dir */
  const char *work_dir;    /* holds the socket */
  int stdout_fd,
      stderr_fd; /* the child's stdout and stderr (the capture's pipes); -1 = /dev/null */
  int listen_fd; /* the held data-plane listener (port.h), inherited as KOLO_LISTEN_FD; <= 2: none
                  */
} kolo_agent_spawn;

/* What the process said, one parsed message at a time (lines that do not parse
 * are logged and dropped here; a HELLO of a version this agent does not speak
 * is answered with REFUSED and the connection closed, never passed on). */
typedef void (*kolo_agent_msg_fn)(const kolo_agent_msg *msg, void *user);

/* Creates the socket (<work_dir>/agent.sock), forks and execs the process with
 * KOLO_AGENT_SOCKET set. The child dies with the agent (PR_SET_PDEATHSIG) and
 * leads its own process group. */
kolo_status kolo_agent_proc_start(const kolo_agent_spawn *spawn, kolo_agent_proc **out);

/* Fds to poll (the listen socket or the connection); at most 2, returns count. */
int kolo_agent_proc_poll_fds(const kolo_agent_proc *proc, int *fds);

/* Accepts/reads whatever is ready, calling fn per complete message. Non-blocking. */
void kolo_agent_proc_service(kolo_agent_proc *proc, kolo_agent_msg_fn fn, void *user);

/* Whether the process has said HELLO (a line may be sent). */
int kolo_agent_proc_connected(const kolo_agent_proc *proc);

/* Sends one line (with its newline). KOLO_ERR_STATE before HELLO. */
kolo_status kolo_agent_proc_send(kolo_agent_proc *proc, const char *line);

/* Formats msg (agent_proto.h) and sends it; KOLO_ERR_INVALID_ARG if it would not parse. */
kolo_status kolo_agent_proc_send_msg(kolo_agent_proc *proc, const kolo_agent_msg *msg);

/* Reaps the process if it exited: 1 and *code (exit status, or 128 + signal). The
 * rest of its group is killed and the shared memory it left (/dev/shm/kolo-<pid>-*,
 * libkolo's rings) removed. */
int kolo_agent_proc_reap(kolo_agent_proc *proc, int *code);

/* After a reap: why the child could not become the program ("its program could not be
 * started: cannot execute python9: No such file or directory"), "" when it did. */
const char *kolo_agent_proc_start_error(const kolo_agent_proc *proc);

/* Whether the process ever said HELLO (accepted), whatever its connection is now. */
int kolo_agent_proc_said_hello(const kolo_agent_proc *proc);

/* The connection a HOLD could be sent on: > 0 (it changes with each accepted HELLO) while the
 * process is connected and speaks version 4 or later (libkolo's hold, agent_proto.h); 0 when
 * it is not connected, never said HELLO (a program without libkolo) or speaks an older version:
 * the fence pauses such a process with SIGSTOP. */
int kolo_agent_proc_hold_connection(const kolo_agent_proc *proc);

pid_t kolo_agent_proc_pid(const kolo_agent_proc *proc);

/* Asks the process to stop: STOP line now, SIGTERM to the group after grace_ms,
 * SIGKILL after 2 * grace_ms (kolo_agent_proc_tick escalates). */
/* Pauses (SIGSTOP) or continues (SIGCONT) the process's whole group (the partition fence). */
void kolo_agent_proc_pause(kolo_agent_proc *proc, int pause);

void kolo_agent_proc_stop(kolo_agent_proc *proc, const char *reason, int grace_ms);

/* Escalates a requested stop when its deadlines pass. */
void kolo_agent_proc_tick(kolo_agent_proc *proc);

/* Removes the shared memory left by processes started from work_dir (its
 * "children" list, written at each start) that no longer exist, and drops them
 * from the list: what a SIGKILLed agent's child left, since nobody reaped it.
 * Called when an agent starts and when it ends. */
void kolo_agent_proc_sweep_orphans(const char *work_dir);

/* Kills the whole group (SIGKILL), reaps, removes the socket and the process's
 * shared memory (as kolo_agent_proc_reap), frees. */
void kolo_agent_proc_destroy(kolo_agent_proc *proc);

#endif
