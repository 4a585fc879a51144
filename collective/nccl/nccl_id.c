/* kolo_nccl: the NCCL unique id of an epoch, made by rank 0 and carried as hex
 * text in the ring spec (etcd JSON, kolorun rendezvous); decoding is strict. */
#include <string.h>

#include "common/log.h"
#include "nccl_internal.h"

#define COMPONENT "nccl"

kolo_status kolo_nccl_id_create(uint8_t id[KOLO_NCCL_ID_BYTES]) {
  if (id == NULL) return KOLO_ERR_INVALID_ARG;
  _Static_assert(sizeof(ncclUniqueId) == KOLO_NCCL_ID_BYTES, "NCCL unique id size changed");
  int n = 0;
  char message[256];
  kolo_status st = kolo_nccl_device_count(&n, message, sizeof message);
  if (st != KOLO_OK) {
    KOLO_LOGE(COMPONENT, "unique id: %s: %s", kolo_strerror(st), message);
    return st;
  }
  ncclUniqueId uid;
  ncclResult_t r = ncclGetUniqueId(&uid);
  if (r != ncclSuccess) {
    kolo_nccl_describe_nccl(r, "ncclGetUniqueId", NULL, message, sizeof message);
    KOLO_LOGE(COMPONENT, "%s", message);
    return kolo_nccl_status_from_nccl(r);
  }
  memcpy(id, uid.internal, KOLO_NCCL_ID_BYTES);
  return KOLO_OK;
}

kolo_status kolo_nccl_id_encode(const uint8_t id[KOLO_NCCL_ID_BYTES], char *text, size_t length) {
  static const char digits[] = "0123456789abcdef";
  if (id == NULL || text == NULL) return KOLO_ERR_INVALID_ARG;
  if (length < KOLO_NCCL_ID_TEXT_LENGTH + 1) return KOLO_ERR_TOO_LARGE;
  for (size_t i = 0; i < KOLO_NCCL_ID_BYTES; i++) {
    text[2 * i] = digits[id[i] >> 4];
    text[2 * i + 1] = digits[id[i] & 0x0f];
  }
  text[KOLO_NCCL_ID_TEXT_LENGTH] = '\0';
  return KOLO_OK;
}

/* Value of one hex digit, or -1. */
static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

kolo_status kolo_nccl_id_decode(const char *text, uint8_t id[KOLO_NCCL_ID_BYTES]) {
  if (text == NULL || id == NULL) return KOLO_ERR_INVALID_ARG;
  /* strnlen bounds the scan: a long string is rejected without reading it all. */
  if (strnlen(text, KOLO_NCCL_ID_TEXT_LENGTH + 1) != KOLO_NCCL_ID_TEXT_LENGTH)
    return KOLO_ERR_PARSE;
  uint8_t bytes[KOLO_NCCL_ID_BYTES];
  for (size_t i = 0; i < KOLO_NCCL_ID_BYTES; i++) {
    int hi = hex_value(text[2 * i]);
    int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return KOLO_ERR_PARSE;
    bytes[i] = (uint8_t)(hi << 4 | lo);
  }
  memcpy(id, bytes, KOLO_NCCL_ID_BYTES);
  return KOLO_OK;
}
