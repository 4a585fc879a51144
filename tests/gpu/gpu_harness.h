/* Shared by the GPU test programs run by tests/gpu/run.sh: one process per rank
 * (fork, one GPU each), the unique id passed through a file, deadlines on every
 * wait, element conversions for the host reference, and TAP-style result lines. */
#ifndef KOLO_GPU_HARNESS_H
#define KOLO_GPU_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "kolo_nccl.h"

/* Exit code meaning "skipped: no GPU" (CTest SKIP_RETURN_CODE). */
#define GPU_EXIT_SKIP 77

/* Counts GPUs in a forked child, so this process never initializes CUDA (a
 * child forked after CUDA init cannot use CUDA). 0 when there is none. The
 * child also prints the NCCL / CUDA versions as a comment line. */
int gpu_count_in_child(void);

/* Body of one rank; returns its exit code (0 = all its checks passed). */
typedef int (*gpu_rank_fn)(int rank, int size, const char *dir, void *arg);

/* Forks size ranks running fn(rank, size, dir, arg) and waits for all of them
 * for at most timeout_s (then kills the rest). dir is a fresh temporary folder
 * for id files. expect_killed, if >= 0, is a rank expected to die by SIGKILL.
 * Prints a "not ok" line for every rank that failed; returns how many failed. */
int gpu_run_ranks(int size, gpu_rank_fn fn, void *arg, int timeout_s, int expect_killed);

/* The unique id of an epoch: rank `maker` creates it and writes it (hex text) to
 * dir/id.<epoch>; the others poll for the file (timeout_ms). */
kolo_status gpu_share_id(const char *dir, int epoch, int rank, int maker,
                         uint8_t id[KOLO_NCCL_ID_BYTES], int timeout_ms);

/* A result line; counted by run.sh ("ok ..." / "not ok ..."). Returns !pass. */
int gpu_report(int pass, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Element access for every kolo dtype through double (values used are small
 * integers or halves, exact in every type). */
void gpu_store(kolo_dtype dtype, void *buffer, size_t i, double value);
double gpu_load(kolo_dtype dtype, const void *buffer, size_t i);
/* Tolerance for floating averages (NCCL scales before summing); 0 for integers. */
double gpu_tolerance(kolo_dtype dtype);

uint64_t gpu_now_ns(void);

#endif
