/* Test helper (not a test): starts a real etcd through kolo_test_etcd, prints its URL on
 * one line, then obeys commands on stdin ("stop", "kill" (SIGKILL), "start" (same ports and data):
 * answered "ok" or "error"; "pid": answered
 * with etcd's process id) until
 * stdin closes (the Python tests hold the pipe, so etcd also goes away when a test dies),
 * then stops it and removes its data. `test_server_etcd tls CERT KEY CA` also serves TLS
 * (client certificates required) and prints the https:// URL on a second line. */
#include <stdio.h>
#include <string.h>

#include "tests/support/etcd_harness.h"

int main(int argc, char **argv) {
  kolo_etcd_harness *etcd = NULL;
  int tls = argc == 5 && strcmp(argv[1], "tls") == 0;
  kolo_status started = tls ? kolo_etcd_harness_start_tls(argv[2], argv[3], argv[4], &etcd)
                            : kolo_etcd_harness_start(NULL, &etcd);
  if (started != KOLO_OK) {
    fprintf(stderr, "test_server_etcd: etcd did not start\n");
    return 1;
  }
  printf("%s\n", kolo_etcd_harness_url(etcd));
  if (tls) printf("%s\n", kolo_etcd_harness_tls_url(etcd));
  fflush(stdout);
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    kolo_status rc = KOLO_ERR_INVALID_ARG;
    if (strncmp(line, "stop", 4) == 0) rc = kolo_etcd_harness_stop(etcd);
    if (strncmp(line, "kill", 4) == 0)
      rc = kolo_etcd_harness_kill(etcd); /* SIGKILL: "start" reuses its data */
    if (strncmp(line, "start", 5) == 0) rc = kolo_etcd_harness_restart(etcd);
    if (strncmp(line, "pid", 3) == 0) {
      printf("%ld\n", (long)kolo_etcd_harness_pid(etcd));
      fflush(stdout);
      continue;
    }
    printf("%s\n", rc == KOLO_OK ? "ok" : "error");
    fflush(stdout);
  }
  kolo_etcd_harness_destroy(etcd);
  return 0;
}
