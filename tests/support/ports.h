/* Ports for the processes a test starts, held by the test (header only). A port
 * picked with bind(port 0) and closed again is free for anyone until its program
 * listens there, and free again whenever that program stops listening (a ring
 * between epochs, a worker being restarted, etcd being restarted): any bind to
 * port 0 on the machine (an agent's log server, a kolo-server, a test beside this
 * one) or any connect() may be given it, and the program then cannot listen
 * (EADDRINUSE). CI saw it: w3's log server took w2's data-plane port, and w2
 * never formed a ring. kolo_test_hold_port binds a socket with SO_REUSEADDR and
 * never listens on it: the kernel gives that port to no bind to port 0 and to no
 * connect(), while a program that sets SO_REUSEADDR on its listener (kolo's TCP
 * transport, kolo-worker's own hold, etcd: Go does by default) still listens
 * there. A listener without SO_REUSEADDR cannot: hold only ports for those. */
#ifndef KOLO_TEST_PORTS_H
#define KOLO_TEST_PORTS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* A free port on 127.0.0.1, held while *fd is open (close it to let go; the fd
 * is close-on-exec). Returns the port, or -1 (then *fd = -1). */
static inline int kolo_test_hold_port(int *fd) {
  *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (*fd < 0) return -1;
  int one = 1;
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t length = sizeof address;
  if (setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(*fd, (struct sockaddr *)&address, sizeof address) != 0 ||
      getsockname(*fd, (struct sockaddr *)&address, &length) != 0) {
    close(*fd);
    *fd = -1;
    return -1;
  }
  return ntohs(address.sin_port);
}

#endif
