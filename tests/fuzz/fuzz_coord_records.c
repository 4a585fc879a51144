/* libFuzzer target: the records kolo processes read from etcd and trust to act on: the
 * per-epoch ring record (coordination/ringspec.c), a worker's membership record
 * (coordination/membership.c) and a drain mark (coordination/drain.c). Input: one byte
 * choosing the record, then JSON. Properties: no crash or leak; a ring record that decodes
 * validates, re-encodes and decodes again to the same encoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordination/drain.h"
#include "coordination/membership.h"
#include "coordination/ringspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  switch (data[0] % 3) {
    case 0: {
      kolo_ringspec spec;
      memset(&spec, 0, sizeof spec);
      if (kolo_ringspec_decode(text, len, &spec) != KOLO_OK) break;
      char *first = NULL, *second = NULL;
      if (kolo_ringspec_encode(&spec, &first) != KOLO_OK) abort();
      kolo_ringspec again;
      memset(&again, 0, sizeof again);
      if (kolo_ringspec_decode(first, strlen(first), &again) != KOLO_OK) abort();
      if (kolo_ringspec_encode(&again, &second) != KOLO_OK || strcmp(first, second) != 0) {
        fprintf(stderr, "ring record not a fixed point:\n%s\n%s\n", first,
                second ? second : "(null)");
        abort();
      }
      free(first);
      free(second);
      kolo_ringspec_clear(&again);
      kolo_ringspec_clear(&spec);
      break;
    }
    case 1: {
      kolo_member m;
      memset(&m, 0, sizeof m);
      if (kolo_member_from_json(text, len, &m) == KOLO_OK) kolo_member_clear(&m);
      break;
    }
    default:
      kolo_drain_mark_applies(text, len, (int64_t)len * 7919);
      break;
  }
  return 0;
}
