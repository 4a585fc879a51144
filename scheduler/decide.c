/* Implementation of decide.h. The order of the checks is the order of the
 * rules: finished first (a formed ring not RUNNING yet becomes RUNNING before),
 * then lost members (gone lease, drain, failed process, neighbours' FAILED
 * reports), then a held job resuming, a new or re-formed
 * ring becoming RUNNING, and a healthy ring shrinking or growing. A drained member
 * leaves as planned: only real losses count against max_reconfigurations. */
#define _GNU_SOURCE
#include "scheduler/decide.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/false_loss.h"
#include "scheduler/plan.h"

void kolo_sched_decision_clear(kolo_sched_decision *decision) {
  if (decision == NULL) return;
  free(decision->lost);
  memset(decision, 0, sizeof *decision);
}

int kolo_sched_decision_lost(const kolo_sched_decision *decision, size_t i) {
  for (size_t k = 0; k < decision->n_lost; k++)
    if (decision->lost[k].member == i) return 1;
  return 0;
}

/* Marks member i lost (the first reason found wins). */
static void mark_lost(kolo_sched_decision *d, size_t i, const char *why) {
  if (kolo_sched_decision_lost(d, i)) return;
  kolo_sched_lost *entry = &d->lost[d->n_lost++];
  entry->member = i;
  snprintf(entry->why, sizeof entry->why, "%s", why);
}

/* Marks member i leaving because it is drained (a planned leave). */
static void mark_drained(kolo_sched_decision *d, size_t i) {
  if (kolo_sched_decision_lost(d, i)) return;
  mark_lost(d, i, "it is draining");
  d->lost[d->n_lost - 1].drained = 1;
  d->n_drained++;
}

/* Rank 0 exited 0: finish once every member exited or the grace passed. */
static int decide_finished(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  if (job->n_members == 0) return 0;
  const kolo_sched_report *r0 = &job->members[0].report;
  if (!(r0->exited && r0->exit_code == 0)) return 0;
  size_t exited = 0;
  for (size_t i = 0; i < job->n_members; i++) exited += job->members[i].report.exited != 0;
  if (exited == job->n_members ||
      job->now_unix_ms - r0->time_unix_ms > KOLO_SCHED_FINISH_GRACE_MS) {
    d->action = KOLO_SCHED_FINISH;
    d->exited = exited;
  }
  return 1; /* finishing (or about to): nothing else applies */
}

/* Whether a member's failure is permanent by its own report (decide.h's rules but the
 * every-rank one); if so, why. */
static int permanent_why(const kolo_sched_member *m, char *why, size_t size) {
  const kolo_sched_report *r = &m->report;
  if (r->exited && r->exit_epoch < m->since_epoch) return 0; /* an earlier stay's */
  if (r->permanent && r->permanent[0]) { /* whatever the exit: see agent_found below */
    snprintf(why, size, "%s", r->permanent);
    return 1;
  }
  if (r->exited && r->exit_code == 0) return 0;
  if (!r->exited) return 0;
  if (r->exit_code == KOLO_SCHED_EXIT_USAGE) {
    snprintf(why, size, "its process exited with code %d (a usage error)", r->exit_code);
    return 1;
  }
  if (!r->hello && r->exit_code > 0 && r->exit_code < 128) {
    snprintf(why, size, "its process exited with code %d before it reached kolo.init()",
             r->exit_code);
    return 1;
  }
  return 0;
}

/* Members lost by their own facts: no record, a new registration, draining, a failed process. */
static void find_gone(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  for (size_t i = 0; i < job->n_members; i++) {
    const kolo_sched_member *m = &job->members[i];
    if (!m->registered) {
      mark_lost(d, i, "its lease expired");
      continue;
    }
    if (m->ring_lease != 0 && m->lease != m->ring_lease) { /* gone and back: its process is not */
      mark_lost(d, i, "its lease expired and it registered again");
      continue;
    }
    if (m->draining) mark_drained(d, i);
    if (kolo_sched_decision_lost(d, i)) continue; /* draining: it leaves as planned */
    const kolo_sched_report *r = &m->report;
    char why[256];
    if (permanent_why(m, why, sizeof why)) {
      mark_lost(d, i, why);
      d->lost[d->n_lost - 1].permanent = 1;
    } else if (r->exited && r->exit_code != 0 && r->exit_epoch >= m->since_epoch) {
      snprintf(why, sizeof why, "its process exited with code %d", r->exit_code);
      mark_lost(d, i, why);
    }
  }
}

/* Exited by itself (not a signal) in its current stay, before its process formed any ring. */
static int early_exit(const kolo_sched_member *m) {
  const kolo_sched_report *r = &m->report;
  return r->exited && r->exit_code > 0 && r->exit_code < 128 && r->exit_epoch >= m->since_epoch &&
         r->formed_epoch == 0;
}

/* decide.h's every-rank rule: every member exited early with one code -> all permanent;
 * only early exits lost so far and others still running -> wait for them a while. */
static void find_early(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  size_t n = job->n_members, early = 0, first = 0;
  int same = 1;
  int64_t oldest = job->now_unix_ms;
  for (size_t i = 0; i < n; i++) {
    const kolo_sched_member *m = &job->members[i];
    if (!early_exit(m)) continue;
    if (early++ == 0) first = i;
    same &= m->report.exit_code == job->members[first].report.exit_code;
    if (m->report.time_unix_ms < oldest) oldest = m->report.time_unix_ms;
  }
  if (early == 0) return;
  if (early == n && same) {
    for (size_t k = 0; k < d->n_lost; k++) {
      kolo_sched_lost *l = &d->lost[k];
      if (l->drained || l->permanent) continue;
      l->permanent = 1;
      snprintf(l->why, sizeof l->why,
               "its process exited with code %d before any ring formed, as on every rank",
               job->members[l->member].report.exit_code);
    }
    return;
  }
  for (size_t k = 0; k < d->n_lost; k++) /* anything else lost: no reason to wait */
    if (d->lost[k].permanent || d->lost[k].drained || !early_exit(&job->members[d->lost[k].member]))
      return;
  if (early < n && job->now_unix_ms - oldest < KOLO_SCHED_EARLY_SETTLE_MS) d->early = 1;
}

/* FAILED reports of this epoch: a reporter is alive; a rank it names that did
 * not report itself is lost, once every other member has spoken or the settle
 * time passed since the first report; a rank named only in timeouts (no
 * evidence it is gone) only after KOLO_SCHED_TIMEOUT_SETTLE_MS without its own
 * report. */
static kolo_status find_named(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  size_t n = job->n_members;
  if (!job->has_ring || job->ring_size != n || n == 0) return KOLO_OK;
  unsigned char *named = calloc(n, 1), *reported = calloc(n, 1), *evidence = calloc(n, 1);
  if (named == NULL || reported == NULL || evidence == NULL) {
    free(named);
    free(reported);
    free(evidence);
    return KOLO_ERR_NO_MEMORY;
  }
  const char *timeout = kolo_status_name(KOLO_ERR_TIMEOUT);
  size_t reporters = 0;
  int64_t oldest = job->now_unix_ms;
  for (size_t i = 0; i < n; i++) {
    const kolo_sched_report *r = &job->members[i].report;
    if (r->failed_epoch != job->epoch) continue;
    reported[i] = 1;
    reporters++;
    if (r->failed_rank >= 0 && (uint64_t)r->failed_rank < n) {
      named[r->failed_rank] = 1;
      if (r->failed_status == NULL || strcmp(r->failed_status, timeout) != 0)
        evidence[r->failed_rank] = 1;
    }
    if (r->time_unix_ms < oldest) oldest = r->time_unix_ms;
  }
  size_t suspects = 0, silent = 0, due = 0;
  int64_t waited = job->now_unix_ms - oldest;
  for (size_t i = 0; i < n; i++) {
    if (named[i] && !reported[i]) {
      suspects++;
      due += evidence[i] || waited >= KOLO_SCHED_TIMEOUT_SETTLE_MS;
    } else if (!reported[i] && !kolo_sched_decision_lost(d, i)) {
      silent++;
    }
  }
  int settled = silent == 0 || waited >= KOLO_SCHED_FAILED_SETTLE_MS;
  if (reporters > 0 && due > 0 && settled) {
    char why[96];
    snprintf(why, sizeof why, "its ring neighbours lost it at epoch %" PRId64, job->epoch);
    for (size_t i = 0; i < n; i++)
      if (named[i] && !reported[i] && (evidence[i] || waited >= KOLO_SCHED_TIMEOUT_SETTLE_MS))
        mark_lost(d, i, why);
  } else if (reporters > 0 && suspects == 0 && settled) {
    d->stalled = 1; /* everyone they name is alive and reporting: nobody to leave out */
  }                 /* else: the next pass (at most one tick away) looks again */
  free(named);
  free(reported);
  free(evidence);
  return KOLO_OK;
}

static void decide_loss(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  size_t survivors = job->n_members - d->n_lost;
  for (size_t i = 0; i < d->n_lost; i++)
    if (d->lost[i].permanent) { /* no other worker or epoch would do better */
      d->action = KOLO_SCHED_PERMANENT_FAIL;
      return;
    }
  d->limit = job->max_reconfigurations ? job->max_reconfigurations
                                       : KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS;
  if (d->n_drained ==
      d->n_lost) { /* planned leaves only: no reconfiguration spent, never a failure */
    kolo_sched_loss_action action = kolo_sched_on_loss(survivors, job->idle, job->min_workers,
                                                       job->max_workers, 0, UINT32_MAX, &d->take);
    d->action = action == KOLO_SCHED_REFORM ? KOLO_SCHED_DRAIN_REFORM : KOLO_SCHED_DRAIN_HOLD;
    d->planned = d->action == KOLO_SCHED_DRAIN_REFORM && survivors > 0;
    return;
  }
  kolo_sched_loss_action action =
      kolo_sched_on_loss(survivors, job->idle, job->min_workers, job->max_workers,
                         job->reconfigurations, job->max_reconfigurations, &d->take);
  d->action = action == KOLO_SCHED_FAIL     ? KOLO_SCHED_LOST_FAIL
              : action == KOLO_SCHED_REFORM ? KOLO_SCHED_LOST_REFORM
                                            : KOLO_SCHED_LOST_HOLD;
}

/* A stalled ring: the same members at the next epoch, unless past the limit. */
static void decide_stall(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  d->limit = job->max_reconfigurations ? job->max_reconfigurations
                                       : KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS;
  d->action =
      job->reconfigurations + 1 > d->limit ? KOLO_SCHED_STALLED_FAIL : KOLO_SCHED_STALLED_REFORM;
}

static size_t count_formed(const kolo_sched_job_view *job) {
  size_t formed = 0;
  for (size_t i = 0; i < job->n_members; i++)
    formed += job->members[i].report.formed_epoch >= job->epoch;
  return formed;
}

/* Every member formed the status's epoch: RUNNING (restarted: none of them survived an
 * earlier ring). */
static void decide_formed(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  size_t fresh = 0;
  d->action = KOLO_SCHED_FORMED;
  for (size_t i = 0; i < job->n_members; i++)
    fresh += job->members[i].report.first_formed_epoch == job->epoch;
  d->restarted = job->epoch > 1 && fresh == job->n_members;
}

/* No loss: resume a held job, finish a re-form, or shrink / grow / report. */
static void decide_healthy(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  size_t n = job->n_members;
  if (n != job->ring_size) {
    /* held below min_workers: members are the survivors of the last ring */
    if (kolo_sched_on_loss(n, job->idle, job->min_workers, job->max_workers, 0, 0, &d->take) ==
        KOLO_SCHED_REFORM)
      d->action = KOLO_SCHED_RESUME;
    return;
  }
  size_t formed = count_formed(job);
  /* a re-formed ring, or a scheduled job's first (PENDING): RUNNING once every member formed it */
  if (job->phase == KOLO__V1__PHASE__RECONFIGURING || job->phase == KOLO__V1__PHASE__PENDING) {
    if (formed == n && n > 0) decide_formed(job, d);
    return;
  }
  /* RUNNING; never move a ring that has not formed yet (its processes would
   * fail to form the old epoch while their peers already moved on) */
  if (formed < n) return;
  if (n > job->max_workers) {
    d->action = KOLO_SCHED_SHRINK;
    d->keep = job->max_workers;
  } else if (n < job->max_workers && job->idle > 0) {
    d->action = KOLO_SCHED_GROW;
    d->take = job->idle < job->max_workers - n ? job->idle : job->max_workers - n;
    d->planned = 1; /* nobody failed: the members switch at their next commit */
  } else if (n > 0) {
    d->action = KOLO_SCHED_PROGRESS;
  }
}

/* Rank 0 exited 0 in a ring that every member formed but that is not RUNNING yet (a short
 * program may form, train and exit between two passes): RUNNING first (FORMED, the one place
 * it is written), so a job whose ring formed shows it; the next pass finishes it. */
static int formed_before_finish(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  size_t n = job->n_members;
  if (job->phase == KOLO__V1__PHASE__RUNNING || n == 0 || n != job->ring_size) return 0;
  const kolo_sched_report *r0 = &job->members[0].report;
  if (!(r0->exited && r0->exit_code == 0) || count_formed(job) < n) return 0;
  decide_formed(job, d);
  return 1;
}

/* A reason an agent found (the report's `permanent`) fails the job before anything else,
 * finishing included: a process that did not acknowledge its job's training mode may have
 * run to the end, exit 0, in another mode (#26), and a job that ran the wrong mode must not
 * SUCCEED. */
static int agent_found(const kolo_sched_job_view *job, kolo_sched_decision *d) {
  for (size_t i = 0; i < job->n_members; i++) {
    const kolo_sched_member *m = &job->members[i];
    char why[256];
    if (!m->report.permanent || !m->report.permanent[0] || !permanent_why(m, why, sizeof why))
      continue;
    mark_lost(d, i, why);
    d->lost[d->n_lost - 1].permanent = 1;
  }
  if (d->n_lost > 0) d->action = KOLO_SCHED_PERMANENT_FAIL;
  return d->n_lost > 0;
}

kolo_status kolo_sched_decide(const kolo_sched_job_view *job, kolo_sched_decision *out) {
  memset(out, 0, sizeof *out);
  out->lost = calloc(job->n_members + 1, sizeof *out->lost);
  if (out->lost == NULL) return KOLO_ERR_NO_MEMORY;
  if (agent_found(job, out) || formed_before_finish(job, out) || decide_finished(job, out))
    return KOLO_OK;
  find_gone(job, out);
  if (find_named(job, out) != KOLO_OK) {
    kolo_sched_decision_clear(out);
    return KOLO_ERR_NO_MEMORY;
  }
  find_early(job, out);
  if (out->early)
    out->action = KOLO_SCHED_NOTHING; /* the next pass sees the other ranks' exits */
  else if (out->n_lost > 0)
    decide_loss(job, out);
  else if (out->stalled)
    decide_stall(job, out);
  else
    decide_healthy(job, out);
  out->false_loss = kolo_sched_false_loss(job, out); /* a stalled re-form's, else 0 */
  return KOLO_OK;
}

const char *kolo_sched_event_type(kolo_sched_action action) {
  switch (action) {
    case KOLO_SCHED_FINISH:
      return "FINISHED";
    case KOLO_SCHED_LOST_REFORM:
    case KOLO_SCHED_LOST_HOLD:
      return "WORKER_LOST";
    case KOLO_SCHED_LOST_FAIL:
    case KOLO_SCHED_PERMANENT_FAIL:
      return "FAILED";
    case KOLO_SCHED_RESUME:
      return "RESUMING";
    case KOLO_SCHED_FORMED:
      return "RING_FORMED";
    case KOLO_SCHED_SHRINK:
      return "SHRINKING";
    case KOLO_SCHED_GROW:
      return "WORKER_JOINED";
    case KOLO_SCHED_DRAIN_REFORM:
    case KOLO_SCHED_DRAIN_HOLD:
      return "WORKER_DRAINED";
    case KOLO_SCHED_STALLED_REFORM:
      return "RING_STALLED";
    case KOLO_SCHED_STALLED_FAIL:
      return "FAILED";
    default:
      return NULL;
  }
}

/* "w2, w3" (drained members: they are all drained) */
static void print_left(FILE *out, const kolo_sched_job_view *job, const kolo_sched_decision *d) {
  for (size_t i = 0; i < d->n_lost; i++)
    fprintf(out, "%s%s", i ? ", " : "", job->members[d->lost[i].member].worker_id);
}

/* "w2 (its lease expired), w3 (it is draining)" */
static void print_lost(FILE *out, const kolo_sched_job_view *job, const kolo_sched_decision *d) {
  for (size_t i = 0; i < d->n_lost; i++)
    fprintf(out, "%s%s (%s)", i ? ", " : "", job->members[d->lost[i].member].worker_id,
            d->lost[i].why);
}

/* "the program cannot succeed, retrying would not help: w1 (rank 1) its process exited with
 * code 2 (a usage error); w2 (rank 2) ..." (at most KOLO_SCHED_TAIL_WORKERS named). */
static void print_permanent(FILE *out, const kolo_sched_job_view *job,
                            const kolo_sched_decision *d) {
  size_t shown = 0, more = 0;
  fprintf(out, "the program cannot succeed, retrying would not help: ");
  for (size_t i = 0; i < d->n_lost; i++) {
    if (!d->lost[i].permanent) continue;
    if (shown == KOLO_SCHED_TAIL_WORKERS) {
      more++;
      continue;
    }
    fprintf(out, "%s%s (rank %zu) %s", shown++ ? "; " : "",
            job->members[d->lost[i].member].worker_id, d->lost[i].member, d->lost[i].why);
  }
  if (more) fprintf(out, "; and %zu more", more);
}

/* "w1 (KOLO_ERR_TIMEOUT naming rank 2), w2 (...)": this epoch's FAILED reports. */
static void print_reports(FILE *out, const kolo_sched_job_view *job) {
  size_t shown = 0;
  for (size_t i = 0; i < job->n_members; i++) {
    const kolo_sched_report *r = &job->members[i].report;
    if (r->failed_epoch != job->epoch) continue;
    fprintf(out, "%s%s (%s", shown++ ? ", " : "", job->members[i].worker_id,
            r->failed_status && r->failed_status[0] ? r->failed_status : "failed");
    if (r->failed_rank >= 0) fprintf(out, " naming rank %" PRId64, r->failed_rank);
    fprintf(out, ")");
  }
}

/* Below the first line: the stderr tails of lost members whose process failed (of a
 * permanent failure, only the first permanently failed rank's: the others say the same). */
static void print_tails(FILE *out, const kolo_sched_job_view *job, const kolo_sched_decision *d) {
  size_t shown = 0, most = KOLO_SCHED_TAIL_WORKERS;
  if (d->action == KOLO_SCHED_PERMANENT_FAIL) most = 1;
  for (size_t i = 0; i < d->n_lost && shown < most; i++) {
    const kolo_sched_member *m = &job->members[d->lost[i].member];
    const char *tail = m->report.stderr_tail;
    if (d->lost[i].drained || !m->report.exited || m->report.exit_code == 0 || tail == NULL ||
        tail[0] == '\0' || (d->action == KOLO_SCHED_PERMANENT_FAIL && !d->lost[i].permanent))
      continue;
    size_t len = strlen(tail);
    if (len > KOLO_SCHED_TAIL_BYTES) {
      /* keep the newest lines: start after the first newline past the cut */
      const char *cut = tail + len - KOLO_SCHED_TAIL_BYTES;
      const char *nl = strchr(cut, '\n');
      tail = nl ? nl + 1 : cut;
    }
    fprintf(out, "\n%s (rank %zu) stderr, last lines:\n%s", m->worker_id, d->lost[i].member, tail);
    shown++;
  }
}

char *kolo_sched_decision_message(const kolo_sched_job_view *job, const kolo_sched_decision *d) {
  if (kolo_sched_event_type(d->action) == NULL) return NULL;
  char *text = NULL;
  size_t length = 0;
  FILE *out = open_memstream(&text, &length);
  if (out == NULL) return NULL;
  size_t n = job->n_members, survivors = n - d->n_lost;
  switch (d->action) {
    case KOLO_SCHED_FINISH:
      fprintf(out, "rank 0 (%s) exited 0 at epoch %" PRId64 "; %zu of %zu processes exited",
              job->members[0].worker_id, job->epoch, d->exited, n);
      break;
    case KOLO_SCHED_LOST_FAIL:
      fprintf(out, "exceeded max_reconfigurations (%u): lost workers ", d->limit);
      print_lost(out, job, d);
      for (size_t i = 0; i < job->n_earlier_lost; i++)
        fprintf(out, "%s%s", i ? ", " : "; earlier: ", job->earlier_lost[i]);
      break;
    case KOLO_SCHED_PERMANENT_FAIL:
      print_permanent(out, job, d);
      break;
    case KOLO_SCHED_LOST_REFORM:
      fprintf(out, "lost ");
      print_lost(out, job, d);
      fprintf(out, "; re-forming with %zu survivors and %zu new workers", survivors, d->take);
      break;
    case KOLO_SCHED_LOST_HOLD:
      fprintf(out, "lost ");
      print_lost(out, job, d);
      fprintf(out, "; below min_workers: waiting for workers: have %zu, need %u", survivors,
              job->min_workers);
      break;
    case KOLO_SCHED_DRAIN_REFORM:
      print_left(out, job, d);
      fprintf(out, " left (drained); re-forming %swith %zu workers and %zu new workers",
              d->planned ? "at the next commit " : "", survivors, d->take);
      break;
    case KOLO_SCHED_DRAIN_HOLD:
      print_left(out, job, d);
      fprintf(out, " left (drained); below min_workers: waiting for workers: have %zu, need %u",
              survivors, job->min_workers);
      break;
    case KOLO_SCHED_STALLED_REFORM:
      fprintf(out, "epoch %" PRId64 " cannot make progress with every member alive: ", job->epoch);
      print_reports(out, job);
      fprintf(out, "; re-forming the same %zu workers", n);
      kolo_sched_print_false_loss(out, job, d);
      break;
    case KOLO_SCHED_STALLED_FAIL:
      fprintf(out,
              "exceeded max_reconfigurations (%u): epoch %" PRId64
              " cannot make progress with every member alive: ",
              d->limit, job->epoch);
      print_reports(out, job);
      break;
    case KOLO_SCHED_RESUME:
      fprintf(out, "workers available again: resuming with %zu survivors and %zu new workers", n,
              d->take);
      break;
    case KOLO_SCHED_FORMED:
      fprintf(out, "every member formed epoch %" PRId64 " (%zu workers)", job->epoch, n);
      if (d->restarted)
        fprintf(out,
                "; restarted from the beginning: no process of the earlier ring survived "
                "(a program that does not use kolo.elastic exits when a worker is lost, and "
                "the job starts it again)");
      break;
    case KOLO_SCHED_SHRINK:
      fprintf(out, "max_workers is %u: leaving %zu workers", job->max_workers, n - d->keep);
      break;
    case KOLO_SCHED_GROW:
      fprintf(out, "%zu idle workers join at the next commit (below max_workers %u)", d->take,
              job->max_workers);
      break;
    default:
      break;
  }
  if (d->action == KOLO_SCHED_LOST_FAIL || d->action == KOLO_SCHED_LOST_REFORM ||
      d->action == KOLO_SCHED_LOST_HOLD || d->action == KOLO_SCHED_PERMANENT_FAIL)
    print_tails(out, job, d);
  if (fclose(out) != 0) {
    free(text);
    return NULL;
  }
  return text;
}
