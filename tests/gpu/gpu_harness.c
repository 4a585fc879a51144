/* Process, id-file and conversion helpers for the GPU test programs (see
 * gpu_harness.h). Plain POSIX; CUDA is touched only inside rank processes. */
#include "gpu_harness.h"

#include <errno.h>
#include <fcntl.h>
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

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int gpu_count_in_child(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    int n = 0;
    char message[256];
    kolo_nccl_versions(message, sizeof message);
    printf("# %s\n", message);
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

int gpu_run_ranks(int size, gpu_rank_fn fn, void *arg, int timeout_s, int expect_killed) {
  char dir[] = "/tmp/kolo-gpu-XXXXXX";
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return size;
  }
  pid_t pids[256];
  int done[256] = {0};
  if (size > 256) size = 256;
  fflush(stdout);
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      setvbuf(stdout, NULL, _IOLBF, 0); /* one line per write: lines from ranks don't mix */
      int rc = fn(r, size, dir, arg);
      fflush(stdout);
      _exit(rc);
    }
    if (pids[r] < 0) {
      perror("fork");
      for (int k = 0; k < r; k++) kill(pids[k], SIGKILL);
      size = r;
      break;
    }
  }
  int failed = 0, left = size;
  uint64_t deadline = gpu_now_ns() + (uint64_t)timeout_s * 1000000000ull;
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      if (gpu_now_ns() > deadline) {
        for (int r = 0; r < size; r++) {
          if (!done[r]) {
            kill(pids[r], SIGKILL);
            (void)waitpid(pids[r], NULL, 0);
            done[r] = 1;
            left--;
            failed++;
            gpu_report(0, "rank %d finished within %d s (killed)", r, timeout_s);
          }
        }
        break;
      }
      sleep_ms(20);
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
  /* Remove id files and the folder. */
  for (int e = 0; e < 16; e++) {
    char path[sizeof dir + 32];
    snprintf(path, sizeof path, "%s/id.%d", dir, e);
    unlink(path);
  }
  rmdir(dir);
  return failed;
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
    sleep_ms(10);
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

/* float <-> binary16 / bfloat16, round to nearest even (enough for test data). */
static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
  return (uint16_t)half;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = ldexpf((float)mant, -24);
    return sign ? -f : f;
  }
  uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                         : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

void gpu_store(kolo_dtype dtype, void *buffer, size_t i, double value) {
  switch (dtype) {
    case KOLO_UINT8: ((uint8_t *)buffer)[i] = (uint8_t)(int64_t)value; break;
    case KOLO_INT32: ((int32_t *)buffer)[i] = (int32_t)value; break;
    case KOLO_INT64: ((int64_t *)buffer)[i] = (int64_t)value; break;
    case KOLO_FLOAT16: ((uint16_t *)buffer)[i] = float_to_half((float)value); break;
    case KOLO_BFLOAT16: ((uint16_t *)buffer)[i] = float_to_bf16((float)value); break;
    case KOLO_FLOAT32: ((float *)buffer)[i] = (float)value; break;
    case KOLO_FLOAT64: ((double *)buffer)[i] = value; break;
    default: break;
  }
}

double gpu_load(kolo_dtype dtype, const void *buffer, size_t i) {
  switch (dtype) {
    case KOLO_UINT8: return ((const uint8_t *)buffer)[i];
    case KOLO_INT32: return ((const int32_t *)buffer)[i];
    case KOLO_INT64: return (double)((const int64_t *)buffer)[i];
    case KOLO_FLOAT16: return half_to_float(((const uint16_t *)buffer)[i]);
    case KOLO_BFLOAT16: return bf16_to_float(((const uint16_t *)buffer)[i]);
    case KOLO_FLOAT32: return ((const float *)buffer)[i];
    case KOLO_FLOAT64: return ((const double *)buffer)[i];
    default: return 0;
  }
}

double gpu_tolerance(kolo_dtype dtype) {
  switch (dtype) {
    case KOLO_FLOAT16: return 1e-2;
    case KOLO_BFLOAT16: return 2e-2;
    case KOLO_FLOAT32: return 1e-5;
    case KOLO_FLOAT64: return 1e-12;
    default: return 0;
  }
}
