/* kolorun's command line: -np N [--timeout S] [--host H] [--mode M [mode options]] [--]
 * program args...
 * Parsing is separate from running so bad usage is reported before anything starts. */
#ifndef KOLO_LAUNCHER_OPTIONS_H
#define KOLO_LAUNCHER_OPTIONS_H

#include <stddef.h>

#include "kolo/mode.h"
#include "kolo/status.h"

/* Upper bound on -np: every rank costs two pipes and a process on one host. */
#define KOLO_LAUNCHER_MAX_RANKS 1024

typedef struct kolo_launcher_options {
  int nprocs;       /* number of ranks, 1..KOLO_LAUNCHER_MAX_RANKS */
  double timeout_s; /* kill everything after this many seconds; 0 = never */
  const char *host; /* address to bind the rendezvous on; also KOLO_HOST when set */
  int host_given;   /* whether --host was on the command line */
  char **program;   /* program and its arguments, NULL-terminated (points into argv) */
  /* --mode and its options (include/kolo/mode.h): every rank gets the KOLO_MODE* environment
   * of this spec; without --mode, the environment kolorun was given passes through. */
  int mode_given;
  kolo_mode_spec mode;
  int help; /* -h/--help was asked for */
} kolo_launcher_options;

/* Parses argv. On bad usage returns KOLO_ERR_INVALID_ARG and writes a one-line
 * reason (no newline) into error. */
kolo_status kolo_launcher_options_parse(int argc, char **argv, kolo_launcher_options *out,
                                        char *error, size_t error_length);

/* The one-line usage text (no newline). */
const char *kolo_launcher_usage(void);

#endif
