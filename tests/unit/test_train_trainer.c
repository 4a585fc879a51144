/* Unit tests for worker/train/trainer.c in one process: gradient accumulation
 * over k micro-batches equals one k-times-larger batch, a run resumed from a
 * checkpoint (even when the newest one is damaged) ends bit-identical to an
 * uninterrupted run, and training actually learns the synthetic task. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "worker/train/trainer.h"

typedef struct fixture {
  char dir[256];
  kolo_train_dataset *train, *test;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/kolo-train-trainer-XXXXXX");
  if (!mkdtemp(f->dir)) return -1;
  if (kolo_train_data_synthetic(4, 480, 200, &f->train, &f->test) != KOLO_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
  if (system(cmd) != 0) return -1;
  kolo_train_data_destroy(f->train);
  kolo_train_data_destroy(f->test);
  free(f);
  return 0;
}

static void base_config(fixture *f, kolo_train_config *c) {
  kolo_train_config_defaults(c);
  c->train_set = f->train;
  c->test_set = f->test;
  c->hidden = "32";
  c->batch = 16;
  c->steps = 40;
  c->eval = 0;
  c->log_every = 0;
  c->optim.lr = 0.05f;
  c->optim.weight_decay = 1e-4f;
}

/* Runs config and returns a copy of the final parameters (count in *n). */
static float *run(const kolo_train_config *c, size_t *n, kolo_train_result *result) {
  kolo_train_trainer *t = NULL;
  assert_int_equal(kolo_train_trainer_create(c, NULL, NULL, &t), KOLO_OK);
  kolo_train_result r;
  assert_int_equal(kolo_train_trainer_run(t, &r), KOLO_OK);
  kolo_train_state *s = kolo_train_trainer_state(t);
  *n = kolo_train_state_header_of(s)->param_count;
  float *p = malloc(*n * sizeof(float));
  memcpy(p, kolo_train_state_params(s), *n * sizeof(float));
  if (result) *result = r;
  kolo_train_trainer_destroy(t);
  return p;
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]) / (1e-3 + fabs((double)a[i]));
    if (d > worst) worst = d;
  }
  return worst;
}

static void accumulating_two_batches_of_b_equals_one_batch_of_2b(void **state) {
  fixture *f = *state;
  const char *models[] = {"mlp", "lenet"};
  for (int m = 0; m < 2; m++) {
    kolo_train_config a, b;
    base_config(f, &a);
    a.model = models[m];
    a.steps = m ? 6 : 40;
    b = a;
    a.batch = 16;
    a.accumulate = 2;
    b.batch = 32;
    b.accumulate = 1;
    size_t na, nb;
    float *pa = run(&a, &na, NULL), *pb = run(&b, &nb, NULL);
    assert_int_equal(na, nb);
    double d = max_rel_diff(pa, pb, na);
    if (d > 1e-3) fail_msg("%s: accumulated and large-batch weights differ by %g", models[m], d);
    /* and both moved away from each other's... no: away from a 1-micro-batch run */
    kolo_train_config c = a;
    c.accumulate = 1;
    size_t nc;
    float *pc = run(&c, &nc, NULL);
    assert_true(max_rel_diff(pa, pc, na) > 1e-2);
    free(pa), free(pb), free(pc);
  }
}

static void resumed_run_ends_identical_to_an_uninterrupted_one(void **state) {
  fixture *f = *state;
  kolo_train_config full, part;
  base_config(f, &full);
  full.optim.kind = KOLO_TRAIN_ADAM; /* optimizer state must survive the restart too */
  full.optim.lr = 0.005f;
  full.steps = 50; /* 480 / 16 = 30 steps per epoch: crosses an epoch boundary */
  size_t n1, n2;
  kolo_train_result r1, r2;
  float *straight = run(&full, &n1, &r1);
  assert_int_equal(r1.steps, 50);
  assert_int_equal(r1.epochs, 1);

  part = full;
  part.checkpoint_dir = f->dir;
  part.checkpoint_every = 10;
  part.steps = 35;
  free(run(&part, &n2, &r2));
  assert_int_equal(r2.resumed_step, 0);
  part.steps = 50;
  float *resumed = run(&part, &n2, &r2);
  assert_int_equal(r2.resumed_step, 35);
  assert_int_equal(r2.steps, 50);
  assert_int_equal(n1, n2);
  assert_memory_equal(straight, resumed, n1 * sizeof(float));
  free(resumed);

  /* damage the newest checkpoint (step 50): resuming uses step 40 and re-trains to 50 */
  char newest[512];
  snprintf(newest, sizeof newest, "%s/ckpt-000000000050.kolo", f->dir);
  FILE *fp = fopen(newest, "r+b");
  assert_non_null(fp);
  fseek(fp, 500, SEEK_SET);
  fputc(0x5A, fp);
  fclose(fp);
  part.steps = 50;
  resumed = run(&part, &n2, &r2);
  assert_int_equal(r2.resumed_step, 40);
  assert_memory_equal(straight, resumed, n1 * sizeof(float));
  free(resumed);
  free(straight);
}

static void training_learns_the_synthetic_task(void **state) {
  fixture *f = *state;
  kolo_train_config c;
  base_config(f, &c);
  c.steps = 0;
  c.epochs = 3;
  c.eval = 1;
  size_t n;
  kolo_train_result r;
  free(run(&c, &n, &r));
  assert_int_equal(r.epochs, 3);
  assert_int_equal(r.steps, 90);
  if (r.test_accuracy < 0.9) fail_msg("synthetic accuracy %.3f", r.test_accuracy);
  assert_true(r.samples_per_second_worker > 0);
}

static void same_seed_gives_identical_runs_and_another_seed_does_not(void **state) {
  fixture *f = *state;
  kolo_train_config c;
  base_config(f, &c);
  c.steps = 10;
  size_t n;
  float *a = run(&c, &n, NULL), *b = run(&c, &n, NULL);
  assert_memory_equal(a, b, n * sizeof(float));
  c.seed = 2;
  float *d = run(&c, &n, NULL);
  assert_memory_not_equal(a, d, n * sizeof(float));
  free(a), free(b), free(d);
}

static void invalid_configs_are_refused(void **state) {
  fixture *f = *state;
  kolo_train_config c;
  kolo_train_trainer *t = NULL;
  base_config(f, &c);
  c.batch = 0;
  assert_int_equal(kolo_train_trainer_create(&c, NULL, NULL, &t), KOLO_ERR_INVALID_ARG);
  base_config(f, &c);
  c.hidden = "12,x";
  assert_int_equal(kolo_train_trainer_create(&c, NULL, NULL, &t), KOLO_ERR_INVALID_ARG);
  base_config(f, &c);
  c.train_set = c.test_set = NULL;
  c.dataset = "nosuch";
  assert_int_equal(kolo_train_trainer_create(&c, NULL, NULL, &t), KOLO_ERR_INVALID_ARG);
  c.dataset = "idx:/nonexistent-dir";
  assert_int_equal(kolo_train_trainer_create(&c, NULL, NULL, &t), KOLO_ERR_NOT_FOUND);
  assert_null(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(accumulating_two_batches_of_b_equals_one_batch_of_2b, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(resumed_run_ends_identical_to_an_uninterrupted_one, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(training_learns_the_synthetic_task, setup, teardown),
      cmocka_unit_test_setup_teardown(same_seed_gives_identical_runs_and_another_seed_does_not,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(invalid_configs_are_refused, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
