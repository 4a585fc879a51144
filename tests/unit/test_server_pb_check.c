/* Unit tests for server/pb_check.c: strings with a NUL byte or bytes that are not UTF-8
 * are refused on the wire, naming the field (nested messages, repeated fields and map
 * entries too); wire formats that do not parse are refused; good messages pass. The
 * messages are written byte by byte here, as an attacker would, since protobuf-c itself
 * would never pack such strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kolo/v1/job.pb-c.h"
#include "server/pb_check.h"

typedef struct wire {
  uint8_t b[1024];
  size_t n;
} wire;

static void put_varint(wire *w, uint64_t v) {
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    w->b[w->n++] = (uint8_t)(byte | (v ? 0x80 : 0));
  } while (v);
}

/* A length-delimited field: tag (number, wire type 2), length, bytes. */
static void put_bytes(wire *w, uint32_t number, const void *data, size_t len) {
  put_varint(w, (uint64_t)number << 3 | 2);
  put_varint(w, len);
  memcpy(w->b + w->n, data, len);
  w->n += len;
}

static void put_uint(wire *w, uint32_t number, uint64_t v) {
  put_varint(w, (uint64_t)number << 3);
  put_varint(w, v);
}

static void put_message(wire *w, uint32_t number, const wire *sub) {
  put_bytes(w, number, sub->b, sub->n);
}

/* A map<string,string> entry: key = 1, value = 2. */
static void put_entry(wire *w, uint32_t number, const char *key, size_t key_len, const char *value,
                      size_t value_len) {
  wire e = {{0}, 0};
  put_bytes(&e, 1, key, key_len);
  put_bytes(&e, 2, value, value_len);
  put_message(w, number, &e);
}

static kolo_status check_spec(const wire *w, char *err, size_t len) {
  return kolo_server_pb_check(&kolo__v1__job_spec__descriptor, w->b, w->n, err, len);
}

/* name = "demo", min_workers = 1, builtin {model "mlp", epochs 1} */
static void good_spec(wire *w) {
  w->n = 0;
  put_bytes(w, 1, "demo", 4);
  put_uint(w, 4, 1);
  wire b = {{0}, 0};
  put_bytes(&b, 1, "mlp", 3);
  put_uint(&b, 4, 1);
  put_message(w, 6, &b);
}

static void a_well_formed_spec_passes_and_unpacks(void **state) {
  (void)state;
  wire w;
  good_spec(&w);
  const char *fancy = "\xc3\xa9quipe \xe2\x82\xac \xf0\x9f\x98\x80"; /* é € emoji */
  put_entry(&w, 11, "team", 4, fancy, strlen(fancy));
  char err[256];
  assert_int_equal(check_spec(&w, err, sizeof err), KOLO_OK);
  Kolo__V1__JobSpec *spec = kolo__v1__job_spec__unpack(NULL, w.n, w.b);
  assert_non_null(spec);
  assert_string_equal(spec->builtin->model, "mlp");
  kolo__v1__job_spec__free_unpacked(spec, NULL);
}

static void a_nul_byte_in_a_string_is_refused_naming_the_field(void **state) {
  (void)state;
  wire w;
  good_spec(&w);
  put_bytes(&w, 2, "a\0b", 3); /* id */
  char err[256];
  assert_int_equal(check_spec(&w, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "id: contains a NUL byte");
  /* in a request too: CancelJobRequest.id */
  wire c = {{0}, 0};
  put_bytes(&c, 1, "a\0x", 3);
  assert_int_equal(
      kolo_server_pb_check(&kolo__v1__cancel_job_request__descriptor, c.b, c.n, err, sizeof err),
      KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "id: contains a NUL byte");
}

static void invalid_utf8_is_refused_naming_the_field_at_any_depth(void **state) {
  (void)state;
  char err[256];
  wire w;
  good_spec(&w);
  put_bytes(&w, 10, "/tmp/\xff", 6); /* checkpoint_dir */
  assert_int_equal(check_spec(&w, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "checkpoint_dir: not valid UTF-8");

  good_spec(&w);
  put_entry(&w, 11, "team", 4, "\xe2\x82", 2); /* labels value cut mid-character */
  assert_int_equal(check_spec(&w, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "labels.team: not valid UTF-8");

  good_spec(&w);
  put_entry(&w, 11, "t\xc0\xafm", 4, "v", 1); /* an overlong '/' in a key */
  assert_int_equal(check_spec(&w, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "labels: a key not valid UTF-8");

  /* builtin.hyper_parameters.<key> inside the oneof member */
  w.n = 0;
  put_bytes(&w, 1, "demo", 4);
  wire b = {{0}, 0};
  put_bytes(&b, 1, "mlp", 3);
  put_entry(&b, 7, "hidden", 6, "\xed\xa0\x80", 3); /* a UTF-16 surrogate */
  put_message(&w, 6, &b);
  assert_int_equal(check_spec(&w, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "builtin.hyper_parameters.hidden: not valid UTF-8");

  /* a repeated string names its index: exec.argv[1] */
  w.n = 0;
  wire x = {{0}, 0};
  put_bytes(&x, 1, "/bin/train", 10);
  put_bytes(&x, 1, "--x\0y", 5);
  put_message(&w, 7, &x);
  assert_int_equal(check_spec(&w, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_string_equal(err, "exec.argv[1]: contains a NUL byte");
}

static void wire_formats_that_do_not_parse_are_refused(void **state) {
  (void)state;
  char err[256];
  const uint8_t truncated_varint[] = {0x20, 0xff};      /* min_workers, varint never ends */
  const uint8_t truncated_length[] = {0x0a, 0x05, 'a'}; /* name of 5 bytes, 1 given */
  const uint8_t group[] = {0x0b};                       /* field 1, wire type 3 */
  const uint8_t field_zero[] = {0x02, 0x00};            /* field number 0 */
  const uint8_t *cases[] = {truncated_varint, truncated_length, group, field_zero};
  size_t lens[] = {sizeof truncated_varint, sizeof truncated_length, sizeof group,
                   sizeof field_zero};
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(
        kolo_server_pb_check(&kolo__v1__job_spec__descriptor, cases[i], lens[i], err, sizeof err),
        KOLO_ERR_INVALID_ARG);
  /* unknown fields are skipped, as protobuf does */
  wire w;
  good_spec(&w);
  put_bytes(&w, 99, "\xff\x00", 2);
  assert_int_equal(check_spec(&w, err, sizeof err), KOLO_OK);
  assert_int_equal(kolo_server_pb_check(&kolo__v1__job_spec__descriptor, NULL, 0, err, sizeof err),
                   KOLO_OK);
}

static void the_utf8_check_follows_the_standard(void **state) {
  (void)state;
  assert_true(kolo_server_utf8_valid("", 0));
  assert_true(kolo_server_utf8_valid("plain ascii", 11));
  assert_true(kolo_server_utf8_valid("\xc2\x80", 2));          /* U+0080 */
  assert_true(kolo_server_utf8_valid("\xef\xbf\xbf", 3));      /* U+FFFF */
  assert_true(kolo_server_utf8_valid("\xf4\x8f\xbf\xbf", 4));  /* U+10FFFF */
  assert_false(kolo_server_utf8_valid("\x80", 1));             /* a lone continuation */
  assert_false(kolo_server_utf8_valid("\xc0\x80", 2));         /* overlong NUL */
  assert_false(kolo_server_utf8_valid("\xe0\x80\xaf", 3));     /* overlong '/' */
  assert_false(kolo_server_utf8_valid("\xed\xbf\xbf", 3));     /* surrogate */
  assert_false(kolo_server_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
  assert_false(kolo_server_utf8_valid("\xf8\x88\x80\x80\x80", 5));
  assert_false(kolo_server_utf8_valid("\xe2\x82", 2)); /* truncated */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_well_formed_spec_passes_and_unpacks),
      cmocka_unit_test(a_nul_byte_in_a_string_is_refused_naming_the_field),
      cmocka_unit_test(invalid_utf8_is_refused_naming_the_field_at_any_depth),
      cmocka_unit_test(wire_formats_that_do_not_parse_are_refused),
      cmocka_unit_test(the_utf8_check_follows_the_standard),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
