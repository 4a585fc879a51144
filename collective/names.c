/* The name map of names.h: separate chaining, the bucket count doubled when the
 * entries outnumber it, so lookups stay O(1) for any number of tensors. */
#include <stdlib.h>
#include <string.h>

#include "collective/names.h"

typedef struct name_node {
  struct name_node *next;
  uint64_t hash;
  void *value;
  char key[];
} name_node;

struct kolo_names {
  name_node **buckets;
  size_t bucket_count; /* a power of two */
  size_t count;
};

uint64_t kolo_name_hash(const char *name) {
  uint64_t hash = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    hash ^= *p;
    hash *= 1099511628211ull;
  }
  return hash;
}

kolo_status kolo_names_create(kolo_names **out) {
  kolo_names *names = calloc(1, sizeof *names);
  if (names == NULL) return KOLO_ERR_NO_MEMORY;
  names->bucket_count = 64;
  names->buckets = calloc(names->bucket_count, sizeof *names->buckets);
  if (names->buckets == NULL) {
    free(names);
    return KOLO_ERR_NO_MEMORY;
  }
  *out = names;
  return KOLO_OK;
}

void kolo_names_destroy(kolo_names *names) {
  if (names == NULL) return;
  for (size_t b = 0; b < names->bucket_count; b++) {
    name_node *node = names->buckets[b];
    while (node != NULL) {
      name_node *next = node->next;
      free(node);
      node = next;
    }
  }
  free(names->buckets);
  free(names);
}

static name_node *find(const kolo_names *names, const char *name, uint64_t hash) {
  for (name_node *node = names->buckets[hash & (names->bucket_count - 1)]; node; node = node->next) {
    if (node->hash == hash && strcmp(node->key, name) == 0) return node;
  }
  return NULL;
}

void *kolo_names_get(const kolo_names *names, const char *name) {
  name_node *node = find(names, name, kolo_name_hash(name));
  return node ? node->value : NULL;
}

const char *kolo_names_key(const kolo_names *names, const char *name) {
  name_node *node = find(names, name, kolo_name_hash(name));
  return node ? node->key : NULL;
}

static void grow(kolo_names *names) {
  size_t count = names->bucket_count * 2;
  name_node **buckets = calloc(count, sizeof *buckets);
  if (buckets == NULL) return; /* stay at the old size: slower, still correct */
  for (size_t b = 0; b < names->bucket_count; b++) {
    name_node *node = names->buckets[b];
    while (node != NULL) {
      name_node *next = node->next;
      node->next = buckets[node->hash & (count - 1)];
      buckets[node->hash & (count - 1)] = node;
      node = next;
    }
  }
  free(names->buckets);
  names->buckets = buckets;
  names->bucket_count = count;
}

kolo_status kolo_names_put(kolo_names *names, const char *name, void *value) {
  uint64_t hash = kolo_name_hash(name);
  if (find(names, name, hash) != NULL) return KOLO_ERR_EXISTS;
  size_t length = strlen(name);
  name_node *node = malloc(sizeof *node + length + 1);
  if (node == NULL) return KOLO_ERR_NO_MEMORY;
  memcpy(node->key, name, length + 1);
  node->hash = hash;
  node->value = value;
  name_node **bucket = &names->buckets[hash & (names->bucket_count - 1)];
  node->next = *bucket;
  *bucket = node;
  if (++names->count > names->bucket_count) grow(names);
  return KOLO_OK;
}

void *kolo_names_remove(kolo_names *names, const char *name) {
  uint64_t hash = kolo_name_hash(name);
  name_node **link = &names->buckets[hash & (names->bucket_count - 1)];
  for (; *link != NULL; link = &(*link)->next) {
    name_node *node = *link;
    if (node->hash != hash || strcmp(node->key, name) != 0) continue;
    *link = node->next;
    void *value = node->value;
    free(node);
    names->count--;
    return value;
  }
  return NULL;
}

size_t kolo_names_count(const kolo_names *names) { return names->count; }

void kolo_names_drain(kolo_names *names, void (*fn)(void *value, void *context), void *context) {
  for (size_t b = 0; b < names->bucket_count; b++) {
    name_node *node = names->buckets[b];
    names->buckets[b] = NULL;
    while (node != NULL) {
      name_node *next = node->next;
      void *value = node->value;
      free(node);
      names->count--;
      fn(value, context);
      node = next;
    }
  }
}
