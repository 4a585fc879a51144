/* A worker record built in memory for the coordination tests (strings borrowed;
 * kolo_member_write sets which fields are present). */
#ifndef KOLO_TESTS_SUPPORT_WORKER_RECORD_H
#define KOLO_TESTS_SUPPORT_WORKER_RECORD_H

#include <stdint.h>

#include "coordination/membership.h"

static inline Kolo__V1__WorkerRecord kolo_test_worker_record(const char *id, const char *host,
                                                             const char *address, int64_t cpus,
                                                             const char *state) {
  Kolo__V1__WorkerRecord m = KOLO__V1__WORKER_RECORD__INIT;
  m.id = (char *)id;
  m.host = (char *)host;
  m.address = (char *)address;
  m.cpus = cpus;
  m.state = (char *)state;
  return m;
}

#endif
