/* The TCP transport's copy-alignment chooser (see copy_align.h): a pure
 * function over the timings of large send/recv calls in each mode. */
#include "collective/copy_align.h"

/* Starts timing the other mode afresh (its old timings may predate a change of
 * the kernel's fragment offset). */
static void probe_other(kolo_copy_align *align, int other, int calls) {
  align->since_probe = 0;
  align->last[other] = 0;
  align->timed[other] = KOLO_COPY_ALIGN_PROBE_CALLS - calls;
  align->probe_left = calls;
  align->shifted = other;
}

void kolo_copy_align_next(kolo_copy_align *align, int64_t ns_per_kib) {
  if (align->warm < KOLO_COPY_ALIGN_WARMUP_CALLS) { /* cold: first skbs, first faults */
    align->warm++;
    return;
  }
  int mode = align->shifted ? 1 : 0, other = !mode;
  if (ns_per_kib < 1) ns_per_kib = 1;
  int64_t before = align->cost[mode], previous = align->last[mode];
  align->last[mode] = ns_per_kib;
  align->cost[mode] = previous > 0 && previous < ns_per_kib ? previous : ns_per_kib;
  if (align->timed[mode] < KOLO_COPY_ALIGN_PROBE_CALLS) align->timed[mode]++;
  if (align->probe_left > 0) {
    if (--align->probe_left > 0) return; /* the probe goes on */
  } else {
    if (align->timed[mode] < KOLO_COPY_ALIGN_PROBE_CALLS) return; /* too few timings yet */
    /* this mode got much dearer (the kernel's fragment offset moved): look at
     * the other one now rather than at the next periodic probe */
    int worse = before > 0 && align->cost[mode] > 2 * before;
    if (align->timed[other] == 0 || worse) {
      probe_other(align, other, KOLO_COPY_ALIGN_PROBE_CALLS);
      return;
    }
    /* the periodic look: one call (the mode was timed before, warm) */
    if (++align->since_probe >= KOLO_COPY_ALIGN_PROBE_EVERY) {
      probe_other(align, other, 1);
      return;
    }
  }
  align->shifted = align->cost[1] * 4 < align->cost[0] * 3;
}
