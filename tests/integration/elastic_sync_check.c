/* kolo_elastic_sync from several sources (issue 28), run under kolorun -np 2 and 3:
 * every rank ends with rank 0's state bit for bit, in its buffers and in its commit.
 * Each case marks some ranks as differing from rank 0 (a newcomer, or a survivor
 * that kept another commit): their buffers hold other bytes (all of them, or one
 * byte only: the first, one in the middle of a digest block, or the last), the
 * other ranks hold rank 0's bytes. Every subset of ranks 1..n-1 is a case, with
 * buffers of 0, 1, 13, 4101 and 3 MiB + 7 bytes (several executor segments), over
 * the sources path (and kolo_sync_buffers: only the differing ranks receive), and
 * again with KOLO_STATE_SYNC=root (the old path); with the argument "auto" the first
 * pass leaves KOLO_STATE_SYNC unset (test_elastic_sync_hosts.sh). Exits 0 only
 * if every rank passed; prints "FAIL" lines naming the case otherwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kolo/elastic.h"

#define BUFFERS 5
static const size_t SIZES[BUFFERS] = {0, 1, 13, 4101, (size_t)3 * 1024 * 1024 + 7};

/* rank 0's bytes of buffer b in case c (a pattern no other rank's fill equals) */
static unsigned char source_byte(int c, int b, size_t i) {
  return (unsigned char)((i * 131u + (size_t)c * 17u + (size_t)b * 7u + (i >> 9)) & 0xff);
}

/* What a differing rank holds: other bytes everywhere (b even), or rank 0's
 * bytes but one (b odd: the first, the last or one in the middle). */
static void fill(unsigned char *buffer, int c, int b, int differs, int rank) {
  for (size_t i = 0; i < SIZES[b]; i++) buffer[i] = source_byte(c, b, i);
  if (!differs || SIZES[b] == 0) return;
  if (b % 2 == 0) {
    for (size_t i = 0; i < SIZES[b]; i++) buffer[i] ^= (unsigned char)(0x5a + rank);
    return;
  }
  size_t at = (c % 3 == 0) ? 0 : (c % 3 == 1) ? SIZES[b] - 1 : SIZES[b] / 2;
  buffer[at] ^= 0x01;
}

static int check(const unsigned char *buffer, int c, int b, const char *what, const char *path,
                 int rank) {
  for (size_t i = 0; i < SIZES[b]; i++) {
    if (buffer[i] != source_byte(c, b, i)) {
      printf("FAIL rank %d, %s path, case %d, buffer %d (%zu bytes): %s differs at byte %zu\n",
             rank, path, c, b, SIZES[b], what, i);
      return 1;
    }
  }
  return 0;
}

static int run_cases(kolo_elastic *elastic, unsigned char **buffers, const char *path) {
  kolo_comm *comm = kolo_elastic_comm(elastic);
  int n = kolo_comm_size(comm), rank = kolo_comm_rank(comm), failures = 0;
  for (int c = 0; c < (1 << (n - 1)); c++) {
    int differs = rank > 0 && ((c >> (rank - 1)) & 1);
    for (int b = 0; b < BUFFERS; b++) fill(buffers[b], c, b, differs, rank);
    kolo_status status = kolo_elastic_sync(elastic);
    if (status != KOLO_OK) {
      printf("FAIL rank %d, %s path, case %d: sync: %s\n", rank, path, c, kolo_strerror(status));
      return failures + 1;
    }
    for (int b = 0; b < BUFFERS; b++) failures += check(buffers[b], c, b, "state", path, rank);
    for (int b = 0; b < BUFFERS; b++) memset(buffers[b], 0xee, SIZES[b]);
    if (kolo_elastic_restore(elastic) != KOLO_OK) failures++;
    for (int b = 0; b < BUFFERS; b++) failures += check(buffers[b], c, b, "commit", path, rank);
  }
  return failures;
}

/* kolo_sync_buffers on the same buffers: the bytes, and which ranks received (exactly
 * those that differed, for every buffer with bytes). */
static int run_buffers(kolo_comm *comm, unsigned char **buffers) {
  int n = kolo_comm_size(comm), rank = kolo_comm_rank(comm), failures = 0;
  void *pointers[BUFFERS];
  uint8_t received[BUFFERS];
  for (int c = 0; c < (1 << (n - 1)); c++) {
    int differs = rank > 0 && ((c >> (rank - 1)) & 1);
    for (int b = 0; b < BUFFERS; b++) {
      fill(buffers[b], c, b, differs, rank);
      pointers[b] = buffers[b];
    }
    if (kolo_sync_buffers(comm, pointers, SIZES, BUFFERS, received) != KOLO_OK) return failures + 1;
    for (int b = 0; b < BUFFERS; b++) {
      failures += check(buffers[b], c, b, "buffer", "kolo_sync_buffers", rank);
      if (received[b] != (differs && SIZES[b] > 0)) {
        printf("FAIL rank %d, kolo_sync_buffers, case %d, buffer %d: received %d\n", rank, c, b,
               received[b]);
        failures++;
      }
    }
  }
  return failures;
}

int main(int argc, char **argv) {
  kolo_elastic *elastic = NULL;
  kolo_status status = kolo_elastic_create(&elastic);
  if (status != KOLO_OK) {
    printf("FAIL create: %s\n", kolo_strerror(status));
    return 1;
  }
  unsigned char *buffers[BUFFERS];
  for (int b = 0; b < BUFFERS; b++) {
    buffers[b] = calloc(SIZES[b] ? SIZES[b] : 1, 1);
    if (buffers[b] == NULL || kolo_elastic_register(elastic, buffers[b], SIZES[b]) != KOLO_OK)
      return 1;
  }
  /* auto (argument "auto": KOLO_STATE_SYNC left unset) takes the sources only across hosts */
  if (argc < 2 || strcmp(argv[1], "auto") != 0) setenv("KOLO_STATE_SYNC", "sources", 1);
  int failures = run_cases(elastic, buffers, "sources");
  failures += run_buffers(kolo_elastic_comm(elastic), buffers);
  setenv("KOLO_STATE_SYNC", "root", 1);
  failures += run_cases(elastic, buffers, "root");
  /* every rank's verdict on every rank: one that failed fails them all */
  int64_t mine = failures, total = 0;
  kolo_comm *comm = kolo_elastic_comm(elastic);
  if (kolo_allreduce(comm, &mine, &total, 1, KOLO_INT64, KOLO_SUM) != KOLO_OK) total = 1;
  if (kolo_comm_rank(comm) == 0)
    printf("%s: %d ranks, %d cases per path, %lld failures\n", total ? "FAIL" : "PASS",
           kolo_comm_size(comm), 1 << (kolo_comm_size(comm) - 1), (long long)total);
  kolo_elastic_destroy(elastic);
  for (int b = 0; b < BUFFERS; b++) free(buffers[b]);
  return total ? 1 : 0;
}
