/* What the process says and what the agent reports: the agent protocol's messages
 * (HELLO, MODE, FORMED, FAILED, REPORT), the job report in etcd (coordination/report.h,
 * written at most every REPORT_EVERY_MS) and the health state behind /metrics. */
#define _GNU_SOURCE
#include "worker/agent/agent_internal.h"

void kolo_agent_write_report(agent *a) {
  if (a->job[0] == '\0') return;
  char key[512];
  if (kolo_keys_report(a->job, a->id, key, sizeof key) != KOLO_OK) {
    KOLO_LOGW(LOG, "no report for job '%s': %s", a->job, kolo_etcd_last_error());
    return;
  }
  /* the record's owner is coordination/report.h (strings and progress borrowed here) */
  Kolo__V1__AgentReport r = KOLO__V1__AGENT_REPORT__INIT; /* presence: kolo_report_write's */
  r.worker = a->id;
  r.epoch = a->epoch;
  r.formed_epoch = a->formed_epoch;
  r.failed_epoch = a->failed_epoch;
  r.failed_rank = a->failed_rank;
  r.failed_status = a->failed_status;
  r.exited = a->exited != 0;
  r.exit_code = a->exit_code;
  r.exit_epoch = a->exit_epoch;
  r.time_unix_ms = wall_ms();
  r.pid = kolo_agent_proc_pid(a->proc);
  r.progress = a->progress;
  r.stderr_tail = a->exited && a->stderr_tail[0] ? a->stderr_tail : NULL;
  r.hello = a->hello != 0;
  r.first_formed_epoch = a->first_formed_epoch;
  r.permanent = a->permanent[0] ? a->permanent : NULL;
  char *text = NULL, err[256];
  if (kolo_report_write(&r, &text, err, sizeof err) != KOLO_OK) {
    KOLO_LOGW(LOG, "no report for job '%s': %s", a->job, err);
    return;
  }
  kolo_status rc = kolo_etcd_put(a->etcd, kolo_etcd_str(key), kolo_etcd_str(text), 0, NULL, NULL);
  free(text);
  if (rc != KOLO_OK) {
    KOLO_LOGW(LOG, "cannot write report %s: %s", key, kolo_etcd_last_error());
    a->hs.report_errors++;
    a->report_dirty =
        1; /* retried on the next tick: an exit or FAILED report must reach the coordinator */
    return;
  }
  a->hs.reports_written++;
  a->report_dirty = 0;
  a->report_written_ms = mono_ms();
}

/* The process failed the mode check: the report says so at once (the job fails without
 * re-forming) and the process is stopped. */
static void mode_failed(agent *a) {
  snprintf(a->permanent, sizeof a->permanent, "%s", a->mode_check.failure);
  KOLO_LOGE(LOG, "job %s: %s", a->job, a->permanent);
  kolo_agent_write_report(a);
  if (a->proc)
    kolo_agent_proc_stop(a->proc, "the job's training mode was not acknowledged",
                         a->opts->stop_grace_ms);
}

void kolo_agent_on_msg(const kolo_agent_msg *msg, void *user) {
  agent *a = user;
  switch (msg->verb) {
    case KOLO_AGENT_HELLO:
      KOLO_LOGI(LOG, "process %lld says HELLO (agent protocol version %d)",
                (long long)msg->hello.pid, msg->hello.version);
      a->sent_epoch = 0; /* (re)send the current ring */
      if (!a->hello) {   /* at once: the scheduler judges an early exit by it, and the
                          * survivors of a growing ring wait for it (warm_join.h) */
        a->hello = 1;
        kolo_agent_write_report(a);
      }
      break;
    case KOLO_AGENT_MODE:
      KOLO_LOGI(LOG, "process of job %s acknowledges mode %s", a->job,
                kolo_mode_name((kolo_mode)msg->mode.mode));
      break;
    case KOLO_AGENT_FORMED:
      a->formed_epoch = (int64_t)msg->formed.epoch;
      if (a->first_formed_epoch == 0) a->first_formed_epoch = a->formed_epoch;
      KOLO_LOGI(LOG, "ring of epoch %lld formed", (long long)a->formed_epoch);
      kolo_agent_write_report(a);
      break;
    case KOLO_AGENT_FAILED:
      a->failed_epoch = (int64_t)msg->failed.epoch;
      a->failed_rank = msg->failed.failed_rank;
      snprintf(a->failed_status, sizeof a->failed_status, "%s", msg->failed.status);
      KOLO_LOGW(LOG, "process reports epoch %lld failed: %s (rank %d)", (long long)a->failed_epoch,
                a->failed_status, a->failed_rank);
      kolo_agent_write_report(
          a); /* at once: the coordinator re-forms without waiting for the TTL */
      break;
    case KOLO_AGENT_REPORT: {
      /* merged: a final line (e.g. kolo-train's "done") keeps earlier fields */
      char err[256];
      if (kolo_report_progress_merge(&a->progress, msg->text, strlen(msg->text), err, sizeof err) ==
          KOLO_OK) {
        a->report_dirty = 1;
        if (mono_ms() - a->report_written_ms >= REPORT_EVERY_MS) kolo_agent_write_report(a);
      } else {
        KOLO_LOGW(LOG, "ignoring a REPORT: %s", err);
      }
      break;
    }
    default:
      break; /* the codec lets only process -> agent verbs through */
  }
  double step = 0;
  int has_step = msg->verb == KOLO_AGENT_REPORT && a->progress != NULL &&
                 kolo_codec_struct_number(a->progress, "step", &step);
  if (kolo_agent_mode_check_msg(&a->mode_check, msg, has_step)) mode_failed(a);
}

/* Publishes what /readyz and /metrics show (health.h): cheap, done once per loop turn. */
/* The reported number under key (0 if none, as the health page shows it). */
static double progress_number(const Kolo__V1__Struct *progress, const char *key) {
  double d = 0;
  return kolo_codec_struct_number(progress, key, &d) ? d : 0;
}

void kolo_agent_publish_health(agent *a) {
  if (a->health == NULL) return;
  kolo_agent_health_state *h = &a->hs;
  snprintf(h->id, sizeof h->id, "%s", a->id);
  h->registered = a->reg != NULL && kolo_membership_alive(a->reg);
  snprintf(h->state, sizeof h->state, "%s", a->state ? a->state : "");
  snprintf(h->job, sizeof h->job, "%s", a->proc ? a->job : "");
  h->epoch = a->proc ? a->epoch : 0;
  h->process_running = a->proc != NULL;
  h->fenced = a->fenced != KOLO_AGENT_FENCED_NO;
  h->has_progress = a->proc != NULL && a->progress != NULL;
  if (h->has_progress) {
    h->step = progress_number(a->progress, "step");
    if (!kolo_codec_struct_number(a->progress, "step", &h->step))
      h->step = progress_number(a->progress, "steps");
    h->total_steps = progress_number(a->progress, "total_steps");
    h->loss = progress_number(a->progress, "loss");
    h->samples_per_sec = progress_number(a->progress, "samples_per_sec");
  }
  kolo_agent_health_publish(a->health, h);
}
