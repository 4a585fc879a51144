/* The agent protocol: the one definition of the text lines that kolo-worker's
 * agent and the training process it runs (libkolo's kolo_elastic, and through it
 * kolo-train and the Python package) exchange over the agent's unix socket. One
 * line per message, fields separated by single spaces, no control characters:
 *
 *   process -> agent  HELLO <pid> <version>
 *                     FORMED <epoch> <rank> <size>
 *                     FAILED <epoch> <status_name> <failed_rank|-1>
 *                     REPORT <json object>
 *                     MODE <mode>            (version 3: SYNC, ASYNC, LOCAL_SGD or DILOCO)
 *   agent -> process  RING <epoch> <rank> <size> <local_rank> <local_size>
 *                          <timeout_ms> <secret|-> <listen_address> <address_0> ...
 *                          <address_size-1> [planned]
 *                     STOP <reason>
 *                     LEAVE <reason>
 *                     REFUSED <min_version> <max_version> <reason>
 *                     HOLD <reason>          (version 4: start no new collective or commit)
 *                     RELEASE <reason>       (version 4: go on after a HOLD)
 *
 * Versions: 4 is this codec's. Version 1 is the protocol before versions
 * existed: its HELLO is "HELLO <pid>" and every other line is the same, so an
 * agent accepts it as version 1. Version 3 added MODE, the process's
 * acknowledgement of the training mode it runs (include/kolo/mode.h); a process
 * of version 1 or 2 acknowledges nothing (it runs SYNC as far as the agent knows). Version 4 added
 * HOLD and RELEASE, the partition fence's pause inside libkolo (its beat goes on): an agent sends
 * them only to a process whose HELLO said 4 or more, and pauses an older one with SIGSTOP. An
 * agent answers
 * a HELLO whose version it does not speak with REFUSED (the versions it speaks and why) and closes
 * the connection; libkolo then fails kolo_elastic_create with KOLO_ERR_PROTOCOL and both sides log
 * the two versions.
 *
 * Parsing is strict: exact field counts, decimal numbers without signs or
 * spaces checked against their ranges, bounded tokens, a verb only in its own
 * direction; a refused line gets an error that names the field. Formatting
 * validates too (it parses what it wrote), so a formatted line always parses
 * back to the same message. Pure functions: no I/O, no globals. */
#ifndef KOLO_COMMON_AGENT_PROTO_H
#define KOLO_COMMON_AGENT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

#define KOLO_AGENT_PROTOCOL_VERSION 4     /* what this codec speaks */
#define KOLO_AGENT_PROTOCOL_MIN_VERSION 1 /* the oldest an agent accepts (unversioned HELLO) */
#define KOLO_AGENT_PROTOCOL_MAX_VERSION 65535
#define KOLO_AGENT_MAX_LINE (64 * 1024) /* bytes of one line, its newline included */
#define KOLO_AGENT_MAX_RING 65536       /* members of one ring */
#define KOLO_AGENT_MAX_TOKEN 255        /* bytes of a secret, an address or a status name */
#define KOLO_AGENT_MAX_REASON 200       /* bytes of a STOP / LEAVE / REFUSED / HOLD reason */
#define KOLO_AGENT_HOLD_VERSION 4       /* the first version that speaks HOLD and RELEASE */

typedef enum kolo_agent_verb {
  KOLO_AGENT_NONE = 0,
  /* process -> agent */
  KOLO_AGENT_HELLO,
  KOLO_AGENT_FORMED,
  KOLO_AGENT_FAILED,
  KOLO_AGENT_REPORT,
  KOLO_AGENT_MODE, /* version 3 */
  /* agent -> process */
  KOLO_AGENT_RING,
  KOLO_AGENT_STOP,
  KOLO_AGENT_LEAVE,
  KOLO_AGENT_REFUSED,
  KOLO_AGENT_HOLD,    /* version 4 */
  KOLO_AGENT_RELEASE, /* version 4 */
} kolo_agent_verb;

/* Who reads the line: parse refuses a verb sent the wrong way. */
typedef enum kolo_agent_direction {
  KOLO_AGENT_TO_AGENT,   /* lines a process sends */
  KOLO_AGENT_TO_PROCESS, /* lines an agent sends */
} kolo_agent_direction;

typedef struct kolo_agent_ring {
  uint64_t epoch;             /* 0 .. INT64_MAX (the ring record's JSON integer) */
  int rank, size;             /* 0 <= rank < size <= KOLO_AGENT_MAX_RING */
  int local_rank, local_size; /* 0 <= local_rank < local_size <= size */
  int timeout_ms;             /* 0 .. INT32_MAX */
  const char *secret;         /* "" = none ("-" on the wire) */
  const char *listen_address;
  const char *const *peers; /* size addresses, rank order */
  int planned;              /* a drained member leaves: switch at the next commit */
} kolo_agent_ring;

/* One message. Parsed messages point into storage owned by the message (free
 * with kolo_agent_msg_clear); a message to format points at the caller's data. */
typedef struct kolo_agent_msg {
  kolo_agent_verb verb;
  struct {
    int64_t pid; /* 1 .. INT32_MAX */
    int version; /* 1 for an unversioned (version 1) HELLO */
  } hello;
  struct {
    uint64_t epoch;
    int rank, size;
  } formed;
  struct {
    uint64_t epoch;
    const char *status; /* a status name: [A-Z0-9_], 1..KOLO_AGENT_MAX_TOKEN bytes */
    int failed_rank;    /* -1 (none) .. KOLO_AGENT_MAX_RING - 1 */
  } failed;
  struct {
    int mode; /* a kolo_mode (include/kolo/mode.h); its name on the wire */
  } mode;
  kolo_agent_ring ring;
  struct {
    int min_version, max_version; /* what the refusing agent speaks */
  } refused;
  /* REPORT: a JSON object's text ('{' .. '}'; the reader parses the JSON).
   * STOP / LEAVE / REFUSED / HOLD / RELEASE: the reason, 1..KOLO_AGENT_MAX_REASON printable
   * bytes. */
  const char *text;
  char *storage_; /* private: the parsed line's copy */
  char **peers_;  /* private: the parsed peer array */
} kolo_agent_msg;

/* The verb's word ("RING"); "?" for none. */
const char *kolo_agent_verb_name(kolo_agent_verb verb);

/* Whether an agent of this codec speaks the version. */
int kolo_agent_version_supported(int version);

/* Parses one line of length bytes (without its newline; a trailing '\r' is an
 * error like any control byte) read in direction. KOLO_OK fills *out (clear it
 * afterwards); KOLO_ERR_PARSE writes a one-line reason naming the verb and the
 * field into error (may be NULL) and leaves *out cleared; KOLO_ERR_NO_MEMORY. */
kolo_status kolo_agent_msg_parse(const char *line, size_t length, kolo_agent_direction direction,
                                 kolo_agent_msg *out, char *error, size_t error_len);

/* Formats msg as one line with its newline into *out (malloc'd, NUL-terminated,
 * the caller frees it). KOLO_ERR_INVALID_ARG with a reason in error when the
 * message would not parse back (a field out of range, a space in a token). */
kolo_status kolo_agent_msg_format(const kolo_agent_msg *msg, char **out, char *error,
                                  size_t error_len);

/* Whether two messages say the same (the fields of their verb). */
int kolo_agent_msg_equal(const kolo_agent_msg *a, const kolo_agent_msg *b);

/* Frees what a parse stored and zeroes the message; safe on a zeroed one. */
void kolo_agent_msg_clear(kolo_agent_msg *msg);

#endif
