/* Implementation of schedule.h: FNV-1a over the shared settings, field by
 * field comparison with the first difference named. */
#include "worker/train/schedule.h"

#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(kolo_train_schedule) == 64, "schedule record layout changed");

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

#define MIX(h, value)               \
  do {                              \
    __typeof__(value) v_ = (value); \
    (h) = fnv((h), &v_, sizeof v_); \
  } while (0)

/* The settings that change the optimisation beyond the named fields. */
static uint64_t settings_of(const kolo_train_schedule_input *in) {
  uint64_t h = 14695981039346656037ULL;
  const kolo_train_optim_config *o = &in->optim;
  MIX(h, (uint32_t)o->kind);
  MIX(h, o->warmup);
  MIX(h, o->momentum);
  MIX(h, o->weight_decay);
  MIX(h, o->beta1);
  MIX(h, o->beta2);
  MIX(h, o->epsilon);
  MIX(h, (uint32_t)(in->scale_lr != 0));
  MIX(h, in->mode);
  MIX(h, in->average_every);
  MIX(h, in->max_staleness);
  MIX(h, in->outer_lr);
  MIX(h, in->outer_momentum);
  MIX(h, in->nesterov);
  MIX(h, in->compression);
  MIX(h, in->fragments);
  MIX(h, in->steps);
  MIX(h, in->epochs);
  const char *model = in->model ? in->model : "";
  return fnv(h, model, strlen(model) + 1);
}

void kolo_train_schedule_derive(const kolo_train_schedule_input *in, int workers,
                                kolo_train_schedule *out) {
  memset(out, 0, sizeof *out);
  if (workers < 1) workers = 1;
  out->version = KOLO_TRAIN_SCHEDULE_VERSION;
  out->start_workers = (uint32_t)workers;
  out->batch = in->batch;
  out->global_batch = in->batch * (uint64_t)workers;
  out->accumulate = in->accumulate;
  out->epoch_samples = in->epoch_samples;
  out->lr = in->optim.lr;
  out->flags = in->scale_lr ? KOLO_TRAIN_SCHEDULE_SCALE_LR : 0;
  out->lr_scale = in->scale_lr ? (float)workers : 1.0f;
  out->settings = settings_of(in);
  out->state_bytes = in->state_bytes;
}

static int differs_u64(const char *name, uint64_t mine, uint64_t ring, char *why, size_t len) {
  if (mine == ring) return 0;
  snprintf(why, len, "%s %llu here, %llu in the ring", name, (unsigned long long)mine,
           (unsigned long long)ring);
  return 1;
}

static int differs_float(const char *name, float mine, float ring, char *why, size_t len) {
  if (memcmp(&mine, &ring, sizeof mine) == 0) return 0;
  snprintf(why, len, "%s %g here, %g in the ring", name, (double)mine, (double)ring);
  return 1;
}

int kolo_train_schedule_agrees(const kolo_train_schedule *mine, const kolo_train_schedule *ring,
                               int joined, char *why, size_t why_len) {
  if (differs_u64("schedule version", mine->version, ring->version, why, why_len) ||
      differs_u64("learning-rate scaling flag", mine->flags, ring->flags, why, why_len) ||
      differs_u64("state size (bytes)", mine->state_bytes, ring->state_bytes, why, why_len) ||
      differs_u64("samples per epoch", mine->epoch_samples, ring->epoch_samples, why, why_len) ||
      differs_u64("batch per worker", mine->batch, ring->batch, why, why_len) ||
      differs_u64("accumulation steps", mine->accumulate, ring->accumulate, why, why_len) ||
      differs_float("learning rate", mine->lr, ring->lr, why, why_len))
    return 0;
  if (mine->settings != ring->settings) {
    snprintf(why, why_len,
             "optimizer, mode, limits or model differ (settings %016llx here, %016llx in the ring)",
             (unsigned long long)mine->settings, (unsigned long long)ring->settings);
    return 0;
  }
  /* the size-derived fields: equal for a survivor, consistent for a newcomer */
  kolo_train_schedule expect = *mine;
  if (joined) {
    expect.start_workers = ring->start_workers;
    expect.global_batch = mine->batch * (uint64_t)ring->start_workers;
    expect.lr_scale =
        mine->flags & KOLO_TRAIN_SCHEDULE_SCALE_LR ? (float)ring->start_workers : 1.0f;
  }
  if (differs_u64("workers at the start", expect.start_workers, ring->start_workers, why,
                  why_len) ||
      differs_u64("global batch", expect.global_batch, ring->global_batch, why, why_len) ||
      differs_float("learning-rate scale", expect.lr_scale, ring->lr_scale, why, why_len))
    return 0;
  if (why_len) why[0] = '\0';
  return 1;
}
