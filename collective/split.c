/* Process sets at the communicator's face (include/kolo/process_set.h):
 * kolo_comm_split. Every rank of the parent judges the options by itself, and
 * each member opens a listener beside its parent address; one all-gather over
 * the parent (the internal blocking path, like CUDA mode's agreement) carries
 * every rank's record (verdict, id, member count, a digest of the member list,
 * its new address), so every rank reaches the same verdict from the same bytes.
 * Then the members form a ring of their own with kolo_comm_create (the net
 * floor's formation, handshake and transports: shared memory between
 * neighbours on one host as on any ring). Why a ring of its own rather than the
 * parent's channels: a set's neighbours are rarely the parent's neighbours
 * (ranks 0 and 2 of a ring of 3 share no data connection), and a communicator
 * of its own gives a set the whole engine (negotiation, fusion, join, the beat,
 * failure propagation) with no change below the face (docs/ARCHITECTURE.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/face.h"
#include "common/checks.h"
#include "common/log.h"
#include "common/sha256.h"
#include "kolo/process_set.h"

#define ADDRESS_BYTES 128
/* verdict, id, member count, the members' digest, this member's address */
#define RECORD_BYTES (12 + KOLO_SHA256_BYTES + ADDRESS_BYTES)

/* This rank's verdict on the options (the same on every rank for the same options). */
static kolo_status judge(const kolo_comm *comm, const kolo_split_options *o) {
  if (o->id < 1 || o->id > KOLO_PROCESS_SET_ID_MAX) {
    KOLO_LOGE("kolo", "process set: id %d is not in 1..%d", o->id, KOLO_PROCESS_SET_ID_MAX);
    return KOLO_ERR_INVALID_ARG;
  }
  if (o->ranks == NULL || o->n_ranks < 1 || o->n_ranks > comm->net.size) {
    KOLO_LOGE("kolo", "process set %d: needs 1..%d members, not %d", o->id, comm->net.size,
              o->n_ranks);
    return KOLO_ERR_INVALID_ARG;
  }
  for (int i = 0; i < o->n_ranks; i++) {
    if (o->ranks[i] < 0 || o->ranks[i] >= comm->net.size ||
        (i > 0 && o->ranks[i] <= o->ranks[i - 1])) {
      KOLO_LOGE("kolo",
                "process set %d: member %d is rank %d: members are ranks 0..%d, strictly ascending",
                o->id, i, o->ranks[i], comm->net.size - 1);
      return KOLO_ERR_INVALID_ARG;
    }
  }
  return KOLO_OK;
}

/* The position of rank among the members, or -1. */
static int member_index(const kolo_split_options *o, int rank) {
  for (int i = 0; i < o->n_ranks; i++)
    if (o->ranks[i] == rank) return i;
  return -1;
}

static void members_digest(const kolo_split_options *o, uint8_t out[KOLO_SHA256_BYTES]) {
  kolo_sha256 h;
  kolo_sha256_init(&h);
  for (int i = 0; i < o->n_ranks; i++) {
    uint8_t word[4];
    kolo_put32(word, (uint32_t)o->ranks[i]);
    kolo_sha256_update(&h, word, sizeof word);
  }
  kolo_sha256_final(&h, out);
}

/* A listener beside this rank's parent address (same host, a free port). */
static kolo_status listen_beside(const kolo_comm *comm, kolo_listener **listener, char *address) {
  const char *own = comm->net.peers != NULL ? comm->net.peers[comm->net.rank] : NULL;
  const char *colon = own != NULL ? strrchr(own, ':') : NULL;
  char bind[ADDRESS_BYTES];
  if (colon == NULL || (size_t)(colon - own) + 3 > sizeof bind) return KOLO_ERR_ADDRESS;
  snprintf(bind, sizeof bind, "%.*s:0", (int)(colon - own), own);
  KOLO_CHECK(kolo_listener_create(bind, listener));
  return kolo_listener_address(*listener, address, ADDRESS_BYTES);
}

static void encode_record(uint8_t *out, kolo_status verdict, const kolo_split_options *o,
                          const uint8_t *digest, const char *address) {
  memset(out, 0, RECORD_BYTES);
  kolo_put32(out, (uint32_t)verdict);
  kolo_put32(out + 4, (uint32_t)o->id);
  kolo_put32(out + 8, (uint32_t)o->n_ranks);
  memcpy(out + 12, digest, KOLO_SHA256_BYTES);
  snprintf((char *)out + 12 + KOLO_SHA256_BYTES, ADDRESS_BYTES, "%s", address);
}

/* The common verdict over every rank's record: the worst bad options, else a
 * disagreement, else OK. */
static kolo_status common_verdict(const kolo_comm *comm, const uint8_t *records,
                                  const uint8_t *own) {
  kolo_status verdict = KOLO_OK;
  for (int r = 0; r < comm->net.size; r++) {
    const uint8_t *record = records + (size_t)r * RECORD_BYTES;
    kolo_status theirs = (kolo_status)kolo_get32(record);
    if (theirs != KOLO_OK) {
      if (verdict == KOLO_OK || verdict == KOLO_ERR_MISMATCH) verdict = theirs;
      KOLO_LOGD("kolo", "process set: rank %d refused its options (%s)", r, kolo_strerror(theirs));
    } else if (memcmp(record + 4, own + 4, 8 + KOLO_SHA256_BYTES) != 0 && verdict == KOLO_OK) {
      KOLO_LOGE("kolo",
                "process set: rank %d gave id %u with %u members, rank %d id %u with %u "
                "(or other members): every rank must add the same set",
                r, kolo_get32(record + 4), kolo_get32(record + 8), comm->net.rank,
                kolo_get32(own + 4), kolo_get32(own + 8));
      verdict = KOLO_ERR_MISMATCH;
    }
  }
  return verdict;
}

static kolo_status exchange(kolo_comm *comm, const uint8_t *own, uint8_t *records) {
  if (comm->net.size == 1) {
    memcpy(records, own, RECORD_BYTES);
    return KOLO_OK;
  }
  kolo_request gather = {.comm = comm,
                         .kind = KOLO_REQUEST_ALLGATHER,
                         .send = own,
                         .recv = records,
                         .count = RECORD_BYTES,
                         .recv_capacity = (size_t)comm->net.size * RECORD_BYTES,
                         .dtype = KOLO_UINT8};
  return kolo_queue_run_blocking(comm, &gather);
}

/* The members' ring: addresses from the records, local ranks by host. */
static kolo_status form_set(kolo_comm *comm, const kolo_split_options *o, const uint8_t *records,
                            const uint8_t *digest, kolo_listener *listener, kolo_comm **out) {
  const char **peers = calloc((size_t)o->n_ranks, sizeof *peers);
  if (peers == NULL) {
    kolo_listener_destroy(listener);
    return KOLO_ERR_NO_MEMORY;
  }
  int me = member_index(o, comm->net.rank), local_rank = 0, local_size = 0;
  for (int i = 0; i < o->n_ranks; i++)
    peers[i] = (const char *)records + (size_t)o->ranks[i] * RECORD_BYTES + 12 + KOLO_SHA256_BYTES;
  const char *own_host = peers[me], *colon = strrchr(own_host, ':');
  size_t host_length = colon != NULL ? (size_t)(colon - own_host) : strlen(own_host);
  for (int i = 0; i < o->n_ranks; i++) {
    if (strncmp(peers[i], own_host, host_length) != 0 || peers[i][host_length] != ':') continue;
    local_size++;
    if (i < me) local_rank++;
  }
  /* the set's secret: only the parent's members can derive it, and each set has its own */
  uint8_t id_word[4], key[KOLO_SHA256_BYTES];
  kolo_put32(id_word, (uint32_t)o->id);
  const void *parts[] = {"kolo-process-set", id_word, digest};
  size_t lengths[] = {sizeof "kolo-process-set", sizeof id_word, KOLO_SHA256_BYTES};
  kolo_hmac_sha256(comm->net.secret, strlen(comm->net.secret), parts, lengths, 3, key);
  char secret[2 * KOLO_SHA256_BYTES + 1];
  for (int i = 0; i < KOLO_SHA256_BYTES; i++) snprintf(secret + 2 * i, 3, "%02x", key[i]);
  kolo_ring_spec spec = {.epoch = comm->net.epoch,
                         .rank = me,
                         .size = o->n_ranks,
                         .local_rank = local_rank,
                         .local_size = local_size,
                         .peers = peers,
                         .secret = secret,
                         .timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : comm->net.timeout_ms};
  kolo_status status = kolo_comm_create(&spec, listener, out);
  if (status == KOLO_OK) kolo_comm_set_peer_timeout(*out, atomic_load(&comm->net.peer_timeout_ms));
  free(peers);
  return status;
}

kolo_status kolo_comm_split(kolo_comm *comm, const kolo_split_options *options, kolo_comm **out) {
  if (comm == NULL || options == NULL || out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  kolo_listener *listener = NULL;
  uint8_t digest[KOLO_SHA256_BYTES] = {0}, own[RECORD_BYTES];
  char address[ADDRESS_BYTES] = "";
  uint8_t *records = malloc((size_t)comm->net.size * RECORD_BYTES);
  if (records == NULL) return KOLO_ERR_NO_MEMORY;
  kolo_status verdict = judge(comm, options);
  int member = verdict == KOLO_OK && member_index(options, comm->net.rank) >= 0;
  if (verdict == KOLO_OK) members_digest(options, digest);
  if (member && options->n_ranks > 1) verdict = listen_beside(comm, &listener, address);
  encode_record(own, verdict, options, digest, address);
  kolo_status status = exchange(comm, own, records);
  if (status == KOLO_OK) status = common_verdict(comm, records, own);
  if (status == KOLO_OK && member) {
    status = form_set(comm, options, records, digest, listener, out);
    listener = NULL; /* kolo_comm_create took it */
  }
  kolo_listener_destroy(listener);
  free(records);
  return status;
}
