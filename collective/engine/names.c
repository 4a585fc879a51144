/* The name map of names.h: separate chaining, the bucket count doubled when the
 * entries outnumber it, so lookups stay O(1) for any number of tensors. Removed
 * nodes are kept on free lists by key size and reused, so the engine's
 * steady state (the same names put and removed every step) allocates nothing. */
#include <stdlib.h>
#include <string.h>

#include "collective/engine/names.h"

#define KEY_CLASS_BYTES 32
#define KEY_CLASSES ((KOLO_NAME_MAX_KEY + KEY_CLASS_BYTES) / KEY_CLASS_BYTES)
#define KOLO_NAME_MAX_KEY 256 /* KOLO_NAME_MAX + 1 */

typedef struct name_node {
  struct name_node *next;
  uint64_t hash;
  void *value;
  size_t key_class; /* the key holds (key_class + 1) * KEY_CLASS_BYTES bytes */
  char key[];
} name_node;

struct kolo_names {
  name_node **buckets;
  size_t bucket_count; /* a power of two */
  size_t count;
  name_node *spare[KEY_CLASSES]; /* removed nodes, by key class */
};

/* 8 bytes at a time (names are ~20 bytes: a third of the work of a byte-wise
 * FNV); only ever compared within one process. */
uint64_t kolo_name_hash(const char *name) {
  size_t length = strlen(name), consumed = length & ~(size_t)7;
  uint64_t hash = 0x9e3779b97f4a7c15ull ^ length;
  for (; length >= 8; length -= 8, name += 8) {
    uint64_t word;
    memcpy(&word, name, 8);
    hash = (hash ^ word) * 0xff51afd7ed558ccdull;
    hash ^= hash >> 32;
  }
  uint64_t tail = 0;
  if (length > 0 && consumed >= 8) {
    memcpy(&tail, name + length - 8, 8); /* the last 8 bytes, overlapping the words before */
  } else {
    for (size_t i = 0; i < length; i++) tail |= (uint64_t)(unsigned char)name[i] << (8 * i);
  }
  hash = (hash ^ tail) * 0xc4ceb9fe1a85ec53ull;
  return hash ^ (hash >> 29);
}

static size_t key_class(size_t length) {
  return length / KEY_CLASS_BYTES;
}

static name_node *node_take(kolo_names *names, size_t length) {
  size_t c = key_class(length);
  if (c >= KEY_CLASSES) return NULL;
  name_node *node = names->spare[c];
  if (node != NULL) {
    names->spare[c] = node->next;
    return node;
  }
  node = malloc(sizeof *node + (c + 1) * KEY_CLASS_BYTES);
  if (node != NULL) node->key_class = c;
  return node;
}

static void node_give(kolo_names *names, name_node *node) {
  node->next = names->spare[node->key_class];
  names->spare[node->key_class] = node;
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
  for (size_t c = 0; c < KEY_CLASSES; c++) {
    while (names->spare[c] != NULL) {
      name_node *next = names->spare[c]->next;
      free(names->spare[c]);
      names->spare[c] = next;
    }
  }
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
  for (name_node *node = names->buckets[hash & (names->bucket_count - 1)]; node;
       node = node->next) {
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
  name_node *node = node_take(names, length);
  if (node == NULL) return length >= KOLO_NAME_MAX_KEY ? KOLO_ERR_INVALID_ARG : KOLO_ERR_NO_MEMORY;
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
    node_give(names, node);
    names->count--;
    return value;
  }
  return NULL;
}

size_t kolo_names_count(const kolo_names *names) {
  return names->count;
}

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
