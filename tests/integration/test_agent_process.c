/* The agent's end of the agent protocol (worker/agent/process.c) with a real
 * child process: a HELLO of this codec's version and an unversioned (version 1)
 * HELLO are accepted and handed on parsed; a HELLO of a version the agent does
 * not speak is answered with REFUSED naming the versions, the connection is
 * closed and nothing is handed on; malformed lines are dropped; the shared memory
 * of a killed process is removed when it is reaped. The child is a small Python
 * program that writes what it is told and what it hears. */
#include <poll.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "worker/agent/process.h"

/* Sends argv[1] (lines, \n-separated) to the agent, then writes every line it
 * hears to argv[2] once the agent closes, says STOP, or 5 s pass. */
static const char *child =
    "import os, socket, sys, time\n"
    "c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "c.connect(os.environ['KOLO_AGENT_SOCKET'])\n"
    "c.sendall(sys.argv[1].replace('PID', str(os.getpid())).encode())\n"
    "c.settimeout(5)\n"
    "heard = b''\n"
    "try:\n"
    "    while True:\n"
    "        chunk = c.recv(4096)\n"
    "        if not chunk: break\n"
    "        heard += chunk\n"
    "        if heard.startswith(b'STOP') and heard.endswith(b'\\n'): break\n"
    "except OSError: pass\n"
    "open(sys.argv[2], 'wb').write(heard)\n";

typedef struct heard {
  int hellos, reports, others;
  int version;
  long long pid;
} heard;

static void on_msg(const kolo_agent_msg *msg, void *user) {
  heard *h = user;
  if (msg->verb == KOLO_AGENT_HELLO) {
    h->hellos++;
    h->version = msg->hello.version;
    h->pid = (long long)msg->hello.pid;
  } else if (msg->verb == KOLO_AGENT_REPORT) {
    h->reports++;
  } else {
    h->others++;
  }
}

typedef struct run {
  char dir[64], out[128];
  kolo_agent_proc *proc;
  heard heard;
} run;

/* Starts the child with the lines to send and services it for up to ms. */
static void start(run *r, const char *lines) {
  memset(r, 0, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "/tmp/kolo-agentproc-XXXXXX");
  assert_non_null(mkdtemp(r->dir));
  snprintf(r->out, sizeof r->out, "%s/heard", r->dir);
  const char *argv[] = {"/usr/bin/python3", "-c", child, lines, r->out, NULL};
  kolo_agent_spawn spawn = {.argv = argv, .work_dir = r->dir, .stdout_fd = -1, .stderr_fd = -1};
  assert_int_equal(kolo_agent_proc_start(&spawn, &r->proc), KOLO_OK);
}

static void service_for(run *r, int ms) {
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long elapsed = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (elapsed >= ms) return;
    int fds[2];
    int n = kolo_agent_proc_poll_fds(r->proc, fds);
    struct pollfd pfd[2];
    for (int i = 0; i < n; i++) pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    poll(pfd, (nfds_t)n, 50);
    kolo_agent_proc_service(r->proc, on_msg, &r->heard);
  }
}

/* Stops the child (STOP, then signals), waits for it, returns what it heard. */
static void remove_children_list(const char *dir) {
  char path[300];
  snprintf(path, sizeof path, "%s/children", dir);
  unlink(path);
}

static char *finish(run *r) {
  kolo_agent_proc_stop(r->proc, "test over", 200);
  int code = 0;
  for (int i = 0; i < 200 && !kolo_agent_proc_reap(r->proc, &code); i++) {
    kolo_agent_proc_tick(r->proc);
    usleep(50000);
  }
  kolo_agent_proc_destroy(r->proc);
  static char text[4096];
  text[0] = '\0';
  FILE *f = fopen(r->out, "r");
  if (f != NULL) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
  }
  unlink(r->out);
  remove_children_list(r->dir);
  rmdir(r->dir);
  return text;
}

static void a_hello_of_this_version_is_accepted_and_handed_on_parsed(void **state) {
  (void)state;
  run r;
  start(&r, "HELLO PID 3\nREPORT {\"step\":1}\n");
  service_for(&r, 3000);
  assert_true(kolo_agent_proc_connected(r.proc));
  assert_int_equal(r.heard.hellos, 1);
  assert_int_equal(r.heard.version, 3);
  assert_int_equal(r.heard.pid, (long long)kolo_agent_proc_pid(r.proc));
  assert_int_equal(r.heard.reports, 1);
  char *text = finish(&r);
  assert_string_equal(text, "STOP test over\n");
}

static void an_unversioned_hello_is_version_one(void **state) {
  (void)state;
  run r;
  start(&r, "HELLO PID\n");
  service_for(&r, 3000);
  assert_true(kolo_agent_proc_connected(r.proc));
  assert_int_equal(r.heard.hellos, 1);
  assert_int_equal(r.heard.version, 1);
  finish(&r);
}

static void a_hello_of_an_unknown_version_is_refused_and_the_connection_closed(void **state) {
  (void)state;
  run r;
  start(&r, "HELLO PID 99\nREPORT {\"step\":1}\n");
  service_for(&r, 3000);
  assert_false(kolo_agent_proc_connected(r.proc));
  assert_int_equal(r.heard.hellos, 0);
  assert_int_equal(r.heard.reports, 0); /* nothing after a refused HELLO */
  char *text = finish(&r), want[128];
  snprintf(want, sizeof want,
           "REFUSED %d %d agent protocol version 99 is not spoken by this kolo-worker\n",
           KOLO_AGENT_PROTOCOL_MIN_VERSION, KOLO_AGENT_PROTOCOL_VERSION);
  assert_string_equal(text, want);
}

static void malformed_lines_are_dropped(void **state) {
  (void)state;
  run r;
  start(
      &r,
      "HELLO PID 2\nFORMED 1 5 2\nREPORT nope\nRING 1 0 1 0 1 0 - a b\nFORMED -1 0 1\nREPORT {}\n");
  service_for(&r, 3000);
  assert_true(kolo_agent_proc_connected(r.proc));
  assert_int_equal(r.heard.hellos, 1);
  assert_int_equal(r.heard.others, 0);
  assert_int_equal(r.heard.reports, 1);
  finish(&r);
}

/* A process SIGKILLed while its ring formed leaves /dev/shm/kolo-<pid>-<nonce>
 * (libkolo unlinks a ring once its peer mapped it): test_chaos found such leaks.
 * Reaping it removes what that pid left, and nothing of another pid's. */
static int shm_exists(const char *name) {
  char path[160];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  return access(path, F_OK) == 0;
}

static void the_shared_memory_of_a_killed_process_is_removed_when_it_is_reaped(void **state) {
  (void)state;
  run r;
  memset(&r, 0, sizeof r);
  snprintf(r.dir, sizeof r.dir, "/tmp/kolo-agentproc-XXXXXX");
  assert_non_null(mkdtemp(r.dir));
  snprintf(r.out, sizeof r.out, "%s/made", r.dir);
  const char *program =
      "import os, sys, time\n"
      "for name in ('kolo-%d-00000000deadbeef' % os.getpid(), 'kolo-%d-0000000000c0ffee' % "
      "os.getpid()):\n"
      "    open('/dev/shm/' + name, 'w').close()\n"
      "open(sys.argv[1], 'w').write('ok')\n"
      "time.sleep(60)\n";
  const char *argv[] = {"/usr/bin/python3", "-c", program, r.out, NULL};
  kolo_agent_spawn spawn = {.argv = argv, .work_dir = r.dir, .stdout_fd = -1, .stderr_fd = -1};
  assert_int_equal(kolo_agent_proc_start(&spawn, &r.proc), KOLO_OK);
  pid_t pid = kolo_agent_proc_pid(r.proc);
  char mine[64], other[64];
  snprintf(mine, sizeof mine, "kolo-%d-00000000deadbeef", (int)pid);
  snprintf(other, sizeof other, "kolo-%d9-00000000deadbeef", (int)pid); /* another pid's: kept */
  char path[160];
  snprintf(path, sizeof path, "/dev/shm/%s", other);
  FILE *o = fopen(path, "w");
  assert_non_null(o);
  fclose(o);
  for (int i = 0; i < 200 && access(r.out, F_OK) != 0; i++) usleep(50000);
  assert_true(shm_exists(mine));
  kill(pid, SIGKILL);
  int code = 0, reaped = 0;
  for (int i = 0; i < 200 && !(reaped = kolo_agent_proc_reap(r.proc, &code)); i++) usleep(50000);
  assert_true(reaped);
  assert_int_equal(code, 128 + SIGKILL);
  assert_false(shm_exists(mine));
  snprintf(mine, sizeof mine, "kolo-%d-0000000000c0ffee", (int)pid);
  assert_false(shm_exists(mine));
  assert_true(shm_exists(other));
  unlink(path);
  kolo_agent_proc_destroy(r.proc);
  unlink(r.out);
  remove_children_list(r.dir);
  rmdir(r.dir);
}

/* An agent SIGKILLed while its process formed a ring: the process dies by its
 * death signal and nobody reaps it, so its rings stay. The next agent of the
 * worker (same work dir) removes what a dead pid of its list left, keeps what a
 * live one holds, and keeps only the live pid on the list. */
static void an_agent_removes_the_shared_memory_an_earlier_agents_dead_child_left(void **state) {
  (void)state;
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/kolo-agentproc-XXXXXX");
  assert_non_null(mkdtemp(dir));
  pid_t dead = fork();
  assert_true(dead >= 0);
  if (dead == 0) _exit(0);
  assert_int_equal(waitpid(dead, NULL, 0), dead);
  char orphan[64], held[64], path[300];
  snprintf(orphan, sizeof orphan, "kolo-%d-00000000deadbeef", (int)dead);
  snprintf(held, sizeof held, "kolo-%d-00000000deadbeef", (int)getpid());
  const char *names[] = {orphan, held};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "/dev/shm/%s", names[i]);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/children", dir);
  FILE *list = fopen(path, "w");
  assert_non_null(list);
  fprintf(list, "%d\n%d\n", (int)dead, (int)getpid());
  fclose(list);
  kolo_agent_proc_sweep_orphans(dir);
  assert_false(shm_exists(orphan));
  assert_true(shm_exists(held));
  list = fopen(path, "r");
  assert_non_null(list);
  int first = 0, second = 0;
  assert_int_equal(fscanf(list, "%d %d", &first, &second), 1);
  assert_int_equal(first, (int)getpid());
  fclose(list);
  snprintf(path, sizeof path, "/dev/shm/%s", held);
  unlink(path);
  remove_children_list(dir);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_hello_of_this_version_is_accepted_and_handed_on_parsed),
      cmocka_unit_test(an_unversioned_hello_is_version_one),
      cmocka_unit_test(a_hello_of_an_unknown_version_is_refused_and_the_connection_closed),
      cmocka_unit_test(malformed_lines_are_dropped),
      cmocka_unit_test(the_shared_memory_of_a_killed_process_is_removed_when_it_is_reaped),
      cmocka_unit_test(an_agent_removes_the_shared_memory_an_earlier_agents_dead_child_left),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
