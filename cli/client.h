/* A small blocking gRPC client on the C core (pluck queue) for the kolo CLI: unary calls
 * and a server stream, with optional TLS and bearer token. Messages are protobuf-c. */
#ifndef KOLO_CLI_CLIENT_H
#define KOLO_CLI_CLIENT_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "kolo/status.h"

typedef struct kolo_cli_client kolo_cli_client;

/* target: host:port; ca_pem NULL = plaintext; token NULL = none. */
kolo_status kolo_cli_client_create(const char *target, const char *ca_pem, const char *token,
                                   int timeout_ms, kolo_cli_client **out);
void kolo_cli_client_destroy(kolo_cli_client *c);

/* The outcome of a call: gRPC status code (0 = OK) and its message. */
typedef struct kolo_cli_result {
  int code;
  char message[512];
} kolo_cli_result;

/* One unary call; *resp (free with protobuf_c_message_free_unpacked) when code is 0. */
kolo_status kolo_cli_call(kolo_cli_client *c, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                          kolo_cli_result *result);

/* A server-streaming call: fn gets each message (it frees nothing; return non-zero to stop
 * early, which cancels the call). No deadline. */
typedef int (*kolo_cli_stream_fn)(void *arg, const ProtobufCMessage *msg);
kolo_status kolo_cli_stream(kolo_cli_client *c, const char *method, const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp_desc, kolo_cli_stream_fn fn,
                            void *arg, kolo_cli_result *result);

#endif
