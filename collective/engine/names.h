/* A map from tensor names to pointers (chained hash table, FNV-1a, grows at
 * load 1): the engine's in-flight names per rank and the negotiation table.
 * Keys are copied; values are the caller's. Not thread-safe. */
#ifndef KOLO_COLLECTIVE_NAMES_H
#define KOLO_COLLECTIVE_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

typedef struct kolo_names kolo_names;

kolo_status kolo_names_create(kolo_names **out);
void kolo_names_destroy(kolo_names *names); /* NULL is a no-op; values are not freed */
/* The value under name, or NULL. */
void *kolo_names_get(const kolo_names *names, const char *name);
/* Adds name -> value; KOLO_ERR_EXISTS when present (nothing changes). */
kolo_status kolo_names_put(kolo_names *names, const char *name, void *value);
/* Removes name; returns its value or NULL when absent. */
void *kolo_names_remove(kolo_names *names, const char *name);
size_t kolo_names_count(const kolo_names *names);
/* Removes every name, calling fn on each value (in no particular order). */
void kolo_names_drain(kolo_names *names, void (*fn)(void *value, void *context), void *context);
/* The key stored for name (stable until removed), or NULL. */
const char *kolo_names_key(const kolo_names *names, const char *name);

uint64_t kolo_name_hash(const char *name);

#endif
