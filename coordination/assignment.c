/* Implementation of coordination/assignment.h: kolo.v1.Assignment through the one codec,
 * its rules over the message, and the struct its readers keep. */
#include "coordination/assignment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/checks.h"
#include "coordination/etcd_internal.h"
#include "coordination/keys.h"
#include "coordination/ringspec.h"
#include "kolo/v1/records.pb-c.h"

#define EPOCH_MAX ((int64_t)1 << 53)

void kolo_assignment_clear(kolo_assignment *a) {
  if (a == NULL) return;
  free(a->job);
  free(a->ring);
  memset(a, 0, sizeof *a);
}

static kolo_status check_record(const Kolo__V1__Assignment *r) {
  static const char *names[] = {"job", "epoch", "ring", "rank"};
  int present[] = {r->job != NULL, r->has_epoch, r->ring != NULL, r->has_rank};
  for (size_t i = 0; i < 4; i++)
    if (!present[i])
      return kolo_etcd_fail(KOLO_ERR_PARSE, "assignment: the record has no '%s'", names[i]);
  if (!kolo_keys_name_valid(r->job))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "assignment: job id '%.64s' is not valid", r->job);
  if (r->epoch < 0 || r->epoch > EPOCH_MAX)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "assignment: 'epoch' %lld is not in 0..2^53",
                          (long long)r->epoch);
  char ring[512];
  if (kolo_keys_ring(r->job, r->epoch, ring, sizeof ring) != KOLO_OK || strcmp(ring, r->ring) != 0)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "assignment: 'ring' '%.128s' is not the ring of job %s epoch %lld",
                          r->ring, r->job, (long long)r->epoch);
  if (r->rank < 0 || r->rank >= KOLO_RINGSPEC_MAX_SIZE)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "assignment: 'rank' %lld is not in 0..%d",
                          (long long)r->rank, KOLO_RINGSPEC_MAX_SIZE - 1);
  return KOLO_OK;
}

static void view_of(const kolo_assignment *a, Kolo__V1__Assignment *r) {
  kolo__v1__assignment__init(r);
  r->job = a->job;
  r->ring = a->ring;
  r->has_epoch = r->has_rank = 1;
  r->epoch = a->epoch;
  r->rank = a->rank;
}

kolo_status kolo_assignment_validate(const kolo_assignment *a) {
  if (a == NULL) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "assignment is NULL");
  Kolo__V1__Assignment r;
  view_of(a, &r);
  return check_record(&r);
}

kolo_status kolo_assignment_encode(const kolo_assignment *a, char **json) {
  if (json == NULL) return KOLO_ERR_INVALID_ARG;
  *json = NULL;
  KOLO_CHECK(kolo_assignment_validate(a));
  Kolo__V1__Assignment r;
  view_of(a, &r);
  *json = kolo_codec_dump(&r.base, 0);
  return *json ? KOLO_OK
               : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory encoding an assignment");
}

static kolo_status fault_error(kolo_status rc, const kolo_codec_fault *f) {
  if (rc == KOLO_ERR_NO_MEMORY) return kolo_etcd_fail(rc, "out of memory reading an assignment");
  if (f->kind == KOLO_CODEC_FAULT_TYPE && f->field != NULL)
    return kolo_etcd_fail(KOLO_ERR_PARSE, "assignment: '%s' is not %s", f->field->name,
                          f->field->type == PROTOBUF_C_TYPE_STRING ? "a string" : "an integer");
  return kolo_etcd_fail(
      KOLO_ERR_PARSE, "assignment: %s",
      f->kind == KOLO_CODEC_FAULT_TYPE ? "malformed JSON: not an object" : f->message);
}

kolo_status kolo_assignment_decode(const char *text, size_t len, kolo_assignment *out) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  kolo_status rc =
      kolo_codec_read(text, text ? len : 0, &kolo__v1__assignment__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, &msg, &fault);
  if (rc != KOLO_OK) return fault_error(rc, &fault);
  Kolo__V1__Assignment *r = (Kolo__V1__Assignment *)msg;
  rc = check_record(r);
  if (rc == KOLO_OK) {
    out->job = r->job;
    out->ring = r->ring;
    r->job = r->ring = NULL;
    out->epoch = r->epoch;
    out->rank = (int32_t)r->rank;
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  return rc;
}
