/* Tensor fusion on the executor: an all-reduce request (a named one's members:
 * one tensor, or a grouped all-reduce's several) and the engine's batch of
 * tensors of one dtype and op each run as one all-reduce. Small tensors (under
 * KOLO_FUSION_COPY_BYTES, 64 KiB) are copied (scaled by their prescale) into the fusion buffer;
 * large ones are reduced where they are, as pieces of one virtual concatenation (ring_fused.c), so
 * fusing never copies the bulk of the bytes. A batch whose total is small takes the latency path
 * (gather and reduce locally) through the fusion buffer. A joined rank's slots contribute op's
 * identity. */
#include <stdlib.h>
#include <string.h>

#include "collective/exec/exec.h"
#include "common/checks.h"
#include "common/clock.h"

#define FUSION_COPY_BYTES (64 * 1024)

void kolo_batch_free(kolo_batch *batch) {
  if (batch == NULL) return;
  free(batch->slots);
  free(batch->owners);
  free(batch);
}

/* Whether item is staged in the fusion buffer (rather than reduced in place). */
static int staged(const kolo_fused_item *item, size_t element, int latency_path) {
  return latency_path || item->send == NULL || item->recv == NULL ||
         item->count * element < FUSION_COPY_BYTES;
}

static void stage_in(char *at, const kolo_fused_item *item, kolo_dtype dtype, kolo_op op) {
  size_t bytes = item->count * kolo_dtype_size(dtype);
  if (item->send == NULL)
    kolo_fill_identity(at, item->count, dtype, op);
  else if (item->prescale != 1.0)
    kolo_scale(at, item->send, item->count, dtype, item->prescale);
  else if (bytes > 0)
    memcpy(at, item->send, bytes);
}

static void stage_out(const char *at, const kolo_fused_item *item, kolo_dtype dtype) {
  size_t bytes = item->count * kolo_dtype_size(dtype);
  if (item->recv == NULL || bytes == 0) return;
  if (item->postscale != 1.0)
    kolo_scale(item->recv, at, item->count, dtype, item->postscale);
  else
    memcpy(item->recv, at, bytes);
}

/* The pieces of the virtual concatenation: runs of staged items share one
 * piece of the fusion buffer; each in-place item is a piece of its own. */
static kolo_status build_pieces(kolo_exec *ex, const kolo_fused_item *items, int count,
                                kolo_dtype dtype, kolo_op op, kolo_piece *pieces,
                                int *pieces_made) {
  size_t element = kolo_dtype_size(dtype), at = 0;
  int made = 0, previous_staged = 0;
  for (int i = 0; i < count; i++) {
    const kolo_fused_item *item = &items[i];
    size_t bytes = item->count * element;
    if (bytes == 0) continue;
    if (staged(item, element, 0)) {
      stage_in(ex->fusion + at, item, dtype, op);
      if (previous_staged)
        pieces[made - 1].bytes += bytes;
      else
        pieces[made++] =
            (kolo_piece){.src = ex->fusion + at, .dst = ex->fusion + at, .bytes = bytes};
      at += bytes;
      previous_staged = 1;
      continue;
    }
    const char *src = item->send;
    if (item->prescale != 1.0) {
      kolo_scale(item->recv, item->send, item->count, dtype, item->prescale);
      src = item->recv;
    }
    pieces[made++] = (kolo_piece){.src = src, .dst = item->recv, .bytes = bytes};
    previous_staged = 0;
  }
  *pieces_made = made;
  return KOLO_OK;
}

static void finish_items(kolo_exec *ex, const kolo_fused_item *items, int count, kolo_dtype dtype,
                         int latency_path) {
  size_t element = kolo_dtype_size(dtype), at = 0;
  for (int i = 0; i < count; i++) {
    const kolo_fused_item *item = &items[i];
    size_t bytes = item->count * element;
    if (bytes == 0) continue;
    if (staged(item, element, latency_path)) {
      stage_out(ex->fusion + at, item, dtype);
      at += bytes;
    } else if (item->postscale != 1.0) {
      kolo_scale(item->recv, item->recv, item->count, dtype, item->postscale);
    }
  }
}

kolo_status kolo_exec_fused(kolo_exec *ex, const kolo_fused_item *items, int count,
                            kolo_dtype dtype, kolo_op op, int engine_thread,
                            kolo_fused_times *times) {
  kolo_fused_times local;
  if (times == NULL) times = &local;
  times->start_ns = kolo_now_ns();
  size_t element = kolo_dtype_size(dtype), elements = 0;
  for (int i = 0; i < count; i++) elements += items[i].count;
  int latency_path =
      elements * element <= ex->ring->small_bytes || elements < (size_t)ex->ring->net->size;
  size_t staged_bytes = 0;
  for (int i = 0; i < count; i++) {
    if (staged(&items[i], element, latency_path)) staged_bytes += items[i].count * element;
  }
  KOLO_CHECK(kolo_ensure_buffer(&ex->fusion, &ex->fusion_bytes, staged_bytes));
  if (latency_path) {
    char *at = ex->fusion;
    for (int i = 0; i < count; i++) {
      stage_in(at, &items[i], dtype, op);
      at += items[i].count * element;
    }
    times->staged_ns = kolo_now_ns();
    KOLO_CHECK(
        kolo_ring_allreduce(ex->ring, ex->fusion, ex->fusion, elements, dtype, op, engine_thread));
  } else {
    kolo_piece *pieces = malloc((size_t)count * sizeof *pieces);
    if (pieces == NULL) return KOLO_ERR_NO_MEMORY;
    int made = 0;
    kolo_status status = build_pieces(ex, items, count, dtype, op, pieces, &made);
    times->staged_ns = kolo_now_ns();
    if (status == KOLO_OK) {
      status = kolo_ring_allreduce_pieces(ex->ring, pieces, made, dtype, op, engine_thread);
    }
    free(pieces);
    if (status != KOLO_OK) return status;
  }
  times->reduced_ns = kolo_now_ns();
  finish_items(ex, items, count, dtype, latency_path);
  times->end_ns = kolo_now_ns();
  return KOLO_OK;
}

/* An all-reduce request: unnamed, the ring's own; named, its members (one, or a grouped
 * all-reduce's several) fused with their prescale and postscale. */
kolo_status kolo_exec_allreduce(kolo_exec *ex, kolo_request *request, int engine_thread) {
  if (request->member_count == 0) { /* the unnamed API */
    return kolo_ring_allreduce(ex->ring, request->send, request->recv, request->count,
                               request->dtype, request->op, engine_thread);
  }
  kolo_fused_item stack_items[8] = {{0}};
  kolo_fused_item *items = stack_items;
  if (request->member_count > 8) {
    items = malloc((size_t)request->member_count * sizeof *items);
    if (items == NULL) {
      kolo_net_fail(ex->ring->net, KOLO_ERR_NO_MEMORY, ex->ring->net->rank,
                    "rank %d: out of memory", ex->ring->net->rank);
      return KOLO_ERR_NO_MEMORY;
    }
  }
  for (int i = 0; i < request->member_count; i++) {
    const kolo_member *m = &request->members[i];
    items[i] = (kolo_fused_item){.send = m->send,
                                 .recv = m->recv,
                                 .count = m->count,
                                 .prescale = request->prescale,
                                 .postscale = request->postscale};
  }
  kolo_status status = kolo_exec_fused(ex, items, request->member_count, request->dtype,
                                       request->op, engine_thread, NULL);
  if (items != stack_items) free(items);
  return status;
}

kolo_status kolo_exec_batch(kolo_exec *ex, kolo_batch *batch, kolo_fused_times *times) {
  if (atomic_load(&ex->ring->net->failed)) return kolo_net_error(ex->ring->net, NULL);
  kolo_fused_item *items =
      malloc((size_t)(batch->slot_count ? batch->slot_count : 1) * sizeof *items);
  if (items == NULL) return KOLO_ERR_NO_MEMORY;
  for (int i = 0; i < batch->slot_count; i++) {
    const kolo_batch_slot *slot = &batch->slots[i];
    if (slot->owner == NULL) {
      items[i] = (kolo_fused_item){.count = slot->count, .prescale = 1.0, .postscale = 1.0};
      continue;
    }
    const kolo_member *m = &slot->owner->members[slot->member];
    items[i] = (kolo_fused_item){.send = m->send,
                                 .recv = m->recv,
                                 .count = m->count,
                                 .prescale = slot->owner->prescale,
                                 .postscale = slot->owner->postscale};
  }
  kolo_status status =
      kolo_exec_fused(ex, items, batch->slot_count, batch->dtype, batch->op, 0, times);
  free(items);
  return status;
}
