/* Unit tests for server/sorted.h, the binary search of server/'s sorted arrays: each
 * element found at its index, and each absent key's insertion point (before the first,
 * between, after the last, in an empty array), over an array of structs and one of
 * pointers, against a linear scan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/kv.h"
#include "server/sorted.h"

static const char *pointed(const void *element) {
  return *(const char *const *)element;
}

/* What the search must answer: the index, or -(first element above key) - 1. */
static long linear(const char *const *keys, size_t n, const char *key) {
  size_t i = 0;
  while (i < n && strcmp(keys[i], key) < 0) i++;
  return i < n && strcmp(keys[i], key) == 0 ? (long)i : -(long)i - 1;
}

static void every_key_and_every_gap_of_a_sorted_array_is_placed_as_a_scan_places_it(void **state) {
  (void)state;
  const char *keys[] = {"a", "a-b", "a/", "b", "jobs/1", "jobs/10", "jobs/2"};
  const char *probes[] = {"",  "0", "a",      "a-",      "a-b",    "a/",     "a0",
                          "b", "c", "jobs/1", "jobs/11", "jobs/2", "jobs/3", "z"};
  kolo_server_kv_item items[7];
  memset(items, 0, sizeof items);
  for (size_t n = 0; n <= 7; n++) {
    for (size_t i = 0; i < n; i++) items[i].key = (char *)keys[i];
    for (size_t p = 0; p < sizeof probes / sizeof *probes; p++) {
      long want = linear(keys, n, probes[p]);
      assert_int_equal(kolo_server_sorted_find(keys, n, sizeof *keys, pointed, probes[p]), want);
      assert_int_equal(
          kolo_server_sorted_find(items, n, sizeof *items, kolo_server_kv_item_key, probes[p]),
          want);
    }
  }
}

static void an_empty_array_places_any_key_first(void **state) {
  (void)state;
  assert_int_equal(kolo_server_sorted_find(NULL, 0, sizeof(char *), pointed, "x"), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_key_and_every_gap_of_a_sorted_array_is_placed_as_a_scan_places_it),
      cmocka_unit_test(an_empty_array_places_any_key_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
