/* Unit tests for collective/algo/dtype.c: float16/bfloat16 conversion rounds to
 * nearest even and keeps specials; the reduction kernels compute each op. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "collective/algo/algo.h"

static void half_round_trips_every_finite_value(void **state) {
  (void)state;
  for (uint32_t bits = 0; bits < 0x10000u; bits++) {
    uint16_t half = (uint16_t)bits;
    if ((half & 0x7c00u) == 0x7c00u && (half & 0x3ffu) != 0) continue; /* NaN payloads */
    assert_int_equal(kolo_float_to_half(kolo_half_to_float(half)), half);
  }
}

static void half_conversion_rounds_to_nearest_even(void **state) {
  (void)state;
  assert_true(kolo_half_to_float(kolo_float_to_half(1.0f)) == 1.0f);
  /* 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to even (1.0) */
  assert_int_equal(kolo_float_to_half(1.0f + 0x1p-11f), 0x3c00);
  /* 1 + 3 * 2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even) */
  assert_int_equal(kolo_float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  assert_int_equal(kolo_float_to_half(65520.0f), 0x7c00); /* overflow to infinity */
  assert_int_equal(kolo_float_to_half(0x1p-24f), 0x0001); /* smallest subnormal */
  assert_int_equal(kolo_float_to_half(0x1p-26f), 0x0000);
  assert_true(isnan(kolo_half_to_float(kolo_float_to_half(NAN))));
  assert_true(isinf(kolo_half_to_float(kolo_float_to_half(-INFINITY))));
}

static void bfloat16_conversion_rounds_to_nearest_even(void **state) {
  (void)state;
  assert_int_equal(kolo_float_to_bfloat16(1.0f), 0x3f80);
  assert_int_equal(kolo_float_to_bfloat16(1.0f + 0x1p-8f), 0x3f80);     /* tie -> even */
  assert_int_equal(kolo_float_to_bfloat16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even */
  assert_true(kolo_bfloat16_to_float(kolo_float_to_bfloat16(-2.5f)) == -2.5f);
  assert_true(isnan(kolo_bfloat16_to_float(kolo_float_to_bfloat16(NAN))));
}

static void reduce_computes_every_op_on_int32(void **state) {
  (void)state;
  int32_t a[3] = {1, -5, 7}, b[3] = {4, 2, -7}, out[3];
  kolo_reduce(out, a, b, 3, KOLO_INT32, KOLO_SUM);
  assert_int_equal(out[0], 5);
  assert_int_equal(out[2], 0);
  kolo_reduce(out, a, b, 3, KOLO_INT32, KOLO_PROD);
  assert_int_equal(out[1], -10);
  kolo_reduce(out, a, b, 3, KOLO_INT32, KOLO_MIN);
  assert_int_equal(out[0], 1);
  assert_int_equal(out[2], -7);
  kolo_reduce(out, a, b, 3, KOLO_INT32, KOLO_MAX);
  assert_int_equal(out[1], 2);
}

static void reduce_of_float16_works_in_float32(void **state) {
  (void)state;
  uint16_t a[2] = {kolo_float_to_half(1.5f), kolo_float_to_half(-2.0f)};
  uint16_t b[2] = {kolo_float_to_half(0.25f), kolo_float_to_half(3.0f)};
  kolo_reduce(a, a, b, 2, KOLO_FLOAT16, KOLO_SUM);
  assert_true(kolo_half_to_float(a[0]) == 1.75f);
  assert_true(kolo_half_to_float(a[1]) == 1.0f);
}

/* The float16 reduction (vectorised with F16C where the CPU has it) gives, for
 * every op, exactly what converting to float, combining and rounding back gives,
 * specials and a tail that is not a multiple of 8 included. */
static void float16_reduction_matches_the_scalar_definition(void **state) {
  (void)state;
  enum { COUNT = 4099 };
  static uint16_t x[COUNT], y[COUNT], out[COUNT];
  uint32_t seed = 12345;
  for (int i = 0; i < COUNT; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (uint16_t)(seed >> 8);
    seed = seed * 1103515245u + 12345u;
    y[i] = (uint16_t)(seed >> 8);
  }
  x[0] = 0x7c00; /* inf */
  y[1] = 0x0001; /* smallest subnormal */
  x[2] = 0x8000; /* -0 */
  for (int op = 0; op < KOLO_OP_COUNT; op++) {
    kolo_reduce(out, x, y, COUNT, KOLO_FLOAT16, (kolo_op)op);
    for (int i = 0; i < COUNT; i++) {
      float l = kolo_half_to_float(x[i]), r = kolo_half_to_float(y[i]), v;
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
      uint16_t want = kolo_float_to_half(v);
      int both_nan = isnan(v) && isnan(kolo_half_to_float(out[i]));
      if (!both_nan && out[i] != want) {
        fail_msg("op %d element %d: %04x (+) %04x = %04x, want %04x", op, i, x[i], y[i], out[i],
                 want);
      }
    }
  }
}

static void integer_sums_wrap_instead_of_overflowing(void **state) {
  (void)state;
  int64_t a = INT64_MAX, b = 1, out;
  kolo_reduce(&out, &a, &b, 1, KOLO_INT64, KOLO_SUM);
  assert_true(out == INT64_MIN);
  uint8_t x = 200, y = 100, z;
  kolo_reduce(&z, &x, &y, 1, KOLO_UINT8, KOLO_SUM);
  assert_int_equal(z, 44);
}

static void divide_averages_each_type(void **state) {
  (void)state;
  double d[2] = {3.0, -9.0};
  kolo_divide(d, 2, KOLO_FLOAT64, 3);
  assert_true(d[0] == 1.0 && d[1] == -3.0);
  int32_t i[2] = {7, -7};
  kolo_divide(i, 2, KOLO_INT32, 2);
  assert_int_equal(i[0], 3);
  assert_int_equal(i[1], -3);
}

/* bool is logic (sum, avg, max = any; min, prod = all); int8 and int16 reduce
 * and divide like the other signed integers (wrapping, truncating division). */
static void int8_int16_and_bool_reduce_as_their_types(void **state) {
  (void)state;
  uint8_t a[4] = {0, 1, 0, 1}, b[4] = {0, 0, 1, 1}, out[4];
  const kolo_op any_ops[] = {KOLO_SUM, KOLO_AVG, KOLO_MAX}, all_ops[] = {KOLO_MIN, KOLO_PROD};
  for (size_t k = 0; k < 3; k++) {
    kolo_reduce(out, a, b, 4, KOLO_BOOL, any_ops[k]);
    assert_true(out[0] == 0 && out[1] == 1 && out[2] == 1 && out[3] == 1);
  }
  for (size_t k = 0; k < 2; k++) {
    kolo_reduce(out, a, b, 4, KOLO_BOOL, all_ops[k]);
    assert_true(out[0] == 0 && out[1] == 0 && out[2] == 0 && out[3] == 1);
  }
  int8_t x[3] = {100, -7, -128}, y[3] = {100, 3, 1};
  int8_t r8[3];
  kolo_reduce(r8, x, y, 3, KOLO_INT8, KOLO_SUM);
  assert_true(r8[0] == (int8_t)-56 && r8[1] == -4 && r8[2] == -127);
  kolo_reduce(r8, x, y, 3, KOLO_INT8, KOLO_MIN);
  assert_true(r8[0] == 100 && r8[1] == -7 && r8[2] == -128);
  int8_t d8[2] = {7, -7};
  kolo_divide(d8, 2, KOLO_INT8, 2);
  assert_true(d8[0] == 3 && d8[1] == -3);
  int16_t p[2] = {300, -2}, q[2] = {-200, 1000}, r16[2];
  kolo_reduce(r16, p, q, 2, KOLO_INT16, KOLO_PROD);
  assert_true(r16[0] == (int16_t)(300 * -200) && r16[1] == -2000);
  kolo_reduce(r16, p, q, 2, KOLO_INT16, KOLO_MAX);
  assert_true(r16[0] == 300 && r16[1] == 1000);
  int16_t lowest;
  kolo_fill_identity(&lowest, 1, KOLO_INT16, KOLO_MAX);
  assert_int_equal(lowest, INT16_MIN);
  uint8_t truth;
  kolo_fill_identity(&truth, 1, KOLO_BOOL, KOLO_MIN);
  assert_int_equal(truth, 1);
  assert_int_equal(kolo_dtype_size(KOLO_INT8), 1);
  assert_int_equal(kolo_dtype_size(KOLO_INT16), 2);
  assert_int_equal(kolo_dtype_size(KOLO_BOOL), 1);
  assert_string_equal(kolo_dtype_name(KOLO_BOOL), "bool");
  assert_string_equal(kolo_dtype_name(KOLO_INT16), "int16");
}

static void dtype_and_op_names_are_known(void **state) {
  (void)state;
  assert_string_equal(kolo_dtype_name(KOLO_BFLOAT16), "bfloat16");
  assert_int_equal(kolo_dtype_size(KOLO_FLOAT64), 8);
  assert_int_equal(kolo_dtype_size((kolo_dtype)99), 0);
  assert_string_equal(kolo_op_name(KOLO_AVG), "avg");
  assert_string_equal(kolo_op_name((kolo_op)99), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(half_round_trips_every_finite_value),
      cmocka_unit_test(half_conversion_rounds_to_nearest_even),
      cmocka_unit_test(bfloat16_conversion_rounds_to_nearest_even),
      cmocka_unit_test(reduce_computes_every_op_on_int32),
      cmocka_unit_test(int8_int16_and_bool_reduce_as_their_types),
      cmocka_unit_test(reduce_of_float16_works_in_float32),
      cmocka_unit_test(float16_reduction_matches_the_scalar_definition),
      cmocka_unit_test(integer_sums_wrap_instead_of_overflowing),
      cmocka_unit_test(divide_averages_each_type),
      cmocka_unit_test(dtype_and_op_names_are_known),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
