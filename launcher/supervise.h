/* kolorun's supervisor: binds the rendezvous socket, starts the ranks, relays
 * their output with rank prefixes, forwards signals, and stops every rank as
 * soon as one fails. */
#ifndef KOLO_LAUNCHER_SUPERVISE_H
#define KOLO_LAUNCHER_SUPERVISE_H

#include "launcher/options.h"

/* Seconds between SIGTERM and SIGKILL when kolorun stops the ranks itself. */
#define KOLO_LAUNCHER_GRACE_S 3.0
/* Exit status after --timeout expired (the timeout(1) convention). */
#define KOLO_LAUNCHER_EXIT_TIMEOUT 124

/* Runs the job to completion. Returns kolorun's exit status: 0 when every rank
 * exited 0; the first failing rank's status (128 + signal when killed); 124 on
 * timeout; 1 when kolorun itself could not start the job. */
int kolo_launcher_run(const kolo_launcher_options *options);

#endif
