/* Unit tests for worker/train/data.c and shard.c: IDX (gzip and plain), CSV
 * and LIBSVM files load, damaged files are refused with an error, and the
 * per-epoch shuffle split over n ranks covers every sample exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "worker/train/data.h"
#include "worker/train/shard.h"

typedef struct fixture {
  char dir[256];
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/kolo-train-data-XXXXXX");
  if (!mkdtemp(f->dir)) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
  if (system(cmd) != 0) return -1;
  free(f);
  return 0;
}

static void path_in(const fixture *f, const char *name, char *out, size_t len) {
  snprintf(out, len, "%s/%s", f->dir, name);
}

static void write_bytes(const char *path, const void *data, size_t n, int gz) {
  if (gz) {
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, data, (unsigned)n), (int)n);
    assert_int_equal(gzclose(g), Z_OK);
  } else {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    fclose(fp);
  }
}

/* Writes count images of rows x cols (pixel = (i + j) % 256) and labels i % 10. */
static void write_idx(const fixture *f, const char *prefix, uint32_t count, uint32_t rows,
                      uint32_t cols, int gz) {
  size_t n = 16 + (size_t)count * rows * cols;
  uint8_t *img = malloc(n);
  uint8_t hdr[16] = {0, 0, 8, 3};
  uint32_t dims[3] = {count, rows, cols};
  for (int d = 0; d < 3; d++) {
    for (int b = 0; b < 4; b++) hdr[4 + 4 * d + b] = (uint8_t)(dims[d] >> (24 - 8 * b));
  }
  memcpy(img, hdr, 16);
  for (size_t i = 0; i < (size_t)count * rows * cols; i++) img[16 + i] = (uint8_t)(i % 256);
  uint8_t *lab = malloc(8 + count);
  uint8_t lh[8] = {0,
                   0,
                   8,
                   1,
                   (uint8_t)(count >> 24),
                   (uint8_t)(count >> 16),
                   (uint8_t)(count >> 8),
                   (uint8_t)count};
  memcpy(lab, lh, 8);
  for (uint32_t i = 0; i < count; i++) lab[8 + i] = (uint8_t)(i % 10);
  char p[512], name[128];
  snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", prefix, gz ? ".gz" : "");
  path_in(f, name, p, sizeof p);
  write_bytes(p, img, n, gz);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", prefix, gz ? ".gz" : "");
  path_in(f, name, p, sizeof p);
  write_bytes(p, lab, 8 + count, gz);
  free(img);
  free(lab);
}

static void gzipped_idx_files_load_with_scaled_pixels(void **state) {
  fixture *f = *state;
  write_idx(f, "train", 30, 28, 28, 1);
  kolo_train_dataset *ds = NULL;
  assert_int_equal(kolo_train_data_load_idx_dir(f->dir, "train", &ds), KOLO_OK);
  assert_int_equal(kolo_train_data_count(ds), 30);
  assert_int_equal(kolo_train_data_features(ds), 784);
  assert_int_equal(kolo_train_data_classes(ds), 10);
  size_t h, w, c;
  kolo_train_data_shape(ds, &h, &w, &c);
  assert_int_equal(h, 28);
  assert_int_equal(w, 28);
  assert_int_equal(c, 1);
  float x[2 * 784];
  int y[2];
  size_t idx[2] = {0, 13};
  kolo_train_data_gather(ds, idx, 2, x, y);
  assert_int_equal(y[0], 0);
  assert_int_equal(y[1], 3);
  assert_float_equal(x[1], 1.0f / 255.0f, 1e-7);
  assert_float_equal(x[784 + 0], (float)((13 * 784) % 256) / 255.0f, 1e-6);
  kolo_train_data_destroy(ds);
}

static void plain_idx_files_load_too(void **state) {
  fixture *f = *state;
  write_idx(f, "t10k", 5, 4, 6, 0);
  kolo_train_dataset *ds = NULL;
  assert_int_equal(kolo_train_data_load_idx_dir(f->dir, "t10k", &ds), KOLO_OK);
  assert_int_equal(kolo_train_data_count(ds), 5);
  assert_int_equal(kolo_train_data_features(ds), 24);
  kolo_train_data_destroy(ds);
}

/* Found by fuzz_train_files: an IDX header claiming 2^33 pixels in a file of a few bytes
 * made the loader allocate them all before finding the file short. Now memory follows the
 * bytes actually read: under a 1 GiB address-space limit the load fails as truncated,
 * not as out of memory. (No rlimit under ASan, whose shadow needs the address space.) */
static void an_idx_header_claiming_more_than_the_file_holds_costs_only_the_file(void **state) {
  fixture *f = *state;
  uint8_t images[16 + 8] = {0, 0, 8, 3,    0, 0x20, 0, 0,
                            0, 0, 0, 0x40, 0, 0,    0, 0x40}; /* 2^21 x 64 x 64 */
  uint8_t labels[8 + 2] = {0, 0, 8, 1, 0, 0x20, 0, 0, 1, 2};
  char ip[512], lp[512];
  path_in(f, "huge-images", ip, sizeof ip);
  path_in(f, "huge-labels", lp, sizeof lp);
  write_bytes(ip, images, sizeof images, 0);
  write_bytes(lp, labels, sizeof labels, 0);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
#if !defined(__SANITIZE_ADDRESS__)
    struct rlimit limit = {1u << 30, 1u << 30};
    setrlimit(RLIMIT_AS, &limit);
#endif
    kolo_train_dataset *ds = NULL;
    _exit(kolo_train_data_load_idx(ip, lp, &ds) == KOLO_ERR_PARSE ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void truncated_gzip_is_refused(void **state) {
  fixture *f = *state;
  write_idx(f, "train", 200, 28, 28, 1);
  char p[512];
  path_in(f, "train-images-idx3-ubyte.gz", p, sizeof p);
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(truncate(p, st.st_size / 2), 0);
  kolo_train_dataset *ds = NULL;
  kolo_status rc = kolo_train_data_load_idx_dir(f->dir, "train", &ds);
  assert_int_equal(rc, KOLO_ERR_PARSE);
  assert_null(ds);
}

static void wrong_magic_is_refused(void **state) {
  fixture *f = *state;
  write_idx(f, "train", 10, 28, 28, 1);
  char images[512], labels[512];
  path_in(f, "train-images-idx3-ubyte.gz", images, sizeof images);
  path_in(f, "train-labels-idx1-ubyte.gz", labels, sizeof labels);
  kolo_train_dataset *ds = NULL;
  /* labels passed as images: magic 00000801 where 00000803 is expected */
  assert_int_equal(kolo_train_data_load_idx(labels, images, &ds), KOLO_ERR_PARSE);
  assert_null(ds);
  write_bytes(images, "PK\x03\x04garbage-not-idx", 20, 0);
  assert_int_equal(kolo_train_data_load_idx(images, labels, &ds), KOLO_ERR_PARSE);
}

static void image_and_label_counts_must_agree(void **state) {
  fixture *f = *state;
  write_idx(f, "a", 10, 28, 28, 1);
  write_idx(f, "b", 11, 28, 28, 1);
  char images[512], labels[512];
  path_in(f, "a-images-idx3-ubyte.gz", images, sizeof images);
  path_in(f, "b-labels-idx1-ubyte.gz", labels, sizeof labels);
  kolo_train_dataset *ds = NULL;
  assert_int_equal(kolo_train_data_load_idx(images, labels, &ds), KOLO_ERR_PARSE);
}

static void missing_files_report_not_found(void **state) {
  fixture *f = *state;
  kolo_train_dataset *ds = NULL;
  assert_int_equal(kolo_train_data_load_idx_dir(f->dir, "nothing", &ds), KOLO_ERR_NOT_FOUND);
  char p[512];
  path_in(f, "none.csv", p, sizeof p);
  assert_int_equal(kolo_train_data_load_csv(p, &ds), KOLO_ERR_NOT_FOUND);
}

static void csv_with_header_loads(void **state) {
  fixture *f = *state;
  char p[512];
  path_in(f, "d.csv", p, sizeof p);
  const char *text = "label,a,b,c\n0,1.5,2,3\n2,-1,0.25,1e-3\r\n\n1,0,0,0\n";
  write_bytes(p, text, strlen(text), 0);
  kolo_train_dataset *ds = NULL;
  assert_int_equal(kolo_train_data_load_csv(p, &ds), KOLO_OK);
  assert_int_equal(kolo_train_data_count(ds), 3);
  assert_int_equal(kolo_train_data_features(ds), 3);
  assert_int_equal(kolo_train_data_classes(ds), 3);
  float x[3];
  int y;
  size_t i = 1;
  kolo_train_data_gather(ds, &i, 1, x, &y);
  assert_int_equal(y, 2);
  assert_float_equal(x[1], 0.25f, 1e-7);
  kolo_train_data_destroy(ds);
}

static void csv_with_a_short_row_is_refused(void **state) {
  fixture *f = *state;
  char p[512];
  path_in(f, "bad.csv", p, sizeof p);
  kolo_train_dataset *ds = NULL;
  const char *short_row = "0,1,2\n1,3\n";
  write_bytes(p, short_row, strlen(short_row), 0);
  assert_int_equal(kolo_train_data_load_csv(p, &ds), KOLO_ERR_PARSE);
  const char *bad_label = "0,1,2\n-3,1,2\n";
  write_bytes(p, bad_label, strlen(bad_label), 0);
  assert_int_equal(kolo_train_data_load_csv(p, &ds), KOLO_ERR_PARSE);
  const char *text = "0,1,2\n1,x,2\n";
  write_bytes(p, text, strlen(text), 0);
  assert_int_equal(kolo_train_data_load_csv(p, &ds), KOLO_ERR_PARSE);
  assert_null(ds);
}

static void libsvm_loads_sparse_rows_and_maps_minus_one_to_class_zero(void **state) {
  fixture *f = *state;
  char p[512];
  path_in(f, "d.svm", p, sizeof p);
  const char *text = "+1 1:0.5 4:2\n-1 2:1 # comment\n+1\n";
  write_bytes(p, text, strlen(text), 0);
  kolo_train_dataset *ds = NULL;
  assert_int_equal(kolo_train_data_load_libsvm(p, 0, &ds), KOLO_OK);
  assert_int_equal(kolo_train_data_count(ds), 3);
  assert_int_equal(kolo_train_data_features(ds), 4);
  assert_int_equal(kolo_train_data_classes(ds), 2);
  float x[3 * 4];
  int y[3];
  size_t idx[3] = {0, 1, 2};
  kolo_train_data_gather(ds, idx, 3, x, y);
  assert_int_equal(y[0], 1);
  assert_int_equal(y[1], 0);
  assert_float_equal(x[0], 0.5f, 0);
  assert_float_equal(x[3], 2.0f, 0);
  assert_float_equal(x[4 + 1], 1.0f, 0);
  assert_float_equal(x[8 + 3], 0.0f, 0);
  kolo_train_data_destroy(ds);
  /* a test file wider than the training set is refused */
  assert_int_equal(kolo_train_data_load_libsvm(p, 3, &ds), KOLO_ERR_PARSE);
}

static void libsvm_with_decreasing_indices_is_refused(void **state) {
  fixture *f = *state;
  char p[512];
  path_in(f, "bad.svm", p, sizeof p);
  const char *text = "1 3:1 2:1\n";
  write_bytes(p, text, strlen(text), 0);
  kolo_train_dataset *ds = NULL;
  assert_int_equal(kolo_train_data_load_libsvm(p, 0, &ds), KOLO_ERR_PARSE);
  const char *zero = "1 0:1\n";
  write_bytes(p, zero, strlen(zero), 0);
  assert_int_equal(kolo_train_data_load_libsvm(p, 0, &ds), KOLO_ERR_PARSE);
  assert_null(ds);
}

/* Rows are made dense, so one huge index would cost its width per row: the fuzzer's
 * "1 4444441:0" took 17 MB per row. Past 65536 features the file is refused. */
static void libsvm_wider_than_the_dense_limit_is_refused(void **state) {
  fixture *f = *state;
  char p[512];
  path_in(f, "wide.svm", p, sizeof p);
  const char *wide = "1 1:1 4444441:0\n";
  write_bytes(p, wide, strlen(wide), 0);
  kolo_train_dataset *ds = NULL;
  assert_int_equal(kolo_train_data_load_libsvm(p, 0, &ds), KOLO_ERR_PARSE);
  assert_null(ds);
  const char *widest = "1 1:1 65536:2\n";
  write_bytes(p, widest, strlen(widest), 0);
  assert_int_equal(kolo_train_data_load_libsvm(p, 0, &ds), KOLO_OK);
  kolo_train_data_destroy(ds);
}

static void synthetic_set_is_a_function_of_the_seed(void **state) {
  (void)state;
  kolo_train_dataset *a, *b, *c, *d;
  assert_int_equal(kolo_train_data_synthetic(7, 50, 10, &a, &b), KOLO_OK);
  assert_int_equal(kolo_train_data_synthetic(7, 50, 10, &c, &d), KOLO_OK);
  float xa[784], xc[784];
  int ya, yc;
  size_t i = 17;
  kolo_train_data_gather(a, &i, 1, xa, &ya);
  kolo_train_data_gather(c, &i, 1, xc, &yc);
  assert_int_equal(ya, yc);
  assert_memory_equal(xa, xc, sizeof xa);
  assert_int_equal(kolo_train_data_classes(a), 10);
  kolo_train_data_destroy(c);
  kolo_train_data_destroy(d);
  assert_int_equal(kolo_train_data_synthetic(8, 50, 10, &c, &d), KOLO_OK);
  kolo_train_data_gather(c, &i, 1, xc, &yc);
  assert_memory_not_equal(xa, xc, sizeof xa);
  kolo_train_data_destroy(a);
  kolo_train_data_destroy(b);
  kolo_train_data_destroy(c);
  kolo_train_data_destroy(d);
}

static void split_holds_out_the_last_samples(void **state) {
  (void)state;
  kolo_train_dataset *a, *b, *tr, *te;
  assert_int_equal(kolo_train_data_synthetic(3, 20, 5, &a, &b), KOLO_OK);
  assert_int_equal(kolo_train_data_split(a, 4, &tr, &te), KOLO_OK);
  assert_int_equal(kolo_train_data_count(tr), 16);
  assert_int_equal(kolo_train_data_count(te), 4);
  float x1[784], x2[784];
  int y1, y2;
  size_t i = 17, j = 1;
  kolo_train_data_gather(a, &i, 1, x1, &y1);
  kolo_train_data_gather(te, &j, 1, x2, &y2);
  assert_memory_equal(x1, x2, sizeof x1);
  assert_int_equal(kolo_train_data_split(a, 20, &tr, &te) == KOLO_OK, 0);
  kolo_train_data_destroy(tr);
  kolo_train_data_destroy(te);
  kolo_train_data_destroy(a);
  kolo_train_data_destroy(b);
}

/* ---- shuffling and sharding ---- */

static void shuffle_is_a_permutation_shared_by_seed_and_epoch(void **state) {
  (void)state;
  enum { N = 1000 };
  size_t *p = malloc(N * sizeof *p), *q = malloc(N * sizeof *q);
  int seen[N] = {0};
  kolo_train_shuffle(5, 2, p, N);
  for (size_t i = 0; i < N; i++) seen[p[i]]++;
  for (size_t i = 0; i < N; i++) assert_int_equal(seen[i], 1);
  kolo_train_shuffle(5, 2, q, N);
  assert_memory_equal(p, q, N * sizeof *p);
  kolo_train_shuffle(5, 3, q, N);
  assert_memory_not_equal(p, q, N * sizeof *p);
  size_t fixed = 0;
  for (size_t i = 0; i < N; i++) fixed += p[i] == i;
  assert_true(fixed < 20); /* actually shuffled */
  free(p);
  free(q);
}

static void shards_cover_every_sample_exactly_once_per_epoch(void **state) {
  (void)state;
  enum { N = 1003 };
  size_t *perm = malloc(N * sizeof *perm), out[64];
  kolo_train_shuffle(9, 0, perm, N);
  for (int size = 1; size <= 5; size++) {
    for (size_t batch = 1; batch <= 9; batch += 4) {
      int seen[N] = {0};
      size_t global = batch * (size_t)size;
      for (size_t offset = 0; offset < N; offset += global) {
        for (int rank = 0; rank < size; rank++) {
          size_t got = kolo_train_shard(perm, N, offset, global, rank, size, out);
          assert_true(got <= batch);
          for (size_t i = 0; i < got; i++) seen[out[i]]++;
        }
      }
      for (size_t i = 0; i < N; i++) {
        if (seen[i] != 1)
          fail_msg("size %d batch %zu: sample %zu seen %d times", size, batch, i, seen[i]);
      }
    }
  }
  free(perm);
}

static void two_shards_of_b_equal_one_batch_of_2b(void **state) {
  (void)state;
  enum { N = 100 };
  size_t perm[N], one[8], r0[4], r1[4];
  kolo_train_shuffle(1, 0, perm, N);
  for (size_t offset = 0; offset + 8 <= N; offset += 8) {
    assert_int_equal(kolo_train_shard(perm, N, offset, 8, 0, 1, one), 8);
    assert_int_equal(kolo_train_shard(perm, N, offset, 8, 0, 2, r0), 4);
    assert_int_equal(kolo_train_shard(perm, N, offset, 8, 1, 2, r1), 4);
    int seen[N] = {0};
    for (int i = 0; i < 4; i++) seen[r0[i]]++, seen[r1[i]]++;
    for (int i = 0; i < 8; i++) assert_int_equal(seen[one[i]], 1);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(gzipped_idx_files_load_with_scaled_pixels, setup, teardown),
      cmocka_unit_test_setup_teardown(plain_idx_files_load_too, setup, teardown),
      cmocka_unit_test_setup_teardown(
          an_idx_header_claiming_more_than_the_file_holds_costs_only_the_file, setup, teardown),
      cmocka_unit_test_setup_teardown(truncated_gzip_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(wrong_magic_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(image_and_label_counts_must_agree, setup, teardown),
      cmocka_unit_test_setup_teardown(missing_files_report_not_found, setup, teardown),
      cmocka_unit_test_setup_teardown(csv_with_header_loads, setup, teardown),
      cmocka_unit_test_setup_teardown(csv_with_a_short_row_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(libsvm_loads_sparse_rows_and_maps_minus_one_to_class_zero,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(libsvm_with_decreasing_indices_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(libsvm_wider_than_the_dense_limit_is_refused, setup,
                                      teardown),
      cmocka_unit_test(synthetic_set_is_a_function_of_the_seed),
      cmocka_unit_test(split_holds_out_the_last_samples),
      cmocka_unit_test(shuffle_is_a_permutation_shared_by_seed_and_epoch),
      cmocka_unit_test(shards_cover_every_sample_exactly_once_per_epoch),
      cmocka_unit_test(two_shards_of_b_equal_one_batch_of_2b),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
