/* The TCP transport's copy-alignment chooser (see copy_align.h): a pure
 * function over the timings of large send/recv calls in each mode; and
 * kolo_copy_bytes, a memcpy that stays out of AMD's slow `rep movsb` window. */
#include "collective/net/copy_align.h"

#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h> /* SSE2: part of every x86-64 */
#endif

/* below this, a slow copy costs less than a microsecond: plain memcpy */
#define SHORT_DISTANCE_MIN_BYTES 1024

int kolo_copy_short_distance(const void *dst, const void *src) {
  uintptr_t distance = ((uintptr_t)dst - (uintptr_t)src) & 4095;
  return distance != 0 && distance < 64;
}

void kolo_copy_bytes(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  if (n >= SHORT_DISTANCE_MIN_BYTES && kolo_copy_short_distance(dst, src)) {
    char *d = dst;
    const char *s = src;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
      __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
      __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
      _mm_storeu_si128((__m128i *)(d + i), a);
      _mm_storeu_si128((__m128i *)(d + i + 16), b);
      _mm_storeu_si128((__m128i *)(d + i + 32), c);
      _mm_storeu_si128((__m128i *)(d + i + 48), e);
    }
    if (i < n) memcpy(d + i, s + i, n - i); /* under 64 bytes: no rep movsb */
    return;
  }
#endif
  memcpy(dst, src, n);
}

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
    /* the periodic look: one call (the mode was timed before, warm); the
     * shifted mode, which costs a memcpy, checks back sooner */
    int every = mode ? KOLO_COPY_ALIGN_PROBE_EVERY_SHIFTED : KOLO_COPY_ALIGN_PROBE_EVERY;
    if (++align->since_probe >= every) {
      probe_other(align, other, 1);
      return;
    }
  }
  align->shifted = align->cost[1] * 4 < align->cost[0] * 3;
}
