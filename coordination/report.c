/* Implementation of coordination/report.h: kolo.v1.AgentReport through the one codec, its
 * "progress" a kolo.v1.Struct (the codec maps it to and from the plain JSON object). */
#include "coordination/report.h"

#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/checks.h"
#include "coordination/keys.h"
#include "coordination/record.h"
#include "kolo/v1/records.pb-c.h"

kolo_status kolo_report_validate(const Kolo__V1__AgentReport *r, char *err, size_t err_len) {
  if (r == NULL) return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "report is NULL");
  if (r->worker && !kolo_keys_name_valid(r->worker))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "report: worker '%.64s' is not valid", r->worker);
  return KOLO_OK;
}

kolo_status kolo_report_write(const Kolo__V1__AgentReport *r, char **json, char *err,
                              size_t err_len) {
  if (json == NULL) return KOLO_ERR_INVALID_ARG;
  *json = NULL;
  if (r == NULL || r->worker == NULL)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "report: worker '(null)' is not valid");
  KOLO_CHECK(kolo_report_validate(r, err, err_len));
  Kolo__V1__AgentReport m = *r; /* a shallow copy whose presence is the record's */
  m.has_epoch = m.has_formed_epoch = m.has_failed_epoch = m.has_failed_rank = 1;
  m.has_exited = m.has_exit_code = m.has_exit_epoch = m.has_time_unix_ms = m.has_pid = 1;
  m.exited = r->exited != 0;
  if (m.failed_status == NULL) m.failed_status = "";
  m.has_hello = !r->hello; /* written only when false: absent reads as said (older agents) */
  m.hello = r->hello != 0;
  if (m.permanent && m.permanent[0] == '\0') m.permanent = NULL; /* NULL: left out */
  m.has_first_formed_epoch = r->first_formed_epoch != 0;
  *json = kolo_codec_dump(&m.base, 0);
  return *json ? KOLO_OK
               : kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                                  "report: cannot be encoded (out of memory, or not UTF-8)");
}

/* Fills in what an absent field reads as (report.h). */
static kolo_status fill_defaults(Kolo__V1__AgentReport *m, char *err, size_t err_len) {
  if (!m->has_failed_rank) m->failed_rank = -1;
  m->has_failed_rank = 1;
  if (!m->has_hello) m->hello = 1; /* an older agent: assume it did */
  m->has_hello = 1;
  if (m->permanent && m->permanent[0] == '\0') {
    free(m->permanent);
    m->permanent = NULL;
  }
  if (m->failed_status == NULL && (m->failed_status = strdup("")) == NULL)
    return kolo_record_fail(KOLO_ERR_NO_MEMORY, err, err_len, "out of memory");
  return KOLO_OK;
}

kolo_status kolo_report_read(const char *text, size_t len, Kolo__V1__AgentReport **out, char *err,
                             size_t err_len) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  json_error_t error;
  json_t *o = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES, &error) : NULL;
  if (o == NULL || !json_is_object(o)) {
    json_decref(o);
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "report: malformed JSON: %s",
                            o      ? "not an object"
                            : text ? error.text
                                   : "no text");
  }
  json_t *progress = json_object_get(o, "progress");
  if (progress != NULL && !json_is_object(progress)) {
    json_decref(o);
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "report: 'progress' is not an object");
  }
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  kolo_status rc =
      kolo_codec_decode(o, &kolo__v1__agent_report__descriptor,
                        KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, &msg, &fault);
  json_decref(o);
  if (rc != KOLO_OK) {
    if (rc == KOLO_ERR_NO_MEMORY)
      return kolo_record_fail(rc, err, err_len, "out of memory reading a report");
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "report: %s", fault.message);
  }
  Kolo__V1__AgentReport *m = (Kolo__V1__AgentReport *)msg;
  rc = kolo_report_validate(m, err, err_len);
  if (rc == KOLO_OK) rc = fill_defaults(m, err, err_len);
  if (rc != KOLO_OK) {
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
  }
  *out = m;
  return KOLO_OK;
}

kolo_status kolo_report_progress_merge(Kolo__V1__Struct **progress, const char *text, size_t len,
                                       char *err, size_t err_len) {
  json_t *line = text ? json_loadb(text, len, 0, NULL) : NULL;
  json_t *merged = *progress ? kolo_codec_to_json(&(*progress)->base) : json_object();
  json_t *wrapper = json_object();
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (!json_is_object(line)) {
    rc = kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "progress: a REPORT must be a JSON object");
    goto out;
  }
  if (merged == NULL || wrapper == NULL || json_object_update(merged, line) != 0 ||
      json_object_set(wrapper, "progress", merged) != 0) {
    rc = kolo_record_fail(KOLO_ERR_NO_MEMORY, err, err_len, "out of memory merging a REPORT");
    goto out;
  }
  /* checked as the report's reader will check it: the field named from "progress" */
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  rc = kolo_codec_decode(wrapper, &kolo__v1__agent_report__descriptor, 0, &msg, &fault);
  if (rc != KOLO_OK) {
    rc = kolo_record_fail(rc, err, err_len, "%s", fault.message);
    goto out;
  }
  Kolo__V1__AgentReport *m = (Kolo__V1__AgentReport *)msg;
  if (*progress) protobuf_c_message_free_unpacked(&(*progress)->base, NULL);
  *progress = m->progress;
  m->progress = NULL;
  protobuf_c_message_free_unpacked(msg, NULL);
out:
  json_decref(line);
  json_decref(merged);
  json_decref(wrapper);
  return rc;
}
