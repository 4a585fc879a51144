/* kolo-bench-control: gRPC load on kolo-server. T threads, each with its own channel,
 * run SubmitJob then GetJob for N jobs (ids bench-<run>-<thread>-<i>), then GetJob-only
 * for D seconds; prints throughput and p50/p90/p99 latency of each call kind.
 *   kolo-bench-control --server 127.0.0.1:7070 [--threads 4] [--jobs 200] [--seconds 10] */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/client.h"
#include "kolo/v1/job.pb-c.h"

typedef struct worker {
  const char *server;
  int index, jobs, seconds;
  unsigned run;
  double *submit_ms, *get_ms;
  size_t n_submit, n_get, cap_get;
  int errors;
  pthread_t thread;
} worker;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void push_get(worker *w, double ms) {
  if (w->n_get == w->cap_get) {
    w->cap_get = w->cap_get ? w->cap_get * 2 : 4096;
    w->get_ms = realloc(w->get_ms, w->cap_get * sizeof *w->get_ms);
  }
  w->get_ms[w->n_get++] = ms;
}

static void *run(void *arg) {
  worker *w = arg;
  kolo_cli_client *c = NULL;
  kolo_cli_client_create(w->server, NULL, getenv("KOLO_TOKEN"), 10000, &c);
  char id[64], name[] = "bench", model[] = "mlp";
  w->submit_ms = calloc((size_t)w->jobs + 1, sizeof *w->submit_ms);
  for (int i = 0; i < w->jobs; i++) {
    Kolo__V1__BuiltinProgram b = KOLO__V1__BUILTIN_PROGRAM__INIT;
    Kolo__V1__JobSpec spec = KOLO__V1__JOB_SPEC__INIT;
    snprintf(id, sizeof id, "bench-%x-%d-%d", w->run, w->index, i);
    b.model = model;
    b.epochs = 1;
    spec.name = name;
    spec.id = id;
    spec.min_workers = 1;
    spec.program_case = KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN;
    spec.builtin = &b;
    ProtobufCMessage *resp = NULL;
    kolo_cli_result r;
    double t0 = now_ms();
    kolo_cli_call(c, "/kolo.v1.JobService/SubmitJob", &spec.base, &kolo__v1__job__descriptor, &resp,
                  &r);
    w->submit_ms[w->n_submit++] = now_ms() - t0;
    if (r.code) w->errors++;
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    Kolo__V1__GetJobRequest g = KOLO__V1__GET_JOB_REQUEST__INIT;
    g.id = id;
    t0 = now_ms();
    kolo_cli_call(c, "/kolo.v1.JobService/GetJob", &g.base, &kolo__v1__job__descriptor, &resp, &r);
    push_get(w, now_ms() - t0);
    if (r.code) w->errors++;
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  }
  double end = now_ms() + w->seconds * 1000.0;
  for (int i = 0; now_ms() < end; i++) {
    Kolo__V1__GetJobRequest g = KOLO__V1__GET_JOB_REQUEST__INIT;
    snprintf(id, sizeof id, "bench-%x-%d-%d", w->run, w->index, w->jobs ? i % w->jobs : 0);
    g.id = id;
    ProtobufCMessage *resp = NULL;
    kolo_cli_result r;
    double t0 = now_ms();
    kolo_cli_call(c, "/kolo.v1.JobService/GetJob", &g.base, &kolo__v1__job__descriptor, &resp, &r);
    push_get(w, now_ms() - t0);
    if (r.code) w->errors++;
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  }
  kolo_cli_client_destroy(c);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, size_t n, double seconds) {
  if (n == 0) return;
  qsort(v, n, sizeof *v, cmp);
  printf("%-10s %8zu calls %9.0f/s  p50 %7.3f ms  p90 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n", what,
         n, seconds > 0 ? (double)n / seconds : 0.0, v[n / 2], v[n * 9 / 10], v[n * 99 / 100],
         v[n - 1]);
}

int main(int argc, char **argv) {
  const char *server = "127.0.0.1:7070";
  int threads = 4, jobs = 200, seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--server") == 0)
      server = argv[i + 1];
    else if (strcmp(argv[i], "--threads") == 0)
      threads = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--jobs") == 0)
      jobs = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--seconds") == 0)
      seconds = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [--server H:P] [--threads T] [--jobs N] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || threads > 256 || jobs < 1) return 2;
  worker *ws = calloc((size_t)threads, sizeof *ws);
  unsigned run_id = (unsigned)time(NULL) ^ (unsigned)getpid();
  double t0 = now_ms();
  for (int i = 0; i < threads; i++) {
    ws[i] = (worker){server, i, jobs, seconds, run_id, NULL, NULL, 0, 0, 0, 0, 0};
    pthread_create(&ws[i].thread, NULL, run, &ws[i]);
  }
  for (int i = 0; i < threads; i++) pthread_join(ws[i].thread, NULL);
  double total_s = (now_ms() - t0) / 1000.0;
  size_t ns = 0, ng = 0;
  int errors = 0;
  for (int i = 0; i < threads; i++) {
    ns += ws[i].n_submit;
    ng += ws[i].n_get;
    errors += ws[i].errors;
  }
  double *all_s = malloc((ns + 1) * sizeof *all_s), *all_g = malloc((ng + 1) * sizeof *all_g);
  size_t ks = 0, kg = 0;
  for (int i = 0; i < threads; i++) {
    memcpy(all_s + ks, ws[i].submit_ms, ws[i].n_submit * sizeof *all_s);
    ks += ws[i].n_submit;
    memcpy(all_g + kg, ws[i].get_ms, ws[i].n_get * sizeof *all_g);
    kg += ws[i].n_get;
    free(ws[i].submit_ms);
    free(ws[i].get_ms);
  }
  printf("kolo-bench-control: %d threads, %d jobs each, %d s of GetJob, server %s\n", threads, jobs,
         seconds, server);
  report("SubmitJob", all_s, ns, 0);
  report("GetJob", all_g, ng, (double)seconds);
  printf("errors %d, wall %.1f s\n", errors, total_s);
  free(all_s);
  free(all_g);
  free(ws);
  return errors ? 1 : 0;
}
