/* kolo-train's command line: the flag table, its parser and the defaults it
 * starts from. It is a library of its own (kolo_train_flags, no BLAS, no ring)
 * so that kolo-server checks a builtin job's arguments with the very parser
 * kolo-train will run, and the two never drift. */
#ifndef KOLO_TRAIN_FLAGS_H
#define KOLO_TRAIN_FLAGS_H

#include <stdint.h>

#include "worker/train/trainer.h"

/* kolo-train's exit status for a usage error (a bad flag or value): the
 * scheduler fails the job at once with the process's message instead of
 * re-planning it as a lost worker. Same as getopt tools and Python's argparse. */
#define KOLO_TRAIN_EXIT_USAGE 2

/* What was wrong with the command line. */
typedef struct kolo_train_flag_error {
  int arg;           /* index into argv of the offending argument; -1 = the whole line */
  char message[256]; /* one line, no "kolo-train: " prefix, no newline */
} kolo_train_flag_error;

/* Fills config (start from kolo_train_config_defaults) and *threads from argv.
 * Returns 0, 1 for --help, -1 on a bad flag with *err filled. config keeps
 * pointers into argv. Uses getopt_long under a lock: safe from any thread; argv
 * may be permuted. */
int kolo_train_flags_parse(int argc, char **argv, kolo_train_config *config, uint64_t *threads,
                           kolo_train_flag_error *err);

/* Whether a --dataset value names a kind kolo-train knows (fashion-mnist,
 * synthetic, idx:<dir>, csv:<file>, libsvm:<file>); files are not opened. */
int kolo_train_dataset_name_valid(const char *name);

#endif
