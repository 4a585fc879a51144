/* The ring's wire records as pure functions (collective/net/handshake.c, net/fault.c):
 * a hello round-trips and is judged against the ring; an ack whose verdict is
 * no kolo status is a protocol error (it was passed on as a made-up status); a
 * control message is classified by its fields, and a failure naming an unknown
 * status or a rank outside the ring is garbage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "collective/net/net.h"

static kolo_hello ring_hello(void) {
  kolo_hello h = {.kind = KOLO_CONNECTION_BELL,
                  .epoch = 9,
                  .rank = 1,
                  .size = 3,
                  .nonce = 0x0102030405060708ull};
  h.secret_length = 6;
  memcpy(h.secret, "s3cret", 6);
  h.name_length = 3;
  memcpy(h.offer_name, "shm", 4);
  return h;
}

static void a_hello_round_trips_and_is_judged_against_the_ring(void **state) {
  (void)state;
  kolo_hello h = ring_hello(), back;
  uint8_t bytes[KOLO_HELLO_MAX_BYTES];
  size_t length = kolo_hello_encode(&h, bytes), used = 0;
  assert_int_equal(length, KOLO_HELLO_HEADER_BYTES + 6 + KOLO_HELLO_OFFER_BYTES + 3);
  assert_int_equal(kolo_hello_decode(bytes, length, &back, &used), KOLO_OK);
  assert_int_equal(used, length);
  assert_string_equal(back.offer_name, "shm");
  assert_true(back.nonce == h.nonce && back.epoch == 9 && back.rank == 1 && back.size == 3);
  assert_int_equal(kolo_hello_judge(&back, "s3cret", 9, 3, 1), KOLO_OK);
  assert_int_equal(kolo_hello_judge(&back, "s3creT", 9, 3, 1), KOLO_ERR_AUTH);
  assert_int_equal(kolo_hello_judge(&back, "s3cret", 8, 3, 1), KOLO_ERR_STALE_EPOCH);
  /* a neighbour at another epoch has that epoch's secret: stale, not a stranger */
  assert_int_equal(kolo_hello_judge(&back, "other-epoch-secret", 8, 3, 1), KOLO_ERR_STALE_EPOCH);
  assert_int_equal(kolo_hello_judge(&back, "s3cret", 9, 3, 2), KOLO_ERR_PROTOCOL);
  assert_int_equal(kolo_hello_decode(bytes, length - 1, &back, &used), KOLO_ERR_PROTOCOL);
  bytes[5] = 9; /* another protocol version */
  assert_int_equal(kolo_hello_decode(bytes, length, &back, &used), KOLO_ERR_PROTOCOL);
}

static void an_ack_with_a_made_up_verdict_is_a_protocol_error(void **state) {
  (void)state;
  uint8_t ack[KOLO_ACK_BYTES];
  int taken = -1;
  kolo_ack_encode(ack, KOLO_ERR_AUTH, 0);
  assert_int_equal(kolo_ack_decode(ack, &taken), KOLO_ERR_AUTH);
  assert_int_equal(taken, 0);
  kolo_ack_encode(ack, KOLO_OK, 1);
  assert_int_equal(kolo_ack_decode(ack, &taken), KOLO_OK);
  assert_int_equal(taken, 1);
  kolo_ack_encode(ack, (kolo_status)12345, 1);
  assert_int_equal(kolo_ack_decode(ack, &taken), KOLO_ERR_PROTOCOL);
  ack[0] ^= 1;
  assert_int_equal(kolo_ack_decode(ack, &taken), KOLO_ERR_PROTOCOL);
}

static void control_messages_are_classified_by_their_fields(void **state) {
  (void)state;
  kolo_control_message beat = {KOLO_BEAT_MAGIC, 0, 0, 0};
  kolo_control_message frame = {KOLO_NEGO_MAGIC, 64, 3, 1};
  kolo_control_message huge = {KOLO_NEGO_MAGIC, (int32_t)(KOLO_NEGO_MAX_FRAME + 1), 3, 1};
  kolo_control_message bye = {KOLO_CONTROL_MAGIC, KOLO_OK, 0, 0};
  kolo_control_message lost = {KOLO_CONTROL_MAGIC, KOLO_ERR_PEER_LOST, 2, 0};
  kolo_control_message made_up = {KOLO_CONTROL_MAGIC, 9999, 2, 0};
  kolo_control_message far = {KOLO_CONTROL_MAGIC, KOLO_ERR_PEER_LOST, 3, 0};
  kolo_control_message origin = {KOLO_CONTROL_MAGIC, KOLO_ERR_PEER_LOST, -1, -1};
  kolo_control_message junk = {0x41414141, 0, 0, 0};
  assert_int_equal(kolo_control_classify(&beat, 0, 3), KOLO_CONTROL_BEAT);
  assert_int_equal(kolo_control_classify(&frame, 1, 3), KOLO_CONTROL_FRAME);
  assert_int_equal(kolo_control_classify(&frame, 0, 3),
                   KOLO_CONTROL_GARBAGE); /* frames only from prev */
  assert_int_equal(kolo_control_classify(&huge, 1, 3), KOLO_CONTROL_GARBAGE);
  assert_int_equal(kolo_control_classify(&bye, 0, 3), KOLO_CONTROL_GOODBYE);
  assert_int_equal(kolo_control_classify(&lost, 0, 3), KOLO_CONTROL_FAILURE);
  assert_int_equal(kolo_control_classify(&made_up, 0, 3), KOLO_CONTROL_GARBAGE);
  assert_int_equal(kolo_control_classify(&far, 0, 3), KOLO_CONTROL_GARBAGE);
  assert_int_equal(kolo_control_classify(&origin, 0, 3), KOLO_CONTROL_GARBAGE);
  assert_int_equal(kolo_control_classify(&junk, 1, 3), KOLO_CONTROL_GARBAGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_hello_round_trips_and_is_judged_against_the_ring),
      cmocka_unit_test(an_ack_with_a_made_up_verdict_is_a_protocol_error),
      cmocka_unit_test(control_messages_are_classified_by_their_fields),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
