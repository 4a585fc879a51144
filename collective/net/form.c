/* Ring formation and listeners. Rank r dials three connections to rank r+1
 * (data, control, and the bell that may carry a bulk-transport offer) and
 * accepts the same three from rank r-1, every one behind a handshake. To avoid a
 * connect/accept deadlock every rank first dials and sends its hellos, then
 * accepts while it watches its own connections for acks, so a refusal (wrong
 * secret, stale epoch) ends the formation at once with that status; strangers
 * are refused and the accept loop goes on until the deadline. Accepted connections
 * are read concurrently (up to PENDING_MAX at once, each with a budget of
 * STRANGER_BUDGET_MS to send a whole hello, the oldest dropped when full), so strangers
 * that connect and say nothing cost the real neighbour nothing. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/net/net.h"
#include "common/checks.h"
#include "common/clock.h"
#include "common/log.h"

enum { LINK_DATA, LINK_CONTROL, LINK_BELL, LINK_COUNT };

#define PENDING_MAX 256         /* accepted connections whose hello is being read */
#define STRANGER_BUDGET_MS 1000 /* to send a whole hello after being accepted */
#define SUPERSEDED_CHECK_MS 100 /* how often a formation asks whether its epoch is replaced */

/* An accepted connection whose handshake is not done yet: its hello being read, or (once
 * challenged) its proof. */
typedef struct pending {
  kolo_transport_conn *conn;
  int64_t until;
  size_t have;
  uint8_t hello[KOLO_HELLO_MAX_BYTES];
  int challenged, kind;
  uint8_t expect[32];
  size_t proof_have;
  uint8_t proof[KOLO_HANDSHAKE_PROOF_BYTES];
} pending;

/* "fd:N": a dup of the inherited listening socket N (the worker agent's held port,
 * worker/agent/port.h), so that closing this listener leaves N listening. */
static kolo_status listen_on(const kolo_transport_ops *tp, const char *bind_address,
                             kolo_transport_listener **out) {
  if (strncmp(bind_address, "fd:", 3) != 0) return tp->listen(bind_address, out);
  char *end = NULL;
  long fd = strtol(bind_address + 3, &end, 10);
  if (end == bind_address + 3 || *end != '\0' || fd < 0) return KOLO_ERR_INVALID_ARG;
  int copy = fcntl((int)fd, F_DUPFD_CLOEXEC, 3);
  if (copy < 0) return kolo_status_from_errno(errno);
  kolo_status status = tp->listener_from_fd(copy, out);
  if (status != KOLO_OK) close(copy);
  return status;
}

kolo_status kolo_listener_create(const char *bind_address, kolo_listener **out) {
  if (bind_address == NULL || out == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_listener *listener = calloc(1, sizeof *listener);
  if (listener == NULL) return KOLO_ERR_NO_MEMORY;
  listener->transport = &kolo_transport_tcp;
  kolo_status status = listen_on(listener->transport, bind_address, &listener->listener);
  if (status != KOLO_OK) {
    free(listener);
    return status;
  }
  *out = listener;
  return KOLO_OK;
}

kolo_status kolo_listener_address(const kolo_listener *listener, char *buffer, size_t length) {
  if (listener == NULL || buffer == NULL) return KOLO_ERR_INVALID_ARG;
  return listener->transport->listener_address(listener->listener, buffer, length);
}

void kolo_listener_destroy(kolo_listener *listener) {
  if (listener == NULL) return;
  listener->transport->close_listener(listener->listener);
  free(listener);
}

/* Connections of one formation attempt; whatever is left here at the end is closed. */
typedef struct formation {
  kolo_transport_conn *outgoing[LINK_COUNT];
  kolo_transport_conn *incoming[LINK_COUNT];
  kolo_channel bulk_in; /* the bulk channel we mapped on the incoming bell, if any */
  kolo_bulk_offer *offer;
  int acked[LINK_COUNT];
  int proved[LINK_COUNT]; /* our proof of the secret sent on outgoing[i] */
  uint8_t hello[LINK_COUNT][KOLO_HELLO_MAX_BYTES];
  size_t hello_length[LINK_COUNT];
  int bulk_given;
  pending *pending; /* PENDING_MAX slots; conn == NULL: free */
  int n_pending;
} formation;

/* Whether the formation's epoch is replaced (net->superseded says so; logged). */
static int superseded_now(kolo_net *net) {
  if (net->superseded == NULL || !net->superseded(net->superseded_context, net->epoch)) return 0;
  KOLO_LOGI("kolo", "rank %d epoch %llu: formation given up: a newer ring is announced", net->rank,
            (unsigned long long)net->epoch);
  return 1;
}

/* Connects to the next rank by the deadline (the transport retries a refusal), in slices
 * of SUPERSEDED_CHECK_MS when the epoch may be superseded meanwhile. */
static kolo_status connect_next(kolo_net *net, int next, int64_t deadline,
                                kolo_transport_conn **out) {
  for (;;) {
    int64_t slice = kolo_deadline_after_ms(SUPERSEDED_CHECK_MS);
    int64_t until = net->superseded != NULL && slice < deadline ? slice : deadline;
    kolo_status status = net->transport->connect(net->peers[next], until, out);
    if (until == deadline || (status != KOLO_ERR_CONNECT && status != KOLO_ERR_TIMEOUT))
      return status;
    if (superseded_now(net)) return KOLO_ERR_ABORTED;
  }
}

static kolo_status dial_next(kolo_net *net, formation *f, int next, int64_t deadline) {
  static const int kinds[LINK_COUNT] = {KOLO_CONNECTION_DATA, KOLO_CONNECTION_CONTROL,
                                        KOLO_CONNECTION_BELL};
  kolo_status status = KOLO_OK;
  for (int i = 0; i < LINK_COUNT && status == KOLO_OK; i++) {
    status = connect_next(net, next, deadline, &f->outgoing[i]);
    if (status == KOLO_OK) {
      status =
          kolo_handshake_send_hello(net, f->outgoing[i], kinds[i], i == LINK_BELL ? f->offer : NULL,
                                    f->hello[i], &f->hello_length[i], deadline);
    }
  }
  if (status != KOLO_OK) {
    KOLO_LOGE("kolo", "rank %d epoch %llu: cannot reach rank %d at %s: %s", net->rank,
              (unsigned long long)net->epoch, next, net->peers[next], kolo_strerror(status));
  }
  return status;
}

/* Reads the acks that arrived on our outgoing connections. */
static kolo_status read_acks(kolo_net *net, formation *f, const struct pollfd *fds, int next,
                             int64_t deadline) {
  for (int i = 0; i < LINK_COUNT; i++) {
    if (fds[i].revents == 0) continue;
    int bulk_taken = 0, proved = f->proved[i];
    kolo_status status = kolo_handshake_read_reply(
        net, f->outgoing[i], f->hello[i], f->hello_length[i], &f->proved[i], &bulk_taken, deadline);
    if (status == KOLO_OK && !proved) continue; /* our proof is sent: the ack comes next */
    if (status != KOLO_OK) {
      KOLO_LOGE("kolo", "rank %d epoch %llu: rank %d refused us: %s", net->rank,
                (unsigned long long)net->epoch, next, kolo_strerror(status));
      return status;
    }
    f->acked[i] = 1;
    if (i == LINK_BELL && bulk_taken && f->offer != NULL) f->bulk_given = 1;
  }
  return KOLO_OK;
}

static void drop_pending(kolo_net *net, formation *f, pending *p) {
  net->transport->close(p->conn);
  p->conn = NULL;
  f->n_pending--;
}

/* Accepts what waits on the listener into free pending slots (when full, the oldest
 * stranger makes room: a real neighbour sends its hello at once and is never old). */
static kolo_status accept_all(kolo_net *net, kolo_listener *listener, formation *f) {
  for (;;) {
    kolo_transport_conn *conn = NULL;
    kolo_status status =
        net->transport->accept(listener->listener, kolo_deadline_after_ms(0), &conn);
    if (status == KOLO_ERR_TIMEOUT) return KOLO_OK;
    if (status != KOLO_OK) return status;
    pending *slot = NULL;
    for (int i = 0; i < PENDING_MAX; i++) {
      pending *p = &f->pending[i];
      if (p->conn == NULL) {
        slot = p;
        break;
      }
      if (slot == NULL || p->until < slot->until) slot = p;
    }
    if (slot->conn != NULL) drop_pending(net, f, slot);
    slot->conn = conn;
    slot->have = 0;
    slot->challenged = 0;
    slot->until = kolo_deadline_after_ms(STRANGER_BUDGET_MS);
    f->n_pending++;
  }
}

/* A pending connection's proof is whole: keep it if it is the previous rank's, for a slot
 * still empty; anything else is closed and changes nothing. */
static void finish_pending(kolo_net *net, formation *f, pending *p, int64_t deadline) {
  kolo_transport_conn *conn = p->conn;
  kolo_channel bulk = {0};
  int64_t until = p->until < deadline ? p->until : deadline;
  kolo_status status =
      kolo_handshake_finish(net, conn, p->hello, p->have, p->proof, p->expect, &bulk, until);
  p->conn = NULL;
  f->n_pending--;
  int slot = p->kind - KOLO_CONNECTION_DATA;
  if (status == KOLO_OK && slot >= 0 && slot < LINK_COUNT && f->incoming[slot] == NULL) {
    f->incoming[slot] = conn;
    if (bulk.ops != NULL) f->bulk_in = bulk; /* it owns conn from now on */
  } else if (bulk.ops != NULL) {
    kolo_channel_close(&bulk); /* a duplicate that mapped a ring */
  } else {
    net->transport->close(conn); /* refused stranger or duplicate */
  }
}

/* Reads what a pending connection sent, never past its hello or its proof; challenges it once
 * the hello is whole (a refusal closes it), finishes it once the proof is. */
static void read_pending(kolo_net *net, formation *f, pending *p, int prev, int64_t deadline) {
  for (;;) {
    size_t need =
        p->challenged ? KOLO_HANDSHAKE_PROOF_BYTES : kolo_hello_bytes_needed(p->hello, p->have);
    size_t have = p->challenged ? p->proof_have : p->have;
    if (need == 0) { /* not a kolo hello: not worth an answer */
      KOLO_LOGW("kolo", "rank %d: refused a connection: not a kolo hello", net->rank);
      drop_pending(net, f, p);
      return;
    }
    if (need == have && p->challenged) {
      finish_pending(net, f, p, deadline);
      return;
    }
    if (need == have) {
      int64_t until = p->until < deadline ? p->until : deadline;
      if (kolo_handshake_challenge(net, p->conn, p->hello, p->have, prev, &p->kind, p->expect,
                                   until) != KOLO_OK) {
        drop_pending(net, f, p); /* refused (and told), or gone */
        return;
      }
      p->challenged = 1;
      p->proof_have = 0;
      p->until = kolo_deadline_after_ms(STRANGER_BUDGET_MS);
      continue;
    }
    uint8_t *into = p->challenged ? p->proof + have : p->hello + have;
    size_t moved = 0;
    kolo_status status = net->transport->recv(p->conn, into, need - have, &moved);
    if (status != KOLO_OK) { /* it went away */
      drop_pending(net, f, p);
      return;
    }
    if (moved == 0) return; /* nothing more now */
    if (p->challenged)
      p->proof_have += moved;
    else
      p->have += moved;
  }
}

/* Every pending connection that polled readable moves on; the ones past their budget go. */
static void serve_pending(kolo_net *net, formation *f, const struct pollfd *fds, const int *slots,
                          int n, int prev, int64_t deadline) {
  for (int i = 0; i < n; i++)
    if (fds[i].revents != 0 && f->pending[slots[i]].conn != NULL)
      read_pending(net, f, &f->pending[slots[i]], prev, deadline);
  int64_t now = kolo_deadline_after_ms(0);
  for (int i = 0; i < PENDING_MAX; i++)
    if (f->pending[i].conn != NULL && f->pending[i].until <= now)
      drop_pending(net, f, &f->pending[i]);
}

/* The pollfds of one round: acks awaited, the listener, pending hellos (slots[] says whose);
 * returns how many pending ones and lowers *wake to the first pending budget's end. */
static int poll_set(kolo_net *net, kolo_listener *listener, formation *f, int accepting,
                    struct pollfd *fds, int *slots, int64_t *wake) {
  const kolo_transport_ops *tp = net->transport;
  for (int i = 0; i < LINK_COUNT; i++)
    fds[i] =
        (struct pollfd){.fd = f->acked[i] ? -1 : tp->poll_fd(f->outgoing[i]), .events = POLLIN};
  fds[LINK_COUNT] = (struct pollfd){.fd = accepting ? tp->listener_poll_fd(listener->listener) : -1,
                                    .events = POLLIN};
  int n = 0;
  for (int i = 0; accepting && i < PENDING_MAX; i++) {
    if (f->pending[i].conn == NULL) continue;
    slots[n] = i;
    fds[LINK_COUNT + 1 + n++] =
        (struct pollfd){.fd = tp->poll_fd(f->pending[i].conn), .events = POLLIN};
    if (f->pending[i].until < *wake) *wake = f->pending[i].until;
  }
  return n;
}

static kolo_status await_neighbours(kolo_net *net, kolo_listener *listener, formation *f, int next,
                                    int prev, int64_t deadline) {
  struct pollfd fds[LINK_COUNT + 1 + PENDING_MAX];
  int slots[PENDING_MAX];
  for (;;) {
    int accepting = f->incoming[LINK_DATA] == NULL || f->incoming[LINK_CONTROL] == NULL ||
                    f->incoming[LINK_BELL] == NULL;
    if (!accepting && f->acked[0] && f->acked[1] && f->acked[2]) return KOLO_OK;
    int64_t wake = deadline;
    int n = poll_set(net, listener, f, accepting, fds, slots, &wake);
    if (superseded_now(net)) return KOLO_ERR_ABORTED;
    if (net->superseded != NULL && kolo_deadline_after_ms(SUPERSEDED_CHECK_MS) < wake)
      wake = kolo_deadline_after_ms(SUPERSEDED_CHECK_MS);
    if (kolo_ms_until(deadline) == 0) {
      KOLO_LOGE("kolo", "rank %d epoch %llu: ring not formed in time (rank %d %s)", net->rank,
                (unsigned long long)net->epoch, accepting ? prev : next,
                accepting ? "did not connect" : "did not answer");
      return KOLO_ERR_TIMEOUT;
    }
    int ready = poll(fds, (nfds_t)(LINK_COUNT + 1 + n), kolo_ms_until(wake));
    if (ready > 0) KOLO_CHECK(read_acks(net, f, fds, next, deadline));
    if (ready > 0 && fds[LINK_COUNT].revents != 0) KOLO_CHECK(accept_all(net, listener, f));
    serve_pending(net, f, fds + LINK_COUNT + 1, slots, n, prev, deadline);
  }
}

/* Moves the formed connections into the communicator's directions and links. */
static kolo_status adopt(kolo_net *net, formation *f, int next, int prev) {
  net->next.small = (kolo_channel){.ops = net->transport, .conn = f->outgoing[LINK_DATA]};
  net->next.bulk = net->next.small;
  net->prev.small = (kolo_channel){.ops = net->transport, .conn = f->incoming[LINK_DATA]};
  net->prev.bulk = net->prev.small;
  net->control[0] =
      (kolo_control_link){.channel = {.ops = net->transport, .conn = f->outgoing[LINK_CONTROL]},
                          .peer_rank = next,
                          .open = 1};
  net->control[1] =
      (kolo_control_link){.channel = {.ops = net->transport, .conn = f->incoming[LINK_CONTROL]},
                          .peer_rank = prev,
                          .open = 1};
  f->outgoing[LINK_DATA] = f->outgoing[LINK_CONTROL] = NULL;
  f->incoming[LINK_DATA] = f->incoming[LINK_CONTROL] = NULL;
  if (f->bulk_in.ops != NULL) {
    net->prev.bulk = f->bulk_in;
    net->prev.bulk_owned = 1;
    f->bulk_in = (kolo_channel){0};
    f->incoming[LINK_BELL] = NULL; /* owned by prev.bulk */
  }
  if (f->bulk_given) {
    kolo_bulk_offer *offer = f->offer;
    f->offer = NULL;
    KOLO_CHECK(kolo_bulk_offer_accepted(offer, f->outgoing[LINK_BELL], &net->next));
    f->outgoing[LINK_BELL] = NULL;
  }
  return KOLO_OK;
}

kolo_status kolo_form_ring(kolo_net *net, kolo_listener *listener) {
  int n = net->size;
  int next = (net->rank + 1) % n, prev = (net->rank + n - 1) % n;
  int64_t deadline = kolo_deadline_after_ms(net->timeout_ms);
  formation f = {0};
  f.pending = calloc(PENDING_MAX, sizeof *f.pending);
  if (f.pending == NULL) return KOLO_ERR_NO_MEMORY;
  kolo_bulk_offer_create(&f.offer);
  kolo_status status = dial_next(net, &f, next, deadline);
  if (status == KOLO_OK) status = await_neighbours(net, listener, &f, next, prev, deadline);
  if (status == KOLO_OK) status = adopt(net, &f, next, prev);
  kolo_bulk_offer_destroy(f.offer); /* not taken (another host): TCP only */
  if (f.bulk_in.ops != NULL) {
    kolo_channel_close(&f.bulk_in);
    f.incoming[LINK_BELL] = NULL;
  }
  for (int i = 0; i < LINK_COUNT; i++) {
    net->transport->close(f.outgoing[i]);
    net->transport->close(f.incoming[i]);
  }
  for (int i = 0; i < PENDING_MAX; i++)
    if (f.pending[i].conn != NULL) net->transport->close(f.pending[i].conn);
  free(f.pending);
  return status;
}
