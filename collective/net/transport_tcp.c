/* The TCP transport: non-blocking sockets with TCP_NODELAY and large buffers,
 * connect with retry until the peer listens, and the blocking helpers used by
 * handshakes. The ring algorithms see it only through kolo_transport_ops. */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "collective/net/copy_align.h"
#include "collective/net/transport.h"
#include "common/clock.h"
#include "common/log.h"

struct kolo_transport_listener {
  int fd;
};

/* Most bytes one send/recv call moves through a bounce buffer (the buffer is
 * this plus a page, so a start anywhere in its first page fits). */
#define BOUNCE_BYTES (1024 * 1024)
/* calls smaller than this go straight even when the direction is shifted: the
 * slow copy of a few KiB costs less than the detour */
#define BOUNCE_MIN_BYTES 4096

/* Calls are timed and chosen for per size class (16-64 KiB, to 256 KiB, to 1
 * MiB, more), since a call's cost per KiB depends on its size: a choice made
 * on 16 KiB calls says little about 64 KiB ones. */
#define SIZE_CLASSES 4

/* One direction's copy alignment (copy_align.h), per size class, and its
 * bounce buffer, allocated the first time the direction is shifted. */
typedef struct tcp_lane {
  kolo_copy_align align[SIZE_CLASSES];
  char *bounce;
} tcp_lane;

static kolo_copy_align *lane_align(tcp_lane *lane, size_t length) {
  int size_class = 0;
  for (size_t top = 64 * 1024; size_class < SIZE_CLASSES - 1 && length >= top; top *= 4) {
    size_class++;
  }
  return &lane->align[size_class];
}

struct kolo_transport_conn {
  int fd;
  int adaptive;     /* time large calls and choose (KOLO_TCP_ALIGN unset or 1) */
  tcp_lane out, in; /* sends, receives */
};

/* Socket buffer size asked for data connections; the kernel may clamp it. 1 MiB
 * rather than 4: on loopback the all-reduce is bound by the kernel's copies,
 * and less data queued per socket keeps them in cache (4 and 16 MiB all-reduces
 * 10-25% faster in A/B runs, #16). */
#define TCP_BUFFER_BYTES (1024 * 1024)

kolo_status kolo_split_address(const char *address, char *host, size_t host_length, char *port,
                               size_t port_length) {
  if (address == NULL) return KOLO_ERR_ADDRESS;
  const char *colon = strrchr(address, ':');
  if (colon == NULL || colon[1] == '\0') return KOLO_ERR_ADDRESS;
  const char *host_start = address;
  size_t host_size = (size_t)(colon - address);
  if (host_size >= 2 && address[0] == '[' && colon[-1] == ']') {
    host_start++;
    host_size -= 2;
  }
  if (host_size == 0 || host_size >= host_length || strlen(colon + 1) >= port_length) {
    return KOLO_ERR_ADDRESS;
  }
  for (const char *p = colon + 1; *p; p++) {
    if (*p < '0' || *p > '9') return KOLO_ERR_ADDRESS;
  }
  memcpy(host, host_start, host_size);
  host[host_size] = '\0';
  strcpy(port, colon + 1);
  return KOLO_OK;
}

static kolo_status resolve(const char *address, int passive, struct addrinfo **out) {
  char host[256], port[16];
  kolo_status status = kolo_split_address(address, host, sizeof host, port, sizeof port);
  if (status != KOLO_OK) {
    KOLO_LOGE("tcp", "bad address '%s' (want host:port)", address ? address : "(null)");
    return status;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  int rc = getaddrinfo(host, port, &hints, out);
  if (rc != 0) {
    KOLO_LOGE("tcp", "cannot resolve '%s': %s", address, gai_strerror(rc));
    return KOLO_ERR_ADDRESS;
  }
  return KOLO_OK;
}

static void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/* Socket buffer size: KOLO_SOCKET_BUFFER_BYTES, 0 = leave it to the kernel's
 * autotuning, unset = TCP_BUFFER_BYTES. */
static int socket_buffer_bytes(void) {
  const char *value = getenv("KOLO_SOCKET_BUFFER_BYTES");
  if (value == NULL || *value == '\0') return TCP_BUFFER_BYTES;
  long parsed = strtol(value, NULL, 10);
  return parsed < 0 ? TCP_BUFFER_BYTES : (int)parsed;
}

static void tune_data_socket(int fd) {
  int one = 1, size = socket_buffer_bytes();
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (size > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
  set_nonblocking(fd);
}

static kolo_status tcp_listen(const char *address, kolo_transport_listener **out) {
  struct addrinfo *info = NULL;
  kolo_status status = resolve(address, 1, &info);
  if (status != KOLO_OK) return status;
  int fd = -1;
  int last_errno = 0;
  for (struct addrinfo *ai = info; ai != NULL; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int size = socket_buffer_bytes();
    if (size > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    /* a deep backlog (the kernel caps it at somaxconn): strangers queued before formation
     * begins must leave room for the real neighbours' connections (form.c drains them) */
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) break;
    last_errno = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(info);
  if (fd < 0) {
    KOLO_LOGE("tcp", "cannot listen on %s: %s", address, strerror(last_errno));
    return last_errno == EADDRINUSE ? KOLO_ERR_ADDRESS : kolo_status_from_errno(last_errno);
  }
  set_nonblocking(fd);
  kolo_transport_listener *listener = calloc(1, sizeof *listener);
  if (listener == NULL) {
    close(fd);
    return KOLO_ERR_NO_MEMORY;
  }
  listener->fd = fd;
  *out = listener;
  return KOLO_OK;
}

static kolo_status tcp_listener_from_fd(int fd, kolo_transport_listener **out) {
  if (fd < 0) return KOLO_ERR_INVALID_ARG;
  int accepting = 0;
  socklen_t length = sizeof accepting;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) != 0 || !accepting) {
    KOLO_LOGE("tcp", "descriptor %d is not a listening socket", fd);
    return KOLO_ERR_INVALID_ARG;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  set_nonblocking(fd);
  kolo_transport_listener *listener = calloc(1, sizeof *listener);
  if (listener == NULL) return KOLO_ERR_NO_MEMORY;
  listener->fd = fd;
  *out = listener;
  return KOLO_OK;
}

static kolo_status tcp_listener_address(const kolo_transport_listener *listener, char *buffer,
                                        size_t length) {
  struct sockaddr_storage address;
  socklen_t address_length = sizeof address;
  if (getsockname(listener->fd, (struct sockaddr *)&address, &address_length) != 0) {
    return kolo_status_from_errno(errno);
  }
  char host[128], port[16];
  if (getnameinfo((struct sockaddr *)&address, address_length, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return KOLO_ERR_ADDRESS;
  }
  int written = address.ss_family == AF_INET6 ? snprintf(buffer, length, "[%s]:%s", host, port)
                                              : snprintf(buffer, length, "%s:%s", host, port);
  return (written < 0 || (size_t)written >= length) ? KOLO_ERR_TOO_LARGE : KOLO_OK;
}

static kolo_status wrap_conn(int fd, kolo_transport_conn **out) {
  kolo_transport_conn *conn = calloc(1, sizeof *conn);
  if (conn == NULL) {
    close(fd);
    return KOLO_ERR_NO_MEMORY;
  }
  conn->fd = fd;
  /* KOLO_TCP_ALIGN: unset or 1 = choose by timing, 0 = always straight,
   * "shift" = always through the bounce buffer (for tests) */
  const char *align = getenv("KOLO_TCP_ALIGN");
  int forced = align != NULL && strcmp(align, "shift") == 0;
  conn->adaptive = !forced && (align == NULL || strcmp(align, "0") != 0);
  for (int c = 0; c < SIZE_CLASSES; c++)
    conn->out.align[c].shifted = conn->in.align[c].shifted = forced;
  *out = conn;
  return KOLO_OK;
}

static kolo_status tcp_accept(kolo_transport_listener *listener, int64_t deadline_ns,
                              kolo_transport_conn **out) {
  for (;;) {
    int fd = accept4(listener->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
      tune_data_socket(fd);
      return wrap_conn(fd, out);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      return kolo_status_from_errno(errno);
    }
    int wait_ms = kolo_ms_until(deadline_ns);
    if (wait_ms == 0) return KOLO_ERR_TIMEOUT;
    struct pollfd pfd = {.fd = listener->fd, .events = POLLIN};
    poll(&pfd, 1, wait_ms);
  }
}

/* One connection attempt with a deadline; EINPROGRESS is waited for with poll. */
static int connect_once(const struct addrinfo *ai, int64_t deadline_ns, int *error_out) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *error_out = errno;
    return -1;
  }
  tune_data_socket(fd);
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    *error_out = errno;
    close(fd);
    return -1;
  }
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  int ready = poll(&pfd, 1, kolo_ms_until(deadline_ns));
  if (ready <= 0) {
    *error_out = ETIMEDOUT;
    close(fd);
    return -1;
  }
  int socket_error = 0;
  socklen_t length = sizeof socket_error;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &socket_error, &length);
  if (socket_error != 0) {
    *error_out = socket_error;
    close(fd);
    return -1;
  }
  return fd;
}

static kolo_status tcp_connect(const char *address, int64_t deadline_ns,
                               kolo_transport_conn **out) {
  struct addrinfo *info = NULL;
  kolo_status status = resolve(address, 0, &info);
  if (status != KOLO_OK) return status;
  int last_error = 0;
  int delay_ms = 2;
  for (;;) {
    for (struct addrinfo *ai = info; ai != NULL; ai = ai->ai_next) {
      int fd = connect_once(ai, deadline_ns, &last_error);
      if (fd >= 0) {
        freeaddrinfo(info);
        return wrap_conn(fd, out);
      }
    }
    /* Refused or unreachable: the peer may not be listening yet. Retry. */
    int left = kolo_ms_until(deadline_ns);
    if (left == 0) break;
    struct timespec pause = {.tv_sec = 0,
                             .tv_nsec = (long)(delay_ms < left ? delay_ms : left) * 1000000L};
    nanosleep(&pause, NULL);
    if (delay_ms < 100) delay_ms *= 2;
  }
  freeaddrinfo(info);
  KOLO_LOGD("tcp", "connect %s failed: %s", address, strerror(last_error));
  return last_error == ETIMEDOUT || last_error == 0 ? KOLO_ERR_TIMEOUT : KOLO_ERR_CONNECT;
}

/* Where a shifted call's bytes go in the lane's bounce buffer: the caller's
 * page offset plus KOLO_COPY_ALIGN_SHIFT, so the kernel's copy distance moves
 * by 32 bytes (out of the slow window if it was in it). NULL when the call goes
 * straight (not shifted, small, or no memory for the bounce buffer). */
static char *lane_bounce(tcp_lane *lane, const void *buffer, size_t length) {
  if (length < BOUNCE_MIN_BYTES || !lane_align(lane, length)->shifted) return NULL;
  if (lane->bounce == NULL) {
    if (posix_memalign((void **)&lane->bounce, 4096, BOUNCE_BYTES + 4096) != 0) {
      lane->bounce = NULL;
      lane_align(lane, length)->shifted = 0;
      return NULL;
    }
    memset(lane->bounce, 0, BOUNCE_BYTES + 4096); /* no page faults in the timed call */
  }
  uintptr_t offset = ((uintptr_t)buffer + KOLO_COPY_ALIGN_SHIFT) & 4095;
  return lane->bounce + offset;
}

/* Feeds a call's timing (length asked, moved) to the chooser of its size
 * class when it moved enough bytes. */
static void lane_timed(tcp_lane *lane, size_t length, int64_t started_ns, size_t moved) {
  if (moved < KOLO_COPY_ALIGN_MEASURE_BYTES) return;
  int64_t spent = kolo_now_ns() - started_ns;
  kolo_copy_align_next(lane_align(lane, length), spent * 1024 / (int64_t)moved);
}

static kolo_status tcp_send(kolo_transport_conn *conn, const void *buffer, size_t length,
                            size_t *moved) {
  *moved = 0;
  if (length == 0) return KOLO_OK;
  int timed = conn->adaptive && length >= KOLO_COPY_ALIGN_MEASURE_BYTES;
  const void *from = buffer;
  size_t want = length;
  char *bounce = lane_bounce(&conn->out, buffer, length);
  int64_t started = timed ? kolo_now_ns() : 0;
  if (bounce != NULL) {
    want = length < BOUNCE_BYTES ? length : BOUNCE_BYTES;
    kolo_copy_bytes(bounce, buffer, want);
    from = bounce;
  }
  for (;;) {
    ssize_t n = send(conn->fd, from, want, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      *moved = (size_t)n;
      if (timed) lane_timed(&conn->out, length, started, *moved);
      return KOLO_OK;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return KOLO_OK;
    return (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
               ? KOLO_ERR_PEER_LOST
               : kolo_status_from_errno(errno);
  }
}

static kolo_status tcp_recv(kolo_transport_conn *conn, void *buffer, size_t length, size_t *moved) {
  *moved = 0;
  if (length == 0) return KOLO_OK;
  int timed = conn->adaptive && length >= KOLO_COPY_ALIGN_MEASURE_BYTES;
  char *bounce = lane_bounce(&conn->in, buffer, length);
  int64_t started = timed ? kolo_now_ns() : 0;
  void *into = bounce != NULL ? bounce : buffer;
  size_t want = bounce != NULL && length > BOUNCE_BYTES ? BOUNCE_BYTES : length;
  for (;;) {
    ssize_t n = recv(conn->fd, into, want, MSG_DONTWAIT);
    if (n > 0) {
      if (bounce != NULL) kolo_copy_bytes(buffer, bounce, (size_t)n);
      *moved = (size_t)n;
      if (timed) lane_timed(&conn->in, length, started, *moved);
      return KOLO_OK;
    }
    if (n == 0) return KOLO_ERR_PEER_LOST;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return KOLO_OK;
    return (errno == ECONNRESET || errno == ENOTCONN) ? KOLO_ERR_PEER_LOST
                                                      : kolo_status_from_errno(errno);
  }
}

static int tcp_poll_fd(const kolo_transport_conn *conn) {
  return conn->fd;
}

static short tcp_poll_events(const kolo_transport_conn *conn, int sending) {
  (void)conn;
  return sending ? POLLOUT : POLLIN;
}

static int tcp_listener_poll_fd(const kolo_transport_listener *listener) {
  return listener->fd;
}

static void tcp_close(kolo_transport_conn *conn) {
  if (conn == NULL) return;
  close(conn->fd);
  free(conn->out.bounce);
  free(conn->in.bounce);
  free(conn);
}

static void tcp_close_listener(kolo_transport_listener *listener) {
  if (listener == NULL) return;
  close(listener->fd);
  free(listener);
}

const kolo_transport_ops kolo_transport_tcp = {
    .name = "tcp",
    .listen = tcp_listen,
    .listener_address = tcp_listener_address,
    .listener_from_fd = tcp_listener_from_fd,
    .accept = tcp_accept,
    .connect = tcp_connect,
    .send = tcp_send,
    .recv = tcp_recv,
    .poll_fd = tcp_poll_fd,
    .poll_events = tcp_poll_events,
    .listener_poll_fd = tcp_listener_poll_fd,
    .close = tcp_close,
    .close_listener = tcp_close_listener,
};

static kolo_status transfer_all(const kolo_transport_ops *ops, kolo_transport_conn *conn,
                                void *buffer, size_t length, int64_t deadline_ns, int sending) {
  size_t done = 0;
  while (done < length) {
    size_t moved = 0;
    kolo_status status = sending
                             ? ops->send(conn, (const char *)buffer + done, length - done, &moved)
                             : ops->recv(conn, (char *)buffer + done, length - done, &moved);
    if (status != KOLO_OK) return status;
    done += moved;
    if (moved > 0) continue;
    int wait_ms = kolo_ms_until(deadline_ns);
    if (wait_ms == 0) return KOLO_ERR_TIMEOUT;
    /* a transport the kernel does not wake by itself (shared memory) is told we
     * sleep, and may say progress is possible now */
    if (ops->prepare_wait != NULL && !ops->prepare_wait(conn, sending)) continue;
    struct pollfd pfd = {.fd = ops->poll_fd(conn), .events = ops->poll_events(conn, sending)};
    poll(&pfd, 1, wait_ms);
  }
  return KOLO_OK;
}

kolo_status kolo_transport_send_all(const kolo_transport_ops *ops, kolo_transport_conn *conn,
                                    const void *buffer, size_t length, int64_t deadline_ns) {
  return transfer_all(ops, conn, (void *)buffer, length, deadline_ns, 1);
}

kolo_status kolo_transport_recv_all(const kolo_transport_ops *ops, kolo_transport_conn *conn,
                                    void *buffer, size_t length, int64_t deadline_ns) {
  return transfer_all(ops, conn, buffer, length, deadline_ns, 0);
}
