/* common/machine_ranks.c with real processes and files: children register in a
 * private directory and hold their registration until told to go; the parent's
 * count sees each live process once (two registrations in one process count once),
 * a SIGKILLed child's registration stops counting and its file is removed, a
 * destroyed one's file is gone, hidden temporaries and foreign names are not
 * counted, and a directory that cannot be read counts -1. */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/machine_ranks.h"

typedef struct child {
  pid_t pid;
  int go; /* write end: closing it lets the child exit */
} child;

/* A child that registers in dir, says so on a pipe, and holds it until go closes. */
static child start_child(const char *dir) {
  int ready[2], go[2];
  assert_int_equal(pipe(ready), 0);
  assert_int_equal(pipe(go), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* keep only its own pipe ends: the earlier children's go ends too */
    for (int fd = 3; fd < 1024; fd++)
      if (fd != ready[1] && fd != go[0]) close(fd);
    kolo_machine_ranks *r = NULL;
    char ok = kolo_machine_ranks_create(dir, &r) == KOLO_OK ? 'y' : 'n';
    if (write(ready[1], &ok, 1) != 1) _exit(2);
    char byte;
    while (read(go[0], &byte, 1) > 0) {
    }
    kolo_machine_ranks_destroy(r);
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char ok = 0;
  assert_int_equal(read(ready[0], &ok, 1), 1);
  assert_int_equal(ok, 'y');
  close(ready[0]);
  return (child){pid, go[1]};
}

static void stop_child(child *c) {
  close(c->go);
  int status = 0;
  assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
}

/* Files in dir that do not start with '.'. */
static int visible_files(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static char *make_dir(void) {
  char *dir = strdup("/tmp/kolo-test-ranks-XXXXXX");
  assert_non_null(mkdtemp(dir));
  return dir;
}

static void remove_dir(char *dir) {
  char command[256];
  snprintf(command, sizeof command, "rm -rf '%s'", dir);
  assert_int_equal(system(command), 0);
  free(dir);
}

static void every_live_process_counts_once(void **state) {
  (void)state;
  char *dir = make_dir();
  kolo_machine_ranks *mine = NULL, *second = NULL;
  assert_int_equal(kolo_machine_ranks_create(dir, &mine), KOLO_OK);
  assert_int_equal(kolo_machine_ranks_count(mine), 1);
  child kids[3];
  for (int i = 0; i < 3; i++) kids[i] = start_child(dir);
  assert_int_equal(kolo_machine_ranks_count(mine), 4);
  /* a second communicator in this process: still one process */
  assert_int_equal(kolo_machine_ranks_create(dir, &second), KOLO_OK);
  assert_int_equal(kolo_machine_ranks_count(mine), 4);
  assert_int_equal(visible_files(dir), 5);
  kolo_machine_ranks_destroy(second);
  assert_int_equal(visible_files(dir), 4);
  for (int i = 0; i < 3; i++) stop_child(&kids[i]);
  assert_int_equal(kolo_machine_ranks_count(mine), 1);
  kolo_machine_ranks_destroy(mine);
  assert_int_equal(visible_files(dir), 0);
  remove_dir(dir);
}

static void a_killed_process_stops_counting_and_its_file_goes(void **state) {
  (void)state;
  char *dir = make_dir();
  kolo_machine_ranks *mine = NULL;
  assert_int_equal(kolo_machine_ranks_create(dir, &mine), KOLO_OK);
  child a = start_child(dir), b = start_child(dir);
  assert_int_equal(kolo_machine_ranks_count(mine), 3);
  kill(a.pid, SIGKILL); /* no destroy: its file stays, unlocked */
  assert_int_equal(waitpid(a.pid, NULL, 0), a.pid);
  close(a.go);
  assert_int_equal(visible_files(dir), 3);
  assert_int_equal(kolo_machine_ranks_count(mine), 2);
  assert_int_equal(visible_files(dir), 2); /* the count removed it */
  stop_child(&b);
  kolo_machine_ranks_destroy(mine);
  remove_dir(dir);
}

static void temporaries_and_foreign_names_do_not_count(void **state) {
  (void)state;
  char *dir = make_dir();
  kolo_machine_ranks *mine = NULL;
  assert_int_equal(kolo_machine_ranks_create(dir, &mine), KOLO_OK);
  const char *names[] = {".tmp-abcdef", "notes.txt", "-1-x", "0-x", "12345"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
  }
  assert_int_equal(kolo_machine_ranks_count(mine), 1);
  assert_int_equal(visible_files(dir), 5); /* left alone: not registrations */
  kolo_machine_ranks_destroy(mine);
  remove_dir(dir);
}

static void a_directory_that_cannot_be_used_gives_no_count(void **state) {
  (void)state;
  kolo_machine_ranks *r = NULL;
  assert_int_not_equal(kolo_machine_ranks_create("/proc/kolo-no-such/dir", &r), KOLO_OK);
  assert_null(r);
  assert_int_equal(kolo_machine_ranks_count(NULL), -1);
  assert_int_equal(kolo_machine_ranks_create(NULL, &r), KOLO_ERR_INVALID_ARG);
  kolo_machine_ranks_destroy(NULL);
  char buffer[64];
  setenv("KOLO_RANKS_DIR", "/tmp/somewhere", 1);
  assert_string_equal(kolo_machine_ranks_dir(buffer, sizeof buffer), "/tmp/somewhere");
  unsetenv("KOLO_RANKS_DIR");
  assert_int_equal(strncmp(kolo_machine_ranks_dir(buffer, sizeof buffer), "/tmp/kolo-ranks-", 16),
                   0);
  /* a symbolic link where the directory should be is refused */
  char *dir = make_dir(), link_path[512];
  snprintf(link_path, sizeof link_path, "%s/link", dir);
  assert_int_equal(symlink(dir, link_path), 0);
  assert_int_not_equal(kolo_machine_ranks_create(link_path, &r), KOLO_OK);
  assert_null(r);
  remove_dir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_live_process_counts_once),
      cmocka_unit_test(a_killed_process_stops_counting_and_its_file_goes),
      cmocka_unit_test(temporaries_and_foreign_names_do_not_count),
      cmocka_unit_test(a_directory_that_cannot_be_used_gives_no_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
