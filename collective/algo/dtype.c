/* Element types and reduction kernels of libkolo: sizes and names, float16 and
 * bfloat16 conversion (round to nearest even), and dst = a (op) b over arrays. */
#include <math.h>
/* The F16C path needs __builtin_cpu_supports("f16c"), which clang 14 (the fuzz build's
 * compiler) does not know; clang builds keep the scalar conversion. */
#if defined(__x86_64__) && !defined(__clang__)
#define KOLO_HAVE_F16C_PATH 1
#include <immintrin.h>
#endif
#include <stdint.h>
#include <string.h>

#include "collective/algo/algo.h"

size_t kolo_dtype_size(kolo_dtype dtype) {
  switch (dtype) {
    case KOLO_UINT8:
    case KOLO_INT8:
    case KOLO_BOOL:
      return 1;
    case KOLO_INT16:
      return 2;
    case KOLO_INT32:
      return 4;
    case KOLO_INT64:
      return 8;
    case KOLO_FLOAT16:
      return 2;
    case KOLO_BFLOAT16:
      return 2;
    case KOLO_FLOAT32:
      return 4;
    case KOLO_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

const char *kolo_dtype_name(kolo_dtype dtype) {
  switch (dtype) {
    case KOLO_UINT8:
      return "uint8";
    case KOLO_INT32:
      return "int32";
    case KOLO_INT64:
      return "int64";
    case KOLO_FLOAT16:
      return "float16";
    case KOLO_BFLOAT16:
      return "bfloat16";
    case KOLO_FLOAT32:
      return "float32";
    case KOLO_FLOAT64:
      return "float64";
    case KOLO_INT8:
      return "int8";
    case KOLO_INT16:
      return "int16";
    case KOLO_BOOL:
      return "bool";
    default:
      return "unknown";
  }
}

const char *kolo_op_name(kolo_op op) {
  switch (op) {
    case KOLO_SUM:
      return "sum";
    case KOLO_AVG:
      return "avg";
    case KOLO_MIN:
      return "min";
    case KOLO_MAX:
      return "max";
    case KOLO_PROD:
      return "prod";
    default:
      return "unknown";
  }
}

float kolo_half_to_float(uint16_t half) {
  uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else { /* subnormal: shift until the implicit bit appears */
      int shifts = -1;
      do {
        shifts++;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      bits = sign | ((uint32_t)(127 - 15 - shifts) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  }
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

uint16_t kolo_float_to_half(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) { /* infinity or NaN (keep NaN quiet and non-zero) */
    return (uint16_t)(sign | 0x7c00u | (mantissa ? (0x200u | (mantissa >> 13)) : 0));
  }
  int half_exponent = (int)exponent - 127 + 15;
  if (half_exponent >= 31) return (uint16_t)(sign | 0x7c00u);
  if (half_exponent <= 0) {
    if (half_exponent < -10) return (uint16_t)sign;
    uint32_t full = mantissa | 0x800000u;
    int shift = 14 - half_exponent;
    uint32_t kept = full >> shift;
    uint32_t rest = full & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (kept & 1u))) kept++;
    return (uint16_t)(sign | kept);
  }
  uint32_t result = sign | ((uint32_t)half_exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) result++;
  return (uint16_t)result;
}

float kolo_bfloat16_to_float(uint16_t value) {
  uint32_t bits = (uint32_t)value << 16;
  float result;
  memcpy(&result, &bits, sizeof result);
  return result;
}

uint16_t kolo_float_to_bfloat16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0) {
    return (uint16_t)((bits >> 16) | 0x40u); /* quiet NaN stays NaN */
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

/* Integer sums and products wrap (computed unsigned) instead of being undefined.
 * The operands may lie anywhere (the executor reduces straight out of a byte
 * ring, where an element can start at any byte): they are read through a type
 * of alignment 1, which x86 loads as fast. */
#define KOLO_REDUCE_LOOP(type, expr)                     \
  do {                                                   \
    typedef type loose_type __attribute__((aligned(1))); \
    type *out = (type *)dst;                             \
    const loose_type *x = (const loose_type *)a;         \
    const loose_type *y = (const loose_type *)b;         \
    for (size_t i = 0; i < count; i++) {                 \
      type l = x[i], r = y[i];                           \
      out[i] = (expr);                                   \
    }                                                    \
  } while (0)

#define KOLO_REDUCE_INTEGER(type, utype)                   \
  switch (op) {                                            \
    case KOLO_SUM:                                         \
    case KOLO_AVG:                                         \
      KOLO_REDUCE_LOOP(type, (type)((utype)l + (utype)r)); \
      break;                                               \
    case KOLO_PROD:                                        \
      KOLO_REDUCE_LOOP(type, (type)((utype)l * (utype)r)); \
      break;                                               \
    case KOLO_MIN:                                         \
      KOLO_REDUCE_LOOP(type, l < r ? l : r);               \
      break;                                               \
    case KOLO_MAX:                                         \
      KOLO_REDUCE_LOOP(type, l > r ? l : r);               \
      break;                                               \
    default:                                               \
      break;                                               \
  }

/* bool: any non-zero byte is true; the result is 0 or 1 */
#define KOLO_REDUCE_BOOL()                            \
  switch (op) {                                       \
    case KOLO_MIN:                                    \
    case KOLO_PROD:                                   \
      KOLO_REDUCE_LOOP(uint8_t, (uint8_t)(l && r));   \
      break;                                          \
    default:                                          \
      KOLO_REDUCE_LOOP(uint8_t, (uint8_t)(l || r));   \
      break;                                          \
  }

#define KOLO_REDUCE_FLOAT(type)              \
  switch (op) {                              \
    case KOLO_SUM:                           \
    case KOLO_AVG:                           \
      KOLO_REDUCE_LOOP(type, l + r);         \
      break;                                 \
    case KOLO_PROD:                          \
      KOLO_REDUCE_LOOP(type, l *r);          \
      break;                                 \
    case KOLO_MIN:                           \
      KOLO_REDUCE_LOOP(type, l < r ? l : r); \
      break;                                 \
    case KOLO_MAX:                           \
      KOLO_REDUCE_LOOP(type, l > r ? l : r); \
      break;                                 \
    default:                                 \
      break;                                 \
  }

/* Inline forms of the conversions for the reduction loops (the exported
 * functions above are the reference; these compute the same bits). */
static inline float bf16_to_float(uint16_t value) {
  union {
    uint32_t bits;
    float value;
  } u = {.bits = (uint32_t)value << 16};
  return u.value;
}

static inline uint16_t float_to_bf16(float value) {
  union {
    float value;
    uint32_t bits;
  } u = {.value = value};
  if ((u.bits & 0x7f800000u) == 0x7f800000u && (u.bits & 0x7fffffu) != 0) {
    return (uint16_t)((u.bits >> 16) | 0x40u);
  }
  return (uint16_t)((u.bits + 0x7fffu + ((u.bits >> 16) & 1u)) >> 16);
}

/* One loop per op, the op chosen once per call rather than per element, so the
 * compiler can vectorise the bfloat16 loops. */
#define KOLO_REDUCE_HALF(to_float, from_float)                                                   \
  do {                                                                                           \
    typedef uint16_t loose_half __attribute__((aligned(1)));                                     \
    uint16_t *out = dst;                                                                         \
    const loose_half *x = a, *y = b;                                                             \
    switch (op) {                                                                                \
      case KOLO_PROD:                                                                            \
        for (size_t i = 0; i < count; i++) out[i] = from_float(to_float(x[i]) * to_float(y[i])); \
        break;                                                                                   \
      case KOLO_MIN:                                                                             \
        for (size_t i = 0; i < count; i++) {                                                     \
          float l = to_float(x[i]), r = to_float(y[i]);                                          \
          out[i] = from_float(l < r ? l : r);                                                    \
        }                                                                                        \
        break;                                                                                   \
      case KOLO_MAX:                                                                             \
        for (size_t i = 0; i < count; i++) {                                                     \
          float l = to_float(x[i]), r = to_float(y[i]);                                          \
          out[i] = from_float(l > r ? l : r);                                                    \
        }                                                                                        \
        break;                                                                                   \
      default:                                                                                   \
        for (size_t i = 0; i < count; i++) out[i] = from_float(to_float(x[i]) + to_float(y[i])); \
        break;                                                                                   \
    }                                                                                            \
  } while (0)

#if defined(KOLO_HAVE_F16C_PATH)
/* float16 with the F16C conversion instructions (IEEE round to nearest even, the
 * same bits as the software conversion), 8 elements at a time; used only when
 * the CPU has them. */
__attribute__((target("avx,f16c"))) static void reduce_half_f16c(uint16_t *out, const uint16_t *x,
                                                                 const uint16_t *y, size_t count,
                                                                 kolo_op op) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 l = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
    __m256 r = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
    __m256 v;
    switch (op) {
      case KOLO_PROD:
        v = _mm256_mul_ps(l, r);
        break;
      case KOLO_MIN:
        v = _mm256_min_ps(l, r);
        break; /* l < r ? l : r, as the scalar loop */
      case KOLO_MAX:
        v = _mm256_max_ps(l, r);
        break; /* l > r ? l : r */
      default:
        v = _mm256_add_ps(l, r);
        break;
    }
    _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < count) {
    typedef uint16_t loose_half __attribute__((aligned(1))); /* operands at any byte */
    uint16_t *tail_out = out + i;
    const loose_half *tail_x = x + i, *tail_y = y + i;
    size_t tail = count - i;
    for (size_t k = 0; k < tail; k++) {
      float l = kolo_half_to_float(tail_x[k]), r = kolo_half_to_float(tail_y[k]), v;
      switch (op) {
        case KOLO_PROD:
          v = l * r;
          break;
        case KOLO_MIN:
          v = l < r ? l : r;
          break;
        case KOLO_MAX:
          v = l > r ? l : r;
          break;
        default:
          v = l + r;
          break;
      }
      tail_out[k] = kolo_float_to_half(v);
    }
  }
}
#endif

void kolo_reduce(void *dst, const void *a, const void *b, size_t count, kolo_dtype dtype,
                 kolo_op op) {
#if defined(KOLO_HAVE_F16C_PATH)
  if (dtype == KOLO_FLOAT16 && __builtin_cpu_supports("f16c")) {
    reduce_half_f16c(dst, a, b, count, op);
    return;
  }
#endif
  switch (dtype) {
    case KOLO_UINT8:
      KOLO_REDUCE_INTEGER(uint8_t, uint32_t);
      break;
    case KOLO_INT32:
      KOLO_REDUCE_INTEGER(int32_t, uint32_t);
      break;
    case KOLO_INT64:
      KOLO_REDUCE_INTEGER(int64_t, uint64_t);
      break;
    case KOLO_INT8:
      KOLO_REDUCE_INTEGER(int8_t, uint32_t);
      break;
    case KOLO_INT16:
      KOLO_REDUCE_INTEGER(int16_t, uint32_t);
      break;
    case KOLO_BOOL:
      KOLO_REDUCE_BOOL();
      break;
    case KOLO_FLOAT32:
      KOLO_REDUCE_FLOAT(float);
      break;
    case KOLO_FLOAT64:
      KOLO_REDUCE_FLOAT(double);
      break;
    case KOLO_FLOAT16:
      KOLO_REDUCE_HALF(kolo_half_to_float, kolo_float_to_half);
      break;
    case KOLO_BFLOAT16:
      KOLO_REDUCE_HALF(bf16_to_float, float_to_bf16);
      break;
    default:
      break;
  }
}

void kolo_divide(void *buffer, size_t count, kolo_dtype dtype, int divisor) {
  if (divisor <= 1) return;
  switch (dtype) {
    case KOLO_UINT8: {
      uint8_t *v = buffer;
      for (size_t i = 0; i < count; i++) v[i] = (uint8_t)(v[i] / (unsigned)divisor);
      break;
    }
    case KOLO_INT32: {
      int32_t *v = buffer;
      for (size_t i = 0; i < count; i++) v[i] = v[i] / divisor;
      break;
    }
    case KOLO_INT64: {
      int64_t *v = buffer;
      for (size_t i = 0; i < count; i++) v[i] = v[i] / divisor;
      break;
    }
    case KOLO_INT8: {
      int8_t *v = buffer;
      for (size_t i = 0; i < count; i++) v[i] = (int8_t)(v[i] / divisor);
      break;
    }
    case KOLO_INT16: {
      int16_t *v = buffer;
      for (size_t i = 0; i < count; i++) v[i] = (int16_t)(v[i] / divisor);
      break;
    }
    case KOLO_FLOAT32: {
      float *v = buffer;
      for (size_t i = 0; i < count; i++) v[i] /= (float)divisor;
      break;
    }
    case KOLO_FLOAT64: {
      double *v = buffer;
      for (size_t i = 0; i < count; i++) v[i] /= (double)divisor;
      break;
    }
    case KOLO_FLOAT16: {
      uint16_t *v = buffer;
      for (size_t i = 0; i < count; i++)
        v[i] = kolo_float_to_half(kolo_half_to_float(v[i]) / (float)divisor);
      break;
    }
    case KOLO_BFLOAT16: {
      uint16_t *v = buffer;
      for (size_t i = 0; i < count; i++) v[i] = float_to_bf16(bf16_to_float(v[i]) / (float)divisor);
      break;
    }
    default:
      break;
  }
}

/* dst = src * factor element-wise (floating types; the product is formed in
 * double and rounded once to the element type). dst may equal src. */
void kolo_scale(void *dst, const void *src, size_t count, kolo_dtype dtype, double factor) {
  switch (dtype) {
    case KOLO_FLOAT32: {
      float *out = dst;
      const float *in = src;
      for (size_t i = 0; i < count; i++) out[i] = (float)((double)in[i] * factor);
      break;
    }
    case KOLO_FLOAT64: {
      double *out = dst;
      const double *in = src;
      for (size_t i = 0; i < count; i++) out[i] = in[i] * factor;
      break;
    }
    case KOLO_FLOAT16: {
      uint16_t *out = dst;
      const uint16_t *in = src;
      for (size_t i = 0; i < count; i++)
        out[i] = kolo_float_to_half((float)((double)kolo_half_to_float(in[i]) * factor));
      break;
    }
    case KOLO_BFLOAT16: {
      uint16_t *out = dst;
      const uint16_t *in = src;
      for (size_t i = 0; i < count; i++)
        out[i] = float_to_bf16((float)((double)bf16_to_float(in[i]) * factor));
      break;
    }
    default:
      if (dst != src) memmove(dst, src, count * kolo_dtype_size(dtype));
      break;
  }
}

int kolo_dtype_is_floating(kolo_dtype dtype) {
  return dtype == KOLO_FLOAT16 || dtype == KOLO_BFLOAT16 || dtype == KOLO_FLOAT32 ||
         dtype == KOLO_FLOAT64;
}

/* The identity of op in dtype, as one element's bytes: what a rank that joined
 * contributes (0 for SUM/AVG, 1 for PROD, +inf / the largest value for MIN,
 * -inf / the smallest for MAX). */
static void identity_element(kolo_dtype dtype, kolo_op op, unsigned char *out) {
  int lowest = op == KOLO_MAX, highest = op == KOLO_MIN, one = op == KOLO_PROD;
  switch (dtype) {
    case KOLO_UINT8:
      out[0] = one ? 1 : highest ? 0xff : 0;
      break;
    case KOLO_BOOL:
      out[0] = one || highest ? 1 : 0;
      break;
    case KOLO_INT8: {
      int8_t v = one ? 1 : highest ? INT8_MAX : lowest ? INT8_MIN : 0;
      memcpy(out, &v, sizeof v);
      break;
    }
    case KOLO_INT16: {
      int16_t v = one ? 1 : highest ? INT16_MAX : lowest ? INT16_MIN : 0;
      memcpy(out, &v, sizeof v);
      break;
    }
    case KOLO_INT32: {
      int32_t v = one ? 1 : highest ? INT32_MAX : lowest ? INT32_MIN : 0;
      memcpy(out, &v, sizeof v);
      break;
    }
    case KOLO_INT64: {
      int64_t v = one ? 1 : highest ? INT64_MAX : lowest ? INT64_MIN : 0;
      memcpy(out, &v, sizeof v);
      break;
    }
    case KOLO_FLOAT32: {
      float v = one ? 1.0f : highest ? INFINITY : lowest ? -INFINITY : 0.0f;
      memcpy(out, &v, sizeof v);
      break;
    }
    case KOLO_FLOAT64: {
      double v = one ? 1.0 : highest ? INFINITY : lowest ? -INFINITY : 0.0;
      memcpy(out, &v, sizeof v);
      break;
    }
    case KOLO_FLOAT16: {
      uint16_t v = one ? 0x3c00 : highest ? 0x7c00 : lowest ? 0xfc00 : 0;
      memcpy(out, &v, sizeof v);
      break;
    }
    case KOLO_BFLOAT16: {
      uint16_t v = one ? 0x3f80 : highest ? 0x7f80 : lowest ? 0xff80 : 0;
      memcpy(out, &v, sizeof v);
      break;
    }
    default:
      break;
  }
}

void kolo_fill_identity(void *buffer, size_t count, kolo_dtype dtype, kolo_op op) {
  size_t element = kolo_dtype_size(dtype);
  unsigned char value[8] = {0};
  identity_element(dtype, op, value);
  int zero = 1;
  for (size_t i = 0; i < element; i++) zero &= value[i] == 0;
  if (zero) {
    memset(buffer, 0, count * element);
    return;
  }
  unsigned char *out = buffer;
  for (size_t i = 0; i < count; i++) memcpy(out + i * element, value, element);
}
