/* kolo-nego-bench: the negotiation's own computation for one steady-state step
 * of ResNet-50's 161 named gradients on 2 ranks, without threads, sockets or a
 * clock in the loop: both ranks' replicated tables live in this process, and a
 * cycle is what each rank's negotiator computes (collective/engine.c's
 * build_message and run_cycle): look up every submitted name's cache bit, encode
 * the message, decode both ranks' messages, apply them to the table and take
 * the 161 ready names. Rank 0 submits in backward order, rank 1 in parameter
 * order (as kolo-engine-bench does). The first cycle announces the names; every
 * later one is the steady state (161 cache bits, ~21 bytes per rank).
 *
 * Prints the per-rank cost of a steady-state cycle: the fastest and the median
 * of R rounds of N cycles (wall clock; on a loaded machine the fastest round is
 * the one least disturbed). bench/run_negotiation.sh runs it natively and under
 * callgrind (instructions per cycle), which gives this CPU's instructions per
 * second on exactly this code, to convert the engine's instruction counts.
 * Usage: kolo-nego-bench [-n CYCLES] [-r ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collective/exec/exec.h"
#include "collective/engine/negotiate.h"
#include "resnet50.h"

#define RANKS 2

typedef struct rank_state {
  kolo_nego_table *table;
  kolo_nego_decision decision;
  kolo_nego_buffer out;
  uint8_t bits[(TENSORS + 7) / 8 + 1];
  kolo_nego_announce announces[TENSORS];
} rank_state;

static kolo_nego_meta meta_of(int t) {
  return (kolo_nego_meta){.kind = KOLO_REQUEST_ALLREDUCE,
                          .dtype = KOLO_FLOAT32,
                          .op = KOLO_SUM,
                          .members = 1,
                          .count = resnet50[t].count};
}

static void must(kolo_status status, const char *what) {
  if (status == KOLO_OK) return;
  fprintf(stderr, "kolo-nego-bench: %s: %s\n", what, kolo_strerror(status));
  exit(1);
}

/* What rank r's negotiator sends: cache bits for cached names, else the name. */
static void build(rank_state *s, int r) {
  kolo_nego_message m = {0};
  uint32_t bit_bytes = (kolo_nego_bits_used(s->table) + 7) / 8;
  memset(s->bits, 0, sizeof s->bits);
  for (int k = 0; k < TENSORS; k++) {
    int t = r == 0 ? TENSORS - 1 - k : k;
    kolo_nego_meta meta = meta_of(t);
    int32_t bit = kolo_nego_cached_bit(s->table, resnet50[t].name, r, &meta);
    if (bit >= 0) {
      s->bits[bit / 8] |= (uint8_t)(1u << (bit % 8));
      continue;
    }
    s->announces[m.announce_count++] = (kolo_nego_announce){
        .name = resnet50[t].name, .name_length = strlen(resnet50[t].name), .meta = meta};
  }
  m.bits = s->bits;
  m.bit_bytes = bit_bytes;
  m.announces = s->announces;
  s->out.length = 0;
  must(kolo_nego_encode(&m, &s->out), "encode");
}

/* One cycle on every rank; returns the names rank 0 found ready. */
static size_t cycle(rank_state *ranks, int64_t now) {
  for (int r = 0; r < RANKS; r++) build(&ranks[r], r);
  for (int r = 0; r < RANKS; r++) {
    kolo_nego_message messages[RANKS];
    for (int from = 0; from < RANKS; from++) {
      must(kolo_nego_decode(ranks[from].out.data, ranks[from].out.length, &messages[from]),
           "decode");
    }
    must(kolo_nego_apply(ranks[r].table, messages, now, &ranks[r].decision), "apply");
    for (int from = 0; from < RANKS; from++) kolo_nego_message_free(&messages[from]);
  }
  return ranks[0].decision.ready_count;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int cycles = 2000, rounds = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-n") == 0)
      cycles = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "-r") == 0)
      rounds = atoi(argv[i + 1]);
    else
      cycles = 0; /* unknown flag: the usage below */
  }
  if (argc % 2 == 0 || cycles < 1 || cycles > 10000000 || rounds < 1 || rounds > 1000) {
    fprintf(stderr, "usage: kolo-nego-bench [-n CYCLES 1..10000000] [-r ROUNDS 1..1000]\n");
    return 2;
  }
  rank_state ranks[RANKS];
  memset(ranks, 0, sizeof ranks);
  for (int r = 0; r < RANKS; r++)
    must(kolo_nego_table_create(RANKS, 4096, &ranks[r].table), "table");
  size_t first = cycle(ranks, 0); /* the names, by name */
  size_t ready = cycle(ranks, 1); /* the first steady-state cycle */
  if (first != TENSORS || ready != TENSORS) {
    fprintf(stderr, "kolo-nego-bench: %zu then %zu names ready, want %d\n", first, ready, TENSORS);
    return 1;
  }
  double *per_cycle = calloc((size_t)rounds, sizeof *per_cycle);
  for (int round = 0; round < rounds; round++) {
    double started = now_ns();
    for (int c = 0; c < cycles; c++) ready += cycle(ranks, c);
    per_cycle[round] = (now_ns() - started) / cycles / RANKS;
  }
  qsort(per_cycle, (size_t)rounds, sizeof *per_cycle, compare_doubles);
  printf(
      "nego_bench tensors %d ranks %d cycles %d rounds %d bytes_per_message %zu "
      "ns_per_rank_cycle_min %.0f ns_per_rank_cycle_median %.0f ready %zu\n",
      TENSORS, RANKS, cycles, rounds, ranks[0].out.length, per_cycle[0], per_cycle[rounds / 2],
      ready);
  for (int r = 0; r < RANKS; r++) {
    kolo_nego_decision_free(&ranks[r].decision);
    kolo_nego_table_destroy(ranks[r].table);
    kolo_nego_buffer_free(&ranks[r].out);
  }
  free(per_cycle);
  return 0;
}
