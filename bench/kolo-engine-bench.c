/* kolo-engine-bench: one training step's gradients through the named engine, the
 * issue #13 benchmark. Run under kolorun -np 2 (bench/run_engine.sh interleaves
 * the modes and takes medians). A step is ResNet-50's 161 float32 gradient
 * tensors (torchvision's resnet50, parameter order, 25,557,032 elements):
 *   fused     named async all-reduces, rank 0 in backward order (fc first),
 *             rank 1 in parameter order, then waits for all (fusion + cache on);
 *   separate  the same tensors as 161 blocking kolo_allreduce calls (same order
 *             on every rank, as blocking calls must be);
 *   floor     one blocking kolo_allreduce of the same total (one buffer).
 * Prints one line per run: mode, median step ms over the measured steps, and for
 * fused the negotiation per step from kolo_engine_stats (cycles; wall time in
 * cycles, which includes waiting for the other rank's message; the part of it
 * spent computing; bytes sent). The step includes the named sync before it (one
 * cycle of its own), so the per-step figures cover it too.
 * Usage: kolo-engine-bench MODE [-w WARMUP] [-n STEPS] [-s SCALE_DIVISOR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kolo/engine.h"
#include "resnet50.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void must(kolo_status status, const char *what) {
  if (status == KOLO_OK) return;
  fprintf(stderr, "kolo-engine-bench: %s: %s\n", what, kolo_strerror(status));
  exit(1);
}

static float *buffers[TENSORS];
static size_t counts[TENSORS];

static void step_fused(kolo_comm *comm, int rank) {
  kolo_request *requests[TENSORS];
  for (int k = 0; k < TENSORS; k++) {
    int t = rank == 0 ? TENSORS - 1 - k : k; /* opposite orders */
    must(kolo_allreduce_named(comm, resnet50[t].name, buffers[t], buffers[t], counts[t],
                              KOLO_FLOAT32, KOLO_SUM, 1.0, 1.0, &requests[t]),
         resnet50[t].name);
  }
  for (int t = 0; t < TENSORS; t++) must(kolo_wait(requests[t]), "wait");
}

static void step_separate(kolo_comm *comm) {
  for (int t = TENSORS - 1; t >= 0; t--) {
    must(kolo_allreduce(comm, buffers[t], buffers[t], counts[t], KOLO_FLOAT32, KOLO_SUM),
         "allreduce");
  }
}

int main(int argc, char **argv) {
  if (argc < 2 ||
      (strcmp(argv[1], "fused") && strcmp(argv[1], "separate") && strcmp(argv[1], "floor"))) {
    fprintf(stderr,
            "usage: kolo-engine-bench fused|separate|floor [-w WARMUP] [-n STEPS] [-s DIVISOR]\n");
    return 2;
  }
  const char *mode = argv[1];
  int warmup = 3, steps = 10;
  size_t divisor = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-w") == 0)
      warmup = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "-n") == 0)
      steps = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "-s") == 0)
      divisor = (size_t)strtoull(argv[i + 1], NULL, 10);
    else {
      fprintf(stderr, "kolo-engine-bench: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (steps < 1 || steps > 10000 || warmup < 0 || divisor < 1) {
    fprintf(stderr, "kolo-engine-bench: need -n 1..10000, -w >= 0, -s >= 1\n");
    return 2;
  }
  size_t total = 0;
  for (int t = 0; t < TENSORS; t++) {
    counts[t] = (resnet50[t].count + divisor - 1) / divisor;
    total += counts[t];
  }
  float *all = malloc(total * sizeof(float));
  if (all == NULL) must(KOLO_ERR_NO_MEMORY, "buffers");
  for (size_t i = 0; i < total; i++) all[i] = (float)(i % 7);
  size_t at = 0;
  for (int t = 0; t < TENSORS; t++) {
    buffers[t] = all + at;
    at += counts[t];
  }
  kolo_comm *comm = NULL;
  must(kolo_comm_create_from_env(&comm), "kolo_comm_create_from_env");
  int rank = kolo_comm_rank(comm);
  double *times = calloc((size_t)steps, sizeof *times);
  kolo_engine_stats before = {0}, after = {0};
  for (int s = 0; s < warmup + steps; s++) {
    if (s == warmup) kolo_engine_stats_get(comm, &before);
    /* line the ranks up so a step measures the step, not the other rank's lag */
    if (strcmp(mode, "fused") == 0) {
      float token = 0;
      kolo_request *sync;
      must(kolo_allreduce_named(comm, "bench.sync", &token, &token, 1, KOLO_FLOAT32, KOLO_SUM, 1, 1,
                                &sync),
           "sync");
      must(kolo_wait(sync), "sync");
    } else {
      must(kolo_barrier(comm), "barrier");
    }
    double started = now_ms();
    if (strcmp(mode, "fused") == 0)
      step_fused(comm, rank);
    else if (strcmp(mode, "separate") == 0)
      step_separate(comm);
    else
      must(kolo_allreduce(comm, all, all, total, KOLO_FLOAT32, KOLO_SUM), "allreduce");
    if (s >= warmup) times[s - warmup] = now_ms() - started;
  }
  kolo_engine_stats_get(comm, &after);
  qsort(times, (size_t)steps, sizeof *times, compare_doubles);
  if (rank == 0 || strcmp(mode, "fused") == 0) {
    double cycles = (double)(after.cycles - before.cycles) / steps;
    double nego_us = (double)(after.negotiation_ns - before.negotiation_ns) / 1e3 / steps;
    double bytes = (double)(after.negotiation_bytes - before.negotiation_bytes) / steps;
    double work_us = (double)(after.negotiation_work_ns - before.negotiation_work_ns) / 1e3 / steps;
    printf(
        "rank %d mode %s tensors %d bytes %zu step_ms %.3f cycles_per_step %.2f "
        "negotiation_us_per_step %.1f negotiation_work_us_per_step %.1f "
        "negotiation_bytes_per_step %.0f batches_per_step %.2f\n",
        rank, mode, TENSORS, total * sizeof(float), times[steps / 2], cycles, nego_us, work_us,
        bytes, (double)(after.batches - before.batches) / steps);
  }
  kolo_comm_destroy(comm);
  free(times);
  free(all);
  return 0;
}
