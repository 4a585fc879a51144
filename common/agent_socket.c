/* The training process's end of the agent's unix socket (the lines on it are
 * common/agent_proto.h's). */
#include "common/agent_socket.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"

kolo_status kolo_agent_connect(const char *path, int *out) {
  struct sockaddr_un address;
  memset(&address, 0, sizeof address);
  address.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof address.sun_path) return KOLO_ERR_ADDRESS;
  strcpy(address.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return kolo_status_from_errno(errno);
  if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
    int error = errno;
    close(fd);
    KOLO_LOGE("elastic", "cannot reach the agent at %s: %s", path, strerror(error));
    return KOLO_ERR_CONNECT;
  }
  *out = fd;
  return KOLO_OK;
}
