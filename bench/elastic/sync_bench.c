/* The state sync alone (issue 28's joiner): kolo_sync_buffers of one STATE_MB MiB
 * buffer on every rank, timed from a barrier to the slowest rank's return.
 * "join": the last rank holds other bytes (a newcomer); "loss": every rank holds
 * rank 0's (the survivors after a loss, in SYNC). KOLO_STATE_SYNC=root times the
 * old path (every byte broadcast from rank 0 around the ring). Prints
 * "SYNC <mode> <ms>" per round on rank 0. Run by bench/elastic/sync.py.
 *
 * Usage: sync_bench STATE_MB ROUNDS join|loss */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kolo/elastic.h"
#include "kolo/kolo.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  size_t bytes = (size_t)atoll(argv[1]) << 20;
  int rounds = atoi(argv[2]), join = strcmp(argv[3], "join") == 0;
  kolo_comm *comm = NULL;
  if (kolo_comm_create_from_env(&comm) != KOLO_OK) return 1;
  int rank = kolo_comm_rank(comm), n = kolo_comm_size(comm);
  unsigned char *state = malloc(bytes);
  if (state == NULL) return 1;
  for (int r = 0; r < rounds; r++) {
    unsigned char seed = (unsigned char)(r + ((join && rank == n - 1) ? 100 : 0));
    for (size_t i = 0; i < bytes; i += 4096) memset(state + i, seed + (int)(i >> 12), 4096);
    void *buffers[1] = {state};
    size_t sizes[1] = {bytes};
    if (kolo_barrier(comm) != KOLO_OK) return 1;
    double start = now_ms();
    if (kolo_sync_buffers(comm, buffers, sizes, 1, NULL) != KOLO_OK) return 1;
    double took = now_ms() - start, slowest = 0;
    if (kolo_allreduce(comm, &took, &slowest, 1, KOLO_FLOAT64, KOLO_MAX) != KOLO_OK) return 1;
    if (rank == 0) printf("SYNC %s %.2f\n", argv[3], slowest);
    fflush(stdout);
  }
  free(state);
  kolo_comm_destroy(comm);
  return 0;
}
