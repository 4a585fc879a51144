/* Which all-reduce runs: a pure function of what every rank knows alike (the
 * ring's shape, the element count and bytes, the size settings and the
 * KOLO_ALLREDUCE_ALGO override, all read from the same environment on every
 * rank), never of a rank's own buffers or timing, so every rank runs the same
 * algorithm and the plans meet. The shape comes from the net floor (kolo_shape:
 * hosts are runs of ranks whose addresses name one host) and is re-read with
 * every epoch's ring. The flat ring's own choice between the gather, the pair
 * and the ring (kolo_allreduce_choose) and the channel question it asks
 * (kolo_bulk_is_shm) are here too: the algorithms call the selection, never
 * the other way round. */
#include <string.h>

#include "collective/algo/algo.h"
#include "common/log.h"

static const char *const names[KOLO_ALLREDUCE_ALGO_COUNT] = {"gather",   "pair",      "ring",
                                                             "doubling", "two_level", "halving"};

int kolo_doubling_steps(int size) {
  int p = kolo_doubling_pow2(size), steps = 0;
  for (int q = p; q > 1; q /= 2) steps++;
  return steps + (p != size ? 2 : 0);
}

int kolo_allreduce_algo_parse(const char *name) {
  if (name == NULL || *name == '\0' || strcmp(name, "auto") == 0) return -1;
  for (int a = 0; a < KOLO_ALLREDUCE_ALGO_COUNT; a++)
    if (strcmp(name, names[a]) == 0) return a;
  return -2;
}

const char *kolo_allreduce_algo_name(kolo_allreduce_algo algo) {
  return (int)algo >= 0 && algo < KOLO_ALLREDUCE_ALGO_COUNT ? names[algo] : "unknown";
}

static int usable(const kolo_allreduce_shape *shape, int algo, size_t count) {
  switch (algo) {
    case KOLO_ALLREDUCE_GATHER:
      return 1;
    case KOLO_ALLREDUCE_PAIR:
      return shape->size == 2;
    case KOLO_ALLREDUCE_RING:
      return count >= (size_t)shape->size;
    case KOLO_ALLREDUCE_DOUBLING:
      return shape->mesh && shape->size >= 3;
    case KOLO_ALLREDUCE_HALVING:
      return shape->mesh && shape->size >= 3 && count >= (size_t)shape->size;
    case KOLO_ALLREDUCE_TWO_LEVEL:
      return shape->mesh && shape->hosts >= 2 && shape->per_host >= 2 &&
             count >= (size_t)shape->size;
    default:
      return 0;
  }
}

size_t kolo_doubling_limit(const kolo_allreduce_shape *shape, const kolo_allreduce_limits *limits) {
  return shape->hosts >= 2 ? limits->doubling_hosts_max_bytes : limits->doubling_max_bytes;
}

kolo_allreduce_algo kolo_allreduce_choose(int size, size_t count, size_t bytes, size_t small_bytes,
                                          size_t pair_min_bytes, size_t pair_max_bytes,
                                          size_t pair_shm_max_bytes, int over_shm) {
  if (count < (size_t)size) return KOLO_ALLREDUCE_GATHER;
  /* over shared memory the pair reduces the peer's buffer straight out of the
   * ring (the gather copies it out first), up to where the ring's halved
   * reduction wins (#16 A/B runs) */
  if (size == 2 && over_shm && bytes <= pair_shm_max_bytes) return KOLO_ALLREDUCE_PAIR;
  if (bytes <= small_bytes) return KOLO_ALLREDUCE_GATHER;
  /* over TCP the kernel's copies dominate and the pair moves the same bytes as
   * the ring with no step waiting on the peer's reduction; over shared memory
   * copies are cheap and the ring's halved reduction wins, as it does over TCP
   * once the buffers leave the cache (#16 A/B runs) */
  if (size == 2 && !over_shm && bytes >= pair_min_bytes && bytes <= pair_max_bytes) {
    return KOLO_ALLREDUCE_PAIR;
  }
  return KOLO_ALLREDUCE_RING;
}

kolo_allreduce_algo kolo_allreduce_select(const kolo_allreduce_shape *shape,
                                          const kolo_allreduce_limits *limits, size_t count,
                                          size_t bytes) {
  if (limits->forced >= 0 && usable(shape, limits->forced, count))
    return (kolo_allreduce_algo)limits->forced;
  if (usable(shape, KOLO_ALLREDUCE_DOUBLING, count) &&
      bytes <= kolo_doubling_limit(shape, limits) &&
      kolo_doubling_steps(shape->size) < shape->size - 1)
    return KOLO_ALLREDUCE_DOUBLING;
  int two_level = usable(shape, KOLO_ALLREDUCE_TWO_LEVEL, count);
  if (shape->hosts >= 2 && usable(shape, KOLO_ALLREDUCE_HALVING, count) &&
      bytes <= (two_level ? limits->halving_hosts_max_bytes : limits->halving_ring_max_bytes))
    return KOLO_ALLREDUCE_HALVING;
  if (two_level && bytes > limits->two_level_min_bytes) return KOLO_ALLREDUCE_TWO_LEVEL;
  return kolo_allreduce_choose(shape->size, count, bytes, limits->small_bytes,
                               limits->pair_min_bytes, limits->pair_max_bytes,
                               limits->pair_shm_max_bytes, shape->over_shm);
}

/* Whether this operation's bulk channel is shared memory in either direction
 * (the same answer on both ends of each link, so on every rank). */
int kolo_bulk_is_shm(const kolo_ring *ring, size_t bytes) {
  return kolo_channel_is_bulk(
             kolo_direction_pick(&ring->net->next, bytes, ring->net->bulk_min_bytes)) ||
         kolo_channel_is_bulk(
             kolo_direction_pick(&ring->net->prev, bytes, ring->net->bulk_min_bytes));
}

kolo_allreduce_algo kolo_ring_select(kolo_ring *ring, size_t count, size_t bytes) {
  const kolo_net *net = ring->net;
  kolo_allreduce_shape shape = {.size = net->size,
                                .hosts = net->shape.hosts,
                                .per_host = net->shape.per_host,
                                .mesh = net->mesh != NULL,
                                .over_shm = kolo_bulk_is_shm(ring, bytes)};
  kolo_allreduce_limits limits = {.small_bytes = ring->small_bytes,
                                  .pair_min_bytes = ring->pair_min_bytes,
                                  .pair_max_bytes = ring->pair_max_bytes,
                                  .pair_shm_max_bytes = ring->pair_shm_max_bytes,
                                  .doubling_max_bytes = ring->doubling_max_bytes,
                                  .doubling_hosts_max_bytes = ring->doubling_hosts_max_bytes,
                                  .halving_hosts_max_bytes = ring->halving_hosts_max_bytes,
                                  .halving_ring_max_bytes = ring->halving_ring_max_bytes,
                                  .two_level_min_bytes = ring->two_level_min_bytes,
                                  .forced = ring->forced_algo};
  kolo_allreduce_algo algo = kolo_allreduce_select(&shape, &limits, count, bytes);
  if (!(ring->algos_used & (1u << algo))) { /* once per algorithm and communicator */
    ring->algos_used |= 1u << algo;
    KOLO_LOGD("kolo", "rank %d: first all-reduce by %s (%zu bytes; %d hosts, %d per host)",
              net->rank, kolo_allreduce_algo_name(algo), bytes, net->shape.hosts,
              net->shape.per_host);
  }
  return algo;
}
