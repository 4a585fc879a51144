/* The two lists the store's watch keeps so that nothing walks every job the view holds: the
 * live jobs (their stored status not ended), which the scheduler's live read walks
 * (store_records.c), and the jobs the batch being applied touched, which on_watch rebuilds
 * and tells subscribers of (store.c). Both have room for as many entries as the view has
 * room for (kolo_server_store_lists_reserve, when the view grows), so keeping them never
 * allocates and never fails; both are under the store's write lock. */
#include <stdlib.h>
#include <string.h>

#include "coordination/job_status.h"
#include "server/store_internal.h"

kolo_status kolo_server_store_lists_reserve(kolo_server_store *s, size_t cap) {
  entry **live = realloc(s->live, cap * sizeof *live);
  if (live == NULL) return KOLO_ERR_NO_MEMORY;
  s->live = live;
  entry **touched = realloc(s->touched, cap * sizeof *touched);
  if (touched == NULL) return KOLO_ERR_NO_MEMORY;
  s->touched = touched;
  return KOLO_OK;
}

void kolo_server_store_lists_free(kolo_server_store *s) {
  free(s->live);
  free(s->touched);
  s->live = s->touched = NULL;
  s->n_live = s->n_touched = 0;
}

/* ---- the live jobs ---- */

/* Whether the view holds job e's stored status (the scheduler's, not the one the view shows
 * with pending intents applied) as ended (SUCCEEDED, FAILED, CANCELLED): nothing of it
 * changes any more, so nothing under it is the scheduler's. A job cancelled by an intent the
 * scheduler has not acted on yet is live: the scheduler still has to. So is one whose status
 * the view has not seen yet. */
static int job_ended(const entry *e) {
  return e->stored != NULL && kolo_job_status_final(e->stored->phase);
}

/* Index of the entry with id in the live list, or -(insertion point) - 1. */
static long find_live(const kolo_server_store *s, const char *id) {
  return kolo_server_sorted_find(s->live, s->n_live, sizeof *s->live, kolo_server_entry_id, id);
}

static void live_remove(kolo_server_store *s, entry *e) {
  if (!e->live) return;
  long at = find_live(s, e->id);
  if (at >= 0) {
    memmove(&s->live[at], &s->live[at + 1], (s->n_live - (size_t)at - 1) * sizeof *s->live);
    s->n_live--;
  }
  e->live = 0;
}

void kolo_server_store_live_update(kolo_server_store *s, entry *e) {
  if (job_ended(e)) {
    live_remove(s, e);
    return;
  }
  if (e->live) return;
  /* room: n_live < count <= the room reserved */
  size_t pos = (size_t)(-find_live(s, e->id) - 1);
  memmove(&s->live[pos + 1], &s->live[pos], (s->n_live - pos) * sizeof *s->live);
  s->live[pos] = e;
  s->n_live++;
  e->live = 1;
}

/* ---- the entries the batch touched ---- */

void kolo_server_store_touch(kolo_server_store *s, entry *e) {
  if (e->touched) return;
  e->touched = 1;
  s->touched[s->n_touched++] = e; /* room: each entry once, n_touched <= count */
}

static int by_id(const void *a, const void *b) {
  return strcmp((*(entry *const *)a)->id, (*(entry *const *)b)->id);
}

size_t kolo_server_store_take_touched(kolo_server_store *s) {
  for (size_t i = 0; i < s->n_touched; i++) s->touched[i]->touched = 0;
  if (s->n_touched > 1) qsort(s->touched, s->n_touched, sizeof *s->touched, by_id);
  size_t n = s->n_touched;
  s->n_touched = 0;
  return n;
}

/* ---- both ---- */

void kolo_server_store_lists_forget(kolo_server_store *s, entry *e) {
  live_remove(s, e);
  if (!e->touched) return;
  for (size_t i = 0; i < s->n_touched; i++)
    if (s->touched[i] == e) {
      s->touched[i] = s->touched[--s->n_touched];
      break;
    }
  e->touched = 0;
}

void kolo_server_store_lists_clear(kolo_server_store *s) {
  for (size_t i = 0; i < s->n_live; i++) s->live[i]->live = 0;
  for (size_t i = 0; i < s->n_touched; i++) s->touched[i]->touched = 0;
  s->n_live = s->n_touched = 0;
}
