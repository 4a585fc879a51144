/* common/sha256.c against published vectors: FIPS 180-4's examples (and a million 'a's)
 * and RFC 4231's HMAC-SHA-256 test cases 1, 2 and 6 (a key longer than a block). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/sha256.h"

static void hex(const uint8_t *d, char *out) {
  for (int i = 0; i < KOLO_SHA256_BYTES; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void digest_is(const void *data, size_t length, const char *want) {
  kolo_sha256 h;
  uint8_t d[KOLO_SHA256_BYTES];
  char text[65];
  kolo_sha256_init(&h);
  kolo_sha256_update(&h, data, length);
  kolo_sha256_final(&h, d);
  hex(d, text);
  assert_string_equal(text, want);
}

static void sha256_matches_the_fips_examples(void **state) {
  (void)state;
  digest_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  digest_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  digest_is(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  static char million[1000000];
  memset(million, 'a', sizeof million);
  digest_is(million, sizeof million,
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void hmac(const void *key, size_t key_length, const char *data, const char *want) {
  uint8_t d[KOLO_SHA256_BYTES];
  char text[65];
  size_t half = strlen(data) / 2; /* in two parts: the parts are concatenated */
  const void *parts[2] = {data, data + half};
  size_t lengths[2] = {half, strlen(data) - half};
  kolo_hmac_sha256(key, key_length, parts, lengths, 2, d);
  hex(d, text);
  assert_string_equal(text, want);
}

static void hmac_matches_rfc_4231(void **state) {
  (void)state;
  uint8_t key1[20], key6[131];
  memset(key1, 0x0b, sizeof key1);
  memset(key6, 0xaa, sizeof key6);
  hmac(key1, sizeof key1, "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  hmac("Jefe", 4, "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  hmac(key6, sizeof key6, "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void equal_bytes_are_told_apart_from_unequal(void **state) {
  (void)state;
  uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  assert_true(kolo_bytes_equal(a, a, 4));
  assert_false(kolo_bytes_equal(a, b, 4));
  assert_true(kolo_bytes_equal(a, b, 3));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sha256_matches_the_fips_examples),
      cmocka_unit_test(hmac_matches_rfc_4231),
      cmocka_unit_test(equal_bytes_are_told_apart_from_unequal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
