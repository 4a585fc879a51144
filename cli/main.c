/* kolo: the command-line client of kolo-server's gRPC API. Human tables by default,
 * --json for scripts; exit 0 on success, 1 on an RPC error (status and message on one
 * line), 2 on bad usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/paths.h"
#include "kolo/v1/cluster.pb-c.h"
#include "kolo/v1/job.pb-c.h"
#include "codec/codec.h"
#include "server/wire.h"

#define EXIT_RPC 1
#define EXIT_USAGE 2

typedef struct globals {
  const char *server;
  const char *tls_ca;
  const char *token;
  int json;
  int timeout_ms;
} globals;

static void usage(FILE *out) {
  fprintf(out,
          "usage: kolo [--server HOST:PORT] [--tls-ca FILE] [--token T] [--json] [--timeout S] "
          "COMMAND\n"
          "\n"
          "commands:\n"
          "  submit JOB.json                 submit a job spec (JSON, as in docs/API.md)\n"
          "  submit --name N --workers MIN[:MAX] [--id ID] [--mode SYNC|ASYNC]\n"
          "         [--model M --dataset D --epochs N --steps N --batch N --lr X --hp K=V ...]\n"
          "         [--exec PROGRAM ARG ...]  [--label K=V ...] [--max-reconfigurations N]\n"
          "         [--collective-timeout-ms N] [--checkpoint-dir DIR] [--average-every N]\n"
          "         [--tensorboard-dir DIR] [--workdir DIR]  (relative paths in these and --exec\n"
          "         are this folder's: see docs/API.md)\n"
          "  get ID                          one job with its events\n"
          "  list [--phase P] [--label K=V ...]\n"
          "  cancel ID [--reason TEXT]\n"
          "  scale ID MIN[:MAX]\n"
          "  watch ID                        print the job each time it changes until it ends\n"
          "  logs [-f] [--rank R ...] [--tail N] ID\n"
          "                                  the job's output (\"[rank] line\"; bare lines with "
          "one --rank);\n"
          "                                  -f follows it until the job ends\n"
          "  workers                         registered workers\n"
          "  drain WORKER                    give a worker no new work; its job lets it go\n"
          "  undrain WORKER                  take a drain back\n"
          "  demand                          workers the jobs want (what to scale the pool to)\n"
          "\n"
          "environment: KOLO_SERVER (default 127.0.0.1:7070), KOLO_TOKEN\n");
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "kolo: ");
  fprintf(stderr, fmt, arg ? arg : "");
  fprintf(stderr, "\n");
  usage(stderr);
  return EXIT_USAGE;
}

static int rpc_error(const kolo_cli_result *r) {
  fprintf(stderr, "error: %s: %s\n", kolo_server_grpc_code_name(r->code), r->message);
  return EXIT_RPC;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (f == NULL) return NULL;
  char *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len + 4097 > cap) {
      cap = (*len + 4097) * 2;
      char *grown = realloc(buf, cap);
      if (grown == NULL) break;
      buf = grown;
    }
    size_t n = fread(buf + *len, 1, 4096, f);
    *len += n;
    if (n == 0) break;
  }
  if (f != stdin) fclose(f);
  if (buf) buf[*len] = '\0';
  return buf;
}

static void print_json(const ProtobufCMessage *msg, int pretty) {
  char *text = kolo_codec_dump(msg, pretty);
  if (text) printf("%s\n", text);
  free(text);
}

static void format_time(int64_t ms, char *out, size_t len) {
  if (ms <= 0) {
    snprintf(out, len, "-");
    return;
  }
  time_t secs = (time_t)(ms / 1000);
  struct tm parts;
  gmtime_r(&secs, &parts);
  strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &parts);
}

static int64_t wall_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* "waiting for workers: have 1, need 2 (since 12 s)" for a job held below min_workers; "" else. */
static void format_waiting(const Kolo__V1__JobStatus *st, char *out, size_t len) {
  out[0] = '\0';
  if (st == NULL || st->waiting == NULL) return;
  int64_t since = (wall_now_ms() - st->waiting->since_unix_ms) / 1000;
  snprintf(out, len, "waiting for workers: have %u, need %u (since %lld s)", st->waiting->have,
           st->waiting->need, (long long)(since > 0 ? since : 0));
}

static void print_job(const Kolo__V1__Job *job) {
  const Kolo__V1__JobStatus *st = job->status;
  const Kolo__V1__JobSpec *spec = job->spec;
  char created[32], finished[32];
  format_time(st ? st->created_unix_ms : 0, created, sizeof created);
  format_time(st ? st->finished_unix_ms : 0, finished, sizeof finished);
  printf("ID         %s\n", job->id);
  printf("NAME       %s\n", spec ? spec->name : "");
  printf("PHASE      %s\n", st ? kolo_server_job_phase_name(st->phase) : "?");
  if (spec) {
    const ProtobufCEnumValue *mode =
        protobuf_c_enum_descriptor_get_value(&kolo__v1__mode__descriptor, spec->mode);
    printf("MODE       %s\n", mode ? mode->name : "?");
    if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN)
      printf("PROGRAM    builtin %s on %s\n", spec->builtin->model,
             spec->builtin->dataset[0] ? spec->builtin->dataset : "-");
    else if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_EXEC && spec->exec->n_argv)
      printf("PROGRAM    exec %s\n", spec->exec->argv[0]);
  }
  if (st) {
    printf("WORKERS    %u-%u (%zu in the ring)\n", st->min_workers, st->max_workers, st->n_members);
    char waiting[128];
    format_waiting(st, waiting, sizeof waiting);
    if (waiting[0]) printf("WAITING    %s\n", waiting);
    printf("EPOCH      %" PRIu64 " (%u reconfigurations)\n", st->epoch, st->reconfigurations);
    if (st->progress) {
      printf("PROGRESS   step %" PRIu64, st->progress->step);
      if (st->progress->total_steps) printf("/%" PRIu64, st->progress->total_steps); /* 0: unknown */
      printf(", loss %.4g, %.1f samples/s\n", st->progress->loss, st->progress->samples_per_sec);
    }
    for (size_t i = 0; i < st->n_members; i++)
      printf("  rank %-3u %s %s\n", st->members[i]->rank, st->members[i]->worker_id,
             st->members[i]->address);
    printf("CREATED    %s\n", created);
    printf("FINISHED   %s\n", finished);
    if (st->error[0]) printf("ERROR      %s\n", st->error);
  }
  if (job->n_events) printf("EVENTS\n");
  for (size_t i = 0; i < job->n_events; i++) {
    char when[32];
    format_time(job->events[i]->time_unix_ms, when, sizeof when);
    printf("  %3" PRIu64 " %s %-12s %s\n", job->events[i]->seq, when, job->events[i]->type,
           job->events[i]->message);
  }
}

/* Parses "MIN" or "MIN:MAX". */
static int parse_workers(const char *text, uint32_t *min, uint32_t *max) {
  char *end;
  errno = 0;
  unsigned long a = strtoul(text, &end, 10), b;
  if (errno || end == text || a == 0 || a > 4096) return 0;
  if (*end == '\0') {
    b = a;
  } else if (*end == ':') {
    const char *rest = end + 1;
    b = strtoul(rest, &end, 10);
    if (errno || end == rest || *end != '\0' || b < a || b > 4096) return 0;
  } else {
    return 0;
  }
  *min = (uint32_t)a;
  *max = (uint32_t)b;
  return 1;
}

static int parse_uint(const char *text, uint64_t *out) {
  char *end;
  errno = 0;
  if (text == NULL || *text == '-') return 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text || *end != '\0') return 0;
  *out = v;
  return 1;
}

/* Adds "K=V" to a string map (any protobuf-c map entry type: key, value strings). */
static int add_pair(const ProtobufCMessageDescriptor *entry_desc, void ***entries, size_t *n,
                    const char *kv) {
  const char *eq = strchr(kv, '=');
  if (eq == NULL || eq == kv) return 0;
  void **grown = realloc(*entries, (*n + 1) * sizeof *grown);
  if (grown == NULL) return 0;
  *entries = grown;
  ProtobufCMessage *e = calloc(1, entry_desc->sizeof_message);
  if (e == NULL) return 0;
  entry_desc->message_init(e);
  char **key = (char **)((char *)e + entry_desc->fields[0].offset);
  char **value = (char **)((char *)e + entry_desc->fields[1].offset);
  *key = strndup(kv, (size_t)(eq - kv));
  *value = strdup(eq + 1);
  (*entries)[(*n)++] = e;
  return 1;
}

/* The --exec flag: the rest of the arguments are the program's argv (paths: paths.h). */
static int exec_from_flags(int argc, char **argv, const char *workdir, Kolo__V1__JobSpec *spec) {
  if (argc < 1) return usage_error("--exec needs a program", NULL);
  if (spec->program_case != KOLO__V1__JOB_SPEC__PROGRAM__NOT_SET)
    return usage_error("give builtin flags or --exec, not both", NULL);
  Kolo__V1__ExecProgram *x = malloc(sizeof *x);
  kolo__v1__exec_program__init(x);
  x->n_argv = (size_t)argc;
  x->argv = calloc(x->n_argv, sizeof *x->argv);
  for (size_t k = 0; k < x->n_argv; k++) x->argv[k] = strdup(argv[k]);
  spec->program_case = KOLO__V1__JOB_SPEC__PROGRAM_EXEC;
  spec->exec = x;
  char err[256];
  if (kolo_cli_exec_paths(x, workdir, err, sizeof err) != 0) return usage_error("%s", err);
  return 0;
}

/* A folder flag's value, made absolute against the submitter's folder, into *slot. */
static int path_flag(char **slot, const char *flag, const char *value) {
  char *full = kolo_cli_absolute(value);
  if (full == NULL) return usage_error("%s: cannot resolve the path", flag);
  kolo_codec_set_string(slot, full);
  free(full);
  return 0;
}

/* Builds a JobSpec from flags. Returns EXIT_USAGE (message printed) or 0. */
static int spec_from_flags(int argc, char **argv, Kolo__V1__JobSpec *spec) {
  Kolo__V1__BuiltinProgram *b = NULL;
  const char *workdir = NULL;
  for (int i = 0; i < argc; i++) {
    const char *flag = argv[i];
    if (strcmp(flag, "--exec") == 0) {
      int rc = exec_from_flags(argc - i - 1, argv + i + 1, workdir, spec);
      if (rc != 0) return rc;
      break;
    }
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (value == NULL) return usage_error("%s needs a value", flag);
    i++;
    uint64_t n = 0;
    int builtin_flag = strcmp(flag, "--model") == 0 || strcmp(flag, "--dataset") == 0 ||
                       strcmp(flag, "--epochs") == 0 || strcmp(flag, "--steps") == 0 ||
                       strcmp(flag, "--batch") == 0 || strcmp(flag, "--lr") == 0 ||
                       strcmp(flag, "--hp") == 0;
    if (builtin_flag && b == NULL) {
      if (spec->program_case != KOLO__V1__JOB_SPEC__PROGRAM__NOT_SET)
        return usage_error("give builtin flags or --exec, not both", NULL);
      b = malloc(sizeof *b);
      kolo__v1__builtin_program__init(b);
      spec->program_case = KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN;
      spec->builtin = b;
    }
    if (strcmp(flag, "--name") == 0) {
      kolo_codec_set_string(&spec->name, value);
    } else if (strcmp(flag, "--id") == 0) {
      kolo_codec_set_string(&spec->id, value);
    } else if (strcmp(flag, "--workers") == 0) {
      if (!parse_workers(value, &spec->min_workers, &spec->max_workers))
        return usage_error("--workers: expected MIN or MIN:MAX (1..4096), got '%s'", value);
    } else if (strcmp(flag, "--mode") == 0) {
      const ProtobufCEnumValue *v =
          protobuf_c_enum_descriptor_get_value_by_name(&kolo__v1__mode__descriptor, value);
      if (v == NULL || v->value == 0) return usage_error("--mode: SYNC or ASYNC, got '%s'", value);
      spec->mode = (Kolo__V1__Mode)v->value;
    } else if (strcmp(flag, "--model") == 0) {
      kolo_codec_set_string(&b->model, value);
    } else if (strcmp(flag, "--dataset") == 0) {
      kolo_codec_set_string(&b->dataset, value);
    } else if (strcmp(flag, "--epochs") == 0) {
      if (!parse_uint(value, &n) || n > UINT32_MAX)
        return usage_error("--epochs: expected a number, got '%s'", value);
      b->epochs = (uint32_t)n;
    } else if (strcmp(flag, "--steps") == 0) {
      if (!parse_uint(value, &n)) return usage_error("--steps: expected a number, got '%s'", value);
      b->steps = n;
    } else if (strcmp(flag, "--batch") == 0) {
      if (!parse_uint(value, &n) || n > UINT32_MAX)
        return usage_error("--batch: expected a number, got '%s'", value);
      b->batch_size = (uint32_t)n;
    } else if (strcmp(flag, "--lr") == 0) {
      char *end;
      b->learning_rate = strtod(value, &end);
      if (*end != '\0' || end == value)
        return usage_error("--lr: expected a number, got '%s'", value);
    } else if (strcmp(flag, "--hp") == 0) {
      if (!add_pair(&kolo__v1__builtin_program__hyper_parameters_entry__descriptor,
                    (void ***)&b->hyper_parameters, &b->n_hyper_parameters, value))
        return usage_error("--hp: expected K=V, got '%s'", value);
    } else if (strcmp(flag, "--label") == 0) {
      if (!add_pair(&kolo__v1__job_spec__labels_entry__descriptor, (void ***)&spec->labels,
                    &spec->n_labels, value))
        return usage_error("--label: expected K=V, got '%s'", value);
    } else if (strcmp(flag, "--max-reconfigurations") == 0) {
      if (!parse_uint(value, &n) || n > UINT32_MAX)
        return usage_error("--max-reconfigurations: expected a number, got '%s'", value);
      spec->max_reconfigurations = (uint32_t)n;
    } else if (strcmp(flag, "--collective-timeout-ms") == 0) {
      if (!parse_uint(value, &n) || n > UINT32_MAX)
        return usage_error("--collective-timeout-ms: expected a number, got '%s'", value);
      spec->collective_timeout_ms = (uint32_t)n;
    } else if (strcmp(flag, "--average-every") == 0) {
      if (!parse_uint(value, &n) || n > UINT32_MAX)
        return usage_error("--average-every: expected a number, got '%s'", value);
      spec->average_every = (uint32_t)n;
    } else if (strcmp(flag, "--checkpoint-dir") == 0 || strcmp(flag, "--tensorboard-dir") == 0) {
      int rc = path_flag(flag[2] == 'c' ? &spec->checkpoint_dir : &spec->tensorboard_dir, flag,
                         value); /* the submitter's folder, as --exec's paths */
      if (rc != 0) return rc;
    } else if (strcmp(flag, "--workdir") == 0) {
      workdir = value;
    } else {
      return usage_error("submit: unknown flag %s", flag);
    }
  }
  if (spec->name[0] == '\0') return usage_error("submit: --name is required", NULL);
  if (spec->min_workers == 0) return usage_error("submit: --workers is required", NULL);
  return 0;
}

typedef struct watch_state {
  int json;
} watch_state;

static int on_watch(void *arg, const ProtobufCMessage *msg) {
  watch_state *w = arg;
  const Kolo__V1__Job *job = (const Kolo__V1__Job *)msg;
  if (w->json) {
    print_json(msg, 0);
  } else {
    const Kolo__V1__JobStatus *st = job->status;
    char when[32];
    format_time(st ? st->updated_unix_ms : 0, when, sizeof when);
    const Kolo__V1__Event *last = job->n_events ? job->events[job->n_events - 1] : NULL;
    char waiting[128];
    format_waiting(st, waiting, sizeof waiting);
    printf("%s %s %-13s epoch=%" PRIu64 " step=%" PRIu64 " loss=%.4g %s%s%s\n", when, job->id,
           st ? kolo_server_job_phase_name(st->phase) : "?", st ? st->epoch : 0,
           st && st->progress ? st->progress->step : 0,
           st && st->progress ? st->progress->loss : 0.0, waiting, waiting[0] ? " | " : "",
           last ? last->message : "");
  }
  fflush(stdout);
  return 0;
}

typedef struct logs_state {
  int json;
  int bare; /* exactly one rank asked for: no "[rank] " prefix */
} logs_state;

static int on_logs(void *arg, const ProtobufCMessage *msg) {
  logs_state *l = arg;
  const Kolo__V1__LogChunk *chunk = (const Kolo__V1__LogChunk *)msg;
  for (size_t k = 0; k < chunk->n_lines; k++) {
    const Kolo__V1__LogLine *line = chunk->lines[k];
    if (l->json) {
      print_json(&line->base, 0);
    } else if (line->notice) {
      fflush(stdout);
      fprintf(stderr, "kolo: %.*s\n", (int)line->text.len, (const char *)line->text.data);
    } else {
      if (!l->bare) printf("[%" PRIu32 "] ", line->rank);
      fwrite(line->text.data, 1, line->text.len, stdout);
      putchar('\n');
    }
  }
  fflush(stdout);
  return 0;
}

/* logs [-f|--follow] [--rank R ...] [--tail N] ID */
static int logs_from_args(int nargs, char **args, Kolo__V1__StreamLogsRequest *r) {
  const char *id = NULL;
  for (int k = 0; k < nargs; k++) {
    const char *a = args[k];
    uint64_t n;
    if (strcmp(a, "-f") == 0 || strcmp(a, "--follow") == 0) {
      r->follow = 1;
    } else if (strcmp(a, "--rank") == 0 || strcmp(a, "--tail") == 0) {
      if (k + 1 >= nargs) return usage_error("%s needs a value", a);
      const char *value = args[++k];
      if (!parse_uint(value, &n) || n > (a[2] == 'r' ? UINT32_MAX : 1000000000u))
        return usage_error(a[2] == 'r' ? "--rank: expected a rank number, got '%s'"
                                       : "--tail: expected a number of lines, got '%s'",
                           value);
      if (a[2] == 't') {
        r->tail = (uint32_t)n;
      } else {
        uint32_t *grown = realloc(r->ranks, (r->n_ranks + 1) * sizeof *grown);
        if (grown == NULL) return usage_error("out of memory", NULL);
        r->ranks = grown;
        r->ranks[r->n_ranks++] = (uint32_t)n;
      }
    } else if (a[0] == '-') {
      return usage_error("logs: unknown flag %s", a);
    } else if (id != NULL) {
      return usage_error("logs needs exactly one job id", NULL);
    } else {
      id = a;
    }
  }
  if (id == NULL) return usage_error("logs needs a job id", NULL);
  kolo_codec_set_string(&r->id, id);
  return 0;
}

int main(int argc, char **argv) {
  globals g = {getenv("KOLO_SERVER") ? getenv("KOLO_SERVER") : "127.0.0.1:7070", NULL,
               getenv("KOLO_TOKEN"), 0, 10000};
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    const char *flag = argv[i];
    if (strcmp(flag, "--json") == 0) {
      g.json = 1;
      continue;
    }
    if (strcmp(flag, "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) return usage_error("%s needs a value", flag);
    const char *value = argv[++i];
    if (strcmp(flag, "--server") == 0)
      g.server = value;
    else if (strcmp(flag, "--tls-ca") == 0)
      g.tls_ca = value;
    else if (strcmp(flag, "--token") == 0)
      g.token = value;
    else if (strcmp(flag, "--timeout") == 0) {
      uint64_t secs;
      if (!parse_uint(value, &secs) || secs == 0 || secs > 3600)
        return usage_error("--timeout: seconds, got '%s'", value);
      g.timeout_ms = (int)secs * 1000;
    } else
      return usage_error("unknown flag %s", flag);
  }
  if (i >= argc) return usage_error("missing command", NULL);
  const char *cmd = argv[i++];
  int nargs = argc - i;
  char **args = argv + i;

  /* Parse the command's arguments before any network I/O: usage errors exit 2. */
  ProtobufCMessage *req = NULL;
  int method = -1;
  int rc_exit = 0;
  if (strcmp(cmd, "submit") == 0) {
    method = KOLO_SERVER_SUBMIT_JOB;
    if (nargs == 1 && strncmp(args[0], "--", 2) != 0) {
      size_t len = 0;
      char *text = read_file(args[0], &len);
      if (text == NULL) return usage_error("cannot read %s", args[0]);
      char err[512];
      kolo_status rc =
          kolo_codec_parse(text, len, &kolo__v1__job_spec__descriptor, &req, err, sizeof err);
      free(text);
      if (rc != KOLO_OK) {
        fprintf(stderr, "kolo: %s: %s\n", args[0], err);
        return EXIT_USAGE;
      }
    } else {
      Kolo__V1__JobSpec *spec = malloc(sizeof *spec);
      kolo__v1__job_spec__init(spec);
      req = &spec->base;
      rc_exit = spec_from_flags(nargs, args, spec);
    }
  } else if (strcmp(cmd, "get") == 0 || strcmp(cmd, "watch") == 0) {
    if (nargs != 1) return usage_error("%s needs exactly one job id", cmd);
    if (cmd[0] == 'g') {
      Kolo__V1__GetJobRequest *r = malloc(sizeof *r);
      kolo__v1__get_job_request__init(r);
      kolo_codec_set_string(&r->id, args[0]);
      req = &r->base;
      method = KOLO_SERVER_GET_JOB;
    } else {
      Kolo__V1__WatchJobRequest *r = malloc(sizeof *r);
      kolo__v1__watch_job_request__init(r);
      kolo_codec_set_string(&r->id, args[0]);
      req = &r->base;
      method = KOLO_SERVER_WATCH_JOB;
    }
  } else if (strcmp(cmd, "logs") == 0) {
    Kolo__V1__StreamLogsRequest *r = malloc(sizeof *r);
    kolo__v1__stream_logs_request__init(r);
    req = &r->base;
    method = KOLO_SERVER_STREAM_LOGS;
    rc_exit = logs_from_args(nargs, args, r);
  } else if (strcmp(cmd, "list") == 0) {
    Kolo__V1__ListJobsRequest *r = malloc(sizeof *r);
    kolo__v1__list_jobs_request__init(r);
    req = &r->base;
    method = KOLO_SERVER_LIST_JOBS;
    for (int k = 0; k < nargs && rc_exit == 0; k++) {
      if (k + 1 >= nargs) {
        rc_exit = usage_error("%s needs a value", args[k]);
      } else if (strcmp(args[k], "--phase") == 0) {
        const ProtobufCEnumValue *v =
            protobuf_c_enum_descriptor_get_value_by_name(&kolo__v1__phase__descriptor, args[++k]);
        if (v == NULL)
          rc_exit = usage_error(
              "--phase: PENDING, RUNNING, RECONFIGURING, SUCCEEDED, FAILED or CANCELLED, got '%s'",
              args[k]);
        else
          r->phase = (Kolo__V1__Phase)v->value;
      } else if (strcmp(args[k], "--label") == 0) {
        if (!add_pair(&kolo__v1__list_jobs_request__labels_entry__descriptor, (void ***)&r->labels,
                      &r->n_labels, args[++k]))
          rc_exit = usage_error("--label: expected K=V, got '%s'", args[k]);
      } else {
        rc_exit = usage_error("list: unknown flag %s", args[k]);
      }
    }
  } else if (strcmp(cmd, "cancel") == 0) {
    if (nargs != 1 && !(nargs == 3 && strcmp(args[1], "--reason") == 0))
      return usage_error("cancel ID [--reason TEXT]", NULL);
    Kolo__V1__CancelJobRequest *r = malloc(sizeof *r);
    kolo__v1__cancel_job_request__init(r);
    kolo_codec_set_string(&r->id, args[0]);
    if (nargs == 3) kolo_codec_set_string(&r->reason, args[2]);
    req = &r->base;
    method = KOLO_SERVER_CANCEL_JOB;
  } else if (strcmp(cmd, "scale") == 0) {
    Kolo__V1__ScaleJobRequest *r = malloc(sizeof *r);
    kolo__v1__scale_job_request__init(r);
    req = &r->base;
    method = KOLO_SERVER_SCALE_JOB;
    if (nargs != 2 || !parse_workers(args[1], &r->min_workers, &r->max_workers))
      rc_exit = usage_error("scale ID MIN[:MAX]", NULL);
    else
      kolo_codec_set_string(&r->id, args[0]);
  } else if (strcmp(cmd, "workers") == 0) {
    if (nargs != 0) return usage_error("workers takes no arguments", NULL);
    Kolo__V1__ListWorkersRequest *r = malloc(sizeof *r);
    kolo__v1__list_workers_request__init(r);
    req = &r->base;
    method = KOLO_SERVER_LIST_WORKERS;
  } else if (strcmp(cmd, "drain") == 0) {
    if (nargs != 1) return usage_error("drain needs exactly one worker id", NULL);
    Kolo__V1__DrainWorkerRequest *r = malloc(sizeof *r);
    kolo__v1__drain_worker_request__init(r);
    kolo_codec_set_string(&r->id, args[0]);
    req = &r->base;
    method = KOLO_SERVER_DRAIN_WORKER;
  } else if (strcmp(cmd, "undrain") == 0) {
    if (nargs != 1) return usage_error("undrain needs exactly one worker id", NULL);
    Kolo__V1__UndrainWorkerRequest *r = malloc(sizeof *r);
    kolo__v1__undrain_worker_request__init(r);
    kolo_codec_set_string(&r->id, args[0]);
    req = &r->base;
    method = KOLO_SERVER_UNDRAIN_WORKER;
  } else if (strcmp(cmd, "demand") == 0) {
    if (nargs != 0) return usage_error("demand takes no arguments", NULL);
    Kolo__V1__GetDemandRequest *r = malloc(sizeof *r);
    kolo__v1__get_demand_request__init(r);
    req = &r->base;
    method = KOLO_SERVER_GET_DEMAND;
  } else {
    return usage_error("unknown command '%s'", cmd);
  }
  if (rc_exit != 0) {
    protobuf_c_message_free_unpacked(req, NULL);
    return rc_exit;
  }

  char *ca = NULL;
  if (g.tls_ca) {
    size_t len;
    ca = read_file(g.tls_ca, &len);
    if (ca == NULL) {
      protobuf_c_message_free_unpacked(req, NULL);
      return usage_error("cannot read --tls-ca %s", g.tls_ca);
    }
  }
  kolo_cli_client *client = NULL;
  kolo_cli_client_create(g.server, ca, g.token, g.timeout_ms, &client);
  kolo_cli_result result;
  const kolo_server_method_info *info = &kolo_server_methods[method];
  int exit_code = 0;
  if (method == KOLO_SERVER_WATCH_JOB) {
    watch_state w = {g.json};
    kolo_cli_stream(client, info->path, req, info->response, on_watch, &w, &result);
    if (result.code != 0) exit_code = rpc_error(&result);
  } else if (method == KOLO_SERVER_STREAM_LOGS) {
    logs_state l = {g.json, ((Kolo__V1__StreamLogsRequest *)req)->n_ranks == 1};
    kolo_cli_stream(client, info->path, req, info->response, on_logs, &l, &result);
    if (result.code != 0) exit_code = rpc_error(&result);
  } else if (method == KOLO_SERVER_LIST_JOBS) {
    /* Follow the pages so the user sees every match. */
    Kolo__V1__ListJobsRequest *r = (Kolo__V1__ListJobsRequest *)req;
    json_t *all = g.json ? json_array() : NULL;
    if (!g.json)
      printf("%-20s %-24s %-13s %-9s %-6s %s\n", "ID", "NAME", "PHASE", "WORKERS", "EPOCH",
             "CREATED");
    for (;;) {
      ProtobufCMessage *resp = NULL;
      kolo_cli_call(client, info->path, req, info->response, &resp, &result);
      if (result.code != 0) {
        exit_code = rpc_error(&result);
        break;
      }
      Kolo__V1__ListJobsResponse *page = (Kolo__V1__ListJobsResponse *)resp;
      for (size_t k = 0; k < page->n_jobs; k++) {
        const Kolo__V1__Job *job = page->jobs[k];
        if (g.json) {
          json_array_append_new(all, kolo_codec_to_json(&job->base));
          continue;
        }
        char created[32], workers[24];
        format_time(job->status->created_unix_ms, created, sizeof created);
        snprintf(workers, sizeof workers, "%u-%u", job->status->min_workers,
                 job->status->max_workers);
        printf("%-20s %-24.24s %-13s %-9s %-6" PRIu64 " %s\n", job->id, job->spec->name,
               kolo_server_job_phase_name(job->status->phase), workers, job->status->epoch,
               created);
      }
      int more = page->next_page_token[0] != '\0';
      if (more) kolo_codec_set_string(&r->page_token, page->next_page_token);
      protobuf_c_message_free_unpacked(resp, NULL);
      if (!more) break;
    }
    if (all && exit_code == 0) {
      json_t *out = json_pack("{s:O}", "jobs", all);
      char *text = json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
      printf("%s\n", text);
      free(text);
      json_decref(out);
    }
    json_decref(all);
  } else {
    ProtobufCMessage *resp = NULL;
    kolo_cli_call(client, info->path, req, info->response, &resp, &result);
    if (result.code != 0) {
      exit_code = rpc_error(&result);
    } else if (g.json) {
      print_json(resp, 1);
    } else if (method == KOLO_SERVER_LIST_WORKERS) {
      Kolo__V1__ListWorkersResponse *w = (Kolo__V1__ListWorkersResponse *)resp;
      printf("%-24s %-20s %-22s %-9s %s\n", "ID", "HOST", "ADDRESS", "STATE", "JOB");
      for (size_t k = 0; k < w->n_workers; k++)
        printf("%-24s %-20s %-22s %-9s %s\n", w->workers[k]->id, w->workers[k]->host,
               w->workers[k]->address, w->workers[k]->state, w->workers[k]->job_id);
    } else if (method == KOLO_SERVER_DRAIN_WORKER) {
      printf("worker %s is draining\n", ((Kolo__V1__Worker *)resp)->id);
    } else if (method == KOLO_SERVER_UNDRAIN_WORKER) {
      const Kolo__V1__Worker *w = (const Kolo__V1__Worker *)resp;
      printf("worker %s is not drained (state %s)\n", w->id, w->state);
    } else if (method == KOLO_SERVER_GET_DEMAND) {
      const Kolo__V1__Demand *d = (const Kolo__V1__Demand *)resp;
      printf(
          "workers wanted %u (missing %u): %u registered, %u idle, %u draining; %u pending jobs, "
          "%u growable\n",
          d->workers_wanted, d->workers_missing, d->workers_registered, d->workers_idle,
          d->workers_draining, d->pending_jobs, d->growable_jobs);
    } else {
      print_job((Kolo__V1__Job *)resp);
    }
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  }
  kolo_cli_client_destroy(client);
  free(ca);
  protobuf_c_message_free_unpacked(req, NULL);
  return exit_code;
}
