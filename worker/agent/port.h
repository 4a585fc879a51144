/* The worker's data-plane port, held while the agent lives. The training process
 * listens on that port only while a ring forms and runs; between epochs and jobs
 * nothing listens there, and any bind to port 0 on the host (another worker's log
 * server, a kolo-server, an unrelated program) or any outgoing connection could
 * be given it, after which no ring could form on this worker (EADDRINUSE). The
 * agent keeps a socket bound to the address with SO_REUSEADDR that never listens:
 * the kernel gives such a port to no bind to port 0 and to no connect(), while
 * the process's listener (SO_REUSEADDR as well, collective/transport_tcp.c) can
 * still bind and listen there. */
#ifndef KOLO_AGENT_PORT_H
#define KOLO_AGENT_PORT_H

#include <stddef.h>

#include "kolo/status.h"

/* Binds a close-on-exec TCP socket to address ("host:port" or "[v6]:port") with
 * SO_REUSEADDR and does not listen. Does not block. On success *fd owns it (close
 * it to let the port go); on failure *fd = -1 and err says why in one line
 * (KOLO_ERR_ADDRESS: unresolvable or in use, e.g. another program listens there;
 * KOLO_ERR_INVALID_ARG: not host:port). */
kolo_status kolo_agent_port_reserve(const char *address, int *fd, char *err, size_t err_len);

#endif
