/* Accuracy test of the built-in trainer on the real Fashion-MNIST files
 * (Debian's dataset-fashion-mnist): a short single-process MLP run must reach
 * at least 84% test accuracy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "worker/train/trainer.h"

static void mlp_reaches_84_percent_on_fashion_mnist(void **state) {
  (void)state;
  kolo_train_config c;
  kolo_train_config_defaults(&c);
  c.dataset = "fashion-mnist";
  c.model = "mlp";
  c.hidden = "128";
  c.epochs = 3;
  c.batch = 64;
  c.optim.lr = 0.02f;
  c.log_every = 0;
  kolo_train_trainer *t = NULL;
  assert_int_equal(kolo_train_trainer_create(&c, NULL, stdout, &t), KOLO_OK);
  kolo_train_result r;
  assert_int_equal(kolo_train_trainer_run(t, &r), KOLO_OK);
  printf("fashion-mnist mlp: accuracy %.4f after %llu steps in %.2f s\n", r.test_accuracy,
         (unsigned long long)r.steps, r.seconds);
  assert_true(r.test_accuracy >= 0.84);
  kolo_train_trainer_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mlp_reaches_84_percent_on_fashion_mnist),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
