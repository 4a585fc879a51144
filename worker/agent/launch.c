/* Starting a training process for a ring: the job's spec and ring records read from etcd,
 * the RING line for this worker, the argv (exec, or kolo-train for builtin jobs) and the
 * environment (KOLO_AGENT_SOCKET, the job's mode, logs and checkpoints). */
#define _GNU_SOURCE
#include "worker/agent/agent_internal.h"
#include "worker/agent/blob.h"

typedef struct strv {
  char **items;
  size_t count, cap;
} strv;

static int strv_push(strv *v, char *owned) {
  if (owned == NULL) return -1;
  if (v->count + 2 > v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 16;
    char **grown = realloc(v->items, cap * sizeof *grown);
    if (grown == NULL) {
      free(owned);
      return -1;
    }
    v->items = grown;
    v->cap = cap;
  }
  v->items[v->count++] = owned;
  v->items[v->count] = NULL;
  return 0;
}

static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char *out = NULL;
  if (vasprintf(&out, fmt, args) < 0) out = NULL;
  va_end(args);
  return out;
}

static void strv_free(strv *v) {
  for (size_t i = 0; i < v->count; i++) free(v->items[i]);
  free(v->items);
  memset(v, 0, sizeof *v);
}

/* Reads the job spec at key (kolo.v1.JobSpec, written by kolo-server through the one
 * codec) through that codec; NULL if it cannot be read or does not decode (logged). */
static Kolo__V1__JobSpec *get_spec(agent *a, const char *key) {
  kolo_etcd_kv kv = {0};
  if (kolo_etcd_get(a->etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK) {
    KOLO_LOGW(LOG, "cannot read %s: %s", key, kolo_etcd_last_error());
    return NULL;
  }
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  if (kolo_codec_read((const char *)kv.value, kv.value_len, &kolo__v1__job_spec__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN, &msg, &fault) != KOLO_OK)
    KOLO_LOGW(LOG, "%s is not a job spec: %s", key, fault.message);
  kolo_etcd_kv_clear(&kv);
  return (Kolo__V1__JobSpec *)msg;
}

/* Reads the ring record at key through its codec (coordination/ringspec.h): a new message
 * (protobuf_c_message_free_unpacked), or NULL if
 * it cannot be read or is not a valid record (logged, naming what is wrong). */
Kolo__V1__RingRecord *kolo_agent_get_ring(agent *a, const char *key) {
  kolo_etcd_kv kv = {0};
  if (kolo_etcd_get(a->etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK) {
    KOLO_LOGW(LOG, "cannot read %s: %s", key, kolo_etcd_last_error());
    return NULL;
  }
  Kolo__V1__RingRecord *ring = NULL;
  char err[256];
  if (kolo_ringspec_read((const char *)kv.value, kv.value_len, &ring, err, sizeof err) != KOLO_OK)
    KOLO_LOGE(LOG, "%s is not a valid ring record: %s", key, err);
  kolo_etcd_kv_clear(&kv);
  return ring;
}

/* Whether the ring's member entry for this worker names another registration of it:
 * the ring was planned for this worker before its lease expired (the process it had
 * is gone), so the coordinator counts that member lost and this registration must
 * not take its place. Entries without a lease (older records) name any. */
int kolo_agent_stale_member(agent *a, const Kolo__V1__RingRecord *ring) {
  int me = kolo_ringspec_rank_of(ring, a->id);
  int64_t lease = me < 0 ? 0 : ring->members[me]->lease;
  int64_t ours = a->reg ? kolo_membership_lease(a->reg) : 0;
  if (lease == 0 || lease == ours) return 0;
  KOLO_LOGW(LOG,
            "the ring names registration %" PRIx64 " of worker %s, not this one (%" PRIx64
            "): not joining it",
            (uint64_t)lease, a->id, (uint64_t)ours);
  return 1;
}

/* Builds the RING line for this worker from the ring record; NULL if absent from
 * it, or if the record does not make a valid RING (logged). */
char *kolo_agent_ring_line_for(agent *a, const Kolo__V1__RingRecord *ring, int *rank, int *size) {
  int me = kolo_ringspec_rank_of(ring, a->id);
  if (me < 0 || ring->n_members > KOLO_AGENT_MAX_RING || kolo_agent_stale_member(a, ring))
    return NULL;
  const char **peers = calloc(ring->n_members, sizeof *peers);
  if (peers == NULL) return NULL;
  for (size_t i = 0; i < ring->n_members; i++) peers[i] = ring->members[i]->address;
  const Kolo__V1__RingMember *mine = ring->members[me];
  kolo_agent_msg msg = {
      .verb = KOLO_AGENT_RING,
      .ring = {
          .epoch = (uint64_t)ring->epoch,
          .rank = me,
          .size = (int)ring->n_members,
          .local_rank = (int)mine->local_rank,
          .local_size = (int)mine->local_size,
          .timeout_ms = (int)ring->timeout_ms,
          .secret = ring->secret,
          .listen_address = a->listen,
          .peers = peers,
          /* a planned ring (a drained member leaves): switch at the next commit, nothing redone */
          .planned = ring->planned}};
  char *line = NULL, error[256];
  if (kolo_agent_msg_format(&msg, &line, error, sizeof error) != KOLO_OK)
    KOLO_LOGE(LOG, "the ring record of epoch %lld is not a valid ring for this worker: %s",
              (long long)ring->epoch, error);
  free(peers);
  if (line == NULL) return NULL;
  *rank = me;
  *size = (int)ring->n_members;
  return line;
}

static int push_builtin_argv(agent *a, strv *argv, const Kolo__V1__BuiltinProgram *builtin,
                             const Kolo__V1__JobSpec *spec) {
  const char *bin = a->opts->train_bin;
  char self[PATH_MAX], fallback[PATH_MAX + 16];
  if (bin[0] == '\0') {
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(fallback, sizeof fallback, "%s/kolo-train", dirname(self));
    bin = fallback;
  }
  int bad = strv_push(argv, strdup(bin));
  const char *model = builtin->model, *dataset = builtin->dataset;
  if (model && model[0]) bad |= strv_push(argv, format("--model=%s", model));
  if (dataset && dataset[0]) bad |= strv_push(argv, format("--dataset=%s", dataset));
  if (builtin->learning_rate > 0) bad |= strv_push(argv, format("--lr=%g", builtin->learning_rate));
  if (builtin->epochs > 0) bad |= strv_push(argv, format("--epochs=%u", builtin->epochs));
  if (builtin->steps > 0) bad |= strv_push(argv, format("--steps=%" PRIu64, builtin->steps));
  if (builtin->batch_size > 0) bad |= strv_push(argv, format("--batch=%u", builtin->batch_size));
  kolo_mode_spec mode; /* the same flags as kolo-server checked (coordination/job_mode.h) */
  kolo_job_mode_flag flags[KOLO_JOB_MODE_MAX_FLAGS];
  size_t n_flags = kolo_job_mode_spec(spec, &mode, NULL, 0) == KOLO_OK
                       ? kolo_job_mode_train_flags(&mode, flags)
                       : 0;
  for (size_t i = 0; i < n_flags; i++) bad |= strv_push(argv, strdup(flags[i].flag));
  const char *checkpoints = spec->checkpoint_dir;
  if (checkpoints && checkpoints[0])
    bad |= strv_push(argv, format("--checkpoint-dir=%s", checkpoints));
  for (size_t i = 0; i < builtin->n_hyper_parameters; i++) {
    const Kolo__V1__BuiltinProgram__HyperParametersEntry *h = builtin->hyper_parameters[i];
    bad |= strv_push(argv, format("--%s=%s", h->key, h->value ?: ""));
  }
  bad |= strv_push(argv, strdup("--json"));
  return bad;
}

/* Fetches the job's blob (worker/agent/blob.h) and names it in env as KOLO_JOB_BLOB; a blob
 * that cannot be had fails the job for good (a->permanent says why). */
static kolo_status push_blob(agent *a, const char *job, const Kolo__V1__BlobRef *ref, strv *env) {
  char path[1024], why[KOLO_AGENT_MODE_REASON - 64];
  kolo_status rc = kolo_agent_blob_path(a->work_dir, job, path, sizeof path);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (rc == KOLO_OK)
    rc = kolo_agent_blob_fetch(a->etcd, job, ref, path, why, sizeof why);
  else
    snprintf(why, sizeof why, "the blob's path is too long");
  if (rc != KOLO_OK) {
    snprintf(a->permanent, sizeof a->permanent, "%s", why);
    KOLO_LOGE(LOG, "job %s: %s", job, a->permanent);
    return rc;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  KOLO_LOGI(LOG, "job %s: fetched its blob (%" PRIu64 " bytes) into %s in %ld ms", job, ref->size,
            path, (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
  return strv_push(env, format("KOLO_JOB_BLOB=%s", path)) ? KOLO_ERR_NO_MEMORY : KOLO_OK;
}

/* Starts the process for job at ring. */
void kolo_agent_start_process(agent *a, const char *job, const Kolo__V1__RingRecord *ring) {
  char key[512];
  Kolo__V1__JobSpec *spec =
      kolo_keys_job(job, "spec", key, sizeof key) == KOLO_OK ? get_spec(a, key) : NULL;
  strv argv = {0}, env = {0};
  int rank = 0, size = 0;
  char *line = kolo_agent_ring_line_for(a, ring, &rank, &size);
  int64_t epoch = ring->epoch;
  const char *cwd = NULL;
  a->permanent[0] = '\0'; /* a new process: nothing judged yet */
  if (spec == NULL || line == NULL) goto out;
  int bad = 0, user_timeout = 0, user_unbuffered = 0, user_checkpoints = 0, user_tensorboard = 0;
  if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_EXEC && spec->exec) {
    const Kolo__V1__ExecProgram *exec = spec->exec;
    for (size_t i = 0; i < exec->n_argv; i++)
      bad |= strv_push(&argv, strdup(exec->argv[i] ? exec->argv[i] : ""));
    for (size_t i = 0; i < exec->n_env; i++) {
      const char *name = exec->env[i]->key;
      bad |= strv_push(&env, format("%s=%s", name, exec->env[i]->value ?: ""));
      if (strcmp(name, "KOLO_TIMEOUT") == 0) user_timeout = 1;
      if (strcmp(name, "PYTHONUNBUFFERED") == 0) user_unbuffered = 1;
      if (strcmp(name, "KOLO_CHECKPOINT_DIR") == 0) user_checkpoints = 1;
      if (strcmp(name, "KOLO_TENSORBOARD_DIR") == 0) user_tensorboard = 1;
    }
    /* the spec's checkpoint_dir, for kolo.torch's durable checkpoints (exec.env wins) */
    if (!user_checkpoints && spec->checkpoint_dir && spec->checkpoint_dir[0])
      bad |= strv_push(&env, format("KOLO_CHECKPOINT_DIR=%s", spec->checkpoint_dir));
    /* the spec's tensorboard_dir, for kolo.report's event files (kolo/tensorboard.py) */
    if (!user_tensorboard && spec->tensorboard_dir && spec->tensorboard_dir[0])
      bad |= strv_push(&env, format("KOLO_TENSORBOARD_DIR=%s", spec->tensorboard_dir));
    cwd = exec->working_dir;
    if (exec->blob && push_blob(a, job, exec->blob, &env) != KOLO_OK) goto out;
  } else if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN && spec->builtin) {
    bad |= push_builtin_argv(a, &argv, spec->builtin, spec);
  }
  if (argv.count == 0 || bad) {
    KOLO_LOGE(LOG, "job %s has no program this agent can run", job);
    goto out;
  }
  /* the job's mode, for every process (after the program's own env: ours win) */
  kolo_mode_spec mode;
  kolo_mode_env mode_env;
  char why[256] = "";
  if (kolo_job_mode_spec(spec, &mode, why, sizeof why) != KOLO_OK ||
      kolo_mode_env_format(&mode, &mode_env) != KOLO_OK) {
    snprintf(a->permanent, sizeof a->permanent, "the job's mode cannot be run: %s", why);
    KOLO_LOGE(LOG, "job %s: %s", job, a->permanent);
    goto out;
  }
  for (int i = 0; i < KOLO_MODE_ENV_COUNT; i++) bad |= strv_push(&env, strdup(mode_env.entries[i]));
  kolo_agent_mode_check_start(&a->mode_check, mode.mode);
  bad |= strv_push(&env, format("KOLO_JOB_ID=%s", job));
  bad |= strv_push(&env, format("KOLO_WORKER_ID=%s", a->id));
  bad |= strv_push(&env, format("KOLO_RANK=%d", rank));
  bad |= strv_push(&env, format("KOLO_SIZE=%d", size));
  bad |= strv_push(&env, format("KOLO_EPOCH=%" PRId64, epoch));
  /* how long a survivor waits for the next ring: long, so that a job below
   * min_workers holds its state until workers return */
  if (!user_timeout) bad |= strv_push(&env, strdup("KOLO_TIMEOUT=" REFORM_WAIT_S));
  /* output goes to a pipe: without this Python would hold it in its buffer until exit */
  if (!user_unbuffered) bad |= strv_push(&env, strdup("PYTHONUNBUFFERED=1"));
  int out_fd = -1, err_fd = -1;
  if (!bad &&
      kolo_agent_capture_begin(a->capture, job, epoch, (uint32_t)rank, &out_fd, &err_fd) != KOLO_OK)
    KOLO_LOGW(LOG, "the output of job %s is not captured", job);
  kolo_agent_spawn spawn = {(const char *const *)argv.items,
                            (const char *const *)env.items,
                            cwd,
                            a->work_dir,
                            out_fd,
                            err_fd,
                            a->port_fd};
  kolo_status started = bad ? KOLO_ERR_NO_MEMORY : kolo_agent_proc_start(&spawn, &a->proc);
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  a->stderr_tail[0] = '\0';
  if (started != KOLO_OK) {
    KOLO_LOGE(LOG, "cannot start the process of job %s", job);
    kolo_agent_capture_end(a->capture, 0, NULL, 0);
    goto out;
  }
  a->hs.processes_started++;
  snprintf(a->job, sizeof a->job, "%s", job);
  a->epoch = epoch;
  a->sent_epoch = 0;
  free(a->ring_line);
  a->ring_line = line;
  line = NULL;
  a->formed_epoch = a->failed_epoch = a->exit_epoch = 0;
  a->failed_rank = -1;
  a->failed_status[0] = '\0';
  a->exited = a->exit_code = 0;
  a->hello = 0;
  a->permanent[0] = '\0';
  a->first_formed_epoch = 0;
  if (a->progress) protobuf_c_message_free_unpacked(&a->progress->base, NULL);
  a->progress = NULL;
  kolo_agent_write_report(a);
  kolo_agent_set_state(a, a->draining ? "draining" : "busy");
out:
  if (a->proc == NULL && spec != NULL && line != NULL) {
    /* the program cannot start: say so as an exit, so the job does not wait on us */
    snprintf(a->job, sizeof a->job, "%s", job);
    a->epoch = epoch;
    a->exited = 1;
    a->exit_code = 127;
    a->exit_epoch = epoch;
    kolo_agent_write_report(a);
    snprintf(a->done_job, sizeof a->done_job, "%s", job);
    a->done_epoch = epoch;
  }
  free(line);
  strv_free(&argv);
  strv_free(&env);
  if (spec) protobuf_c_message_free_unpacked(&spec->base, NULL);
}
