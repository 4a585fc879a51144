/* Helper process for test_coord_membership: registers one worker record under
 * a kept-alive lease and holds it until killed (or until stdin closes, then it
 * deregisters). Prints "REGISTERED <lease-hex>" once the record is in etcd.
 * Usage: coord_holder <etcd-url> <worker-id> <ttl-seconds> */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "coordination/membership.h"
#include "tests/support/worker_record.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: coord_holder <etcd-url> <worker-id> <ttl-seconds>\n");
    return 2;
  }
  const char *endpoints[] = {argv[1]};
  kolo_etcd_config config = {
      .endpoints = endpoints, .endpoint_count = 1, .request_timeout_ms = 2000};
  kolo_etcd *client = NULL;
  kolo_membership *reg = NULL;
  if (kolo_etcd_create(&config, &client) != KOLO_OK) return 1;
  Kolo__V1__WorkerRecord m =
      kolo_test_worker_record(argv[2], "holder-host", "127.0.0.1:7000", 2, "idle");
  m.gpus = 0;
  kolo_status rc = kolo_membership_register(client, &m, atoi(argv[3]), NULL, NULL, &reg);
  if (rc != KOLO_OK) {
    printf("ERROR %s %s\n", kolo_status_name(rc), kolo_etcd_last_error());
    fflush(stdout);
    kolo_etcd_destroy(client);
    return 1;
  }
  printf("REGISTERED %llx\n", (unsigned long long)kolo_membership_lease(reg));
  fflush(stdout);
  char line[256];
  while (fgets(line, sizeof line, stdin) != NULL) {
  }
  kolo_membership_deregister(reg);
  kolo_etcd_destroy(client);
  return 0;
}
