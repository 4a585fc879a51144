/* kolorun: starts N local ranks of a program with the KOLO_* environment that
 * kolo_comm_create_from_env reads, like `horovodrun -np N` or `mpirun -np N`. */
#include <stdio.h>

#include "launcher/options.h"
#include "launcher/supervise.h"

int main(int argc, char **argv) {
  kolo_launcher_options options;
  char error[256] = "";
  if (kolo_launcher_options_parse(argc, argv, &options, error, sizeof error) != KOLO_OK) {
    fprintf(stderr, "kolorun: %s (%s)\n", error, kolo_launcher_usage());
    return 2;
  }
  if (options.help) {
    printf("%s\n", kolo_launcher_usage());
    printf(
        "Starts N ranks on this host with KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK,\n"
        "KOLO_LOCAL_SIZE, KOLO_RENDEZVOUS, KOLO_SECRET and KOLO_EPOCH set; prefixes\n"
        "each output line with [rank]; stops all ranks when one fails.\n"
        "  --timeout S  stop everything after S seconds (exit 124)\n"
        "  --host H     address for the rendezvous and KOLO_HOST (default 127.0.0.1)\n"
        "  --mode M     the training mode every rank runs: SYNC, ASYNC, LOCAL_SGD or DILOCO\n"
        "               (KOLO_MODE* for kolo_mode_from_env, include/kolo/mode.h; without\n"
        "               --mode, the KOLO_MODE* environment kolorun was given passes through)\n"
        "  --sync-every N       ASYNC: steps between averages; LOCAL_SGD, DILOCO: inner steps\n"
        "  --max-staleness N    ASYNC: averaging rounds a rank may have outstanding\n"
        "  --outer-lr X, --outer-momentum X, --nesterov 0|1   DILOCO's outer optimizer\n"
        "  --compression none|fp16|int8, --fragments N        LOCAL_SGD, DILOCO\n"
        "               (each defaults to the mode's default; docs/API.md, Training modes)\n");
    return 0;
  }
  return kolo_launcher_run(&options);
}
