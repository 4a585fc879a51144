/* kolo-train: the built-in data-parallel trainer. Parses flags, joins the ring
 * when launched by kolo-worker (KOLO_AGENT_SOCKET: elastic) or kolorun
 * (KOLO_SIZE: fixed ring), trains, and prints a final line with test accuracy
 * and total time. */
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kolo/elastic.h"
#include "kolo/mode.h"
#include "kolo/kolo.h"
#include "worker/train/flags.h"
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
          "  --mode M                   sync|async|local_sgd|diloco (default KOLO_MODE or\n"
          "                             sync): how replicas are kept together\n"
          "  --average-every K          ASYNC: steps between model averages;\n"
          "                             LOCAL_SGD/DILOCO: inner steps H (default 8)\n"
          "  --max-staleness N          ASYNC: averaging rounds outstanding (default 1)\n"
          "  --outer-lr X               DILOCO: outer learning rate (default 0.7)\n"
          "  --outer-momentum X         DILOCO: outer momentum in [0, 1) (default 0.9)\n"
          "  --nesterov 0|1             DILOCO: Nesterov outer momentum (default 1)\n"
          "  --compression C            LOCAL_SGD/DILOCO: none|fp16|int8 (default none)\n"
          "  --fragments F              LOCAL_SGD/DILOCO: staggered fragments (default 1)\n"
          "  --step-delay-ms MS         sleep after every step (a deliberately slow rank)\n"
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

/* The mode's values are the C API's (include/kolo/mode.h), so a kolo_mode
 * converts to and from kolo_train_mode as it is. */
_Static_assert(KOLO_TRAIN_SYNC == (int)KOLO_MODE_SYNC && KOLO_TRAIN_ASYNC == (int)KOLO_MODE_ASYNC &&
                   KOLO_TRAIN_LOCAL_SGD == (int)KOLO_MODE_LOCAL_SGD &&
                   KOLO_TRAIN_DILOCO == (int)KOLO_MODE_DILOCO,
               "kolo_train_mode is kolo_mode");
_Static_assert(KOLO_TRAIN_COMPRESS_NONE == (int)KOLO_COMPRESSION_NONE &&
                   KOLO_TRAIN_COMPRESS_FP16 == (int)KOLO_COMPRESSION_FP16 &&
                   KOLO_TRAIN_COMPRESS_INT8 == (int)KOLO_COMPRESSION_INT8,
               "kolo_train_compression is kolo_compression");

/* Takes the settings the environment's mode uses from spec, except those the
 * command line gave (a flag wins over the job's environment). */
static void apply_mode_spec(kolo_train_config *c, const kolo_mode_spec *spec) {
  unsigned given = c->mode_given, from_env = 0;
  int outer = spec->mode == KOLO_MODE_LOCAL_SGD || spec->mode == KOLO_MODE_DILOCO;
  c->mode = (kolo_train_mode)spec->mode;
  if (spec->mode != KOLO_MODE_SYNC && !(given & KOLO_TRAIN_GIVEN_AVERAGE_EVERY)) {
    c->average_every = spec->sync_every;
    from_env |= KOLO_TRAIN_GIVEN_AVERAGE_EVERY;
  }
  if (spec->mode == KOLO_MODE_ASYNC && !(given & KOLO_TRAIN_GIVEN_MAX_STALENESS)) {
    c->max_staleness = spec->max_staleness;
    from_env |= KOLO_TRAIN_GIVEN_MAX_STALENESS;
  }
  if (spec->mode == KOLO_MODE_DILOCO) {
    if (!(given & KOLO_TRAIN_GIVEN_OUTER_LR)) c->outer_lr = (float)spec->outer_lr;
    if (!(given & KOLO_TRAIN_GIVEN_OUTER_MOMENTUM)) c->outer_momentum = (float)spec->outer_momentum;
    if (!(given & KOLO_TRAIN_GIVEN_NESTEROV)) c->nesterov = spec->nesterov;
    from_env |=
        KOLO_TRAIN_GIVEN_OUTER_LR | KOLO_TRAIN_GIVEN_OUTER_MOMENTUM | KOLO_TRAIN_GIVEN_NESTEROV;
  }
  if (outer && !(given & KOLO_TRAIN_GIVEN_COMPRESSION)) {
    c->compression = (kolo_train_compression)spec->compression;
    from_env |= KOLO_TRAIN_GIVEN_COMPRESSION;
  }
  if (outer && !(given & KOLO_TRAIN_GIVEN_FRAGMENTS)) {
    c->fragments = spec->fragments;
    from_env |= KOLO_TRAIN_GIVEN_FRAGMENTS;
  }
  c->mode_given |= from_env;
}

/* Without --mode: the mode of the environment (KOLO_MODE*, read by
 * kolo_mode_from_env; none: SYNC) with the settings the command line did not
 * give, then the check of every setting against it. 0, or -1 with why. */
static int resolve_mode(kolo_train_config *config, char *why, size_t why_len) {
  if (config->mode_given & KOLO_TRAIN_GIVEN_MODE) return 0; /* checked by the parser */
  const char *env = getenv("KOLO_MODE");
  if (env && *env) {
    kolo_mode_spec spec;
    char err[200] = "";
    if (kolo_mode_from_env(&spec, err, sizeof err) != KOLO_OK) {
      snprintf(why, why_len, "the job's mode (environment): %s", err);
      return -1;
    }
    apply_mode_spec(config, &spec);
  }
  return kolo_train_mode_resolve(config, why, why_len);
}

#ifndef KOLO_TRAIN_NO_COMM
/* The job mode (include/kolo/mode.h) this run trains in, as the agent checks it. */
static kolo_mode job_mode(const kolo_train_config *config) {
  return (kolo_mode)config->mode; /* the same values (checked above) */
}
#endif

int main(int argc, char **argv) {
  kolo_train_config config;
  kolo_train_config_defaults(&config);
  uint64_t threads = 1;
  kolo_train_flag_error flag_error;
  int parsed = kolo_train_flags_parse(argc, argv, &config, &threads, &flag_error);
  if (parsed != 0) {
    if (parsed > 0) {
      usage(stdout);
      return 0;
    }
    /* one line, last on stderr: it is what a failed job's message shows */
    fprintf(stderr, "kolo-train: %s (usage: kolo-train --help)\n", flag_error.message);
    return KOLO_TRAIN_EXIT_USAGE;
  }
  if (resolve_mode(&config, flag_error.message, sizeof flag_error.message) != 0) {
    fprintf(stderr, "kolo-train: %s (usage: kolo-train --help)\n", flag_error.message);
    return KOLO_TRAIN_EXIT_USAGE;
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
    /* the agent fails a job whose process runs another mode than the spec's */
    rc = kolo_elastic_acknowledge_mode(elastic, job_mode(&config));
    if (rc != KOLO_OK) {
      fprintf(stderr, "kolo-train: cannot acknowledge mode %s: %s\n",
              kolo_mode_name(job_mode(&config)), kolo_strerror(rc));
      goto out;
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
           "\"accuracy\":%.6f,\"test_accuracy\":%.6f,\"test_loss\":%.6f,\"time_s\":%.3f,"
           "\"samples_per_sec_worker\":%.1f,\"samples_per_sec_total\":%.1f}",
           (unsigned long long)r.steps, (unsigned long long)r.total_steps,
           (unsigned long long)r.epochs, (unsigned long long)r.resumed_step, size,
           r.reconfigurations, kolo_train_mode_name(config.mode), r.last_loss, r.test_accuracy,
           r.test_accuracy, r.test_loss, r.seconds, r.samples_per_second_worker,
           r.samples_per_second_total);
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
