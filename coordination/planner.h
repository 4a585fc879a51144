/* The ring planner: pure C, no I/O. Given the members of a job's next epoch and
 * the previous ring, it orders them into ranks so that
 *   - ranks are grouped by host: the ring crosses each host boundary once;
 *   - survivors of the previous ring keep their relative order, and hosts are
 *     ordered by their lowest surviving previous rank, so rank 0 is the survivor
 *     with the lowest previous rank (it holds the last committed state);
 *   - newcomers follow the survivors of their host, ordered by id; hosts with no
 *     survivor follow, ordered by host name;
 *   - the result depends only on the set of members and the previous ring, not on
 *     the order the members are given in.
 * (A previous ring that was not grouped by host gets grouped: grouping wins over
 * order then. Rings this planner made are always grouped.) */
#ifndef KOLO_COORD_PLANNER_H
#define KOLO_COORD_PLANNER_H

#include <stddef.h>

#include "kolo/status.h"

typedef struct kolo_planner_member {
  const char *id;      /* unique, non-empty */
  const char *host;    /* non-empty; members with the same host share a machine */
  const char *address; /* data-plane address, carried along, not interpreted */
} kolo_planner_member;

/* Writes order[rank] = index into members of the member at that rank, for
 * count ranks. previous lists the worker ids of the previous ring by rank
 * (previous_count 0 for a first ring); ids in it that are not members are the
 * departed. KOLO_ERR_INVALID_ARG (with kolo_etcd_last_error() saying why) for no
 * members, an empty id or host, or a duplicate id in members or in previous. */
kolo_status kolo_planner_plan(const kolo_planner_member *members, size_t count,
                              const char *const *previous, size_t previous_count, size_t *order);

#endif
