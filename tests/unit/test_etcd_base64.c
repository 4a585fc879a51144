/* Unit tests for coordination/base64.c: RFC 4648 vectors, binary round trips,
 * and rejection of everything that is not canonical padded base64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordination/base64.h"

static void encodes_the_rfc4648_vectors(void **state) {
  (void)state;
  const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  const char *coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (size_t i = 0; i < 7; i++) {
    char out[16];
    kolo_base64_encode(plain[i], strlen(plain[i]), out);
    assert_string_equal(out, coded[i]);
    assert_int_equal(kolo_base64_encoded_len(strlen(plain[i])), strlen(coded[i]));
    unsigned char *back = NULL;
    size_t len = 0;
    assert_int_equal(kolo_base64_decode_alloc(coded[i], strlen(coded[i]), &back, &len), KOLO_OK);
    assert_int_equal(len, strlen(plain[i]));
    assert_memory_equal(back, plain[i], len);
    assert_int_equal(back[len], 0);
    free(back);
  }
}

static void round_trips_every_byte_value(void **state) {
  (void)state;
  unsigned char data[300];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 3);
  for (size_t len = 0; len <= sizeof data; len += 37) {
    char *text = NULL;
    assert_int_equal(kolo_base64_encode_alloc(data, len, &text), KOLO_OK);
    unsigned char *back = NULL;
    size_t back_len = 0;
    assert_int_equal(kolo_base64_decode_alloc(text, strlen(text), &back, &back_len), KOLO_OK);
    assert_int_equal(back_len, len);
    assert_memory_equal(back, data, len);
    free(text);
    free(back);
  }
}

static void rejects_text_that_is_not_canonical_base64(void **state) {
  (void)state;
  const char *bad[] = {
      "Zm9", "Zm9v!", "Zm9v Zm9v", "Zg=", "Z===", "=Zm9", "Zm=v", "Zh==", "Zm9=Zm9v", "Zm\n9v"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    unsigned char *out = (unsigned char *)"sentinel";
    size_t len = 99;
    assert_int_equal(kolo_base64_decode_alloc(bad[i], strlen(bad[i]), &out, &len), KOLO_ERR_PARSE);
    assert_null(out);
    assert_int_equal(len, 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(encodes_the_rfc4648_vectors),
      cmocka_unit_test(round_trips_every_byte_value),
      cmocka_unit_test(rejects_text_that_is_not_canonical_base64),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
