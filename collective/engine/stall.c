/* The stall inspector, run by the negotiator each cycle: a name some ranks
 * submitted and others did not is logged after KOLO_STALL_WARNING seconds and,
 * after KOLO_STALL_TIMEOUT, declared in this rank's next message (every rank
 * then fails the communicator with KOLO_ERR_STALLED, naming the tensor and the
 * missing ranks); unnamed operations some ranks issued and others did not are
 * watched the same way. */
#include <stdio.h>
#include <string.h>

#include "collective/engine/engine_state.h"
#include "common/log.h"

typedef struct stall_scan {
  kolo_engine *engine;
  int64_t now;
  int64_t next; /* the next time the inspector has something to do */
} stall_scan;

static int inspect_entry(kolo_nego_entry *entry, void *context) {
  stall_scan *scan = context;
  kolo_engine *e = scan->engine;
  kolo_negotiator *nego = e->nego;
  int64_t age = scan->now - entry->since_ns;
  if (!entry->warned && age >= e->config.stall_warning_ns) {
    char have[160], missing[160];
    kolo_nego_format_ranks(entry->submitted, nego->net->size, 1, have, sizeof have);
    kolo_nego_format_ranks(entry->submitted, nego->net->size, 0, missing, sizeof missing);
    KOLO_LOGW("kolo",
              "rank %d: stall: tensor '%s' submitted by rank(s) %s, still missing from "
              "rank(s) %s after %.0f s",
              nego->net->rank, entry->name, have, missing, (double)age / 1e9);
    entry->warned = 1;
  }
  if (age >= e->config.stall_timeout_ns) {
    if (e->stall_count < 4) {
      snprintf(e->stall_names[e->stall_count++], sizeof e->stall_names[0], "%s", entry->name);
      kolo_engine_note_news(e);
    }
    return 1;
  }
  int64_t due =
      entry->since_ns + (entry->warned ? e->config.stall_timeout_ns : e->config.stall_warning_ns);
  if (due < scan->next) scan->next = due;
  return 0;
}

/* Checks the stall deadlines; returns the next time it must look again. */
int64_t kolo_engine_inspect_stalls(kolo_engine *e, int64_t now) {
  stall_scan scan = {.engine = e, .now = now, .next = INT64_MAX};
  if (e->stall_count == 0) kolo_nego_for_each_pending(e->table, inspect_entry, &scan);
  kolo_negotiator *nego = e->nego;
  uint64_t low = UINT64_MAX, high = 0;
  for (int r = 0; r < nego->net->size; r++) {
    uint64_t count = kolo_nego_unnamed_count(e->table, r);
    low = count < low ? count : low;
    high = count > high ? count : high;
  }
  if (low == high) {
    e->unnamed_behind_since = 0;
    e->unnamed_warned = 0;
    return scan.next;
  }
  if (e->unnamed_behind_since == 0) e->unnamed_behind_since = now;
  int64_t age = now - e->unnamed_behind_since;
  if (!e->unnamed_warned && age >= e->config.stall_warning_ns) {
    KOLO_LOGW("kolo",
              "rank %d: stall: unnamed operation #%llu issued by some ranks only, for %.0f s",
              nego->net->rank, (unsigned long long)(low + 1), (double)age / 1e9);
    e->unnamed_warned = 1;
  }
  if (age >= e->config.stall_timeout_ns && !e->declare_unnamed) {
    e->declare_unnamed = 1;
    kolo_engine_note_news(e);
  }
  int64_t due = e->unnamed_behind_since +
                (e->unnamed_warned ? e->config.stall_timeout_ns : e->config.stall_warning_ns);
  return due < scan.next ? due : scan.next;
}
