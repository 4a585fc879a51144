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
  c->seed = 1;
  c->eval = 1;
  c->log_every = 100;
  c->commit_every = 10;
}

kolo_status kolo_train_mode_parse(const char *name, kolo_train_mode *mode) {
  if (!name || !mode) return KOLO_ERR_INVALID_ARG;
  if (strcasecmp(name, "sync") == 0) {
    *mode = KOLO_TRAIN_SYNC;
  } else if (strcasecmp(name, "async") == 0) {
    *mode = KOLO_TRAIN_ASYNC;
  } else {
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
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
          fail(e, "--mode: '%s' (want sync or async)", optarg);
          return -1;
        }
        break;
      case OPT_AVERAGE_EVERY:
        if (parse_u64(e, "--average-every", optarg, &c->average_every) || c->average_every == 0) {
          fail(e, "--average-every must be >= 1");
          return -1;
        }
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
