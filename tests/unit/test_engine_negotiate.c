/* Unit tests for collective/engine/negotiate.c and nego_codec.c: the message codec round-trips and
 * refuses malformed input, and the replicated table decides readiness, order,
 * mismatches, the response cache, joins, unnamed agreement and stalls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "collective/exec/exec.h"
#include "collective/engine/negotiate.h"

static kolo_nego_meta allreduce_meta(uint64_t count) {
  return (kolo_nego_meta){.kind = KOLO_REQUEST_ALLREDUCE,
                          .dtype = KOLO_FLOAT32,
                          .op = KOLO_SUM,
                          .members = 1,
                          .count = count};
}

static kolo_nego_announce announce(const char *name, kolo_nego_meta meta) {
  return (kolo_nego_announce){.name = name, .name_length = strlen(name), .meta = meta};
}

static void messages_round_trip(void **state) {
  (void)state;
  uint8_t bits[3] = {0x05, 0x00, 0x80};
  kolo_nego_announce announces[2] = {announce("fc1.weight", allreduce_meta(10)),
                                     announce("b", allreduce_meta(0))};
  announces[1].meta.root = -3;
  announces[1].meta.aux = 0x0123456789abcdefull;
  announces[1].meta.device = 1;
  kolo_nego_announce stalls[1] = {announce("x", allreduce_meta(0))};
  kolo_nego_message m = {.flags = KOLO_NEGO_FLAG_JOINED,
                         .unnamed_count = 1ull << 40,
                         .bits = bits,
                         .bit_bytes = 3,
                         .announce_count = 2,
                         .announces = announces,
                         .stall_count = 1,
                         .stalls = stalls,
                         .stall_seconds = 30};
  kolo_nego_buffer buffer = {0};
  assert_int_equal(kolo_nego_encode(&m, &buffer), KOLO_OK);
  kolo_nego_message out;
  assert_int_equal(kolo_nego_decode(buffer.data, buffer.length, &out), KOLO_OK);
  assert_int_equal(out.flags, KOLO_NEGO_FLAG_JOINED);
  assert_true(out.unnamed_count == 1ull << 40);
  assert_int_equal(out.bit_bytes, 3);
  assert_memory_equal(out.bits, bits, 3);
  assert_int_equal(out.announce_count, 2);
  assert_int_equal(out.announces[0].name_length, 10);
  assert_memory_equal(out.announces[0].name, "fc1.weight", 10);
  assert_true(out.announces[0].meta.count == 10);
  assert_int_equal(out.announces[1].meta.root, -3);
  assert_true(out.announces[1].meta.aux == 0x0123456789abcdefull);
  assert_int_equal(out.announces[0].meta.device, 0);
  assert_int_equal(out.announces[1].meta.device, 1);
  assert_int_equal(out.stall_count, 1);
  assert_int_equal(out.stall_seconds, 30);
  kolo_nego_message_free(&out);
  kolo_nego_buffer_free(&buffer);
}

/* The shortest announcements (one-byte names, no stalls, nothing after them)
 * are not taken for a lying count (torch's "t0".."t2" once were). */
static void many_short_names_round_trip(void **state) {
  (void)state;
  static const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h", "t0", "t1", "t2"};
  enum { N = sizeof names / sizeof names[0] };
  for (int n = 1; n <= N; n++) {
    kolo_nego_announce announces[N];
    for (int i = 0; i < n; i++) announces[i] = announce(names[i], allreduce_meta((uint64_t)i));
    kolo_nego_message m = {.announce_count = (uint32_t)n, .announces = announces};
    kolo_nego_buffer buffer = {0};
    assert_int_equal(kolo_nego_encode(&m, &buffer), KOLO_OK);
    kolo_nego_message out;
    assert_int_equal(kolo_nego_decode(buffer.data, buffer.length, &out), KOLO_OK);
    assert_int_equal(out.announce_count, n);
    for (int i = 0; i < n; i++) {
      assert_int_equal(out.announces[i].name_length, strlen(names[i]));
      assert_memory_equal(out.announces[i].name, names[i], strlen(names[i]));
      assert_true(out.announces[i].meta.count == (uint64_t)i);
    }
    kolo_nego_message_free(&out);
    kolo_nego_buffer_free(&buffer);
  }
}

static void malformed_messages_are_refused(void **state) {
  (void)state;
  kolo_nego_announce announces[1] = {announce("name", allreduce_meta(4))};
  kolo_nego_message m = {.announce_count = 1, .announces = announces};
  kolo_nego_buffer buffer = {0};
  assert_int_equal(kolo_nego_encode(&m, &buffer), KOLO_OK);
  kolo_nego_message out;
  /* every truncation is refused, never read past */
  for (size_t length = 0; length < buffer.length; length++) {
    uint8_t *copy = malloc(length ? length : 1);
    memcpy(copy, buffer.data, length);
    assert_int_equal(kolo_nego_decode(copy, length, &out), KOLO_ERR_PROTOCOL);
    free(copy);
  }
  /* a trailing byte, a huge announce count, an empty name, a NUL in a name */
  uint8_t longer[512];
  memcpy(longer, buffer.data, buffer.length);
  longer[buffer.length] = 0;
  assert_int_equal(kolo_nego_decode(longer, buffer.length + 1, &out), KOLO_ERR_PROTOCOL);
  memcpy(longer, buffer.data, buffer.length);
  longer[16] = 0xff, longer[17] = 0xff, longer[18] = 0xff, longer[19] = 0x7f;
  assert_int_equal(kolo_nego_decode(longer, buffer.length, &out), KOLO_ERR_PROTOCOL);
  memcpy(longer, buffer.data, buffer.length);
  longer[22] = 'a', longer[23] = '\0';
  assert_int_equal(kolo_nego_decode(longer, buffer.length, &out), KOLO_ERR_PROTOCOL);
  memcpy(longer, buffer.data, buffer.length);
  memcpy(longer, buffer.data, buffer.length);
  longer[29] = 2; /* the memory byte: 0 host, 1 device, nothing else */
  assert_int_equal(kolo_nego_decode(longer, buffer.length, &out), KOLO_ERR_PROTOCOL);
  memcpy(longer, buffer.data, buffer.length);
  longer[20] = 0, longer[21] = 0; /* name length 0: the rest no longer parses either */
  assert_int_equal(kolo_nego_decode(longer, buffer.length, &out), KOLO_ERR_PROTOCOL);
  kolo_nego_buffer_free(&buffer);
}

/* The name map reuses removed nodes by key size: names of every length (1..255,
 * across the 8-byte hash words) put, found, removed and put again keep their
 * values and keys. */
static void the_name_map_survives_reuse_of_its_nodes(void **state) {
  (void)state;
  kolo_names *names = NULL;
  assert_int_equal(kolo_names_create(&names), KOLO_OK);
  static char keys[255][256];
  for (int round = 0; round < 3; round++) {
    for (int n = 1; n <= 255; n++) {
      memset(keys[n - 1], 'a' + (n % 26), (size_t)n);
      keys[n - 1][n] = '\0';
      keys[n - 1][0] = (char)('A' + round); /* a different key each round, same length */
      assert_int_equal(kolo_names_put(names, keys[n - 1], (void *)(intptr_t)n), KOLO_OK);
    }
    assert_int_equal(kolo_names_count(names), 255);
    for (int n = 1; n <= 255; n++) {
      assert_int_equal((intptr_t)kolo_names_get(names, keys[n - 1]), n);
      assert_string_equal(kolo_names_key(names, keys[n - 1]), keys[n - 1]);
    }
    assert_int_equal(kolo_names_put(names, keys[9], NULL), KOLO_ERR_EXISTS);
    for (int n = 1; n <= 255; n++)
      assert_int_equal((intptr_t)kolo_names_remove(names, keys[n - 1]), n);
    assert_null(kolo_names_get(names, keys[0]));
    assert_int_equal(kolo_names_count(names), 0);
  }
  kolo_names_destroy(names);
}

typedef struct fixture {
  kolo_nego_table *table;
  kolo_nego_decision decision;
  kolo_nego_message messages[4];
  kolo_nego_announce announces[4][8];
  uint8_t bits[4][8];
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_int_equal(kolo_nego_table_create(3, 2, &f->table), KOLO_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_nego_decision_free(&f->decision);
  kolo_nego_table_destroy(f->table);
  free(f);
  return 0;
}

static void clear(fixture *f) {
  for (int r = 0; r < 4; r++) {
    f->messages[r] = (kolo_nego_message){.announces = f->announces[r], .bits = f->bits[r]};
    memset(f->bits[r], 0, sizeof f->bits[r]);
  }
}

static void say(fixture *f, int rank, const char *name, kolo_nego_meta meta) {
  kolo_nego_message *m = &f->messages[rank];
  f->announces[rank][m->announce_count++] = announce(name, meta);
}

static void set_bit(fixture *f, int rank, int bit) {
  f->bits[rank][bit / 8] |= (uint8_t)(1u << (bit % 8));
  if (f->messages[rank].bit_bytes < (uint32_t)bit / 8 + 1)
    f->messages[rank].bit_bytes = (uint32_t)bit / 8 + 1;
}

static void apply(fixture *f) {
  assert_int_equal(kolo_nego_apply(f->table, f->messages, 0, &f->decision), KOLO_OK);
  clear(f);
}

static void a_name_is_ready_once_every_rank_submitted_it_in_any_order(void **state) {
  fixture *f = *state;
  clear(f);
  say(f, 0, "a", allreduce_meta(4));
  say(f, 0, "b", allreduce_meta(4));
  say(f, 1, "b", allreduce_meta(4));
  apply(f);
  assert_int_equal(f->decision.ready_count, 0);
  say(f, 2, "b", allreduce_meta(4));
  say(f, 2, "a", allreduce_meta(4));
  say(f, 1, "a", allreduce_meta(4));
  apply(f);
  /* both ready; "a" was seen first, so it runs first on every rank */
  assert_int_equal(f->decision.ready_count, 2);
  assert_string_equal(f->decision.ready[0].name, "a");
  assert_string_equal(f->decision.ready[1].name, "b");
  assert_int_equal(f->decision.ready[0].status, KOLO_OK);
}

static void disagreeing_counts_name_the_tensor_and_the_ranks(void **state) {
  fixture *f = *state;
  clear(f);
  say(f, 0, "fc1.weight", allreduce_meta(10));
  say(f, 1, "fc1.weight", allreduce_meta(12));
  say(f, 2, "fc1.weight", allreduce_meta(10));
  apply(f);
  assert_int_equal(f->decision.ready_count, 1);
  assert_int_equal(f->decision.ready[0].status, KOLO_ERR_MISMATCH);
  assert_string_equal(f->decision.ready[0].message,
                      "tensor 'fc1.weight': count 10 on ranks 0,2 but count 12 on rank 1");
  kolo_nego_meta other = allreduce_meta(4);
  other.dtype = KOLO_FLOAT64;
  say(f, 0, "w", allreduce_meta(4));
  say(f, 1, "w", allreduce_meta(4));
  say(f, 2, "w", other);
  apply(f);
  assert_string_equal(f->decision.ready[0].message,
                      "tensor 'w': dtype float32 on ranks 0-1 but dtype float64 on rank 2");
  kolo_nego_meta device = allreduce_meta(4);
  device.device = 1;
  say(f, 0, "cuda", allreduce_meta(4));
  say(f, 1, "cuda", device);
  say(f, 2, "cuda", device);
  apply(f);
  assert_int_equal(f->decision.ready[0].status, KOLO_ERR_MISMATCH);
  assert_string_equal(f->decision.ready[0].message,
                      "tensor 'cuda': host memory on rank 0 but CUDA device memory on ranks 1-2");
  /* a device name agreed by every rank is fine, and cached apart from a host one */
  for (int r = 0; r < 3; r++) say(f, r, "cuda2", device);
  apply(f);
  assert_int_equal(f->decision.ready[0].status, KOLO_OK);
  assert_true(f->decision.ready[0].meta.device == 1);
}

static void a_ready_name_is_cached_and_then_agreed_by_bit(void **state) {
  fixture *f = *state;
  clear(f);
  for (int r = 0; r < 3; r++) say(f, r, "g", allreduce_meta(8));
  apply(f);
  kolo_nego_meta meta = allreduce_meta(8);
  int32_t bit = kolo_nego_cached_bit(f->table, "g", 1, &meta);
  assert_int_equal(bit, 0);
  assert_int_equal(kolo_nego_bits_used(f->table), 1);
  /* other metadata does not match the cached bit */
  kolo_nego_meta other = allreduce_meta(9);
  assert_int_equal(kolo_nego_cached_bit(f->table, "g", 1, &other), -1);
  set_bit(f, 0, bit);
  set_bit(f, 1, bit);
  apply(f);
  assert_int_equal(f->decision.ready_count, 0);
  set_bit(f, 2, bit);
  apply(f);
  assert_int_equal(f->decision.ready_count, 1);
  assert_string_equal(f->decision.ready[0].name, "g");
  /* a bit nobody assigned is a protocol error */
  set_bit(f, 0, 5);
  assert_int_equal(kolo_nego_apply(f->table, f->messages, 0, &f->decision), KOLO_ERR_PROTOCOL);
}

static void the_cache_holds_at_most_its_capacity(void **state) {
  fixture *f = *state;
  const char *names[] = {"n0", "n1", "n2"};
  clear(f);
  for (int i = 0; i < 3; i++) {
    for (int r = 0; r < 3; r++) say(f, r, names[i], allreduce_meta(1));
  }
  apply(f);
  assert_int_equal(f->decision.ready_count, 3);
  assert_int_equal(kolo_nego_bits_used(f->table), 2);
  kolo_nego_meta meta = allreduce_meta(1);
  assert_int_equal(kolo_nego_cached_bit(f->table, "n2", 0, &meta), -1);
  assert_null(kolo_nego_lookup(f->table, "n2")); /* uncached names leave the table */
}

static void joined_ranks_count_as_submitted_and_the_last_joiner_is_named(void **state) {
  fixture *f = *state;
  clear(f);
  f->messages[2].flags = KOLO_NEGO_FLAG_JOINED;
  say(f, 0, "x", allreduce_meta(3));
  apply(f);
  assert_int_equal(f->decision.ready_count, 0);
  f->messages[2].flags = KOLO_NEGO_FLAG_JOINED;
  say(f, 1, "x", allreduce_meta(3));
  apply(f);
  assert_int_equal(f->decision.ready_count, 1);
  assert_int_equal(f->decision.ready[0].submitted[2], 0);
  assert_int_equal(f->decision.join_done, 0);
  /* a broadcast from a joined root cannot run */
  kolo_nego_meta bcast = {
      .kind = KOLO_REQUEST_BROADCAST, .dtype = KOLO_FLOAT32, .count = 2, .root = 2};
  f->messages[2].flags = KOLO_NEGO_FLAG_JOINED;
  say(f, 0, "bc", bcast);
  say(f, 1, "bc", bcast);
  apply(f);
  assert_int_equal(f->decision.ready[0].status, KOLO_ERR_STATE);
  /* reduce-scatter and all-to-all run with the joined rank's neutral part */
  kolo_nego_meta rs = {.kind = KOLO_REQUEST_REDUCESCATTER,
                       .dtype = KOLO_INT32,
                       .op = KOLO_SUM,
                       .count = 9,
                       .aux = 77};
  kolo_nego_meta a2a = {.kind = KOLO_REQUEST_ALLTOALL, .dtype = KOLO_INT32, .count = 5};
  kolo_nego_meta cuda = allreduce_meta(3);
  cuda.device = 1;
  f->messages[2].flags = KOLO_NEGO_FLAG_JOINED;
  say(f, 0, "rs", rs);
  say(f, 1, "rs", rs);
  say(f, 0, "a2a", a2a);
  say(f, 1, "a2a", a2a);
  say(f, 0, "cuda", cuda);
  say(f, 1, "cuda", cuda);
  apply(f);
  assert_int_equal(f->decision.ready_count, 3);
  assert_int_equal(f->decision.ready[0].status, KOLO_OK);
  assert_int_equal(f->decision.ready[1].status, KOLO_OK);
  /* ... but nothing on CUDA buffers: a joined rank has none */
  assert_int_equal(f->decision.ready[2].status, KOLO_ERR_STATE);
  assert_string_equal(
      f->decision.ready[2].message,
      "tensor 'cuda': allreduce of CUDA buffers cannot run while rank(s) 2 have joined");
  f->messages[0].flags = KOLO_NEGO_FLAG_JOINED;
  f->messages[2].flags = KOLO_NEGO_FLAG_JOINED;
  apply(f);
  assert_int_equal(f->decision.join_done, 0);
  for (int r = 0; r < 3; r++) f->messages[r].flags = KOLO_NEGO_FLAG_JOINED;
  apply(f);
  assert_int_equal(f->decision.join_done, 1);
  assert_int_equal(f->decision.last_rank, 1);
}

static void unnamed_operations_run_up_to_the_lowest_count(void **state) {
  fixture *f = *state;
  clear(f);
  f->messages[0].unnamed_count = 5;
  f->messages[1].unnamed_count = 3;
  f->messages[2].unnamed_count = 4;
  apply(f);
  assert_true(f->decision.unnamed_agreed == 3);
  assert_true(f->decision.unnamed_highest == 5);
}

static void a_declared_stall_fails_naming_the_missing_ranks(void **state) {
  fixture *f = *state;
  clear(f);
  say(f, 0, "lonely", allreduce_meta(1));
  say(f, 2, "lonely", allreduce_meta(1));
  apply(f);
  kolo_nego_announce stall = announce("lonely", allreduce_meta(0));
  f->messages[2].stalls = &stall;
  f->messages[2].stall_count = 1;
  f->messages[2].stall_seconds = 7;
  apply(f);
  assert_int_equal(f->decision.stall, KOLO_ERR_STALLED);
  assert_int_equal(f->decision.stall_rank, 1);
  assert_string_equal(f->decision.stall_message,
                      "stalled: tensor 'lonely' was submitted by rank(s) 0,2 but not by rank(s) 1 "
                      "(declared by rank 2 after 7 s)");
  /* a stall declared for a name that became ready in the same cycle is void */
  say(f, 1, "lonely", allreduce_meta(1));
  f->messages[0].stalls = &stall;
  f->messages[0].stall_count = 1;
  apply(f);
  assert_int_equal(f->decision.stall, KOLO_OK);
  assert_int_equal(f->decision.ready_count, 1);
}

static void pending_entries_are_listed_oldest_first(void **state) {
  fixture *f = *state;
  clear(f);
  say(f, 0, "old", allreduce_meta(1));
  assert_int_equal(kolo_nego_apply(f->table, f->messages, 100, &f->decision), KOLO_OK);
  clear(f);
  say(f, 1, "new", allreduce_meta(1));
  assert_int_equal(kolo_nego_apply(f->table, f->messages, 200, &f->decision), KOLO_OK);
  const kolo_nego_entry *old = kolo_nego_lookup(f->table, "old");
  const kolo_nego_entry *young = kolo_nego_lookup(f->table, "new");
  assert_true(old->since_ns == 100 && young->since_ns == 200);
  assert_int_equal(old->pending, 1);
}

static void ranks_are_formatted_as_ranges(void **state) {
  (void)state;
  uint8_t flags[7] = {1, 1, 1, 0, 1, 0, 1};
  char out[64];
  kolo_nego_format_ranks(flags, 7, 1, out, sizeof out);
  assert_string_equal(out, "0-2,4,6");
  kolo_nego_format_ranks(flags, 7, 0, out, sizeof out);
  assert_string_equal(out, "3,5");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(messages_round_trip),
      cmocka_unit_test(many_short_names_round_trip),
      cmocka_unit_test(malformed_messages_are_refused),
      cmocka_unit_test(the_name_map_survives_reuse_of_its_nodes),
      cmocka_unit_test_setup_teardown(a_name_is_ready_once_every_rank_submitted_it_in_any_order,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(disagreeing_counts_name_the_tensor_and_the_ranks, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_ready_name_is_cached_and_then_agreed_by_bit, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_cache_holds_at_most_its_capacity, setup, teardown),
      cmocka_unit_test_setup_teardown(joined_ranks_count_as_submitted_and_the_last_joiner_is_named,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(unnamed_operations_run_up_to_the_lowest_count, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_declared_stall_fails_naming_the_missing_ranks, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(pending_entries_are_listed_oldest_first, setup, teardown),
      cmocka_unit_test(ranks_are_formatted_as_ranges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
