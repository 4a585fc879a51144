/* Implementation of coordination/assignment.h: kolo.v1.Assignment through the one codec
 * and its rules over the message. */
#include "coordination/assignment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/checks.h"
#include "coordination/keys.h"
#include "coordination/record.h"
#include "coordination/ringspec.h"

#define EPOCH_MAX ((int64_t)1 << 53)

kolo_status kolo_assignment_validate(const Kolo__V1__Assignment *r, char *err, size_t err_len) {
  if (r == NULL) return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "assignment is NULL");
  static const char *names[] = {"job", "epoch", "ring", "rank"};
  int present[] = {r->job != NULL, r->has_epoch, r->ring != NULL, r->has_rank};
  for (size_t i = 0; i < 4; i++)
    if (!present[i])
      return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "assignment: the record has no '%s'",
                              names[i]);
  if (!kolo_keys_name_valid(r->job))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "assignment: job id '%.64s' is not valid", r->job);
  if (r->epoch < 0 || r->epoch > EPOCH_MAX)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "assignment: 'epoch' %lld is not in 0..2^53", (long long)r->epoch);
  char ring[512];
  if (kolo_keys_ring(r->job, r->epoch, ring, sizeof ring) != KOLO_OK || strcmp(ring, r->ring) != 0)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "assignment: 'ring' '%.128s' is not the ring of job %s epoch %lld",
                            r->ring, r->job, (long long)r->epoch);
  if (r->rank < 0 || r->rank >= KOLO_RINGSPEC_MAX_SIZE)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "assignment: 'rank' %lld is not in 0..%d", (long long)r->rank,
                            KOLO_RINGSPEC_MAX_SIZE - 1);
  return KOLO_OK;
}

kolo_status kolo_assignment_write(const Kolo__V1__Assignment *a, char **json, char *err,
                                  size_t err_len) {
  if (json == NULL) return KOLO_ERR_INVALID_ARG;
  *json = NULL;
  KOLO_CHECK(kolo_assignment_validate(a, err, err_len));
  *json = kolo_codec_dump(&a->base, 0);
  return *json ? KOLO_OK
               : kolo_record_fail(KOLO_ERR_NO_MEMORY, err, err_len,
                                  "out of memory encoding an assignment");
}

static kolo_status fault_error(kolo_status rc, const kolo_codec_fault *f, char *err,
                               size_t err_len) {
  if (rc == KOLO_ERR_NO_MEMORY)
    return kolo_record_fail(rc, err, err_len, "out of memory reading an assignment");
  if (f->kind == KOLO_CODEC_FAULT_TYPE && f->field != NULL)
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "assignment: '%s' is not %s",
                            f->field->name,
                            f->field->type == PROTOBUF_C_TYPE_STRING ? "a string" : "an integer");
  return kolo_record_fail(
      KOLO_ERR_PARSE, err, err_len, "assignment: %s",
      f->kind == KOLO_CODEC_FAULT_TYPE ? "malformed JSON: not an object" : f->message);
}

kolo_status kolo_assignment_read(const char *text, size_t len, Kolo__V1__Assignment **out,
                                 char *err, size_t err_len) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  kolo_status rc =
      kolo_codec_read(text, text ? len : 0, &kolo__v1__assignment__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, &msg, &fault);
  if (rc != KOLO_OK) return fault_error(rc, &fault, err, err_len);
  rc = kolo_assignment_validate((Kolo__V1__Assignment *)msg, err, err_len);
  if (rc != KOLO_OK) {
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
  }
  *out = (Kolo__V1__Assignment *)msg;
  return KOLO_OK;
}
