/* kolo-train: the built-in data-parallel trainer. Parses flags, joins the ring
 * when launched by kolo-worker (KOLO_AGENT_SOCKET: elastic) or kolorun
 * (KOLO_SIZE: fixed ring), trains, and prints a final line with test accuracy
 * and total time. */
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "kolo/elastic.h"
#include "kolo/kolo.h"
#include "worker/train/trainer.h"

#define LOG_TAG "train"

/* Set by SIGTERM/SIGINT; the trainer polls it at every step boundary, writes a
 * checkpoint and stops. A signal handler can only reach a static. */
static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int signo) {
  stop_signal = signo;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: kolo-train [options]\n"
          "  --model mlp|lenet|logreg   model (default mlp; logreg = mlp without hidden layers)\n"
          "  --hidden 256,128           MLP hidden sizes\n"
          "  --dataset D                fashion-mnist | idx:<dir> | csv:<file> | libsvm:<file> |\n"
          "                             synthetic (default synthetic)\n"
          "  --test-data F              test file for csv:/libsvm: (default: last 10%% held out)\n"
          "  --epochs N                 epochs to train (default 1)\n"
          "  --steps N                  optimizer steps to train (overrides --epochs)\n"
          "  --batch B                  samples per worker per micro-batch (default 64)\n"
          "  --accumulate K             micro-batches per optimizer step (default 1)\n"
          "  --lr X                     base learning rate (default 0.02)\n"
          "  --scale-lr                 multiply the learning rate by the number of workers\n"
          "  --warmup N                 steps of linear learning-rate warm-up (default 0)\n"
          "  --optimizer sgd|adam       (default sgd)\n"
          "  --momentum X               SGD momentum (default 0.9)\n"
          "  --weight-decay X           L2 weight decay (default 0)\n"
          "  --mode sync|async          gradient all-reduce per step, or model averaging\n"
          "  --average-every K          ASYNC: steps between model averages (default 8)\n"
          "  --seed N                   data order and initial weights (default 1)\n"
          "  --checkpoint-dir DIR       write checkpoints there; resume from the newest valid\n"
          "  --checkpoint-every M       steps between checkpoints (default: only at the end)\n"
          "  --eval / --no-eval         evaluate on the test split every epoch (default on)\n"
          "  --log-every N              steps between progress lines (default 100)\n"
          "  --commit-every N           elastic runs: steps between state commits (default 10)\n"
          "  --threads N                OpenBLAS threads per worker (default 1)\n"
          "  --json                     progress and result as JSON lines\n"
          "  --quiet                    only the final line\n"
          "Switches also take =true/=false; every flag also works as --flag=value.\n"
          "Distributed: run under kolorun (or kolo-worker); KOLO_SIZE etc. come from it.\n");
}

/* Parses a non-negative integer flag value. */
static int parse_u64(const char *flag, const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *end || errno || s[0] == '-') {
    fprintf(stderr, "kolo-train: %s: '%s' is not a non-negative integer\n", flag, s);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_float(const char *flag, const char *s, float *out, float min) {
  char *end = NULL;
  errno = 0;
  float v = strtof(s, &end);
  if (!*s || *end || errno || !(v >= min) || v > 1e9f) {
    fprintf(stderr, "kolo-train: %s: '%s' is not a number >= %g\n", flag, s, (double)min);
    return -1;
  }
  *out = v;
  return 0;
}

/* A switch: no value means on; "=1/true/yes/on" or "=0/false/no/off" (so a job's
 * hyper-parameter map can pass every flag as --key=value). */
static int parse_bool(const char *flag, const char *s, int *out) {
  if (!s || !strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") ||
      !strcasecmp(s, "on")) {
    *out = 1;
  } else if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") ||
             !strcasecmp(s, "off")) {
    *out = 0;
  } else {
    fprintf(stderr, "kolo-train: %s: '%s' is not a boolean (true/false)\n", flag, s);
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

/* Fills config from argv; returns 0, 1 for --help, -1 on a bad flag (message printed). */
static int parse_flags(int argc, char **argv, kolo_train_config *c, uint64_t *threads) {
  int opt, logreg = 0, hidden_set = 0;
  uint64_t v = 0;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
    const char *flag = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    switch (opt) {
      case OPT_MODEL:
        if (strcmp(optarg, "logreg") == 0) { /* an MLP without hidden layers */
          c->model = "mlp";
          logreg = 1;
          break;
        }
        if (strcmp(optarg, "mlp") != 0 && strcmp(optarg, "lenet") != 0) {
          fprintf(stderr, "kolo-train: --model: '%s' (want mlp, lenet or logreg)\n", optarg);
          return -1;
        }
        c->model = optarg;
        logreg = 0;
        break;
      case OPT_HIDDEN:
        c->hidden = optarg;
        hidden_set = 1;
        break;
      case OPT_DATASET:
        c->dataset = optarg;
        break;
      case OPT_TEST_DATA:
        c->test_dataset = optarg;
        break;
      case OPT_EPOCHS:
        if (parse_u64("--epochs", optarg, &c->epochs)) return -1;
        break;
      case OPT_STEPS:
        if (parse_u64("--steps", optarg, &c->steps)) return -1;
        break;
      case OPT_BATCH:
        if (parse_u64("--batch", optarg, &v) || v == 0 || v > 65536) {
          fprintf(stderr, "kolo-train: --batch must be 1..65536\n");
          return -1;
        }
        c->batch = (size_t)v;
        break;
      case OPT_ACCUMULATE:
        if (parse_u64("--accumulate", optarg, &v) || v == 0 || v > 4096) {
          fprintf(stderr, "kolo-train: --accumulate must be 1..4096\n");
          return -1;
        }
        c->accumulate = (size_t)v;
        break;
      case OPT_LR:
        if (parse_float("--lr", optarg, &c->optim.lr, 1e-12f)) return -1;
        break;
      case OPT_SCALE_LR:
        if (parse_bool("--scale-lr", optarg, &c->scale_lr)) return -1;
        break;
      case OPT_WARMUP:
        if (parse_u64("--warmup", optarg, &c->optim.warmup)) return -1;
        break;
      case OPT_OPTIMIZER:
        if (kolo_train_optim_parse(optarg, &c->optim.kind) != KOLO_OK) {
          fprintf(stderr, "kolo-train: --optimizer: '%s' (want sgd or adam)\n", optarg);
          return -1;
        }
        break;
      case OPT_MOMENTUM:
        if (parse_float("--momentum", optarg, &c->optim.momentum, 0.0f)) return -1;
        break;
      case OPT_WEIGHT_DECAY:
        if (parse_float("--weight-decay", optarg, &c->optim.weight_decay, 0.0f)) return -1;
        break;
      case OPT_MODE:
        if (kolo_train_mode_parse(optarg, &c->mode) != KOLO_OK) {
          fprintf(stderr, "kolo-train: --mode: '%s' (want sync or async)\n", optarg);
          return -1;
        }
        break;
      case OPT_AVERAGE_EVERY:
        if (parse_u64("--average-every", optarg, &c->average_every) || c->average_every == 0) {
          fprintf(stderr, "kolo-train: --average-every must be >= 1\n");
          return -1;
        }
        break;
      case OPT_SEED:
        if (parse_u64("--seed", optarg, &c->seed)) return -1;
        break;
      case OPT_CKPT_DIR:
        c->checkpoint_dir = optarg;
        break;
      case OPT_CKPT_EVERY:
        if (parse_u64("--checkpoint-every", optarg, &c->checkpoint_every)) return -1;
        break;
      case OPT_EVAL:
        if (parse_bool("--eval", optarg, &c->eval)) return -1;
        break;
      case OPT_NO_EVAL:
        c->eval = 0;
        break;
      case OPT_LOG_EVERY:
        if (parse_u64("--log-every", optarg, &c->log_every)) return -1;
        break;
      case OPT_COMMIT_EVERY:
        if (parse_u64("--commit-every", optarg, &c->commit_every) || c->commit_every == 0) {
          fprintf(stderr, "kolo-train: --commit-every must be >= 1\n");
          return -1;
        }
        break;
      case OPT_THREADS:
        if (parse_u64("--threads", optarg, threads) || *threads == 0 || *threads > 256) {
          fprintf(stderr, "kolo-train: --threads must be 1..256\n");
          return -1;
        }
        break;
      case OPT_JSON:
        if (parse_bool("--json", optarg, &c->json)) return -1;
        break;
      case OPT_QUIET:
        if (parse_bool("--quiet", optarg, &c->quiet)) return -1;
        break;
      case OPT_HELP:
        return 1;
      default:
        fprintf(stderr, "kolo-train: unknown or incomplete option '%s' (see --help)\n", flag);
        return -1;
    }
  }
  if (logreg && hidden_set && c->hidden && *c->hidden) {
    fprintf(stderr, "kolo-train: --model logreg has no hidden layers (drop --hidden)\n");
    return -1;
  }
  if (logreg) c->hidden = "";
  if (optind < argc) {
    fprintf(stderr, "kolo-train: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (c->steps == 0 && c->epochs == 0) {
    fprintf(stderr, "kolo-train: one of --epochs or --steps must be > 0\n");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  kolo_train_config config;
  kolo_train_config_defaults(&config);
  uint64_t threads = 1;
  int parsed = parse_flags(argc, argv, &config, &threads);
  if (parsed != 0) {
    usage(parsed > 0 ? stdout : stderr);
    return parsed > 0 ? 0 : 2;
  }
  openblas_set_num_threads((int)threads);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART; /* libkolo also retries on EINTR */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  config.stop_flag = &stop_signal;

  kolo_elastic *elastic = NULL;
#ifdef KOLO_TRAIN_NO_COMM
  (void)elastic;
#endif
  kolo_train_trainer *trainer = NULL;
  kolo_status rc = KOLO_OK;
  const char *size_env = getenv("KOLO_SIZE");
  const char *agent_env = getenv("KOLO_AGENT_SOCKET");
  int distributed = (size_env && *size_env) || (agent_env && *agent_env);
  int rank = 0, size = 1;
  if (distributed) {
#ifdef KOLO_TRAIN_NO_COMM
    fprintf(stderr, "kolo-train: launched as a rank but this build has no libkolo\n");
    return 1;
#else
    rc = kolo_elastic_create(&elastic);
    if (rc != KOLO_OK) {
      fprintf(stderr, "kolo-train: cannot join the ring: %s\n", kolo_strerror(rc));
      return 1;
    }
    rc = kolo_train_trainer_create_elastic(&config, elastic, stdout, &trainer);
#endif
  } else {
    rc = kolo_train_trainer_create(&config, NULL, stdout, &trainer);
  }
  if (rc != KOLO_OK) {
    fprintf(stderr, "kolo-train: setup failed: %s\n", kolo_strerror(rc));
    goto out;
  }
  kolo_train_result r;
  rc = kolo_train_trainer_run(trainer, &r);
#ifndef KOLO_TRAIN_NO_COMM
  if (elastic) { /* the ring may have changed during the run */
    rank = kolo_comm_rank(kolo_elastic_comm(elastic));
    size = kolo_comm_size(kolo_elastic_comm(elastic));
  }
#endif
  if (rc != KOLO_OK && stop_signal) {
    fprintf(stderr, "kolo-train: rank %d: stopped by signal %d at step %llu\n", rank,
            (int)stop_signal, (unsigned long long)r.steps);
    goto out;
  }
  if (rc != KOLO_OK) {
    fprintf(stderr, "kolo-train: rank %d: training failed: %s\n", rank, kolo_strerror(rc));
    goto out;
  }
  char done[512];
  snprintf(done, sizeof done,
           "{\"event\":\"done\",\"steps\":%llu,\"total_steps\":%llu,\"epochs\":%llu,"
           "\"resumed_step\":%llu,"
           "\"workers\":%d,\"reconfigurations\":%d,\"mode\":\"%s\",\"loss\":%.6f,"
           "\"accuracy\":%.6f,\"test_loss\":%.6f,\"time_s\":%.3f,"
           "\"samples_per_sec_worker\":%.1f,\"samples_per_sec_total\":%.1f}",
           (unsigned long long)r.steps, (unsigned long long)r.total_steps,
           (unsigned long long)r.epochs,
           (unsigned long long)r.resumed_step, size, r.reconfigurations,
           config.mode == KOLO_TRAIN_ASYNC ? "async" : "sync", r.last_loss, r.test_accuracy,
           r.test_loss, r.seconds, r.samples_per_second_worker, r.samples_per_second_total);
#ifndef KOLO_TRAIN_NO_COMM
  if (elastic) kolo_elastic_report(elastic, done);
#endif
  if (rank == 0) {
    if (config.json) {
      printf("%s\n", done);
    } else {
      printf(
          "final: test accuracy %.4f  test loss %.4f  steps %llu  workers %d  time %.2f s  "
          "samples/s %.0f per worker, %.0f total\n",
          r.test_accuracy, r.test_loss, (unsigned long long)r.steps, size, r.seconds,
          r.samples_per_second_worker, r.samples_per_second_total);
    }
    fflush(stdout);
  }
out:
  kolo_train_trainer_destroy(trainer);
#ifndef KOLO_TRAIN_NO_COMM
  kolo_elastic_destroy(elastic);
#endif
  if (rc != KOLO_OK && stop_signal) return 128 + (int)stop_signal;
  /* ranks that disagree on the schedule cannot train this job: a usage error */
  if (rc == KOLO_ERR_MISMATCH) return 2;
  return rc == KOLO_OK ? 0 : 1;
}
