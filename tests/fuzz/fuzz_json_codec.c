/* libFuzzer target: the descriptor-driven JSON codec (codec/codec.c), which decodes
 * every HTTP body, every CLI spec file and every record kolo-server reads back from etcd.
 * Input: one byte choosing the kolo.v1 message (message_of), then JSON text. Properties: decoding
 * never crashes or leaks; what decodes re-encodes (strings are UTF-8: they came from jansson);
 * encoding is a fixed point (decode(encode(m)) encodes to the same text); a decoded
 * JobSpec can be validated and normalized. */
#include <stdio.h>

#include "server/job_model.h"
#include "codec/codec.h"
#include "tests/fuzz/fuzz_common.h"

/* kolo_fuzz_messages, then two records whose progress is an open-ended kolo.v1.Struct
 * (codec.h: its mapping and its depth/size limits); fuzz_pb_request does not take these:
 * protobuf's binary form has no depth limit, so its JSON may be past the codec's. */
static const ProtobufCMessageDescriptor *message_of(uint8_t byte) {
  size_t i = byte % (KOLO_FUZZ_N_MESSAGES + 2);
  if (i == KOLO_FUZZ_N_MESSAGES) return &kolo__v1__agent_report__descriptor;
  if (i == KOLO_FUZZ_N_MESSAGES + 1) return &kolo__v1__struct__descriptor;
  return kolo_fuzz_messages[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const ProtobufCMessageDescriptor *desc = message_of(data[0]);
  char err[512];
  ProtobufCMessage *msg = NULL;
  if (kolo_codec_parse((const char *)data + 1, size - 1, desc, &msg, err, sizeof err) != KOLO_OK)
    return 0;
  char *first = kolo_codec_dump(msg, 0);
  if (first == NULL) abort(); /* decoded strings are UTF-8: encoding cannot fail */
  ProtobufCMessage *again = NULL;
  kolo_status rc = kolo_codec_parse(first, strlen(first), desc, &again, err, sizeof err);
  if (rc != KOLO_OK) {
    fprintf(stderr, "re-decoding %s failed: %s\n", first, err);
    abort();
  }
  char *second = kolo_codec_dump(again, 0);
  if (second == NULL || strcmp(first, second) != 0) {
    fprintf(stderr, "not a fixed point:\n%s\n%s\n", first, second ? second : "(null)");
    abort();
  }
  if (desc == &kolo__v1__job_spec__descriptor &&
      kolo_server_job_validate_spec((Kolo__V1__JobSpec *)msg, err, sizeof err) == KOLO_OK)
    kolo_server_job_normalize_spec((Kolo__V1__JobSpec *)msg);
  free(first);
  free(second);
  protobuf_c_message_free_unpacked(again, NULL);
  protobuf_c_message_free_unpacked(msg, NULL);
  return 0;
}
