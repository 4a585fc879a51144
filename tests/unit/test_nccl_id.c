/* Unit tests for collective/nccl/nccl_id.c: the NCCL unique id's text form in
 * the ring spec round-trips exactly, and malformed text is refused without
 * touching the output. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kolo_nccl.h"

static void fill(uint8_t id[KOLO_NCCL_ID_BYTES], unsigned seed) {
  for (size_t i = 0; i < KOLO_NCCL_ID_BYTES; i++) id[i] = (uint8_t)(i * 37u + seed * 101u);
}

static void an_id_round_trips_through_its_text(void **state) {
  (void)state;
  for (unsigned seed = 0; seed < 8; seed++) {
    uint8_t id[KOLO_NCCL_ID_BYTES], back[KOLO_NCCL_ID_BYTES];
    char text[KOLO_NCCL_ID_TEXT_LENGTH + 1];
    fill(id, seed);
    assert_int_equal(kolo_nccl_id_encode(id, text, sizeof text), KOLO_OK);
    assert_int_equal(strlen(text), KOLO_NCCL_ID_TEXT_LENGTH);
    memset(back, 0xee, sizeof back);
    assert_int_equal(kolo_nccl_id_decode(text, back), KOLO_OK);
    assert_memory_equal(id, back, KOLO_NCCL_ID_BYTES);
  }
}

static void the_text_is_lowercase_hex_in_byte_order(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES] = {0};
  id[0] = 0x00;
  id[1] = 0xab;
  id[2] = 0xff;
  id[127] = 0x1f;
  char text[KOLO_NCCL_ID_TEXT_LENGTH + 1];
  assert_int_equal(kolo_nccl_id_encode(id, text, sizeof text), KOLO_OK);
  assert_memory_equal(text, "00abff00", 8);
  assert_string_equal(text + KOLO_NCCL_ID_TEXT_LENGTH - 2, "1f");
}

static void uppercase_hex_is_accepted(void **state) {
  (void)state;
  char text[KOLO_NCCL_ID_TEXT_LENGTH + 1];
  memset(text, 'A', KOLO_NCCL_ID_TEXT_LENGTH);
  text[KOLO_NCCL_ID_TEXT_LENGTH] = '\0';
  uint8_t id[KOLO_NCCL_ID_BYTES];
  assert_int_equal(kolo_nccl_id_decode(text, id), KOLO_OK);
  assert_int_equal(id[0], 0xaa);
  assert_int_equal(id[KOLO_NCCL_ID_BYTES - 1], 0xaa);
}

static void encoding_into_a_short_buffer_is_refused(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  fill(id, 1);
  char text[KOLO_NCCL_ID_TEXT_LENGTH]; /* one short: no room for the NUL */
  assert_int_equal(kolo_nccl_id_encode(id, text, sizeof text), KOLO_ERR_TOO_LARGE);
  assert_int_equal(kolo_nccl_id_encode(NULL, text, sizeof text), KOLO_ERR_INVALID_ARG);
}

/* Decodes bad text and checks it is refused with the output left as it was. */
static void assert_refused(const char *text) {
  uint8_t id[KOLO_NCCL_ID_BYTES];
  memset(id, 0x5a, sizeof id);
  assert_int_equal(kolo_nccl_id_decode(text, id), KOLO_ERR_PARSE);
  for (size_t i = 0; i < sizeof id; i++) assert_int_equal(id[i], 0x5a);
}

static void text_of_the_wrong_length_is_refused(void **state) {
  (void)state;
  char text[2 * KOLO_NCCL_ID_TEXT_LENGTH + 2];
  assert_refused("");
  memset(text, '0', sizeof text);
  text[KOLO_NCCL_ID_TEXT_LENGTH - 1] = '\0';
  assert_refused(text); /* one digit short */
  memset(text, '0', sizeof text);
  text[KOLO_NCCL_ID_TEXT_LENGTH + 1] = '\0';
  assert_refused(text); /* one digit long */
  memset(text, '0', sizeof text);
  text[sizeof text - 1] = '\0';
  assert_refused(text); /* twice as long */
}

static void non_hex_characters_are_refused_anywhere(void **state) {
  (void)state;
  const char bad[] = {'g', 'G', ' ', '\n', '-', 'x', '"', '=', (char)0xc3};
  const size_t where[] = {0, 1, 127, KOLO_NCCL_ID_TEXT_LENGTH - 1};
  for (size_t b = 0; b < sizeof bad; b++) {
    for (size_t w = 0; w < sizeof where / sizeof where[0]; w++) {
      char text[KOLO_NCCL_ID_TEXT_LENGTH + 1];
      memset(text, 'f', KOLO_NCCL_ID_TEXT_LENGTH);
      text[KOLO_NCCL_ID_TEXT_LENGTH] = '\0';
      text[where[w]] = bad[b];
      assert_refused(text);
    }
  }
}

static void a_prefixed_or_padded_id_is_refused(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  fill(id, 3);
  char text[KOLO_NCCL_ID_TEXT_LENGTH + 1];
  assert_int_equal(kolo_nccl_id_encode(id, text, sizeof text), KOLO_OK);
  char longer[KOLO_NCCL_ID_TEXT_LENGTH + 4];
  snprintf(longer, sizeof longer, "0x%s", text);
  assert_refused(longer);
  snprintf(longer, sizeof longer, " %s", text);
  assert_refused(longer);
  snprintf(longer, sizeof longer, "%s\n", text);
  assert_refused(longer);
}

static void null_arguments_are_refused(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  assert_int_equal(kolo_nccl_id_decode(NULL, id), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_id_decode("00", NULL), KOLO_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_id_round_trips_through_its_text),
      cmocka_unit_test(the_text_is_lowercase_hex_in_byte_order),
      cmocka_unit_test(uppercase_hex_is_accepted),
      cmocka_unit_test(encoding_into_a_short_buffer_is_refused),
      cmocka_unit_test(text_of_the_wrong_length_is_refused),
      cmocka_unit_test(non_hex_characters_are_refused_anywhere),
      cmocka_unit_test(a_prefixed_or_padded_id_is_refused),
      cmocka_unit_test(null_arguments_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
