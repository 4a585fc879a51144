/* elastic_loop (tests/integration/elastic_loop.c) with its state and its
 * all-reduce in GPU memory: the ring is put in CUDA mode once, the accumulator
 * registered with kolo_elastic lives on the device, each step all-reduces a
 * device contribution over NCCL and adds it to the accumulator. A re-form must
 * keep CUDA mode (else device pointers reach the TCP ring) and commit/restore
 * the device state with CUDA copies (a host memcpy of device memory faults);
 * the result is exact only if no step is lost or counted twice. Same command
 * line and output as elastic_loop, so test_elastic can drive it
 * (KOLO_ELASTIC_LOOP). KOLO_TEST_OWN_HOSTID=1 gives this process its own
 * NCCL_HOSTID, so processes of one test can share one GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kolo/elastic.h"
#include "kolo_nccl.h"

static double step_value(int64_t step, size_t index) {
  return (double)((step * 7 + (int64_t)index) % 13);
}

static void own_hostid(void) {
  const char *own = getenv("KOLO_TEST_OWN_HOSTID");
  if (own == NULL || own[0] != '1') return;
  char host[64];
  snprintf(host, sizeof host, "kolo-elastic-%d", (int)getpid());
  setenv("NCCL_HOSTID", host, 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("NCCL_SHM_DISABLE", "1", 0);
  setenv("NCCL_P2P_DISABLE", "1", 0);
}

/* accumulator (device) += contribution (device), through host copies. */
static kolo_status accumulate(double *acc_dev, const double *contribution_dev, double *a, double *c,
                              size_t length) {
  kolo_status st = kolo_nccl_copy_to_host(a, acc_dev, length * sizeof *a);
  if (st == KOLO_OK) st = kolo_nccl_copy_to_host(c, contribution_dev, length * sizeof *c);
  for (size_t i = 0; st == KOLO_OK && i < length; i++) a[i] += c[i];
  if (st == KOLO_OK) st = kolo_nccl_copy_to_device(acc_dev, a, length * sizeof *a);
  return st;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: kolo-gpu-elastic-loop STEPS LENGTH COMMIT_EVERY [STEP_DELAY_MS]\n");
    return 2;
  }
  own_hostid();
  int64_t steps = atoll(argv[1]);
  size_t length = (size_t)atoll(argv[2]);
  int64_t commit_every = atoll(argv[3]);
  long delay_ms = argc > 4 ? atol(argv[4]) : 0;
  if (steps < 0 || length == 0 || commit_every < 1) return 2;
  kolo_elastic *elastic = NULL;
  kolo_status status = kolo_elastic_create(&elastic);
  if (status == KOLO_OK)
    status = kolo_comm_use_cuda(kolo_elastic_comm(elastic), KOLO_CUDA_LOCAL_DEVICE);
  int device = 0;
  int count = 0;
  if (status == KOLO_OK && kolo_nccl_device_count(&count, NULL, 0) == KOLO_OK)
    device = kolo_comm_local_rank(kolo_elastic_comm(elastic)) % count;
  double *acc_dev = NULL, *contribution_dev = NULL;
  double *a = calloc(length, sizeof *a), *c = calloc(length, sizeof *c);
  if (status == KOLO_OK)
    status = kolo_nccl_device_alloc(device, length * sizeof *a, (void **)&acc_dev);
  if (status == KOLO_OK)
    status = kolo_nccl_device_alloc(device, length * sizeof *c, (void **)&contribution_dev);
  if (status == KOLO_OK) status = kolo_nccl_copy_to_device(acc_dev, a, length * sizeof *a);
  if (status != KOLO_OK || a == NULL || c == NULL) {
    fprintf(stderr, "kolo-gpu-elastic-loop: setup: %s\n", kolo_strerror(status));
    kolo_nccl_device_free(contribution_dev);
    kolo_nccl_device_free(acc_dev);
    free(c);
    free(a);
    kolo_elastic_destroy(elastic);
    return 1;
  }
  int64_t step = 0;
  kolo_elastic_register(elastic, &step, sizeof step);
  kolo_elastic_register(elastic, acc_dev, length * sizeof *a);
  status = kolo_elastic_sync(elastic);
  while (status == KOLO_OK || status == KOLO_ERR_RING_CHANGED || status == KOLO_ERR_PEER_LOST ||
         status == KOLO_ERR_ABORTED || status == KOLO_ERR_TIMEOUT) {
    if (status != KOLO_OK) {
      if (kolo_elastic_should_stop(elastic)) break;
      status = kolo_elastic_reform(elastic);
      continue;
    }
    if (step >= steps) break;
    for (size_t i = 0; i < length; i++) c[i] = step_value(step, i);
    status = kolo_nccl_copy_to_device(contribution_dev, c, length * sizeof *c);
    if (status == KOLO_OK)
      status = kolo_allreduce(kolo_elastic_comm(elastic), contribution_dev, contribution_dev,
                              length, KOLO_FLOAT64, KOLO_AVG);
    if (status != KOLO_OK) continue;
    if ((status = accumulate(acc_dev, contribution_dev, a, c, length)) != KOLO_OK) break;
    step++;
    if (step % commit_every == 0 || step == steps) {
      status = kolo_elastic_commit(elastic);
      char report[128];
      snprintf(report, sizeof report, "{\"step\":%lld,\"total_steps\":%lld}", (long long)step,
               (long long)steps);
      kolo_elastic_report(elastic, report);
    }
    if (delay_ms > 0) {
      struct timespec pause = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
      nanosleep(&pause, NULL);
    }
  }
  int ok = status == KOLO_OK && step == steps &&
           kolo_nccl_copy_to_host(a, acc_dev, length * sizeof *a) == KOLO_OK;
  double expected_sum = 0, sum = 0;
  for (int64_t s = 0; s < steps; s++)
    for (size_t i = 0; i < length; i++) expected_sum += step_value(s, i);
  for (size_t i = 0; i < length; i++) sum += a[i];
  if (ok) {
    char line[160];
    snprintf(line, sizeof line, "RESULT %lld %.1f %d %s\n", (long long)step, sum,
             kolo_elastic_reconfigurations(elastic), sum == expected_sum ? "exact" : "WRONG");
    const char *file = getenv("KOLO_RESULT_FILE");
    FILE *out = file != NULL ? fopen(file, "a") : NULL;
    if (out != NULL) {
      fputs(line, out);
      fclose(out);
    }
    if (kolo_comm_rank(kolo_elastic_comm(elastic)) == 0) fputs(line, stdout);
  } else {
    fprintf(stderr, "kolo-gpu-elastic-loop: stopped at step %lld: %s\n", (long long)step,
            kolo_strerror(status));
  }
  kolo_nccl_device_free(acc_dev);
  kolo_nccl_device_free(contribution_dev);
  free(a);
  free(c);
  kolo_elastic_destroy(elastic);
  return ok && sum == expected_sum ? 0 : 1;
}
