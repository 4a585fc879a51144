/* How many kolo ranks share this machine's CPUs (common/machine_ranks.c).
 *
 * KOLO_LOCAL_SIZE says how many ranks of one job run on a host, but several
 * "hosts" can share one kernel (network namespaces, containers on one node) and
 * several jobs one machine: their ranks all compete for the same cores. Each
 * communicator registers its process in a directory on this machine (by default
 * /tmp/kolo-ranks-<uid>, which network-namespace hosts with their own /dev/shm still
 * share; KOLO_RANKS_DIR overrides it; a directory not owned by this user, or a
 * symbolic link, is refused) by holding an flock on a
 * file of its own for its life, and counts the processes whose files are locked:
 * the kernel drops a dead process's lock, so a crash leaves nothing counted (its
 * file is removed by the next count). The spin's yield rule reads the count
 * (collective/comm.c, kolo_spin_yield_mode). No network, no waiting: a directory
 * that cannot be made or read gives no handle or a count of -1, and the caller
 * falls back to KOLO_LOCAL_SIZE. */
#ifndef KOLO_COMMON_MACHINE_RANKS_H
#define KOLO_COMMON_MACHINE_RANKS_H

#include <stddef.h>

#include "kolo/status.h"

typedef struct kolo_machine_ranks kolo_machine_ranks;

/* The directory registrations go to: KOLO_RANKS_DIR, else /tmp/kolo-ranks-<uid>
 * (writes at most size bytes into buffer; returns buffer). */
const char *kolo_machine_ranks_dir(char *buffer, size_t size);

/* Registers this process in dir (made 0700 if missing): a file named after its pid,
 * locked before it gets that name, so a count never sees it unlocked. The caller
 * owns *out. */
kolo_status kolo_machine_ranks_create(const char *dir, kolo_machine_ranks **out);

/* Distinct processes registered in the handle's directory (this one included), at most
 * KOLO_MACHINE_RANKS_MAX; removes the files of processes that ended. -1 when the
 * directory cannot be read. */
#define KOLO_MACHINE_RANKS_MAX 4096
int kolo_machine_ranks_count(kolo_machine_ranks *ranks);

/* Unregisters (removes the file, drops the lock); NULL is a no-op. */
void kolo_machine_ranks_destroy(kolo_machine_ranks *ranks);

#endif
