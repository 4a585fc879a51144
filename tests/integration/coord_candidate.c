/* Helper process for test_coord_election: one election candidate. Campaigns,
 * prints "LEADER <name> <create-revision>" when it leads, then executes stdin
 * commands "write <key> <value>" as fenced writes and prints "WRITE OK" or
 * "WRITE <status-name> <message>".
 * Usage: coord_candidate <etcd-url> <prefix> <name> <ttl-seconds> */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordination/election.h"

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: coord_candidate <etcd-url> <prefix> <name> <ttl-seconds>\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *endpoints[] = {argv[1]};
  kolo_etcd_config config = {
      .endpoints = endpoints, .endpoint_count = 1, .request_timeout_ms = 2000};
  kolo_etcd *client = NULL;
  kolo_election *e = NULL;
  if (kolo_etcd_create(&config, &client) != KOLO_OK) return 1;
  kolo_status rc = kolo_election_create(client, argv[2], argv[3], atoi(argv[4]), NULL, NULL, &e);
  if (rc == KOLO_OK) {
    printf("CANDIDATE %s\n", kolo_election_key(e));
    rc = kolo_election_campaign(e, 0);
  }
  if (rc != KOLO_OK) {
    printf("ERROR %s %s\n", kolo_status_name(rc), kolo_etcd_last_error());
    kolo_election_destroy(e);
    kolo_etcd_destroy(client);
    return 1;
  }
  printf("LEADER %s %lld\n", argv[3], (long long)kolo_election_revision(e));
  char line[512], key[256], value[256];
  while (fgets(line, sizeof line, stdin) != NULL) {
    if (sscanf(line, "write %255s %255s", key, value) != 2) continue;
    kolo_etcd_op put = {
        .kind = KOLO_ETCD_OP_PUT, .key = kolo_etcd_str(key), .value = kolo_etcd_str(value)};
    kolo_etcd_txn txn = {NULL, 0, &put, 1, NULL, 0};
    kolo_etcd_txn_result r;
    rc = kolo_election_fenced_txn(e, &txn, &r);
    if (rc == KOLO_OK) {
      printf("WRITE %s\n", r.succeeded ? "OK" : "COMPARE_FAILED");
      kolo_etcd_txn_result_free(&r);
    } else {
      printf("WRITE %s %s\n", kolo_status_name(rc), kolo_etcd_last_error());
    }
  }
  kolo_election_destroy(e);
  kolo_etcd_destroy(client);
  return 0;
}
