/* Deterministic test data for the multi-process collective tests: per-rank input
 * values (seeded by rank and index) that are exactly representable in their dtype
 * and small enough that sums and products cannot overflow for up to 8 ranks, plus
 * typed load/store through double. Header-only: shared by collective_*.c programs. */
#ifndef KOLO_TESTS_COLLECTIVE_VALUES_H
#define KOLO_TESTS_COLLECTIVE_VALUES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kolo/kolo.h"

static inline uint64_t cv_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Rounds a double to the nearest value of dtype (for float16/bfloat16 through the
 * library's own helpers, so reference and library agree on the format). */
static inline double cv_round(kolo_dtype dtype, double v) {
  switch (dtype) {
    case KOLO_FLOAT16:
      return kolo_half_to_float(kolo_float_to_half((float)v));
    case KOLO_BFLOAT16:
      return kolo_bfloat16_to_float(kolo_float_to_bfloat16((float)v));
    case KOLO_FLOAT32:
      return (float)v;
    default:
      return v;
  }
}

static inline int cv_is_float(kolo_dtype dtype) {
  return dtype == KOLO_FLOAT16 || dtype == KOLO_BFLOAT16 || dtype == KOLO_FLOAT32 ||
         dtype == KOLO_FLOAT64;
}

/* Input element i of rank for (dtype, op); salt varies the data between cases. */
static inline double cv_input(int rank, size_t i, kolo_dtype dtype, kolo_op op, uint64_t salt) {
  uint64_t h = cv_mix(salt * 0x100000001b3ull ^ ((uint64_t)rank << 40) ^ (uint64_t)i);
  if (dtype == KOLO_BOOL) return h % 4 == 0; /* mostly false, so "any" is often false too */
  if (op == KOLO_PROD) {
    /* factors 1 and +-2 (and +-0.5 for floats), a 2 on at most ceil(n/4) ranks per
     * element, and a rare 0: exact in every dtype, no overflow up to 8 ranks */
    if (h % 211 == 0) return 0;
    double magnitude = 1;
    if ((i + (size_t)rank) % 4 == 0) magnitude = cv_is_float(dtype) && (h & 2) ? 0.5 : 2;
    if (dtype == KOLO_UINT8) return magnitude == 0.5 ? 1 : magnitude;
    return (h & 1) ? -magnitude : magnitude;
  }
  int wide = op == KOLO_MIN || op == KOLO_MAX;
  switch (dtype) {
    case KOLO_UINT8:
      return wide ? (double)(h % 256) : (double)(h % 16);
    case KOLO_INT8:
      return wide ? (double)(int8_t)(uint8_t)h : (double)((int)(h % 31) - 15);
    case KOLO_INT16:
      return wide ? (double)(int16_t)(uint16_t)h : (double)((int)(h % 8001) - 4000);
    case KOLO_INT32:
      return wide ? (double)(int32_t)(uint32_t)h : (double)((int64_t)(h % 2000001) - 1000000);
    case KOLO_INT64:
      /* below 2^53 so the double that carries it stays exact */
      return wide ? (double)((int64_t)(h >> 11) - (INT64_C(1) << 52))
                  : (double)((int64_t)(h % 2000000000001ull) - 1000000000000ll);
    default: {
      /* uniform in [-1, 1), then rounded to the dtype: sums need rounding */
      double u = (double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0;
      return cv_round(dtype, u);
    }
  }
}

static inline void cv_store(kolo_dtype dtype, void *buffer, size_t i, double v) {
  switch (dtype) {
    case KOLO_UINT8:
    case KOLO_BOOL:
      ((uint8_t *)buffer)[i] = (uint8_t)v;
      break;
    case KOLO_INT8:
      ((int8_t *)buffer)[i] = (int8_t)v;
      break;
    case KOLO_INT16:
      ((int16_t *)buffer)[i] = (int16_t)v;
      break;
    case KOLO_INT32:
      ((int32_t *)buffer)[i] = (int32_t)v;
      break;
    case KOLO_INT64:
      ((int64_t *)buffer)[i] = (int64_t)v;
      break;
    case KOLO_FLOAT16:
      ((uint16_t *)buffer)[i] = kolo_float_to_half((float)v);
      break;
    case KOLO_BFLOAT16:
      ((uint16_t *)buffer)[i] = kolo_float_to_bfloat16((float)v);
      break;
    case KOLO_FLOAT32:
      ((float *)buffer)[i] = (float)v;
      break;
    case KOLO_FLOAT64:
      ((double *)buffer)[i] = v;
      break;
    default:
      break;
  }
}

static inline double cv_load(kolo_dtype dtype, const void *buffer, size_t i) {
  switch (dtype) {
    case KOLO_UINT8:
    case KOLO_BOOL:
      return ((const uint8_t *)buffer)[i];
    case KOLO_INT8:
      return ((const int8_t *)buffer)[i];
    case KOLO_INT16:
      return ((const int16_t *)buffer)[i];
    case KOLO_INT32:
      return ((const int32_t *)buffer)[i];
    case KOLO_INT64:
      return (double)((const int64_t *)buffer)[i];
    case KOLO_FLOAT16:
      return kolo_half_to_float(((const uint16_t *)buffer)[i]);
    case KOLO_BFLOAT16:
      return kolo_bfloat16_to_float(((const uint16_t *)buffer)[i]);
    case KOLO_FLOAT32:
      return ((const float *)buffer)[i];
    case KOLO_FLOAT64:
      return ((const double *)buffer)[i];
    default:
      return NAN;
  }
}

/* Fills count elements of rank's input. */
static inline void cv_fill(int rank, kolo_dtype dtype, kolo_op op, uint64_t salt, void *buffer,
                           size_t count) {
  for (size_t i = 0; i < count; i++) cv_store(dtype, buffer, i, cv_input(rank, i, dtype, op, salt));
}

/* FNV-1a over bytes: equal results on every rank give equal checksums. */
static inline int64_t cv_checksum(const void *data, size_t length) {
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char *p = data;
  for (size_t i = 0; i < length; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return (int64_t)h;
}

#endif
