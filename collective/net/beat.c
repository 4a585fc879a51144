/* The ring's liveness beat. A stopped or partitioned peer (SIGSTOP, a frozen
 * VM, a cut cable) closes no socket, so without help it is found only by a
 * collective's no-progress timeout or by its etcd lease. While a communicator
 * exists (idle or busy) each rank's negotiator thread, the one writer of the
 * control links, sends a 16-byte beat on both of them every
 * KOLO_BEAT_INTERVAL_MS, and notes when it last received anything on each
 * (beats, failures, negotiation frames). A link silent for the peer timeout
 * (KOLO_PEER_TIMEOUT seconds, fractions allowed; 0 turns the judgement off,
 * never the beats; unset: 0.5 s for a ring from the kolo-worker agent, whose
 * job re-forms around a lost rank, and off for a fixed ring, e.g. under
 * kolorun, where nothing would re-form it) fails the communicator with
 * KOLO_ERR_PEER_LOST naming that neighbour, exactly as if its socket had
 * closed: the failure propagates over the control links and the elastic layer
 * reports it, so the scheduler re-forms the ring without it. Silence is judged
 * only after reading what is pending on the link, so a rank that was itself
 * paused does not blame a neighbour whose beats are waiting in its socket.
 *
 * A live neighbour on a loaded machine beats late (its thread waits for a CPU:
 * gaps of 300-400 ms were measured with 8 ranks on 2 busy cores), so the
 * timeout adapts per link, like an accrual detector: it is the larger of the
 * configured timeout and KOLO_BEAT_SLACK times the longest recent gap between
 * beats (a maximum that decays by 1/64 per beat, a half-life of about 4 s),
 * and at most KOLO_BEAT_MAX_STRETCH times the configured one.
 * The gaps are the larger of those seen between the peer's beats and those
 * between this rank's own beats (how late its negotiator thread got a CPU: a
 * loaded host stretches the timeout before a neighbour's beat is ever late).
 * On a quiet machine beats come every 100 ms and the timeout is the configured
 * one. */
#include <poll.h>
#include <stdlib.h>

#include "collective/net/net.h"
#include "common/clock.h"
#include "common/log.h"

#define NS_PER_MS 1000000LL
#define KOLO_BEAT_SLACK 4       /* a link is silent after this many of its longest recent gaps */
#define KOLO_BEAT_MAX_STRETCH 8 /* the adaptive timeout is at most this many configured ones */

int kolo_peer_timeout_ms_from_env(int fallback_ms) {
  const char *value = getenv("KOLO_PEER_TIMEOUT");
  if (value == NULL || *value == '\0') return fallback_ms;
  char *end = NULL;
  double seconds = strtod(value, &end);
  if (end == value || seconds < 0) return fallback_ms;
  if (seconds == 0) return 0;
  int ms = (int)(seconds * 1000.0);
  /* a timeout shorter than three beats would count a late beat as a death */
  return ms < 3 * KOLO_BEAT_INTERVAL_MS ? 3 * KOLO_BEAT_INTERVAL_MS : ms;
}

int kolo_beat_silent(int64_t heard_ns, int64_t now_ns, int timeout_ms) {
  return timeout_ms > 0 && now_ns - heard_ns >= (int64_t)timeout_ms * NS_PER_MS;
}

int kolo_beat_timeout_ms(int timeout_ms, int64_t gap_max_ns) {
  if (timeout_ms <= 0) return 0;
  int64_t adaptive = KOLO_BEAT_SLACK * gap_max_ns / NS_PER_MS;
  int64_t cap = (int64_t)KOLO_BEAT_MAX_STRETCH * timeout_ms;
  if (adaptive > cap) adaptive = cap;
  return adaptive > timeout_ms ? (int)adaptive : timeout_ms;
}

int64_t kolo_beat_jitter_ns(int64_t link_gap_max_ns, int64_t own_gap_max_ns) {
  return link_gap_max_ns > own_gap_max_ns ? link_gap_max_ns : own_gap_max_ns;
}

/* The timeout link is judged by now. */
static int link_timeout_ms(kolo_net *net, const kolo_control_link *link) {
  return kolo_beat_timeout_ms(atomic_load(&net->peer_timeout_ms),
                              kolo_beat_jitter_ns(link->gap_max_ns, net->own_gap_max_ns));
}

void kolo_net_set_peer_timeout(kolo_net *net, int timeout_ms) {
  atomic_store(&net->peer_timeout_ms, timeout_ms < 0 ? 0 : timeout_ms);
}

void kolo_beat_start(kolo_net *net) {
  int64_t now = kolo_now_ns();
  for (int i = 0; i < 2; i++) {
    /* a neighbour may finish forming (and start beating) a little later */
    net->control[i].heard_ns = now + (int64_t)KOLO_DEFAULT_PEER_TIMEOUT_MS * NS_PER_MS;
    net->control[i].beat_due_ns = now;
    net->control[i].beat_heard_ns = 0;
    net->control[i].gap_max_ns = KOLO_BEAT_INTERVAL_MS * NS_PER_MS;
  }
  net->own_gap_max_ns = KOLO_BEAT_INTERVAL_MS * NS_PER_MS;
}

/* Sends one beat on link (whole, or the link is lost: a half-written message
 * would corrupt the stream). */
static void send_beat(kolo_net *net, kolo_control_link *link) {
  kolo_control_message beat = {
      .magic = KOLO_BEAT_MAGIC, .failed_rank = net->rank, .origin_rank = net->rank};
  int64_t deadline = kolo_deadline_after_ms(KOLO_DEFAULT_PEER_TIMEOUT_MS);
  if (kolo_channel_send_all(&link->channel, &beat, sizeof beat, deadline) != KOLO_OK) {
    link->open = 0;
    kolo_net_fail(net, KOLO_ERR_PEER_LOST, link->peer_rank,
                  "peer lost: rank %d (it takes no beats)", link->peer_rank);
  }
}

int kolo_beat_tick(kolo_net *net) {
  if (net->size < 2 || atomic_load(&net->failed)) return -1;
  int64_t now = kolo_now_ns(), next = INT64_MAX;
  for (int i = 0; i < 2; i++) {
    kolo_control_link *link = &net->control[i];
    if (!link->open) continue;
    if (now >= link->beat_due_ns) {
      /* this beat's gap since the last one: the interval plus how late this thread runs */
      if (i == 0 || !net->control[0].open)
        net->own_gap_max_ns = kolo_beat_gap_update(
            net->own_gap_max_ns, KOLO_BEAT_INTERVAL_MS * NS_PER_MS + (now - link->beat_due_ns));
      send_beat(net, link);
      link->beat_due_ns = now + KOLO_BEAT_INTERVAL_MS * NS_PER_MS;
    }
    if (link->beat_due_ns < next) next = link->beat_due_ns;
    int64_t silent_at = link->heard_ns + (int64_t)link_timeout_ms(net, link) * NS_PER_MS;
    if (atomic_load(&net->peer_timeout_ms) > 0 && silent_at < next) next = silent_at;
  }
  if (next == INT64_MAX) return -1;
  return next <= now ? 0 : (int)((next - now + NS_PER_MS - 1) / NS_PER_MS);
}

void kolo_beat_check(kolo_net *net) {
  if (net->size < 2 || atomic_load(&net->peer_timeout_ms) <= 0) return;
  for (int i = 0; i < 2 && !atomic_load(&net->failed); i++) {
    kolo_control_link *link = &net->control[i];
    if (!link->open || !kolo_beat_silent(link->heard_ns, kolo_now_ns(), link_timeout_ms(net, link)))
      continue;
    /* what is waiting in the socket counts: read it before judging */
    struct pollfd pending = {.fd = kolo_channel_poll_fd(&link->channel), .events = POLLIN};
    if (poll(&pending, 1, 0) > 0) kolo_control_service(net, link);
    int timeout = link_timeout_ms(net, link);
    if (!link->open || !kolo_beat_silent(link->heard_ns, kolo_now_ns(), timeout)) continue;
    kolo_net_fail(net, KOLO_ERR_PEER_LOST, link->peer_rank,
                  "peer lost: rank %d silent for %lld ms (timeout %d ms: KOLO_PEER_TIMEOUT %d ms, "
                  "longest recent beat gap %lld ms)",
                  link->peer_rank, (long long)((kolo_now_ns() - link->heard_ns) / NS_PER_MS),
                  timeout, atomic_load(&net->peer_timeout_ms),
                  (long long)(link->gap_max_ns / NS_PER_MS));
  }
}
