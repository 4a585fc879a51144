/* kolo_train_state: the contiguous training-state blob (header, parameters,
 * optimizer state) and its checked restore. */
#include "worker/train/state.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* The documented on-disk / on-wire layout (docs/TRAINER.md). */
_Static_assert(sizeof(kolo_train_state_header) == 160, "state header layout changed");
_Static_assert(offsetof(kolo_train_state_header, param_count) == 104, "state header layout");
_Static_assert(offsetof(kolo_train_state_header, seed) == 152, "state header layout");

struct kolo_train_state {
  void *blob;
  size_t size;
};

kolo_status kolo_train_state_create(const char *model, uint32_t optimizer, size_t param_count,
                                    size_t optim_count, kolo_train_state **out) {
  return kolo_train_state_create_flags(model, optimizer, param_count, optim_count, 0, out);
}

kolo_status kolo_train_state_create_flags(const char *model, uint32_t optimizer, size_t param_count,
                                          size_t optim_count, uint32_t flags,
                                          kolo_train_state **out) {
  if (!model || !out || strlen(model) >= sizeof(((kolo_train_state_header *)0)->model) ||
      (flags & ~KOLO_TRAIN_STATE_OUTER)) {
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_train_state *s = calloc(1, sizeof *s);
  if (!s) return KOLO_ERR_NO_MEMORY;
  size_t outer = flags & KOLO_TRAIN_STATE_OUTER ? 2 * param_count : 0;
  s->size = sizeof(kolo_train_state_header) + (param_count + optim_count + outer) * sizeof(float);
  s->blob = calloc(1, s->size);
  if (!s->blob) {
    free(s);
    return KOLO_ERR_NO_MEMORY;
  }
  kolo_train_state_header *h = s->blob;
  strcpy(h->model, model);
  h->optimizer = optimizer;
  h->flags = flags;
  h->param_count = param_count;
  h->optim_count = optim_count;
  *out = s;
  return KOLO_OK;
}

void kolo_train_state_destroy(kolo_train_state *s) {
  if (!s) return;
  free(s->blob);
  free(s);
}

kolo_train_state_header *kolo_train_state_header_of(kolo_train_state *s) {
  return s->blob;
}

float *kolo_train_state_params(kolo_train_state *s) {
  return (float *)((char *)s->blob + sizeof(kolo_train_state_header));
}

float *kolo_train_state_optim(kolo_train_state *s) {
  return kolo_train_state_params(s) + kolo_train_state_header_of(s)->param_count;
}

float *kolo_train_state_round_start(kolo_train_state *s) {
  const kolo_train_state_header *h = kolo_train_state_header_of(s);
  if (!(h->flags & KOLO_TRAIN_STATE_OUTER)) return NULL;
  return kolo_train_state_optim(s) + h->optim_count;
}

float *kolo_train_state_outer_momentum(kolo_train_state *s) {
  float *start = kolo_train_state_round_start(s);
  return start ? start + kolo_train_state_header_of(s)->param_count : NULL;
}

void *kolo_train_state_data(kolo_train_state *s) {
  return s->blob;
}
size_t kolo_train_state_size(const kolo_train_state *s) {
  return s->size;
}

uint32_t kolo_train_state_checksum(const kolo_train_state *s) {
  const unsigned char *p = s->blob;
  size_t n = s->size;
  uint64_t lane[4] = {0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL, 0x165667b19e3779f9ULL,
                      0x27d4eb2f165667c5ULL};
  const uint64_t prime = 0x100000001b3ULL;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; k++) {
      uint64_t w;
      memcpy(&w, p + i + 8 * (size_t)k, sizeof w);
      lane[k] = (lane[k] ^ w) * prime;
    }
  }
  for (; i < n; i++) lane[0] = (lane[0] ^ p[i]) * prime;
  uint64_t h = lane[0] ^ (lane[1] * 31) ^ (lane[2] * 961) ^ (lane[3] * 29791) ^ (uint64_t)n;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 32;
  return (uint32_t)h;
}

kolo_status kolo_train_state_load(kolo_train_state *s, const void *data, size_t size) {
  if (!s || !data) return KOLO_ERR_INVALID_ARG;
  if (size < sizeof(kolo_train_state_header)) return KOLO_ERR_CORRUPT;
  kolo_train_state_header in;
  memcpy(&in, data, sizeof in);
  const kolo_train_state_header *mine = s->blob;
  if (memchr(in.model, 0, sizeof in.model) == NULL) return KOLO_ERR_CORRUPT;
  if (strcmp(in.model, mine->model) != 0 || in.optimizer != mine->optimizer ||
      in.param_count != mine->param_count || in.optim_count != mine->optim_count ||
      in.flags != mine->flags) {
    KOLO_LOGE("train", "state is for %s/%u (%llu params%s), this run is %s/%u (%llu params%s)",
              in.model, in.optimizer, (unsigned long long)in.param_count,
              in.flags & KOLO_TRAIN_STATE_OUTER ? ", outer optimizer" : "", mine->model,
              mine->optimizer, (unsigned long long)mine->param_count,
              mine->flags & KOLO_TRAIN_STATE_OUTER ? ", outer optimizer" : "");
    return KOLO_ERR_INVALID_ARG;
  }
  if (size != s->size) return KOLO_ERR_CORRUPT;
  memcpy(s->blob, data, size);
  return KOLO_OK;
}
