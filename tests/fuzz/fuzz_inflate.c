/* libFuzzer target: the bounded inflater of compressed gRPC requests (server/inflate.c).
 * Properties: no crash, leak or hang on any stream; a success never exceeds the limit. */
#include <stdlib.h>

#include "server/inflate.h"

#define LIMIT (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *out = NULL;
  size_t len = 0;
  if (kolo_server_inflate(data, size, LIMIT, &out, &len) == KOLO_OK) {
    if (len > LIMIT) abort();
    free(out);
  }
  return 0;
}
