/* The transport conformance suite (nng's model): the same cases run against
 * every byte-stream transport in libkolo's table (collective/net/transport.h),
 * TCP and shared memory, over real connections on 127.0.0.1 in this process.
 * What the ring relies on: bytes arrive whole and in order whatever the sizes
 * on either side, a full connection takes part of a send and the rest later, a
 * receive returns what arrived, zero-byte calls move nothing, a peer that
 * vanishes mid-message is reported lost (not waited for), the blocking helpers
 * end at their deadline, and closing the peer wakes a receiver blocked on it.
 * (The fake device serves the NCCL path, which is collective-level and not in
 * this table; its cases are the nccl tests over tests/support/fakegpu.) */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "collective/net/channel.h"
#include "collective/net/transport_shm.h"
#include "common/clock.h"
#include "tests/support/skip.h"

/* One direction of a connection: a writer and the reader at its other end. */
typedef struct pair {
  const kolo_transport_ops *ops;
  kolo_transport_conn *writer, *reader;
} pair;

typedef kolo_status (*pair_maker)(pair *out);

static kolo_status make_tcp(pair *out) {
  const kolo_transport_ops *tcp = &kolo_transport_tcp;
  kolo_transport_listener *listener = NULL;
  char address[128];
  kolo_status status = tcp->listen("127.0.0.1:0", &listener);
  if (status == KOLO_OK) status = tcp->listener_address(listener, address, sizeof address);
  if (status == KOLO_OK) status = tcp->connect(address, kolo_deadline_after_ms(5000), &out->writer);
  if (status == KOLO_OK) status = tcp->accept(listener, kolo_deadline_after_ms(5000), &out->reader);
  tcp->close_listener(listener);
  out->ops = tcp;
  return status;
}

/* A shared-memory ring, as ring formation makes one: the connecting side offers
 * it on a TCP connection (the doorbell), the accepting side takes it. */
static kolo_status make_shm(pair *out) {
  pair bell = {0};
  kolo_shm_offer *offer = NULL;
  kolo_status status = make_tcp(&bell);
  if (status == KOLO_OK) status = kolo_shm_offer_create(&offer);
  if (status == KOLO_OK)
    status = kolo_shm_accept(kolo_shm_offer_name(offer), kolo_shm_offer_nonce(offer), bell.reader,
                             &out->reader);
  if (status == KOLO_OK) {
    bell.reader = NULL; /* the reader side owns it now */
    status = kolo_shm_offer_accepted(offer, bell.writer, &out->writer);
    offer = NULL;
    if (status == KOLO_OK) bell.writer = NULL;
  }
  kolo_shm_offer_destroy(offer);
  kolo_transport_tcp.close(bell.writer);
  kolo_transport_tcp.close(bell.reader);
  out->ops = &kolo_transport_shm;
  return status;
}

static const struct {
  const char *name;
  pair_maker make;
} TRANSPORTS[] = {{"tcp", make_tcp}, {"shm", make_shm}};
#define TRANSPORT_COUNT (int)(sizeof TRANSPORTS / sizeof TRANSPORTS[0])

static pair open_pair(int t) {
  pair p = {0};
  kolo_status status = TRANSPORTS[t].make(&p);
  if (status == KOLO_ERR_UNSUPPORTED) KOLO_TEST_SKIP("%s unavailable here", TRANSPORTS[t].name);
  assert_int_equal(status, KOLO_OK);
  return p;
}

static void close_pair(pair *p) {
  p->ops->close(p->writer);
  p->ops->close(p->reader);
}

static void fill(uint8_t *buffer, size_t length, uint32_t seed) {
  for (size_t i = 0; i < length; i++) buffer[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
}

/* Moves length bytes writer -> reader on this one thread, in send pieces of
 * the sizes in send_sizes (cycled) and receive pieces of recv_sizes, sleeping
 * in poll (after prepare_wait) only when neither side can move. */
static void pump(pair *p, const uint8_t *out, uint8_t *in, size_t length, const size_t *send_sizes,
                 int send_count, const size_t *recv_sizes, int recv_count) {
  size_t sent = 0, received = 0;
  int s = 0, r = 0;
  int64_t deadline = kolo_deadline_after_ms(30000);
  while (received < length) {
    size_t moved_out = 0, moved_in = 0;
    if (sent < length) {
      size_t want = send_sizes[s++ % send_count];
      if (want > length - sent) want = length - sent;
      assert_int_equal(p->ops->send(p->writer, out + sent, want, &moved_out), KOLO_OK);
      assert_true(moved_out <= want);
      sent += moved_out;
    }
    size_t want = recv_sizes[r++ % recv_count];
    if (want > length - received) want = length - received;
    assert_int_equal(p->ops->recv(p->reader, in + received, want, &moved_in), KOLO_OK);
    assert_true(moved_in <= want);
    received += moved_in;
    assert_true(received <= sent);
    if (moved_out == 0 && moved_in == 0 &&
        kolo_channel_prepare_wait(&(kolo_channel){p->ops, p->reader}, 0)) {
      assert_true(kolo_now_ns() < deadline);
    }
  }
}

static void bytes_arrive_whole_and_in_order_whatever_the_piece_sizes(void **state) {
  (void)state;
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    pair p = open_pair(t);
    size_t length = 3 * 1024 * 1024 + 17;
    uint8_t *out = malloc(length), *in = calloc(1, length);
    fill(out, length, 7);
    const size_t send_sizes[] = {1, 7919, 65536, 3, 1 << 20, 4093};
    const size_t recv_sizes[] = {5, 1 << 19, 13, 8191, 100000};
    pump(&p, out, in, length, send_sizes, 6, recv_sizes, 5);
    assert_memory_equal(out, in, length);
    free(out);
    free(in);
    close_pair(&p);
  }
}

static void a_full_connection_takes_part_of_a_send_and_the_rest_later(void **state) {
  (void)state;
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    pair p = open_pair(t);
    size_t length = 64 * 1024 * 1024;
    uint8_t *out = malloc(length), *in = malloc(length);
    fill(out, length, 11);
    /* nobody reads: sends take what fits, then nothing, never an error */
    size_t sent = 0, moved = 1;
    while (moved > 0) {
      assert_int_equal(p.ops->send(p.writer, out + sent, length - sent, &moved), KOLO_OK);
      sent += moved;
    }
    assert_true(sent > 0);
    assert_true(sent < length);
    /* a receive returns what arrived, less than it asked for */
    size_t received = 0;
    int64_t deadline = kolo_deadline_after_ms(10000);
    while (received < sent) {
      assert_int_equal(p.ops->recv(p.reader, in + received, length - received, &moved), KOLO_OK);
      assert_true(received + moved <= sent);
      received += moved;
      assert_true(kolo_now_ns() < deadline);
    }
    assert_memory_equal(out, in, sent);
    /* and the rest goes through once there is room */
    const size_t sizes[] = {1 << 20};
    pump(&p, out + sent, in + sent, length - sent, sizes, 1, sizes, 1);
    assert_memory_equal(out, in, length);
    free(out);
    free(in);
    close_pair(&p);
  }
}

static void zero_byte_calls_move_nothing_and_fail_nothing(void **state) {
  (void)state;
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    pair p = open_pair(t);
    uint8_t byte = 42, got = 0;
    size_t moved = 99;
    assert_int_equal(p.ops->send(p.writer, &byte, 0, &moved), KOLO_OK);
    assert_int_equal(moved, 0);
    moved = 99;
    assert_int_equal(p.ops->recv(p.reader, &got, 0, &moved), KOLO_OK);
    assert_int_equal(moved, 0);
    /* nothing was sent: a one-byte receive finds nothing yet */
    assert_int_equal(p.ops->recv(p.reader, &got, 1, &moved), KOLO_OK);
    assert_int_equal(moved, 0);
    assert_int_equal(
        kolo_transport_send_all(p.ops, p.writer, &byte, 1, kolo_deadline_after_ms(5000)), KOLO_OK);
    assert_int_equal(
        kolo_transport_recv_all(p.ops, p.reader, &got, 1, kolo_deadline_after_ms(5000)), KOLO_OK);
    assert_int_equal(got, 42);
    close_pair(&p);
  }
}

/* The blocking helpers, each on its own thread: one sender, one receiver. */
typedef struct transfer {
  pair *p;
  uint8_t *buffer;
  size_t length;
  int64_t deadline_ns;
  kolo_status status;
  int64_t took_ns;
} transfer;

static void *send_thread(void *argument) {
  transfer *x = argument;
  int64_t start = kolo_now_ns();
  x->status =
      kolo_transport_send_all(x->p->ops, x->p->writer, x->buffer, x->length, x->deadline_ns);
  x->took_ns = kolo_now_ns() - start;
  return NULL;
}

static void *recv_thread(void *argument) {
  transfer *x = argument;
  int64_t start = kolo_now_ns();
  x->status =
      kolo_transport_recv_all(x->p->ops, x->p->reader, x->buffer, x->length, x->deadline_ns);
  x->took_ns = kolo_now_ns() - start;
  return NULL;
}

static void a_large_message_arrives_whole_through_the_blocking_helpers(void **state) {
  (void)state;
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    pair p = open_pair(t);
    size_t length = 48 * 1024 * 1024 + 3;
    uint8_t *out = malloc(length), *in = calloc(1, length);
    fill(out, length, 23);
    transfer tx = {&p, out, length, kolo_deadline_after_ms(60000), KOLO_ERR_IO, 0};
    transfer rx = {&p, in, length, kolo_deadline_after_ms(60000), KOLO_ERR_IO, 0};
    pthread_t sender, receiver;
    assert_int_equal(pthread_create(&sender, NULL, send_thread, &tx), 0);
    assert_int_equal(pthread_create(&receiver, NULL, recv_thread, &rx), 0);
    pthread_join(sender, NULL);
    pthread_join(receiver, NULL);
    assert_int_equal(tx.status, KOLO_OK);
    assert_int_equal(rx.status, KOLO_OK);
    assert_memory_equal(out, in, length);
    free(out);
    free(in);
    close_pair(&p);
  }
}

static void a_wait_with_nothing_coming_ends_at_its_deadline(void **state) {
  (void)state;
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    pair p = open_pair(t);
    uint8_t in[16];
    transfer rx = {&p, in, sizeof in, kolo_deadline_after_ms(200), KOLO_ERR_IO, 0};
    recv_thread(&rx);
    assert_int_equal(rx.status, KOLO_ERR_TIMEOUT);
    assert_true(rx.took_ns >= 150 * 1000000LL);
    /* a sender nobody reads from ends at its deadline too */
    size_t length = 64 * 1024 * 1024;
    uint8_t *out = calloc(1, length);
    transfer tx = {&p, out, length, kolo_deadline_after_ms(200), KOLO_ERR_IO, 0};
    send_thread(&tx);
    assert_int_equal(tx.status, KOLO_ERR_TIMEOUT);
    assert_true(tx.took_ns >= 150 * 1000000LL);
    free(out);
    close_pair(&p);
  }
}

static void a_peer_that_vanishes_mid_message_is_lost_not_waited_for(void **state) {
  (void)state;
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    pair p = open_pair(t);
    uint8_t out[5000], in[5000];
    fill(out, sizeof out, 5);
    assert_int_equal(
        kolo_transport_send_all(p.ops, p.writer, out, 1000, kolo_deadline_after_ms(5000)), KOLO_OK);
    p.ops->close(p.writer); /* gone with 4000 bytes of the message unsent */
    p.writer = NULL;
    transfer rx = {&p, in, sizeof in, kolo_deadline_after_ms(20000), KOLO_ERR_IO, 0};
    recv_thread(&rx);
    assert_int_equal(rx.status, KOLO_ERR_PEER_LOST);
    assert_true(rx.took_ns < 10000 * 1000000LL); /* told, not timed out */
    assert_memory_equal(out, in, 1000);          /* what did arrive is intact */
    close_pair(&p);
  }
}

static void closing_the_peer_wakes_a_receiver_blocked_on_it(void **state) {
  (void)state;
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    pair p = open_pair(t);
    uint8_t in[64];
    transfer rx = {&p, in, sizeof in, kolo_deadline_after_ms(20000), KOLO_ERR_IO, 0};
    pthread_t receiver;
    assert_int_equal(pthread_create(&receiver, NULL, recv_thread, &rx), 0);
    usleep(100 * 1000); /* let it block in poll */
    p.ops->close(p.writer);
    p.writer = NULL;
    pthread_join(receiver, NULL);
    assert_int_equal(rx.status, KOLO_ERR_PEER_LOST);
    assert_true(rx.took_ns < 10000 * 1000000LL);
    close_pair(&p);
  }
}

static void bytes_shown_in_place_are_the_ones_sent_until_consumed(void **state) {
  (void)state;
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    pair p = open_pair(t);
    if (p.ops->peek == NULL) { /* optional: the executor copies through recv then */
      close_pair(&p);
      continue;
    }
    uint8_t out[4096];
    fill(out, sizeof out, 9);
    assert_int_equal(
        kolo_transport_send_all(p.ops, p.writer, out, sizeof out, kolo_deadline_after_ms(5000)),
        KOLO_OK);
    const void *view = NULL;
    size_t available = 0;
    assert_int_equal(p.ops->peek(p.reader, &view, sizeof out, &available), KOLO_OK);
    assert_true(available > 0 && available <= sizeof out);
    assert_memory_equal(view, out, available);
    size_t first = available / 2;
    p.ops->consume(p.reader, first);
    uint8_t in[4096];
    assert_int_equal(kolo_transport_recv_all(p.ops, p.reader, in, sizeof out - first,
                                             kolo_deadline_after_ms(5000)),
                     KOLO_OK);
    assert_memory_equal(in, out + first, sizeof out - first);
    close_pair(&p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bytes_arrive_whole_and_in_order_whatever_the_piece_sizes),
      cmocka_unit_test(a_full_connection_takes_part_of_a_send_and_the_rest_later),
      cmocka_unit_test(zero_byte_calls_move_nothing_and_fail_nothing),
      cmocka_unit_test(a_large_message_arrives_whole_through_the_blocking_helpers),
      cmocka_unit_test(a_wait_with_nothing_coming_ends_at_its_deadline),
      cmocka_unit_test(a_peer_that_vanishes_mid_message_is_lost_not_waited_for),
      cmocka_unit_test(closing_the_peer_wakes_a_receiver_blocked_on_it),
      cmocka_unit_test(bytes_shown_in_place_are_the_ones_sent_until_consumed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
