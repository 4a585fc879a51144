/* libFuzzer target: etcd's JSON gateway replies as libkolo_coord parses them
 * (coordination/etcd_json.c): range replies, single key-values and watch-stream lines.
 * Input: one byte choosing the parser, then the reply text. Property: no crash or leak. */
#include <jansson.h>
#include <string.h>

#include "coordination/etcd_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  switch (data[0] % 3) {
    case 0: {
      kolo_etcd_watch_message m;
      memset(&m, 0, sizeof m);
      if (kolo_etcd_watch_message_parse(text, len, &m) == KOLO_OK)
        kolo_etcd_watch_message_clear(&m);
      break;
    }
    case 1: {
      json_t *reply = json_loadb(text, len, 0, NULL);
      if (reply == NULL) break;
      kolo_etcd_range_result r;
      memset(&r, 0, sizeof r);
      if (kolo_etcd_range_from_json(reply, &r) == KOLO_OK) kolo_etcd_range_result_free(&r);
      int64_t revision;
      kolo_etcd_header_revision(reply, &revision);
      json_decref(reply);
      break;
    }
    default: {
      json_t *obj = json_loadb(text, len, 0, NULL);
      if (obj == NULL) break;
      kolo_etcd_kv kv;
      memset(&kv, 0, sizeof kv);
      if (kolo_etcd_kv_from_json(obj, &kv) == KOLO_OK) kolo_etcd_kv_clear(&kv);
      json_decref(obj);
      break;
    }
  }
  return 0;
}
