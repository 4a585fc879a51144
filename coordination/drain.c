/* Implementation of coordination/drain.h: the drain mark's codec and its incarnation rule. */
#include "coordination/drain.h"

#include <jansson.h>
#include <stdlib.h>

char *kolo_drain_mark_json(int64_t lease, int64_t time_unix_ms) {
  json_t *mark = json_pack("{s:b, s:I, s:I}", "draining", 1, "lease", (json_int_t)lease,
                           "time_unix_ms", (json_int_t)time_unix_ms);
  char *text = mark ? json_dumps(mark, JSON_COMPACT) : NULL;
  json_decref(mark);
  return text;
}

int kolo_drain_mark_applies(const char *value, size_t len, int64_t lease) {
  if (value == NULL) return 0;
  json_t *mark = json_loadb(value, len, JSON_REJECT_DUPLICATES, NULL);
  json_t *owner = json_object_get(mark, "lease");
  int applies = json_is_object(mark) && json_is_true(json_object_get(mark, "draining")) &&
                json_is_integer(owner) && json_integer_value(owner) == (json_int_t)lease;
  json_decref(mark);
  return applies;
}
