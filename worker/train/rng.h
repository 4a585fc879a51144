/* kolo_train_rng: a small seeded generator (SplitMix64) for weight init,
 * shuffling and synthetic data, so every rank derives identical streams from a seed. */
#ifndef KOLO_TRAIN_RNG_H
#define KOLO_TRAIN_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct kolo_train_rng {
  uint64_t state;
} kolo_train_rng;

static inline void kolo_train_rng_seed(kolo_train_rng *rng, uint64_t seed) {
  rng->state = seed;
}

/* Next 64 random bits (SplitMix64). */
static inline uint64_t kolo_train_rng_next(kolo_train_rng *rng) {
  uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double kolo_train_rng_uniform(kolo_train_rng *rng) {
  return (double)(kolo_train_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n), n > 0 (multiply-shift; bias negligible for n << 2^64). */
static inline size_t kolo_train_rng_below(kolo_train_rng *rng, size_t n) {
  return (size_t)(((unsigned __int128)kolo_train_rng_next(rng) * n) >> 64);
}

/* Standard normal (Box-Muller, one value per call). */
double kolo_train_rng_normal(kolo_train_rng *rng);

#endif
