/* libFuzzer target: the records kolo processes read from etcd and trust to act on: the
 * per-epoch ring record (coordination/ringspec.c), a worker's membership record
 * (coordination/membership.c), a drain mark (coordination/drain.c), an assignment
 * (coordination/assignment.c) and an agent's report (coordination/report.c). Input: one byte
 * choosing the record, then JSON. Properties: no crash or leak; a ring record that reads
 * validates, re-encodes and decodes again to the same encoding; an assignment, a worker
 * record or a report that reads validates, writes and reads back the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordination/assignment.h"
#include "coordination/drain.h"
#include "coordination/membership.h"
#include "coordination/report.h"
#include "coordination/ringspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  switch (data[0] % 5) {
    case 0: {
      Kolo__V1__RingRecord *spec = NULL, *again = NULL;
      char err[256];
      if (kolo_ringspec_read(text, len, &spec, err, sizeof err) != KOLO_OK) break;
      if (kolo_ringspec_validate(spec, err, sizeof err) != KOLO_OK) abort();
      char *first = NULL, *second = NULL;
      if (kolo_ringspec_write(spec, &first, err, sizeof err) != KOLO_OK) abort();
      if (kolo_ringspec_read(first, strlen(first), &again, err, sizeof err) != KOLO_OK) abort();
      if (kolo_ringspec_write(again, &second, err, sizeof err) != KOLO_OK ||
          strcmp(first, second) != 0) {
        fprintf(stderr, "ring record not a fixed point:\n%s\n%s\n", first,
                second ? second : "(null)");
        abort();
      }
      free(first);
      free(second);
      protobuf_c_message_free_unpacked(&again->base, NULL);
      protobuf_c_message_free_unpacked(&spec->base, NULL);
      break;
    }
    case 1: {
      Kolo__V1__WorkerRecord *m = NULL, *back = NULL;
      char err[256];
      if (kolo_member_read(text, len, &m, err, sizeof err) != KOLO_OK) break;
      char *json = NULL;
      /* what was read passes the rules, and writes and reads back the same */
      if (kolo_member_validate(m, err, sizeof err) != KOLO_OK ||
          kolo_member_write(m, &json, err, sizeof err) != KOLO_OK ||
          kolo_member_read(json, strlen(json), &back, err, sizeof err) != KOLO_OK ||
          strcmp(back->id, m->id) != 0 || back->n_labels != m->n_labels || back->cpus != m->cpus)
        abort();
      protobuf_c_message_free_unpacked(&back->base, NULL);
      protobuf_c_message_free_unpacked(&m->base, NULL);
      free(json);
      break;
    }
    case 3: {
      Kolo__V1__Assignment *a = NULL, *back = NULL;
      char err[256];
      if (kolo_assignment_read(text, len, &a, err, sizeof err) != KOLO_OK) break;
      char *json = NULL;
      /* what was read passes the rules, and writes and reads back the same */
      if (kolo_assignment_validate(a, err, sizeof err) != KOLO_OK ||
          kolo_assignment_write(a, &json, err, sizeof err) != KOLO_OK ||
          kolo_assignment_read(json, strlen(json), &back, err, sizeof err) != KOLO_OK ||
          strcmp(back->job, a->job) != 0 || strcmp(back->ring, a->ring) != 0 ||
          back->epoch != a->epoch || back->rank != a->rank)
        abort();
      protobuf_c_message_free_unpacked(&back->base, NULL);
      protobuf_c_message_free_unpacked(&a->base, NULL);
      free(json);
      break;
    }
    case 4: {
      Kolo__V1__AgentReport *r = NULL, *back = NULL;
      char err[256];
      if (kolo_report_read(text, len, &r, err, sizeof err) != KOLO_OK) break;
      if (kolo_report_validate(r, err, sizeof err) != KOLO_OK) abort();
      char *json = NULL;
      /* a report that reads with a worker writes and reads back the same */
      if (r->worker && (kolo_report_write(r, &json, err, sizeof err) != KOLO_OK ||
                        kolo_report_read(json, strlen(json), &back, err, sizeof err) != KOLO_OK ||
                        back->exit_code != r->exit_code || back->failed_rank != r->failed_rank ||
                        back->hello != r->hello || strcmp(back->worker, r->worker) != 0))
        abort();
      if (back) protobuf_c_message_free_unpacked(&back->base, NULL);
      protobuf_c_message_free_unpacked(&r->base, NULL);
      free(json);
      break;
    }
    default:
      kolo_drain_mark_applies(text, len, (int64_t)len * 7919);
      break;
  }
  return 0;
}
