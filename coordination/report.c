/* Implementation of coordination/report.h: kolo.v1.AgentReport through the one codec, its
 * "progress" a kolo.v1.Struct (the codec maps it to and from the plain JSON object). */
#include "coordination/report.h"

#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "coordination/etcd_internal.h"
#include "coordination/keys.h"
#include "kolo/v1/records.pb-c.h"

void kolo_report_clear(kolo_report *r) {
  if (r == NULL) return;
  free(r->worker);
  free(r->failed_status);
  free(r->stderr_tail);
  free(r->permanent);
  if (r->progress) protobuf_c_message_free_unpacked(&r->progress->base, NULL);
  memset(r, 0, sizeof *r);
}

kolo_status kolo_report_encode(const kolo_report *r, char **json) {
  *json = NULL;
  if (!kolo_keys_name_valid(r->worker))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "report: worker '%.64s' is not valid",
                          r->worker ? r->worker : "(null)");
  Kolo__V1__AgentReport m = KOLO__V1__AGENT_REPORT__INIT;
  m.worker = r->worker;
  m.has_epoch = m.has_formed_epoch = m.has_failed_epoch = m.has_failed_rank = 1;
  m.has_exited = m.has_exit_code = m.has_exit_epoch = m.has_time_unix_ms = m.has_pid = 1;
  m.epoch = r->epoch;
  m.formed_epoch = r->formed_epoch;
  m.failed_epoch = r->failed_epoch;
  m.failed_rank = r->failed_rank;
  m.failed_status = r->failed_status ? r->failed_status : "";
  m.exited = r->exited != 0;
  m.exit_code = r->exit_code;
  m.exit_epoch = r->exit_epoch;
  m.time_unix_ms = r->time_unix_ms;
  m.pid = r->pid;
  m.stderr_tail = r->stderr_tail; /* NULL: left out */
  m.progress = r->progress;       /* NULL: left out */
  m.has_hello = !r->hello; /* written only when false: absent reads as said (older agents) */
  m.hello = r->hello != 0;
  m.permanent = r->permanent && r->permanent[0] ? r->permanent : NULL; /* NULL: left out */
  m.has_first_formed_epoch = r->first_formed_epoch != 0;
  m.first_formed_epoch = r->first_formed_epoch;
  *json = kolo_codec_dump(&m.base, 0);
  return *json ? KOLO_OK
               : kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                                "report: cannot be encoded (out of memory, or not UTF-8)");
}

static char *take(char **slot) {
  char *s = *slot;
  *slot = NULL;
  return s;
}

static kolo_status from_message(Kolo__V1__AgentReport *m, kolo_report *out) {
  if (m->worker && !kolo_keys_name_valid(m->worker))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "report: worker '%.64s' is not valid", m->worker);
  out->worker = take(&m->worker);
  out->epoch = m->epoch;
  out->formed_epoch = m->formed_epoch;
  out->failed_epoch = m->failed_epoch;
  out->failed_rank = m->has_failed_rank ? m->failed_rank : -1;
  out->failed_status = m->failed_status ? take(&m->failed_status) : strdup("");
  out->exited = m->has_exited && m->exited;
  out->exit_code = m->exit_code;
  out->exit_epoch = m->exit_epoch;
  out->time_unix_ms = m->time_unix_ms;
  out->pid = m->pid;
  out->stderr_tail = take(&m->stderr_tail);
  out->hello = m->has_hello ? m->hello : 1; /* an older agent: assume it did */
  out->permanent = m->permanent && m->permanent[0] ? take(&m->permanent) : NULL;
  out->first_formed_epoch = m->first_formed_epoch;
  out->progress = m->progress;
  m->progress = NULL;
  return out->failed_status ? KOLO_OK : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
}

kolo_status kolo_report_decode(const char *text, size_t len, kolo_report *out) {
  memset(out, 0, sizeof *out);
  json_error_t error;
  json_t *o = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES, &error) : NULL;
  if (o == NULL || !json_is_object(o)) {
    json_decref(o);
    return kolo_etcd_fail(KOLO_ERR_PARSE, "report: malformed JSON: %s",
                          o      ? "not an object"
                          : text ? error.text
                                 : "no text");
  }
  json_t *progress = json_object_get(o, "progress");
  if (progress != NULL && !json_is_object(progress)) {
    json_decref(o);
    return kolo_etcd_fail(KOLO_ERR_PARSE, "report: 'progress' is not an object");
  }
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  kolo_status rc =
      kolo_codec_decode(o, &kolo__v1__agent_report__descriptor,
                        KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, &msg, &fault);
  json_decref(o);
  if (rc != KOLO_OK) {
    if (rc == KOLO_ERR_NO_MEMORY) return kolo_etcd_fail(rc, "out of memory reading a report");
    return kolo_etcd_fail(KOLO_ERR_PARSE, "report: %s", fault.message);
  }
  rc = from_message((Kolo__V1__AgentReport *)msg, out);
  protobuf_c_message_free_unpacked(msg, NULL);
  if (rc != KOLO_OK) kolo_report_clear(out);
  return rc;
}

kolo_status kolo_report_progress_merge(Kolo__V1__Struct **progress, const char *text, size_t len) {
  json_t *line = text ? json_loadb(text, len, 0, NULL) : NULL;
  json_t *merged = *progress ? kolo_codec_to_json(&(*progress)->base) : json_object();
  json_t *wrapper = json_object();
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (!json_is_object(line)) {
    rc = kolo_etcd_fail(KOLO_ERR_PARSE, "progress: a REPORT must be a JSON object");
    goto out;
  }
  if (merged == NULL || wrapper == NULL || json_object_update(merged, line) != 0 ||
      json_object_set(wrapper, "progress", merged) != 0) {
    rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory merging a REPORT");
    goto out;
  }
  /* checked as the report's reader will check it: the field named from "progress" */
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  rc = kolo_codec_decode(wrapper, &kolo__v1__agent_report__descriptor, 0, &msg, &fault);
  if (rc != KOLO_OK) {
    rc = kolo_etcd_fail(rc, "%s", fault.message);
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
