/* What the negotiator does with a cycle's decisions: every rank decided the
 * same, so each turns them into the same work for the executor in the same
 * order (kolo_engine_act): single operations, fused batches of all-reduces of
 * one dtype and op (up to the fusion threshold), a joined rank's neutral
 * participation in the others' operations, join results, and the failure of a
 * mismatch or a stall. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/engine/engine_state.h"
#include "collective/engine/timeline.h"
#include "common/checks.h"
#include "common/log.h"

kolo_status kolo_engine_grow(void **array, size_t *capacity, size_t need, size_t element) {
  if (need <= *capacity) return KOLO_OK;
  size_t grown = *capacity ? *capacity : 64;
  while (grown < need) grown *= 2;
  void *memory = realloc(*array, grown * element);
  if (memory == NULL) return KOLO_ERR_NO_MEMORY;
  *array = memory;
  *capacity = grown;
  return KOLO_OK;
}

/* ---- acting on a decision ---- */

static kolo_request *internal_request(kolo_negotiator *nego, kolo_request_kind kind,
                                      kolo_dtype dtype) {
  kolo_request *rq = calloc(1, sizeof *rq);
  if (rq == NULL) return NULL;
  rq->comm = nego->comm;
  rq->kind = kind;
  rq->dtype = dtype;
  rq->internal = 1;
  rq->prescale = rq->postscale = 1.0;
  rq->last_rank = -1;
  return rq;
}

/* This rank joined: it takes part in the others' operation with nothing of its own. */
static kolo_request *joined_participation(kolo_negotiator *nego, const kolo_nego_ready *ready) {
  kolo_request *rq =
      internal_request(nego, (kolo_request_kind)ready->meta.kind, (kolo_dtype)ready->meta.dtype);
  if (rq == NULL) return NULL;
  snprintf(rq->name, sizeof rq->name, "%s", ready->name);
  if (rq->kind == KOLO_REQUEST_ALLGATHER) {
    rq->engine_output = 1; /* receives the others' blocks, then drops them */
  } else if (rq->kind == KOLO_REQUEST_BROADCAST) {
    rq->count = ready->meta.count;
    rq->root = ready->meta.root;
    rq->scratch = malloc(rq->count * kolo_dtype_size(rq->dtype) + 1);
    rq->send = rq->recv = rq->scratch;
    if (rq->scratch == NULL) {
      free(rq);
      return NULL;
    }
  } else if (rq->kind == KOLO_REQUEST_REDUCESCATTER) {
    rq->op = (kolo_op)ready->meta.op; /* identity values; the counts come at execution */
    rq->count = ready->meta.count;
  } else if (rq->kind == KOLO_REQUEST_ALLTOALL) {
    /* sends nothing (zero counts, which send points at), receives the others' blocks */
    rq->scratch = calloc((size_t)nego->net->size + 1, sizeof(size_t));
    rq->split_counts = rq->scratch;
    rq->send = rq->scratch;
    rq->engine_output = 1;
    if (rq->scratch == NULL) {
      free(rq);
      return NULL;
    }
  }
  return rq;
}

/* The first rank that submitted a ready entry (the others joined), or -1 when all did. */
static int first_submitter_if_joined(const kolo_negotiator *nego, const kolo_nego_ready *ready) {
  int first = -1, all = 1;
  for (int r = 0; r < nego->net->size; r++) {
    if (ready->submitted[r] && first < 0) first = r;
    all &= ready->submitted[r] != 0;
  }
  return all ? -1 : first;
}

static kolo_status batch_add(kolo_batch *b, kolo_request *owner, int member, size_t count) {
  KOLO_CHECK(kolo_engine_grow((void **)&b->slots, &b->slot_capacity, (size_t)b->slot_count + 1,
                              sizeof *b->slots));
  b->slots[b->slot_count++] = (kolo_batch_slot){.owner = owner, .member = member, .count = count};
  b->elements += count;
  return KOLO_OK;
}

static kolo_status batch_add_owner(kolo_batch *b, kolo_request *owner) {
  KOLO_CHECK(kolo_engine_grow((void **)&b->owners, &b->owner_capacity, (size_t)b->owner_count + 1,
                              sizeof *b->owners));
  b->owners[b->owner_count++] = owner;
  return KOLO_OK;
}

/* Queues a batch for the executor (under nego->queue->mutex). */
static void close_batch(kolo_engine *e, open_batch *slot) {
  if (slot->request == NULL) return;
  kolo_negotiator *nego = e->nego;
  e->stats.batches++;
  e->stats.fused_tensors += (uint64_t)slot->request->batch->owner_count;
  kolo_queue_push_locked(nego->queue, slot->request);
  slot->request = NULL;
  slot->bytes = 0;
}

/* Adds a ready all-reduce to the open batch of its dtype and op (opening one,
 * or closing a full one first). rq NULL: this rank joined (neutral values). */
static kolo_status add_to_batch(kolo_engine *e, const kolo_nego_ready *ready, kolo_request *rq,
                                int *opened) {
  kolo_negotiator *nego = e->nego;
  kolo_dtype dtype = (kolo_dtype)ready->meta.dtype;
  kolo_op op = (kolo_op)ready->meta.op;
  size_t bytes = ready->meta.count * kolo_dtype_size(dtype);
  open_batch *slot = &e->open[dtype * KOLO_OP_COUNT + op];
  size_t threshold = e->config.fusion_threshold;
  if (slot->request != NULL && (threshold == 0 || slot->bytes + bytes > threshold)) {
    close_batch(e, slot);
  }
  if (slot->request == NULL) {
    kolo_request *batch_request = internal_request(nego, KOLO_REQUEST_BATCH, dtype);
    kolo_batch *batch = calloc(1, sizeof *batch);
    if (batch_request == NULL || batch == NULL) {
      free(batch_request);
      free(batch);
      return KOLO_ERR_NO_MEMORY;
    }
    batch->dtype = dtype;
    batch->op = op;
    /* room for the whole cycle up front (no regrowing per tensor) */
    size_t room = e->decision.ready_count;
    if (kolo_engine_grow((void **)&batch->slots, &batch->slot_capacity, room,
                         sizeof *batch->slots) != KOLO_OK ||
        kolo_engine_grow((void **)&batch->owners, &batch->owner_capacity, room,
                         sizeof *batch->owners) != KOLO_OK) {
      kolo_batch_free(batch);
      free(batch_request);
      return KOLO_ERR_NO_MEMORY;
    }
    batch_request->batch = batch;
    slot->request = batch_request;
    e->batch_order[(*opened)++] = batch_request;
  }
  kolo_batch *batch = slot->request->batch;
  slot->bytes += bytes;
  if (rq == NULL) return batch_add(batch, NULL, 0, ready->meta.count);
  for (int m = 0; m < rq->member_count; m++)
    KOLO_CHECK(batch_add(batch, rq, m, rq->members[m].count));
  return batch_add_owner(batch, rq);
}

/* Batches still open at the end of a cycle go to the executor, oldest first. */
static void close_open_batches(kolo_engine *e, int opened) {
  for (int i = 0; i < opened; i++) {
    kolo_request *request = e->batch_order[i];
    for (size_t k = 0; k < sizeof e->open / sizeof e->open[0]; k++) {
      if (e->open[k].request == request) close_batch(e, &e->open[k]);
    }
  }
}

/* One ready name: its error, a batch slot, or an operation of its own. */
static kolo_status dispatch_ready(kolo_engine *e, const kolo_nego_ready *ready, int64_t now,
                                  int *opened) {
  kolo_negotiator *nego = e->nego;
  kolo_request *rq = kolo_names_remove(e->local, ready->name);
  if (rq != NULL) {
    rq->decided_ns = now;
    kolo_timeline_event(e->timeline, rq->name, "NEGOTIATE", rq->submitted_ns, now,
                        ready->status == KOLO_OK ? NULL : ready->message);
  }
  if (ready->status != KOLO_OK) {
    if (rq == NULL) return KOLO_OK;
    snprintf(rq->message, sizeof rq->message, "%s", ready->message);
    KOLO_LOGE("kolo", "rank %d: %s", nego->net->rank, ready->message);
    kolo_request_complete_locked(nego->queue, rq, ready->status);
    return KOLO_OK;
  }
  /* device all-reduces go to NCCL one by one (no host fusion buffer) */
  if (ready->meta.kind == KOLO_REQUEST_ALLREDUCE && !ready->meta.device)
    return add_to_batch(e, ready, rq, opened);
  if (rq == NULL) rq = joined_participation(nego, ready);
  if (rq == NULL) return KOLO_ERR_NO_MEMORY;
  if (ready->meta.kind == KOLO_REQUEST_REDUCESCATTER) {
    rq->counts_from = first_submitter_if_joined(nego, ready) + 1;
  }
  kolo_queue_push_locked(nego->queue, rq);
  return KOLO_OK;
}

kolo_status kolo_engine_act(kolo_engine *e, int64_t now) {
  kolo_negotiator *nego = e->nego;
  kolo_nego_decision *d = &e->decision;
  if (d->stall != KOLO_OK) {
    /* every rank decides this from the same cycle: no forwarding (each keeps the names) */
    kolo_net_fail_local(nego->net, KOLO_ERR_STALLED, d->stall_rank, "%s", d->stall_message);
    e->stalled = 1;
    return KOLO_ERR_STALLED;
  }
  kolo_status status = KOLO_OK;
  pthread_mutex_lock(&nego->queue->mutex);
  while (e->unnamed_head != NULL && e->unnamed_head->seq <= d->unnamed_agreed) {
    kolo_request *rq = e->unnamed_head;
    e->unnamed_head = rq->next;
    if (e->unnamed_head == NULL) e->unnamed_tail = NULL;
    rq->decided_ns = now;
    kolo_queue_push_locked(nego->queue, rq);
  }
  int opened = 0;
  for (size_t i = 0; i < d->ready_count && status == KOLO_OK; i++) {
    status = dispatch_ready(e, &d->ready[i], now, &opened);
  }
  close_open_batches(e, opened);
  if (d->join_done && e->join != NULL) {
    e->join->last_rank = d->last_rank;
    kolo_queue_push_locked(nego->queue, e->join); /* after everything it took part in */
    e->join = NULL;
    e->joined_announced = 0; /* every rank's table forgot the joins: nothing to announce */
  }
  pthread_mutex_unlock(&nego->queue->mutex);
  if (status != KOLO_OK) {
    kolo_net_fail(nego->net, status, nego->net->rank, "rank %d: out of memory in the engine",
                  nego->net->rank);
  }
  return status;
}
