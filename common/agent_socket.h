/* Connecting to the kolo-worker agent's unix socket (common/agent_socket.c). */
#ifndef KOLO_COMMON_AGENT_SOCKET_H
#define KOLO_COMMON_AGENT_SOCKET_H

#include "kolo/status.h"

/* Connects to the agent listening at path; *out is the socket. KOLO_ERR_ADDRESS
 * for a path too long for a unix socket, KOLO_ERR_CONNECT (logged) when nobody
 * listens there. */
kolo_status kolo_agent_connect(const char *path, int *out);

#endif
