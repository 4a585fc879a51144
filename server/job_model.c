/* Implementation of job_model.h. */
#define _GNU_SOURCE
#include "server/job_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "codec/codec.h"
#include "coordination/job_mode.h"
#include "coordination/job_status.h"
#include "worker/train/flags.h"

static kolo_status bad(char *err, size_t err_len, const char *field, const char *why) {
  if (err && err_len) snprintf(err, err_len, "%s: %s", field, why);
  return KOLO_ERR_INVALID_ARG;
}

static int printable(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
  return 1;
}

static int label_key_valid(const char *key) {
  size_t len = strlen(key);
  if (len == 0 || len > 63) return 0;
  for (const char *p = key; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '.' || *p == '_' || *p == '-' || *p == '/'))
      return 0;
  return 1;
}

int kolo_server_job_id_valid(const char *id) {
  size_t len = strlen(id);
  if (len == 0 || len > KOLO_SERVER_ID_MAX) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = id[i];
    int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && !(c == '-' && i > 0)) return 0;
  }
  return 1;
}

/* The kolo-train command line the agent builds for a builtin program (same
 * flags, same order as worker/agent/agent.c), one spec field per argument. */
#define HYPER_MAX 100
#define ARGS_MAX (HYPER_MAX + 16 + KOLO_JOB_MODE_MAX_FLAGS)
typedef struct train_args {
  int argc;
  char *argv[ARGS_MAX + 1];
  char field[ARGS_MAX][96];
} train_args;

static int args_push(train_args *a, const char *field, char *arg) {
  if (arg == NULL || a->argc >= ARGS_MAX) {
    free(arg);
    return -1;
  }
  snprintf(a->field[a->argc], sizeof a->field[0], "%s", field);
  a->argv[a->argc++] = arg;
  return 0;
}

static char *format_arg(const char *format, ...) __attribute__((format(printf, 1, 2)));
static char *format_arg(const char *format, ...) {
  char *out = NULL;
  va_list ap;
  va_start(ap, format);
  int n = vasprintf(&out, format, ap);
  va_end(ap);
  return n < 0 ? NULL : out;
}

static int build_train_args(const Kolo__V1__JobSpec *spec, train_args *a) {
  const Kolo__V1__BuiltinProgram *b = spec->builtin;
  int bad = args_push(a, "builtin", strdup("kolo-train"));
  bad |= args_push(a, "builtin.model", format_arg("--model=%s", b->model));
  if (b->dataset && b->dataset[0])
    bad |= args_push(a, "builtin.dataset", format_arg("--dataset=%s", b->dataset));
  if (b->learning_rate > 0)
    bad |= args_push(a, "builtin.learning_rate", format_arg("--lr=%g", b->learning_rate));
  if (b->epochs > 0) bad |= args_push(a, "builtin.epochs", format_arg("--epochs=%u", b->epochs));
  if (b->steps > 0)
    bad |= args_push(a, "builtin.steps", format_arg("--steps=%llu", (unsigned long long)b->steps));
  if (b->batch_size > 0)
    bad |= args_push(a, "builtin.batch_size", format_arg("--batch=%u", b->batch_size));
  kolo_mode_spec mode; /* validated before: the same flags as the agent's */
  kolo_job_mode_flag flags[KOLO_JOB_MODE_MAX_FLAGS];
  size_t n_flags = kolo_job_mode_spec(spec, &mode, NULL, 0) == KOLO_OK
                       ? kolo_job_mode_train_flags(&mode, flags)
                       : 0;
  for (size_t i = 0; i < n_flags; i++) bad |= args_push(a, flags[i].field, strdup(flags[i].flag));
  if (spec->checkpoint_dir && spec->checkpoint_dir[0])
    bad |= args_push(a, "checkpoint_dir", format_arg("--checkpoint-dir=%s", spec->checkpoint_dir));
  for (size_t i = 0; i < b->n_hyper_parameters; i++) {
    char field[96];
    snprintf(field, sizeof field, "builtin.hyper_parameters.%.60s", b->hyper_parameters[i]->key);
    bad |= args_push(
        a, field,
        format_arg("--%s=%s", b->hyper_parameters[i]->key, b->hyper_parameters[i]->value));
  }
  bad |= args_push(a, "builtin", strdup("--json"));
  return bad;
}

/* Runs kolo-train's own parser over the arguments the agent will pass. */
static kolo_status check_train_args(const Kolo__V1__JobSpec *spec, char *err, size_t err_len) {
  train_args *a = calloc(1, sizeof *a);
  if (a == NULL) return KOLO_ERR_NO_MEMORY;
  kolo_status rc = KOLO_OK;
  if (spec->builtin->n_hyper_parameters > HYPER_MAX) {
    rc = bad(err, err_len, "builtin.hyper_parameters", "at most 100 entries");
    goto out;
  }
  if (build_train_args(spec, a) != 0) {
    rc = KOLO_ERR_NO_MEMORY;
    goto out;
  }
  kolo_train_config config;
  kolo_train_config_defaults(&config);
  uint64_t threads = 1;
  kolo_train_flag_error e;
  char *argv[ARGS_MAX + 1]; /* getopt may permute: keep a's order for the field names */
  memcpy(argv, a->argv, sizeof argv);
  int parsed = kolo_train_flags_parse(a->argc, argv, &config, &threads, &e);
  if (parsed > 0) {
    rc = bad(err, err_len, "builtin.hyper_parameters.help", "not a training option");
  } else if (parsed < 0) {
    const char *field = "builtin";
    for (int i = 0; e.arg >= 0 && e.arg < a->argc && i < a->argc; i++)
      if (argv[e.arg] == a->argv[i]) field = a->field[i];
    rc = bad(err, err_len, field, e.message);
  }
out:
  for (int i = 0; i < a->argc; i++) free(a->argv[i]);
  free(a);
  return rc;
}

kolo_status kolo_server_job_validate_spec(const Kolo__V1__JobSpec *spec, char *err,
                                          size_t err_len) {
  char field[96];
  if (spec->name == NULL || spec->name[0] == '\0') return bad(err, err_len, "name", "required");
  if (strlen(spec->name) > 128 || !printable(spec->name))
    return bad(err, err_len, "name", "at most 128 printable characters");
  if (spec->id && spec->id[0] && !kolo_server_job_id_valid(spec->id))
    return bad(err, err_len, "id", "1-63 of a-z, 0-9 and '-', not starting with '-'");
  kolo_mode_spec mode; /* the mode and its parameters (coordination/job_mode.h) */
  char why[256];
  if (kolo_job_mode_spec(spec, &mode, why, sizeof why) != KOLO_OK) {
    if (err && err_len) snprintf(err, err_len, "%s", why);
    return KOLO_ERR_INVALID_ARG;
  }
  if (spec->min_workers < 1) return bad(err, err_len, "min_workers", "must be at least 1");
  if (spec->min_workers > KOLO_SERVER_MAX_WORKERS)
    return bad(err, err_len, "min_workers", "at most 4096");
  if (spec->max_workers != 0 && spec->max_workers < spec->min_workers)
    return bad(err, err_len, "max_workers", "must be 0 (= min_workers) or >= min_workers");
  if (spec->max_workers > KOLO_SERVER_MAX_WORKERS)
    return bad(err, err_len, "max_workers", "at most 4096");
  switch (spec->program_case) {
    case KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN: {
      const Kolo__V1__BuiltinProgram *b = spec->builtin;
      if (b == NULL || b->model == NULL || b->model[0] == '\0')
        return bad(err, err_len, "builtin.model", "required");
      if (b->epochs == 0 && b->steps == 0)
        return bad(err, err_len, "builtin.epochs", "set epochs or steps (one must be > 0)");
      if (mode.mode != KOLO_MODE_ASYNC && mode.max_staleness != 0)
        return bad(err, err_len, "max_staleness",
                   "the built-in trainer's LOCAL_SGD/DILOCO rounds wait for each average (0); "
                   "an overlapped average is kolo.torch's (an exec job)");
      if (b->steps > KOLO_SERVER_MAX_STEPS)
        return bad(err, err_len, "builtin.steps", "at most 2^53 (9007199254740992)");
      if (!(b->learning_rate >= 0.0 && b->learning_rate < 1e6))
        return bad(err, err_len, "builtin.learning_rate", "must be >= 0");
      for (size_t i = 0; i < b->n_hyper_parameters; i++)
        if (!label_key_valid(b->hyper_parameters[i]->key)) {
          snprintf(field, sizeof field, "builtin.hyper_parameters.%.60s",
                   b->hyper_parameters[i]->key);
          return bad(err, err_len, field, "bad key");
        }
      break;
    }
    case KOLO__V1__JOB_SPEC__PROGRAM_EXEC: {
      const Kolo__V1__ExecProgram *x = spec->exec;
      if (x == NULL || x->n_argv == 0 || x->argv[0] == NULL || x->argv[0][0] == '\0')
        return bad(err, err_len, "exec.argv", "needs at least the program");
      for (size_t i = 0; i < x->n_env; i++) {
        const char *key = x->env[i]->key;
        if (key[0] == '\0' || strchr(key, '=') != NULL) {
          snprintf(field, sizeof field, "exec.env.%.60s", key);
          return bad(err, err_len, field, "bad variable name");
        }
        if (strncmp(key, "KOLO_MODE", 9) == 0) {
          snprintf(field, sizeof field, "exec.env.%.60s", key);
          return bad(err, err_len, field,
                     "set by kolo from the job's mode (give mode, average_every, ... instead)");
        }
      }
      break;
    }
    default:
      return bad(err, err_len, "program", "set builtin or exec");
  }
  if (spec->collective_timeout_ms > 3600000)
    return bad(err, err_len, "collective_timeout_ms", "at most 3600000 (one hour)");
  if (spec->max_reconfigurations > 1000000)
    return bad(err, err_len, "max_reconfigurations", "at most 1000000");
  if (spec->checkpoint_dir &&
      (strlen(spec->checkpoint_dir) > 4096 || !printable(spec->checkpoint_dir)))
    return bad(err, err_len, "checkpoint_dir", "at most 4096 printable characters");
  if (spec->tensorboard_dir &&
      (strlen(spec->tensorboard_dir) > 4096 || !printable(spec->tensorboard_dir)))
    return bad(err, err_len, "tensorboard_dir", "at most 4096 printable characters");
  for (size_t i = 0; i < spec->n_labels; i++) {
    if (!label_key_valid(spec->labels[i]->key)) {
      snprintf(field, sizeof field, "labels.%.60s", spec->labels[i]->key);
      return bad(err, err_len, field, "key: 1-63 of A-Z a-z 0-9 . _ - /");
    }
    if (strlen(spec->labels[i]->value) > 255) {
      snprintf(field, sizeof field, "labels.%.60s", spec->labels[i]->key);
      return bad(err, err_len, field, "value longer than 255");
    }
  }
  if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN)
    return check_train_args(spec, err, err_len);
  return KOLO_OK;
}

/* All kolo maps are string -> string: sort their entries by key. */
static int compare_entries(const void *a, const void *b) {
  const Kolo__V1__JobSpec__LabelsEntry *x = *(Kolo__V1__JobSpec__LabelsEntry *const *)a;
  const Kolo__V1__JobSpec__LabelsEntry *y = *(Kolo__V1__JobSpec__LabelsEntry *const *)b;
  return strcmp(x->key, y->key);
}

static void sort_map(void *entries, size_t count) {
  if (count > 1) qsort(entries, count, sizeof(void *), compare_entries);
}

void kolo_server_job_normalize_spec(Kolo__V1__JobSpec *spec) {
  if (spec->mode == KOLO__V1__MODE__MODE_UNSPECIFIED) spec->mode = KOLO__V1__MODE__SYNC;
  if (spec->max_workers == 0) spec->max_workers = spec->min_workers;
  sort_map(spec->labels, spec->n_labels);
  if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN && spec->builtin)
    sort_map(spec->builtin->hyper_parameters, spec->builtin->n_hyper_parameters);
  if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_EXEC && spec->exec)
    sort_map(spec->exec->env, spec->exec->n_env);
}

int kolo_server_job_spec_equal(const Kolo__V1__JobSpec *a, const Kolo__V1__JobSpec *b) {
  size_t la = kolo__v1__job_spec__get_packed_size(a);
  size_t lb = kolo__v1__job_spec__get_packed_size(b);
  if (la != lb) return 0;
  uint8_t *pa = malloc(la + 1), *pb = malloc(lb + 1);
  int same = 0;
  if (pa && pb) {
    kolo__v1__job_spec__pack(a, pa);
    kolo__v1__job_spec__pack(b, pb);
    same = memcmp(pa, pb, la) == 0;
  }
  free(pa);
  free(pb);
  return same;
}

kolo_status kolo_server_job_make_id(char *out, size_t len) {
  uint8_t bytes[8];
  if (len < 19) return KOLO_ERR_INVALID_ARG;
  if (getrandom(bytes, sizeof bytes, 0) != (ssize_t)sizeof bytes) return KOLO_ERR_SYSTEM;
  snprintf(out, len, "j-%02x%02x%02x%02x%02x%02x%02x%02x", bytes[0], bytes[1], bytes[2], bytes[3],
           bytes[4], bytes[5], bytes[6], bytes[7]);
  return KOLO_OK;
}

int64_t kolo_server_now_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

kolo_status kolo_server_job_append_event(Kolo__V1__Job *job, const char *type, const char *message,
                                         int64_t now_ms) {
  Kolo__V1__Event **grown = realloc(job->events, (job->n_events + 1) * sizeof *grown);
  if (grown == NULL) return KOLO_ERR_NO_MEMORY;
  job->events = grown;
  Kolo__V1__Event *ev = malloc(sizeof *ev);
  if (ev == NULL) return KOLO_ERR_NO_MEMORY;
  kolo__v1__event__init(ev);
  ev->seq = job->n_events ? job->events[job->n_events - 1]->seq + 1 : 1;
  ev->time_unix_ms = now_ms;
  ev->epoch = job->status ? job->status->epoch : 0;
  if (kolo_codec_set_string(&ev->type, type) != KOLO_OK ||
      kolo_codec_set_string(&ev->message, message) != KOLO_OK) {
    protobuf_c_message_free_unpacked(&ev->base, NULL);
    return KOLO_ERR_NO_MEMORY;
  }
  job->events[job->n_events++] = ev;
  return KOLO_OK;
}

kolo_status kolo_server_job_create(const Kolo__V1__JobSpec *spec, const char *id, int64_t now_ms,
                                   Kolo__V1__Job **out) {
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  Kolo__V1__Job *job = malloc(sizeof *job);
  if (job == NULL) return KOLO_ERR_NO_MEMORY;
  kolo__v1__job__init(job);
  job->status = malloc(sizeof *job->status);
  if (job->status == NULL) goto out;
  kolo__v1__job_status__init(job->status);
  job->spec = (Kolo__V1__JobSpec *)kolo_codec_copy(&spec->base);
  if (job->spec == NULL) goto out;
  if (kolo_codec_set_string(&job->id, id) != KOLO_OK ||
      kolo_codec_set_string(&job->spec->id, id) != KOLO_OK)
    goto out;
  kolo_job_status_submitted(job->status, spec->min_workers, spec->max_workers, now_ms);
  char message[256];
  snprintf(message, sizeof message, "job %.63s (%.100s) submitted: %u-%u workers", id, spec->name,
           spec->min_workers, spec->max_workers);
  rc = kolo_server_job_append_event(job, "SUBMITTED", message, now_ms);
  if (rc != KOLO_OK) goto out;
  *out = job;
  return KOLO_OK;
out:
  protobuf_c_message_free_unpacked(&job->base, NULL);
  return rc;
}

kolo_status kolo_server_job_cancel(Kolo__V1__Job *job, const char *reason, int64_t now_ms,
                                   char *err, size_t err_len) {
  Kolo__V1__JobStatus *st = job->status;
  char message[320];
  snprintf(message, sizeof message, "cancelled%s%.256s", reason && reason[0] ? ": " : "",
           reason ? reason : "");
  Kolo__V1__Phase was = st->phase;
  kolo_status rc = kolo_job_status_cancel(st, message, now_ms);
  if (rc == KOLO_ERR_STATE && err && err_len)
    snprintf(err, err_len, "job %.63s is %s and can no longer be cancelled", job->id,
             kolo_server_job_phase_name(was));
  if (rc != KOLO_OK) return rc;
  return kolo_server_job_append_event(job, "CANCELLED", message, now_ms);
}

kolo_status kolo_server_job_scale(Kolo__V1__Job *job, uint32_t min_workers, uint32_t max_workers,
                                  int64_t now_ms, char *err, size_t err_len) {
  Kolo__V1__JobStatus *st = job->status;
  if (min_workers < 1 || min_workers > KOLO_SERVER_MAX_WORKERS)
    return bad(err, err_len, "min_workers", "must be 1..4096");
  if (max_workers == 0) max_workers = min_workers;
  if (max_workers < min_workers || max_workers > KOLO_SERVER_MAX_WORKERS)
    return bad(err, err_len, "max_workers", "must be >= min_workers and at most 4096");
  char message[128];
  snprintf(message, sizeof message, "scaled from %u-%u to %u-%u workers", st->min_workers,
           st->max_workers, min_workers, max_workers);
  if (kolo_job_status_scale(st, min_workers, max_workers, now_ms) != KOLO_OK) {
    if (err && err_len)
      snprintf(err, err_len, "job %.63s is %s and can no longer be scaled", job->id,
               kolo_server_job_phase_name(st->phase));
    return KOLO_ERR_STATE;
  }
  return kolo_server_job_append_event(job, "SCALED", message, now_ms);
}
