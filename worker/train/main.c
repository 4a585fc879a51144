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

#ifndef KOLO_TRAIN_NO_COMM
/* The job mode (include/kolo/mode.h) this run trains in, as the agent checks it. */
static kolo_mode job_mode(const kolo_train_config *config) {
  return config->mode == KOLO_TRAIN_ASYNC ? KOLO_MODE_ASYNC : KOLO_MODE_SYNC;
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
           r.reconfigurations, config.mode == KOLO_TRAIN_ASYNC ? "async" : "sync", r.last_loss,
           r.test_accuracy, r.test_accuracy, r.test_loss, r.seconds, r.samples_per_second_worker,
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
