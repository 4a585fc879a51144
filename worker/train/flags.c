/* Implementation of flags.h: kolo-train's options table and getopt_long
 * parser (moved out of main.c), its defaults and the name parsers they use.
 * Every error is written into a kolo_train_flag_error naming the argument, so
 * kolo-train prints it and kolo-server turns it into INVALID_ARGUMENT. */
#include "worker/train/flags.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kolo/mode.h"
#include "worker/train/model.h"

/* getopt_long keeps its position in globals: one parse at a time. */
static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(kolo_train_flag_error *e, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static void fail(kolo_train_flag_error *e, const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  vsnprintf(e->message, sizeof e->message, format, ap);
  va_end(ap);
}

void kolo_train_config_defaults(kolo_train_config *c) {
  memset(c, 0, sizeof *c);
  c->model = "mlp";
  c->hidden = "256,128";
  c->dataset = "synthetic";
  c->synthetic_train = 6000;
  c->synthetic_test = 1000;
  c->epochs = 1;
  c->batch = 64;
  c->accumulate = 1;
  kolo_train_optim_defaults(&c->optim);
  c->mode = KOLO_TRAIN_SYNC;
  c->average_every = 8;
  c->max_staleness = 1;
  c->outer_lr = 1.0f;
  c->compression = KOLO_TRAIN_COMPRESS_NONE;
  c->fragments = 1;
  c->seed = 1;
  c->eval = 1;
  c->log_every = 100;
  c->commit_every = 10;
}

static const char *const mode_names[] = {NULL, "sync", "async", "local_sgd", "diloco"};
static const char *const compression_names[] = {"none", "fp16", "int8"};

kolo_status kolo_train_mode_parse(const char *name, kolo_train_mode *mode) {
  if (!name || !mode) return KOLO_ERR_INVALID_ARG;
  for (int m = KOLO_TRAIN_SYNC; m <= KOLO_TRAIN_DILOCO; m++) {
    if (strcasecmp(name, mode_names[m]) == 0 ||
        (m == KOLO_TRAIN_LOCAL_SGD && strcasecmp(name, "local-sgd") == 0)) {
      *mode = (kolo_train_mode)m;
      return KOLO_OK;
    }
  }
  return KOLO_ERR_INVALID_ARG;
}

const char *kolo_train_mode_name(kolo_train_mode mode) {
  return mode >= KOLO_TRAIN_SYNC && mode <= KOLO_TRAIN_DILOCO ? mode_names[mode] : NULL;
}

kolo_status kolo_train_compression_parse(const char *name, kolo_train_compression *out) {
  if (!name || !out) return KOLO_ERR_INVALID_ARG;
  for (int k = 0; k <= KOLO_TRAIN_COMPRESS_INT8; k++) {
    if (strcasecmp(name, compression_names[k]) == 0) {
      *out = (kolo_train_compression)k;
      return KOLO_OK;
    }
  }
  return KOLO_ERR_INVALID_ARG;
}

const char *kolo_train_compression_name(kolo_train_compression compression) {
  return compression <= KOLO_TRAIN_COMPRESS_INT8 ? compression_names[compression] : NULL;
}

/* The flag of each KOLO_TRAIN_GIVEN_* bit after the mode's, the modes that
 * use it (bit per mode) and what to say about the others. */
static const struct mode_setting {
  unsigned bit;
  const char *flag;
  unsigned modes; /* 1 << kolo_train_mode */
  const char *which;
} mode_settings[] = {
    {KOLO_TRAIN_GIVEN_AVERAGE_EVERY, "--average-every",
     1u << KOLO_TRAIN_ASYNC | 1u << KOLO_TRAIN_LOCAL_SGD | 1u << KOLO_TRAIN_DILOCO,
     "async, local_sgd or diloco"},
    {KOLO_TRAIN_GIVEN_MAX_STALENESS, "--max-staleness", 1u << KOLO_TRAIN_ASYNC, "async"},
    {KOLO_TRAIN_GIVEN_OUTER_LR, "--outer-lr", 1u << KOLO_TRAIN_DILOCO, "diloco"},
    {KOLO_TRAIN_GIVEN_OUTER_MOMENTUM, "--outer-momentum", 1u << KOLO_TRAIN_DILOCO, "diloco"},
    {KOLO_TRAIN_GIVEN_NESTEROV, "--nesterov", 1u << KOLO_TRAIN_DILOCO, "diloco"},
    {KOLO_TRAIN_GIVEN_COMPRESSION, "--compression",
     1u << KOLO_TRAIN_LOCAL_SGD | 1u << KOLO_TRAIN_DILOCO, "local_sgd or diloco"},
    {KOLO_TRAIN_GIVEN_FRAGMENTS, "--fragments",
     1u << KOLO_TRAIN_LOCAL_SGD | 1u << KOLO_TRAIN_DILOCO, "local_sgd or diloco"},
};

int kolo_train_mode_resolve(kolo_train_config *c, char *why, size_t why_len) {
  const char *name = kolo_train_mode_name(c->mode);
  if (name == NULL) return kolo_train_mode_check(c, why, why_len);
  for (size_t i = 0; i < sizeof mode_settings / sizeof mode_settings[0]; i++) {
    const struct mode_setting *m = &mode_settings[i];
    if ((c->mode_given & m->bit) && !(m->modes & (1u << c->mode))) {
      snprintf(why, why_len, "%s: only for --mode %s, not %s%s", m->flag, m->which, name,
               c->mode == KOLO_TRAIN_LOCAL_SGD ? " (outer lr 1, momentum 0)" : "");
      return -1;
    }
  }
  unsigned given = c->mode_given;
  if (!(given & KOLO_TRAIN_GIVEN_MAX_STALENESS)) c->max_staleness = 1;
  int diloco = c->mode == KOLO_TRAIN_DILOCO;
  if (!(given & KOLO_TRAIN_GIVEN_OUTER_LR)) c->outer_lr = diloco ? 0.7f : 1.0f;
  if (!(given & KOLO_TRAIN_GIVEN_OUTER_MOMENTUM)) c->outer_momentum = diloco ? 0.9f : 0.0f;
  if (!(given & KOLO_TRAIN_GIVEN_NESTEROV)) c->nesterov = diloco;
  if (!(given & KOLO_TRAIN_GIVEN_COMPRESSION)) c->compression = KOLO_TRAIN_COMPRESS_NONE;
  if (!(given & KOLO_TRAIN_GIVEN_FRAGMENTS)) c->fragments = 1;
  return kolo_train_mode_check(c, why, why_len);
}

int kolo_train_mode_check(kolo_train_config *c, char *why, size_t why_len) {
  if (kolo_train_mode_name(c->mode) == NULL) {
    snprintf(why, why_len, "--mode: unknown mode %d", (int)c->mode);
    return -1;
  }
  int outer = c->mode == KOLO_TRAIN_LOCAL_SGD || c->mode == KOLO_TRAIN_DILOCO;
  if (c->mode != KOLO_TRAIN_ASYNC) c->max_staleness = 1;
  if (c->mode != KOLO_TRAIN_DILOCO) { /* LOCAL_SGD is DILOCO with these */
    c->outer_lr = 1.0f;
    c->outer_momentum = 0.0f;
    c->nesterov = 0;
  }
  if (!outer) {
    c->compression = KOLO_TRAIN_COMPRESS_NONE;
    c->fragments = 1;
  }
  if (c->average_every == 0) {
    snprintf(why, why_len, "--average-every must be >= 1");
  } else if (c->max_staleness < 1 || c->max_staleness > KOLO_MODE_MAX_STALENESS) {
    snprintf(why, why_len, "--max-staleness must be 1..%u (averaging rounds outstanding)",
             KOLO_MODE_MAX_STALENESS);
  } else if (!(c->outer_lr > 0.0f && c->outer_lr <= (float)KOLO_MODE_MAX_OUTER_LR)) {
    snprintf(why, why_len, "--outer-lr must be in (0, %g]", KOLO_MODE_MAX_OUTER_LR);
  } else if (!(c->outer_momentum >= 0.0f && c->outer_momentum < 1.0f)) {
    snprintf(why, why_len, "--outer-momentum must be in [0, 1)");
  } else if (c->nesterov != 0 && c->nesterov != 1) {
    snprintf(why, why_len, "--nesterov must be 0 or 1");
  } else if (kolo_train_compression_name(c->compression) == NULL) {
    snprintf(why, why_len, "--compression: unknown kind %d", (int)c->compression);
  } else if (c->fragments < 1 || c->fragments > KOLO_MODE_MAX_FRAGMENTS ||
             (c->fragments > 1 && c->fragments > c->average_every)) {
    snprintf(why, why_len,
             "--fragments must be 1..%u and at most --average-every (%llu): each fragment is "
             "synced at its own step of the round",
             KOLO_MODE_MAX_FRAGMENTS, (unsigned long long)c->average_every);
  } else {
    return 0;
  }
  return -1;
}

int kolo_train_dataset_name_valid(const char *name) {
  static const char *const prefixes[] = {"idx:", "csv:", "libsvm:"};
  if (name == NULL) return 0;
  if (strcmp(name, "synthetic") == 0 || strcmp(name, "fashion-mnist") == 0) return 1;
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    size_t n = strlen(prefixes[i]);
    if (strncmp(name, prefixes[i], n) == 0 && name[n] != '\0') return 1;
  }
  return 0;
}

/* Parses a non-negative integer flag value. */
static int parse_u64(kolo_train_flag_error *e, const char *flag, const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *end || errno || s[0] == '-') {
    fail(e, "%s: '%s' is not a non-negative integer", flag, s);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_float(kolo_train_flag_error *e, const char *flag, const char *s, float *out,
                       float min) {
  char *end = NULL;
  errno = 0;
  float v = strtof(s, &end);
  if (!*s || *end || errno || !(v >= min) || v > 1e9f) {
    fail(e, "%s: '%s' is not a number >= %g", flag, s, (double)min);
    return -1;
  }
  *out = v;
  return 0;
}

/* A switch: no value means on; "=1/true/yes/on" or "=0/false/no/off" (so a job's
 * hyper-parameter map can pass every flag as --key=value). */
static int parse_bool(kolo_train_flag_error *e, const char *flag, const char *s, int *out) {
  if (!s || !strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") ||
      !strcasecmp(s, "on")) {
    *out = 1;
  } else if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") ||
             !strcasecmp(s, "off")) {
    *out = 0;
  } else {
    fail(e, "%s: '%s' is not a boolean (true/false)", flag, s);
    return -1;
  }
  return 0;
}

enum {
  OPT_MODEL = 256,
  OPT_HIDDEN,
  OPT_DATASET,
  OPT_TEST_DATA,
  OPT_EPOCHS,
  OPT_STEPS,
  OPT_BATCH,
  OPT_ACCUMULATE,
  OPT_LR,
  OPT_SCALE_LR,
  OPT_WARMUP,
  OPT_OPTIMIZER,
  OPT_MOMENTUM,
  OPT_WEIGHT_DECAY,
  OPT_MODE,
  OPT_AVERAGE_EVERY,
  OPT_MAX_STALENESS,
  OPT_OUTER_LR,
  OPT_OUTER_MOMENTUM,
  OPT_NESTEROV,
  OPT_COMPRESSION,
  OPT_FRAGMENTS,
  OPT_STEP_DELAY,
  OPT_SEED,
  OPT_CKPT_DIR,
  OPT_CKPT_EVERY,
  OPT_EVAL,
  OPT_NO_EVAL,
  OPT_LOG_EVERY,
  OPT_COMMIT_EVERY,
  OPT_THREADS,
  OPT_JSON,
  OPT_QUIET,
  OPT_HELP,
};

static const struct option options[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"dataset", required_argument, NULL, OPT_DATASET},
    {"test-data", required_argument, NULL, OPT_TEST_DATA},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"accumulate", required_argument, NULL, OPT_ACCUMULATE},
    {"lr", required_argument, NULL, OPT_LR},
    {"scale-lr", optional_argument, NULL, OPT_SCALE_LR},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
    {"mode", required_argument, NULL, OPT_MODE},
    {"average-every", required_argument, NULL, OPT_AVERAGE_EVERY},
    {"max-staleness", required_argument, NULL, OPT_MAX_STALENESS},
    {"outer-lr", required_argument, NULL, OPT_OUTER_LR},
    {"outer-momentum", required_argument, NULL, OPT_OUTER_MOMENTUM},
    {"nesterov", optional_argument, NULL, OPT_NESTEROV},
    {"compression", required_argument, NULL, OPT_COMPRESSION},
    {"fragments", required_argument, NULL, OPT_FRAGMENTS},
    {"step-delay-ms", required_argument, NULL, OPT_STEP_DELAY},
    {"seed", required_argument, NULL, OPT_SEED},
    {"checkpoint-dir", required_argument, NULL, OPT_CKPT_DIR},
    {"checkpoint-every", required_argument, NULL, OPT_CKPT_EVERY},
    {"eval", optional_argument, NULL, OPT_EVAL},
    {"no-eval", no_argument, NULL, OPT_NO_EVAL},
    {"log-every", required_argument, NULL, OPT_LOG_EVERY},
    {"commit-every", required_argument, NULL, OPT_COMMIT_EVERY},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"json", optional_argument, NULL, OPT_JSON},
    {"quiet", optional_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* One of the mode's settings (the mode is checked against them at the end). */
static int parse_mode_setting(int opt, const char *s, kolo_train_config *c,
                              kolo_train_flag_error *e) {
  uint64_t v = 0;
  switch (opt) {
    case OPT_AVERAGE_EVERY:
      if (parse_u64(e, "--average-every", s, &c->average_every) || c->average_every == 0) {
        fail(e, "--average-every must be >= 1");
        return -1;
      }
      c->mode_given |= KOLO_TRAIN_GIVEN_AVERAGE_EVERY;
      return 0;
    case OPT_MAX_STALENESS:
      if (parse_u64(e, "--max-staleness", s, &v) || v < 1 || v > KOLO_MODE_MAX_STALENESS) {
        fail(e, "--max-staleness must be 1..%u (averaging rounds outstanding)",
             KOLO_MODE_MAX_STALENESS);
        return -1;
      }
      c->max_staleness = (uint32_t)v;
      c->mode_given |= KOLO_TRAIN_GIVEN_MAX_STALENESS;
      return 0;
    case OPT_OUTER_LR:
      if (parse_float(e, "--outer-lr", s, &c->outer_lr, 1e-12f)) return -1;
      c->mode_given |= KOLO_TRAIN_GIVEN_OUTER_LR;
      return 0;
    case OPT_OUTER_MOMENTUM:
      if (parse_float(e, "--outer-momentum", s, &c->outer_momentum, 0.0f)) return -1;
      c->mode_given |= KOLO_TRAIN_GIVEN_OUTER_MOMENTUM;
      return 0;
    case OPT_NESTEROV:
      if (parse_bool(e, "--nesterov", s, &c->nesterov)) return -1;
      c->mode_given |= KOLO_TRAIN_GIVEN_NESTEROV;
      return 0;
    case OPT_COMPRESSION:
      if (kolo_train_compression_parse(s, &c->compression) != KOLO_OK) {
        fail(e, "--compression: '%s' (want none, fp16 or int8)", s);
        return -1;
      }
      c->mode_given |= KOLO_TRAIN_GIVEN_COMPRESSION;
      return 0;
    default: /* OPT_FRAGMENTS */
      if (parse_u64(e, "--fragments", s, &v) || v < 1 || v > KOLO_MODE_MAX_FRAGMENTS) {
        fail(e, "--fragments must be 1..%u", KOLO_MODE_MAX_FRAGMENTS);
        return -1;
      }
      c->fragments = (uint32_t)v;
      c->mode_given |= KOLO_TRAIN_GIVEN_FRAGMENTS;
      return 0;
  }
}

static int parse_locked(int argc, char **argv, kolo_train_config *c, uint64_t *threads,
                        kolo_train_flag_error *e) {
  int opt, logreg = 0, hidden_set = 0;
  uint64_t v = 0;
  opterr = 0;
  optind = 0; /* glibc: start over (the server parses many argv's) */
  while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
    const char *flag = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    e->arg = optind - 1;
    switch (opt) {
      case OPT_MODEL:
        if (strcmp(optarg, "logreg") == 0) { /* an MLP without hidden layers */
          c->model = "mlp";
          logreg = 1;
          break;
        }
        if (strcmp(optarg, "mlp") != 0 && strcmp(optarg, "lenet") != 0) {
          fail(e, "--model: '%s' (want mlp, lenet or logreg)", optarg);
          return -1;
        }
        c->model = optarg;
        logreg = 0;
        break;
      case OPT_HIDDEN: {
        kolo_train_model_spec spec;
        if (kolo_train_model_spec_parse("mlp", optarg, &spec) != KOLO_OK) {
          fail(e, "--hidden: '%s' (want up to %d comma-separated widths 1..65536, e.g. 256,128)",
               optarg, KOLO_TRAIN_MAX_HIDDEN);
          return -1;
        }
        c->hidden = optarg;
        hidden_set = 1;
        break;
      }
      case OPT_DATASET:
        if (!kolo_train_dataset_name_valid(optarg)) {
          fail(e,
               "--dataset: unknown dataset '%s' (want fashion-mnist, idx:<dir>, csv:<file>, "
               "libsvm:<file> or "
               "synthetic)",
               optarg);
          return -1;
        }
        c->dataset = optarg;
        break;
      case OPT_TEST_DATA:
        c->test_dataset = optarg;
        break;
      case OPT_EPOCHS:
        if (parse_u64(e, "--epochs", optarg, &c->epochs)) return -1;
        break;
      case OPT_STEPS:
        if (parse_u64(e, "--steps", optarg, &c->steps)) return -1;
        break;
      case OPT_BATCH:
        if (parse_u64(e, "--batch", optarg, &v) || v == 0 || v > 65536) {
          fail(e, "--batch must be 1..65536");
          return -1;
        }
        c->batch = (size_t)v;
        break;
      case OPT_ACCUMULATE:
        if (parse_u64(e, "--accumulate", optarg, &v) || v == 0 || v > 4096) {
          fail(e, "--accumulate must be 1..4096");
          return -1;
        }
        c->accumulate = (size_t)v;
        break;
      case OPT_LR:
        if (parse_float(e, "--lr", optarg, &c->optim.lr, 1e-12f)) return -1;
        break;
      case OPT_SCALE_LR:
        if (parse_bool(e, "--scale-lr", optarg, &c->scale_lr)) return -1;
        break;
      case OPT_WARMUP:
        if (parse_u64(e, "--warmup", optarg, &c->optim.warmup)) return -1;
        break;
      case OPT_OPTIMIZER:
        if (kolo_train_optim_parse(optarg, &c->optim.kind) != KOLO_OK) {
          fail(e, "--optimizer: '%s' (want sgd or adam)", optarg);
          return -1;
        }
        break;
      case OPT_MOMENTUM:
        if (parse_float(e, "--momentum", optarg, &c->optim.momentum, 0.0f)) return -1;
        break;
      case OPT_WEIGHT_DECAY:
        if (parse_float(e, "--weight-decay", optarg, &c->optim.weight_decay, 0.0f)) return -1;
        break;
      case OPT_MODE:
        if (kolo_train_mode_parse(optarg, &c->mode) != KOLO_OK) {
          fail(e, "--mode: '%s' (want sync, async, local_sgd or diloco)", optarg);
          return -1;
        }
        c->mode_given |= KOLO_TRAIN_GIVEN_MODE;
        break;
      case OPT_AVERAGE_EVERY:
      case OPT_MAX_STALENESS:
      case OPT_OUTER_LR:
      case OPT_OUTER_MOMENTUM:
      case OPT_NESTEROV:
      case OPT_COMPRESSION:
      case OPT_FRAGMENTS:
        if (parse_mode_setting(opt, optarg, c, e)) return -1;
        break;
      case OPT_STEP_DELAY:
        if (parse_u64(e, "--step-delay-ms", optarg, &v) || v > 60000) {
          fail(e, "--step-delay-ms must be 0..60000");
          return -1;
        }
        c->step_delay_us = (uint32_t)(v * 1000);
        break;
      case OPT_SEED:
        if (parse_u64(e, "--seed", optarg, &c->seed)) return -1;
        break;
      case OPT_CKPT_DIR:
        c->checkpoint_dir = optarg;
        break;
      case OPT_CKPT_EVERY:
        if (parse_u64(e, "--checkpoint-every", optarg, &c->checkpoint_every)) return -1;
        break;
      case OPT_EVAL:
        if (parse_bool(e, "--eval", optarg, &c->eval)) return -1;
        break;
      case OPT_NO_EVAL:
        c->eval = 0;
        break;
      case OPT_LOG_EVERY:
        if (parse_u64(e, "--log-every", optarg, &c->log_every)) return -1;
        break;
      case OPT_COMMIT_EVERY:
        if (parse_u64(e, "--commit-every", optarg, &c->commit_every) || c->commit_every == 0) {
          fail(e, "--commit-every must be >= 1");
          return -1;
        }
        break;
      case OPT_THREADS:
        if (parse_u64(e, "--threads", optarg, threads) || *threads == 0 || *threads > 256) {
          fail(e, "--threads must be 1..256");
          return -1;
        }
        break;
      case OPT_JSON:
        if (parse_bool(e, "--json", optarg, &c->json)) return -1;
        break;
      case OPT_QUIET:
        if (parse_bool(e, "--quiet", optarg, &c->quiet)) return -1;
        break;
      case OPT_HELP:
        return 1;
      default:
        fail(e, "unknown or incomplete option '%s'", flag);
        return -1;
    }
  }
  e->arg = -1;
  if (logreg && hidden_set && c->hidden && *c->hidden) {
    fail(e, "--model logreg has no hidden layers (drop --hidden)");
    return -1;
  }
  if (logreg) c->hidden = "";
  if (optind < argc) {
    e->arg = optind;
    fail(e, "unexpected argument '%s'", argv[optind]);
    return -1;
  }
  if (c->steps == 0 && c->epochs == 0) {
    fail(e, "one of --epochs or --steps must be > 0");
    return -1;
  }
  /* without --mode the environment may still name one (main.c): checked then */
  if ((c->mode_given & KOLO_TRAIN_GIVEN_MODE) &&
      kolo_train_mode_resolve(c, e->message, sizeof e->message))
    return -1;
  return 0;
}

int kolo_train_flags_parse(int argc, char **argv, kolo_train_config *config, uint64_t *threads,
                           kolo_train_flag_error *err) {
  memset(err, 0, sizeof *err);
  err->arg = -1;
  pthread_mutex_lock(&parse_lock);
  int rc = parse_locked(argc, argv, config, threads, err);
  pthread_mutex_unlock(&parse_lock);
  return rc;
}
