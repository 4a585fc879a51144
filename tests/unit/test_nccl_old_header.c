/* Build test for NCCL 2.14-2.23 (issue: kolo_nccl, plain C, did not compile
 * there because nccl.h declares ncclBfloat16 only for C++): nccl_map.c is
 * compiled in this test against a stand-in of that header
 * (tests/unit/nccl_before_2_24/nccl.h) and must still map bfloat16 to NCCL's
 * value 9. Linked against the real libnccl, whose ABI is the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "nccl_internal.h"

static void the_stand_in_header_has_no_bfloat16_in_c(void **state) {
  (void)state;
  assert_int_equal(NCCL_VERSION_CODE, 22304);
  assert_int_equal((int)ncclNumTypes, 9); /* the C view of 2.23's enum */
}

static void bfloat16_still_maps_to_ncclbfloat16s_value(void **state) {
  (void)state;
  ncclDataType_t t = ncclFloat32;
  assert_int_equal(kolo_nccl_dtype_to_nccl(KOLO_BFLOAT16, &t), KOLO_OK);
  assert_int_equal((int)t, 9);
  assert_int_equal(kolo_nccl_dtype_to_nccl(KOLO_FLOAT16, &t), KOLO_OK);
  assert_int_equal((int)t, (int)ncclFloat16);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_stand_in_header_has_no_bfloat16_in_c),
      cmocka_unit_test(bfloat16_still_maps_to_ncclbfloat16s_value),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
