/* The algorithm floor of libkolo (collective/algo/): reductions over typed
 * buffers (dtype.c), the ring plan (send and recv items over the ring's two
 * directions) with the items over pieces, and its executor (plan.c), which
 * all-reduce runs (select.c), and the algorithms compiled into plans: the ring,
 * gather and pair all-reduces, broadcast, reduce-scatter and all-gather
 * (ring.c), the fused all-reduce over pieces (ring_fused.c), recursive doubling
 * and halving (doubling.c), the two-level all-reduce (two_level.c), the uneven
 * reduce-scatter and all-to-all (ring_uneven.c). The algorithms call the
 * selection and the plan, and the fused and single-buffer all-reduces call the
 * doubling, halving and two-level ones; nothing calls back up (no circle). */
#ifndef KOLO_COLLECTIVE_ALGO_ALGO_H
#define KOLO_COLLECTIVE_ALGO_ALGO_H

#include <stddef.h>
#include <stdint.h>

#include "collective/net/net.h"
#include "kolo/kolo.h"

/* dst = a (op) b for count elements; dst may alias a or b; a and b may start at
 * any byte (dst must be aligned to the element). AVG reduces as SUM. */
void kolo_reduce(void *dst, const void *a, const void *b, size_t count, kolo_dtype dtype,
                 kolo_op op);
/* buffer /= divisor element-wise (the AVG finalisation). */
void kolo_divide(void *buffer, size_t count, kolo_dtype dtype, int divisor);
/* dst = src * factor (floating types; a plain copy for the others). dst may be src. */
void kolo_scale(void *dst, const void *src, size_t count, kolo_dtype dtype, double factor);
int kolo_dtype_is_floating(kolo_dtype dtype);
/* Fills count elements with op's identity (what a joined rank contributes). */
void kolo_fill_identity(void *buffer, size_t count, kolo_dtype dtype, kolo_op op);

/* One contiguous transfer of a ring plan. A send item streams buffer to the next
 * rank, but never past what recv item depends_on has processed (the pipeline).
 * A recv item streams from the previous rank into buffer; with local set it
 * stores local (op) incoming, segment by segment, else it copies. */
typedef struct kolo_ring_item {
  char *buffer;
  const char *local;
  size_t bytes;
  int depends_on;   /* send items: recv item index gating this send, -1 = none */
  int finalize_avg; /* recv items: divide each finished segment by the ring size */
  int remote_first; /* recv items with local: the incoming data is the reduce's left operand */
  int guards_send;  /* recv items with local: a segment is reduced into buffer only once this
                     * send item (same offsets, e.g. in place) has sent it; -1 = none */
} kolo_ring_item;

typedef struct kolo_ring_plan {
  kolo_ring_item *sends; /* capacity items (at least 2 * size) */
  kolo_ring_item *recvs;
  size_t *processed; /* per recv item: bytes final in buffer */
  int send_count;
  int recv_count;
  int capacity; /* items each array holds */
  kolo_dtype dtype;
  kolo_op op;
  size_t segment_bytes; /* staged reductions' segment; 0 = ring->segment_bytes (reset) */
} kolo_ring_plan;

/* The algorithm floor's part of a communicator: the ring it runs over (the net
 * floor's), its size settings, and the buffers and plan reused across calls
 * (only the one runner touches them). */
typedef struct kolo_ring {
  kolo_net *net;
  size_t segment_bytes;
  size_t small_bytes;
  size_t pair_min_bytes;     /* 2 ranks over TCP: all-reduces of pair_min_bytes..pair_max_bytes */
  size_t pair_max_bytes;     /* exchange whole buffers (kolo_allreduce_choose) */
  size_t pair_shm_max_bytes; /* 2 ranks over shared memory: the pair up to this size */
  size_t pair_segment_bytes; /* the pair exchange's segment (staging holds the larger one) */
  size_t doubling_max_bytes; /* kolo_allreduce_limits */
  size_t doubling_hosts_max_bytes;
  size_t halving_hosts_max_bytes;
  size_t halving_ring_max_bytes;
  size_t two_level_min_bytes;
  int forced_algo;            /* KOLO_ALLREDUCE_ALGO, -1: auto */
  unsigned algos_used;        /* kolo_ring_select: bit per algorithm run so far */
  int64_t spin_ns;            /* the most a stalled transfer busy-polls before sleeping in poll */
  int64_t spin_budget_ns;     /* what it busy-polls now (the executor adapts it) */
  int spin_yield;             /* KOLO_SPIN_YIELD: 1 always, 0 never, -1 adaptive (default) */
  int64_t yield_off_until_ns; /* adaptive: no yields before this (kolo_yield_off_until) */
  char *staging;
  size_t staging_bytes;
  char *scratch;
  size_t scratch_bytes;
  char *matrix; /* all-to-all: every rank's send counts and capacity */
  size_t matrix_bytes;
  uint64_t *counts;      /* size entries: all-gather counts */
  size_t *block_offsets; /* size entries */
  size_t *block_bytes;   /* size entries */
  kolo_ring_plan plan;
} kolo_ring;

static inline int kolo_wrap_rank(int value, int size) {
  return ((value % size) + size) % size;
}

/* A piece of a virtual concatenation (element-aligned; src may equal dst). */
typedef struct kolo_piece {
  const char *src;
  char *dst;
  size_t bytes;
} kolo_piece;

/* The ring plan and its executor (plan.c), for the algorithm files. */
/* Grows the plan's arrays to hold items send and recv items each. */
kolo_status kolo_plan_reserve(kolo_ring_plan *plan, int items);
void kolo_plan_reset(kolo_ring_plan *plan, kolo_dtype dtype, kolo_op op);
/* First element of chunk index when count elements are split into parts chunks. */
size_t kolo_chunk_start(size_t count, int parts, int index);
void kolo_plan_send(kolo_ring_plan *plan, const void *buffer, size_t bytes, int depends_on);
int kolo_plan_recv(kolo_ring_plan *plan, void *buffer, const void *local, size_t bytes,
                   int finalize_avg);
/* Ring all-gather of blocks already laid out in out (block b: bytes[b] at offsets[b]). */
void kolo_plan_allgather_blocks(kolo_ring *ring, char *out, const size_t *offsets,
                                const size_t *bytes);
/* Grows a reusable 64-byte-aligned buffer to at least need bytes. */
kolo_status kolo_ensure_buffer(char **buffer, size_t *have, size_t need);
/* Runs ring->plan; op_bytes (the same on every rank) picks bulk or small channels. */
kolo_status kolo_execute_plan(kolo_ring *ring, int engine_thread, size_t op_bytes);
/* Runs ring->plan with its sends to rank to_rank over to and its recvs from
 * rank from_rank over from (the same channel for an exchange over a mesh link). */
kolo_status kolo_execute_plan_over(kolo_ring *ring, int engine_thread, const kolo_channel *to,
                                   int to_rank, const kolo_channel *from, int from_rank);
/* recv = op over ranks of send (the small path or the ring, by size). */
/* How a ring all-reduces (select.c). A pure function of what every rank knows alike (ring
 * size, element count, bytes, the size settings, whether the links are shared
 * memory), never of a rank's own buffers, so that every rank picks the same:
 *   GATHER: at most small_bytes (or fewer elements than ranks): all-gather the
 *           whole buffers, reduce locally in rank order (n-1 latency steps);
 *   PAIR:   2 ranks over TCP, pair_min_bytes..pair_max_bytes, or over shared
 *           memory up to pair_shm_max_bytes (the peer's buffer is reduced
 *           straight out of the ring, so it beats the gather's copy): each sends its
 *           whole buffer and reduces the other's as it streams in;
 *   RING:   reduce-scatter + all-gather, pipelined per segment. */
typedef enum {
  KOLO_ALLREDUCE_GATHER,
  KOLO_ALLREDUCE_PAIR,
  KOLO_ALLREDUCE_RING,
  KOLO_ALLREDUCE_DOUBLING,  /* recursive doubling over mesh links (doubling.c) */
  KOLO_ALLREDUCE_TWO_LEVEL, /* in-host reduce-scatter, cross-host rings, in-host all-gather */
  KOLO_ALLREDUCE_HALVING,   /* recursive halving, then doubling, over mesh links (doubling.c) */
  KOLO_ALLREDUCE_ALGO_COUNT
} kolo_allreduce_algo;
kolo_allreduce_algo kolo_allreduce_choose(int size, size_t count, size_t bytes, size_t small_bytes,
                                          size_t pair_min_bytes, size_t pair_max_bytes,
                                          size_t pair_shm_max_bytes, int over_shm);

/* ---- selection (select.c): what every rank computes alike ---- */
/* The ring as the selection sees it (the same on every rank). */
typedef struct kolo_allreduce_shape {
  int size;     /* ranks */
  int hosts;    /* runs of consecutive ranks on one host (kolo_shape) */
  int per_host; /* ranks on every host when all have as many, else 0 */
  int mesh;     /* whether the mesh links were formed (KOLO_MESH) */
  int over_shm; /* kolo_bulk_is_shm for this size */
} kolo_allreduce_shape;
/* The size settings (environment, read alike on every rank). */
typedef struct kolo_allreduce_limits {
  size_t small_bytes, pair_min_bytes, pair_max_bytes, pair_shm_max_bytes;
  size_t doubling_max_bytes;       /* KOLO_DOUBLING_MAX_BYTES: recursive doubling up to this */
  size_t doubling_hosts_max_bytes; /* KOLO_DOUBLING_HOSTS_MAX_BYTES: the same, 2+ hosts */
  size_t halving_hosts_max_bytes;  /* KOLO_HALVING_HOSTS_MAX_BYTES: 2+ hosts, halving up to this */
  size_t halving_ring_max_bytes;   /* KOLO_HALVING_RING_MAX_BYTES: the same where two levels
                                    * cannot run (one rank per host, unequal hosts) */
  size_t two_level_min_bytes;      /* KOLO_TWO_LEVEL_MIN_BYTES: two-level above this */
  int forced;                      /* KOLO_ALLREDUCE_ALGO: an algorithm, or -1 (auto) */
} kolo_allreduce_limits;
/* The all-reduce for count elements of bytes (pure). A forced algorithm is
 * taken where the shape allows it (else the automatic choice): DOUBLING needs
 * the mesh and 3+ ranks, TWO_LEVEL the mesh, 2+ hosts of as many ranks (2+),
 * and at least one element per rank, PAIR 2 ranks, RING one element per rank.
 * Automatic: DOUBLING up to kolo_doubling_limit where its steps (log2 p, +2
 * for the fold of a size that is no power of two) are fewer than the gather's
 * n-1; on rings of 2+ hosts HALVING (the mesh, 3+ ranks) up to
 * halving_hosts_max_bytes, or halving_ring_max_bytes where TWO_LEVEL cannot run (the flat
 * ring is the alternative there); TWO_LEVEL above two_level_min_bytes; otherwise
 * kolo_allreduce_choose. HALVING needs what DOUBLING does and an element per rank. */
kolo_allreduce_algo kolo_allreduce_select(const kolo_allreduce_shape *shape,
                                          const kolo_allreduce_limits *limits, size_t count,
                                          size_t bytes);
/* Up to how many bytes the automatic choice takes recursive doubling: on a
 * ring of 2+ hosts, where its hops cross hosts and each costs a network
 * latency, doubling_hosts_max_bytes; on one host doubling_max_bytes (pure). */
size_t kolo_doubling_limit(const kolo_allreduce_shape *shape, const kolo_allreduce_limits *limits);
/* Latency steps of recursive doubling on size ranks. */
int kolo_doubling_steps(int size);
/* "auto" (-1), "ring", "gather", "pair", "doubling", "two_level", "halving"; -2 for anything
 * else. */
int kolo_allreduce_algo_parse(const char *name);
const char *kolo_allreduce_algo_name(kolo_allreduce_algo algo);
/* The selection for this ring and operation (what kolo_ring_allreduce runs). */
/* (logs each algorithm's first use on this communicator at debug level) */
kolo_allreduce_algo kolo_ring_select(kolo_ring *ring, size_t count, size_t bytes);

/* ---- pieces (plan.c), shared by the fused and two-level plans ---- */
enum { KOLO_FROM_SRC, KOLO_FROM_DST, KOLO_REDUCE_INTO_DST, KOLO_COPY_INTO_DST, KOLO_REDUCE_DST };
/* One plan item per piece overlapping virtual bytes [begin, end) (one empty item for an
 * empty range); sends depend on recv item depends_first + j for their j-th overlap.
 * KOLO_REDUCE_INTO_DST: dst = src (op) incoming; KOLO_REDUCE_DST: dst = dst (op)
 * incoming. Returns the items made. */
int kolo_plan_range(kolo_ring_plan *plan, const kolo_piece *pieces, const size_t *offsets,
                    int count, size_t begin, size_t end, int mode, int depends_first, int finalize);
/* doubling.c, two_level.c: the all-reduce of pieces (a virtual concatenation; a
 * single buffer is one piece) by recursive doubling, or in two levels. */
kolo_status kolo_allreduce_doubling(kolo_ring *ring, const kolo_piece *pieces, int count,
                                    kolo_dtype dtype, kolo_op op, int engine_thread);
kolo_status kolo_allreduce_two_level(kolo_ring *ring, const kolo_piece *pieces, int count,
                                     kolo_dtype dtype, kolo_op op, int engine_thread);
kolo_status kolo_allreduce_halving(kolo_ring *ring, const kolo_piece *pieces, int count,
                                   kolo_dtype dtype, kolo_op op, int engine_thread);

/* The executor's next spin budget after a stall of waited_ns ended (spun out
 * or slept through), given the current budget and the most it may spin
 * (KOLO_SPIN_US): a stall within the most sets it to at least twice the wait,
 * a longer one halves it; always within [max/16, max]. Pure (ring.c). */
int64_t kolo_spin_budget_next(int64_t budget_ns, int64_t max_ns, int64_t waited_ns);

/* A stalled spin yields the CPU after its first microsecond, so a neighbour
 * waiting for this core (more ranks than cores) runs at once. A yield that
 * takes KOLO_YIELD_SLOW_NS or more gave the core to a program that does not
 * give it back (a compiler, another job): the scheduler runs it for a whole
 * slice (a 4 ms tick here), so the spin then only pauses for
 * KOLO_YIELD_OFF_NS before it tries a yield again. */
#define KOLO_YIELD_SLOW_NS (500 * 1000LL)
#define KOLO_YIELD_OFF_NS (100 * 1000 * 1000LL)
/* Until when the spin does not yield, after a yield at now_ns that took
 * took_ns, given the current bound off_until_ns. Pure (plan.c). */
int64_t kolo_yield_off_until(int64_t off_until_ns, int64_t now_ns, int64_t took_ns);

/* The spin's yield rule (ring->spin_yield) from KOLO_SPIN_YIELD's value (1 always, 0 never,
 * else unset: -1) for local_size ranks on a host with cpus usable CPUs: unset, the adaptive rule
 * (-1) where each local rank can have a core, the old one (1) where ranks outnumber cores: there
 * the core a spin holds is one its neighbour waits for (8 ranks on 2 cores: 4 KiB 1.3-1.8x
 * slower with the adaptive rule, #34). Pure (plan.c). */
int kolo_spin_yield_mode(int env_mode, int local_size, int cpus);

/* Whether an operation of bytes runs over shared memory in either ring
 * direction (the same answer on both ends of each link, so on every rank; select.c). */
int kolo_bulk_is_shm(const kolo_ring *ring, size_t bytes);

kolo_status kolo_ring_allreduce(kolo_ring *ring, const void *send, void *recv, size_t count,
                                kolo_dtype dtype, kolo_op op, int engine_thread);
/* ring_fused.c: one ring all-reduce over pieces that form a virtual
 * concatenation (element-aligned; src may equal dst). Uses the ring for any
 * size: callers send totals under the small-path threshold elsewhere. */
kolo_status kolo_ring_allreduce_pieces(kolo_ring *ring, const kolo_piece *pieces, int count,
                                       kolo_dtype dtype, kolo_op op, int engine_thread);
/* Broadcast of bytes from root (a chain around the ring). */
kolo_status kolo_ring_broadcast(kolo_ring *ring, void *buffer, size_t bytes, int root,
                                kolo_dtype dtype, int engine_thread);
/* The elastic state's broadcast from several sources (state_sync.c): holds[r]
 * says rank r holds the source's bytes already (rank 0, the source, always
 * does). Every rank that does not receives them from its previous rank, so each
 * run of such ranks is fed by the nearest holder before it, all runs at once,
 * and a holder whose next rank holds too sends nothing. Pure: this rank's role,
 * KOLO_SOURCES_RECV (from rank - 1) | KOLO_SOURCES_SEND (to rank + 1). */
enum { KOLO_SOURCES_RECV = 1, KOLO_SOURCES_SEND = 2 };
int kolo_sources_role(const uint8_t *holds, int size, int rank);
kolo_status kolo_ring_broadcast_sources(kolo_ring *ring, void *buffer, size_t bytes,
                                        const uint8_t *holds, kolo_dtype dtype, int engine_thread);
/* Reduce-scatter of count elements per rank: rank r ends with block r of send
 * reduced over the ranks. */
kolo_status kolo_ring_reducescatter(kolo_ring *ring, const void *send, void *recv, size_t count,
                                    kolo_dtype dtype, kolo_op op, int engine_thread);
/* All-gather, phase 1: every rank's count into ring->counts, *total their sum. */
kolo_status kolo_ring_allgather_counts(kolo_ring *ring, size_t count, int engine_thread,
                                       size_t *total);
/* All-gather, phase 2: the blocks of ring->counts elements (this rank's from
 * send) into recv in rank order; total is phase 1's. */
kolo_status kolo_ring_allgather_blocks(kolo_ring *ring, const void *send, void *recv,
                                       kolo_dtype dtype, size_t total, int engine_thread);

/* ring_uneven.c: reduce-scatter where rank r receives recv_counts[r] elements. */
kolo_status kolo_ring_reducescatter_v(kolo_ring *ring, const void *send, void *recv,
                                      const size_t *recv_counts, kolo_dtype dtype, kolo_op op,
                                      int engine_thread);
/* All-to-all, phase 1: row b of ring->matrix = rank b's n send counts and its
 * receive capacity (UINT64_MAX when the engine allocates). */
kolo_status kolo_ring_alltoall_counts(kolo_ring *ring, const size_t *split_counts,
                                      uint64_t capacity, int engine_thread);
/* Elements rank from sends rank to (after phase 1). */
size_t kolo_alltoall_block(const kolo_ring *ring, int from, int to);
/* The first rank whose receive total exceeds its capacity (*total, *capacity),
 * or -1; *all_blocks: the elements of every block (the same verdict everywhere). */
int kolo_alltoall_overflow(const kolo_ring *ring, uint64_t *all_blocks, uint64_t *total,
                           uint64_t *capacity);
/* All-to-all, phase 2: the blocks, rank o's for this rank into recv at
 * out_offset[o] bytes. */
kolo_status kolo_ring_alltoall_blocks(kolo_ring *ring, const void *send, void *recv,
                                      kolo_dtype dtype, const size_t *out_offset,
                                      uint64_t all_blocks, int engine_thread);

#endif
