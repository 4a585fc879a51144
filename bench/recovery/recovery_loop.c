/* The training loop the recovery benchmark runs as its exec program: every
 * step all-reduces a small vector and commits, and prints
 * "STEP <epoch> <step> <unix_ms>" once the step is done, so the benchmark can
 * see the first step completed on a new ring and count steps done twice. The
 * lines go to $KOLO_STEP_DIR/$KOLO_WORKER_ID.steps when KOLO_STEP_DIR is set
 * (one file per worker, appended across processes), else to stdout. Built by
 * run.py against libkolo.
 *
 * KOLO_STATE_MB=N adds N MiB of state (bench/elastic/joiner.py: what a newcomer
 * must receive), registered and committed with the step; each step changes one
 * word of it, so a newcomer's fresh copy differs from the survivors'.
 *
 * Usage: recovery_loop STEPS LENGTH STEP_DELAY_MS */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

#include "kolo/elastic.h"

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: recovery_loop STEPS LENGTH STEP_DELAY_MS\n");
    return 2;
  }
  int64_t steps = atoll(argv[1]);
  size_t length = (size_t)atoll(argv[2]);
  long delay_ms = atol(argv[3]);
  kolo_elastic *elastic = NULL;
  kolo_status status = kolo_elastic_create(&elastic);
  if (status != KOLO_OK) {
    fprintf(stderr, "recovery_loop: %s\n", kolo_strerror(status));
    return 1;
  }
  const char *dir = getenv("KOLO_STEP_DIR"), *worker = getenv("KOLO_WORKER_ID");
  FILE *out = stdout;
  if (dir != NULL && worker != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.steps", dir, worker);
    out = fopen(path, "a");
    if (out == NULL) out = stdout;
  }
  double *vector = calloc(length ? length : 1, sizeof *vector);
  int64_t step = 0;
  kolo_elastic_register(elastic, &step, sizeof step);
  const char *state_mb = getenv("KOLO_STATE_MB");
  size_t state_words = state_mb ? (size_t)atoll(state_mb) * 1024 * 1024 / sizeof(uint64_t) : 0;
  uint64_t *state = malloc(state_words ? state_words * sizeof *state : 1);
  for (size_t i = 0; i < state_words; i++) state[i] = i * 0x9E3779B97F4A7C15ull;
  if (state_words) kolo_elastic_register(elastic, state, state_words * sizeof *state);
  status = kolo_elastic_sync(elastic);
  while (step < steps && !kolo_elastic_should_stop(elastic)) {
    if (status != KOLO_OK) {
      status = kolo_elastic_reform(elastic);
      if (status != KOLO_OK && status != KOLO_ERR_PEER_LOST && status != KOLO_ERR_ABORTED) break;
      continue;
    }
    for (size_t i = 0; i < length; i++) vector[i] = (double)step;
    status =
        kolo_allreduce(kolo_elastic_comm(elastic), vector, vector, length, KOLO_FLOAT64, KOLO_SUM);
    if (status != KOLO_OK) continue;
    step++;
    if (state_words) state[(size_t)step % state_words] += (uint64_t)step;
    status = kolo_elastic_commit(elastic);
    fprintf(out, "STEP %llu %lld %lld\n",
            (unsigned long long)kolo_comm_epoch(kolo_elastic_comm(elastic)), (long long)step,
            now_ms());
    fflush(out);
    if (delay_ms > 0) {
      struct timespec pause = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
      nanosleep(&pause, NULL);
    }
  }
  free(vector);
  free(state);
  if (out != stdout) fclose(out);
  kolo_elastic_destroy(elastic);
  return step == steps ? 0 : 1;
}
