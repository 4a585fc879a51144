/* The replicated table of negotiate.h (its messages' codec is nego_codec.c).
 * Every function here is deterministic in its inputs: the same messages applied
 * to the same table give the same decisions on every rank. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/engine/negotiate.h"
#include "collective/exec/exec.h"
#include "common/checks.h"

/* snprintf for messages that may be cut short (names are long, messages bounded). */
static void format_message(char *out, size_t length, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void format_message(char *out, size_t length, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(out, length, fmt, args);
  va_end(args);
}

/* ---- codec ---- */

struct kolo_nego_table {
  int size;
  kolo_names *by_name;
  kolo_nego_entry **by_bit;
  uint32_t bits_used, bit_capacity;
  uint64_t next_order;
  uint64_t cycle;
  kolo_nego_entry *pending_head, *pending_tail;
  uint8_t *joined;
  uint64_t *join_cycle;
  uint64_t *unnamed;
  kolo_nego_entry **ready; /* decide_ready's scratch, reused across cycles */
  size_t ready_capacity;
};

kolo_status kolo_nego_table_create(int size, uint32_t cache_capacity, kolo_nego_table **out) {
  kolo_nego_table *t = calloc(1, sizeof *t);
  if (t == NULL) return KOLO_ERR_NO_MEMORY;
  t->size = size;
  t->bit_capacity = cache_capacity;
  t->joined = calloc((size_t)size, 1);
  t->join_cycle = calloc((size_t)size, sizeof *t->join_cycle);
  t->unnamed = calloc((size_t)size, sizeof *t->unnamed);
  t->by_bit = calloc(cache_capacity ? cache_capacity : 1, sizeof *t->by_bit);
  if (t->joined == NULL || t->join_cycle == NULL || t->unnamed == NULL || t->by_bit == NULL ||
      kolo_names_create(&t->by_name) != KOLO_OK) {
    kolo_nego_table_destroy(t);
    return KOLO_ERR_NO_MEMORY;
  }
  *out = t;
  return KOLO_OK;
}

static void entry_free(kolo_nego_entry *entry) {
  if (entry == NULL) return;
  free(entry->submitted);
  free(entry->has_meta);
  free(entry->meta);
  free(entry);
}

void kolo_nego_table_destroy(kolo_nego_table *t) {
  if (t == NULL) return;
  /* every entry is either cached (by_bit) or pending (the list) */
  for (uint32_t b = 0; b < t->bits_used; b++) {
    if (t->by_bit[b]->pending == 0) entry_free(t->by_bit[b]);
  }
  kolo_nego_entry *entry = t->pending_head;
  while (entry != NULL) {
    kolo_nego_entry *next = entry->pending_next;
    entry_free(entry);
    entry = next;
  }
  kolo_names_destroy(t->by_name);
  free(t->ready);
  free(t->by_bit);
  free(t->joined);
  free(t->join_cycle);
  free(t->unnamed);
  free(t);
}

const kolo_nego_entry *kolo_nego_lookup(const kolo_nego_table *t, const char *name) {
  return kolo_names_get(t->by_name, name);
}

static int meta_equal(const kolo_nego_meta *a, const kolo_nego_meta *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->device == b->device &&
         a->root == b->root && a->members == b->members && a->count == b->count && a->aux == b->aux;
}

int32_t kolo_nego_cached_bit(const kolo_nego_table *t, const char *name, int rank,
                             const kolo_nego_meta *meta) {
  const kolo_nego_entry *entry = kolo_names_get(t->by_name, name);
  if (entry == NULL || entry->bit < 0 || !entry->has_meta[rank]) return -1;
  return meta_equal(&entry->meta[rank], meta) ? entry->bit : -1;
}

uint32_t kolo_nego_bits_used(const kolo_nego_table *t) {
  return t->bits_used;
}
int kolo_nego_joined(const kolo_nego_table *t, int rank) {
  return t->joined[rank];
}
uint64_t kolo_nego_unnamed_count(const kolo_nego_table *t, int rank) {
  return t->unnamed[rank];
}

static kolo_nego_entry *entry_create(kolo_nego_table *t, const char *name, size_t length) {
  char key[KOLO_NAME_MAX + 1];
  memcpy(key, name, length);
  key[length] = '\0';
  kolo_nego_entry *entry = calloc(1, sizeof *entry);
  if (entry == NULL) return NULL;
  entry->submitted = calloc((size_t)t->size, 1);
  entry->has_meta = calloc((size_t)t->size, 1);
  entry->meta = calloc((size_t)t->size, sizeof *entry->meta);
  if (entry->submitted == NULL || entry->has_meta == NULL || entry->meta == NULL ||
      kolo_names_put(t->by_name, key, entry) != KOLO_OK) {
    entry_free(entry);
    return NULL;
  }
  entry->name = kolo_names_key(t->by_name, key);
  entry->order = t->next_order++;
  entry->bit = -1;
  return entry;
}

static void pending_link(kolo_nego_table *t, kolo_nego_entry *entry) {
  entry->pending_prev = t->pending_tail;
  entry->pending_next = NULL;
  if (t->pending_tail)
    t->pending_tail->pending_next = entry;
  else
    t->pending_head = entry;
  t->pending_tail = entry;
}

static void pending_unlink(kolo_nego_table *t, kolo_nego_entry *entry) {
  if (entry->pending_prev)
    entry->pending_prev->pending_next = entry->pending_next;
  else
    t->pending_head = entry->pending_next;
  if (entry->pending_next)
    entry->pending_next->pending_prev = entry->pending_prev;
  else
    t->pending_tail = entry->pending_prev;
  entry->pending_next = entry->pending_prev = NULL;
}

static void submit(kolo_nego_table *t, kolo_nego_entry *entry, int rank, int64_t now_ns) {
  if (entry->submitted[rank]) return;
  entry->submitted[rank] = 1;
  if (entry->pending++ == 0) {
    entry->since_ns = now_ns;
    entry->warned = 0;
    pending_link(t, entry);
  }
}

static kolo_status apply_message(kolo_nego_table *t, int rank, const kolo_nego_message *m,
                                 int64_t now_ns) {
  for (uint32_t byte = 0; byte < m->bit_bytes; byte++) {
    for (int b = 0; b < 8; b++) {
      if (!(m->bits[byte] & (1u << b))) continue;
      uint32_t bit = byte * 8 + (uint32_t)b;
      if (bit >= t->bits_used) return KOLO_ERR_PROTOCOL;
      submit(t, t->by_bit[bit], rank, now_ns);
    }
  }
  for (uint32_t i = 0; i < m->announce_count; i++) {
    const kolo_nego_announce *a = &m->announces[i];
    char key[KOLO_NAME_MAX + 1];
    memcpy(key, a->name, a->name_length);
    key[a->name_length] = '\0';
    kolo_nego_entry *entry = kolo_names_get(t->by_name, key);
    if (entry == NULL) entry = entry_create(t, a->name, a->name_length);
    if (entry == NULL) return KOLO_ERR_NO_MEMORY;
    entry->meta[rank] = a->meta;
    entry->has_meta[rank] = 1;
    submit(t, entry, rank, now_ns);
  }
  return KOLO_OK;
}

void kolo_nego_format_ranks(const uint8_t *flags, int size, uint8_t want, char *out,
                            size_t length) {
  size_t used = 0;
  out[0] = '\0';
  for (int r = 0; r < size; r++) {
    if ((flags[r] != 0) != (want != 0)) continue;
    int end = r;
    while (end + 1 < size && (flags[end + 1] != 0) == (want != 0)) end++;
    int written = end > r ? snprintf(out + used, length - used, "%s%d-%d", used ? "," : "", r, end)
                          : snprintf(out + used, length - used, "%s%d", used ? "," : "", r);
    if (written < 0 || (size_t)written >= length - used) return;
    used += (size_t)written;
    r = end;
  }
}

static const char *kind_name(uint8_t kind) {
  switch (kind) {
    case KOLO_REQUEST_ALLREDUCE:
      return "allreduce";
    case KOLO_REQUEST_ALLGATHER:
      return "allgather";
    case KOLO_REQUEST_BROADCAST:
      return "broadcast";
    case KOLO_REQUEST_REDUCESCATTER:
      return "reducescatter";
    case KOLO_REQUEST_ALLTOALL:
      return "alltoall";
    default:
      return "unknown";
  }
}

/* The fields that must agree for a kind, as (name, value) of meta. */
enum {
  FIELD_KIND,
  FIELD_DTYPE,
  FIELD_DEVICE,
  FIELD_OP,
  FIELD_COUNT,
  FIELD_ROOT,
  FIELD_MEMBERS,
  FIELD_AUX,
  FIELD_COUNT_ALL
};

static int field_applies(uint8_t kind, int field) {
  switch (field) {
    case FIELD_KIND:
    case FIELD_DTYPE:
    case FIELD_DEVICE:
      return 1;
    case FIELD_OP:
      return kind == KOLO_REQUEST_ALLREDUCE || kind == KOLO_REQUEST_REDUCESCATTER;
    case FIELD_COUNT:
      return kind == KOLO_REQUEST_ALLREDUCE || kind == KOLO_REQUEST_BROADCAST ||
             kind == KOLO_REQUEST_REDUCESCATTER;
    case FIELD_ROOT:
      return kind == KOLO_REQUEST_BROADCAST;
    case FIELD_MEMBERS:
      return kind == KOLO_REQUEST_ALLREDUCE;
    case FIELD_AUX:
      return kind == KOLO_REQUEST_ALLREDUCE || kind == KOLO_REQUEST_REDUCESCATTER;
    default:
      return 0;
  }
}

static uint64_t field_value(const kolo_nego_meta *m, int field) {
  switch (field) {
    case FIELD_KIND:
      return m->kind;
    case FIELD_DTYPE:
      return m->dtype;
    case FIELD_DEVICE:
      return m->device;
    case FIELD_OP:
      return m->op;
    case FIELD_COUNT:
      return m->count;
    case FIELD_ROOT:
      return (uint64_t)(uint32_t)m->root;
    case FIELD_MEMBERS:
      return m->members;
    default:
      return m->aux;
  }
}

static void field_text(int field, uint64_t value, char *out, size_t length) {
  static const char *names[] = {"kind",  "dtype", "memory",  "op",
                                "count", "root",  "members", "element counts (hash)"};
  switch (field) {
    case FIELD_KIND:
      snprintf(out, length, "%s", kind_name((uint8_t)value));
      break;
    case FIELD_DTYPE:
      snprintf(out, length, "dtype %s", kolo_dtype_name((kolo_dtype)value));
      break;
    case FIELD_DEVICE:
      snprintf(out, length, "%s memory", value ? "CUDA device" : "host");
      break;
    case FIELD_OP:
      snprintf(out, length, "op %s", kolo_op_name((kolo_op)value));
      break;
    case FIELD_AUX:
      snprintf(out, length, "%s %016llx", names[field], (unsigned long long)value);
      break;
    case FIELD_ROOT:
      snprintf(out, length, "root %d", (int)(int32_t)(uint32_t)value);
      break;
    default:
      snprintf(out, length, "%s %llu", names[field], (unsigned long long)value);
      break;
  }
}

/* Lists, for one field, which ranks said what: " count 10 on ranks 0,2 but 12
 * on rank 1". */
static void describe_field(const kolo_nego_table *t, const kolo_nego_entry *entry, int field,
                           uint8_t *done, uint8_t *same, char *out, size_t length) {
  int n = t->size, groups = 0;
  size_t used = strlen(out);
  memset(done, 0, (size_t)n);
  for (int r = 0; r < n && used + 1 < length; r++) {
    if (!entry->submitted[r] || done[r]) continue;
    uint64_t value = field_value(&entry->meta[r], field);
    int count = 0;
    for (int q = 0; q < n; q++) {
      same[q] = q >= r && entry->submitted[q] && field_value(&entry->meta[q], field) == value;
      if (same[q]) done[q] = 1, count++;
    }
    char ranks[160], text[96];
    kolo_nego_format_ranks(same, n, 1, ranks, sizeof ranks);
    field_text(field, value, text, sizeof text);
    int written = snprintf(out + used, length - used, "%s %s on rank%s %s",
                           groups == 0   ? ""
                           : groups == 1 ? " but"
                                         : ";",
                           text, count > 1 ? "s" : "", ranks);
    if (written < 0) return;
    used += (size_t)written < length - used ? (size_t)written : length - used - 1;
    groups++;
  }
}

/* "tensor 'x': count 10 on ranks 0,2 but 12 on rank 1" for the first field the
 * submitting ranks disagree on; 0 when they all agree. */
static int describe_mismatch(const kolo_nego_table *t, const kolo_nego_entry *entry,
                             const kolo_nego_meta *base, char *out, size_t length) {
  int all_equal = 1; /* the common case, decided without the per-field walk */
  for (int r = 0; r < t->size && all_equal; r++) {
    all_equal = !entry->submitted[r] || meta_equal(&entry->meta[r], base);
  }
  if (all_equal) return 0;
  for (int field = 0; field < FIELD_COUNT_ALL; field++) {
    if (!field_applies(base->kind, field)) continue;
    int differs = 0;
    for (int r = 0; r < t->size; r++) {
      differs |=
          entry->submitted[r] && field_value(&entry->meta[r], field) != field_value(base, field);
    }
    if (!differs) continue;
    uint8_t *scratch = calloc(2 * (size_t)t->size, 1);
    format_message(out, length, "tensor '%s':", entry->name);
    if (scratch != NULL) describe_field(t, entry, field, scratch, scratch + t->size, out, length);
    free(scratch);
    return 1;
  }
  return 0;
}

/* Whether a ready entry cannot run with the joined ranks taking part (then out
 * says why). On host buffers all-reduce and reduce-scatter (neutral values),
 * all-gather and all-to-all (no elements from a joined rank) and a broadcast
 * from a rank that has not joined can; nothing on device buffers can. */
static int joined_state_error(const kolo_nego_table *t, const kolo_nego_entry *entry,
                              const kolo_nego_meta *m, char *out, size_t length) {
  int any_joined = 0;
  for (int r = 0; r < t->size; r++) any_joined |= !entry->submitted[r];
  if (!any_joined) return 0;
  char ranks[160];
  kolo_nego_format_ranks(entry->submitted, t->size, 0, ranks, sizeof ranks);
  if (m->device) { /* a joined rank has no device buffer to take part with */
    format_message(out, length,
                   "tensor '%s': %s of CUDA buffers cannot run while rank(s) %s "
                   "have joined",
                   entry->name, kind_name(m->kind), ranks);
    return 1;
  }
  if (m->kind == KOLO_REQUEST_BROADCAST) {
    if (m->root >= 0 && m->root < t->size && entry->submitted[m->root]) return 0;
    format_message(out, length, "tensor '%s': broadcast root %d has joined", entry->name, m->root);
    return 1;
  }
  return 0;
}

static int ready_in_table(const kolo_nego_table *t, const kolo_nego_entry *entry) {
  for (int r = 0; r < t->size; r++) {
    if (!entry->submitted[r] && !t->joined[r]) return 0;
  }
  return 1;
}

static int by_order(const void *a, const void *b) {
  const kolo_nego_entry *x = *(kolo_nego_entry *const *)a, *y = *(kolo_nego_entry *const *)b;
  return x->order < y->order ? -1 : x->order > y->order;
}

static kolo_status grow_decision(kolo_nego_decision *d, size_t need, int size) {
  if (need <= d->ready_capacity) return KOLO_OK;
  size_t capacity = d->ready_capacity ? d->ready_capacity : 64;
  while (capacity < need) capacity *= 2;
  kolo_nego_ready *ready = realloc(d->ready, capacity * sizeof *ready);
  if (ready == NULL) return KOLO_ERR_NO_MEMORY;
  d->ready = ready;
  for (size_t i = d->ready_capacity; i < capacity; i++) {
    ready[i].submitted = calloc((size_t)size, 1);
    if (ready[i].submitted == NULL) {
      d->ready_capacity = i;
      return KOLO_ERR_NO_MEMORY;
    }
    d->ready_capacity = i + 1;
  }
  return KOLO_OK;
}

void kolo_nego_decision_free(kolo_nego_decision *d) {
  for (size_t i = 0; i < d->ready_capacity; i++) free(d->ready[i].submitted);
  free(d->ready);
  *d = (kolo_nego_decision){0};
}

/* Turns one ready entry into a decision record and closes its round; a name
 * without a cache bit leaves the table. */
static void decide_entry(kolo_nego_table *t, kolo_nego_entry *entry, kolo_nego_ready *out) {
  int lowest = 0;
  while (!entry->submitted[lowest]) lowest++;
  out->meta = entry->meta[lowest];
  size_t length = strlen(entry->name); /* <= KOLO_NAME_MAX: the table's keys are checked names */
  memcpy(out->name, entry->name, length + 1);
  memcpy(out->submitted, entry->submitted, (size_t)t->size);
  out->status = KOLO_OK;
  out->message[0] = '\0';
  if (describe_mismatch(t, entry, &out->meta, out->message, sizeof out->message)) {
    out->status = KOLO_ERR_MISMATCH;
  } else if (entry->pending < (uint32_t)t->size &&
             joined_state_error(t, entry, &out->meta, out->message, sizeof out->message)) {
    out->status = KOLO_ERR_STATE;
  }
  memset(entry->submitted, 0, (size_t)t->size);
  entry->pending = 0;
  pending_unlink(t, entry);
  if (entry->bit < 0 && out->status == KOLO_OK && t->bits_used < t->bit_capacity) {
    entry->bit = (int32_t)t->bits_used;
    t->by_bit[t->bits_used++] = entry;
  }
  if (entry->bit < 0) {
    kolo_names_remove(t->by_name, out->name);
    entry_free(entry);
  }
}

static kolo_status decide_ready(kolo_nego_table *t, kolo_nego_decision *d) {
  size_t count = 0;
  int sorted = 1;
  for (kolo_nego_entry *e = t->pending_head; e; e = e->pending_next) {
    if (!ready_in_table(t, e)) continue;
    if (count == t->ready_capacity) {
      size_t capacity = t->ready_capacity ? 2 * t->ready_capacity : 256;
      kolo_nego_entry **grown = realloc(t->ready, capacity * sizeof *grown);
      if (grown == NULL) return KOLO_ERR_NO_MEMORY;
      t->ready = grown;
      t->ready_capacity = capacity;
    }
    sorted &= count == 0 || t->ready[count - 1]->order < e->order;
    t->ready[count++] = e;
  }
  if (count == 0) return KOLO_OK;
  KOLO_CHECK(grow_decision(d, count, t->size));
  /* in steady state the round's entries arrive in bit order, which is their order */
  if (!sorted) qsort(t->ready, count, sizeof *t->ready, by_order);
  for (size_t i = 0; i < count; i++) decide_entry(t, t->ready[i], &d->ready[d->ready_count++]);
  return KOLO_OK;
}

/* The first stall any rank declared that still holds, as the decision's error. */
static void decide_stalls(kolo_nego_table *t, const kolo_nego_message *messages,
                          kolo_nego_decision *d) {
  int n = t->size;
  uint8_t *flags = calloc((size_t)n, 1);
  if (flags == NULL) return;
  for (int r = 0; r < n && d->stall == KOLO_OK; r++) {
    for (uint32_t i = 0; i < messages[r].stall_count && d->stall == KOLO_OK; i++) {
      const kolo_nego_announce *s = &messages[r].stalls[i];
      char have[160], missing[160];
      if (s->name_length == 0) {
        if (d->unnamed_agreed == d->unnamed_highest) continue;
        for (int q = 0; q < n; q++) flags[q] = t->unnamed[q] > d->unnamed_agreed;
        kolo_nego_format_ranks(flags, n, 1, have, sizeof have);
        kolo_nego_format_ranks(flags, n, 0, missing, sizeof missing);
        format_message(
            d->stall_message, sizeof d->stall_message,
            "stalled: unnamed operation #%llu was issued by rank(s) %s but not by rank(s) %s "
            "(declared by rank %d after %u s)",
            (unsigned long long)(d->unnamed_agreed + 1), have, missing, r,
            messages[r].stall_seconds);
      } else {
        char key[KOLO_NAME_MAX + 1];
        memcpy(key, s->name, s->name_length);
        key[s->name_length] = '\0';
        kolo_nego_entry *entry = kolo_names_get(t->by_name, key);
        if (entry == NULL || entry->pending == 0) continue;
        kolo_nego_format_ranks(entry->submitted, n, 1, have, sizeof have);
        kolo_nego_format_ranks(entry->submitted, n, 0, missing, sizeof missing);
        memcpy(flags, entry->submitted, (size_t)n);
        format_message(d->stall_message, sizeof d->stall_message,
                       "stalled: tensor '%s' was submitted by rank(s) %s but not by rank(s) %s "
                       "(declared by rank %d after %u s)",
                       key, have, missing, r, messages[r].stall_seconds);
      }
      d->stall = KOLO_ERR_STALLED;
      d->stall_rank = 0;
      while (d->stall_rank < n - 1 && flags[d->stall_rank]) d->stall_rank++;
    }
  }
  free(flags);
}

static void decide_join(kolo_nego_table *t, kolo_nego_decision *d) {
  int all = 1, last = -1;
  for (int r = 0; r < t->size; r++) {
    all &= t->joined[r];
    if (t->joined[r] && (last < 0 || t->join_cycle[r] >= t->join_cycle[last])) last = r;
  }
  if (!all) return;
  d->join_done = 1;
  d->last_rank = last;
  memset(t->joined, 0, (size_t)t->size);
}

kolo_status kolo_nego_apply(kolo_nego_table *t, const kolo_nego_message *messages, int64_t now_ns,
                            kolo_nego_decision *d) {
  d->ready_count = 0;
  d->join_done = 0;
  d->last_rank = -1;
  d->stall = KOLO_OK;
  d->stall_message[0] = '\0';
  d->stall_rank = -1;
  t->cycle++;
  for (int r = 0; r < t->size; r++) {
    int joined = (messages[r].flags & KOLO_NEGO_FLAG_JOINED) != 0;
    if (joined && !t->joined[r]) t->join_cycle[r] = t->cycle;
    t->joined[r] = (uint8_t)joined;
    t->unnamed[r] = messages[r].unnamed_count;
  }
  for (int r = 0; r < t->size; r++) {
    kolo_status status = apply_message(t, r, &messages[r], now_ns);
    if (status != KOLO_OK) return status;
  }
  kolo_status status = decide_ready(t, d);
  if (status != KOLO_OK) return status;
  d->unnamed_agreed = d->unnamed_highest = t->unnamed[0];
  for (int r = 1; r < t->size; r++) {
    if (t->unnamed[r] < d->unnamed_agreed) d->unnamed_agreed = t->unnamed[r];
    if (t->unnamed[r] > d->unnamed_highest) d->unnamed_highest = t->unnamed[r];
  }
  decide_stalls(t, messages, d);
  decide_join(t, d);
  return KOLO_OK;
}

void kolo_nego_for_each_pending(kolo_nego_table *t,
                                int (*fn)(kolo_nego_entry *entry, void *context), void *context) {
  for (kolo_nego_entry *e = t->pending_head; e; e = e->pending_next) {
    if (fn(e, context)) return;
  }
}
