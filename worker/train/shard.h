/* kolo_train_shard: the per-epoch order of the training set and each rank's
 * disjoint share of it. All ranks shuffle with the same seed; the global batch
 * of a step is a window of the permutation and rank r of n takes the window's
 * positions r, r+n, r+2n, ... so n workers with batch b consume exactly the
 * samples one worker with batch n*b would, and each sample once per epoch. */
#ifndef KOLO_TRAIN_SHARD_H
#define KOLO_TRAIN_SHARD_H

#include <stddef.h>
#include <stdint.h>

/* perm <- a permutation of 0..count-1, a function of (seed, epoch) only. */
void kolo_train_shuffle(uint64_t seed, uint64_t epoch, size_t *perm, size_t count);

/* Writes into out the sample ids rank takes from the window [offset, offset +
 * global_batch) of perm (clipped to count): perm[offset + rank + i*size].
 * Returns how many it wrote (at most ceil(global_batch / size)). */
size_t kolo_train_shard(const size_t *perm, size_t count, size_t offset, size_t global_batch,
                        int rank, int size, size_t *out);

#endif
