/* GPU correctness through libkolo's public API in CUDA mode: every collective x
 * every dtype x every op at counts 1, 1003 and 2^20+3 (--max-count caps it),
 * from non-periodic signed inputs that differ by rank (so a wrong op cannot
 * pass, even with one GPU shared by several ranks), checked element by element
 * against a host reference in the dtype's own arithmetic, with a guard region
 * after every receive buffer that must stay untouched. Also send == recv for
 * every collective (NCCL's in-place rule differs by rank; kolo must not), and a
 * host buffer passed by one rank failing every rank instead of hanging them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

#define GUARD_BYTES 4096
#define GUARD_BYTE 0xa5
#define POISON_BYTE 0x5a

typedef struct options {
  int ranks;
  size_t max_count;
} options;

static const kolo_dtype dtypes[] = {KOLO_UINT8,    KOLO_INT32,   KOLO_INT64,  KOLO_FLOAT16,
                                    KOLO_BFLOAT16, KOLO_FLOAT32, KOLO_FLOAT64};
static const kolo_op ops[] = {KOLO_SUM, KOLO_AVG, KOLO_MIN, KOLO_MAX, KOLO_PROD};

typedef struct buffers {
  char *dsend, *drecv;           /* device: send, recv + guard */
  char *hsend, *hrecv;           /* host mirrors */
  size_t send_bytes, recv_bytes; /* capacities, guard excluded */
} buffers;

typedef struct check {
  kolo_comm *comm;
  const gpu_rank *me;
  buffers *b;
  kolo_dtype dt;
  size_t es;
} check;

/* recv (and the guard after `bytes` of it) to known bytes before an operation. */
static kolo_status poison(check *c, char *recv, size_t bytes) {
  memset(c->b->hrecv, POISON_BYTE, bytes);
  memset(c->b->hrecv + bytes, GUARD_BYTE, GUARD_BYTES);
  return kolo_nccl_copy_to_device(recv, c->b->hrecv, bytes + GUARD_BYTES);
}

/* Reads recv back; 1 if the guard after `bytes` is intact. */
static int read_back(check *c, const char *recv, size_t bytes) {
  if (kolo_nccl_copy_to_host(c->b->hrecv, recv, bytes + GUARD_BYTES) != KOLO_OK) return 0;
  for (size_t i = 0; i < GUARD_BYTES; i++) {
    if ((unsigned char)c->b->hrecv[bytes + i] != GUARD_BYTE) {
      printf("# guard byte %zu after the %zu-byte result overwritten\n", i, bytes);
      return 0;
    }
  }
  return 1;
}

static int fail_status(const char *what, kolo_status st) {
  printf("# %s: %s\n", what, kolo_strerror(st));
  return 1;
}

/* The first element of recv that differs from want(i); 0 when all match. */
typedef double (*want_fn)(const check *c, kolo_op op, size_t i, size_t count);

static int compare(check *c, const char *what, kolo_op op, size_t n, size_t count, want_fn want) {
  for (size_t i = 0; i < n; i++) {
    double expected = want(c, op, i, count), got = gpu_load(c->dt, c->b->hrecv, i);
    if (!gpu_close(c->dt, got, expected)) {
      printf("# %s %s %s count=%zu [%zu]: got %g want %g\n", what, kolo_dtype_name(c->dt),
             kolo_op_name(op), count, i, got, expected);
      return 1;
    }
  }
  return 0;
}

static double want_reduced(const check *c, kolo_op op, size_t i, size_t count) {
  (void)count;
  double v[GPU_MAX_RANKS];
  for (int r = 0; r < c->me->size; r++) v[r] = gpu_input(op, r, i);
  return gpu_reference(c->dt, op, v, c->me->size);
}

/* reduce-scatter: element i of this rank's block */
static double want_block(const check *c, kolo_op op, size_t i, size_t count) {
  return want_reduced(c, op, (size_t)c->me->rank * count + i, count);
}

static kolo_status fill_send(check *c, char *dst, kolo_op op, int rank, size_t n) {
  for (size_t i = 0; i < n; i++) gpu_store(c->dt, c->b->hsend, i, gpu_input(op, rank, i));
  return kolo_nccl_copy_to_device(dst, c->b->hsend, n * c->es);
}

static int check_allreduce(check *c, size_t count, kolo_op op, int in_place) {
  char *dst = in_place ? c->b->dsend : c->b->drecv;
  kolo_status st = in_place ? KOLO_OK : poison(c, dst, count * c->es);
  if (st == KOLO_OK) st = fill_send(c, c->b->dsend, op, c->me->rank, count);
  if (st == KOLO_OK) st = kolo_allreduce(c->comm, c->b->dsend, dst, count, c->dt, op);
  if (st != KOLO_OK) return fail_status("allreduce", st);
  if (in_place) {
    if (kolo_nccl_copy_to_host(c->b->hrecv, dst, count * c->es) != KOLO_OK) return 1;
  } else if (!read_back(c, dst, count * c->es)) {
    return 1;
  }
  return compare(c, in_place ? "allreduce in place" : "allreduce", op, count, count, want_reduced);
}

/* send == recv: NCCL's in-place form on rank 0 only (recv at send + rank*count). */
static int check_reducescatter(check *c, size_t count, kolo_op op, int same_buffer) {
  size_t total = count * (size_t)c->me->size;
  char *dst = same_buffer ? c->b->dsend : c->b->drecv;
  kolo_status st = same_buffer ? KOLO_OK : poison(c, dst, count * c->es);
  if (st == KOLO_OK) st = fill_send(c, c->b->dsend, op, c->me->rank, total);
  if (st == KOLO_OK) st = kolo_reducescatter(c->comm, c->b->dsend, dst, count, c->dt, op);
  if (st != KOLO_OK) return fail_status("reducescatter", st);
  if (same_buffer) {
    if (kolo_nccl_copy_to_host(c->b->hrecv, dst, count * c->es) != KOLO_OK) return 1;
  } else if (!read_back(c, dst, count * c->es)) {
    return 1;
  }
  return compare(c, same_buffer ? "reducescatter send==recv" : "reducescatter", op, count, count,
                 want_block);
}

static int check_broadcast(check *c, size_t count, int root) {
  kolo_status st = poison(c, c->b->drecv, count * c->es);
  if (st == KOLO_OK && c->me->rank == root) st = fill_send(c, c->b->drecv, KOLO_SUM, root, count);
  if (st == KOLO_OK) st = kolo_broadcast(c->comm, c->b->drecv, count, c->dt, root);
  if (st != KOLO_OK) return fail_status("broadcast", st);
  if (!read_back(c, c->b->drecv, count * c->es)) return 1;
  for (size_t i = 0; i < count; i++) {
    double want = gpu_reference(c->dt, KOLO_SUM, (double[]){gpu_input(KOLO_SUM, root, i)}, 1);
    if (gpu_load(c->dt, c->b->hrecv, i) != want) {
      printf("# broadcast root %d count=%zu [%zu] wrong\n", root, count, i);
      return 1;
    }
  }
  return 0;
}

/* Counts differ by rank (variable = 1) or not; send == recv puts this rank's
 * block at the start of recv, as kolo.h allows. */
static int check_allgather(check *c, size_t count, int variable, int same_buffer) {
  int n = c->me->size, me = c->me->rank;
  size_t counts[GPU_MAX_RANKS], seen[GPU_MAX_RANKS], total = 0;
  for (int r = 0; r < n; r++) total += counts[r] = count + (variable ? (size_t)r * 3 : 0);
  char *dst = same_buffer ? c->b->dsend : c->b->drecv;
  kolo_status st = same_buffer ? KOLO_OK : poison(c, dst, total * c->es);
  if (st == KOLO_OK) st = fill_send(c, c->b->dsend, KOLO_SUM, me, counts[me]);
  if (st == KOLO_OK) st = kolo_allgather(c->comm, c->b->dsend, counts[me], dst, total, seen, c->dt);
  if (st != KOLO_OK) return fail_status("allgather", st);
  if (memcmp(seen, counts, (size_t)n * sizeof counts[0]) != 0) {
    printf("# allgather: receive counts wrong\n");
    return 1;
  }
  if (same_buffer) {
    if (kolo_nccl_copy_to_host(c->b->hrecv, dst, total * c->es) != KOLO_OK) return 1;
  } else if (!read_back(c, dst, total * c->es)) {
    return 1;
  }
  size_t offset = 0;
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < counts[r]; i++) {
      double want = gpu_reference(c->dt, KOLO_SUM, (double[]){gpu_input(KOLO_SUM, r, i)}, 1);
      if (gpu_load(c->dt, c->b->hrecv, offset + i) != want) {
        printf("# allgather%s%s block %d [%zu] wrong\n", variable ? " (counts differ)" : "",
               same_buffer ? " send==recv" : "", r, i);
        return 1;
      }
    }
    offset += counts[r];
  }
  return 0;
}

/* All collectives of one dtype at one count; reports one line per collective. */
static int run_dtype(check *c, size_t count) {
  int bad_ar = 0, bad_rs = 0, bad_bc = 0, bad_ag = 0, failures = 0;
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    bad_ar += check_allreduce(c, count, ops[o], 0);
    bad_rs += check_reducescatter(c, count, ops[o], 0);
  }
  bad_ar += check_allreduce(c, count, KOLO_SUM, 1) + check_allreduce(c, count, KOLO_MAX, 1);
  bad_rs += check_reducescatter(c, count, KOLO_SUM, 1);
  bad_bc += check_broadcast(c, count, 0) + check_broadcast(c, count, c->me->size - 1);
  bad_ag += check_allgather(c, count, 0, 0) + check_allgather(c, count, 1, 0) +
            check_allgather(c, count, 1, 1);
  const char *name = kolo_dtype_name(c->dt);
  int r = c->me->rank, n = c->me->size;
  failures += gpu_report(!bad_ar, "rank %d/%d: allreduce %s x5 ops (+ in place) count %zu", r, n,
                         name, count);
  failures += gpu_report(!bad_rs, "rank %d/%d: reducescatter %s x5 ops (+ send==recv) count %zu", r,
                         n, name, count);
  failures += gpu_report(!bad_bc, "rank %d/%d: broadcast %s roots 0,%d count %zu", r, n, name,
                         n - 1, count);
  failures += gpu_report(!bad_ag, "rank %d/%d: allgather %s (equal, unequal, send==recv) count %zu",
                         r, n, name, count);
  return failures;
}

/* One rank hands a host buffer to a device collective: refused there, and the
 * others, who submitted, fail too instead of waiting for their deadline. */
static int check_local_refusal(check *c) {
  /* every rank done with the collectives before, so the failure cannot hit
   * those; a rank still finishing this barrier when rank 1 fails the ring
   * learns the failure there, which is the same outcome */
  uint64_t t0 = gpu_now_ns();
  kolo_status st = kolo_barrier(c->comm);
  void *recv = c->me->rank == 1 ? (void *)c->b->hrecv : (void *)c->b->drecv;
  if (st == KOLO_OK) st = kolo_allreduce(c->comm, c->b->dsend, recv, 1024, KOLO_FLOAT32, KOLO_SUM);
  double s = (double)(gpu_now_ns() - t0) / 1e9;
  int failed_rank = -1;
  kolo_status recorded = kolo_comm_error(c->comm, &failed_rank);
  int pass = st != KOLO_OK && recorded == KOLO_ERR_INVALID_ARG && failed_rank == 1 && s < 10;
  if (c->me->rank == 1) pass = pass && st == KOLO_ERR_INVALID_ARG;
  return gpu_report(pass,
                    "rank %d/%d: a host buffer on rank 1 fails every rank (%s, rank %d, "
                    "%.2f s)",
                    c->me->rank, c->me->size, kolo_strerror(st), failed_rank, s);
}

static int rank_main(const gpu_rank *me) {
  const options *opt = me->arg;
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 1, me->rank, me->size, 60000, &comm);
  int failures =
      gpu_report(st == KOLO_OK, "rank %d/%d: ring in CUDA mode on device %d%s (%s)", me->rank,
                 me->size, me->device, me->shared ? ", GPU shared" : "", kolo_strerror(st));
  if (st != KOLO_OK) return failures;
  size_t counts[3] = {1, 1003, (1u << 20) + 3};
  for (int k = 0; k < 3; k++)
    if (counts[k] > opt->max_count) counts[k] = opt->max_count;
  size_t n = (size_t)me->size, top = counts[2];
  buffers b = {.send_bytes = (top * n + 3 * n * n + 64) * 8,
               .recv_bytes = ((top + 3 * n) * n + 64) * 8};
  size_t host_bytes = (b.send_bytes > b.recv_bytes ? b.send_bytes : b.recv_bytes) + GUARD_BYTES;
  b.hsend = malloc(host_bytes);
  b.hrecv = malloc(host_bytes);
  if (b.hsend == NULL || b.hrecv == NULL ||
      kolo_nccl_device_alloc(me->device, b.send_bytes + GUARD_BYTES, (void **)&b.dsend) !=
          KOLO_OK ||
      kolo_nccl_device_alloc(me->device, b.recv_bytes + GUARD_BYTES, (void **)&b.drecv) !=
          KOLO_OK) {
    failures += gpu_report(0, "rank %d: buffers", me->rank);
    goto out;
  }
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    check c = {.comm = comm, .me = me, .b = &b, .dt = dtypes[d], .es = kolo_dtype_size(dtypes[d])};
    for (int k = 0; k < 3; k++) failures += run_dtype(&c, counts[k]);
  }
  check c = {.comm = comm, .me = me, .b = &b, .dt = KOLO_FLOAT32, .es = 4};
  if (me->size >= 2) failures += check_local_refusal(&c);
out:
  kolo_nccl_device_free(b.dsend);
  kolo_nccl_device_free(b.drecv);
  free(b.hsend);
  free(b.hrecv);
  kolo_comm_destroy(comm);
  return failures;
}

int main(int argc, char **argv) {
  options opt = {.ranks = 0, .max_count = (1u << 20) + 3};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) continue; /* the counts above are the quick set */
    if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
      opt.ranks = atoi(argv[++i]);
    else if (strcmp(argv[i], "--max-count") == 0 && i + 1 < argc)
      opt.max_count = (size_t)strtoull(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: %s [--quick] [--ranks N] [--max-count N]\n", argv[0]);
      return 2;
    }
  }
  if (opt.max_count < 1 || opt.ranks < 0 || opt.ranks > GPU_MAX_RANKS) return 2;
  int gpus = gpu_count_in_child();
  if (gpus == 0) {
    printf("# no usable GPU: skipped\n");
    return GPU_EXIT_SKIP;
  }
  int ranks = opt.ranks > 0 ? opt.ranks : gpus > 1 ? gpus : 3;
  printf("# collectives through libkolo: %d rank(s) on %d GPU(s)%s\n", ranks, gpus,
         ranks > gpus ? " (shared: NCCL_HOSTID per rank, sockets on loopback)" : "");
  return gpu_run_ranks(ranks, gpus, rank_main, &opt, 900, -1) ? 1 : 0;
}
