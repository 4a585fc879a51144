/* Communicators' lifetime: checking a ring spec, allocating a communicator and
 * its reusable buffers, forming the ring (form.c), starting the engine thread
 * (queue.c), the accessors (the failure ones read the net floor's record), and
 * destroying it (a goodbye to the neighbours when
 * nothing is pending, an abort when something is). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "collective/face.h"
#include "common/env.h"
#include "common/log.h"
#include "common/machine_ranks.h"

#define DEFAULT_SEGMENT_BYTES (256 * 1024)
#define DEFAULT_SMALL_BYTES (32 * 1024)
/* 2 ranks over TCP: the pair all-reduce between these sizes (at or below
 * small_bytes the gather path runs anyway). In-process A/B (#16): 256 KiB 30%,
 * 1 MiB 30%, 4 MiB 15% faster than the ring; from 16 MiB, where the buffers
 * leave the cache, its doubled reduction makes it no faster or slower. */
#define DEFAULT_PAIR_MIN_BYTES (32 * 1024)
#define DEFAULT_PAIR_MAX_BYTES (8 * 1024 * 1024)
/* 2 ranks over shared memory: the pair up to this size (it reduces the peer's
 * buffer straight out of the ring; beyond it the ring's halved reduction wins) */
#define DEFAULT_PAIR_SHM_MAX_BYTES (32 * 1024)
/* the pair exchange stages and reduces the peer's buffer in 1 MiB segments
 * (the ring keeps 256 KiB, which its forwarding pipelines on): fewer, longer
 * receives drain the socket faster. In-process A/B, TCP, load 10-11, two
 * batches: 1 MiB 588/688 -> 421/380 us, 4 MiB 3116/2919 -> 2726/2837,
 * 256 KiB unchanged (#16) */
#define DEFAULT_PAIR_SEGMENT_BYTES (1024 * 1024)
/* operations from this size on stream through the bulk channel (same-host
 * neighbours): every size, since the shared-memory ring's fast path makes no
 * system call and beats TCP from the smallest message on (KOLO_SHM_MIN_BYTES) */
#define DEFAULT_BULK_MIN_BYTES 0
/* recursive doubling (log2 n steps, whole buffers) up to this size where it has
 * fewer steps than the gather; the two-level all-reduce above this size on
 * rings of several hosts with as many ranks each (kolo_allreduce_select) */
#define DEFAULT_DOUBLING_MAX_BYTES (32 * 1024)
/* the same on rings of 2+ hosts, where a hop crosses a network: netns hosts
 * (bench/netns, #34), 8 ranks (2x4, 4x2, 8x1 at 1 and 10 Gbit): doubling ahead
 * of halving at 8-32 KiB in 10 of 12 cells; from 64 KiB its log2 p whole buffers
 * fill a 1 Gbit link (3.5x halving's time in 2x4) */
#define DEFAULT_DOUBLING_HOSTS_MAX_BYTES (32 * 1024)
/* halving (Rabenseifner: the ring's bytes in 2 log2 p steps) above that on
 * rings of 2+ hosts, up to this: at 64-512 KiB within 14% of two levels (the
 * flat ring on 8x1) or ahead in all 24 cells, at 64 KiB 1.3-3.5x ahead of
 * doubling at 1 Gbit (0.6-0.7x at 10 Gbit on 4x2 and 8x1); two levels lead
 * again from 1 MiB on 2x4 */
#define DEFAULT_HALVING_HOSTS_MAX_BYTES (512 * 1024)
/* the same where two levels cannot run and the flat ring is the alternative (one
 * rank per host, unequal hosts): 8x1, halving level with the ring at 1 Gbit up to
 * 2 MiB and 1.1-1.4x ahead at 10 Gbit at 512 KiB-2 MiB */
#define DEFAULT_HALVING_RING_MAX_BYTES (2 * 1024 * 1024)
#define DEFAULT_TWO_LEVEL_MIN_BYTES (32 * 1024)
/* how long the executor re-tries a stalled transfer before it sleeps in poll */
#define DEFAULT_SPIN_US 100
#define MAX_SPIN_US 100000

/* KOLO_SPIN_YIELD: 1 a stalled spin always yields after its first microsecond
 * (before #34), 0 never, anything else (-1): decided once the ring formed
 * (spin_yield_formed). */
static int spin_yield_from_env(void) {
  const char *value = getenv("KOLO_SPIN_YIELD");
  if (value != NULL && strcmp(value, "1") == 0) return 1;
  if (value != NULL && strcmp(value, "0") == 0) return 0;
  return -1;
}

/* Unset, the spin is adaptive (kolo_yield_off_until) unless more ranks share this
 * machine than the CPUs this process may use (kolo_spin_yield_mode): this host's
 * local_size, or the processes registered on the machine (machine_ranks.h) when more
 * (network-namespace or container hosts on one kernel, other jobs). Counted once the
 * ring formed: every rank of this ring registered before it connected. */
static void spin_yield_formed(kolo_comm *comm) {
  int ranks = comm->net.local_size;
  int machine = kolo_machine_ranks_count(comm->machine_ranks);
  if (machine > ranks) ranks = machine;
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  comm->ring.spin_yield = kolo_spin_yield_mode(comm->ring.spin_yield, ranks, cpus);
  KOLO_LOGD("kolo", "rank %d: %d ranks on this machine (%d here), %d CPUs: spin %s", comm->net.rank,
            machine, comm->net.local_size, cpus,
            comm->ring.spin_yield == 1   ? "always yields"
            : comm->ring.spin_yield == 0 ? "never yields"
                                         : "yields adaptively");
}

/* KOLO_SPIN_US: microseconds of busy-polling before a wait sleeps (0 = never
 * spin), clamped to MAX_SPIN_US; DEFAULT_SPIN_US when unset or not a number. */
static int64_t spin_ns_from_env(void) {
  const char *value = getenv("KOLO_SPIN_US");
  if (value == NULL || *value == '\0') return DEFAULT_SPIN_US * 1000LL;
  char *end = NULL;
  long long parsed = strtoll(value, &end, 10);
  if (end == value || *end != '\0' || parsed < 0) return DEFAULT_SPIN_US * 1000LL;
  return (parsed > MAX_SPIN_US ? MAX_SPIN_US : parsed) * 1000LL;
}

/* KOLO_ALLREDUCE_ALGO: the all-reduce to run where the ring's shape allows it
 * (kolo_allreduce_select); auto (-1) when unset, "auto", or not a name (logged). */
static int forced_algo_from_env(void) {
  const char *value = getenv("KOLO_ALLREDUCE_ALGO");
  int algo = kolo_allreduce_algo_parse(value);
  if (algo == -2) {
    KOLO_LOGW("kolo",
              "KOLO_ALLREDUCE_ALGO=%s is none of auto, ring, gather, pair, doubling, "
              "two_level: auto",
              value);
    return -1;
  }
  return algo;
}

static void free_comm(kolo_comm *comm) {
  if (comm->net.peers != NULL) {
    for (int i = 0; i < comm->net.size; i++) free(comm->net.peers[i]);
    free(comm->net.peers);
  }
  free(comm->net.secret);
  kolo_mesh_close(&comm->net);
  kolo_machine_ranks_destroy(comm->machine_ranks);
  kolo_direction_close(&comm->net.next);
  kolo_direction_close(&comm->net.prev);
  kolo_channel_close(&comm->net.control[0].channel);
  kolo_channel_close(&comm->net.control[1].channel);
  if (comm->net.wake_fd >= 0) close(comm->net.wake_fd);
  if (comm->net.fail_fd >= 0) close(comm->net.fail_fd);
  kolo_engine_free(&comm->nego);
  kolo_queue_free(comm);
  free(comm->ring.staging);
  free(comm->ring.scratch);
  free(comm->exec.fusion);
  free(comm->ring.matrix);
  kolo_names_destroy(comm->in_flight);
  free(comm->ring.counts);
  free(comm->ring.block_offsets);
  free(comm->ring.block_bytes);
  free(comm->ring.plan.sends);
  free(comm->ring.plan.recvs);
  free(comm->ring.plan.processed);
  pthread_mutex_destroy(&comm->queue.mutex);
  pthread_mutex_destroy(&comm->net.error_mutex);
  pthread_cond_destroy(&comm->queue.cond);
  pthread_cond_destroy(&comm->queue.exec_cond);
  pthread_mutex_destroy(&comm->hold_mutex);
  pthread_cond_destroy(&comm->hold_cond);
  free(comm);
}

static kolo_status validate_spec(const kolo_ring_spec *spec) {
  if (spec == NULL || spec->size < 1 || spec->rank < 0 || spec->rank >= spec->size) {
    KOLO_LOGE("kolo", "ring spec: need 0 <= rank < size");
    return KOLO_ERR_INVALID_ARG;
  }
  if (spec->secret != NULL && strlen(spec->secret) > KOLO_MAX_SECRET_BYTES) {
    KOLO_LOGE("kolo", "ring spec: secret longer than %d bytes", KOLO_MAX_SECRET_BYTES);
    return KOLO_ERR_INVALID_ARG;
  }
  if (spec->size > 1) {
    if (spec->peers == NULL) {
      KOLO_LOGE("kolo", "ring spec: peers missing");
      return KOLO_ERR_INVALID_ARG;
    }
    for (int i = 0; i < spec->size; i++) {
      if (spec->peers[i] == NULL || spec->peers[i][0] == '\0') {
        KOLO_LOGE("kolo", "ring spec: address of rank %d missing", i);
        return KOLO_ERR_INVALID_ARG;
      }
    }
  }
  return KOLO_OK;
}

/* The per-rank and per-plan arrays and the staging segment. */
static kolo_status allocate_buffers(kolo_comm *comm) {
  size_t n = (size_t)comm->net.size;
  comm->net.peers = calloc(n, sizeof *comm->net.peers);
  comm->ring.counts = calloc(n, sizeof *comm->ring.counts);
  comm->ring.block_offsets = calloc(n, sizeof *comm->ring.block_offsets);
  comm->ring.block_bytes = calloc(n, sizeof *comm->ring.block_bytes);
  comm->net.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  comm->net.fail_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (kolo_names_create(&comm->in_flight) != KOLO_OK) comm->in_flight = NULL;
  if (comm->net.secret == NULL || comm->in_flight == NULL || comm->net.peers == NULL ||
      comm->ring.counts == NULL || comm->ring.block_offsets == NULL ||
      comm->ring.block_bytes == NULL ||
      kolo_plan_reserve(&comm->ring.plan, 2 * comm->net.size) != KOLO_OK || comm->net.wake_fd < 0 ||
      comm->net.fail_fd < 0) {
    return KOLO_ERR_NO_MEMORY;
  }
  size_t staging = comm->ring.segment_bytes > comm->ring.pair_segment_bytes
                       ? comm->ring.segment_bytes
                       : comm->ring.pair_segment_bytes;
  if (posix_memalign((void **)&comm->ring.staging, 64, staging) != 0) {
    comm->ring.staging = NULL;
    return KOLO_ERR_NO_MEMORY;
  }
  memset(comm->ring.staging, 0, staging);
  comm->ring.staging_bytes = staging;
  return KOLO_OK;
}

/* The net floor's failure hook: GPU collectives in flight wait for the lost
 * peer too, so a recorded failure aborts the NCCL communicator (non-blocking). */
static void abort_device(void *context) {
  kolo_device_abort(context);
}

static kolo_status allocate_comm(const kolo_ring_spec *spec, kolo_comm **out) {
  kolo_comm *comm = calloc(1, sizeof *comm);
  if (comm == NULL) return KOLO_ERR_NO_MEMORY;
  comm->net.wake_fd = -1;
  comm->net.fail_fd = -1;
  pthread_mutex_init(&comm->queue.mutex, NULL);
  pthread_mutex_init(&comm->net.error_mutex, NULL);
  pthread_cond_init(&comm->queue.cond, NULL);
  pthread_cond_init(&comm->queue.exec_cond, NULL);
  pthread_mutex_init(&comm->hold_mutex, NULL);
  pthread_cond_init(&comm->hold_cond, NULL);
  atomic_init(&comm->held, 0);
  atomic_init(&comm->net.failed, 0);
  atomic_init(&comm->net.outbox_pending, 0);
  comm->net.epoch = spec->epoch;
  comm->net.rank = spec->rank;
  comm->net.size = spec->size;
  comm->net.local_rank = spec->local_size > 0 ? spec->local_rank : spec->rank;
  comm->net.local_size = spec->local_size > 0 ? spec->local_size : spec->size;
  comm->net.timeout_ms = spec->timeout_ms > 0 ? spec->timeout_ms : kolo_timeout_ms_from_env();
  /* a fixed ring judges silent neighbours only when asked to (beat.c) */
  atomic_init(&comm->net.peer_timeout_ms, kolo_peer_timeout_ms_from_env(0));
  comm->net.transport = &kolo_transport_tcp;
  comm->net.bulk_min_bytes = kolo_size_from_env("KOLO_SHM_MIN_BYTES", DEFAULT_BULK_MIN_BYTES);
  comm->net.failed_rank = -1;
  comm->ring.net = &comm->net;
  comm->exec.ring = &comm->ring;
  comm->queue.net = &comm->net;
  comm->nego.net = &comm->net;
  comm->nego.queue = &comm->queue;
  comm->nego.comm = comm;
  comm->net.on_fail = abort_device;
  comm->net.on_fail_context = comm;
  comm->ring.segment_bytes = kolo_size_from_env("KOLO_SEGMENT_BYTES", DEFAULT_SEGMENT_BYTES);
  comm->ring.small_bytes = kolo_size_from_env("KOLO_SMALL_BYTES", DEFAULT_SMALL_BYTES);
  comm->ring.pair_min_bytes = kolo_size_from_env("KOLO_PAIR_MIN_BYTES", DEFAULT_PAIR_MIN_BYTES);
  comm->ring.pair_max_bytes = kolo_size_from_env("KOLO_PAIR_MAX_BYTES", DEFAULT_PAIR_MAX_BYTES);
  comm->ring.pair_shm_max_bytes =
      kolo_size_from_env("KOLO_PAIR_SHM_MAX_BYTES", DEFAULT_PAIR_SHM_MAX_BYTES);
  comm->ring.pair_segment_bytes =
      kolo_size_from_env("KOLO_PAIR_SEGMENT_BYTES", DEFAULT_PAIR_SEGMENT_BYTES);
  comm->ring.doubling_max_bytes =
      kolo_size_from_env("KOLO_DOUBLING_MAX_BYTES", DEFAULT_DOUBLING_MAX_BYTES);
  comm->ring.doubling_hosts_max_bytes =
      kolo_size_from_env("KOLO_DOUBLING_HOSTS_MAX_BYTES", DEFAULT_DOUBLING_HOSTS_MAX_BYTES);
  comm->ring.halving_hosts_max_bytes =
      kolo_size_from_env("KOLO_HALVING_HOSTS_MAX_BYTES", DEFAULT_HALVING_HOSTS_MAX_BYTES);
  comm->ring.halving_ring_max_bytes =
      kolo_size_from_env("KOLO_HALVING_RING_MAX_BYTES", DEFAULT_HALVING_RING_MAX_BYTES);
  comm->ring.two_level_min_bytes =
      kolo_size_from_env("KOLO_TWO_LEVEL_MIN_BYTES", DEFAULT_TWO_LEVEL_MIN_BYTES);
  comm->ring.forced_algo = forced_algo_from_env();
  comm->ring.spin_ns = spin_ns_from_env();
  comm->ring.spin_yield = spin_yield_from_env(); /* -1 (unset) until the ring formed */
  if (comm->ring.spin_yield < 0) {               /* without a registration the count falls back */
    char dir[512];
    kolo_machine_ranks_create(kolo_machine_ranks_dir(dir, sizeof dir), &comm->machine_ranks);
  }
  comm->ring.spin_budget_ns = comm->ring.spin_ns;
  if (comm->ring.segment_bytes < 64) comm->ring.segment_bytes = 64;
  if (comm->ring.pair_segment_bytes < 64) comm->ring.pair_segment_bytes = 64;
  comm->net.secret = strdup(spec->secret ? spec->secret : "");
  if (allocate_buffers(comm) != KOLO_OK) {
    free_comm(comm);
    return KOLO_ERR_NO_MEMORY;
  }
  for (int i = 0; i < spec->size && spec->peers != NULL; i++) {
    comm->net.peers[i] = strdup(spec->peers[i] ? spec->peers[i] : "");
    if (comm->net.peers[i] == NULL) {
      free_comm(comm);
      return KOLO_ERR_NO_MEMORY;
    }
  }
  if (spec->nccl_id != NULL) {
    memcpy(comm->nccl_id, spec->nccl_id, KOLO_NCCL_ID_BYTES);
    comm->has_nccl_id = 1;
  }
  *out = comm;
  return KOLO_OK;
}

kolo_status kolo_comm_error(const kolo_comm *comm, int *failed_rank) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_net_error(&comm->net, failed_rank);
}

void kolo_comm_error_message(const kolo_comm *comm, char *buffer, size_t length) {
  if (buffer != NULL && length > 0) buffer[0] = '\0';
  if (comm != NULL) kolo_net_error_message(&comm->net, buffer, length);
}

void kolo_comm_abort(kolo_comm *comm) {
  if (comm == NULL) return;
  kolo_net_fail(&comm->net, KOLO_ERR_ABORTED, comm->net.rank, "aborted by rank %d", comm->net.rank);
  kolo_device_abort(comm);
}

void kolo_comm_set_peer_timeout(kolo_comm *comm, int timeout_ms) {
  kolo_net_set_peer_timeout(&comm->net, timeout_ms);
}

kolo_status kolo_engine_stats_get(const kolo_comm *comm, kolo_engine_stats *stats) {
  if (comm == NULL || stats == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *mutable_comm = (kolo_comm *)comm;
  memset(stats, 0, sizeof *stats);
  pthread_mutex_lock(&mutable_comm->queue.mutex);
  kolo_engine_stats_locked(&comm->nego, stats);
  pthread_mutex_unlock(&mutable_comm->queue.mutex);
  return KOLO_OK;
}

kolo_status kolo_comm_create(const kolo_ring_spec *spec, kolo_listener *listener, kolo_comm **out) {
  return kolo_comm_create_superseded(spec, listener, NULL, NULL, out);
}

kolo_status kolo_comm_create_superseded(const kolo_ring_spec *spec, kolo_listener *listener,
                                        int (*superseded)(void *context, uint64_t epoch),
                                        void *context, kolo_comm **out) {
  kolo_comm *comm = NULL;
  kolo_status status = out == NULL ? KOLO_ERR_INVALID_ARG : validate_spec(spec);
  if (status != KOLO_OK) goto out;
  status = allocate_comm(spec, &comm);
  if (status != KOLO_OK) goto out;
  comm->net.superseded = superseded;
  comm->net.superseded_context = context;
  if (comm->net.size > 1) {
    if (listener == NULL) {
      status = kolo_listener_create(comm->net.peers[comm->net.rank], &listener);
      if (status != KOLO_OK) goto out;
    }
    status = kolo_form_ring(&comm->net, listener);
    if (status == KOLO_OK) status = kolo_form_mesh(&comm->net, listener);
    if (status != KOLO_OK) goto out;
  }
  if (comm->ring.spin_yield < 0) spin_yield_formed(comm);
  status = kolo_queue_start(comm);
  if (status != KOLO_OK) goto out;
  KOLO_LOGD("kolo", "rank %d of %d joined the ring at epoch %llu (bulk out: %s, in: %s)",
            comm->net.rank, comm->net.size, (unsigned long long)comm->net.epoch,
            kolo_channel_is_bulk(&comm->net.next.bulk) ? "yes" : "no",
            kolo_channel_is_bulk(&comm->net.prev.bulk) ? "yes" : "no");
  *out = comm;
  comm = NULL;
out:
  kolo_listener_destroy(listener);
  if (comm != NULL) free_comm(comm);
  return status;
}

int kolo_comm_rank(const kolo_comm *comm) {
  return comm ? comm->net.rank : -1;
}
int kolo_comm_size(const kolo_comm *comm) {
  return comm ? comm->net.size : 0;
}
int kolo_comm_local_rank(const kolo_comm *comm) {
  return comm ? comm->net.local_rank : -1;
}
int kolo_comm_local_size(const kolo_comm *comm) {
  return comm ? comm->net.local_size : 0;
}
uint64_t kolo_comm_epoch(const kolo_comm *comm) {
  return comm ? comm->net.epoch : 0;
}

const char *kolo_comm_transport(const kolo_comm *comm, int peer) {
  if (comm == NULL || (peer != 0 && peer != 1)) return "none";
  const kolo_channel *bulk = peer == 0 ? &comm->net.next.bulk : &comm->net.prev.bulk;
  return bulk->ops != NULL && bulk->ops->name != NULL ? bulk->ops->name : "none";
}

void kolo_comm_destroy(kolo_comm *comm) {
  if (comm == NULL) return;
  if (kolo_queue_pending(comm)) {
    kolo_net_fail(&comm->net, KOLO_ERR_ABORTED, comm->net.rank, "communicator of rank %d destroyed",
                  comm->net.rank);
  } else if (!atomic_load(&comm->net.failed) && comm->net.size > 1) {
    comm->nego.say_goodbye = 1; /* the negotiator sends it as it stops */
  }
  kolo_queue_stop(comm);
  kolo_device_destroy(comm);
  free_comm(comm);
}
