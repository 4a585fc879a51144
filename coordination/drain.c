/* Implementation of coordination/drain.h: the drain mark (kolo.v1.DrainMark in
 * proto/kolo/v1/records.proto) through the one codec, and its incarnation rule. */
#include "coordination/drain.h"

#include <stdlib.h>

#include "codec/codec.h"
#include "coordination/etcd.h"
#include "coordination/keys.h"
#include "kolo/v1/records.pb-c.h"

char *kolo_drain_mark_json(int64_t lease, int64_t time_unix_ms) {
  Kolo__V1__DrainMark mark = KOLO__V1__DRAIN_MARK__INIT;
  mark.has_draining = mark.draining = 1;
  mark.has_lease = mark.has_time_unix_ms = 1;
  mark.lease = lease;
  mark.time_unix_ms = time_unix_ms;
  return kolo_codec_dump(&mark.base, 0);
}

int kolo_drain_mark_applies(const char *value, size_t len, int64_t lease) {
  if (value == NULL) return 0;
  ProtobufCMessage *msg = NULL;
  if (kolo_codec_read(value, len, &kolo__v1__drain_mark__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, &msg, NULL) != KOLO_OK)
    return 0;
  const Kolo__V1__DrainMark *mark = (const Kolo__V1__DrainMark *)msg;
  int applies = mark->has_draining && mark->draining && mark->has_lease && mark->lease == lease;
  protobuf_c_message_free_unpacked(msg, NULL);
  return applies;
}

int kolo_drain_marked(kolo_etcd *etcd, const char *worker_id, int64_t lease) {
  char key[256];
  kolo_etcd_kv kv = {0};
  if (kolo_keys_drain(worker_id, key, sizeof key) != KOLO_OK ||
      kolo_etcd_get(etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK)
    return 0;
  int mine = kolo_drain_mark_applies((const char *)kv.value, kv.value_len, lease);
  kolo_etcd_kv_clear(&kv);
  return mine;
}
