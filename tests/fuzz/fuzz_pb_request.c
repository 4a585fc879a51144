/* libFuzzer target: what kolo-server does with the bytes of a gRPC request before any
 * service code runs (server/grpc_api.c): protobuf-c unpack, then the wire check of every
 * string (server/pb_check.c). Input: one byte choosing the kolo.v1 message, then protobuf
 * bytes. Properties: no crash or leak; a message the check accepts encodes to JSON (so the
 * store can never fail on it with "out of memory"), and that JSON decodes back unless it
 * holds an enum number the schema does not name. */
#include <stdio.h>

#include "codec/codec.h"
#include "server/pb_check.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const ProtobufCMessageDescriptor *desc = kolo_fuzz_messages[data[0] % KOLO_FUZZ_N_MESSAGES];
  const uint8_t *body = data + 1;
  size_t len = size - 1;
  char err[512];
  kolo_status checked = kolo_server_pb_check(desc, body, len, err, sizeof err);
  ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, len, body);
  if (msg == NULL || checked != KOLO_OK) {
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
  }
  char *json = kolo_codec_dump(msg, 0);
  if (json == NULL) {
    fprintf(stderr, "a message pb_check accepted does not encode to JSON\n");
    abort();
  }
  ProtobufCMessage *back = NULL;
  kolo_status rc = kolo_codec_parse(json, strlen(json), desc, &back, err, sizeof err);
  if (rc != KOLO_OK && strstr(err, "expected one of") == NULL) {
    fprintf(stderr, "JSON of an accepted message does not decode: %s\n%s\n", err, json);
    abort();
  }
  if (back) protobuf_c_message_free_unpacked(back, NULL);
  free(json);
  protobuf_c_message_free_unpacked(msg, NULL);
  return 0;
}
