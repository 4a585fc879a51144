/* Implementation of false_loss.h. */
#include "scheduler/false_loss.h"

#include <stdint.h>
#include <string.h>

/* Whether a FAILED report of this epoch names rank i as lost (KOLO_ERR_PEER_LOST). */
static int accused(const kolo_sched_job_view *job, size_t i) {
  const char *lost = kolo_status_name(KOLO_ERR_PEER_LOST);
  for (size_t k = 0; k < job->n_members; k++) {
    const kolo_sched_report *r = &job->members[k].report;
    if (r->present && r->failed_epoch == job->epoch && r->failed_rank >= 0 &&
        (uint64_t)r->failed_rank == i && r->failed_status != NULL &&
        strcmp(r->failed_status, lost) == 0)
      return 1;
  }
  return 0;
}

/* Whether member m is alive in the process its ring was formed with. */
static int alive(const kolo_sched_job_view *job, const kolo_sched_member *m) {
  const kolo_sched_report *r = &m->report;
  if (!m->registered || (m->ring_lease != 0 && m->lease != m->ring_lease)) return 0;
  if (r->exited && r->exit_epoch >= m->since_epoch) return 0;
  return r->present && r->failed_epoch == job->epoch;
}

int kolo_sched_falsely_lost(const kolo_sched_job_view *job, size_t i) {
  if (!job->has_ring || job->ring_size != job->n_members || i >= job->n_members) return 0;
  return accused(job, i) && alive(job, &job->members[i]);
}

int kolo_sched_false_loss(const kolo_sched_job_view *job, const kolo_sched_decision *d) {
  if (d->action != KOLO_SCHED_STALLED_REFORM) return 0;
  for (size_t i = 0; i < job->n_members; i++)
    if (kolo_sched_falsely_lost(job, i)) return 1;
  return 0;
}

void kolo_sched_print_false_loss(FILE *out, const kolo_sched_job_view *job,
                                 const kolo_sched_decision *d) {
  if (!d->false_loss) return; /* kolo_sched_decide worked it out */
  size_t shown = 0;
  fprintf(out, "; a false loss: ");
  for (size_t i = 0; i < job->n_members; i++)
    if (kolo_sched_falsely_lost(job, i))
      fprintf(out, "%s%s (rank %zu)", shown++ ? ", " : "", job->members[i].worker_id, i);
  fprintf(out, " %s declared lost (%s) while alive in the same process", shown > 1 ? "were" : "was",
          kolo_status_name(KOLO_ERR_PEER_LOST));
}
