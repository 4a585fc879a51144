/* Test-side control of helper processes (coord_holder, coord_candidate): spawn
 * one with a pipe on its stdin and stdout, read its lines with a deadline, send
 * it commands, SIGKILL/SIGSTOP it. The child dies with the test (PDEATHSIG). */
#ifndef KOLO_TESTS_COORD_CHILD_H
#define KOLO_TESTS_COORD_CHILD_H

#include <sys/types.h>

typedef struct coord_child {
  pid_t pid;
  int in;  /* write end of the child's stdin */
  int out; /* read end of the child's stdout */
  char buf[4096];
  size_t len;
} coord_child;

/* Starts $KOLO_TEST_DIR/<program> (or ./<program>) with argv (NULL-terminated,
 * argv[0] included). Returns 0 on success. */
int coord_child_start(coord_child *child, const char *program, const char *const *argv);

/* Reads the next line (without '\n') into line within timeout_ms; 0 on success. */
int coord_child_read_line(coord_child *child, char *line, size_t size, int timeout_ms);

/* Reads lines until one starts with prefix (copied to line); 0 on success. */
int coord_child_expect(coord_child *child, const char *prefix, char *line, size_t size,
                       int timeout_ms);

/* Writes one command line to the child's stdin. */
int coord_child_send(coord_child *child, const char *line);

/* Sends sig to the child. */
void coord_child_signal(coord_child *child, int sig);

/* SIGKILLs the child if running, reaps it, closes the pipes. */
void coord_child_stop(coord_child *child);

#endif
