/* The mesh: links beyond the ring neighbours, for the all-reduces whose steps
 * talk to ranks other than rank +- 1 (collective/algo/doubling.c: recursive
 * doubling's partners; collective/algo/two_level.c: the cross-host rings and
 * each host's wrap). Which pairs need a link is a pure function of the ring's
 * shape (hosts from the peers' addresses), so every rank plans the same mesh,
 * and it is planned again with every epoch's ring. Each pair gets one TCP
 * connection, used both ways: the lower rank dials the higher on the ring's
 * listener, behind the ring's handshake (kind KOLO_CONNECTION_MESH). The mesh
 * is formed only once every rank has formed its ring links (one pass of n-1
 * bytes over the data links), so no ring acceptor ever sees a mesh hello. */
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collective/net/net.h"
#include "common/clock.h"
#include "common/log.h"

/* an accepted connection's time to say its hello, then its proof */
#define STRANGER_BUDGET_MS 1000

/* The host part of "host:port" ("[v6]:port" too): its length. */
static size_t host_length(const char *address) {
  const char *colon = strrchr(address, ':');
  return colon ? (size_t)(colon - address) : strlen(address);
}

static int same_host(const char *a, const char *b) {
  size_t la = host_length(a), lb = host_length(b);
  return la == lb && memcmp(a, b, la) == 0;
}

kolo_shape kolo_shape_from_peers(char *const *peers, int size, int rank) {
  kolo_shape shape = {.hosts = size > 0 ? 1 : 0, .per_host = size, .host = 0, .local = rank};
  int run = 1, first_run = -1, start = 0;
  for (int r = 1; r <= size; r++) {
    int same = r < size && peers != NULL && same_host(peers[r - 1], peers[r]);
    if (same) {
      run++;
      continue;
    }
    if (first_run < 0) first_run = run;
    if (run != first_run) shape.per_host = 0;
    if (rank >= start && rank < start + run) shape.local = rank - start;
    if (r < size) {
      if (rank >= r) shape.host = shape.hosts;
      shape.hosts++;
    }
    start = r;
    run = 1;
  }
  if (shape.per_host != 0) shape.per_host = first_run;
  return shape;
}

int kolo_doubling_pow2(int size) {
  int p = 1;
  while (p * 2 <= size) p *= 2;
  return p;
}

int kolo_doubling_newrank(int size, int rank) {
  int rem = size - kolo_doubling_pow2(size);
  if (rank < 2 * rem) return rank % 2 == 0 ? -1 : rank / 2;
  return rank - rem;
}

int kolo_doubling_oldrank(int size, int newrank) {
  int rem = size - kolo_doubling_pow2(size);
  return newrank < rem ? newrank * 2 + 1 : newrank + rem;
}

/* Whether a talks to b in recursive doubling (symmetric). */
static int doubling_pair(int size, int a, int b) {
  int rem = size - kolo_doubling_pow2(size);
  int low = a < b ? a : b, high = a < b ? b : a;
  if (low % 2 == 0 && low < 2 * rem && high == low + 1) return 1; /* the fold */
  int na = kolo_doubling_newrank(size, a), nb = kolo_doubling_newrank(size, b);
  if (na < 0 || nb < 0) return 0;
  int x = na ^ nb;
  return x != 0 && (x & (x - 1)) == 0; /* partners at some step */
}

/* Whether a talks to b in the two-level all-reduce (symmetric). */
static int two_level_pair(const kolo_shape *shape, int size, int a, int b) {
  int per = shape->per_host;
  if (per < 2 || shape->hosts < 2) return 0;
  int low = a < b ? a : b, high = a < b ? b : a;
  if (low / per == high / per) return low % per == 0 && high % per == per - 1; /* the wrap */
  int distance = high - low;
  return distance == per || distance == size - per; /* neighbours in a cross-host ring */
}

int kolo_mesh_wants(const kolo_shape *shape, int size, int a, int b) {
  if (a == b || a < 0 || b < 0 || a >= size || b >= size) return 0;
  if (size >= 3 && doubling_pair(size, a, b)) return 1;
  return two_level_pair(shape, size, a, b);
}

void kolo_mesh_close(kolo_net *net) {
  if (net->mesh == NULL) return;
  for (int i = 0; i < net->size; i++) kolo_channel_close(&net->mesh[i]);
  free(net->mesh);
  net->mesh = NULL;
}

/* Returns once every rank has formed its ring links: n-1 rounds of one byte to
 * the next rank and one from the previous; a rank sends its first only once
 * its ring is formed, so the (n-1)th byte it receives proves every rank did. */
static kolo_status all_formed(kolo_net *net, int64_t deadline) {
  for (int t = 0; t < net->size - 1; t++) {
    uint8_t token = 1;
    kolo_status status = kolo_channel_send_all(&net->next.small, &token, 1, deadline);
    if (status == KOLO_OK) status = kolo_channel_recv_all(&net->prev.small, &token, 1, deadline);
    if (status != KOLO_OK) return status;
  }
  return KOLO_OK;
}

/* A mesh link being made: dialled (hello sent, reply awaited) or accepted
 * (hello, then proof, being read). */
typedef struct link {
  kolo_transport_conn *conn;
  int64_t until; /* accepted: to send its whole hello, then its proof (a stranger's budget) */
  int peer;      /* dialled: the peer; accepted: -1 until its hello is judged */
  int proved, challenged;
  size_t have, proof_have;
  uint8_t hello[KOLO_HELLO_MAX_BYTES];
  uint8_t proof[KOLO_HANDSHAKE_PROOF_BYTES];
  uint8_t expect[32];
} link;

typedef struct mesh_build {
  kolo_net *net;
  link *dialled, *accepted;
  int n_dialled, n_accepted, cap_accepted;
  int missing; /* links not made yet */
  int64_t deadline;
} mesh_build;

static void adopt_link(mesh_build *b, link *l) {
  b->net->mesh[l->peer] = (kolo_channel){.ops = b->net->transport, .conn = l->conn};
  l->conn = NULL;
  b->missing--;
}

static void drop_link(mesh_build *b, link *l) {
  b->net->transport->close(l->conn);
  l->conn = NULL;
}

/* A reply arrived on a dialled link: the challenge (answered with our proof) or the ack. */
static kolo_status serve_dialled(mesh_build *b, link *l) {
  int proved = l->proved, bulk = 0;
  kolo_status status =
      kolo_handshake_read_reply(b->net, l->conn, l->hello, l->have, &l->proved, &bulk, b->deadline);
  if (status == KOLO_OK && proved) adopt_link(b, l);
  if (status != KOLO_OK)
    KOLO_LOGE("kolo", "rank %d epoch %llu: mesh link to rank %d refused: %s", b->net->rank,
              (unsigned long long)b->net->epoch, l->peer, kolo_strerror(status));
  return status;
}

/* Reads an accepted link's hello (then judges it) or its proof (then finishes it);
 * strangers and duplicates are refused and dropped, changing nothing. */
static void serve_accepted(mesh_build *b, link *l) {
  kolo_net *net = b->net;
  for (;;) {
    size_t need =
        l->challenged ? KOLO_HANDSHAKE_PROOF_BYTES : kolo_hello_bytes_needed(l->hello, l->have);
    size_t have = l->challenged ? l->proof_have : l->have;
    if (need == 0) {
      drop_link(b, l);
      return;
    }
    if (need == have && l->challenged) {
      kolo_channel bulk = {0};
      kolo_status status = kolo_handshake_finish(net, l->conn, l->hello, l->have, l->proof,
                                                 l->expect, &bulk, b->deadline);
      if (status == KOLO_OK && net->mesh[l->peer].ops == NULL)
        adopt_link(b, l);
      else
        drop_link(b, l);
      return;
    }
    if (need == have) {
      kolo_hello hello;
      size_t used = 0;
      int kind = 0;
      int expected = -1;
      if (kolo_hello_decode(l->hello, l->have, &hello, &used) == KOLO_OK &&
          hello.kind == KOLO_CONNECTION_MESH && hello.rank < net->rank &&
          kolo_mesh_wants(&net->shape, net->size, net->rank, hello.rank))
        expected = hello.rank;
      if (kolo_handshake_challenge(net, l->conn, l->hello, l->have, expected, &kind, l->expect,
                                   b->deadline) != KOLO_OK) {
        drop_link(b, l);
        return;
      }
      l->peer = expected;
      l->challenged = 1;
      l->until = kolo_deadline_after_ms(STRANGER_BUDGET_MS);
      continue;
    }
    uint8_t *into = l->challenged ? l->proof + have : l->hello + have;
    size_t moved = 0;
    if (net->transport->recv(l->conn, into, need - have, &moved) != KOLO_OK) {
      drop_link(b, l);
      return;
    }
    if (moved == 0) return;
    if (l->challenged)
      l->proof_have += moved;
    else
      l->have += moved;
  }
}

/* Accepts what waits on the listener (a full table drops the newest). */
static kolo_status accept_links(mesh_build *b, kolo_listener *listener) {
  for (;;) {
    kolo_transport_conn *conn = NULL;
    kolo_status status =
        b->net->transport->accept(listener->listener, kolo_deadline_after_ms(0), &conn);
    if (status == KOLO_ERR_TIMEOUT) return KOLO_OK;
    if (status != KOLO_OK) return status;
    link *slot = NULL;
    for (int i = 0; i < b->n_accepted && slot == NULL; i++)
      if (b->accepted[i].conn == NULL) slot = &b->accepted[i];
    if (slot == NULL && b->n_accepted < b->cap_accepted) slot = &b->accepted[b->n_accepted++];
    if (slot == NULL) { /* full: the oldest goes (a real peer says its hello at once) */
      slot = &b->accepted[0];
      for (int i = 1; i < b->n_accepted; i++)
        if (b->accepted[i].until < slot->until) slot = &b->accepted[i];
      drop_link(b, slot);
    }
    *slot = (link){.conn = conn, .peer = -1, .until = kolo_deadline_after_ms(STRANGER_BUDGET_MS)};
  }
}

static kolo_status dial_links(mesh_build *b) {
  kolo_net *net = b->net;
  for (int peer = net->rank + 1; peer < net->size; peer++) {
    if (!kolo_mesh_wants(&net->shape, net->size, net->rank, peer)) continue;
    link *l = &b->dialled[b->n_dialled++];
    *l = (link){.peer = peer};
    kolo_status status = net->transport->connect(net->peers[peer], b->deadline, &l->conn);
    if (status == KOLO_OK)
      status = kolo_handshake_send_hello(net, l->conn, KOLO_CONNECTION_MESH, NULL, l->hello,
                                         &l->have, b->deadline);
    if (status != KOLO_OK) {
      KOLO_LOGE("kolo", "rank %d epoch %llu: cannot reach rank %d for a mesh link: %s", net->rank,
                (unsigned long long)net->epoch, peer, kolo_strerror(status));
      return status;
    }
  }
  return KOLO_OK;
}

static kolo_status await_links(mesh_build *b, kolo_listener *listener, struct pollfd *fds) {
  const kolo_transport_ops *tp = b->net->transport;
  while (b->missing > 0) {
    int count = 0;
    fds[count++] =
        (struct pollfd){.fd = tp->listener_poll_fd(listener->listener), .events = POLLIN};
    for (int i = 0; i < b->n_dialled; i++)
      fds[count++] = (struct pollfd){
          .fd = b->dialled[i].conn ? tp->poll_fd(b->dialled[i].conn) : -1, .events = POLLIN};
    for (int i = 0; i < b->n_accepted; i++)
      fds[count++] = (struct pollfd){
          .fd = b->accepted[i].conn ? tp->poll_fd(b->accepted[i].conn) : -1, .events = POLLIN};
    int64_t wake = b->deadline;
    for (int i = 0; i < b->n_accepted; i++)
      if (b->accepted[i].conn != NULL && b->accepted[i].until < wake) wake = b->accepted[i].until;
    int wait_ms = kolo_ms_until(wake);
    if (kolo_ms_until(b->deadline) == 0) {
      KOLO_LOGE("kolo", "rank %d epoch %llu: mesh not formed in time (%d links missing)",
                b->net->rank, (unsigned long long)b->net->epoch, b->missing);
      return KOLO_ERR_TIMEOUT;
    }
    int64_t now = kolo_deadline_after_ms(0);
    for (int i = 0; i < b->n_accepted; i++) /* strangers past their budget go */
      if (b->accepted[i].conn != NULL && b->accepted[i].until <= now) {
        drop_link(b, &b->accepted[i]);
        fds[1 + b->n_dialled + i].fd = -1;
      }
    if (poll(fds, (nfds_t)count, wait_ms) <= 0) continue;
    for (int i = 0; i < b->n_dialled; i++) {
      if (fds[1 + i].revents == 0 || b->dialled[i].conn == NULL) continue;
      kolo_status status = serve_dialled(b, &b->dialled[i]);
      if (status != KOLO_OK) return status;
    }
    int n_accepted = b->n_accepted;
    for (int i = 0; i < n_accepted; i++)
      if (fds[1 + b->n_dialled + i].revents != 0 && b->accepted[i].conn != NULL)
        serve_accepted(b, &b->accepted[i]);
    if (fds[0].revents != 0) {
      kolo_status status = accept_links(b, listener);
      if (status != KOLO_OK) return status;
    }
  }
  return KOLO_OK;
}

kolo_status kolo_form_mesh(kolo_net *net, kolo_listener *listener) {
  const char *off = getenv("KOLO_MESH");
  int wanted = 0;
  net->shape = kolo_shape_from_peers(net->peers, net->size, net->rank);
  if (off != NULL && strcmp(off, "0") == 0) return KOLO_OK;
  for (int peer = 0; peer < net->size; peer++)
    wanted += kolo_mesh_wants(&net->shape, net->size, net->rank, peer);
  if (wanted == 0) return KOLO_OK;
  mesh_build b = {.net = net, .missing = wanted, .cap_accepted = wanted + 256};
  b.deadline = kolo_deadline_after_ms(net->timeout_ms);
  net->mesh = calloc((size_t)net->size, sizeof *net->mesh);
  b.dialled = calloc((size_t)wanted, sizeof *b.dialled);
  b.accepted = calloc((size_t)b.cap_accepted, sizeof *b.accepted);
  struct pollfd *fds = calloc((size_t)(1 + wanted + b.cap_accepted), sizeof *fds);
  kolo_status status = net->mesh && b.dialled && b.accepted && fds ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  if (status == KOLO_OK) status = all_formed(net, b.deadline);
  if (status == KOLO_OK) status = dial_links(&b);
  if (status == KOLO_OK) status = await_links(&b, listener, fds);
  for (int i = 0; b.dialled && i < b.n_dialled; i++) drop_link(&b, &b.dialled[i]);
  for (int i = 0; b.accepted && i < b.n_accepted; i++) drop_link(&b, &b.accepted[i]);
  free(b.dialled);
  free(b.accepted);
  free(fds);
  if (status != KOLO_OK) kolo_mesh_close(net);
  return status;
}
