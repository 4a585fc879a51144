/* Warm joins (warm_join.h): the pure choice of whom to wait for, and the agent's side, which
 * holds a survivor's RING line while the newcomers' processes start. */
#include "worker/agent/warm_join.h"

#include "coordination/keys.h"
#include "worker/agent/agent_internal.h"

size_t kolo_agent_warm_join_newcomers(const Kolo__V1__RingRecord *ring, const char *self,
                                      int64_t formed_epoch, size_t *out, size_t cap) {
  size_t n = 0;
  if (formed_epoch <= 0) return 0;
  for (size_t i = 0; i < ring->n_members; i++) {
    const Kolo__V1__RingMember *m = ring->members[i];
    if (m->since_epoch <= formed_epoch || strcmp(m->worker_id, self) == 0) continue;
    if (n < cap) out[n] = i;
    n++;
  }
  return n;
}

int kolo_agent_warm_join_ready(const Kolo__V1__AgentReport *r, int64_t epoch) {
  return r->epoch >= epoch && (r->hello || r->exited);
}

/* Forgets the held ring's newcomers. */
static void warm_clear(kolo_agent_warm *w) {
  for (size_t i = 0; i < w->n; i++) free(w->ids[i]);
  free(w->ids);
  *w = (kolo_agent_warm){0};
}

void kolo_agent_warm_join_begin(agent *a, const Kolo__V1__RingRecord *ring) {
  kolo_agent_warm *w = &a->warm;
  warm_clear(w);
  size_t n = kolo_agent_warm_join_newcomers(ring, a->id, a->formed_epoch, NULL, 0);
  if (n == 0 || a->opts->warm_join_ms == 0 || !kolo_agent_proc_connected(a->proc)) return;
  size_t *index = calloc(n, sizeof *index);
  w->ids = calloc(n, sizeof *w->ids);
  if (index == NULL || w->ids == NULL) { /* no memory: send the line at once, as before */
    free(index);
    warm_clear(w);
    return;
  }
  kolo_agent_warm_join_newcomers(ring, a->id, a->formed_epoch, index, n);
  for (size_t i = 0; i < n; i++) {
    char *id = strdup(ring->members[index[i]]->worker_id);
    if (id != NULL) w->ids[w->n++] = id; /* no memory: that one is not waited for */
  }
  free(index);
  if (w->n == 0) {
    warm_clear(w);
    return;
  }
  w->epoch = ring->epoch;
  w->since_ms = mono_ms();
  w->deadline_ms = w->since_ms + a->opts->warm_join_ms;
  KOLO_LOGI(LOG, "ring epoch %" PRId64 " of job %s: training on until %s%s (%zu new) %s up",
            ring->epoch, a->job, w->ids[0], w->n > 1 ? " and the others" : "", w->n,
            w->n == 1 ? "is" : "are");
}

/* Whether worker id's process is up for the held epoch (its report says so). */
static int newcomer_ready(agent *a, const char *id) {
  char key[512];
  kolo_etcd_kv kv = {0};
  Kolo__V1__AgentReport *report = NULL;
  int ready = 0;
  if (kolo_keys_report(a->job, id, key, sizeof key) != KOLO_OK) return 1; /* cannot ask */
  if (kolo_etcd_get(a->etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK || kv.value == NULL)
    goto out;
  if (kolo_report_read((const char *)kv.value, kv.value_len, &report, NULL, 0) == KOLO_OK)
    ready = kolo_agent_warm_join_ready(report, a->warm.epoch);
out:
  if (report) protobuf_c_message_free_unpacked(&report->base, NULL);
  kolo_etcd_kv_clear(&kv);
  return ready;
}

int kolo_agent_warm_join_ready_now(agent *a) {
  kolo_agent_warm *w = &a->warm;
  if (w->epoch == 0) return 1;
  int64_t now = mono_ms();
  if (w->epoch != a->epoch || a->proc == NULL) { /* a newer ring, or no process: not ours */
    warm_clear(w);
    return 1;
  }
  if (now >= w->deadline_ms) {
    KOLO_LOGW(LOG, "ring epoch %" PRId64 ": newcomer %s not up after %d ms; switching anyway",
              w->epoch, w->ids[0], a->opts->warm_join_ms);
    warm_clear(w);
    return 1;
  }
  if (now - w->checked_ms < KOLO_AGENT_WARM_JOIN_POLL_MS) return 0;
  w->checked_ms = now;
  while (w->n > 0 && newcomer_ready(a, w->ids[w->n - 1])) free(w->ids[--w->n]);
  if (w->n > 0) return 0;
  KOLO_LOGI(LOG, "ring epoch %" PRId64 ": its newcomers are up after %" PRId64 " ms; switching",
            w->epoch, now - w->since_ms);
  warm_clear(w);
  return 1;
}

int kolo_agent_warm_join_wait_ms(const agent *a, int wait_ms) {
  return a->warm.epoch != 0 && wait_ms > KOLO_AGENT_WARM_JOIN_POLL_MS ? KOLO_AGENT_WARM_JOIN_POLL_MS
                                                                      : wait_ms;
}

void kolo_agent_warm_join_end(agent *a) {
  warm_clear(&a->warm);
}
