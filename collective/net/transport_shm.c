/* The shared-memory transport for ranks on one host: a byte ring per direction
 * in a POSIX shared-memory object, with a TCP connection of its own kept as the
 * doorbell (a byte when the other side said it was about to sleep) so that the
 * executor still sleeps in poll(2) and a dead peer still shows up as a closed
 * socket. The fast path makes no system call: the doorbell socket is read only
 * after this side armed a wait (prepare_wait), and a bell is written only when
 * the other side said it is about to sleep. Offered by the connecting side in the handshake; the
 * acceptor takes it only if it can open the object and finds the offer's nonce in it, so ranks on
 * different hosts (or without a shared /dev/shm) fall back to TCP. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collective/net/copy_align.h"
#include "collective/net/transport_shm.h"
#include "common/clock.h"
#include "common/log.h"

#define SHM_MAGIC 0x4b4f4c4f53484d31ull /* "KOLOSHM1" */
/* 2 MiB: the next operation's first chunk fits while the peer still drains the
 * last one's (at 1 MiB a 1 MiB all-reduce filled the ring and the writer
 * waited each time: bench/mpi/run.py --rt, shm, load 8-10, 1 MiB 375-430 us ->
 * 127-158, 4 MiB 1327-1985 -> 784-1007; a 4 MiB ring read no better) */
#define DEFAULT_CAPACITY (2u * 1024u * 1024u)

typedef struct shm_ring {
  uint64_t magic;
  uint64_t nonce;
  uint64_t capacity;
  char pad0[40];
  _Atomic uint64_t head; /* bytes written, ever (writer) */
  char pad1[56];
  _Atomic uint64_t tail; /* bytes read, ever (reader) */
  char pad2[56];
  _Atomic uint32_t reader_waiting; /* the reader is about to sleep: ring the bell */
  _Atomic uint32_t writer_waiting; /* the writer is about to sleep: send a credit */
  char pad3[56];
  char data[];
} shm_ring;

/* A shm connection: the mapping plus the TCP connection used as doorbell. */
typedef struct shm_conn {
  kolo_transport_conn *tcp;
  shm_ring *ring;
  size_t mapped_bytes;
  int writer;
  int peer_closed;
  int armed;         /* this side raised its waiting flag: a bell may be waiting to be read */
  uint64_t position; /* writer: head; reader: tail (only this side moves it) */
} shm_conn;

struct kolo_shm_offer {
  char name[KOLO_SHM_NAME_BYTES];
  uint64_t nonce;
  shm_ring *ring;
  size_t mapped_bytes;
};

static size_t capacity_from_env(void) {
  const char *value = getenv("KOLO_SHM_BYTES");
  if (value == NULL || *value == '\0') return DEFAULT_CAPACITY;
  unsigned long long parsed = strtoull(value, NULL, 10);
  if (parsed < 65536 || parsed > (1ull << 30)) return DEFAULT_CAPACITY;
  return (size_t)parsed;
}

int kolo_shm_enabled(void) {
  const char *value = getenv("KOLO_SHM");
  return value == NULL || strcmp(value, "0") != 0;
}

static uint64_t random_64(void) {
  uint64_t value = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t ignored = read(fd, &value, sizeof value);
    (void)ignored;
    close(fd);
  }
  return value ^ (uint64_t)getpid() << 32 ^ (uint64_t)kolo_now_ns();
}

kolo_status kolo_shm_offer_create(kolo_shm_offer **out) {
  kolo_shm_offer *offer = calloc(1, sizeof *offer);
  if (offer == NULL) return KOLO_ERR_NO_MEMORY;
  size_t capacity = capacity_from_env();
  offer->nonce = random_64();
  offer->mapped_bytes = sizeof(shm_ring) + capacity;
  snprintf(offer->name, sizeof offer->name, "/kolo-%d-%016llx", (int)getpid(),
           (unsigned long long)offer->nonce);
  int fd = shm_open(offer->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    KOLO_LOGD("shm", "shm_open %s: %s", offer->name, strerror(errno));
    free(offer);
    return KOLO_ERR_UNSUPPORTED;
  }
  kolo_status status = KOLO_OK;
  /* the space is reserved now: a full /dev/shm means TCP, not a SIGBUS later */
  if (ftruncate(fd, (off_t)offer->mapped_bytes) != 0 ||
      posix_fallocate(fd, 0, (off_t)offer->mapped_bytes) != 0) {
    KOLO_LOGD("shm", "cannot reserve %zu bytes for %s", offer->mapped_bytes, offer->name);
    status = KOLO_ERR_UNSUPPORTED;
  } else {
    void *map =
        mmap(NULL, offer->mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
      status = KOLO_ERR_UNSUPPORTED;
    } else {
      offer->ring = map;
      offer->ring->capacity = capacity;
      offer->ring->nonce = offer->nonce;
      atomic_store(&offer->ring->head, 0);
      atomic_store(&offer->ring->tail, 0);
      atomic_store(&offer->ring->reader_waiting, 0);
      atomic_store(&offer->ring->writer_waiting, 0);
      atomic_thread_fence(memory_order_release);
      offer->ring->magic = SHM_MAGIC;
    }
  }
  close(fd);
  if (status != KOLO_OK) {
    shm_unlink(offer->name);
    free(offer);
    return status;
  }
  *out = offer;
  return KOLO_OK;
}

const char *kolo_shm_offer_name(const kolo_shm_offer *offer) {
  return offer->name;
}
uint64_t kolo_shm_offer_nonce(const kolo_shm_offer *offer) {
  return offer->nonce;
}

void kolo_shm_offer_destroy(kolo_shm_offer *offer) {
  if (offer == NULL) return;
  shm_unlink(offer->name);
  if (offer->ring != NULL) munmap(offer->ring, offer->mapped_bytes);
  free(offer);
}

static kolo_status wrap(kolo_transport_conn *tcp, shm_ring *ring, size_t mapped_bytes, int writer,
                        kolo_transport_conn **out) {
  shm_conn *conn = calloc(1, sizeof *conn);
  if (conn == NULL) return KOLO_ERR_NO_MEMORY;
  conn->tcp = tcp;
  conn->ring = ring;
  conn->mapped_bytes = mapped_bytes;
  conn->writer = writer;
  *out = (kolo_transport_conn *)conn;
  return KOLO_OK;
}

kolo_status kolo_shm_offer_accepted(kolo_shm_offer *offer, kolo_transport_conn *tcp,
                                    kolo_transport_conn **out) {
  kolo_status status = wrap(tcp, offer->ring, offer->mapped_bytes, 1, out);
  if (status != KOLO_OK) return status;
  shm_unlink(offer->name);
  offer->ring = NULL; /* the connection owns the mapping now */
  kolo_shm_offer_destroy(offer);
  return KOLO_OK;
}

kolo_status kolo_shm_accept(const char *name, uint64_t nonce, kolo_transport_conn *tcp,
                            kolo_transport_conn **out) {
  if (name[0] != '/' || strchr(name + 1, '/') != NULL) return KOLO_ERR_INVALID_ARG;
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return KOLO_ERR_UNSUPPORTED; /* another host, or no shared /dev/shm */
  struct stat info;
  void *map = MAP_FAILED;
  size_t mapped_bytes = 0;
  if (fstat(fd, &info) == 0 && (size_t)info.st_size > sizeof(shm_ring)) {
    mapped_bytes = (size_t)info.st_size;
    map = mmap(NULL, mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  }
  close(fd);
  shm_unlink(name); /* both sides mapped it (or gave up): nothing may leak */
  if (map == MAP_FAILED) return KOLO_ERR_UNSUPPORTED;
  shm_ring *ring = map;
  if (ring->magic != SHM_MAGIC || ring->nonce != nonce ||
      ring->capacity + sizeof(shm_ring) != mapped_bytes) {
    munmap(map, mapped_bytes);
    return KOLO_ERR_UNSUPPORTED; /* a same-named object of someone else's */
  }
  kolo_status status = wrap(tcp, ring, mapped_bytes, 0, out);
  if (status != KOLO_OK) munmap(map, mapped_bytes);
  return status;
}

/* Reads and discards doorbell/credit bytes; notes a closed peer. */
static kolo_status drain_bell(shm_conn *conn) {
  char sink[256];
  for (;;) {
    size_t moved = 0;
    kolo_status status = kolo_transport_tcp.recv(conn->tcp, sink, sizeof sink, &moved);
    if (status == KOLO_ERR_PEER_LOST) {
      conn->peer_closed = 1;
      return KOLO_OK;
    }
    if (status != KOLO_OK) return status;
    if (moved < sizeof sink) return KOLO_OK;
  }
}

/* After a wait was armed: read what bells came (and notice a closed peer). A
 * bell that arrives later stays in the socket and at worst wakes a later poll
 * early, which then drains it. */
static kolo_status disarm(shm_conn *conn) {
  if (!conn->armed) return KOLO_OK;
  conn->armed = 0;
  /* awake again: the other side need not ring for us (one of the two always
   * sees the other's move, as in prepare_wait) */
  atomic_store(conn->writer ? &conn->ring->writer_waiting : &conn->ring->reader_waiting, 0);
  return drain_bell(conn);
}

static void ring_bell(shm_conn *conn) {
  char bell = 'b';
  size_t moved = 0;
  /* EAGAIN is fine: an unread bell is already waiting on the other side */
  kolo_transport_tcp.send(conn->tcp, &bell, 1, &moved);
}

static kolo_status shm_send(kolo_transport_conn *handle, const void *buffer, size_t length,
                            size_t *moved) {
  shm_conn *conn = (shm_conn *)handle;
  *moved = 0;
  if (length == 0) return KOLO_OK;
  kolo_status status = disarm(conn);
  if (status != KOLO_OK) return status;
  if (conn->peer_closed) return KOLO_ERR_PEER_LOST;
  shm_ring *ring = conn->ring;
  uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
  size_t space = (size_t)(ring->capacity - (conn->position - tail));
  size_t n = length < space ? length : space;
  if (n == 0) return KOLO_OK;
  size_t offset = (size_t)(conn->position % ring->capacity);
  size_t first = ring->capacity - offset < n ? ring->capacity - offset : n;
  kolo_copy_bytes(ring->data + offset, buffer, first);
  if (n > first) kolo_copy_bytes(ring->data, (const char *)buffer + first, n - first);
  conn->position += n;
  atomic_store(&ring->head, conn->position);
  if (atomic_load(&ring->reader_waiting) && atomic_exchange(&ring->reader_waiting, 0)) {
    ring_bell(conn);
  }
  *moved = n;
  return KOLO_OK;
}

static kolo_status shm_recv(kolo_transport_conn *handle, void *buffer, size_t length,
                            size_t *moved) {
  shm_conn *conn = (shm_conn *)handle;
  *moved = 0;
  if (length == 0) return KOLO_OK;
  kolo_status status = disarm(conn);
  if (status != KOLO_OK) return status;
  shm_ring *ring = conn->ring;
  uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
  size_t available = (size_t)(head - conn->position);
  size_t n = length < available ? length : available;
  if (n == 0) return conn->peer_closed ? KOLO_ERR_PEER_LOST : KOLO_OK;
  size_t offset = (size_t)(conn->position % ring->capacity);
  size_t first = ring->capacity - offset < n ? ring->capacity - offset : n;
  kolo_copy_bytes(buffer, ring->data + offset, first);
  if (n > first) kolo_copy_bytes((char *)buffer + first, ring->data, n - first);
  conn->position += n;
  atomic_store(&ring->tail, conn->position);
  if (atomic_load(&ring->writer_waiting) && atomic_exchange(&ring->writer_waiting, 0)) {
    ring_bell(conn);
  }
  *moved = n;
  return KOLO_OK;
}

/* The contiguous run of received bytes at the read position, left in the ring
 * (the executor reduces from it, then consumes). */
static kolo_status shm_peek(kolo_transport_conn *handle, const void **data, size_t length,
                            size_t *available) {
  shm_conn *conn = (shm_conn *)handle;
  *available = 0;
  kolo_status status = disarm(conn);
  if (status != KOLO_OK) return status;
  shm_ring *ring = conn->ring;
  uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
  size_t arrived = (size_t)(head - conn->position);
  if (arrived == 0) return conn->peer_closed ? KOLO_ERR_PEER_LOST : KOLO_OK;
  size_t offset = (size_t)(conn->position % ring->capacity);
  size_t n = ring->capacity - offset < arrived ? ring->capacity - offset : arrived;
  *data = ring->data + offset;
  *available = n < length ? n : length;
  return KOLO_OK;
}

static void shm_consume(kolo_transport_conn *handle, size_t bytes) {
  shm_conn *conn = (shm_conn *)handle;
  if (bytes == 0) return;
  conn->position += bytes;
  atomic_store(&conn->ring->tail, conn->position);
  if (atomic_load(&conn->ring->writer_waiting) && atomic_exchange(&conn->ring->writer_waiting, 0)) {
    ring_bell(conn);
  }
}

/* Before sleeping in poll: raise this side's waiting flag, then look again
 * (the other side clears the flag and rings only after it moved its counter, so
 * with sequentially consistent ordering one of the two always sees the other). */
static int shm_prepare_wait(kolo_transport_conn *handle, int sending) {
  shm_conn *conn = (shm_conn *)handle;
  shm_ring *ring = conn->ring;
  conn->armed = 1;
  if (sending) {
    atomic_store(&ring->writer_waiting, 1);
    uint64_t tail = atomic_load(&ring->tail);
    return ring->capacity - (conn->position - tail) == 0;
  }
  atomic_store(&ring->reader_waiting, 1);
  uint64_t head = atomic_load(&ring->head);
  return head == conn->position;
}

static int shm_poll_fd(const kolo_transport_conn *handle) {
  const shm_conn *conn = (const shm_conn *)handle;
  return kolo_transport_tcp.poll_fd(conn->tcp);
}

/* Both directions wait for a bell byte: data for the reader, credit for the writer. */
static short shm_poll_events(const kolo_transport_conn *handle, int sending) {
  (void)handle, (void)sending;
  return POLLIN;
}

static void shm_close(kolo_transport_conn *handle) {
  shm_conn *conn = (shm_conn *)handle;
  if (conn == NULL) return;
  kolo_transport_tcp.close(conn->tcp);
  munmap(conn->ring, conn->mapped_bytes);
  free(conn);
}

const kolo_transport_ops kolo_transport_shm = {
    .name = "shm",
    .send = shm_send,
    .recv = shm_recv,
    .peek = shm_peek,
    .consume = shm_consume,
    .poll_fd = shm_poll_fd,
    .poll_events = shm_poll_events,
    .prepare_wait = shm_prepare_wait,
    .close = shm_close,
};
