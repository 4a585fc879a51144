/* An elastic training loop whose result is predictable: every step all-reduces
 * (AVG) a vector and adds it to an accumulator, committing every few steps.
 * Rank r of n contributes the step's value plus (2r - (n - 1)): the offsets sum
 * to zero over any ring, so the average is the step's value exactly only if
 * every rank's contribution entered it once (a rank reduced alone, or counted
 * twice, is off by a whole number). Whatever the ring does (ranks lost, ranks
 * joining), the final accumulator must equal the serial sum if no step is lost
 * or counted twice. Used by the elastic tests with a test agent and by the
 * worker tests.
 *
 * Usage: elastic_loop STEPS LENGTH COMMIT_EVERY [STEP_DELAY_MS]
 * Prints "RESULT <steps> <checksum> <reconfigurations>" on success (rank 0 of the
 * final ring prints it; with KOLO_RESULT_FILE set, every rank writes it there).
 * With KOLO_REFORM_FILE set, every re-form appends "REFORM <epoch> <discarded> <ms>":
 * the epoch formed, how many steps this process computed that the restored
 * commit threw away (0 when the ring changed at a commit, as for a drain), and the
 * milliseconds this process spent re-forming (the ring change noticed -> formed).
 * With KOLO_LOOP_START_DELAY_MS=D, a process started for a later ring than the first
 * (KOLO_EPOCH > 1: a newcomer) sleeps D ms before it speaks to its agent, as a Python
 * program importing torch does.
 * With KOLO_LOOP_STALL_UNTIL=E, every rank of an epoch <= E stalls at step
 * KOLO_LOOP_STALL_AT (default 10) in a collective that cannot complete with
 * every member alive (each rank broadcasts from the next rank as root, so each
 * waits for bytes nobody sends) until the ring's timeout: a ring that cannot
 * make progress although nobody died.
 * With KOLO_GATE_FILE set, the loop holds at the last commit before the end
 * (step STEPS - COMMIT_EVERY) until that file exists, committing every 20 ms
 * meanwhile, so ring changes are still taken up there (a planned ring, a LEAVE):
 * a test can keep a job running as long as it needs, however slow the machine.
 * With KOLO_LOOP_ACKNOWLEDGE=env, the loop reads the job's mode (kolo_mode_from_env) and
 * acknowledges it to the agent (kolo_elastic_acknowledge_mode) before its first step; with
 * a mode's name, it acknowledges that mode; unset, it acknowledges nothing, as a program
 * that knows nothing of modes (it computes the same sum in any mode: a test of the
 * acknowledgement's plumbing, not of a mode). Having acknowledged, its progress reports carry
 * the training mode's keys too: "mode", "rounds" (commits so far) and "bytes_sent" (what its
 * all-reduces sent: 8 bytes per value and step, a stand-in for the observability plumbing). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kolo/elastic.h"
#include "kolo/mode.h"

/* With KOLO_TRANSPORT_FILE set, appends "TRANSPORT <epoch> <rank> <host> <next> <prev>":
 * which bulk transport this rank's ring connections use (tests across hosts). */
static void note_transport(kolo_elastic *elastic) {
  const char *file = getenv("KOLO_TRANSPORT_FILE");
  FILE *out = file ? fopen(file, "a") : NULL;
  if (out == NULL) return;
  kolo_comm *comm = kolo_elastic_comm(elastic);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  fprintf(out, "TRANSPORT %llu %d %s %s %s\n", (unsigned long long)kolo_comm_epoch(comm),
          kolo_comm_rank(comm), host, kolo_comm_transport(comm, 0), kolo_comm_transport(comm, 1));
  fclose(out);
}

/* KOLO_LOOP_ACKNOWLEDGE (see above); *acknowledged is the mode told the agent (0: none). */
static kolo_status acknowledge(kolo_elastic *elastic, kolo_mode *acknowledged) {
  const char *what = getenv("KOLO_LOOP_ACKNOWLEDGE");
  *acknowledged = 0;
  if (what == NULL || what[0] == '\0') return KOLO_OK;
  kolo_mode_spec spec;
  char err[256] = "";
  kolo_status status = strcmp(what, "env") == 0 ? kolo_mode_from_env(&spec, err, sizeof err)
                                                : kolo_mode_parse(what, &spec.mode);
  if (status == KOLO_OK) status = kolo_elastic_acknowledge_mode(elastic, spec.mode);
  if (status == KOLO_OK) *acknowledged = spec.mode;
  if (status != KOLO_OK) fprintf(stderr, "elastic_loop: mode: %s %s\n", kolo_strerror(status), err);
  return status;
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* KOLO_LOOP_START_DELAY_MS (see above). */
static void start_slowly(void) {
  const char *delay = getenv("KOLO_LOOP_START_DELAY_MS"), *epoch = getenv("KOLO_EPOCH");
  long ms = delay ? atol(delay) : 0;
  if (ms <= 0 || epoch == NULL || atoll(epoch) <= 1) return;
  struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
}

static double step_value(int64_t step, size_t index) {
  return (double)((step * 7 + (int64_t)index) % 13);
}

/* Fails with the ring's timeout although every rank is alive (see above). */
static kolo_status stall(kolo_comm *comm, double *buffer, size_t length) {
  int root = (kolo_comm_rank(comm) + 1) % kolo_comm_size(comm);
  return kolo_broadcast(comm, buffer, length, KOLO_FLOAT64, root);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: elastic_loop STEPS LENGTH COMMIT_EVERY [STEP_DELAY_MS]\n");
    return 2;
  }
  int64_t steps = atoll(argv[1]);
  size_t length = (size_t)atoll(argv[2]);
  int64_t commit_every = atoll(argv[3]);
  long delay_ms = argc > 4 ? atol(argv[4]) : 0;
  if (steps < 0 || length == 0 || commit_every < 1) return 2;

  start_slowly();
  kolo_elastic *elastic = NULL;
  kolo_status status = kolo_elastic_create(&elastic);
  if (status != KOLO_OK) {
    fprintf(stderr, "elastic_loop: %s\n", kolo_strerror(status));
    return 1;
  }
  double *accumulator = calloc(length, sizeof *accumulator);
  double *contribution = calloc(length, sizeof *contribution);
  int64_t step = 0;
  kolo_elastic_register(elastic, &step, sizeof step);
  kolo_elastic_register(elastic, accumulator, length * sizeof *accumulator);
  kolo_mode mode = 0;
  status = acknowledge(elastic, &mode);
  if (status == KOLO_OK) status = kolo_elastic_sync(elastic);
  if (status == KOLO_OK) note_transport(elastic);
  const char *reform_file = getenv("KOLO_REFORM_FILE");
  const char *stall_until = getenv("KOLO_LOOP_STALL_UNTIL"),
             *stall_at = getenv("KOLO_LOOP_STALL_AT");
  uint64_t stall_epochs = stall_until ? strtoull(stall_until, NULL, 10) : 0;
  int64_t stall_step = stall_at ? atoll(stall_at) : 10;
  const char *gate = getenv("KOLO_GATE_FILE");
  int64_t gate_step = steps - commit_every;
  while (status == KOLO_OK || status == KOLO_ERR_RING_CHANGED || status == KOLO_ERR_PEER_LOST ||
         status == KOLO_ERR_ABORTED || status == KOLO_ERR_TIMEOUT) {
    if (status != KOLO_OK) {
      if (kolo_elastic_should_stop(elastic)) break;
      int64_t before = step, reform_at = now_ms();
      status = kolo_elastic_reform(elastic);
      if (status == KOLO_OK) note_transport(elastic);
      FILE *out = status == KOLO_OK && reform_file ? fopen(reform_file, "a") : NULL;
      if (out) {
        fprintf(out, "REFORM %llu %lld %lld\n",
                (unsigned long long)kolo_comm_epoch(kolo_elastic_comm(elastic)),
                (long long)(before - step), (long long)(now_ms() - reform_at));
        fclose(out);
      }
      continue;
    }
    if (step >= steps) break;
    if (gate && step == gate_step && access(gate, F_OK) != 0) {
      struct timespec pause = {0, 20 * 1000000L};
      nanosleep(&pause, NULL);
      status = kolo_elastic_commit(elastic); /* nothing changed: only takes up ring changes */
      continue;
    }
    kolo_comm *comm = kolo_elastic_comm(elastic);
    double offset = 2.0 * kolo_comm_rank(comm) - (kolo_comm_size(comm) - 1);
    for (size_t i = 0; i < length; i++) contribution[i] = step_value(step, i) + offset;
    if (kolo_comm_size(comm) > 1 && kolo_comm_epoch(comm) <= stall_epochs && step == stall_step) {
      status = stall(comm, contribution, length);
      if (status == KOLO_OK) status = KOLO_ERR_INTERNAL; /* it cannot complete */
      continue;
    }
    status = kolo_allreduce(comm, contribution, contribution, length, KOLO_FLOAT64, KOLO_AVG);
    if (status != KOLO_OK) continue;
    for (size_t i = 0; i < length; i++) accumulator[i] += contribution[i];
    step++;
    if (step % commit_every == 0 || step == steps) {
      status = kolo_elastic_commit(elastic);
      char report[256];
      int used = snprintf(report, sizeof report, "{\"step\":%lld,\"total_steps\":%lld",
                          (long long)step, (long long)steps);
      if (mode != 0)
        used +=
            snprintf(report + used, sizeof report - (size_t)used,
                     ",\"mode\":\"%s\",\"rounds\":%lld,\"bytes_sent\":%llu", kolo_mode_name(mode),
                     (long long)((step + commit_every - 1) / commit_every),
                     (unsigned long long)step * length * sizeof(double));
      snprintf(report + used, sizeof report - (size_t)used, "}");
      kolo_elastic_report(elastic, report);
    }
    if (delay_ms > 0) {
      struct timespec pause = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
      nanosleep(&pause, NULL);
    }
  }
  int ok = status == KOLO_OK && step == steps;
  double expected_sum = 0, sum = 0;
  for (int64_t s = 0; s < steps; s++) {
    for (size_t i = 0; i < length; i++) expected_sum += step_value(s, i);
  }
  for (size_t i = 0; i < length; i++) sum += accumulator[i];
  if (ok) {
    char line[160];
    snprintf(line, sizeof line, "RESULT %lld %.1f %d %s\n", (long long)step, sum,
             kolo_elastic_reconfigurations(elastic), sum == expected_sum ? "exact" : "WRONG");
    const char *file = getenv("KOLO_RESULT_FILE");
    if (file != NULL) {
      FILE *out = fopen(file, "a");
      if (out) {
        fputs(line, out);
        fclose(out);
      }
    }
    if (kolo_comm_rank(kolo_elastic_comm(elastic)) == 0) fputs(line, stdout);
  } else {
    fprintf(stderr, "elastic_loop: stopped at step %lld: %s\n", (long long)step,
            kolo_strerror(status));
  }
  free(accumulator);
  free(contribution);
  kolo_elastic_destroy(elastic);
  return ok && sum == expected_sum ? 0 : 1;
}
