/* Implementation of client.h. */
#include "cli/client.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kolo_cli_client {
  grpc_channel *channel;
  grpc_completion_queue *cq;
  char *auth;
  int timeout_ms;
};

kolo_status kolo_cli_client_create(const char *target, const char *ca_pem, const char *token,
                                   int timeout_ms, kolo_cli_client **out) {
  kolo_cli_client *c = calloc(1, sizeof *c);
  if (c == NULL) return KOLO_ERR_NO_MEMORY;
  grpc_init();
  grpc_channel_credentials *creds = ca_pem ? grpc_ssl_credentials_create(ca_pem, NULL, NULL, NULL)
                                           : grpc_insecure_credentials_create();
  grpc_arg arg;
  memset(&arg, 0, sizeof arg);
  arg.type = GRPC_ARG_INTEGER;
  arg.key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  arg.value.integer = 64 << 20;
  grpc_channel_args args = {1, &arg};
  c->channel = grpc_channel_create(target, creds, &args);
  grpc_channel_credentials_release(creds);
  c->cq = grpc_completion_queue_create_for_pluck(NULL);
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
  if (token) {
    size_t len = strlen(token) + 8;
    c->auth = malloc(len);
    if (c->auth) snprintf(c->auth, len, "Bearer %s", token);
  }
  *out = c;
  return KOLO_OK;
}

void kolo_cli_client_destroy(kolo_cli_client *c) {
  if (c == NULL) return;
  grpc_completion_queue_shutdown(c->cq);
  while (grpc_completion_queue_pluck(c->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(c->cq);
  grpc_channel_destroy(c->channel);
  free(c->auth);
  free(c);
  grpc_shutdown();
}

static int run_batch(kolo_cli_client *c, grpc_call *call, const grpc_op *ops, size_t n, void *tag) {
  if (grpc_call_start_batch(call, ops, n, tag, NULL) != GRPC_CALL_OK) return 0;
  grpc_event ev = grpc_completion_queue_pluck(c->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static ProtobufCMessage *unpack(grpc_byte_buffer *buf, const ProtobufCMessageDescriptor *desc) {
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, buf)) return NULL;
  grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  ProtobufCMessage *msg =
      protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
  grpc_slice_unref(all);
  return msg;
}

/* Starts a call and sends the request with its metadata; receives initial metadata. */
static grpc_call *start_call(kolo_cli_client *c, const char *method, const ProtobufCMessage *req,
                             gpr_timespec deadline, grpc_metadata_array *initial) {
  grpc_slice path = grpc_slice_from_copied_string(method);
  grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, path,
                                             NULL, deadline, NULL);
  grpc_slice_unref(path);
  size_t len = protobuf_c_message_get_packed_size(req);
  uint8_t *bytes = malloc(len + 1);
  protobuf_c_message_pack(req, bytes);
  grpc_slice slice = grpc_slice_from_copied_buffer((const char *)bytes, len);
  free(bytes);
  grpc_byte_buffer *payload = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  grpc_metadata md;
  memset(&md, 0, sizeof md);
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (c->auth) {
    md.key = grpc_slice_from_static_string("authorization");
    md.value = grpc_slice_from_copied_string(c->auth);
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &md;
  }
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = payload;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = initial;
  /* A failed send still lets RECV_STATUS tell us why, so the result is not checked here. */
  run_batch(c, call, ops, 4, (void *)1);
  grpc_byte_buffer_destroy(payload);
  if (c->auth) grpc_slice_unref(md.value);
  return call;
}

static void finish(kolo_cli_client *c, grpc_call *call, kolo_cli_result *result) {
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_metadata_array trailing;
  grpc_metadata_array_init(&trailing);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.status = &status;
  op.data.recv_status_on_client.status_details = &details;
  op.data.recv_status_on_client.trailing_metadata = &trailing;
  run_batch(c, call, &op, 1, (void *)3);
  result->code = (int)status;
  snprintf(result->message, sizeof result->message, "%.*s", (int)GRPC_SLICE_LENGTH(details),
           (const char *)GRPC_SLICE_START_PTR(details));
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&trailing);
}

kolo_status kolo_cli_call(kolo_cli_client *c, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                          kolo_cli_result *result) {
  gpr_timespec deadline =
      gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(c->timeout_ms, GPR_TIMESPAN));
  grpc_metadata_array initial;
  grpc_metadata_array_init(&initial);
  grpc_call *call = start_call(c, method, req, deadline, &initial);
  grpc_byte_buffer *buf = NULL;
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &buf;
  run_batch(c, call, &op, 1, (void *)2);
  finish(c, call, result);
  *resp = NULL;
  if (result->code == 0) {
    *resp = buf ? unpack(buf, resp_desc) : NULL;
    if (*resp == NULL) {
      result->code = 13;
      snprintf(result->message, sizeof result->message, "malformed or missing response message");
    }
  }
  if (buf) grpc_byte_buffer_destroy(buf);
  grpc_metadata_array_destroy(&initial);
  grpc_call_unref(call);
  return result->code == 0 ? KOLO_OK : KOLO_ERR_UNAVAILABLE;
}

kolo_status kolo_cli_stream(kolo_cli_client *c, const char *method, const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp_desc, kolo_cli_stream_fn fn,
                            void *arg, kolo_cli_result *result) {
  grpc_metadata_array initial;
  grpc_metadata_array_init(&initial);
  grpc_call *call = start_call(c, method, req, gpr_inf_future(GPR_CLOCK_REALTIME), &initial);
  for (;;) {
    grpc_byte_buffer *buf = NULL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &buf;
    if (!run_batch(c, call, &op, 1, (void *)2) || buf == NULL) break;
    ProtobufCMessage *msg = unpack(buf, resp_desc);
    grpc_byte_buffer_destroy(buf);
    int stop = msg ? fn(arg, msg) : 1;
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    if (stop) {
      grpc_call_cancel(call, NULL);
      break;
    }
  }
  finish(c, call, result);
  grpc_metadata_array_destroy(&initial);
  grpc_call_unref(call);
  return result->code == 0 ? KOLO_OK : KOLO_ERR_UNAVAILABLE;
}
