/* kolo-worker: the agent process. Blocks the stop signals before any thread
 * exists (the agent reads them from a signalfd) and runs the agent. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#include "worker/agent/agent.h"

int main(int argc, char **argv) {
  kolo_agent_options opts;
  char err[512] = "";
  kolo_status rc = kolo_agent_options_parse(argc, argv, &opts, err, sizeof err);
  if (rc == KOLO_ERR_ABORTED) return 0;
  if (rc != KOLO_OK) {
    fprintf(stderr, "kolo-worker: %s\n", err);
    kolo_agent_options_usage(stderr);
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &signals, NULL);
  signal(SIGPIPE, SIG_IGN);
  return kolo_agent_run(&opts) == KOLO_OK ? 0 : 1;
}
