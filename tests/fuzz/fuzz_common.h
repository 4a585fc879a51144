/* Helpers shared by the fuzz targets: every kolo.v1 message descriptor (a target picks one
 * with its first input byte), and a NUL-terminated copy of the input. */
#ifndef KOLO_FUZZ_COMMON_H
#define KOLO_FUZZ_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kolo/v1/cluster.pb-c.h"
#include "kolo/v1/job.pb-c.h"

static const ProtobufCMessageDescriptor *const kolo_fuzz_messages[] = {
    &kolo__v1__job_spec__descriptor,
    &kolo__v1__job__descriptor,
    &kolo__v1__job_status__descriptor,
    &kolo__v1__event__descriptor,
    &kolo__v1__progress__descriptor,
    &kolo__v1__get_job_request__descriptor,
    &kolo__v1__list_jobs_request__descriptor,
    &kolo__v1__list_jobs_response__descriptor,
    &kolo__v1__cancel_job_request__descriptor,
    &kolo__v1__scale_job_request__descriptor,
    &kolo__v1__watch_job_request__descriptor,
    &kolo__v1__worker__descriptor,
    &kolo__v1__list_workers_response__descriptor,
    &kolo__v1__drain_worker_request__descriptor,
};
#define KOLO_FUZZ_N_MESSAGES (sizeof kolo_fuzz_messages / sizeof kolo_fuzz_messages[0])

static inline char *kolo_fuzz_text(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (text == NULL) abort();
  memcpy(text, data, size);
  text[size] = '\0';
  return text;
}

#endif
