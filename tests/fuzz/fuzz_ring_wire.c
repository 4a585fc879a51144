/* libFuzzer target: the ring's wire records from a peer (collective/net/handshake.c,
 * net/fault.c): a connection's hello as the acceptor reads it, its ack as the
 * connector reads it, and 16-byte control-link messages. First byte: which.
 * Properties: no crash or leak; a hello that decodes re-encodes to exactly the
 * bytes it was read from; the verdict on it (before any proof of the secret) is OK only
 * for a nonce of the protocol's length, the ring's own epoch, size, the expected rank and a
 * known connection kind, and a hello made
 * from the ring's own fields is always OK; an ack decodes to a known status and
 * an encoded verdict reads back; a control message's class follows its fields
 * (a frame only from the previous rank and within the frame limit, a failure
 * only with a known status and ranks of the ring). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/net/net.h"

#define RING_EPOCH 7u

static void check(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "ring wire property failed: %s\n", what);
  abort();
}

static int known_status(int32_t value) {
  return strcmp(kolo_status_name((kolo_status)value), "KOLO_ERR_UNKNOWN") != 0;
}

static void fuzz_hello(const uint8_t *data, size_t size, int expected_rank, int ring_size) {
  static uint8_t bytes[KOLO_HELLO_MAX_BYTES];
  kolo_hello hello;
  size_t used = 0;
  if (kolo_hello_decode(data, size, &hello, &used) != KOLO_OK) return;
  check(used <= size && used == kolo_hello_encode(&hello, bytes),
        "a hello's length is what it encodes to");
  check(memcmp(bytes, data, used) == 0, "a decoded hello re-encodes to its bytes");
  check(strlen(hello.offer_name) <= hello.name_length, "the offer name is within its length");
  kolo_status verdict = kolo_hello_judge(&hello, RING_EPOCH, ring_size, expected_rank);
  int fits = hello.secret_length == KOLO_HANDSHAKE_NONCE_BYTES && hello.epoch == RING_EPOCH &&
             hello.size == ring_size && hello.rank == expected_rank &&
             (hello.kind == KOLO_CONNECTION_DATA || hello.kind == KOLO_CONNECTION_CONTROL ||
              hello.kind == KOLO_CONNECTION_BELL || hello.kind == KOLO_CONNECTION_MESH);
  check((verdict == KOLO_OK) == fits, "a hello is accepted exactly when it fits the ring");
  if (hello.epoch != RING_EPOCH)
    check(verdict == KOLO_ERR_STALE_EPOCH, "another epoch is refused as stale");
  /* the ring's own hello, with the input's kind and offer, is accepted */
  kolo_hello mine = hello;
  mine.secret_length = KOLO_HANDSHAKE_NONCE_BYTES;
  memset(mine.secret, 7, KOLO_HANDSHAKE_NONCE_BYTES);
  mine.epoch = RING_EPOCH;
  mine.rank = expected_rank;
  mine.size = ring_size;
  mine.kind = KOLO_CONNECTION_CONTROL;
  size_t length = kolo_hello_encode(&mine, bytes);
  kolo_hello back;
  check(kolo_hello_decode(bytes, length, &back, &used) == KOLO_OK && used == length,
        "an encoded hello decodes");
  check(kolo_hello_judge(&back, RING_EPOCH, ring_size, expected_rank) == KOLO_OK,
        "the ring's own hello is accepted");
  /* cut short anywhere, it is refused */
  if (length > 0)
    check(kolo_hello_decode(bytes, length - 1, &back, &used) != KOLO_OK,
          "a short hello is refused");
}

static void fuzz_ack(const uint8_t *data, size_t size) {
  if (size < KOLO_ACK_BYTES) return;
  int taken = -1;
  kolo_status verdict = kolo_ack_decode(data, &taken);
  check(known_status((int32_t)verdict), "an ack's verdict is a known status");
  uint8_t ack[KOLO_ACK_BYTES];
  kolo_ack_encode(ack, verdict, taken == 1);
  int again = -1;
  check(kolo_ack_decode(ack, &again) == verdict, "an encoded verdict reads back");
  if (taken != -1) check(again == taken, "bulk taken reads back");
}

static void fuzz_control(const uint8_t *data, size_t size, int ring_size) {
  for (size_t at = 0; at + sizeof(kolo_control_message) <= size;
       at += sizeof(kolo_control_message)) {
    kolo_control_message m;
    memcpy(&m, data + at, sizeof m);
    for (int from_prev = 0; from_prev < 2; from_prev++) {
      kolo_control_kind kind = kolo_control_classify(&m, from_prev, ring_size);
      switch (kind) {
        case KOLO_CONTROL_BEAT:
          check(m.magic == KOLO_BEAT_MAGIC, "a beat has the beat magic");
          break;
        case KOLO_CONTROL_FRAME:
          check(
              from_prev && m.magic == KOLO_NEGO_MAGIC && (uint32_t)m.status <= KOLO_NEGO_MAX_FRAME,
              "a frame comes from the previous rank within the limit");
          break;
        case KOLO_CONTROL_GOODBYE:
          check(m.magic == KOLO_CONTROL_MAGIC && m.status == 0, "a goodbye is status OK");
          break;
        case KOLO_CONTROL_FAILURE:
          check(m.magic == KOLO_CONTROL_MAGIC && m.status != 0 && known_status(m.status) &&
                    m.failed_rank >= -1 && m.failed_rank < ring_size && m.origin_rank >= 0 &&
                    m.origin_rank < ring_size,
                "a failure names a known status and ranks of the ring");
          break;
        default:
          check(kind == KOLO_CONTROL_GARBAGE, "every message has a class");
          check(m.magic != KOLO_BEAT_MAGIC, "a beat is never garbage");
          break;
      }
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int ring_size = 1 + data[1] % 8, expected_rank = data[1] / 8 % ring_size;
  switch (data[0] % 3) {
    case 0:
      fuzz_hello(data + 2, size - 2, expected_rank, ring_size);
      break;
    case 1:
      fuzz_ack(data + 2, size - 2);
      break;
    default:
      fuzz_control(data + 2, size - 2, ring_size);
      break;
  }
  return 0;
}
