/* Tests of server/grpc_api.c in-process: the gRPC transport over an in-memory store on a
 * loopback port 0, driven by raw C-core client calls (to send what well-behaved clients
 * cannot: no message at all), from many threads at once, and stopped with a stream open. */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "kolo/v1/job.pb-c.h"
#include "server/grpc_api.h"
#include "codec/codec.h"

typedef struct fixture {
  kolo_server_kv *kv;
  kolo_server_store *store;
  kolo_server_metrics *metrics;
  kolo_server_grpc *grpc;
  char target[64];
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_int_equal(kolo_server_kv_mem_create(&f->kv), KOLO_OK);
  assert_int_equal(kolo_server_store_create(f->kv, &f->store), KOLO_OK);
  assert_int_equal(kolo_server_metrics_create(&f->metrics), KOLO_OK);
  kolo_server_grpc_config cfg = {"127.0.0.1:0", NULL,       NULL, NULL, 4096, 4,
                                 f->store,      f->metrics, NULL};
  int port = 0;
  assert_int_equal(kolo_server_grpc_start(&cfg, &f->grpc, &port), KOLO_OK);
  assert_true(port > 0);
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", port);
  grpc_init();
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_server_grpc_stop(f->grpc, 2000);
  kolo_server_store_destroy(f->store);
  f->kv->ops->destroy(f->kv);
  kolo_server_metrics_destroy(f->metrics);
  grpc_shutdown();
  free(f);
  return 0;
}

typedef struct outcome {
  grpc_status_code status;
  char details[256];
  uint8_t *body;
  size_t len;
} outcome;

/* One unary call; payload NULL sends no message at all. */
static void call(const char *target, const char *method, const uint8_t *payload, size_t len,
                 outcome *out) {
  grpc_channel_credentials *creds = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(target, creds, NULL);
  grpc_channel_credentials_release(creds);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice path = grpc_slice_from_copied_string(method);
  gpr_timespec deadline =
      gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(10, GPR_TIMESPAN));
  grpc_call *c =
      grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path, NULL, deadline, NULL);
  grpc_slice_unref(path);
  grpc_metadata_array initial, trailing;
  grpc_metadata_array_init(&initial);
  grpc_metadata_array_init(&trailing);
  grpc_byte_buffer *send = NULL, *recv = NULL;
  grpc_slice details;
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (payload) {
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)payload, len);
    send = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = send;
  }
  ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[n++].data.recv_initial_metadata.recv_initial_metadata = &initial;
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &recv;
  ops[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[n].data.recv_status_on_client.status = &out->status;
  ops[n].data.recv_status_on_client.status_details = &details;
  ops[n++].data.recv_status_on_client.trailing_metadata = &trailing;
  assert_int_equal(grpc_call_start_batch(c, ops, n, (void *)1, NULL), GRPC_CALL_OK);
  grpc_event ev =
      grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  assert_int_equal(ev.type, GRPC_OP_COMPLETE);
  snprintf(out->details, sizeof out->details, "%.*s", (int)GRPC_SLICE_LENGTH(details),
           (const char *)GRPC_SLICE_START_PTR(details));
  grpc_slice_unref(details);
  out->body = NULL;
  out->len = 0;
  if (recv) {
    grpc_byte_buffer_reader r;
    grpc_byte_buffer_reader_init(&r, recv);
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    out->len = GRPC_SLICE_LENGTH(all);
    out->body = malloc(out->len + 1);
    memcpy(out->body, GRPC_SLICE_START_PTR(all), out->len);
    grpc_slice_unref(all);
    grpc_byte_buffer_reader_destroy(&r);
    grpc_byte_buffer_destroy(recv);
  }
  if (send) grpc_byte_buffer_destroy(send);
  grpc_metadata_array_destroy(&initial);
  grpc_metadata_array_destroy(&trailing);
  grpc_call_unref(c);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  grpc_channel_destroy(ch);
}

static size_t pack_spec(const char *id, uint8_t *buf, size_t cap, const char *name) {
  Kolo__V1__BuiltinProgram b = KOLO__V1__BUILTIN_PROGRAM__INIT;
  Kolo__V1__JobSpec s = KOLO__V1__JOB_SPEC__INIT;
  b.model = "mlp";
  b.epochs = 1;
  s.name = (char *)name;
  s.id = (char *)id;
  s.min_workers = 1;
  s.program_case = KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN;
  s.builtin = &b;
  size_t len = kolo__v1__job_spec__get_packed_size(&s);
  assert_true(len <= cap);
  return kolo__v1__job_spec__pack(&s, buf);
}

static void a_call_without_a_message_is_invalid_argument(void **state) {
  fixture *f = *state;
  outcome o;
  call(f->target, "/kolo.v1.JobService/GetJob", NULL, 0, &o);
  assert_int_equal(o.status, GRPC_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(o.details, "missing request message"));
  free(o.body);
}

static void an_unknown_method_is_unimplemented_at_once(void **state) {
  fixture *f = *state;
  outcome o;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  call(f->target, "/kolo.v1.JobService/Frobnicate", (const uint8_t *)"", 0, &o);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  assert_int_equal(o.status, GRPC_STATUS_UNIMPLEMENTED);
  assert_true(t1.tv_sec - t0.tv_sec < 3); /* not at the 10 s deadline */
  free(o.body);
}

static void a_message_over_the_limit_is_resource_exhausted(void **state) {
  fixture *f = *state;
  static uint8_t buf[16384];
  static char name[8000];
  memset(name, 'x', sizeof name - 1);
  size_t len = pack_spec("big", buf, sizeof buf, name);
  outcome o;
  call(f->target, "/kolo.v1.JobService/SubmitJob", buf, len, &o);
  assert_int_equal(o.status, GRPC_STATUS_RESOURCE_EXHAUSTED);
  free(o.body);
}

typedef struct load {
  const char *target;
  int index, ok;
} load;

static void *submit_and_get(void *arg) {
  load *l = arg;
  for (int i = 0; i < 20; i++) {
    char id[32];
    uint8_t buf[256];
    snprintf(id, sizeof id, "t%d-%d", l->index, i);
    outcome o;
    call(l->target, "/kolo.v1.JobService/SubmitJob", buf, pack_spec(id, buf, sizeof buf, "n"), &o);
    free(o.body);
    if (o.status != GRPC_STATUS_OK) continue;
    Kolo__V1__GetJobRequest g = KOLO__V1__GET_JOB_REQUEST__INIT;
    g.id = id;
    size_t len = kolo__v1__get_job_request__pack(&g, buf);
    call(l->target, "/kolo.v1.JobService/GetJob", buf, len, &o);
    Kolo__V1__Job *job = o.body ? kolo__v1__job__unpack(NULL, o.len, o.body) : NULL;
    if (o.status == GRPC_STATUS_OK && job && strcmp(job->id, id) == 0) l->ok++;
    if (job) kolo__v1__job__free_unpacked(job, NULL);
    free(o.body);
  }
  return NULL;
}

static void calls_from_many_threads_at_once_all_succeed(void **state) {
  fixture *f = *state;
  pthread_t threads[6];
  load loads[6];
  for (int i = 0; i < 6; i++) {
    loads[i] = (load){f->target, i, 0};
    pthread_create(&threads[i], NULL, submit_and_get, &loads[i]);
  }
  for (int i = 0; i < 6; i++) {
    pthread_join(threads[i], NULL);
    assert_int_equal(loads[i].ok, 20);
  }
  uint64_t phases[7];
  kolo_server_store_count_phases(f->store, phases);
  assert_int_equal(phases[KOLO__V1__PHASE__PENDING], 120);
}

/* A WatchJob stream a client keeps open on a job that never ends; stop() must end it. */
static void *open_watch(void *arg) {
  fixture *f = arg;
  grpc_channel_credentials *creds = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(f->target, creds, NULL);
  grpc_channel_credentials_release(creds);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice path = grpc_slice_from_static_string("/kolo.v1.JobService/WatchJob");
  grpc_call *c = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path, NULL,
                                          gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  Kolo__V1__WatchJobRequest w = KOLO__V1__WATCH_JOB_REQUEST__INIT;
  w.id = "w1";
  uint8_t buf[64];
  grpc_slice s =
      grpc_slice_from_copied_buffer((const char *)buf, kolo__v1__watch_job_request__pack(&w, buf));
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_metadata_array initial, trailing;
  grpc_metadata_array_init(&initial);
  grpc_metadata_array_init(&trailing);
  grpc_status_code status;
  grpc_slice details;
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
  grpc_call_start_batch(c, ops, 4, (void *)1, NULL);
  grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  /* Read until the server ends the stream: the status comes only after the messages. */
  for (;;) {
    grpc_byte_buffer *recv = NULL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &recv;
    grpc_call_start_batch(c, &op, 1, (void *)2, NULL);
    grpc_completion_queue_pluck(cq, (void *)2, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (recv == NULL) break;
    grpc_byte_buffer_destroy(recv);
  }
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.status = &status;
  ops[0].data.recv_status_on_client.status_details = &details;
  ops[0].data.recv_status_on_client.trailing_metadata = &trailing;
  grpc_call_start_batch(c, ops, 1, (void *)3, NULL);
  grpc_completion_queue_pluck(cq, (void *)3, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  assert_int_not_equal(status, GRPC_STATUS_OK);
  grpc_slice_unref(details);
  grpc_byte_buffer_destroy(send);
  grpc_metadata_array_destroy(&initial);
  grpc_metadata_array_destroy(&trailing);
  grpc_call_unref(c);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  grpc_channel_destroy(ch);
  return NULL;
}

static void stopping_ends_an_open_watch_stream(void **state) {
  fixture *f = *state;
  uint8_t buf[256];
  outcome o;
  call(f->target, "/kolo.v1.JobService/SubmitJob", buf, pack_spec("w1", buf, sizeof buf, "n"), &o);
  assert_int_equal(o.status, GRPC_STATUS_OK);
  free(o.body);
  pthread_t t;
  pthread_create(&t, NULL, open_watch, f);
  for (int i = 0; i < 200 && kolo_server_grpc_active_calls(f->grpc) == 0; i++) {
    struct timespec pause = {0, 10000000L};
    nanosleep(&pause, NULL);
  }
  assert_int_equal(kolo_server_grpc_active_calls(f->grpc), 1);
  kolo_server_grpc_stop(f->grpc, 200);
  f->grpc = NULL;
  pthread_join(t, NULL); /* the client saw the stream end */
  int port = 0;
  kolo_server_grpc_config cfg = {"127.0.0.1:0", NULL,       NULL, NULL, 4096, 2,
                                 f->store,      f->metrics, NULL};
  assert_int_equal(kolo_server_grpc_start(&cfg, &f->grpc, &port), KOLO_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_call_without_a_message_is_invalid_argument, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(an_unknown_method_is_unimplemented_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(a_message_over_the_limit_is_resource_exhausted, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(calls_from_many_threads_at_once_all_succeed, setup, teardown),
      cmocka_unit_test_setup_teardown(stopping_ends_an_open_watch_stream, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
