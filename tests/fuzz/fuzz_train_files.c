/* libFuzzer target: the files kolo-train reads (worker/train/data.c, checkpoint.c): CSV,
 * LIBSVM, IDX image + label pairs (plain or gzip) and checkpoints. Input: one byte
 * choosing the reader (for IDX a second one splitting the rest into the two files), then
 * the file's bytes, handed over as /proc/self/fd/N of a memfd. Properties: no crash, leak
 * or hang; a dataset that loads has samples of one width; a rejected checkpoint leaves
 * the state untouched. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/train/checkpoint.h"
#include "worker/train/data.h"
#include "worker/train/state.h"

/* A memfd holding bytes; its path goes to path. */
static int as_file(const uint8_t *bytes, size_t len, char *path, size_t path_len) {
  int fd = memfd_create("kolo-fuzz", 0);
  if (fd < 0) abort();
  if (len && write(fd, bytes, len) != (ssize_t)len) abort();
  snprintf(path, path_len, "/proc/self/fd/%d", fd);
  return fd;
}

static void check_dataset(kolo_status rc, kolo_train_dataset *ds) {
  if (rc != KOLO_OK) return;
  if (kolo_train_data_count(ds) > 0 && kolo_train_data_features(ds) == 0) abort();
  kolo_train_data_destroy(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  char a[64], b[64];
  kolo_train_dataset *ds = NULL;
  const uint8_t *body = data + 2;
  size_t len = size - 2;
  switch (data[0] % 4) {
    case 0: {
      int fd = as_file(body, len, a, sizeof a);
      check_dataset(kolo_train_data_load_csv(a, &ds), ds);
      close(fd);
      break;
    }
    case 1: {
      int fd = as_file(body, len, a, sizeof a);
      check_dataset(kolo_train_data_load_libsvm(a, data[1] % 2 ? 0 : 16, &ds), ds);
      close(fd);
      break;
    }
    case 2: {
      size_t cut = len ? (size_t)data[1] * len / 255 : 0;
      int fa = as_file(body, cut, a, sizeof a), fb = as_file(body + cut, len - cut, b, sizeof b);
      check_dataset(kolo_train_data_load_idx(a, b, &ds), ds);
      close(fa);
      close(fb);
      break;
    }
    default: {
      kolo_train_state *state = NULL;
      if (kolo_train_state_create("mlp:16-4", 0, 8, 8, &state) != KOLO_OK) abort();
      void *before = malloc(kolo_train_state_size(state));
      memcpy(before, kolo_train_state_data(state), kolo_train_state_size(state));
      int fd = as_file(body, len, a, sizeof a);
      if (kolo_train_checkpoint_read(a, state) != KOLO_OK &&
          memcmp(before, kolo_train_state_data(state), kolo_train_state_size(state)) != 0)
        abort();
      close(fd);
      free(before);
      kolo_train_state_destroy(state);
      break;
    }
  }
  return 0;
}
