/* server/sorted.h: the one binary search of server/'s arrays sorted by a string (the store's
 * view and live list by job id, its copy of etcd and the in-memory kv by key). The caller says
 * how to read an element's string, so one search serves arrays of structs and of pointers. */
#ifndef KOLO_SERVER_SORTED_H
#define KOLO_SERVER_SORTED_H

#include <stddef.h>
#include <string.h>

/* The string element (a pointer into the array) is sorted by. */
typedef const char *(*kolo_server_key_of)(const void *element);

/* Index of key among count elements of size bytes at base, sorted by key_of (strcmp
 * order), or -(the index where it would go) - 1 when absent. */
static inline long kolo_server_sorted_find(const void *base, size_t count, size_t size,
                                           kolo_server_key_of key_of, const char *key) {
  size_t lo = 0, hi = count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(key_of((const char *)base + mid * size), key);
    if (c == 0) return (long)mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -(long)lo - 1;
}

#endif
