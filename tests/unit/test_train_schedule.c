/* The training schedule every ring member must share (worker/train/schedule.h):
 * derived from the settings and the first ring's size, equal for survivors,
 * consistent for a newcomer that joins a bigger or smaller ring, and every
 * difference named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "worker/train/schedule.h"

static kolo_train_schedule_input settings(void) {
  kolo_train_schedule_input in;
  memset(&in, 0, sizeof in);
  in.batch = 32;
  in.accumulate = 1;
  in.epoch_samples = 60000;
  in.state_bytes = 814320;
  kolo_train_optim_defaults(&in.optim);
  in.average_every = 8;
  in.epochs = 4;
  in.model = "mlp:784-128-10";
  return in;
}

static void the_global_batch_is_the_batch_times_the_first_ring(void **state) {
  (void)state;
  kolo_train_schedule_input in = settings();
  kolo_train_schedule s;
  kolo_train_schedule_derive(&in, 2, &s);
  assert_int_equal(s.version, KOLO_TRAIN_SCHEDULE_VERSION);
  assert_int_equal(s.start_workers, 2);
  assert_int_equal(s.global_batch, 64);
  assert_true(s.lr_scale == 1.0f);
  in.scale_lr = 1;
  kolo_train_schedule_derive(&in, 3, &s);
  assert_true(s.lr_scale == 3.0f);
  assert_int_equal(s.flags, KOLO_TRAIN_SCHEDULE_SCALE_LR);
}

static void a_survivor_agrees_only_with_its_own_schedule(void **state) {
  (void)state;
  kolo_train_schedule_input in = settings();
  kolo_train_schedule mine, ring;
  char why[256];
  kolo_train_schedule_derive(&in, 2, &mine);
  ring = mine;
  assert_true(kolo_train_schedule_agrees(&mine, &ring, 0, why, sizeof why));
  assert_string_equal(why, "");
  kolo_train_schedule_derive(&in, 3, &ring);
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 0, why, sizeof why));
  assert_string_equal(why, "workers at the start 2 here, 3 in the ring");
}

static void a_newcomer_takes_the_size_the_ring_started_with(void **state) {
  (void)state;
  kolo_train_schedule_input in = settings();
  in.scale_lr = 1;
  kolo_train_schedule mine, ring;
  char why[256];
  kolo_train_schedule_derive(&in, 3, &mine); /* joins a ring of 3 that started with 2 */
  kolo_train_schedule_derive(&in, 2, &ring);
  assert_true(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  kolo_train_schedule_derive(&in, 1, &mine); /* or a ring of 1 that started with 4 */
  kolo_train_schedule_derive(&in, 4, &ring);
  assert_true(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  /* but the ring's own fields must hang together */
  ring.global_batch = 96;
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  assert_string_equal(why, "global batch 128 here, 96 in the ring");
  kolo_train_schedule_derive(&in, 4, &ring);
  ring.lr_scale = 1.0f;
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  assert_string_equal(why, "learning-rate scale 4 here, 1 in the ring");
}

static void each_shared_setting_is_checked_and_named(void **state) {
  (void)state;
  kolo_train_schedule_input base = settings(), in;
  kolo_train_schedule ring, mine;
  char why[256];
  kolo_train_schedule_derive(&base, 2, &ring);

  in = base;
  in.optim.lr = 0.05f;
  kolo_train_schedule_derive(&in, 3, &mine);
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  assert_string_equal(why, "learning rate 0.05 here, 0.02 in the ring");

  in = base;
  in.batch = 16;
  kolo_train_schedule_derive(&in, 3, &mine);
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  assert_string_equal(why, "batch per worker 16 here, 32 in the ring");

  in = base;
  in.epoch_samples = 59999;
  kolo_train_schedule_derive(&in, 3, &mine);
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  assert_string_equal(why, "samples per epoch 59999 here, 60000 in the ring");

  in = base;
  in.accumulate = 2;
  kolo_train_schedule_derive(&in, 3, &mine);
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  assert_string_equal(why, "accumulation steps 2 here, 1 in the ring");

  in = base;
  in.state_bytes = 4;
  kolo_train_schedule_derive(&in, 3, &mine);
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  assert_string_equal(why, "state size (bytes) 4 here, 814320 in the ring");

  in = base;
  in.scale_lr = 1;
  kolo_train_schedule_derive(&in, 3, &mine);
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
  assert_string_equal(why, "learning-rate scaling flag 1 here, 0 in the ring");

  kolo_train_schedule_input others[5];
  for (int i = 0; i < 5; i++) others[i] = base;
  others[0].optim.momentum = 0.5f;
  others[1].optim.kind = KOLO_TRAIN_ADAM;
  others[2].epochs = 5;
  others[3].mode = 1;
  others[4].model = "mlp:784-64-10";
  for (int i = 0; i < 5; i++) {
    kolo_train_schedule_derive(&others[i], 3, &mine);
    assert_false(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
    assert_non_null(strstr(why, "optimizer, mode, limits or model differ"));
  }
  /* the seed is not compared: it travels in the state, from rank 0 */
  in = base;
  in.optim.lr_scale = 7.0f; /* and lr_scale comes from scale_lr, not the input */
  kolo_train_schedule_derive(&in, 3, &mine);
  assert_true(kolo_train_schedule_agrees(&mine, &ring, 1, why, sizeof why));
}

static void a_short_reason_buffer_is_cut_not_overrun(void **state) {
  (void)state;
  kolo_train_schedule_input in = settings();
  kolo_train_schedule mine, ring;
  char why[12];
  kolo_train_schedule_derive(&in, 2, &mine);
  in.optim.lr = 1.0f;
  kolo_train_schedule_derive(&in, 2, &ring);
  assert_false(kolo_train_schedule_agrees(&mine, &ring, 0, why, sizeof why));
  assert_int_equal(strlen(why), sizeof why - 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_global_batch_is_the_batch_times_the_first_ring),
      cmocka_unit_test(a_survivor_agrees_only_with_its_own_schedule),
      cmocka_unit_test(a_newcomer_takes_the_size_the_ring_started_with),
      cmocka_unit_test(each_shared_setting_is_checked_and_named),
      cmocka_unit_test(a_short_reason_buffer_is_cut_not_overrun),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
