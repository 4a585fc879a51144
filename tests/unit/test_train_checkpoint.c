/* Unit tests for worker/train/state.c and checkpoint.c: a checkpoint restores
 * the exact state; truncated, bit-flipped or foreign checkpoints are refused
 * without touching the state; restore picks the newest valid one; old ones are pruned. */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "worker/train/checkpoint.h"
#include "worker/train/state.h"

typedef struct fixture {
  char dir[256];
  kolo_train_state *state;
} fixture;

enum { PARAMS = 1000, OPTIM = 2000 };

/* Fills the state with values derived from tag (so two fills are distinguishable). */
static void fill(kolo_train_state *s, float tag, uint64_t step) {
  float *p = kolo_train_state_params(s), *o = kolo_train_state_optim(s);
  for (int i = 0; i < PARAMS; i++) p[i] = tag + (float)i * 0.5f;
  for (int i = 0; i < OPTIM; i++) o[i] = -tag - (float)i;
  kolo_train_state_header *h = kolo_train_state_header_of(s);
  h->step = step;
  h->epoch = step / 7;
  h->epoch_offset = step * 13;
  h->samples = step * 64;
  h->seed = 99;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/kolo-train-ckpt-XXXXXX");
  if (!mkdtemp(f->dir)) return -1;
  if (kolo_train_state_create("mlp:4-3", 1, PARAMS, OPTIM, &f->state) != KOLO_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
  if (system(cmd) != 0) return -1;
  kolo_train_state_destroy(f->state);
  free(f);
  return 0;
}

static size_t count_files(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  size_t n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) n += strstr(e->d_name, needle) != NULL;
  if (d) closedir(d);
  return n;
}

static void checkpoint_round_trip_restores_the_exact_state(void **state) {
  fixture *f = *state;
  fill(f->state, 1.0f, 42);
  char path[1024];
  assert_int_equal(kolo_train_checkpoint_write(f->dir, f->state, path, sizeof path), KOLO_OK);
  assert_non_null(strstr(path, "ckpt-000000000042.kolo"));
  assert_int_equal(count_files(f->dir, ".tmp"), 0);
  size_t size = kolo_train_state_size(f->state);
  void *saved = malloc(size);
  memcpy(saved, kolo_train_state_data(f->state), size);
  fill(f->state, 5.0f, 7);
  assert_int_equal(kolo_train_checkpoint_read(path, f->state), KOLO_OK);
  assert_memory_equal(kolo_train_state_data(f->state), saved, size);
  assert_int_equal(kolo_train_state_header_of(f->state)->epoch_offset, 42 * 13);
  free(saved);
}

/* Writes a checkpoint of tag/step and returns its path in out. */
static void write_one(fixture *f, float tag, uint64_t step, char *out, size_t len) {
  fill(f->state, tag, step);
  assert_int_equal(kolo_train_checkpoint_write(f->dir, f->state, out, len), KOLO_OK);
}

static void truncated_checkpoint_is_refused_and_state_untouched(void **state) {
  fixture *f = *state;
  char path[1024];
  write_one(f, 1.0f, 10, path, sizeof path);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  fill(f->state, 3.0f, 3);
  size_t size = kolo_train_state_size(f->state);
  void *before = malloc(size);
  memcpy(before, kolo_train_state_data(f->state), size);
  off_t cuts[] = {st.st_size - 1, st.st_size / 2, 31, 0};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    assert_int_equal(truncate(path, cuts[i]), 0);
    assert_int_equal(kolo_train_checkpoint_read(path, f->state), KOLO_ERR_CORRUPT);
    assert_memory_equal(kolo_train_state_data(f->state), before, size);
  }
  free(before);
}

/* Flips one bit at offset in the file. */
static void flip_bit(const char *path, long offset) {
  FILE *fp = fopen(path, "r+b");
  assert_non_null(fp);
  assert_int_equal(fseek(fp, offset, SEEK_SET), 0);
  int c = fgetc(fp);
  assert_int_equal(fseek(fp, offset, SEEK_SET), 0);
  fputc(c ^ 0x10, fp);
  fclose(fp);
}

static void corrupted_checkpoint_is_refused(void **state) {
  fixture *f = *state;
  char path[1024];
  long offsets[] = {3, 20, 40, 32 + 200 * 4 + 1, 32 + 3000 * 4};
  for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
    write_one(f, 1.0f, 10, path, sizeof path);
    flip_bit(path, offsets[i]);
    kolo_status rc = kolo_train_checkpoint_read(path, f->state);
    if (rc == KOLO_OK) fail_msg("bit flip at %ld was not detected", offsets[i]);
  }
  /* trailing garbage is refused too */
  write_one(f, 1.0f, 10, path, sizeof path);
  FILE *fp = fopen(path, "ab");
  fputs("junk", fp);
  fclose(fp);
  assert_int_equal(kolo_train_checkpoint_read(path, f->state), KOLO_ERR_CORRUPT);
}

static void checkpoint_of_another_model_is_refused(void **state) {
  fixture *f = *state;
  char path[1024];
  write_one(f, 1.0f, 10, path, sizeof path);
  kolo_train_state *other = NULL;
  assert_int_equal(kolo_train_state_create("mlp:4-5-3", 1, PARAMS, OPTIM, &other), KOLO_OK);
  assert_int_equal(kolo_train_checkpoint_read(path, other), KOLO_ERR_INVALID_ARG);
  kolo_train_state_destroy(other);
  assert_int_equal(kolo_train_state_create("mlp:4-3", 1, PARAMS + 1, OPTIM, &other), KOLO_OK);
  assert_int_equal(kolo_train_checkpoint_read(path, other), KOLO_ERR_INVALID_ARG);
  kolo_train_state_destroy(other);
}

static void restore_picks_the_newest_valid_checkpoint(void **state) {
  fixture *f = *state;
  char p10[1024], p20[1024], p30[1024], got[1024];
  write_one(f, 10.0f, 10, p10, sizeof p10);
  write_one(f, 20.0f, 20, p20, sizeof p20);
  write_one(f, 30.0f, 30, p30, sizeof p30);
  fill(f->state, 0.0f, 0);
  assert_int_equal(kolo_train_checkpoint_restore_latest(f->dir, f->state, got, sizeof got),
                   KOLO_OK);
  assert_string_equal(got, p30);
  assert_int_equal(kolo_train_state_header_of(f->state)->step, 30);
  /* damage the newest: the one before it is used */
  flip_bit(p30, 100);
  struct stat st;
  assert_int_equal(stat(p20, &st), 0);
  assert_int_equal(truncate(p20, st.st_size - 4), 0);
  fill(f->state, 0.0f, 0);
  assert_int_equal(kolo_train_checkpoint_restore_latest(f->dir, f->state, got, sizeof got),
                   KOLO_OK);
  assert_string_equal(got, p10);
  assert_int_equal(kolo_train_state_header_of(f->state)->step, 10);
  assert_float_equal(kolo_train_state_params(f->state)[0], 10.0f, 0);
  /* all damaged: nothing is loaded */
  flip_bit(p10, 64);
  fill(f->state, 0.0f, 0);
  assert_int_equal(kolo_train_checkpoint_restore_latest(f->dir, f->state, NULL, 0),
                   KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_train_state_header_of(f->state)->step, 0);
}

static void empty_or_missing_directory_has_no_checkpoint(void **state) {
  fixture *f = *state;
  assert_int_equal(kolo_train_checkpoint_restore_latest(f->dir, f->state, NULL, 0),
                   KOLO_ERR_NOT_FOUND);
  char missing[512];
  snprintf(missing, sizeof missing, "%s/none", f->dir);
  assert_int_equal(kolo_train_checkpoint_restore_latest(missing, f->state, NULL, 0),
                   KOLO_ERR_NOT_FOUND);
}

static void only_the_newest_checkpoints_are_kept(void **state) {
  fixture *f = *state;
  char p[1024];
  for (uint64_t step = 1; step <= 6; step++) write_one(f, 1.0f, step, p, sizeof p);
  assert_int_equal(count_files(f->dir, ".kolo"), KOLO_TRAIN_CHECKPOINT_KEEP);
  assert_int_equal(count_files(f->dir, "ckpt-000000000006"), 1);
  assert_int_equal(count_files(f->dir, "ckpt-000000000001"), 0);
}

/* A temp file of pid (with mtime age_s seconds ago) in f->dir. */
static void temp_file(fixture *f, long pid, int age_s) {
  char p[1024];
  snprintf(p, sizeof p, "%s/ckpt-000000000009.kolo.tmp.%ld", f->dir, pid);
  FILE *out = fopen(p, "w");
  assert_non_null(out);
  fputs("half a checkpoint", out);
  fclose(out);
  struct timespec times[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
  assert_int_equal(utimensat(AT_FDCWD, p, times, 0), 0);
}

static void a_killed_writers_temp_files_are_removed_at_start(void **state) {
  fixture *f = *state;
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, NULL, 0);
  temp_file(f, (long)gone, 3600);        /* a killed writer's: removed */
  temp_file(f, (long)getpid(), 3600);    /* a live writer's: kept */
  temp_file(f, (long)gone + 1000000, 0); /* just written (another host's?): kept */
  assert_int_equal(count_files(f->dir, ".tmp."), 3);
  assert_int_equal(kolo_train_checkpoint_restore_latest(f->dir, f->state, NULL, 0),
                   KOLO_ERR_NOT_FOUND);
  assert_int_equal(count_files(f->dir, ".tmp."), 2);
  char gone_name[64];
  snprintf(gone_name, sizeof gone_name, ".tmp.%ld", (long)gone);
  assert_int_equal(count_files(f->dir, gone_name), 0);
}

static void state_load_refuses_a_wrong_size(void **state) {
  fixture *f = *state;
  size_t size = kolo_train_state_size(f->state);
  void *copy = malloc(size);
  memcpy(copy, kolo_train_state_data(f->state), size);
  assert_int_equal(kolo_train_state_load(f->state, copy, size - 1), KOLO_ERR_CORRUPT);
  assert_int_equal(kolo_train_state_load(f->state, copy, 10), KOLO_ERR_CORRUPT);
  assert_int_equal(kolo_train_state_load(f->state, copy, size), KOLO_OK);
  free(copy);
}

static void the_state_checksum_tells_every_byte_apart(void **state) {
  fixture *f = *state;
  fill(f->state, 1.5f, 7);
  uint32_t sum = kolo_train_state_checksum(f->state);
  assert_int_equal(kolo_train_state_checksum(f->state), sum);
  unsigned char *bytes = kolo_train_state_data(f->state);
  size_t size = kolo_train_state_size(f->state);
  size_t offsets[] = {0, 100, size / 2, size - 9, size - 1};
  for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
    bytes[offsets[i]] ^= 0x10;
    assert_int_not_equal(kolo_train_state_checksum(f->state), sum);
    bytes[offsets[i]] ^= 0x10;
    assert_int_equal(kolo_train_state_checksum(f->state), sum);
  }
  fill(f->state, 1.5f, 8); /* another step */
  assert_int_not_equal(kolo_train_state_checksum(f->state), sum);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(checkpoint_round_trip_restores_the_exact_state, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(truncated_checkpoint_is_refused_and_state_untouched, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(corrupted_checkpoint_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(checkpoint_of_another_model_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(restore_picks_the_newest_valid_checkpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(empty_or_missing_directory_has_no_checkpoint, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(only_the_newest_checkpoints_are_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(a_killed_writers_temp_files_are_removed_at_start, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(state_load_refuses_a_wrong_size, setup, teardown),
      cmocka_unit_test_setup_teardown(the_state_checksum_tells_every_byte_apart, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
