/* Which alignment the TCP transport hands the kernel for one direction of a
 * connection. The kernel copies socket data with `rep movsb` on CPUs with fast
 * short strings (FSRM), and on AMD EPYC (this project's machines) that copy is
 * about 16 times slower when the destination lies 1..31 bytes after the source
 * modulo 4096 (64 KiB: 22 us instead of 1.4; glibc's memcpy avoids the case on
 * AMD, the kernel does not). The distance is set by the kernel's page-fragment
 * offset (what this thread sent before, mod 4096) against the user buffer's
 * page offset, so a process can sit in the slow case for good by history. The
 * remedy is to move the buffer 32 bytes (copy through a bounce buffer): if one
 * distance is in the window, the other is not. The transport times its large
 * calls and this chooser, a pure function over those timings, says whether the
 * next call goes straight or through the bounce. glibc's memcpy falls into the
 * same window for copies between buffers (its guard looks only at distances
 * under 64 bytes, not modulo 4096: 64 KiB 21-27 us instead of 1.4 for 8 KiB to
 * 256 KiB here), so kolo's own user-space copies go through kolo_copy_bytes. */
#ifndef KOLO_COLLECTIVE_COPY_ALIGN_H
#define KOLO_COLLECTIVE_COPY_ALIGN_H

#include <stddef.h>
#include <stdint.h>

/* the shift that takes a distance out of the slow window (which is 31 wide) */
#define KOLO_COPY_ALIGN_SHIFT 32
/* calls that move at least this many bytes are timed (smaller ones are
 * dominated by the system call itself) */
#define KOLO_COPY_ALIGN_MEASURE_BYTES (16 * 1024)
/* after this many timed calls in one mode, time the other again (one call: a
 * look at the slow mode costs up to 16 times a fast copy) */
#define KOLO_COPY_ALIGN_PROBE_EVERY 256
/* the same while shifted: a detour chosen on noisy timings is undone sooner (at
 * 4 MiB a quarter of the receives went through the bounce, 25% dearer) */
#define KOLO_COPY_ALIGN_PROBE_EVERY_SHIFTED 32
/* a connection's first timed calls are not counted (cold: its first skbs and
 * page faults made a straight 256 KiB send look 2.4x dearer than it is) */
#define KOLO_COPY_ALIGN_WARMUP_CALLS 4
/* timings a mode gets before it is compared (one slow call is no verdict) */
#define KOLO_COPY_ALIGN_PROBE_CALLS 2

/* One direction of one connection. All zero = straight, nothing measured. */
typedef struct kolo_copy_align {
  int shifted;     /* the next call goes through the bounce buffer */
  int64_t cost[2]; /* per mode (0 straight, 1 shifted): ns per KiB, 0 = not timed */
  int64_t last[2]; /* the previous raw timing of each mode (cost = min of two) */
  int timed[2];    /* timings of each mode since it was last probed (at most 2) */
  int probe_left;  /* timed calls left in the current probe of the other mode */
  int since_probe; /* timed calls since the other mode was last timed */
  int warm;        /* timed calls ignored so far (up to KOLO_COPY_ALIGN_WARMUP_CALLS) */
} kolo_copy_align;

/* Records a timed call (ns_per_kib, in the mode align->shifted says) and sets
 * align->shifted for the next call. Each mode is timed twice before it is
 * compared; the other mode is probed, two calls, when it was never timed or
 * when this mode's cost doubled (the kernel's fragment offset moved), and one
 * call every KOLO_COPY_ALIGN_PROBE_EVERY timed calls (_SHIFTED while shifted);
 * otherwise the cheaper mode
 * wins, the shifted one (an extra memcpy) only when at least 4/3 cheaper. A
 * mode's cost is the smaller of its last two timings, so one preempted call
 * does not flip the choice. */
void kolo_copy_align_next(kolo_copy_align *align, int64_t ns_per_kib);

/* memcpy(dst, src, n) for buffers that do not overlap, that copies with a
 * vector loop instead of glibc's `rep movsb` when dst lies 1..63 bytes after
 * src modulo 4096 (as fast as the good case then; memcpy elsewhere). */
void kolo_copy_bytes(void *dst, const void *src, size_t n);

/* Whether (dst - src) mod 4096 is in [1, 63]: the copies that take the detour. */
int kolo_copy_short_distance(const void *dst, const void *src);

#endif
