/* kolo_strerror and friends: the text side of include/kolo/status.h, and the one
 * place where errno values become kolo_status codes. */
#include "kolo/status.h"

#include <errno.h>

const char *kolo_strerror(kolo_status status) {
  switch (status) {
#define KOLO_STATUS_TEXT_(name, value, text) \
  case name:                                 \
    return text;
    KOLO_STATUS_LIST(KOLO_STATUS_TEXT_)
#undef KOLO_STATUS_TEXT_
  }
  return "unknown status";
}

const char *kolo_status_name(kolo_status status) {
  switch (status) {
#define KOLO_STATUS_NAME_(name, value, text) \
  case name:                                 \
    return #name;
    KOLO_STATUS_LIST(KOLO_STATUS_NAME_)
#undef KOLO_STATUS_NAME_
  }
  return "KOLO_ERR_UNKNOWN";
}

kolo_status kolo_status_from_errno(int err) {
  switch (err) {
    case 0:
      return KOLO_OK;
    case ENOMEM:
      return KOLO_ERR_NO_MEMORY;
    case EINVAL:
      return KOLO_ERR_INVALID_ARG;
    case ETIMEDOUT:
    case EAGAIN:
      return KOLO_ERR_TIMEOUT;
    case ECONNRESET:
    case EPIPE:
    case ECONNABORTED:
    case ENOTCONN:
      return KOLO_ERR_PEER_LOST;
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
      return KOLO_ERR_CONNECT;
    case EADDRINUSE:
    case EADDRNOTAVAIL:
      return KOLO_ERR_ADDRESS;
    case ENOENT:
      return KOLO_ERR_NOT_FOUND;
    case EEXIST:
      return KOLO_ERR_EXISTS;
    case EIO:
      return KOLO_ERR_IO;
    default:
      return KOLO_ERR_SYSTEM;
  }
}
