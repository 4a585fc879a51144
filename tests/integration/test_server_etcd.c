/* Test helper (not a test): starts a real etcd through kolo_test_etcd, prints its URL on
 * one line, and keeps it until stdin closes (the Python tests hold the pipe, so etcd also
 * goes away when a test dies), then stops it and removes its data. */
#include <stdio.h>
#include <unistd.h>

#include "tests/support/etcd_harness.h"

int main(void) {
  kolo_etcd_harness *etcd = NULL;
  if (kolo_etcd_harness_start(NULL, &etcd) != KOLO_OK) {
    fprintf(stderr, "test_server_etcd: etcd did not start\n");
    return 1;
  }
  printf("%s\n", kolo_etcd_harness_url(etcd));
  fflush(stdout);
  char buf[256];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  kolo_etcd_harness_destroy(etcd);
  return 0;
}
