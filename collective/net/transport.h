/* The point-to-point transport interface the ring algorithms run on. A transport
 * is a small table of functions (like NCCL's transport folder): TCP today, shared
 * memory later, beside it, without touching the algorithms. Connections are
 * byte streams with a pollable descriptor; send/recv never block. */
#ifndef KOLO_COLLECTIVE_TRANSPORT_H
#define KOLO_COLLECTIVE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

typedef struct kolo_transport_listener kolo_transport_listener;
typedef struct kolo_transport_conn kolo_transport_conn;

typedef struct kolo_transport_ops {
  const char *name;
  /* Binds and listens on "host:port" (port 0 = any free port). Does not block.
   * On success *out is owned by the caller (free with close_listener). */
  kolo_status (*listen)(const char *address, kolo_transport_listener **out);
  /* Writes the bound "host:port" into buffer. Does not block. */
  kolo_status (*listener_address)(const kolo_transport_listener *listener, char *buffer,
                                  size_t length);
  /* Wraps an already listening socket inherited from a parent (takes the fd). */
  kolo_status (*listener_from_fd)(int fd, kolo_transport_listener **out);
  /* Blocks until one connection arrives or deadline_ns (CLOCK_MONOTONIC) passes:
   * KOLO_ERR_TIMEOUT. *out is owned by the caller. */
  kolo_status (*accept)(kolo_transport_listener *listener, int64_t deadline_ns,
                        kolo_transport_conn **out);
  /* Blocks until connected to "host:port", retrying while the peer is not yet
   * listening, until deadline_ns: KOLO_ERR_CONNECT / KOLO_ERR_TIMEOUT. */
  kolo_status (*connect)(const char *address, int64_t deadline_ns, kolo_transport_conn **out);
  /* Never blocks. Moves up to length bytes; *moved = 0 when it would block.
   * KOLO_ERR_PEER_LOST when the peer closed or reset the connection. The caller
   * keeps ownership of buffer. */
  kolo_status (*send)(kolo_transport_conn *conn, const void *buffer, size_t length, size_t *moved);
  kolo_status (*recv)(kolo_transport_conn *conn, void *buffer, size_t length, size_t *moved);
  /* Optional (NULL: the caller copies through recv). Never blocks. Points *data
   * at received bytes that lie contiguous in the transport's own memory, at most
   * length of them, and sets *available to how many (0 when none arrived); they
   * stay there, unread, until consume(conn, n) with n <= *available marks the
   * first n read. KOLO_ERR_PEER_LOST as recv. The transport keeps ownership of
   * the bytes. Lets the executor reduce straight out of shared memory. */
  kolo_status (*peek)(kolo_transport_conn *conn, const void **data, size_t length,
                      size_t *available);
  void (*consume)(kolo_transport_conn *conn, size_t bytes);
  /* Descriptor to poll(2) for POLLIN/POLLOUT readiness; valid until close. */
  int (*poll_fd)(const kolo_transport_conn *conn);
  /* poll(2) events that mean progress is possible on poll_fd: for sending
   * (sending = 1) or receiving. TCP: POLLOUT / POLLIN. */
  short (*poll_events)(const kolo_transport_conn *conn, int sending);
  /* Called right before sleeping in poll for sending or receiving: returns 1 if
   * it is safe to sleep (the peer will wake poll_fd), 0 if progress is possible
   * now. NULL = always safe (the kernel wakes us, as with TCP). Never blocks. */
  int (*prepare_wait)(kolo_transport_conn *conn, int sending);
  /* Descriptor that polls readable when a connection waits to be accepted. */
  int (*listener_poll_fd)(const kolo_transport_listener *listener);
  /* Closes and frees; never blocks; NULL is a no-op. */
  void (*close)(kolo_transport_conn *conn);
  void (*close_listener)(kolo_transport_listener *listener);
} kolo_transport_ops;

/* The TCP transport (IPv4/IPv6, TCP_NODELAY, large socket buffers). */
extern const kolo_transport_ops kolo_transport_tcp;

/* Sends/receives exactly length bytes, blocking with poll until deadline_ns.
 * For handshakes and rendezvous, not for the data path. */
kolo_status kolo_transport_send_all(const kolo_transport_ops *ops, kolo_transport_conn *conn,
                                    const void *buffer, size_t length, int64_t deadline_ns);
kolo_status kolo_transport_recv_all(const kolo_transport_ops *ops, kolo_transport_conn *conn,
                                    void *buffer, size_t length, int64_t deadline_ns);

/* Splits "host:port" (IPv6 as "[::1]:port") into host and port buffers. */
kolo_status kolo_split_address(const char *address, char *host, size_t host_length, char *port,
                               size_t port_length);

#endif
