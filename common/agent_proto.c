/* Implementation of agent_proto.h: a strict tokenizer over one copied line,
 * one parse function per message, and a formatter that re-parses what it wrote
 * so the two can never disagree about what a valid line is. */
#define _GNU_SOURCE
#include "common/agent_proto.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kolo/mode.h"

static const struct {
  kolo_agent_verb verb;
  const char *name;
  kolo_agent_direction direction;
} verbs[] = {
    {KOLO_AGENT_HELLO, "HELLO", KOLO_AGENT_TO_AGENT},
    {KOLO_AGENT_FORMED, "FORMED", KOLO_AGENT_TO_AGENT},
    {KOLO_AGENT_FAILED, "FAILED", KOLO_AGENT_TO_AGENT},
    {KOLO_AGENT_REPORT, "REPORT", KOLO_AGENT_TO_AGENT},
    {KOLO_AGENT_MODE, "MODE", KOLO_AGENT_TO_AGENT},
    {KOLO_AGENT_RING, "RING", KOLO_AGENT_TO_PROCESS},
    {KOLO_AGENT_STOP, "STOP", KOLO_AGENT_TO_PROCESS},
    {KOLO_AGENT_LEAVE, "LEAVE", KOLO_AGENT_TO_PROCESS},
    {KOLO_AGENT_REFUSED, "REFUSED", KOLO_AGENT_TO_PROCESS},
    {KOLO_AGENT_HOLD, "HOLD", KOLO_AGENT_TO_PROCESS},
    {KOLO_AGENT_RELEASE, "RELEASE", KOLO_AGENT_TO_PROCESS},
};

const char *kolo_agent_verb_name(kolo_agent_verb verb) {
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
    if (verbs[i].verb == verb) return verbs[i].name;
  return "?";
}

int kolo_agent_version_supported(int version) {
  return version >= KOLO_AGENT_PROTOCOL_MIN_VERSION && version <= KOLO_AGENT_PROTOCOL_VERSION;
}

/* ---- parsing ---- */

typedef struct parser {
  char *cursor; /* the rest of the line; NULL when used up */
  const char *verb;
  char *error;
  size_t error_len;
} parser;

static kolo_status fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static kolo_status fail(parser *p, const char *fmt, ...) {
  if (p->error != NULL && p->error_len > 0) {
    int used = snprintf(p->error, p->error_len, "%s: ", p->verb);
    if (used >= 0 && (size_t)used < p->error_len) {
      va_list args;
      va_start(args, fmt);
      vsnprintf(p->error + used, p->error_len - (size_t)used, fmt, args);
      va_end(args);
    }
  }
  return KOLO_ERR_PARSE;
}

/* The next space-separated field, NUL-terminated in place; NULL when none is left. */
static char *next_field(parser *p) {
  if (p->cursor == NULL) return NULL;
  char *field = p->cursor;
  char *space = strchr(field, ' ');
  if (space != NULL) {
    *space = '\0';
    p->cursor = space + 1;
  } else {
    p->cursor = NULL;
  }
  return field;
}

static kolo_status field(parser *p, const char *name, char **out) {
  *out = next_field(p);
  if (*out == NULL) return fail(p, "missing field '%s'", name);
  if (**out == '\0') return fail(p, "empty field '%s' (fields are separated by one space)", name);
  return KOLO_OK;
}

/* A decimal in [min, max]: digits only ("-1" when min is -1), no leading zeros. */
static kolo_status number(parser *p, const char *name, int64_t min, int64_t max, int64_t *out) {
  char *text;
  kolo_status status = field(p, name, &text);
  if (status != KOLO_OK) return status;
  int negative = text[0] == '-' && min < 0;
  const char *digits = text + negative;
  size_t n = strspn(digits, "0123456789");
  if (n == 0 || digits[n] != '\0' || n > 19 || (n > 1 && digits[0] == '0'))
    return fail(p, "field '%s' is not a decimal number: '%.40s'", name, text);
  errno = 0;
  unsigned long long value = strtoull(digits, NULL, 10);
  if (errno == ERANGE || value > (unsigned long long)INT64_MAX)
    return fail(p, "field '%s' is out of range: %.40s", name, text);
  if (negative && value == 0)
    return fail(p, "field '%s' is not a decimal number: '%.40s'", name, text);
  int64_t signed_value = negative ? -(int64_t)value : (int64_t)value;
  if (signed_value < min || signed_value > max)
    return fail(p, "field '%s' is %" PRId64 ", want %" PRId64 "..%" PRId64, name, signed_value, min,
                max);
  *out = signed_value;
  return KOLO_OK;
}

static kolo_status int_field(parser *p, const char *name, int min, int max, int *out) {
  int64_t value = 0;
  kolo_status status = number(p, name, min, max, &value);
  if (status == KOLO_OK) *out = (int)value;
  return status;
}

static kolo_status token(parser *p, const char *name, const char **out) {
  char *text;
  kolo_status status = field(p, name, &text);
  if (status != KOLO_OK) return status;
  if (strlen(text) > KOLO_AGENT_MAX_TOKEN)
    return fail(p, "field '%s' is longer than %d bytes", name, KOLO_AGENT_MAX_TOKEN);
  *out = text;
  return KOLO_OK;
}

static kolo_status end_of_line(parser *p) {
  if (p->cursor != NULL) return fail(p, "unexpected text after the last field: '%.40s'", p->cursor);
  return KOLO_OK;
}

/* The rest of the line as one text of 1..max bytes. */
static kolo_status rest(parser *p, const char *name, size_t max, const char **out) {
  char *text = p->cursor;
  p->cursor = NULL;
  if (text == NULL || *text == '\0') return fail(p, "missing %s", name);
  if (strlen(text) > max) return fail(p, "%s is longer than %zu bytes", name, max);
  *out = text;
  return KOLO_OK;
}

#define TRY(call)                                   \
  do {                                              \
    kolo_status try_status_ = (call);               \
    if (try_status_ != KOLO_OK) return try_status_; \
  } while (0)

static kolo_status parse_hello(parser *p, kolo_agent_msg *m) {
  TRY(number(p, "pid", 1, INT32_MAX, &m->hello.pid));
  if (p->cursor == NULL) {
    m->hello.version = 1; /* the protocol before versions */
    return KOLO_OK;
  }
  TRY(int_field(p, "version", 1, KOLO_AGENT_PROTOCOL_MAX_VERSION, &m->hello.version));
  return end_of_line(p);
}

static kolo_status epoch_field(parser *p, uint64_t *out) {
  int64_t value = 0;
  TRY(number(p, "epoch", 0, INT64_MAX, &value));
  *out = (uint64_t)value;
  return KOLO_OK;
}

static kolo_status rank_and_size(parser *p, int *rank, int *size) {
  TRY(int_field(p, "rank", 0, KOLO_AGENT_MAX_RING - 1, rank));
  TRY(int_field(p, "size", 1, KOLO_AGENT_MAX_RING, size));
  if (*rank >= *size) return fail(p, "rank %d is not below size %d", *rank, *size);
  return KOLO_OK;
}

static kolo_status parse_formed(parser *p, kolo_agent_msg *m) {
  TRY(epoch_field(p, &m->formed.epoch));
  TRY(rank_and_size(p, &m->formed.rank, &m->formed.size));
  return end_of_line(p);
}

static kolo_status parse_failed(parser *p, kolo_agent_msg *m) {
  TRY(epoch_field(p, &m->failed.epoch));
  TRY(token(p, "status", &m->failed.status));
  if (strspn(m->failed.status, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(m->failed.status))
    return fail(p, "field 'status' is not a status name: '%.40s'", m->failed.status);
  TRY(int_field(p, "failed_rank", -1, KOLO_AGENT_MAX_RING - 1, &m->failed.failed_rank));
  return end_of_line(p);
}

static kolo_status parse_report(parser *p, kolo_agent_msg *m) {
  TRY(rest(p, "JSON object", KOLO_AGENT_MAX_LINE, &m->text));
  size_t n = strlen(m->text);
  if (m->text[0] != '{' || m->text[n - 1] != '}') return fail(p, "the report is not a JSON object");
  return KOLO_OK;
}

static kolo_status parse_mode(parser *p, kolo_agent_msg *m) {
  const char *name;
  TRY(token(p, "mode", &name));
  kolo_mode mode;
  if (kolo_mode_parse(name, &mode) != KOLO_OK || strcmp(name, kolo_mode_name(mode)) != 0)
    return fail(p, "field 'mode' is not a mode (SYNC, ASYNC, LOCAL_SGD or DILOCO): '%.40s'", name);
  m->mode.mode = (int)mode;
  return end_of_line(p);
}

static kolo_status parse_ring(parser *p, kolo_agent_msg *m) {
  kolo_agent_ring *r = &m->ring;
  TRY(epoch_field(p, &r->epoch));
  TRY(rank_and_size(p, &r->rank, &r->size));
  TRY(int_field(p, "local_rank", 0, KOLO_AGENT_MAX_RING - 1, &r->local_rank));
  TRY(int_field(p, "local_size", 1, r->size, &r->local_size));
  if (r->local_rank >= r->local_size)
    return fail(p, "local_rank %d is not below local_size %d", r->local_rank, r->local_size);
  TRY(int_field(p, "timeout_ms", 0, INT32_MAX, &r->timeout_ms));
  TRY(token(p, "secret", &r->secret));
  if (strcmp(r->secret, "-") == 0) r->secret = "";
  TRY(token(p, "listen_address", &r->listen_address));
  m->peers_ = calloc((size_t)r->size, sizeof *m->peers_);
  if (m->peers_ == NULL) return KOLO_ERR_NO_MEMORY;
  for (int i = 0; i < r->size; i++) {
    char name[32];
    snprintf(name, sizeof name, "address_%d", i);
    const char *address;
    kolo_status status = token(p, name, &address);
    if (status != KOLO_OK) return status;
    m->peers_[i] = (char *)address;
  }
  r->peers = (const char *const *)m->peers_;
  if (p->cursor != NULL) {
    char *flag = next_field(p);
    if (strcmp(flag, "planned") != 0)
      return fail(p, "want 'planned' or nothing after the %d addresses, got '%.40s'", r->size,
                  flag);
    r->planned = 1;
  }
  return end_of_line(p);
}

static kolo_status parse_refused(parser *p, kolo_agent_msg *m) {
  TRY(int_field(p, "min_version", 1, KOLO_AGENT_PROTOCOL_MAX_VERSION, &m->refused.min_version));
  TRY(int_field(p, "max_version", m->refused.min_version, KOLO_AGENT_PROTOCOL_MAX_VERSION,
                &m->refused.max_version));
  return rest(p, "reason", KOLO_AGENT_MAX_REASON, &m->text);
}

static kolo_status parse_body(parser *p, kolo_agent_msg *m) {
  switch (m->verb) {
    case KOLO_AGENT_HELLO:
      return parse_hello(p, m);
    case KOLO_AGENT_FORMED:
      return parse_formed(p, m);
    case KOLO_AGENT_FAILED:
      return parse_failed(p, m);
    case KOLO_AGENT_REPORT:
      return parse_report(p, m);
    case KOLO_AGENT_MODE:
      return parse_mode(p, m);
    case KOLO_AGENT_RING:
      return parse_ring(p, m);
    case KOLO_AGENT_STOP:
    case KOLO_AGENT_LEAVE:
    case KOLO_AGENT_HOLD:
    case KOLO_AGENT_RELEASE:
      return rest(p, "reason", KOLO_AGENT_MAX_REASON, &m->text);
    case KOLO_AGENT_REFUSED:
      return parse_refused(p, m);
    default:
      return fail(p, "no such verb");
  }
}

/* The verb of the line's first word, checked against the direction. */
static kolo_status parse_verb(parser *p, kolo_agent_direction direction, kolo_agent_msg *m) {
  char *word = next_field(p);
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
    if (strcmp(word, verbs[i].name) != 0) continue;
    p->verb = verbs[i].name;
    if (verbs[i].direction != direction)
      return fail(p, "sent by the %s, not the %s",
                  direction == KOLO_AGENT_TO_AGENT ? "agent" : "process",
                  direction == KOLO_AGENT_TO_AGENT ? "process" : "agent");
    m->verb = verbs[i].verb;
    return KOLO_OK;
  }
  p->verb = "line";
  return fail(p, "unknown verb '%.20s'", word);
}

kolo_status kolo_agent_msg_parse(const char *line, size_t length, kolo_agent_direction direction,
                                 kolo_agent_msg *out, char *error, size_t error_len) {
  if (out == NULL || (line == NULL && length > 0)) return KOLO_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  if (error != NULL && error_len > 0) error[0] = '\0';
  parser p = {.verb = "line", .error = error, .error_len = error_len};
  if (length >= KOLO_AGENT_MAX_LINE)
    return fail(&p, "longer than %d bytes", KOLO_AGENT_MAX_LINE - 1);
  for (size_t i = 0; i < length; i++) {
    unsigned char c = (unsigned char)line[i];
    if (c < 0x20 || c == 0x7f) return fail(&p, "control byte 0x%02x at offset %zu", c, i);
  }
  out->storage_ = malloc(length + 1);
  if (out->storage_ == NULL) return KOLO_ERR_NO_MEMORY;
  memcpy(out->storage_, line, length);
  out->storage_[length] = '\0';
  p.cursor = out->storage_;
  kolo_status status = parse_verb(&p, direction, out);
  if (status == KOLO_OK) status = parse_body(&p, out);
  if (status != KOLO_OK) kolo_agent_msg_clear(out);
  return status;
}

void kolo_agent_msg_clear(kolo_agent_msg *msg) {
  if (msg == NULL) return;
  free(msg->storage_);
  free(msg->peers_);
  memset(msg, 0, sizeof *msg);
}

/* ---- comparing ---- */

static int same_string(const char *a, const char *b) {
  return strcmp(a ? a : "", b ? b : "") == 0;
}

static int same_ring(const kolo_agent_ring *a, const kolo_agent_ring *b) {
  if (a->epoch != b->epoch || a->rank != b->rank || a->size != b->size ||
      a->local_rank != b->local_rank || a->local_size != b->local_size ||
      a->timeout_ms != b->timeout_ms || !a->planned != !b->planned ||
      !same_string(a->secret, b->secret) || !same_string(a->listen_address, b->listen_address))
    return 0;
  if (a->peers == NULL || b->peers == NULL) return a->peers == b->peers;
  for (int i = 0; i < a->size; i++)
    if (!same_string(a->peers[i], b->peers[i])) return 0;
  return 1;
}

int kolo_agent_msg_equal(const kolo_agent_msg *a, const kolo_agent_msg *b) {
  if (a->verb != b->verb) return 0;
  switch (a->verb) {
    case KOLO_AGENT_HELLO:
      return a->hello.pid == b->hello.pid && a->hello.version == b->hello.version;
    case KOLO_AGENT_FORMED:
      return a->formed.epoch == b->formed.epoch && a->formed.rank == b->formed.rank &&
             a->formed.size == b->formed.size;
    case KOLO_AGENT_FAILED:
      return a->failed.epoch == b->failed.epoch &&
             same_string(a->failed.status, b->failed.status) &&
             a->failed.failed_rank == b->failed.failed_rank;
    case KOLO_AGENT_MODE:
      return a->mode.mode == b->mode.mode;
    case KOLO_AGENT_RING:
      return same_ring(&a->ring, &b->ring);
    case KOLO_AGENT_REFUSED:
      if (a->refused.min_version != b->refused.min_version ||
          a->refused.max_version != b->refused.max_version)
        return 0;
      return same_string(a->text, b->text);
    case KOLO_AGENT_REPORT:
    case KOLO_AGENT_STOP:
    case KOLO_AGENT_LEAVE:
    case KOLO_AGENT_HOLD:
    case KOLO_AGENT_RELEASE:
      return same_string(a->text, b->text);
    default:
      return 1;
  }
}

/* ---- formatting ---- */

typedef struct out_buffer {
  char *data;
  size_t length, capacity;
  int failed;
} out_buffer;

static void append(out_buffer *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(out_buffer *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(b->data ? b->data + b->length : NULL, b->data ? b->capacity - b->length : 0,
                      fmt, args);
    va_end(args);
    if (n < 0) {
      b->failed = 1;
      return;
    }
    if (b->data != NULL && b->length + (size_t)n < b->capacity) {
      b->length += (size_t)n;
      return;
    }
    size_t capacity = (b->capacity ? b->capacity * 2 : 256) + (size_t)n;
    char *grown = realloc(b->data, capacity);
    if (grown == NULL) {
      b->failed = 1;
      return;
    }
    b->data = grown;
    b->capacity = capacity;
  }
}

/* A NULL string formats as a missing field, so the re-parse names it. */
static const char *or_empty(const char *s) {
  return s ? s : "";
}

static void format_body(out_buffer *b, const kolo_agent_msg *m) {
  switch (m->verb) {
    case KOLO_AGENT_HELLO:
      append(b, " %" PRId64 " %d", m->hello.pid, m->hello.version);
      break;
    case KOLO_AGENT_FORMED:
      append(b, " %" PRIu64 " %d %d", m->formed.epoch, m->formed.rank, m->formed.size);
      break;
    case KOLO_AGENT_FAILED:
      append(b, " %" PRIu64 " %s %d", m->failed.epoch, or_empty(m->failed.status),
             m->failed.failed_rank);
      break;
    case KOLO_AGENT_MODE:
      append(b, " %s", kolo_mode_name((kolo_mode)m->mode.mode));
      break;
    case KOLO_AGENT_RING: {
      const kolo_agent_ring *r = &m->ring;
      const char *secret = r->secret && r->secret[0] ? r->secret : "-";
      append(b, " %" PRIu64 " %d %d %d %d %d %s %s", r->epoch, r->rank, r->size, r->local_rank,
             r->local_size, r->timeout_ms, secret, or_empty(r->listen_address));
      for (int i = 0; r->peers != NULL && i < r->size && i < KOLO_AGENT_MAX_RING; i++)
        append(b, " %s", or_empty(r->peers[i]));
      if (r->planned) append(b, " planned");
      break;
    }
    case KOLO_AGENT_REFUSED:
      append(b, " %d %d", m->refused.min_version, m->refused.max_version);
      __attribute__((fallthrough)); /* then the reason */
    case KOLO_AGENT_REPORT:
    case KOLO_AGENT_STOP:
    case KOLO_AGENT_LEAVE:
    case KOLO_AGENT_HOLD:
    case KOLO_AGENT_RELEASE:
      if (m->text != NULL && m->text[0] != '\0') append(b, " %s", m->text);
      break;
    default:
      break;
  }
}

kolo_status kolo_agent_msg_format(const kolo_agent_msg *msg, char **out, char *error,
                                  size_t error_len) {
  if (msg == NULL || out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  out_buffer b = {0};
  append(&b, "%s", kolo_agent_verb_name(msg->verb));
  format_body(&b, msg);
  if (b.failed) {
    free(b.data);
    return KOLO_ERR_NO_MEMORY;
  }
  kolo_agent_direction direction =
      msg->verb >= KOLO_AGENT_RING ? KOLO_AGENT_TO_PROCESS : KOLO_AGENT_TO_AGENT;
  kolo_agent_msg check = {0}; /* parse may return before it clears it */
  kolo_status status = kolo_agent_msg_parse(b.data, b.length, direction, &check, error, error_len);
  if (status == KOLO_OK && !kolo_agent_msg_equal(&check, msg)) {
    status = KOLO_ERR_PARSE; /* e.g. a space inside an address: it would read back as two */
    if (error != NULL && error_len > 0)
      snprintf(error, error_len, "%s: a field holds a space or is not in its canonical form",
               kolo_agent_verb_name(msg->verb));
  }
  kolo_agent_msg_clear(&check);
  if (status == KOLO_OK) append(&b, "\n");
  if (status == KOLO_OK && b.failed) status = KOLO_ERR_NO_MEMORY;
  if (status == KOLO_ERR_PARSE) status = KOLO_ERR_INVALID_ARG;
  if (status != KOLO_OK) {
    free(b.data);
    return status;
  }
  *out = b.data;
  return KOLO_OK;
}
