/* Negotiation: which named operations every rank has submitted, decided the same
 * way on every rank from the same data, with no coordinator.
 *
 * Each cycle every rank contributes one message (its new submissions since its
 * last message, its join flag and its count of unnamed operations) and an
 * all-gather around the ring gives every rank all n messages. Every rank then
 * applies them, in rank order, to its copy of one replicated table: a name's
 * entry records which ranks submitted it and what each said about it. An entry
 * every rank submitted (or joined past) is ready: its metadata is checked
 * (dtype, count, op, root, members must agree, else an error naming the tensor
 * and the ranks, on every rank), and it is handed to execution in the order the
 * names were first seen. Because the input and the rules are the same
 * everywhere, so are the decisions.
 *
 * The response cache: once a name has been ready, it keeps a bit number, and a
 * rank that submits it again with the same metadata sends that bit instead of
 * the name, so a steady-state step of 161 tensors is ~21 bytes per rank.
 *
 * Pure data structures and functions: no I/O, no clock (times are passed in),
 * unit-tested in tests/unit/test_engine_negotiate.c. */
#ifndef KOLO_COLLECTIVE_NEGOTIATE_H
#define KOLO_COLLECTIVE_NEGOTIATE_H

#include <stddef.h>
#include <stdint.h>

#include "collective/engine/names.h"
#include "kolo/engine.h"

/* What a rank says about a name; the unit of agreement. */
typedef struct kolo_nego_meta {
  uint8_t kind; /* kolo_request_kind */
  uint8_t dtype;
  uint8_t op;
  uint8_t device; /* 1: the buffers are CUDA device memory (the operation runs on NCCL) */
  int32_t root;
  uint32_t members; /* all-reduce: 1, or a group's size */
  uint64_t count;   /* all-reduce/broadcast: elements; reduce-scatter: the total */
  uint64_t aux;     /* hash of a group's member counts / of reduce-scatter's recv counts */
} kolo_nego_meta;

/* ---- messages ---- */

#define KOLO_NEGO_FLAG_JOINED 1u

typedef struct kolo_nego_announce {
  const char *name; /* points into the message (decoded) or the caller's string (to encode) */
  size_t name_length;
  kolo_nego_meta meta;
} kolo_nego_announce;

typedef struct kolo_nego_message {
  uint32_t flags;
  uint64_t unnamed_count; /* unnamed operations this rank has issued so far */
  const uint8_t *bits;    /* cached names newly submitted: bit b = cache entry b */
  uint32_t bit_bytes;
  uint32_t announce_count;
  kolo_nego_announce *announces;
  uint32_t stall_count;       /* names this rank declares stalled (and, name "", unnamed ops) */
  kolo_nego_announce *stalls; /* only name/name_length used */
  uint32_t stall_seconds;     /* the declarer's KOLO_STALL_TIMEOUT */
} kolo_nego_message;

/* A growable byte buffer for encoding. */
typedef struct kolo_nego_buffer {
  uint8_t *data;
  size_t length, capacity;
} kolo_nego_buffer;

void kolo_nego_buffer_free(kolo_nego_buffer *buffer);
/* Appends message's encoding to out (little-endian fields). */
kolo_status kolo_nego_encode(const kolo_nego_message *message, kolo_nego_buffer *out);
/* Decodes data (kept alive by the caller: names and bits point into it). The
 * announce/stall arrays are malloc'd: free with kolo_nego_message_free.
 * KOLO_ERR_PROTOCOL on anything malformed (never reads past length). */
kolo_status kolo_nego_decode(const uint8_t *data, size_t length, kolo_nego_message *out);
void kolo_nego_message_free(kolo_nego_message *message);

/* ---- the replicated table ---- */

typedef struct kolo_nego_entry {
  const char *name;     /* the table's key */
  uint64_t order;       /* when the name was first seen (the execution order) */
  int32_t bit;          /* cache bit, or -1 */
  uint32_t pending;     /* ranks that submitted it this round */
  uint8_t *submitted;   /* size flags */
  uint8_t *has_meta;    /* size flags: meta[r] holds what r last said */
  kolo_nego_meta *meta; /* size entries */
  int64_t since_ns;     /* local time the round began (its first submission seen here) */
  int warned;           /* the stall warning was logged this round */
  struct kolo_nego_entry *pending_next, *pending_prev; /* the list of entries in a round */
} kolo_nego_entry;

/* One name ready this cycle. */
typedef struct kolo_nego_ready {
  char name[KOLO_NAME_MAX + 1];
  kolo_nego_meta meta; /* the agreed metadata (from the lowest submitting rank) */
  kolo_status status;  /* KOLO_OK, KOLO_ERR_MISMATCH, or KOLO_ERR_STATE (joined ranks and
                        * an operation they cannot take part in) */
  char message[KOLO_RESULT_MESSAGE_BYTES];
  uint8_t *submitted; /* size flags: who submitted (the others joined); owned by the decision */
} kolo_nego_ready;

typedef struct kolo_nego_decision {
  kolo_nego_ready *ready; /* in execution order */
  size_t ready_count, ready_capacity;
  uint64_t unnamed_agreed;  /* unnamed operations with a sequence number <= this may run */
  uint64_t unnamed_highest; /* the most any rank has issued */
  int join_done;            /* every rank has joined: their joins complete */
  int last_rank;            /* ... and this rank joined last */
  kolo_status stall;        /* KOLO_ERR_STALLED when a stall was declared (message below) */
  char stall_message[KOLO_RESULT_MESSAGE_BYTES];
  int stall_rank; /* the first missing rank */
} kolo_nego_decision;

typedef struct kolo_nego_table kolo_nego_table;

/* cache_capacity: how many names get a cache bit (later ones are always sent by name). */
kolo_status kolo_nego_table_create(int size, uint32_t cache_capacity, kolo_nego_table **out);
void kolo_nego_table_destroy(kolo_nego_table *table);

/* The entry for name, or NULL. */
const kolo_nego_entry *kolo_nego_lookup(const kolo_nego_table *table, const char *name);
/* Whether rank may send name as a bit: it has a cache bit and rank's last
 * metadata for it equals meta. Returns the bit or -1. */
int32_t kolo_nego_cached_bit(const kolo_nego_table *table, const char *name, int rank,
                             const kolo_nego_meta *meta);
/* Bits in use (a message's bit vector never exceeds (bits + 7) / 8 bytes). */
uint32_t kolo_nego_bits_used(const kolo_nego_table *table);

/* Applies one cycle's messages (messages[r] from rank r) at local time now_ns and
 * fills decision (reset first; its arrays are reused across calls). Returns
 * KOLO_ERR_PROTOCOL when a message refers to a bit that does not exist. */
kolo_status kolo_nego_apply(kolo_nego_table *table, const kolo_nego_message *messages,
                            int64_t now_ns, kolo_nego_decision *decision);
void kolo_nego_decision_free(kolo_nego_decision *decision);

/* Entries some ranks submitted and others did not, oldest first: call for each
 * (stops when fn returns non-zero). */
void kolo_nego_for_each_pending(kolo_nego_table *table,
                                int (*fn)(kolo_nego_entry *entry, void *context), void *context);
/* Whether rank has joined (as of the last cycle), and the ranks' unnamed counts. */
int kolo_nego_joined(const kolo_nego_table *table, int rank);
uint64_t kolo_nego_unnamed_count(const kolo_nego_table *table, int rank);

/* "0,2-4": the ranks whose flag equals want (for messages). */
void kolo_nego_format_ranks(const uint8_t *flags, int size, uint8_t want, char *out, size_t length);

#endif
