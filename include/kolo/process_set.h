/* libkolo's process sets: a sub-communicator over some ranks of a communicator
 * (Horovod's process sets, MPI_Comm_split with an explicit member list).
 *
 * kolo_comm_split is collective over the parent communicator: every rank of it
 * calls it with the same options, members and non-members alike. The ranks
 * agree over the parent ring (each rank's members, id and verdict on them are
 * all-gathered), so either every rank gets the same error or every member gets
 * a communicator of its own: a ring of its own connections among the members
 * (addresses exchanged over the parent), with the parent's epoch, timeout and
 * liveness judgement, and a secret derived from the parent's and the set. The
 * new communicator is a kolo_comm like any other: every collective of kolo.h and
 * engine.h runs on it with the same algorithms and exactness, and a dead member
 * fails it like a ring's dead rank (KOLO_ERR_PEER_LOST naming the member's rank
 * in the set). It is independent of its parent once formed: destroy it with
 * kolo_comm_destroy, before or after the parent. */
#ifndef KOLO_PROCESS_SET_H
#define KOLO_PROCESS_SET_H

#include "kolo/kolo.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* libkolo exports these: kolo/api.h */

/* The largest id a process set may have (ids are 1..KOLO_PROCESS_SET_ID_MAX;
 * 0 is the whole communicator, Horovod's global process set). */
#define KOLO_PROCESS_SET_ID_MAX 65535

typedef struct kolo_split_options {
  const int *ranks; /* the members: ranks of the parent, strictly ascending */
  int n_ranks;      /* 1..size of the parent */
  int id;           /* the set's id, 1..KOLO_PROCESS_SET_ID_MAX, the same on every rank */
  int timeout_ms;   /* forming the set's ring; <= 0: the parent's timeout */
} kolo_split_options;

/* Collective over comm. A member's *out is the set's communicator, whose rank r
 * is the parent's rank options->ranks[r]; a non-member's *out is NULL (and the
 * call still returns KOLO_OK: it took part in the agreement). Every rank returns
 * the same status: KOLO_ERR_INVALID_ARG when any rank's options are bad (a rank
 * out of range, repeated or unsorted, no members, an id out of range),
 * KOLO_ERR_MISMATCH when ranks gave different members or ids (the log names
 * them), or the parent's failure. Forming the members' ring may fail after the
 * agreement (a member died: KOLO_ERR_PEER_LOST or KOLO_ERR_TIMEOUT on the
 * members that waited for it). */
kolo_status kolo_comm_split(kolo_comm *comm, const kolo_split_options *options, kolo_comm **out);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
