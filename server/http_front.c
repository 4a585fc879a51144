/* Implementation of http_front.h. Each client connection is a small state machine moved by
 * step(): read the client into `in`, feed the framer, forward the bytes it cleared to the
 * engine's socket, read the engine's answers into `out` and write them to the client. On a
 * framing error (or the client's end of stream) the engine's socket is half-closed once the
 * cleared bytes are through, so libmicrohttpd finishes the answers it owes and closes; then
 * the JSON error is written, the client's side is shut and its leftover input is read and
 * dropped for a moment (so the answer is not lost to a reset) before the close. With TLS,
 * the client's bytes go through a non-blocking GnuTLS session (client_recv/client_send);
 * a client speaking plain HTTP to the TLS port gets a plain JSON 400. */
#define _GNU_SOURCE /* accept4 */
#include "server/http_front.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "server/http_frame.h"

#define LOG "http"

#define IN_CAP (KOLO_SERVER_HTTP_MAX_HEAD_BYTES + 8192) /* a whole head always fits */
#define OUT_CAP (16 * 1024)
#define LINGER_MS 2000
#define SWEEP_MS 1000
#define STEP_ROUNDS 16 /* a busy connection yields the thread after this many I/O rounds */

enum { EP_NONE, EP_LISTEN, EP_WAKE, EP_CLIENT, EP_ENGINE };

typedef struct conn conn;

typedef struct endpoint {
  int kind;
  conn *c;
  unsigned events; /* what epoll watches now; 0 = not in the set (so no HUP can spin it) */
} endpoint;

struct conn {
  int cfd, efd; /* the client's socket; our end of the engine's socketpair (-1 once closed) */
  endpoint cep, eep;
  kolo_server_http_frame frame;
  uint64_t in_base; /* the stream position of in[0] */
  size_t in_len;
  size_t out_off, out_len;
  int client_eof;     /* the client ended its stream */
  int engine_shut;    /* we forward no more to the engine (half-closed or it closed) */
  int engine_eof;     /* the engine closed its side: every answer it owes is in `out` or sent */
  int failed;         /* a framing error: its answer goes after the engine's */
  int error_queued;   /* that answer is in `out` */
  int lingering;      /* all sent; reading and dropping the client's leftovers until close */
  int again;          /* it yielded with work left: step it again without waiting */
  int engine_started; /* its socketpair was handed to the engine (at the first whole request) */
  struct sockaddr_in peer;
  gnutls_session_t tls; /* NULL: plain HTTP */
  int tls_started;      /* its first byte was a TLS handshake record */
  int tls_ready;        /* the handshake is done */
  int tls_read_wants_write;
  int64_t last_out_ms, last_engine_ms, linger_until_ms;
  int64_t start_until_ms;   /* the TLS handshake and the first whole request must come by then */
  int64_t request_since_ms; /* when the request being read began (0 = between requests) */
  conn *prev, *next;
  char in[IN_CAP];
  char out[OUT_CAP];
};

struct kolo_server_http_front {
  kolo_server_http_front_config cfg;
  int lfd, wake, ep;
  endpoint lep, wep, none;
  pthread_t thread;
  conn *conns;
  int n_conns, n_again;
  gnutls_certificate_credentials_t creds; /* NULL: plain HTTP */
  gnutls_priority_t priority;
};

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static const char *reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

size_t kolo_server_http_front_error_answer(int status, const char *code, const char *message,
                                           char *buf, size_t cap) {
  json_t *obj = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message);
  char *body = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
  json_decref(obj);
  if (body == NULL) return 0;
  char date[64];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  int n = snprintf(buf, cap,
                   "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Length: %zu\r\n"
                   "Content-Type: application/json\r\nDate: %s\r\n\r\n%s",
                   status, reason(status), strlen(body), date, body);
  free(body);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static void watch(kolo_server_http_front *f, int fd, endpoint *e, unsigned events) {
  if (fd < 0 || e->events == events) return;
  struct epoll_event ev = {.events = events, .data.ptr = e};
  int op = events == 0 ? EPOLL_CTL_DEL : e->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  epoll_ctl(f->ep, op, fd, &ev);
  e->events = events;
}

static void conn_close(kolo_server_http_front *f, conn *c) {
  if (c->again) f->n_again--;
  if (c->tls) gnutls_deinit(c->tls);
  if (c->cfd >= 0) close(c->cfd); /* closing drops the fd from the epoll set */
  if (c->efd >= 0) close(c->efd);
  if (c->prev) c->prev->next = c->next;
  if (c->next) c->next->prev = c->prev;
  if (f->conns == c) f->conns = c->next;
  f->n_conns--;
  free(c);
}

static void engine_close(conn *c) {
  if (c->efd >= 0) close(c->efd);
  c->efd = -1;
  c->engine_shut = c->engine_eof = 1;
}

#define IO_AGAIN (-1)
#define IO_ERROR (-2)

/* The client's transport, plain or TLS: > 0 bytes, 0 = end of stream, IO_AGAIN, IO_ERROR. */
static ssize_t client_recv(conn *c, char *buf, size_t n) {
  if (c->tls == NULL) {
    ssize_t r = recv(c->cfd, buf, n, 0);
    if (r >= 0) return r;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? IO_AGAIN : IO_ERROR;
  }
  ssize_t r = gnutls_record_recv(c->tls, buf, n);
  c->tls_read_wants_write = 0;
  if (r >= 0) return r;
  if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
    c->tls_read_wants_write = gnutls_record_get_direction(c->tls) == 1;
    return IO_AGAIN;
  }
  if (r == GNUTLS_E_PREMATURE_TERMINATION) return 0; /* closed without close_notify */
  KOLO_LOGD(LOG, "TLS read: %s", gnutls_strerror((int)r));
  return IO_ERROR;
}

/* GnuTLS retries a send that met EAGAIN from its own buffer, whatever is passed again. */
static ssize_t client_send(conn *c, const char *buf, size_t n) {
  if (c->tls == NULL) {
    ssize_t r = send(c->cfd, buf, n, MSG_NOSIGNAL);
    if (r >= 0) return r;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? IO_AGAIN : IO_ERROR;
  }
  ssize_t r = gnutls_record_send(c->tls, buf, n < 16384 ? n : 16384);
  if (r >= 0) return r;
  if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) return IO_AGAIN;
  KOLO_LOGD(LOG, "TLS write: %s", gnutls_strerror((int)r));
  return IO_ERROR;
}

/* Reads what the client sent and frames it; 0, or -1 if the connection is to be dropped. */
static int read_client(conn *c, int *progress) {
  if (c->client_eof || c->failed || c->engine_shut || c->in_len == IN_CAP) return 0;
  ssize_t n = client_recv(c, c->in + c->in_len, IN_CAP - c->in_len);
  if (n < 0) return n == IO_AGAIN ? 0 : -1;
  *progress = 1;
  if (n == 0) {
    c->client_eof = 1;
    return 0;
  }
  int was_idle = kolo_server_http_frame_idle(&c->frame);
  uint64_t heads = c->frame.requests;
  if (kolo_server_http_frame_feed(&c->frame, c->in + c->in_len, (size_t)n) != 0) c->failed = 1;
  c->in_len += (size_t)n;
  /* a request's clock starts at its first byte, and again at each new head: a body trickled
   * a byte at a time keeps libmicrohttpd's idle timeout from ever firing, this does not */
  if (kolo_server_http_frame_idle(&c->frame))
    c->request_since_ms = 0;
  else if (was_idle || c->frame.requests != heads)
    c->request_since_ms = now_ms();
  return 0;
}

static int add_fd(kolo_server_http_front *f, int fd, endpoint *e, unsigned events);

/* Gives the engine its end of a new socketpair: at the first whole request, so a client that
 * never sends one costs libmicrohttpd nothing. -1: the client is to get a 503. */
static int start_engine(kolo_server_http_front *f, conn *c) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  if (f->cfg.hand_over(f->cfg.arg, sv[1], (const struct sockaddr *)&c->peer, sizeof c->peer) != 0) {
    close(sv[0]);
    return -1;
  }
  if (add_fd(f, sv[0], &c->eep, EPOLLIN) != 0) {
    close(sv[0]);
    return -1;
  }
  c->efd = sv[0];
  c->engine_started = 1;
  c->last_engine_ms = now_ms();
  return 0;
}

/* The engine could not take the client: nothing of it was forwarded; it gets a 503. */
static void engine_refused(conn *c) {
  kolo_server_http_frame_error *e = &c->frame.error;
  e->status = 503;
  e->code = "UNAVAILABLE";
  snprintf(e->message, sizeof e->message, "the HTTP server cannot take another connection now");
  c->failed = 1;
  c->engine_shut = c->engine_eof = 1;
}

/* Forwards the cleared bytes to the engine; half-closes it once no more will come. */
static void forward(kolo_server_http_front *f, conn *c, int *progress) {
  if (c->engine_shut) return;
  size_t cleared = (size_t)(c->frame.ready - c->in_base);
  if (cleared > c->in_len) cleared = c->in_len;
  if (!c->engine_started) {
    if (cleared == 0) {
      if (c->failed || c->client_eof) { /* nothing ever reached the engine: none to wait for */
        c->engine_shut = c->engine_eof = 1;
        *progress = 1;
      }
      return;
    }
    *progress = 1;
    if (start_engine(f, c) != 0) {
      engine_refused(c);
      return;
    }
  }
  if (cleared > 0) {
    ssize_t n = send(c->efd, c->in, cleared, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c->engine_shut = 1;
      return;
    }
    memmove(c->in, c->in + n, c->in_len - (size_t)n);
    c->in_len -= (size_t)n;
    c->in_base += (uint64_t)n;
    *progress = 1;
    if ((size_t)n < cleared) return;
  }
  if (c->failed || c->client_eof) {
    shutdown(c->efd, SHUT_WR);
    c->engine_shut = 1;
    c->last_engine_ms = now_ms();
    c->in_len = 0; /* what was not cleared is never forwarded */
    *progress = 1;
  }
}

static void read_engine(conn *c, int *progress) {
  if (!c->engine_started || c->engine_eof || c->out_len == OUT_CAP) return;
  if (c->out_off + c->out_len == OUT_CAP) { /* room only before the unsent bytes */
    memmove(c->out, c->out + c->out_off, c->out_len);
    c->out_off = 0;
  }
  ssize_t n = recv(c->efd, c->out + c->out_off + c->out_len, OUT_CAP - c->out_off - c->out_len, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  *progress = 1;
  c->last_engine_ms = now_ms();
  if (n <= 0) {
    engine_close(c); /* libmicrohttpd closed the connection: it owes nothing more */
    return;
  }
  if (c->out_len == 0) c->last_out_ms = c->last_engine_ms; /* the client's clock starts now */
  c->out_len += (size_t)n;
}

static int write_client(conn *c, int *progress) {
  if (c->out_len == 0) return 0;
  ssize_t n = client_send(c, c->out + c->out_off, c->out_len);
  if (n < 0) return n == IO_AGAIN ? 0 : -1;
  c->out_off += (size_t)n;
  c->out_len -= (size_t)n;
  if (c->out_len == 0) c->out_off = 0;
  c->last_out_ms = now_ms();
  *progress = 1;
  return 0;
}

static void queue_error(conn *c, int status, const char *code, const char *message) {
  size_t n = kolo_server_http_front_error_answer(status, code, message, c->out, OUT_CAP);
  c->out_off = 0;
  c->out_len = n;
  c->error_queued = 1;
}

/* Every answer is out: shut the client's side and drop its leftovers for a moment. */
static void start_linger(conn *c) {
  engine_close(c);
  if (c->tls && c->tls_ready) gnutls_bye(c->tls, GNUTLS_SHUT_WR); /* best effort: no wait */
  shutdown(c->cfd, SHUT_WR);
  c->lingering = 1;
  c->linger_until_ms = now_ms() + LINGER_MS;
}

static int linger_read(conn *c) {
  char sink[4096];
  for (;;) {
    ssize_t n = recv(c->cfd, sink, sizeof sink, 0);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    return -1; /* end of stream or error: done */
  }
}

/* A client speaking plain HTTP to the TLS port: answered in plain text, then closed. */
static void refuse_plain(conn *c) {
  gnutls_deinit(c->tls);
  c->tls = NULL;
  engine_close(c);
  c->failed = 1;
  queue_error(c, 400, "INVALID_ARGUMENT", "this port speaks HTTPS: a plain HTTP request was sent");
}

/* Runs the TLS handshake on: 1 = done, 0 = waiting (epoll set), -1 = close the connection. */
static int handshake(kolo_server_http_front *f, conn *c) {
  if (!c->tls_started) { /* the client's first byte says whether it speaks TLS at all */
    unsigned char first;
    ssize_t n = recv(c->cfd, &first, 1, MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      watch(f, c->cfd, &c->cep, EPOLLIN);
      return 0;
    }
    if (n <= 0) return -1;
    if (first != 0x16) { /* not a TLS handshake record */
      refuse_plain(c);
      return 1;
    }
    c->tls_started = 1;
  }
  for (;;) {
    int rc = gnutls_handshake(c->tls);
    if (rc == GNUTLS_E_SUCCESS) {
      c->tls_ready = 1;
      return 1;
    }
    if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) {
      int out = gnutls_record_get_direction(c->tls) == 1;
      watch(f, c->cfd, &c->cep, out ? EPOLLOUT : EPOLLIN);
      return 0;
    }
    if (gnutls_error_is_fatal(rc)) {
      KOLO_LOGD(LOG, "TLS handshake: %s", gnutls_strerror(rc));
      return -1;
    }
  }
}

/* Moves the connection as far as it goes without blocking; -1 = close it now. */
static int step(kolo_server_http_front *f, conn *c) {
  if (c->again) {
    c->again = 0;
    f->n_again--;
  }
  if (c->lingering) return linger_read(c);
  if (c->tls && !c->tls_ready) {
    int rc = handshake(f, c);
    if (rc == 0) watch(f, c->efd, &c->eep, 0); /* nothing to relay before the handshake */
    if (rc != 1) return rc;
  }
  int progress = 1, rounds = 0;
  unsigned cev = 0, eev = 0;
  while (progress) {
    if (++rounds > STEP_ROUNDS) { /* fairness: the others get the thread now */
      c->again = 1;
      f->n_again++;
      break;
    }
    progress = 0;
    if (read_client(c, &progress) != 0) return -1;
    forward(f, c, &progress);
    read_engine(c, &progress);
    if (write_client(c, &progress) != 0) return -1;
    if (c->engine_eof && c->out_len == 0) {
      if (c->failed && !c->error_queued) {
        const kolo_server_http_frame_error *e = &c->frame.error;
        KOLO_LOGD(LOG, "refused a request: %d %s", e->status, e->message);
        queue_error(c, e->status, e->code, e->message);
        progress = 1;
        continue;
      }
      start_linger(c);
      watch(f, c->cfd, &c->cep, EPOLLIN);
      return linger_read(c);
    }
  }
  /* what to wait for next */
  if (!c->client_eof && !c->failed && !c->engine_shut && c->in_len < IN_CAP) cev |= EPOLLIN;
  if (c->out_len > 0 || (c->tls_read_wants_write && (cev & EPOLLIN))) cev |= EPOLLOUT;
  if (!c->engine_shut && c->frame.ready > c->in_base) eev |= EPOLLOUT;
  if (!c->engine_eof && c->out_len < OUT_CAP) eev |= EPOLLIN;
  watch(f, c->cfd, &c->cep, cev);
  watch(f, c->efd, &c->eep, eev);
  return 0;
}

static int add_fd(kolo_server_http_front *f, int fd, endpoint *e, unsigned events) {
  struct epoll_event ev = {.events = events, .data.ptr = e};
  e->events = events;
  return epoll_ctl(f->ep, EPOLL_CTL_ADD, fd, &ev);
}

static void refuse(int fd, int status, const char *code, const char *message) {
  char buf[512];
  size_t n = kolo_server_http_front_error_answer(status, code, message, buf, sizeof buf);
  if (n > 0 && send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
    KOLO_LOGD(LOG, "could not answer a refused connection: %s", strerror(errno));
  close(fd);
}

static int tls_session(kolo_server_http_front *f, conn *c) {
  if (gnutls_init(&c->tls, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) != 0) {
    c->tls = NULL;
    return -1;
  }
  if (gnutls_priority_set(c->tls, f->priority) != 0 ||
      gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, f->creds) != 0) {
    gnutls_deinit(c->tls);
    c->tls = NULL;
    return -1;
  }
  gnutls_certificate_server_set_request(c->tls, GNUTLS_CERT_IGNORE);
  gnutls_transport_set_int(c->tls, c->cfd);
  return 0;
}

static void accept_one(kolo_server_http_front *f, int fd, const struct sockaddr_in *peer) {
  if (f->n_conns >= f->cfg.max_connections) {
    refuse(fd, 503, "UNAVAILABLE", "too many HTTP connections");
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  conn *c = malloc(sizeof *c);
  if (c == NULL) {
    refuse(fd, 503, "UNAVAILABLE", "out of memory");
    return;
  }
  memset(c, 0, offsetof(conn, in));
  c->cfd = fd;
  c->efd = -1;
  c->peer = *peer;
  c->cep = (endpoint){EP_CLIENT, c, 0};
  c->eep = (endpoint){EP_ENGINE, c, 0};
  kolo_server_http_frame_init(&c->frame);
  c->last_out_ms = c->last_engine_ms = now_ms();
  c->start_until_ms = c->last_out_ms + (int64_t)f->cfg.timeout_s * 1000;
  if ((f->creds && tls_session(f, c) != 0) || add_fd(f, fd, &c->cep, EPOLLIN) != 0) {
    if (c->tls) gnutls_deinit(c->tls);
    free(c);
    close(fd);
    return;
  }
  c->next = f->conns;
  if (f->conns) f->conns->prev = c;
  f->conns = c;
  f->n_conns++;
}

static void accept_all(kolo_server_http_front *f) {
  for (;;) {
    struct sockaddr_in peer;
    socklen_t len = sizeof peer;
    int fd = accept4(f->lfd, (struct sockaddr *)&peer, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        /* out of descriptors or memory: the backlog stays readable, so stop watching it
         * until the next sweep instead of spinning on it */
        KOLO_LOGW(LOG, "accept: %s (pausing new connections for a second)", strerror(errno));
        watch(f, f->lfd, &f->lep, 0);
      }
      return;
    }
    accept_one(f, fd, &peer);
  }
}

/* A request begun (past any TLS handshake) and not whole by its deadline (its first byte, or
 * the connection's start for the first one, plus the timeout): 1 if it is to get a 408. */
static int request_late(const conn *c, int64_t now, int64_t limit) {
  if (c->lingering || c->failed || c->request_since_ms == 0) return 0;
  return now - c->request_since_ms > limit || (!c->engine_started && now >= c->start_until_ms);
}

/* Ends a late request the way a framing error does: what was cleared before it is answered,
 * then kolo's JSON 408, then the close. */
static void request_timeout(kolo_server_http_front *f, conn *c) {
  kolo_server_http_frame_error *e = &c->frame.error;
  e->status = 408;
  e->code = "DEADLINE_EXCEEDED";
  snprintf(e->message, sizeof e->message, "the request did not arrive whole within %d s",
           f->cfg.timeout_s);
  c->failed = 1;
}

/* Deadlines: a request that does not arrive whole in time, a client that takes no answer
 * bytes, an engine that says nothing after we stopped forwarding to it, a linger past its
 * moment. */
static void sweep(kolo_server_http_front *f) {
  int64_t now = now_ms(), limit = (int64_t)f->cfg.timeout_s * 1000;
  watch(f, f->lfd, &f->lep, EPOLLIN); /* accepting again if an error paused it */
  conn *next;
  for (conn *c = f->conns; c; c = next) {
    next = c->next;
    if (request_late(c, now, limit)) {
      request_timeout(f, c);
      if (step(f, c) != 0) conn_close(f, c);
      continue;
    }
    int drop = 0;
    if (c->lingering)
      drop = now >= c->linger_until_ms;
    else if (!c->engine_started)
      drop = now >= c->start_until_ms; /* no handshake or no whole first request in time */
    else if (c->out_len > 0)
      drop = now - c->last_out_ms > limit;
    else if (c->engine_shut && !c->engine_eof)
      drop = now - c->last_engine_ms > limit;
    if (drop) conn_close(f, c);
  }
}

static void *front_thread(void *arg) {
  kolo_server_http_front *f = arg;
  struct epoll_event evs[64];
  int64_t next_sweep = now_ms() + SWEEP_MS;
  for (;;) {
    int n = epoll_wait(f->ep, evs, 64, f->n_again > 0 ? 0 : SWEEP_MS);
    for (int i = 0; i < n; i++) {
      endpoint *e = evs[i].data.ptr;
      if (e->kind == EP_WAKE) return NULL;
      if (e->kind == EP_LISTEN) {
        accept_all(f);
        continue;
      }
      if (e->kind == EP_NONE) continue;
      conn *c = e->c;
      /* the client's socket hung up both ways (a reset): nothing more can reach it */
      int gone = e->kind == EP_CLIENT && !c->lingering && (evs[i].events & (EPOLLHUP | EPOLLERR));
      if (gone || step(f, c) != 0) {
        /* later events of this batch may name c: forget them, by address (c's endpoints
         * are freed with it, so they cannot be read) */
        const void *cep = &c->cep, *eep = &c->eep;
        conn_close(f, c);
        for (int j = i + 1; j < n; j++)
          if (evs[j].data.ptr == cep || evs[j].data.ptr == eep) evs[j].data.ptr = &f->none;
      }
    }
    conn *next;
    for (conn *c = f->n_again > 0 ? f->conns : NULL; c; c = next) {
      next = c->next;
      if (c->again && step(f, c) != 0) conn_close(f, c);
    }
    int64_t now = now_ms();
    if (now >= next_sweep) {
      sweep(f);
      next_sweep = now + SWEEP_MS;
    }
  }
}

static void tls_free(kolo_server_http_front *f) {
  if (f->creds) gnutls_certificate_free_credentials(f->creds);
  if (f->priority) gnutls_priority_deinit(f->priority);
  f->creds = NULL;
  f->priority = NULL;
}

static kolo_status tls_load(kolo_server_http_front *f) {
  const kolo_server_http_front_config *cfg = &f->cfg;
  if (cfg->tls_key_pem == NULL) return KOLO_ERR_INVALID_ARG;
  gnutls_datum_t cert = {(unsigned char *)cfg->tls_cert_pem, (unsigned)strlen(cfg->tls_cert_pem)};
  gnutls_datum_t key = {(unsigned char *)cfg->tls_key_pem, (unsigned)strlen(cfg->tls_key_pem)};
  int rc = gnutls_certificate_allocate_credentials(&f->creds);
  if (rc == 0) rc = gnutls_certificate_set_x509_key_mem(f->creds, &cert, &key, GNUTLS_X509_FMT_PEM);
  if (rc == 0) rc = gnutls_priority_init(&f->priority, "NORMAL", NULL);
  if (rc < 0) {
    KOLO_LOGE(LOG, "TLS certificate or key: %s", gnutls_strerror(rc));
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

kolo_status kolo_server_http_front_start(const kolo_server_http_front_config *config,
                                         kolo_server_http_front **out, int *bound_port) {
  kolo_server_http_front *f = calloc(1, sizeof *f);
  if (f == NULL) return KOLO_ERR_NO_MEMORY;
  f->cfg = *config;
  if (f->cfg.max_connections <= 0) f->cfg.max_connections = 4096;
  if (f->cfg.timeout_s <= 0) f->cfg.timeout_s = 60;
  f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  f->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  f->ep = epoll_create1(EPOLL_CLOEXEC);
  kolo_status rc = KOLO_ERR_ADDRESS;
  int one = 1;
  if (f->lfd < 0 || f->wake < 0 || f->ep < 0) goto fail;
  if (config->tls_cert_pem && (rc = tls_load(f)) != KOLO_OK) goto fail;
  rc = KOLO_ERR_ADDRESS;
  setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(f->lfd, (const struct sockaddr *)&config->addr, sizeof config->addr) != 0 ||
      listen(f->lfd, 1024) != 0) {
    KOLO_LOGE(LOG, "cannot listen for HTTP: %s", strerror(errno));
    goto fail;
  }
  struct sockaddr_in bound;
  socklen_t len = sizeof bound;
  if (getsockname(f->lfd, (struct sockaddr *)&bound, &len) != 0) goto fail;
  f->lep = (endpoint){EP_LISTEN, NULL, 0};
  f->wep = (endpoint){EP_WAKE, NULL, 0};
  if (add_fd(f, f->lfd, &f->lep, EPOLLIN) != 0 || add_fd(f, f->wake, &f->wep, EPOLLIN) != 0)
    goto fail;
  rc = KOLO_ERR_NO_MEMORY;
  if (pthread_create(&f->thread, NULL, front_thread, f) != 0) goto fail;
  *bound_port = ntohs(bound.sin_port);
  *out = f;
  return KOLO_OK;
fail:
  tls_free(f);
  if (f->lfd >= 0) close(f->lfd);
  if (f->wake >= 0) close(f->wake);
  if (f->ep >= 0) close(f->ep);
  free(f);
  return rc;
}

void kolo_server_http_front_stop(kolo_server_http_front *f) {
  if (f == NULL) return;
  uint64_t one = 1;
  if (write(f->wake, &one, sizeof one) != sizeof one) KOLO_LOGW(LOG, "cannot wake the front end");
  pthread_join(f->thread, NULL);
  while (f->conns) conn_close(f, f->conns);
  close(f->lfd);
  close(f->wake);
  close(f->ep);
  tls_free(f);
  free(f);
}
