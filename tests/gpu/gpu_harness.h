/* Shared by the GPU test programs run by tests/gpu/run.sh (and, in CI, against
 * the CPU stand-in tests/support/fakegpu): one process per rank forked before
 * CUDA is touched, libkolo rings formed over 127.0.0.1 from listeners bound
 * before the fork, several ranks on one GPU through NCCL_HOSTID per rank and
 * NCCL's socket transport on loopback, reference arithmetic for every dtype,
 * and TAP-style result lines that run.sh counts. */
#ifndef KOLO_GPU_HARNESS_H
#define KOLO_GPU_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/kolo.h"
#include "kolo_nccl.h"

#define GPU_EXIT_SKIP 77
#define GPU_MAX_RANKS 8

/* Counts GPUs in a forked child, so this process never initializes CUDA (a
 * child forked after CUDA init cannot use CUDA). 0 when there is none. The
 * child also prints the NCCL / CUDA versions as a comment line. */
int gpu_count_in_child(void);

/* The start of a program that takes only [--quick] [--ranks N]: returns the
 * number of GPUs, with *ranks set to N, or (no N, or N below min_ranks) to the
 * GPU count when that is at least min_ranks, else min_ranks; returns 0 with
 * *exit_code set to 2 (bad arguments) or GPU_EXIT_SKIP (no GPU, said on stdout). */
int gpu_start(int argc, char **argv, int min_ranks, int *ranks, int *exit_code);

/* What a rank body gets. */
typedef struct gpu_rank {
  int rank, size;
  int device;      /* CUDA device of this rank */
  int shared;      /* several ranks share this GPU (NCCL_HOSTID per rank) */
  const char *dir; /* a temporary folder of this run, for id files */
  void *arg;
} gpu_rank;

typedef int (*gpu_rank_fn)(const gpu_rank *rank);

/* Forks size ranks running fn, one per GPU while there are enough, else
 * sharing them (each rank then gets its own NCCL_HOSTID, and NCCL's socket
 * transport on loopback). Waits at most timeout_s, then kills the rest.
 * expect_killed >= 0 is a rank expected to die by SIGKILL. Prints a "not ok"
 * line for every rank that failed; returns how many failed. */
int gpu_run_ranks(int size, int gpus, gpu_rank_fn fn, void *arg, int timeout_s, int expect_killed);

/* Joins epoch `epoch` of the test ring as rank r of size (addresses bound by
 * gpu_run_ranks; later epochs reuse them), in CUDA mode on r->device, with the
 * ring timeout timeout_ms. */
kolo_status gpu_ring_join(const gpu_rank *r, uint64_t epoch, int rank, int size, int timeout_ms,
                          kolo_comm **out);

/* The unique id of an epoch for kolo_nccl-level tests: rank `maker` creates it
 * and writes it (hex) to dir/id.<epoch>; the others poll for the file. */
kolo_status gpu_share_id(const char *dir, int epoch, int rank, int maker,
                         uint8_t id[KOLO_NCCL_ID_BYTES], int timeout_ms);

/* A result line ("ok ..." / "not ok ..."); returns !pass. */
int gpu_report(int pass, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Element access for every kolo dtype through double, with the type's own
 * rounding or wrapping on store. */
void gpu_store(kolo_dtype dtype, void *buffer, size_t i, double value);
double gpu_load(kolo_dtype dtype, const void *buffer, size_t i);

/* The result a correct collective gives for element values v[0..n) of the n
 * ranks, in the dtype's arithmetic: integers wrap (uint8) and AVG divides the
 * wrapped sum with the type's integer division; floats in double. */
double gpu_reference(kolo_dtype dtype, kolo_op op, const double *v, int n);
/* Whether got is want within the dtype's tolerance (exact for integers). */
int gpu_close(kolo_dtype dtype, double got, double want);

/* Input element i of rank r: non-periodic, signed, small (exact in every
 * type): from a hash, in [-8, 8]; for PROD in {-2, -1, 1, 2}. */
double gpu_input(kolo_op op, int rank, size_t i);

uint64_t gpu_now_ns(void);
void gpu_sleep_ms(int ms);
/* Open file descriptors and threads of this process (from /proc/self). */
int gpu_open_fds(void);
int gpu_threads(void);
/* Whether this process runs on the CPU stand-in (tests/support/fakegpu). */
int gpu_on_fake(void);

#endif
