/* Implementation of agent.h: one poll loop over a signalfd, a wake-up pipe fed
 * by the etcd watch and lease threads, and the training process's socket. The
 * loop reconciles what runs with the newest assignment (level-triggered: only
 * the latest assignment matters, events in between may be skipped). */
#define _GNU_SOURCE
#include "worker/agent/agent_internal.h"
#include "worker/agent/blob.h"

/* Watch thread: keep the newest assignment value and wake the loop. */
static void on_assignment(const kolo_etcd_watch_update *update, void *user) {
  agent *a = user;
  pthread_mutex_lock(&a->lock);
  a->assignment_refused = 0;
  if (update->kind == KOLO_ETCD_WATCH_RESYNC) {
    free(a->assignment);
    a->assignment = update->kv_count ? strdup((const char *)update->kvs[0].value) : NULL;
  }
  for (size_t i = 0; update->kind == KOLO_ETCD_WATCH_EVENTS && i < update->event_count; i++) {
    free(a->assignment);
    a->assignment = update->events[i].type == KOLO_ETCD_EVENT_PUT
                        ? strdup((const char *)update->events[i].kv.value)
                        : NULL;
  }
  pthread_mutex_unlock(&a->lock);
  poke(a);
}

/* Holds the data-plane port (port.h). At start a failure is logged (every job of
 * this worker would fail to form its ring while another program has the port);
 * later, while no process runs, it is tried again quietly each loop turn. */
static void hold_port(agent *a, int quiet) {
  if (a->port_fd >= 0) return;
  char err[320];
  if (kolo_agent_port_reserve(a->listen, &a->port_fd, err, sizeof err) == KOLO_OK) {
    if (quiet) KOLO_LOGI(LOG, "data-plane port %s held again", a->listen);
  } else if (!quiet) {
    KOLO_LOGW(LOG, "%s: a ring cannot form on this worker while another program holds it", err);
  }
}

/* ---- starting the process ---- */

/* Whether this registration of the worker is drained (its mark names our lease). */
static int drain_marked(agent *a) {
  return a->reg != NULL && kolo_drain_marked(a->etcd, a->id, kolo_membership_lease(a->reg));
}

/* The job let this worker go: if the worker is drained (SIGTERM, or a drain mark), the
 * process gets LEAVE and stops at its next commit, where its peers switch to the planned
 * ring, so nobody redoes a step; past DRAIN_WAIT_MS it is stopped. Returns 1 while it may
 * still leave by itself, 0 when the caller must stop it now. */
static int leave_gracefully(agent *a) {
  if (a->leave == 0) {
    a->leave = -1;
    if (!kolo_agent_proc_connected(a->proc) || !(a->draining || drain_marked(a))) return 0;
    if (kolo_agent_proc_send_msg(
            a->proc, &(kolo_agent_msg){.verb = KOLO_AGENT_LEAVE, .text = "drained"}) != KOLO_OK)
      return 0;
    a->leave = 1;
    a->leave_deadline_ms = mono_ms() + DRAIN_WAIT_MS;
    KOLO_LOGI(LOG, "worker %s drained: its process leaves job %s at its next commit", a->id,
              a->job);
  }
  return a->leave == 1 && mono_ms() < a->leave_deadline_ms;
}

/* Brings what runs in line with the newest assignment. */
static void reconcile(agent *a) {
  pthread_mutex_lock(&a->lock);
  char *value = a->assignment ? strdup(a->assignment) : NULL;
  int refused = a->assignment_refused;
  pthread_mutex_unlock(&a->lock);
  /* one that does not decode is no assignment (as a deleted one) */
  Kolo__V1__Assignment *assignment = NULL;
  char err[256];
  if (value &&
      kolo_assignment_read(value, strlen(value), &assignment, err, sizeof err) != KOLO_OK &&
      !refused) {
    KOLO_LOGW(LOG, "assignment does not decode: %s", err);
    pthread_mutex_lock(&a->lock);
    a->assignment_refused = 1;
    pthread_mutex_unlock(&a->lock);
  }
  free(value);
  const char *job = assignment ? assignment->job : NULL;
  int64_t epoch = assignment ? assignment->epoch : 0;
  const char *ring_key = assignment ? assignment->ring : NULL;

  if (a->proc != NULL && (job == NULL || strcmp(job, a->job) != 0)) {
    if (job == NULL && leave_gracefully(a)) goto out; /* it stops at its next commit */
    kolo_agent_proc_stop(a->proc, job ? "reassigned" : "unassigned", a->opts->stop_grace_ms);
    goto out; /* the next job starts once this process is gone */
  }
  if (job == NULL) {
    if (a->proc == NULL) {
      a->job[0] = '\0';
      kolo_agent_set_state(a, a->draining ? "draining" : "idle");
    }
    goto out;
  }
  if (a->proc == NULL && strcmp(job, a->done_job) == 0 && epoch <= a->done_epoch) goto out;
  if (a->proc != NULL && epoch <= a->epoch) goto out;
  Kolo__V1__RingRecord *ring = kolo_agent_get_ring(a, ring_key);
  if (ring == NULL) goto out;
  if (a->proc == NULL && kolo_agent_stale_member(a, ring)) {
    snprintf(a->done_job, sizeof a->done_job, "%s",
             job); /* never this epoch: the coordinator re-plans */
    a->done_epoch = epoch;
  } else if (a->proc == NULL) {
    kolo_agent_start_process(a, job, ring);
  } else {
    int rank, size;
    char *line = kolo_agent_ring_line_for(a, ring, &rank, &size);
    if (line != NULL) {
      free(a->ring_line);
      a->ring_line = line;
      a->epoch = ring->epoch;
      kolo_agent_warm_join_begin(a, ring); /* survivors train on while newcomers start */
      kolo_agent_capture_segment(a->capture, a->epoch, (uint32_t)rank);
      kolo_agent_write_report(a);
    }
  }
  protobuf_c_message_free_unpacked(&ring->base, NULL);
out:
  if (a->proc && a->ring_line && a->sent_epoch < a->epoch && kolo_agent_proc_connected(a->proc) &&
      kolo_agent_warm_join_ready_now(a)) {
    if (kolo_agent_proc_send(a->proc, a->ring_line) == KOLO_OK) {
      a->sent_epoch = a->epoch;
      a->hs.rings_sent++;
      KOLO_LOGI(LOG, "sent ring epoch %" PRId64 " of job %s", a->epoch, a->job);
    }
  }
  if (assignment) protobuf_c_message_free_unpacked(&assignment->base, NULL);
}

static void reap(agent *a) {
  int code = 0;
  if (!kolo_agent_proc_reap(a->proc, &code)) return;
  KOLO_LOGI(LOG, "process of job %s exited with code %d", a->job, code);
  if (code != 0 && a->leave != 1) a->hs.processes_failed++; /* a leaver stops as asked */
  a->leave = 0;
  a->hello = kolo_agent_proc_said_hello(a->proc);
  const char *start_error = kolo_agent_proc_start_error(a->proc);
  if (start_error != NULL && start_error[0]) /* else: keep what the mode check found */
    snprintf(a->permanent, sizeof a->permanent, "%s", start_error);
  kolo_agent_proc_destroy(a->proc);
  a->proc = NULL;
  char blob[1024]; /* the job's blob, fetched for this process (worker/agent/blob.h) */
  if (kolo_agent_blob_path(a->work_dir, a->job, blob, sizeof blob) == KOLO_OK) unlink(blob);
  kolo_agent_capture_end(a->capture, CAPTURE_DRAIN_MS, a->stderr_tail, sizeof a->stderr_tail);
  if (code == 0) a->stderr_tail[0] = '\0';
  if (kolo_agent_mode_check_exit(&a->mode_check, code)) {
    snprintf(a->permanent, sizeof a->permanent, "%s", a->mode_check.failure);
    KOLO_LOGE(LOG, "job %s: %s", a->job, a->permanent);
  }
  a->exited = 1;
  a->exit_code = code;
  a->exit_epoch = a->epoch;
  snprintf(a->done_job, sizeof a->done_job, "%s", a->job);
  a->done_epoch = a->epoch;
  kolo_agent_write_report(a);
}

/* The work dir holds the job output, the agent socket and the children file, all written by
 * this (often root) process: made 0700, or taken if it is this user's and no one else may
 * write it. The default one, in /tmp, must moreover not be a link (another user could have
 * made /tmp/kolo-worker-<id> first, with a `logs` link to a folder of this user's) and is
 * made private if it is not. */
static kolo_status private_work_dir(const char *dir, int is_default) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    KOLO_LOGE(LOG, "cannot create work dir %s: %s", dir, strerror(errno));
    return KOLO_ERR_IO;
  }
  struct stat st;
  if ((is_default ? lstat(dir, &st) : stat(dir, &st)) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != geteuid() || (!is_default && (st.st_mode & 022) != 0)) {
    KOLO_LOGE(LOG,
              "work dir %s is not a directory of this user that no one else may write (made by "
              "another user?): remove it or give --work-dir",
              dir);
    return KOLO_ERR_STATE;
  }
  if (is_default && (st.st_mode & 077) != 0 && chmod(dir, 0700) != 0) return KOLO_ERR_IO;
  return KOLO_OK;
}

/* The log store, the capture thread and the log server; fills the record's logs fields. */
static kolo_status setup_logs(agent *a) {
  const kolo_agent_options *o = a->opts;
  char dir[512];
  snprintf(dir, sizeof dir, "%s", o->log_dir[0] ? o->log_dir : "");
  if (dir[0] == '\0') snprintf(dir, sizeof dir, "%s/logs", a->work_dir);
  kolo_agent_logstore_config lc = {dir, o->log_file_bytes, o->log_job_bytes, o->log_total_bytes,
                                   o->log_retention_s};
  kolo_status rc = kolo_agent_logstore_open(&lc, &a->logstore);
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG, "cannot open the log store in %s: %s", dir, kolo_strerror(rc));
    return rc;
  }
  KOLO_CHECK(kolo_agent_capture_create(a->logstore, &a->capture));
  unsigned char secret[16];
  if (getrandom(secret, sizeof secret, 0) != (ssize_t)sizeof secret) return KOLO_ERR_SYSTEM;
  for (size_t i = 0; i < sizeof secret; i++) snprintf(a->logs_token + 2 * i, 3, "%02x", secret[i]);
  /* the advertised host is the one servers reach us at; the port is the log server's */
  const char *colon = strrchr(o->advertise, ':');
  int host_len = (int)(colon - o->advertise);
  char listen[300];
  if (o->logs_listen[0])
    snprintf(listen, sizeof listen, "%s", o->logs_listen);
  else
    snprintf(listen, sizeof listen, "%.*s:0", host_len, o->advertise);
  kolo_agent_logserver_config sc = {listen, a->logs_token, a->logstore};
  int port = 0;
  rc = kolo_agent_logserver_start(&sc, &a->logserver, &port);
  if (rc != KOLO_OK && o->logs_listen[0]) return rc; /* asked for: a mistake to report */
  if (rc != KOLO_OK) {
    /* e.g. an IPv6 --advertise: output is still captured (and in failure reports), not served */
    KOLO_LOGW(LOG,
              "cannot serve job logs on %s (give --logs-listen HOST:PORT); kolo logs will not "
              "reach this worker",
              listen);
    return KOLO_OK;
  }
  snprintf(a->logs_url, sizeof a->logs_url, "http://%.*s:%d", host_len, o->advertise, port);
  a->record.logs_url = a->logs_url;
  a->record.logs_token = a->logs_token;
  KOLO_LOGI(LOG, "serving job logs from %s at %s", dir, a->logs_url);
  return KOLO_OK;
}

static kolo_status setup(agent *a) {
  const kolo_agent_options *o = a->opts;
  kolo__v1__worker_record__init(&a->record);
  if (gethostname(a->host, sizeof a->host) != 0) snprintf(a->host, sizeof a->host, "localhost");
  a->host[sizeof a->host - 1] = '\0';
  if (o->id[0])
    snprintf(a->id, sizeof a->id, "%s", o->id);
  else
    snprintf(a->id, sizeof a->id, "%.100s-%d", a->host, (int)getpid());
  if (!kolo_keys_name_valid(a->id)) {
    KOLO_LOGE(LOG, "worker id '%s' is not a valid key segment ([A-Za-z0-9._-], 1..128)", a->id);
    return KOLO_ERR_INVALID_ARG;
  }
  if (!kolo_member_address_valid(o->advertise)) {
    KOLO_LOGE(LOG, "--advertise '%s' is not host:port", o->advertise);
    return KOLO_ERR_INVALID_ARG;
  }
  snprintf(a->listen, sizeof a->listen, "%s", o->listen[0] ? o->listen : o->advertise);
  KOLO_CHECK(kolo_keys_assign(a->id, a->assign_key, sizeof a->assign_key));
  hold_port(a, 0); /* before the log server binds a port of its own */

  /* the record */
  a->record.id = a->id;
  a->record.host = a->host;
  a->record.address = (char *)o->advertise;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  a->record.has_cpus = a->record.has_gpus = 1;
  a->record.cpus = cpus > 0 && cpus < 65536 ? (int)cpus : 1;
  a->record.gpus = o->gpus;
  Kolo__V1__WorkerRecord__LabelsEntry *labels = a->labels;
  char *label_text = a->label_text;
  snprintf(label_text, sizeof a->label_text, "%s", o->labels);
  char *save = NULL;
  for (char *pair = strtok_r(label_text, ",", &save); pair && a->record.n_labels < 64;
       pair = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(pair, '=');
    if (eq == NULL) {
      KOLO_LOGE(LOG, "--labels: '%s' is not key=value", pair);
      return KOLO_ERR_INVALID_ARG;
    }
    *eq = '\0';
    Kolo__V1__WorkerRecord__LabelsEntry *l = &labels[a->record.n_labels];
    kolo__v1__worker_record__labels_entry__init(l);
    l->key = pair;
    l->value = eq + 1;
    a->label_ptrs[a->record.n_labels++] = l;
  }
  a->record.labels = a->label_ptrs;
  a->record.state = "idle";
  char err[256];
  kolo_status rc = kolo_member_validate(&a->record, err, sizeof err);
  a->record.state = NULL;
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG, "bad worker record: %s", err);
    return rc;
  }

  if (o->work_dir[0])
    snprintf(a->work_dir, sizeof a->work_dir, "%s", o->work_dir);
  else
    snprintf(a->work_dir, sizeof a->work_dir, "/tmp/kolo-worker-%.200s", a->id);
  KOLO_CHECK(private_work_dir(a->work_dir, o->work_dir[0] == '\0'));
  kolo_agent_proc_sweep_orphans(a->work_dir); /* an earlier agent's, if it was killed */
  KOLO_CHECK(setup_logs(a));
  if (kolo_etcd_access_connect(&o->etcd_access, NULL, &a->etcd) != KOLO_OK) {
    KOLO_LOGE(LOG, "etcd client: %s", kolo_etcd_last_error());
    return KOLO_ERR_INVALID_ARG;
  }
  KOLO_CHECK(kolo_agent_register_worker(a));

  kolo_etcd_kv kv = {0};
  int64_t revision = 0;
  rc = kolo_etcd_get(a->etcd, kolo_etcd_str(a->assign_key), &kv, &revision);
  if (rc == KOLO_OK) a->assignment = strdup((const char *)kv.value);
  kolo_etcd_kv_clear(&kv);
  if (rc != KOLO_OK && rc != KOLO_ERR_NOT_FOUND) return rc;
  kolo_etcd_watch_opts watch = {.key = kolo_etcd_str(a->assign_key),
                                .start_revision = revision + 1};
  return kolo_etcd_watch_start(a->etcd, &watch, on_assignment, a, &a->watch);
}

kolo_status kolo_agent_run(const kolo_agent_options *opts) {
  agent a;
  memset(&a, 0, sizeof a);
  a.opts = opts;
  a.failed_rank = -1;
  a.port_fd = -1;
  a.wake[0] = a.wake[1] = -1;
  pthread_mutex_init(&a.lock, NULL);
  kolo_status rc = KOLO_ERR_SYSTEM;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGCHLD);
  int sfd = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0 || pipe2(a.wake, O_CLOEXEC | O_NONBLOCK) != 0) goto out;
  if (opts->http_listen[0]) {
    /* before registering: liveness answers while a previous registration expires */
    int port = 0;
    rc = kolo_agent_health_start(opts->http_listen, &a.health, &port);
    if (rc != KOLO_OK) {
      KOLO_LOGE(LOG, "cannot serve --http-listen %s: %s", opts->http_listen, kolo_strerror(rc));
      goto out;
    }
    KOLO_LOGI(LOG, "health and metrics on %s (port %d)", opts->http_listen, port);
  }
  KOLO_CHECK_GOTO(setup(&a), rc, out);
  KOLO_LOGI(LOG, "worker %s ready (data plane %s, work dir %s)", a.id, opts->advertise, a.work_dir);
  reconcile(&a);
  for (;;) {
    kolo_agent_publish_health(&a);
    struct pollfd fds[4];
    int proc_fds[2];
    int n_proc = kolo_agent_proc_poll_fds(a.proc, proc_fds);
    fds[0] = (struct pollfd){.fd = sfd, .events = POLLIN};
    fds[1] = (struct pollfd){.fd = a.wake[0], .events = POLLIN};
    for (int i = 0; i < n_proc; i++)
      fds[2 + i] = (struct pollfd){.fd = proc_fds[i], .events = POLLIN};
    poll(fds, (nfds_t)(2 + n_proc),
         kolo_agent_warm_join_wait_ms(&a, kolo_agent_fence_wait_ms(&a, 250)));
    struct signalfd_siginfo info;
    while (read(sfd, &info, sizeof info) == (ssize_t)sizeof info) {
      if ((info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) && !a.draining) {
        KOLO_LOGI(LOG, "%s: draining (leaving the job, then exiting)",
                  strsignal((int)info.ssi_signo));
        a.draining = 1;
        a.drain_deadline_ms = mono_ms() + DRAIN_WAIT_MS;
        kolo_agent_set_state(&a, "draining");
      }
    }
    char drained[64];
    while (read(a.wake[0], drained, sizeof drained) > 0) {
    }
    kolo_agent_proc_service(a.proc, kolo_agent_on_msg, &a);
    reap(&a);
    pthread_mutex_lock(&a.lock);
    int lost = a.lease_lost;
    a.lease_lost = 0;
    pthread_mutex_unlock(&a.lock);
    if (lost) {
      kolo_agent_lose_registration(&a);
      if (a.draining) break;
    }
    if (a.reg == NULL) {
      if (a.draining) break;
      rc = kolo_agent_reregister(&a);
      if (rc != KOLO_OK) {
        KOLO_LOGE(LOG, "cannot register worker %s: %s (%s)", a.id, kolo_strerror(rc),
                  kolo_etcd_last_error());
        rc = KOLO_ERR_LEASE_LOST;
        goto out;
      }
    }
    if (a.proc == NULL) hold_port(&a, 1);
    if (a.reg != NULL) reconcile(&a); /* no process runs for an unregistered worker */
    kolo_agent_fence(&a);
    kolo_agent_proc_tick(a.proc);
    if (a.report_dirty && mono_ms() - a.report_written_ms >= REPORT_EVERY_MS)
      kolo_agent_write_report(&a);
    if (a.draining) {
      if (a.proc == NULL) break;
      if (mono_ms() > a.drain_deadline_ms)
        kolo_agent_proc_stop(a.proc, "worker draining", opts->stop_grace_ms);
    }
  }
  rc = KOLO_OK;
out:
  kolo_agent_health_stop(a.health);
  kolo_etcd_watch_stop(a.watch);
  kolo_agent_proc_destroy(a.proc);
  if (a.work_dir[0]) kolo_agent_proc_sweep_orphans(a.work_dir);
  if (a.capture) kolo_agent_capture_end(a.capture, CAPTURE_DRAIN_MS, NULL, 0);
  kolo_agent_logserver_stop(a.logserver);
  kolo_agent_capture_destroy(a.capture);
  kolo_agent_logstore_close(a.logstore);
  if (a.reg) kolo_membership_deregister(a.reg);
  if (a.etcd) kolo_etcd_destroy(a.etcd);
  free(a.assignment);
  free(a.ring_line);
  kolo_agent_warm_join_end(&a);
  if (a.progress) protobuf_c_message_free_unpacked(&a.progress->base, NULL);
  if (sfd >= 0) close(sfd);
  if (a.wake[0] >= 0) close(a.wake[0]);
  if (a.wake[1] >= 0) close(a.wake[1]);
  if (a.port_fd >= 0) close(a.port_fd);
  pthread_mutex_destroy(&a.lock);
  if (rc == KOLO_OK) KOLO_LOGI(LOG, "worker %s stopped", a.id);
  return rc;
}
