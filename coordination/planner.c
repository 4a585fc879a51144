/* Implementation of coordination/planner.h: sort members by (host group rank,
 * previous rank, id), where a host group's rank is its lowest surviving previous
 * rank and groups without survivors sort by host name after the others. */
#include "coordination/planner.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coordination/etcd_internal.h"

typedef struct slot {
  size_t index;     /* into members */
  size_t prev_rank; /* SIZE_MAX for a newcomer */
  size_t host_rank; /* lowest prev_rank of any member on the same host */
  const char *id;
  const char *host;
} slot;

static int by_plan(const void *pa, const void *pb) {
  const slot *a = pa, *b = pb;
  if (a->host_rank != b->host_rank) return a->host_rank < b->host_rank ? -1 : 1;
  /* Same group rank: either the same host, or two hosts without survivors. */
  int host = strcmp(a->host, b->host);
  if (host != 0) return host;
  if (a->prev_rank != b->prev_rank) return a->prev_rank < b->prev_rank ? -1 : 1;
  return strcmp(a->id, b->id);
}

kolo_status kolo_planner_plan(const kolo_planner_member *members, size_t count,
                              const char *const *previous, size_t previous_count, size_t *order) {
  if (members == NULL || count == 0 || order == NULL)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring plan: no members");
  if (previous_count > 0 && previous == NULL)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring plan: previous ring is NULL");
  for (size_t i = 0; i < count; i++) {
    if (members[i].id == NULL || members[i].id[0] == '\0' || members[i].host == NULL ||
        members[i].host[0] == '\0')
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring plan: member %zu has an empty id or host",
                            i);
    for (size_t k = 0; k < i; k++)
      if (strcmp(members[k].id, members[i].id) == 0)
        return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring plan: member id '%s' appears twice",
                              members[i].id);
  }
  for (size_t i = 0; i < previous_count; i++) {
    if (previous[i] == NULL)
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring plan: previous rank %zu is NULL", i);
    for (size_t k = 0; k < i; k++)
      if (strcmp(previous[k], previous[i]) == 0)
        return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                              "ring plan: '%s' appears twice in the previous ring", previous[i]);
  }
  slot *slots = calloc(count, sizeof *slots);
  if (slots == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < count; i++) {
    slots[i].index = i;
    slots[i].id = members[i].id;
    slots[i].host = members[i].host;
    slots[i].prev_rank = SIZE_MAX;
    for (size_t r = 0; r < previous_count; r++)
      if (strcmp(previous[r], members[i].id) == 0) {
        slots[i].prev_rank = r;
        break;
      }
  }
  for (size_t i = 0; i < count; i++) {
    size_t best = SIZE_MAX;
    for (size_t k = 0; k < count; k++)
      if (strcmp(slots[k].host, slots[i].host) == 0 && slots[k].prev_rank < best)
        best = slots[k].prev_rank;
    slots[i].host_rank = best;
  }
  qsort(slots, count, sizeof *slots, by_plan);
  for (size_t r = 0; r < count; r++) order[r] = slots[r].index;
  free(slots);
  return KOLO_OK;
}
