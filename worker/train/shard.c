/* kolo_train_shard: seeded Fisher-Yates shuffle per epoch and strided sharding
 * of each global-batch window across ranks. */
#include "worker/train/shard.h"

#include "worker/train/rng.h"

void kolo_train_shuffle(uint64_t seed, uint64_t epoch, size_t *perm, size_t count) {
  kolo_train_rng rng;
  kolo_train_rng_seed(&rng, seed * 0x9E3779B97F4A7C15ull + epoch + 1);
  for (size_t i = 0; i < count; i++) perm[i] = i;
  for (size_t i = count; i > 1; i--) {
    size_t j = kolo_train_rng_below(&rng, i);
    size_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}

size_t kolo_train_shard(const size_t *perm, size_t count, size_t offset, size_t global_batch,
                        int rank, int size, size_t *out) {
  if (size <= 0 || rank < 0 || rank >= size || offset >= count) return 0;
  size_t end = offset + global_batch;
  if (end > count) end = count;
  size_t n = 0;
  for (size_t pos = offset + (size_t)rank; pos < end; pos += (size_t)size) out[n++] = perm[pos];
  return n;
}
