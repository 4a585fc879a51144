/* Command-line flags of kolo-worker. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/agent/agent.h"
#include "worker/agent/warm_join.h"

void kolo_agent_options_usage(FILE *out) {
  fprintf(out,
          "usage: kolo-worker --etcd URLS --advertise HOST:PORT [options]\n"
          "  --etcd URLS          etcd client URLs, comma-separated (https:// = TLS)\n"
          "  --etcd-ca FILE       PEM CA bundle to verify etcd (default: the system's)\n"
          "  --etcd-cert FILE     PEM client certificate for etcd (with --etcd-key)\n"
          "  --etcd-key FILE      its private key\n"
          "  --etcd-user NAME     etcd user (auth; with --etcd-password-file)\n"
          "  --etcd-password-file FILE  first line: --etcd-user's password\n"
          "  --advertise H:P      data-plane address ring peers connect to\n"
          "  --listen H:P         address the training process binds (default: --advertise)\n"
          "  --id ID              worker id (default: <host>-<pid>)\n"
          "  --lease-ttl S        registration lease TTL in seconds (default 3)\n"
          "  --work-dir DIR       socket and process logs (default /tmp/kolo-worker-<id>)\n"
          "  --labels K=V,...     labels of this worker\n"
          "  --gpus N             GPUs of this worker (default 0)\n"
          "  --train-bin PATH     kolo-train for builtin jobs (default: next to kolo-worker)\n"
          "  --stop-grace-ms MS   STOP -> SIGTERM -> SIGKILL spacing (default 2000)\n"
          "  --warm-join-ms MS    a grown ring: train on until its newcomers' processes are up,\n"
          "                       at most MS (default 20000; 0: switch at once)\n"
          "  --partition-fence    pause the process once no lease renewal was acknowledged\n"
          "                       for a TTL, so a worker cut off from etcd never runs a job\n"
          "                       beside its restarted copy (docs/ELASTIC.md)\n"
          "  --http-listen H:P    serve /healthz, /readyz (200 while registered) and /metrics\n"
          "  --logs-listen H:P    where kolo-server fetches job logs (default: the --advertise "
          "host, a free port)\n"
          "  --log-dir DIR        job logs (default <work-dir>/logs)\n"
          "  --log-file-size N    rotate a log file past N bytes (K, M, G suffixes; default 8M)\n"
          "  --log-job-size N     keep at most N bytes per job, dropping its oldest files (default "
          "64M)\n"
          "  --log-total-size N   keep at most N bytes of finished jobs' logs (default 1G)\n"
          "  --log-retention S    delete a finished job's logs S seconds after its last line "
          "(default 86400)\n");
}

static int copy(char *dst, size_t size, const char *src, const char *flag, char *err,
                size_t err_len) {
  if (strlen(src) >= size) {
    snprintf(err, err_len, "%s: value too long", flag);
    return -1;
  }
  strcpy(dst, src);
  return 0;
}

/* "123", "64K", "8M", "1G" -> bytes; 0 on a malformed value. */
static uint64_t parse_size(const char *text) {
  char *end;
  if (text[0] < '0' || text[0] > '9') return 0;
  unsigned long long n = strtoull(text, &end, 10);
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k')
    shift = 10;
  else if (*end == 'M' || *end == 'm')
    shift = 20;
  else if (*end == 'G' || *end == 'g')
    shift = 30;
  if (shift) end++;
  if (*end != '\0' || n > (1ull << 40) >> shift) return 0;
  return (uint64_t)n << shift;
}

static int size_flag(const char *flag, const char *value, uint64_t min, uint64_t *out, char *err,
                     size_t err_len) {
  *out = parse_size(value);
  if (*out < min) {
    snprintf(err, err_len, "%s: want a size of at least %llu bytes (K, M, G suffixes), got '%s'",
             flag, (unsigned long long)min, value);
    return -1;
  }
  return 0;
}

kolo_status kolo_agent_options_parse(int argc, char **argv, kolo_agent_options *opts, char *err,
                                     size_t err_len) {
  memset(opts, 0, sizeof *opts);
  opts->lease_ttl_s = 3;
  opts->stop_grace_ms = 2000;
  opts->warm_join_ms = KOLO_AGENT_WARM_JOIN_MS;
  opts->log_file_bytes = 8u << 20;
  opts->log_job_bytes = 64u << 20;
  opts->log_total_bytes = 1u << 30;
  opts->log_retention_s = 86400;
  static const struct option long_options[] = {{"etcd", required_argument, NULL, 'e'},
                                               {"advertise", required_argument, NULL, 'a'},
                                               {"listen", required_argument, NULL, 'l'},
                                               {"id", required_argument, NULL, 'i'},
                                               {"lease-ttl", required_argument, NULL, 't'},
                                               {"work-dir", required_argument, NULL, 'w'},
                                               {"labels", required_argument, NULL, 'L'},
                                               {"gpus", required_argument, NULL, 'g'},
                                               {"train-bin", required_argument, NULL, 'b'},
                                               {"stop-grace-ms", required_argument, NULL, 's'},
                                               {"warm-join-ms", required_argument, NULL, 'W'},
                                               {"logs-listen", required_argument, NULL, 'P'},
                                               {"log-dir", required_argument, NULL, 'D'},
                                               {"log-file-size", required_argument, NULL, 'F'},
                                               {"log-job-size", required_argument, NULL, 'J'},
                                               {"log-total-size", required_argument, NULL, 'T'},
                                               {"log-retention", required_argument, NULL, 'R'},
                                               {"http-listen", required_argument, NULL, 'H'},
                                               {"help", no_argument, NULL, 'h'},
                                               {"partition-fence", no_argument, NULL, 6},
                                               {"etcd-ca", required_argument, NULL, 1},
                                               {"etcd-cert", required_argument, NULL, 2},
                                               {"etcd-key", required_argument, NULL, 3},
                                               {"etcd-user", required_argument, NULL, 4},
                                               {"etcd-password-file", required_argument, NULL, 5},
                                               {NULL, 0, NULL, 0}};
  kolo_etcd_access *access = &opts->etcd_access;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
    int rc = 0;
    char *end = NULL;
    switch (c) {
      case 6:
        opts->partition_fence = 1;
        break;
      case 'e':
        rc = copy(opts->etcd, sizeof opts->etcd, optarg, "--etcd", err, err_len);
        break;
      case 1:
        rc = copy(access->ca_file, sizeof access->ca_file, optarg, "--etcd-ca", err, err_len);
        break;
      case 2:
        rc = copy(access->cert_file, sizeof access->cert_file, optarg, "--etcd-cert", err, err_len);
        break;
      case 3:
        rc = copy(access->key_file, sizeof access->key_file, optarg, "--etcd-key", err, err_len);
        break;
      case 4:
        rc = copy(access->user, sizeof access->user, optarg, "--etcd-user", err, err_len);
        break;
      case 5:
        rc = copy(access->password_file, sizeof access->password_file, optarg,
                  "--etcd-password-file", err, err_len);
        break;
      case 'a':
        rc = copy(opts->advertise, sizeof opts->advertise, optarg, "--advertise", err, err_len);
        break;
      case 'l':
        rc = copy(opts->listen, sizeof opts->listen, optarg, "--listen", err, err_len);
        break;
      case 'i':
        rc = copy(opts->id, sizeof opts->id, optarg, "--id", err, err_len);
        break;
      case 'w':
        rc = copy(opts->work_dir, sizeof opts->work_dir, optarg, "--work-dir", err, err_len);
        break;
      case 'L':
        rc = copy(opts->labels, sizeof opts->labels, optarg, "--labels", err, err_len);
        break;
      case 'b':
        rc = copy(opts->train_bin, sizeof opts->train_bin, optarg, "--train-bin", err, err_len);
        break;
      case 'H':
        rc = copy(opts->http_listen, sizeof opts->http_listen, optarg, "--http-listen", err,
                  err_len);
        break;
      case 't':
        opts->lease_ttl_s = (int)strtol(optarg, &end, 10);
        if (*end || opts->lease_ttl_s < 1 || opts->lease_ttl_s > 3600) {
          snprintf(err, err_len, "--lease-ttl: want 1..3600 seconds, got '%s'", optarg);
          rc = -1;
        }
        break;
      case 'g':
        opts->gpus = (int)strtol(optarg, &end, 10);
        if (*end || opts->gpus < 0 || opts->gpus > 65535) {
          snprintf(err, err_len, "--gpus: want 0..65535, got '%s'", optarg);
          rc = -1;
        }
        break;
      case 's':
        opts->stop_grace_ms = (int)strtol(optarg, &end, 10);
        if (*end || opts->stop_grace_ms < 0 || opts->stop_grace_ms > 600000) {
          snprintf(err, err_len, "--stop-grace-ms: want 0..600000, got '%s'", optarg);
          rc = -1;
        }
        break;
      case 'W':
        opts->warm_join_ms = (int)strtol(optarg, &end, 10);
        if (*end || opts->warm_join_ms < 0 || opts->warm_join_ms > 600000) {
          snprintf(err, err_len, "--warm-join-ms: want 0..600000, got '%s'", optarg);
          rc = -1;
        }
        break;
      case 'P':
        rc = copy(opts->logs_listen, sizeof opts->logs_listen, optarg, "--logs-listen", err,
                  err_len);
        break;
      case 'D':
        rc = copy(opts->log_dir, sizeof opts->log_dir, optarg, "--log-dir", err, err_len);
        break;
      case 'F':
        rc = size_flag("--log-file-size", optarg, 1024, &opts->log_file_bytes, err, err_len);
        break;
      case 'J':
        rc = size_flag("--log-job-size", optarg, 2048, &opts->log_job_bytes, err, err_len);
        break;
      case 'T':
        rc = size_flag("--log-total-size", optarg, 2048, &opts->log_total_bytes, err, err_len);
        break;
      case 'R': {
        long long seconds = strtoll(optarg, &end, 10);
        if (*optarg == '\0' || *end || seconds < 0 || seconds > 100LL * 365 * 86400) {
          snprintf(err, err_len, "--log-retention: want 0.. seconds, got '%s'", optarg);
          rc = -1;
        }
        opts->log_retention_s = seconds;
        break;
      }
      case 'h':
        kolo_agent_options_usage(stdout);
        return KOLO_ERR_ABORTED;
      default:
        snprintf(err, err_len, "unknown option");
        return KOLO_ERR_INVALID_ARG;
    }
    if (rc != 0) return KOLO_ERR_INVALID_ARG;
  }
  if (optind < argc) {
    snprintf(err, err_len, "unexpected argument '%s'", argv[optind]);
    return KOLO_ERR_INVALID_ARG;
  }
  if (opts->etcd[0] == '\0') {
    snprintf(err, err_len, "--etcd is required");
    return KOLO_ERR_INVALID_ARG;
  }
  if (opts->log_job_bytes < 2 * opts->log_file_bytes ||
      opts->log_total_bytes < opts->log_job_bytes) {
    snprintf(err, err_len,
             "--log-job-size must be at least twice --log-file-size, and --log-total-size at least "
             "--log-job-size");
    return KOLO_ERR_INVALID_ARG;
  }
  if (opts->advertise[0] == '\0') {
    snprintf(err, err_len, "--advertise is required (the data-plane host:port)");
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_status rc = kolo_etcd_access_set_endpoints(access, opts->etcd, err, err_len);
  return rc != KOLO_OK ? rc : kolo_etcd_access_load(access, err, err_len);
}
