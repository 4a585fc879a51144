/* The agent's log server: kolo-server replicas (never users directly) fetch a job's
 * output from the worker that holds it over plain HTTP (libmicrohttpd, one thread per
 * connection, at most KOLO_AGENT_LOGSERVER_CONNECTIONS, of them at most
 * KOLO_AGENT_LOGSERVER_PER_CLIENT from one address, so strangers holding idle connections
 * from one address leave the servers room), authenticated by the random
 * bearer token the agent publishes in its etcd record next to the server's URL.
 *
 *   GET /v1/logs/<job>?rank=R[&rank=R2...]&tail=N&follow=1&after=SEQ:OFFSET
 *
 * answers 200 with chunked text/plain records, one per line:
 *   L <seq> <offset> <epoch> <rank> <text>   a line; <seq>:<offset> resumes after it
 *   G <n>                                    n segments were deleted (rotated) before here
 *   H                                        nothing new for a second (follow only)
 *   E done | E none                          the end: everything was sent | no such job
 * follow=1 keeps the stream open while the job's process runs here. A reader that
 * stops reading holds one record in memory; the connection times out after 60 s
 * without progress. Bad parameters: 400, a wrong token: 401 (JSON bodies). */
#ifndef KOLO_AGENT_LOGSERVER_H
#define KOLO_AGENT_LOGSERVER_H

#include "kolo/status.h"
#include "worker/agent/logstore.h"

#define KOLO_AGENT_LOGSERVER_CONNECTIONS 256
/* a kolo-server follows at most --max-log-streams (64) streams, one connection each */
#define KOLO_AGENT_LOGSERVER_PER_CLIENT 64

typedef struct kolo_agent_logserver_config {
  const char *listen; /* host:port (IPv4 or a name resolving to one); port 0 picks one */
  const char *token;  /* required from every request */
  kolo_agent_logstore *store;
} kolo_agent_logserver_config;

typedef struct kolo_agent_logserver kolo_agent_logserver;

kolo_status kolo_agent_logserver_start(const kolo_agent_logserver_config *cfg,
                                       kolo_agent_logserver **out, int *bound_port);
/* Ends every open stream, stops, frees. */
void kolo_agent_logserver_stop(kolo_agent_logserver *srv);

#endif
