/* Implementation of port.h. */
#include "worker/agent/port.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* host and port of "host:port" / "[v6]:port"; 0 if it is not that. */
static int split(const char *address, char *host, size_t host_len, char *port, size_t port_len) {
  const char *colon = strrchr(address, ':');
  if (colon == NULL || colon == address || colon[1] == '\0' || strlen(colon + 1) >= port_len)
    return 0;
  const char *start = address, *end = colon;
  if (address[0] == '[') {
    if (colon[-1] != ']' || colon - address < 3) return 0;
    start++;
    end--;
  }
  if ((size_t)(end - start) >= host_len) return 0;
  snprintf(host, host_len, "%.*s", (int)(end - start), start);
  snprintf(port, port_len, "%s", colon + 1);
  return 1;
}

kolo_status kolo_agent_port_reserve(const char *address, int *fd, char *err, size_t err_len) {
  *fd = -1;
  char host[256], port[16];
  if (address == NULL || !split(address, host, sizeof host, port, sizeof port)) {
    snprintf(err, err_len, "'%s' is not host:port", address ? address : "(null)");
    return KOLO_ERR_INVALID_ARG;
  }
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *info = NULL;
  int rc = getaddrinfo(host, port, &hints, &info);
  if (rc != 0) {
    snprintf(err, err_len, "cannot resolve %s: %s", address, gai_strerror(rc));
    return KOLO_ERR_ADDRESS;
  }
  int last_errno = 0;
  for (struct addrinfo *ai = info; ai != NULL && *fd < 0; ai = ai->ai_next) {
    int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1;
    if (s >= 0 && setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && listen(s, 4096) == 0) {
      *fd = s;
      break;
    }
    last_errno = errno;
    if (s >= 0) close(s);
  }
  freeaddrinfo(info);
  if (*fd >= 0) return KOLO_OK;
  snprintf(err, err_len, "cannot hold %s: %s", address, strerror(last_errno));
  return KOLO_ERR_ADDRESS;
}
