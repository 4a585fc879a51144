/* Unit tests of the pure logic behind kolo-train's modes: the flags (values,
 * defaults per mode, a setting of another mode refused with both named), the
 * outer optimizer step against torch.optim.SGD's definition (heavy ball and
 * Nesterov, computed here in double), the int8 encoding's error bound, the
 * training state's outer section (and a restore across modes refused), the
 * schedule's fingerprint of the mode's settings, and a single-process
 * LOCAL_SGD / DILOCO run (no communicator) against the same rule by hand. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "worker/train/flags.h"
#include "worker/train/outer.h"
#include "worker/train/schedule.h"
#include "worker/train/state.h"
#include "worker/train/trainer.h"

/* Parses a NULL-terminated flag list; returns the parser's result. */
static int parse(kolo_train_config *c, kolo_train_flag_error *e, ...) {
  char *argv[32] = {"kolo-train"};
  int argc = 1;
  va_list ap;
  va_start(ap, e);
  for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;) argv[argc++] = a;
  va_end(ap);
  kolo_train_config_defaults(c);
  uint64_t threads = 1;
  return kolo_train_flags_parse(argc, argv, c, &threads, e);
}

static void every_mode_parses_with_its_defaults(void **state) {
  (void)state;
  kolo_train_config c;
  kolo_train_flag_error e;
  assert_int_equal(parse(&c, &e, "--mode", "diloco", NULL), 0);
  assert_int_equal(c.mode, KOLO_TRAIN_DILOCO);
  assert_true(c.outer_lr == 0.7f && c.outer_momentum == 0.9f && c.nesterov == 1);
  assert_int_equal(c.fragments, 1);
  assert_int_equal(c.compression, KOLO_TRAIN_COMPRESS_NONE);
  assert_int_equal(parse(&c, &e, "--mode=LOCAL_SGD", "--average-every", "4", "--compression",
                         "int8", "--fragments", "2", NULL),
                   0);
  assert_int_equal(c.mode, KOLO_TRAIN_LOCAL_SGD);
  assert_true(c.outer_lr == 1.0f && c.outer_momentum == 0.0f && c.nesterov == 0);
  assert_int_equal(c.average_every, 4);
  assert_int_equal(c.compression, KOLO_TRAIN_COMPRESS_INT8);
  assert_int_equal(c.fragments, 2);
  assert_int_equal(parse(&c, &e, "--mode", "async", "--max-staleness", "3", NULL), 0);
  assert_int_equal(c.max_staleness, 3);
  assert_int_equal(parse(&c, &e, "--mode", "diloco", "--outer-lr", "0.5", "--outer-momentum", "0",
                         "--nesterov=0", NULL),
                   0);
  assert_true(c.outer_lr == 0.5f && c.outer_momentum == 0.0f && c.nesterov == 0);
  assert_int_equal(parse(&c, &e, NULL), 0);
  assert_int_equal(c.mode, KOLO_TRAIN_SYNC);
  assert_string_equal(kolo_train_mode_name(KOLO_TRAIN_LOCAL_SGD), "local_sgd");
}

/* One bad command line: the parser fails with a message containing want. */
static void expect_error(const char *want, const char *a, const char *b, const char *c2,
                         const char *d) {
  kolo_train_config c;
  kolo_train_flag_error e;
  int rc = parse(&c, &e, a, b, c2, d, NULL);
  printf("%s %s %s %s -> %s\n", a, b ? b : "", c2 ? c2 : "", d ? d : "", e.message);
  assert_int_equal(rc, -1);
  assert_non_null(strstr(e.message, want));
}

static void bad_values_and_settings_of_another_mode_are_refused_by_name(void **state) {
  (void)state;
  expect_error("--mode: 'fast' (want sync, async, local_sgd or diloco)", "--mode", "fast", NULL,
               NULL);
  expect_error("--max-staleness must be 1..1000", "--mode", "async", "--max-staleness", "0");
  expect_error("--outer-momentum must be in [0, 1)", "--mode", "diloco", "--outer-momentum", "1");
  expect_error("--outer-lr must be in (0, 100]", "--mode", "diloco", "--outer-lr", "101");
  expect_error("--compression: 'int4' (want none, fp16 or int8)", "--mode", "diloco",
               "--compression", "int4");
  expect_error("--fragments must be 1..1024 and at most --average-every (2)", "--mode=diloco",
               "--average-every=2", "--fragments=3", NULL);
  expect_error("--max-staleness: only for --mode async, not diloco", "--mode", "diloco",
               "--max-staleness", "2");
  expect_error("--outer-lr: only for --mode diloco, not local_sgd (outer lr 1, momentum 0)",
               "--mode", "local_sgd", "--outer-lr", "0.5");
  expect_error("--compression: only for --mode local_sgd or diloco, not async", "--mode", "async",
               "--compression", "fp16");
  expect_error("--average-every: only for --mode async, local_sgd or diloco, not sync", "--mode",
               "sync", "--average-every", "4");
  expect_error("--nesterov: only for --mode diloco, not sync", "--nesterov", "--mode", "sync",
               NULL);
  /* without --mode (the environment may name one) the parser leaves the check to
   * kolo_train_mode_resolve, which main.c calls: the default mode is SYNC */
  kolo_train_config c;
  kolo_train_flag_error e;
  assert_int_equal(parse(&c, &e, "--outer-lr", "0.5", NULL), 0);
  char why[256];
  assert_int_equal(kolo_train_mode_resolve(&c, why, sizeof why), -1);
  assert_non_null(strstr(why, "--outer-lr: only for --mode diloco, not sync"));
}

/* torch.optim.SGD(lr, momentum=mu, nesterov) on the pseudo-gradient, in double. */
static void reference_outer(double *p, double *m, const double *g, size_t n, double lr, double mu,
                            int nesterov) {
  for (size_t i = 0; i < n; i++) {
    m[i] = mu * m[i] + g[i];
    double d = nesterov ? g[i] + mu * m[i] : m[i];
    p[i] -= lr * d;
  }
}

static void the_outer_step_is_torch_sgd_on_the_pseudo_gradient(void **state) {
  (void)state;
  enum { N = 7, ROUNDS = 4 };
  for (int nesterov = 0; nesterov <= 1; nesterov++) {
    float params[N], start[N], momentum[N] = {0}, grad[N];
    double ref[N], ref_m[N] = {0}, ref_g[N];
    for (size_t i = 0; i < N; i++) start[i] = params[i] = (float)(ref[i] = 0.1 * (double)i - 0.3);
    for (int r = 0; r < ROUNDS; r++) {
      for (size_t i = 0; i < N; i++) { /* the replicas' average moved by a known amount */
        double avg = ref[i] - 0.01 * (double)(i + 1) * (r % 2 ? -1.0 : 2.0);
        ref_g[i] = ref[i] - avg;
        grad[i] = start[i] - (float)avg;
      }
      kolo_train_outer_step(params, start, momentum, grad, N, 0.7f, 0.9f, nesterov);
      reference_outer(ref, ref_m, ref_g, N, 0.7, 0.9, nesterov);
      for (size_t i = 0; i < N; i++) {
        assert_true(fabs((double)params[i] - ref[i]) < 1e-5);
        assert_true(params[i] == start[i]); /* the next round starts there */
      }
    }
  }
  /* lr 1, momentum 0: the new parameters are the average itself (local SGD) */
  float p[3] = {5, 6, 7}, s[3] = {1, 2, 3}, m[3] = {0}, g[3];
  const float avg[3] = {0.5f, 2.5f, -1.0f};
  for (int i = 0; i < 3; i++) g[i] = s[i] - avg[i];
  kolo_train_outer_step(p, s, m, g, 3, 1.0f, 0.0f, 1);
  assert_memory_equal(p, avg, sizeof avg);
}

static void int8_keeps_every_value_within_half_its_chunk_scale(void **state) {
  (void)state;
  enum { N = 3 * KOLO_TRAIN_INT8_CHUNK + 17 };
  float *x = malloc(N * sizeof *x), *back = calloc(N, sizeof *back);
  for (size_t i = 0; i < N; i++) x[i] = (float)sin((double)i * 0.37) * (float)(1 + i / 256);
  for (size_t i = KOLO_TRAIN_INT8_CHUNK; i < 2 * KOLO_TRAIN_INT8_CHUNK; i++) x[i] = 0.0f;
  size_t bytes = kolo_train_int8_size(N);
  assert_int_equal(bytes, 4 * sizeof(float) + N); /* 4 chunks: 4 scales, then N bytes */
  uint8_t *wire = malloc(bytes);
  kolo_train_int8_encode(x, N, wire);
  kolo_train_int8_decode_add(wire, N, 0.5f, back);
  kolo_train_int8_decode_add(wire, N, 0.5f, back);
  double worst = 0;
  for (size_t k = 0; k * KOLO_TRAIN_INT8_CHUNK < N; k++) {
    float top = 0;
    size_t end = (k + 1) * KOLO_TRAIN_INT8_CHUNK < N ? (k + 1) * KOLO_TRAIN_INT8_CHUNK : N;
    for (size_t i = k * KOLO_TRAIN_INT8_CHUNK; i < end; i++) top = fmaxf(top, fabsf(x[i]));
    for (size_t i = k * KOLO_TRAIN_INT8_CHUNK; i < end; i++) {
      double err = fabs((double)back[i] - (double)x[i]);
      assert_true(err <= 0.5 * top / 127.0 * 1.0001 + 1e-7);
      if (top > 0) worst = fmax(worst, err / top);
      if (top == 0) assert_true(back[i] == 0.0f);
    }
  }
  printf("int8: worst error %.4f of the chunk's largest value (bound 1/254 = %.4f)\n", worst,
         1.0 / 254);
  assert_true(worst > 0); /* it is lossy: the test sees the encoding, not a copy */
  free(x);
  free(back);
  free(wire);
}

static void the_outer_state_travels_in_the_blob_and_modes_do_not_mix(void **state) {
  (void)state;
  kolo_train_state *plain = NULL, *outer = NULL, *other = NULL;
  assert_int_equal(kolo_train_state_create("mlp:4-3", 0, 15, 15, &plain), KOLO_OK);
  assert_int_equal(
      kolo_train_state_create_flags("mlp:4-3", 0, 15, 15, KOLO_TRAIN_STATE_OUTER, &outer), KOLO_OK);
  assert_null(kolo_train_state_round_start(plain));
  assert_int_equal(kolo_train_state_size(outer),
                   kolo_train_state_size(plain) + 2 * 15 * sizeof(float));
  float *start = kolo_train_state_round_start(outer), *m = kolo_train_state_outer_momentum(outer);
  assert_ptr_equal(start, kolo_train_state_optim(outer) + 15);
  assert_ptr_equal(m, start + 15);
  assert_ptr_equal((char *)(m + 15),
                   (char *)kolo_train_state_data(outer) + kolo_train_state_size(outer));
  for (int i = 0; i < 15; i++) start[i] = (float)i, m[i] = -(float)i;
  assert_int_equal(
      kolo_train_state_create_flags("mlp:4-3", 0, 15, 15, KOLO_TRAIN_STATE_OUTER, &other), KOLO_OK);
  assert_int_equal(
      kolo_train_state_load(other, kolo_train_state_data(outer), kolo_train_state_size(outer)),
      KOLO_OK);
  assert_memory_equal(kolo_train_state_outer_momentum(other), m, 15 * sizeof(float));
  /* a LOCAL_SGD/DILOCO state is not a SYNC run's, nor the other way round */
  assert_int_equal(
      kolo_train_state_load(plain, kolo_train_state_data(outer), kolo_train_state_size(outer)),
      KOLO_ERR_INVALID_ARG);
  assert_int_equal(
      kolo_train_state_load(outer, kolo_train_state_data(plain), kolo_train_state_size(plain)),
      KOLO_ERR_INVALID_ARG);
  kolo_train_state_destroy(plain);
  kolo_train_state_destroy(outer);
  kolo_train_state_destroy(other);
}

static void every_mode_setting_is_in_the_schedule_fingerprint(void **state) {
  (void)state;
  kolo_train_schedule_input in;
  memset(&in, 0, sizeof in);
  in.batch = 32;
  in.accumulate = 1;
  in.epoch_samples = 600;
  kolo_train_optim_defaults(&in.optim);
  in.mode = KOLO_TRAIN_DILOCO;
  in.average_every = 8;
  in.max_staleness = 1;
  in.outer_lr = 0.7f;
  in.outer_momentum = 0.9f;
  in.nesterov = 1;
  in.fragments = 1;
  in.model = "mlp:784-10";
  kolo_train_schedule base, changed;
  kolo_train_schedule_derive(&in, 2, &base);
  for (int k = 0; k < 6; k++) {
    kolo_train_schedule_input o = in;
    if (k == 0) o.max_staleness = 2;
    if (k == 1) o.outer_lr = 0.5f;
    if (k == 2) o.outer_momentum = 0.8f;
    if (k == 3) o.nesterov = 0;
    if (k == 4) o.compression = KOLO_TRAIN_COMPRESS_INT8;
    if (k == 5) o.fragments = 2;
    kolo_train_schedule_derive(&o, 2, &changed);
    char why[256];
    assert_int_equal(kolo_train_schedule_agrees(&base, &changed, 0, why, sizeof why), 0);
    assert_non_null(strstr(why, "mode"));
  }
}

/* Alone (no communicator) a replica is its own average: LOCAL_SGD's outer
 * step (lr 1, mu 0) changes nothing, so it trains as SYNC does; DILOCO's
 * outer momentum takes it elsewhere. Either ends with the next round's start
 * at the final weights. */
static void alone_local_sgd_is_plain_training_and_diloco_differs(void **state) {
  (void)state;
  kolo_train_dataset *train = NULL, *test = NULL;
  assert_int_equal(kolo_train_data_synthetic(5, 320, 100, &train, &test), KOLO_OK);
  kolo_train_config c;
  kolo_train_config_defaults(&c);
  c.train_set = train;
  c.test_set = test;
  c.hidden = "16";
  c.batch = 16;
  c.steps = 24;
  c.eval = 0;
  c.log_every = 0;
  float *weights[3];
  size_t n = 0;
  for (int k = 0; k < 3; k++) {
    c.mode = k == 0 ? KOLO_TRAIN_SYNC : k == 1 ? KOLO_TRAIN_LOCAL_SGD : KOLO_TRAIN_DILOCO;
    c.average_every = 4;
    c.outer_lr = 0.7f;
    c.outer_momentum = 0.9f;
    c.nesterov = 1;
    kolo_train_trainer *t = NULL;
    assert_int_equal(kolo_train_trainer_create(&c, NULL, NULL, &t), KOLO_OK);
    kolo_train_result r;
    assert_int_equal(kolo_train_trainer_run(t, &r), KOLO_OK);
    kolo_train_state *s = kolo_train_trainer_state(t);
    n = kolo_train_state_header_of(s)->param_count;
    weights[k] = malloc(n * sizeof(float));
    memcpy(weights[k], kolo_train_state_params(s), n * sizeof(float));
    if (k > 0) /* the next round would start from the final weights */
      assert_memory_equal(kolo_train_state_round_start(s), weights[k], n * sizeof(float));
    kolo_train_trainer_destroy(t);
  }
  double same = 0, diff = 0; /* start - (start - w) is w up to rounding */
  for (size_t i = 0; i < n; i++) same = fmax(same, fabs((double)weights[0][i] - weights[1][i]));
  printf("alone: |SYNC - LOCAL_SGD| %.3g\n", same);
  assert_true(same < 1e-5);
  for (size_t i = 0; i < n; i++) diff = fmax(diff, fabs((double)weights[0][i] - weights[2][i]));
  assert_true(diff > 1e-3);
  for (int k = 0; k < 3; k++) free(weights[k]);
  kolo_train_data_destroy(train);
  kolo_train_data_destroy(test);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_mode_parses_with_its_defaults),
      cmocka_unit_test(bad_values_and_settings_of_another_mode_are_refused_by_name),
      cmocka_unit_test(the_outer_step_is_torch_sgd_on_the_pseudo_gradient),
      cmocka_unit_test(int8_keeps_every_value_within_half_its_chunk_scale),
      cmocka_unit_test(the_outer_state_travels_in_the_blob_and_modes_do_not_mix),
      cmocka_unit_test(every_mode_setting_is_in_the_schedule_fingerprint),
      cmocka_unit_test(alone_local_sgd_is_plain_training_and_diloco_differs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
