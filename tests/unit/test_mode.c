/* The training-mode API (include/kolo/mode.h, common/mode.c) and the job spec's mapping
 * onto it (coordination/job_mode.c): names, defaults, the range checks naming the
 * parameter, the KOLO_MODE* environment read back exactly as the agent writes it, and
 * bad variables refused with the variable's name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/mode_env.h"
#include "coordination/job_mode.h"
#include "kolo/mode.h"

static void clear_env(void) {
  for (int i = 0; i < KOLO_MODE_ENV_COUNT; i++) unsetenv(kolo_mode_env_names[i]);
}

/* Expects spec to be refused with an error containing want. */
static void invalid(const kolo_mode_spec *spec, const char *want) {
  char err[256] = "";
  kolo_status status = kolo_mode_spec_validate(spec, err, sizeof err);
  if (status != KOLO_ERR_INVALID_ARG || strstr(err, want) == NULL)
    fail_msg("got %s '%s', want an error with '%s'", kolo_status_name(status), err, want);
}

/* Expects the environment to be refused with an error containing want. */
static void env_invalid(const char *want) {
  kolo_mode_spec spec;
  char err[256] = "";
  kolo_status status = kolo_mode_from_env(&spec, err, sizeof err);
  if (status != KOLO_ERR_INVALID_ARG || strstr(err, want) == NULL)
    fail_msg("got %s '%s', want an error with '%s'", kolo_status_name(status), err, want);
}

static void names_parse_back_case_insensitively(void **state) {
  (void)state;
  for (int m = KOLO_MODE_SYNC; m <= KOLO_MODE_DILOCO; m++) {
    kolo_mode back = 0;
    assert_int_equal(kolo_mode_parse(kolo_mode_name((kolo_mode)m), &back), KOLO_OK);
    assert_int_equal(back, m);
  }
  kolo_mode mode = 0;
  assert_int_equal(kolo_mode_parse("local-sgd", &mode), KOLO_OK);
  assert_int_equal(mode, KOLO_MODE_LOCAL_SGD);
  assert_int_equal(kolo_mode_parse("DiLoCo", &mode), KOLO_OK);
  assert_int_equal(mode, KOLO_MODE_DILOCO);
  assert_int_equal(kolo_mode_parse("asyncx", &mode), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_mode_parse("", &mode), KOLO_ERR_INVALID_ARG);
  assert_string_equal(kolo_mode_name((kolo_mode)0), "?");
  kolo_compression c = 0;
  assert_int_equal(kolo_compression_parse("INT8", &c), KOLO_OK);
  assert_int_equal(c, KOLO_COMPRESSION_INT8);
  assert_string_equal(kolo_compression_name(KOLO_COMPRESSION_FP16), "fp16");
  assert_int_equal(kolo_compression_parse("int4", &c), KOLO_ERR_INVALID_ARG);
}

static void every_default_is_valid_and_diloco_has_the_papers_outer_optimizer(void **state) {
  (void)state;
  kolo_mode_spec spec;
  for (int m = KOLO_MODE_SYNC; m <= KOLO_MODE_DILOCO; m++) {
    assert_int_equal(kolo_mode_spec_default((kolo_mode)m, &spec), KOLO_OK);
    assert_int_equal(kolo_mode_spec_validate(&spec, NULL, 0), KOLO_OK);
  }
  assert_int_equal(kolo_mode_spec_default(KOLO_MODE_ASYNC, &spec), KOLO_OK);
  assert_int_equal(spec.max_staleness, 1);
  assert_int_equal(spec.sync_every, 8);
  assert_int_equal(kolo_mode_spec_default(KOLO_MODE_DILOCO, &spec), KOLO_OK);
  assert_true(spec.outer_lr == 0.7 && spec.outer_momentum == 0.9 && spec.nesterov == 1);
  assert_int_equal(kolo_mode_spec_default((kolo_mode)5, &spec), KOLO_ERR_INVALID_ARG);
}

static void validation_names_the_parameter(void **state) {
  (void)state;
  kolo_mode_spec spec;
  kolo_mode_spec_default(KOLO_MODE_DILOCO, &spec);
  spec.outer_momentum = 1.0;
  invalid(&spec, "outer_momentum: must be in [0, 1)");
  spec.outer_momentum = 0.5;
  spec.outer_lr = 0;
  invalid(&spec, "outer_lr: must be in (0, 100]");
  spec.outer_lr = 0.5;
  spec.fragments = 51;
  invalid(&spec, "fragments: must be in [1, 50]");
  spec.fragments = 5;
  spec.compression = (kolo_compression)3;
  invalid(&spec, "compression:");
  kolo_mode_spec_default(KOLO_MODE_LOCAL_SGD, &spec);
  spec.outer_lr = 0.7;
  invalid(&spec, "mode LOCAL_SGD has no outer optimizer");
  kolo_mode_spec_default(KOLO_MODE_ASYNC, &spec);
  spec.max_staleness = 0;
  invalid(&spec, "max_staleness: must be in [1, 1000]");
  spec.max_staleness = 2;
  spec.compression = KOLO_COMPRESSION_INT8;
  invalid(&spec, "compression: only modes LOCAL_SGD and DILOCO");
  kolo_mode_spec_default(KOLO_MODE_SYNC, &spec);
  spec.sync_every = 4;
  invalid(&spec, "sync_every: mode SYNC syncs every step");
  kolo_mode_spec_default(KOLO_MODE_SYNC, &spec);
  spec.max_staleness = 3;
  invalid(&spec, "max_staleness: only modes ASYNC, LOCAL_SGD and DILOCO");
  kolo_mode_spec_default(KOLO_MODE_DILOCO, &spec); /* an overlapped average: k rounds late */
  assert_int_equal(spec.max_staleness, 0);
  spec.max_staleness = 1;
  assert_int_equal(kolo_mode_spec_validate(&spec, NULL, 0), KOLO_OK);
  spec.max_staleness = 1001;
  invalid(&spec, "max_staleness: must be in [0, 1000]");
}

static void no_environment_is_sync(void **state) {
  (void)state;
  clear_env();
  kolo_mode_spec spec;
  assert_int_equal(kolo_mode_from_env(&spec, NULL, 0), KOLO_OK);
  assert_int_equal(spec.mode, KOLO_MODE_SYNC);
  assert_int_equal(spec.sync_every, 1);
}

/* What the agent writes (every variable, those of other modes at their defaults) reads
 * back as the same spec, doubles exactly. */
static void the_agents_environment_reads_back_as_the_same_spec(void **state) {
  (void)state;
  kolo_mode_spec want;
  kolo_mode_spec_default(KOLO_MODE_DILOCO, &want);
  want.sync_every = 37;
  want.outer_lr = 0.1 + 0.2; /* not a short decimal */
  want.outer_momentum = 0.95;
  want.nesterov = 0;
  want.compression = KOLO_COMPRESSION_INT8;
  want.fragments = 4;
  for (int m = KOLO_MODE_SYNC; m <= KOLO_MODE_DILOCO + 1; m++) {
    kolo_mode_spec spec = want;
    if (m <= KOLO_MODE_DILOCO) kolo_mode_spec_default((kolo_mode)m, &spec);
    kolo_mode_env env;
    assert_int_equal(kolo_mode_env_format(&spec, &env), KOLO_OK);
    clear_env();
    for (int i = 0; i < KOLO_MODE_ENV_COUNT; i++) putenv(env.entries[i]);
    kolo_mode_spec back;
    char err[256] = "";
    assert_int_equal(kolo_mode_from_env(&back, err, sizeof err), KOLO_OK);
    assert_int_equal(back.mode, spec.mode);
    assert_int_equal(back.sync_every, spec.sync_every);
    assert_int_equal(back.max_staleness, spec.max_staleness);
    assert_true(back.outer_lr == spec.outer_lr);
    assert_true(back.outer_momentum == spec.outer_momentum);
    assert_int_equal(back.nesterov, spec.nesterov);
    assert_int_equal(back.compression, spec.compression);
    assert_int_equal(back.fragments, spec.fragments);
    clear_env(); /* putenv keeps pointers into env */
  }
}

static void a_bad_variable_is_named(void **state) {
  (void)state;
  clear_env();
  setenv("KOLO_MODE", "hogwild", 1);
  env_invalid("KOLO_MODE: 'hogwild' is not a mode");
  setenv("KOLO_MODE", "ASYNC", 1);
  setenv("KOLO_MODE_MAX_STALENESS", "-1", 1);
  env_invalid("KOLO_MODE_MAX_STALENESS: '-1' is not a whole number");
  setenv("KOLO_MODE_MAX_STALENESS", "0", 1);
  env_invalid("max_staleness: must be in [1, 1000]");
  setenv("KOLO_MODE_MAX_STALENESS", "3", 1);
  setenv("KOLO_MODE_OUTER_LR", "fast", 1); /* not ASYNC's, but still checked */
  env_invalid("KOLO_MODE_OUTER_LR: 'fast' is not a number");
  setenv("KOLO_MODE_OUTER_LR", "0.5", 1); /* well formed: not applied to ASYNC */
  kolo_mode_spec spec;
  assert_int_equal(kolo_mode_from_env(&spec, NULL, 0), KOLO_OK);
  assert_int_equal(spec.max_staleness, 3);
  assert_true(spec.outer_lr == 1.0);
  setenv("KOLO_MODE_NESTEROV", "2", 1);
  env_invalid("KOLO_MODE_NESTEROV: '2' is not 0 or 1");
  setenv("KOLO_MODE_NESTEROV", "1", 1);
  setenv("KOLO_MODE_COMPRESSION", "int4", 1);
  env_invalid("KOLO_MODE_COMPRESSION: 'int4' is not none, fp16 or int8");
  clear_env();
}

static void a_job_spec_maps_onto_the_mode_and_names_its_fields(void **state) {
  (void)state;
  Kolo__V1__JobSpec spec = KOLO__V1__JOB_SPEC__INIT;
  kolo_mode_spec mode;
  char err[256] = "";
  assert_int_equal(kolo_job_mode_spec(&spec, &mode, err, sizeof err), KOLO_OK);
  assert_int_equal(mode.mode, KOLO_MODE_SYNC); /* unspecified */
  spec.mode = KOLO__V1__MODE__ASYNC;
  spec.average_every = 16;
  assert_int_equal(kolo_job_mode_spec(&spec, &mode, err, sizeof err), KOLO_OK);
  assert_int_equal(mode.mode, KOLO_MODE_ASYNC);
  assert_int_equal(mode.sync_every, 16);
  assert_int_equal(mode.max_staleness, 1);
  spec.average_every = 2000000;
  assert_int_equal(kolo_job_mode_spec(&spec, &mode, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "average_every: must be in [1, 1000000]"));
  spec.mode = KOLO__V1__MODE__SYNC;
  spec.average_every = 4;
  assert_int_equal(kolo_job_mode_spec(&spec, &mode, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "average_every: only for modes ASYNC, LOCAL_SGD and DILOCO"));
  assert_non_null(strstr(err, "mode is SYNC"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(names_parse_back_case_insensitively),
      cmocka_unit_test(every_default_is_valid_and_diloco_has_the_papers_outer_optimizer),
      cmocka_unit_test(validation_names_the_parameter),
      cmocka_unit_test(no_environment_is_sync),
      cmocka_unit_test(the_agents_environment_reads_back_as_the_same_spec),
      cmocka_unit_test(a_bad_variable_is_named),
      cmocka_unit_test(a_job_spec_maps_onto_the_mode_and_names_its_fields),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
