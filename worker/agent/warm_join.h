/* Warm joins (issue 28). A newcomer's process can take seconds to start (Python importing
 * torch took 2.7-3.8 s on the 2-core test machine), and a survivor that switched to the
 * grown ring at once sat idle in its formation for all that time: in the torchft-rate
 * chaos run every failure brings such a join, and those waits were most of the training
 * time the failures cost. So a survivor's agent holds the new ring's RING line until every
 * newcomer's process has said HELLO to its own agent (the newcomer's report, at the new
 * epoch or later, says hello, or that the process already exited); meanwhile the survivors
 * train on in the old ring, and the switch costs the formation and the state sync only.
 * A survivor is an agent whose process formed a ring before; a newcomer is a member that
 * joined after that ring (since_epoch above the epoch the process formed). Past
 * kolo-worker's --warm-join-ms (default KOLO_AGENT_WARM_JOIN_MS; 0 turns the hold off) the
 * line is sent anyway (a newcomer that never starts is then
 * found as it always was: its lease, or the formation). The pure part is here, the
 * reads of the reports in warm_join.c. */
#ifndef KOLO_AGENT_WARM_JOIN_H
#define KOLO_AGENT_WARM_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "coordination/report.h"
#include "coordination/ringspec.h"

#define KOLO_AGENT_WARM_JOIN_MS 20000   /* --warm-join-ms's default */
#define KOLO_AGENT_WARM_JOIN_POLL_MS 50 /* how often the newcomers' reports are read meanwhile */

/* The newcomers of ring for the agent of worker self, whose process last formed the ring of
 * epoch formed_epoch (0: it never formed one, so it is no survivor and waits for nobody):
 * the index of each member other than self with since_epoch > formed_epoch, into out (at
 * most cap); returns how many there are (which may exceed cap). */
size_t kolo_agent_warm_join_newcomers(const Kolo__V1__RingRecord *ring, const char *self,
                                      int64_t formed_epoch, size_t *out, size_t cap);

/* Whether a newcomer whose report is r is warm enough for the ring of epoch: its process,
 * started for that epoch or a later one, said HELLO or has exited already. */
int kolo_agent_warm_join_ready(const Kolo__V1__AgentReport *r, int64_t epoch);

#endif
