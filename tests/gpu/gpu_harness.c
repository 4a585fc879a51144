/* Process, ring and reference helpers for the GPU test programs (see
 * gpu_harness.h). CUDA is touched only inside rank processes. */
#define _GNU_SOURCE
#include "gpu_harness.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t gpu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void gpu_sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int count_entries(const char *path) {
  DIR *dir = opendir(path);
  if (dir == NULL) return -1;
  int n = 0;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) n += entry->d_name[0] != '.';
  closedir(dir);
  return n;
}

int gpu_open_fds(void) {
  return count_entries("/proc/self/fd") - 1; /* the DIR itself */
}
int gpu_threads(void) {
  return count_entries("/proc/self/task");
}

int gpu_on_fake(void) {
  return dlsym(RTLD_DEFAULT, "fakegpu_context_made") != NULL;
}

int gpu_count_in_child(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    int n = 0;
    char message[256];
    kolo_nccl_versions(message, sizeof message);
    printf("# %s%s\n", message, gpu_on_fake() ? " (CPU stand-in: tests/support/fakegpu)" : "");
    fflush(stdout);
    if (kolo_nccl_device_count(&n, message, sizeof message) != KOLO_OK) {
      fprintf(stderr, "gpu: no usable CUDA device: %s\n", message);
      _exit(0);
    }
    _exit(n > 200 ? 200 : n);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

int gpu_start(int argc, char **argv, int min_ranks, int *ranks, int *exit_code) {
  int requested = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) continue; /* these programs have one size */
    if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      requested = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--quick] [--ranks N]\n", argv[0]);
      *exit_code = 2;
      return 0;
    }
  }
  int gpus = gpu_count_in_child();
  if (gpus == 0) {
    printf("# no usable GPU: skipped\n");
    *exit_code = GPU_EXIT_SKIP;
    return 0;
  }
  *ranks = gpus > min_ranks ? gpus : min_ranks;
  if (requested >= min_ranks && requested <= GPU_MAX_RANKS) *ranks = requested;
  return gpus;
}

/* ---- ranks and rings ---- */

static char ring_addresses[GPU_MAX_RANKS][64];
static kolo_listener *ring_listeners[GPU_MAX_RANKS];
static int ring_size;

/* Before any CUDA call in a rank: several ranks on one GPU are several "hosts"
 * to NCCL (its duplicate-GPU check compares host hash and bus id), talking
 * over its socket transport on loopback. */
static void share_gpu_environment(int rank) {
  char host[64];
  snprintf(host, sizeof host, "kolo-gpu-test-%d-rank%d", (int)getppid(), rank);
  setenv("NCCL_HOSTID", host, 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("NCCL_SHM_DISABLE", "1", 0);
  setenv("NCCL_P2P_DISABLE", "1", 0);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("NCCL_MNNVL_ENABLE", "0", 0);
}

static int reap(pid_t *pids, int *done, int size, int expect_killed, uint64_t deadline,
                int timeout_s) {
  int failed = 0, left = size;
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      if (gpu_now_ns() > deadline) {
        for (int r = 0; r < size; r++) {
          if (done[r]) continue;
          kill(pids[r], SIGKILL);
          (void)waitpid(pids[r], NULL, 0);
          done[r] = 1;
          left--;
          failed++;
          gpu_report(0, "rank %d finished within %d s (killed)", r, timeout_s);
        }
        break;
      }
      gpu_sleep_ms(10);
      continue;
    }
    for (int r = 0; r < size; r++) {
      if (pids[r] != pid || done[r]) continue;
      done[r] = 1;
      left--;
      if (r == expect_killed) {
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
          failed++;
          gpu_report(0, "rank %d died by SIGKILL as planned", r);
        }
      } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failed++;
        if (WIFSIGNALED(status))
          gpu_report(0, "rank %d exited cleanly (signal %d)", r, WTERMSIG(status));
        else
          fprintf(stdout, "# rank %d exited with %d\n", r, WEXITSTATUS(status));
      }
    }
  }
  return failed;
}

int gpu_run_ranks(int size, int gpus, gpu_rank_fn fn, void *arg, int timeout_s, int expect_killed) {
  if (size < 1 || size > GPU_MAX_RANKS || gpus < 1) return size;
  char dir[] = "/tmp/kolo-gpu-XXXXXX";
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return size;
  }
  for (int r = 0; r < size; r++) {
    if (kolo_listener_create("127.0.0.1:0", &ring_listeners[r]) != KOLO_OK ||
        kolo_listener_address(ring_listeners[r], ring_addresses[r], sizeof ring_addresses[r]) !=
            KOLO_OK)
      return size;
  }
  ring_size = size;
  pid_t pids[GPU_MAX_RANKS];
  int done[GPU_MAX_RANKS] = {0};
  fflush(stdout);
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      setvbuf(stdout, NULL, _IOLBF, 0); /* one line per write: lines from ranks don't mix */
      for (int other = 0; other < size; other++)
        if (other != r) kolo_listener_destroy(ring_listeners[other]);
      gpu_rank me = {.rank = r,
                     .size = size,
                     .device = r % gpus,
                     .shared = size > gpus,
                     .dir = dir,
                     .arg = arg};
      if (me.shared) share_gpu_environment(r);
      int rc = fn(&me);
      fflush(stdout);
      _exit(rc > 100 ? 100 : rc);
    }
    if (pids[r] < 0) {
      perror("fork");
      for (int k = 0; k < r; k++) kill(pids[k], SIGKILL);
      size = r;
      break;
    }
  }
  for (int r = 0; r < ring_size; r++) kolo_listener_destroy(ring_listeners[r]);
  uint64_t deadline = gpu_now_ns() + (uint64_t)timeout_s * 1000000000ull;
  int failed = reap(pids, done, size, expect_killed, deadline, timeout_s);
  char command[64];
  snprintf(command, sizeof command, "rm -rf %s", dir);
  if (system(command) != 0) fprintf(stdout, "# could not remove %s\n", dir);
  return failed;
}

kolo_status gpu_ring_join(const gpu_rank *r, uint64_t epoch, int rank, int size, int timeout_ms,
                          kolo_comm **out) {
  static int own_listener_used;
  const char *peers[GPU_MAX_RANKS];
  for (int i = 0; i < size; i++) peers[i] = ring_addresses[i];
  kolo_listener *listener = NULL;
  if (!own_listener_used && rank == r->rank) listener = ring_listeners[r->rank];
  own_listener_used = 1; /* later epochs bind the same address again */
  kolo_ring_spec spec = {.epoch = epoch,
                         .rank = rank,
                         .size = size,
                         .local_rank = rank,
                         .local_size = size,
                         .peers = peers,
                         .secret = "gpu-test",
                         .timeout_ms = timeout_ms};
  kolo_status st = kolo_comm_create(&spec, listener, out);
  if (st != KOLO_OK) return st;
  st = kolo_comm_use_cuda(*out, r->device);
  if (st != KOLO_OK) {
    kolo_comm_destroy(*out);
    *out = NULL;
  }
  return st;
}

kolo_status gpu_share_id(const char *dir, int epoch, int rank, int maker,
                         uint8_t id[KOLO_NCCL_ID_BYTES], int timeout_ms) {
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/id.%d", dir, epoch);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  char text[KOLO_NCCL_ID_TEXT_LENGTH + 2];
  if (rank == maker) {
    kolo_status st = kolo_nccl_id_create(id);
    if (st != KOLO_OK) return st;
    if ((st = kolo_nccl_id_encode(id, text, sizeof text)) != KOLO_OK) return st;
    FILE *f = fopen(tmp, "w");
    if (f == NULL) return KOLO_ERR_IO;
    int ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) return KOLO_ERR_IO;
    return KOLO_OK;
  }
  uint64_t deadline = gpu_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      size_t n = fread(text, 1, sizeof text - 1, f);
      fclose(f);
      text[n] = '\0';
      return kolo_nccl_id_decode(text, id); /* strict: the whole file is the id */
    }
    if (gpu_now_ns() > deadline) return KOLO_ERR_TIMEOUT;
    gpu_sleep_ms(10);
  }
}

int gpu_report(int pass, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stdout, "%s %s\n", pass ? "ok" : "not ok", line);
  fflush(stdout);
  return !pass;
}

/* ---- elements ---- */

void gpu_store(kolo_dtype dtype, void *buffer, size_t i, double value) {
  switch (dtype) {
    case KOLO_UINT8:
      ((uint8_t *)buffer)[i] = (uint8_t)(int64_t)value;
      break;
    case KOLO_INT32:
      ((int32_t *)buffer)[i] = (int32_t)value;
      break;
    case KOLO_INT64:
      ((int64_t *)buffer)[i] = (int64_t)value;
      break;
    case KOLO_FLOAT16:
      ((uint16_t *)buffer)[i] = kolo_float_to_half((float)value);
      break;
    case KOLO_BFLOAT16:
      ((uint16_t *)buffer)[i] = kolo_float_to_bfloat16((float)value);
      break;
    case KOLO_FLOAT32:
      ((float *)buffer)[i] = (float)value;
      break;
    case KOLO_FLOAT64:
      ((double *)buffer)[i] = value;
      break;
    default:
      break;
  }
}

double gpu_load(kolo_dtype dtype, const void *buffer, size_t i) {
  switch (dtype) {
    case KOLO_UINT8:
      return ((const uint8_t *)buffer)[i];
    case KOLO_INT32:
      return ((const int32_t *)buffer)[i];
    case KOLO_INT64:
      return (double)((const int64_t *)buffer)[i];
    case KOLO_FLOAT16:
      return kolo_half_to_float(((const uint16_t *)buffer)[i]);
    case KOLO_BFLOAT16:
      return kolo_bfloat16_to_float(((const uint16_t *)buffer)[i]);
    case KOLO_FLOAT32:
      return ((const float *)buffer)[i];
    case KOLO_FLOAT64:
      return ((const double *)buffer)[i];
    default:
      return 0;
  }
}

static int is_float(kolo_dtype t) {
  return t >= KOLO_FLOAT16 && t <= KOLO_FLOAT64;
}

/* A value as the dtype holds it (uint8 wraps -3 to 253). */
static double typed(kolo_dtype dtype, double v) {
  uint8_t tmp[8];
  gpu_store(dtype, tmp, 0, v);
  return gpu_load(dtype, tmp, 0);
}

double gpu_reference(kolo_dtype dtype, kolo_op op, const double *v, int n) {
  int floating = is_float(dtype);
  double acc = typed(dtype, v[0]);
  for (int r = 1; r < n; r++) {
    double x = typed(dtype, v[r]);
    switch (op) {
      case KOLO_SUM:
      case KOLO_AVG:
        acc += x;
        break;
      case KOLO_PROD:
        acc *= x;
        break;
      case KOLO_MIN:
        acc = x < acc ? x : acc;
        break;
      case KOLO_MAX:
        acc = x > acc ? x : acc;
        break;
      default:
        break;
    }
    if (!floating) acc = typed(dtype, acc); /* integers wrap at every step */
  }
  if (op == KOLO_AVG) acc = floating ? acc / n : trunc(acc / n);
  return typed(dtype, acc);
}

int gpu_close(kolo_dtype dtype, double got, double want) {
  /* relative to the inputs' scale (8): NCCL's float AVG scales each input by
   * 1/n before summing, which rounds in the half types */
  double tol = dtype == KOLO_FLOAT16    ? 1e-2
               : dtype == KOLO_BFLOAT16 ? 2e-2
               : dtype == KOLO_FLOAT32  ? 1e-6
               : dtype == KOLO_FLOAT64  ? 1e-12
                                        : 0;
  if (tol == 0) return got == want;
  return fabs(got - want) <= tol * (fabs(want) > 8 ? fabs(want) : 8);
}

double gpu_input(kolo_op op, int rank, size_t i) {
  uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull + (uint64_t)(rank + 1) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 32;
  if (op == KOLO_PROD) {
    static const double choices[4] = {-2, -1, 1, 2};
    return choices[h & 3];
  }
  return (double)(int)(h % 17) - 8;
}
