/* The worker's data-plane port, held while the agent lives, by a socket that listens from
 * the start. Between epochs and jobs nothing else may then take the port: not a bind to
 * port 0 on the host (another worker's log server, a kolo-server, an unrelated program),
 * not an outgoing connection, and not another local user who binds it with SO_REUSEADDR
 * and listens to receive the neighbours' hellos (issue #30 item 4: a socket that only binds,
 * as before, let them). The training process gets this very socket (inherited, its number in
 * KOLO_LISTEN_FD; collective/elastic.c forms every ring on a dup of it): connections that
 * arrive while no process runs wait in its backlog, and formation reads them. */
#ifndef KOLO_AGENT_PORT_H
#define KOLO_AGENT_PORT_H

#include <stddef.h>

#include "kolo/status.h"

/* Binds a close-on-exec TCP socket to address ("host:port" or "[v6]:port") with
 * SO_REUSEADDR and listens on it. Does not block. On success *fd owns it (close
 * it to let the port go); on failure *fd = -1 and err says why in one line
 * (KOLO_ERR_ADDRESS: unresolvable or in use, e.g. another program listens there;
 * KOLO_ERR_INVALID_ARG: not host:port). */
kolo_status kolo_agent_port_reserve(const char *address, int *fd, char *err, size_t err_len);

#endif
