/* Unit tests for worker/train/nn.c, model.c and optim.c: every layer's
 * backward pass matches central finite differences of its forward pass, whole
 * models (MLP, LeNet) do too, and the optimizers follow their update rules. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "worker/train/model.h"
#include "worker/train/nn.h"
#include "worker/train/optim.h"
#include "worker/train/rng.h"

#define EPS 1e-3f

typedef double (*objective_fn)(void *ctx);

static void fill_normal(float *v, size_t n, uint64_t seed, float scale) {
  kolo_train_rng rng;
  kolo_train_rng_seed(&rng, seed);
  for (size_t i = 0; i < n; i++) v[i] = scale * (float)kolo_train_rng_normal(&rng);
}

/* sum(r .* y) in double: the scalar whose gradient w.r.t. y is r. */
static double dot(const float *r, const float *y, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)r[i] * (double)y[i];
  return s;
}

/* Compares analytic[i] with the central difference of f in param[i], for all i. */
static void check_grad(const char *what, float *param, size_t n, const float *analytic,
                       objective_fn f, void *ctx) {
  for (size_t i = 0; i < n; i++) {
    float saved = param[i];
    param[i] = saved + EPS;
    double plus = f(ctx);
    param[i] = saved - EPS;
    double minus = f(ctx);
    param[i] = saved;
    double numeric = (plus - minus) / (2.0 * (double)EPS);
    double a = analytic[i];
    double tol = 1e-2 * fmax(fabs(a), fabs(numeric)) + 2e-3;
    if (fabs(a - numeric) > tol) {
      fail_msg("%s[%zu]: analytic %.6f, numeric %.6f", what, i, a, numeric);
    }
  }
}

/* ---- dense ---- */

typedef struct dense_ctx {
  size_t batch, in, out;
  float *x, *w, *b, *y, *r;
} dense_ctx;

static double dense_objective(void *p) {
  dense_ctx *c = p;
  kolo_nn_dense_forward(c->x, c->w, c->b, c->y, c->batch, c->in, c->out);
  return dot(c->r, c->y, c->batch * c->out);
}

static void dense_gradients_match_finite_differences(void **state) {
  (void)state;
  dense_ctx c = {3, 5, 4, NULL, NULL, NULL, NULL, NULL};
  float x[15], w[20], b[4], y[12], r[12], dx[15], dw[20], db[4];
  c.x = x, c.w = w, c.b = b, c.y = y, c.r = r;
  fill_normal(x, 15, 1, 1.0f);
  fill_normal(w, 20, 2, 0.5f);
  fill_normal(b, 4, 3, 0.5f);
  fill_normal(r, 12, 4, 1.0f);
  dense_objective(&c);
  kolo_nn_dense_backward(x, w, r, dx, dw, db, 3, 5, 4, 0.0f);
  check_grad("dense dw", w, 20, dw, dense_objective, &c);
  check_grad("dense db", b, 4, db, dense_objective, &c);
  check_grad("dense dx", x, 15, dx, dense_objective, &c);
  /* beta 1 accumulates: a second backward doubles the weight gradient */
  float dw2[20];
  memcpy(dw2, dw, sizeof dw);
  kolo_nn_dense_backward(x, w, r, NULL, dw2, db, 3, 5, 4, 1.0f);
  for (int i = 0; i < 20; i++) assert_float_equal(dw2[i], 2.0f * dw[i], 1e-5);
}

/* ---- relu ---- */

typedef struct relu_ctx {
  float *x, *y, *r;
  size_t n;
} relu_ctx;

static double relu_objective(void *p) {
  relu_ctx *c = p;
  kolo_nn_relu_forward(c->x, c->y, c->n);
  return dot(c->r, c->y, c->n);
}

static void relu_gradient_matches_finite_differences(void **state) {
  (void)state;
  float x[32], y[32], r[32], dx[32];
  fill_normal(x, 32, 5, 1.0f);
  for (int i = 0; i < 32; i++) {
    if (fabsf(x[i]) < 0.01f) x[i] = 0.5f; /* stay off the kink */
  }
  fill_normal(r, 32, 6, 1.0f);
  relu_ctx c = {x, y, r, 32};
  relu_objective(&c);
  kolo_nn_relu_backward(y, r, dx, 32);
  check_grad("relu dx", x, 32, dx, relu_objective, &c);
}

/* ---- conv ---- */

typedef struct conv_ctx {
  kolo_nn_conv_shape s;
  size_t batch;
  float *x, *w, *b, *y, *r, *col;
} conv_ctx;

static double conv_objective(void *p) {
  conv_ctx *c = p;
  kolo_nn_conv_forward(&c->s, c->x, c->w, c->b, c->y, c->col, c->batch);
  size_t ny =
      c->batch * kolo_nn_conv_out_height(&c->s) * kolo_nn_conv_out_width(&c->s) * c->s.out_channels;
  return dot(c->r, c->y, ny);
}

static void check_conv(size_t pad) {
  conv_ctx c;
  c.s = (kolo_nn_conv_shape){6, 5, 2, 3, 3, pad};
  c.batch = 2;
  size_t nx = c.batch * 6 * 5 * 2;
  size_t nw = kolo_nn_conv_weight_count(&c.s);
  size_t ny = c.batch * kolo_nn_conv_out_height(&c.s) * kolo_nn_conv_out_width(&c.s) * 3;
  size_t ncol = kolo_nn_conv_col_size(&c.s, c.batch);
  c.x = malloc(nx * sizeof(float));
  c.w = malloc(nw * sizeof(float));
  c.b = malloc(3 * sizeof(float));
  c.y = malloc(ny * sizeof(float));
  c.r = malloc(ny * sizeof(float));
  c.col = malloc(ncol * sizeof(float));
  float *dx = malloc(nx * sizeof(float)), *dw = malloc(nw * sizeof(float));
  float *dcol = malloc(ncol * sizeof(float)), db[3];
  fill_normal(c.x, nx, 7, 1.0f);
  fill_normal(c.w, nw, 8, 0.3f);
  fill_normal(c.b, 3, 9, 0.3f);
  fill_normal(c.r, ny, 10, 1.0f);
  conv_objective(&c);
  kolo_nn_conv_backward(&c.s, c.col, c.w, c.r, dx, dw, db, dcol, c.batch, 0.0f);
  check_grad("conv dw", c.w, nw, dw, conv_objective, &c);
  check_grad("conv db", c.b, 3, db, conv_objective, &c);
  check_grad("conv dx", c.x, nx, dx, conv_objective, &c);
  free(c.x), free(c.w), free(c.b), free(c.y), free(c.r), free(c.col);
  free(dx), free(dw), free(dcol);
}

static void conv_gradients_match_finite_differences_with_padding(void **state) {
  (void)state;
  check_conv(1);
}

static void conv_gradients_match_finite_differences_without_padding(void **state) {
  (void)state;
  check_conv(0);
}

static void conv_output_is_the_direct_convolution(void **state) {
  (void)state;
  /* one 3x3 single-channel image, 2x2 kernel, pad 0: hand-checkable */
  kolo_nn_conv_shape s = {3, 3, 1, 1, 2, 0};
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  float w[4] = {1, 0, 0, -1}; /* rows ordered (ky, kx, c) */
  float b[1] = {0.5f}, y[4], col[16];
  kolo_nn_conv_forward(&s, x, w, b, y, col, 1);
  for (int i = 0; i < 4; i++) assert_float_equal(y[i], 1 - 5 + 0.5f, 1e-6);
}

/* ---- max-pool ---- */

typedef struct pool_ctx {
  float *x, *y, *r;
  size_t *argmax;
  size_t batch, h, w, c;
} pool_ctx;

static double pool_objective(void *p) {
  pool_ctx *c = p;
  kolo_nn_maxpool_forward(c->x, c->y, c->argmax, c->batch, c->h, c->w, c->c);
  return dot(c->r, c->y, c->batch * c->h / 2 * c->w / 2 * c->c);
}

static void maxpool_gradient_matches_finite_differences(void **state) {
  (void)state;
  enum { B = 2, H = 4, W = 6, C = 3, NX = B * H * W * C, NY = NX / 4 };
  float x[NX], y[NY], r[NY], dx[NX];
  size_t argmax[NY];
  /* distinct values spaced well above EPS, so no ties flip under the probe */
  kolo_train_rng rng;
  kolo_train_rng_seed(&rng, 11);
  for (int i = 0; i < NX; i++) x[i] = 0.01f * (float)i;
  for (int i = NX; i > 1; i--) {
    size_t j = kolo_train_rng_below(&rng, (size_t)i);
    float t = x[i - 1];
    x[i - 1] = x[j];
    x[j] = t;
  }
  fill_normal(r, NY, 12, 1.0f);
  pool_ctx c = {x, y, r, argmax, B, H, W, C};
  pool_objective(&c);
  kolo_nn_maxpool_backward(r, argmax, dx, B, H, W, C);
  check_grad("maxpool dx", x, NX, dx, pool_objective, &c);
}

/* ---- softmax cross-entropy ---- */

typedef struct xent_ctx {
  float *logits;
  int *labels;
  size_t batch, classes;
} xent_ctx;

static double xent_objective(void *p) {
  xent_ctx *c = p;
  return kolo_nn_softmax_xent(c->logits, c->labels, c->batch, c->classes, 0.0f, NULL, NULL);
}

static void softmax_xent_gradient_matches_finite_differences(void **state) {
  (void)state;
  float logits[4 * 5], d[4 * 5];
  int labels[4] = {0, 3, 4, 1};
  fill_normal(logits, 20, 13, 2.0f);
  xent_ctx c = {logits, labels, 4, 5};
  size_t correct = 99;
  double loss = kolo_nn_softmax_xent(logits, labels, 4, 5, 1.0f / 4, d, &correct);
  assert_true(loss > 0.0);
  assert_true(correct <= 4);
  check_grad("xent dlogits", logits, 20, d, xent_objective, &c);
}

static void softmax_xent_is_stable_for_huge_logits(void **state) {
  (void)state;
  float logits[2] = {1000.0f, -1000.0f}, d[2];
  int label = 0;
  size_t correct = 0;
  double loss = kolo_nn_softmax_xent(logits, &label, 1, 2, 1.0f, d, &correct);
  assert_true(isfinite(loss) && loss < 1e-6);
  assert_int_equal(correct, 1);
  assert_true(isfinite(d[0]) && isfinite(d[1]));
}

/* ---- whole models ---- */

typedef struct model_ctx {
  kolo_train_model *m;
  float *x;
  int *y;
  size_t batch;
} model_ctx;

static double model_objective(void *p) {
  model_ctx *c = p;
  return kolo_train_model_evaluate(c->m, c->x, c->y, c->batch, NULL);
}

/* Checks a spread of parameters of a model against finite differences of the mean loss. */
static void check_model(kolo_train_model_spec *spec, size_t probes) {
  kolo_train_model *m = NULL;
  size_t batch = 3, features = spec->height * spec->width * spec->channels;
  assert_int_equal(kolo_train_model_create(spec, batch, &m), KOLO_OK);
  size_t n = kolo_train_model_param_count(m);
  float *params = malloc(n * sizeof(float)), *grads = malloc(n * sizeof(float));
  float *x = malloc(batch * features * sizeof(float));
  int y[3] = {1, 0, 2};
  kolo_train_model_bind(m, params);
  kolo_train_model_init_params(m, 42);
  for (size_t i = 0; i < n; i++) params[i] += 0.01f * (float)((i * 7919) % 13) - 0.06f;
  fill_normal(x, batch * features, 14, 1.0f);
  kolo_train_model_train_batch(m, x, y, batch, 1.0f / (float)batch, 0, NULL);
  memcpy(grads, kolo_train_model_grads(m), n * sizeof(float));
  model_ctx c = {m, x, y, batch};
  /* probe a deterministic spread of parameters, each checked on its own */
  for (size_t p = 0; p < probes; p++) {
    size_t i = (p * 104729u + 17) % n;
    char what[64];
    snprintf(what, sizeof what, "%s param", kolo_train_model_describe(m));
    check_grad(what, params + i, 1, grads + i, model_objective, &c);
  }
  kolo_train_model_destroy(m);
  free(params), free(grads), free(x);
}

static void mlp_gradients_match_finite_differences(void **state) {
  (void)state;
  kolo_train_model_spec spec;
  memset(&spec, 0, sizeof spec);
  assert_int_equal(kolo_train_model_spec_parse("mlp", "7,5", &spec), KOLO_OK);
  spec.height = 1, spec.width = 6, spec.channels = 1, spec.classes = 3;
  check_model(&spec, 200);
}

static void lenet_gradients_match_finite_differences(void **state) {
  (void)state;
  kolo_train_model_spec spec;
  memset(&spec, 0, sizeof spec);
  assert_int_equal(kolo_train_model_spec_parse("lenet", NULL, &spec), KOLO_OK);
  spec.height = 28, spec.width = 28, spec.channels = 1, spec.classes = 10;
  check_model(&spec, 60);
}

static void lenet_has_the_classic_parameter_count(void **state) {
  (void)state;
  kolo_train_model_spec spec;
  memset(&spec, 0, sizeof spec);
  assert_int_equal(kolo_train_model_spec_parse("lenet", "", &spec), KOLO_OK);
  spec.height = 28, spec.width = 28, spec.channels = 1, spec.classes = 10;
  kolo_train_model *m = NULL;
  assert_int_equal(kolo_train_model_create(&spec, 4, &m), KOLO_OK);
  /* conv1 156 + conv2 2416 + fc 48120 + 10164 + 850 */
  assert_int_equal(kolo_train_model_param_count(m), 156 + 2416 + 48120 + 10164 + 850);
  kolo_train_model_destroy(m);
}

static void bad_model_specs_are_refused(void **state) {
  (void)state;
  kolo_train_model_spec spec;
  memset(&spec, 0, sizeof spec);
  assert_int_equal(kolo_train_model_spec_parse("resnet", NULL, &spec), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_train_model_spec_parse("mlp", "256,", &spec), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_train_model_spec_parse("mlp", "256,x", &spec), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_train_model_spec_parse("mlp", "0", &spec), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_train_model_spec_parse("lenet", NULL, &spec), KOLO_OK);
  spec.height = 8, spec.width = 8, spec.channels = 1, spec.classes = 10;
  kolo_train_model *m = NULL;
  assert_int_equal(kolo_train_model_create(&spec, 4, &m), KOLO_ERR_INVALID_ARG);
  assert_null(m);
}

/* ---- optimizers ---- */

static void sgd_applies_momentum_and_weight_decay(void **state) {
  (void)state;
  kolo_train_optim_config c;
  kolo_train_optim_defaults(&c);
  c.lr = 0.1f, c.momentum = 0.5f, c.weight_decay = 0.01f;
  float w[1] = {1.0f}, g[1] = {2.0f}, v[1] = {0.0f};
  kolo_train_optim_step(&c, 0, w, g, v, 1);
  /* v = 2 + 0.01*1 = 2.01; w = 1 - 0.201 */
  assert_float_equal(v[0], 2.01f, 1e-6);
  assert_float_equal(w[0], 0.799f, 1e-6);
  kolo_train_optim_step(&c, 1, w, g, v, 1);
  /* v = 0.5*2.01 + 2 + 0.00799 */
  assert_float_equal(v[0], 1.005f + 2.00799f, 1e-5);
  assert_float_equal(w[0], 0.799f - 0.1f * (1.005f + 2.00799f), 1e-5);
}

static void adam_first_step_moves_each_weight_by_the_learning_rate(void **state) {
  (void)state;
  kolo_train_optim_config c;
  kolo_train_optim_defaults(&c);
  c.kind = KOLO_TRAIN_ADAM, c.lr = 0.01f;
  float w[3] = {0, 0, 0}, g[3] = {5.0f, -0.001f, 100.0f}, s[6] = {0};
  assert_int_equal(kolo_train_optim_state_count(KOLO_TRAIN_ADAM, 3), 6);
  kolo_train_optim_step(&c, 0, w, g, s, 3);
  assert_float_equal(w[0], -0.01f, 1e-5);
  assert_float_equal(w[1], 0.01f, 1e-4);
  assert_float_equal(w[2], -0.01f, 1e-5);
}

static void warmup_ramps_linearly_to_the_scaled_rate(void **state) {
  (void)state;
  kolo_train_optim_config c;
  kolo_train_optim_defaults(&c);
  c.lr = 0.1f, c.lr_scale = 2.0f, c.warmup = 4;
  assert_float_equal(kolo_train_optim_lr(&c, 0), 0.05f, 1e-7);
  assert_float_equal(kolo_train_optim_lr(&c, 1), 0.10f, 1e-7);
  assert_float_equal(kolo_train_optim_lr(&c, 3), 0.20f, 1e-7);
  assert_float_equal(kolo_train_optim_lr(&c, 100), 0.20f, 1e-7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_gradients_match_finite_differences),
      cmocka_unit_test(relu_gradient_matches_finite_differences),
      cmocka_unit_test(conv_gradients_match_finite_differences_with_padding),
      cmocka_unit_test(conv_gradients_match_finite_differences_without_padding),
      cmocka_unit_test(conv_output_is_the_direct_convolution),
      cmocka_unit_test(maxpool_gradient_matches_finite_differences),
      cmocka_unit_test(softmax_xent_gradient_matches_finite_differences),
      cmocka_unit_test(softmax_xent_is_stable_for_huge_logits),
      cmocka_unit_test(mlp_gradients_match_finite_differences),
      cmocka_unit_test(lenet_gradients_match_finite_differences),
      cmocka_unit_test(lenet_has_the_classic_parameter_count),
      cmocka_unit_test(bad_model_specs_are_refused),
      cmocka_unit_test(sgd_applies_momentum_and_weight_decay),
      cmocka_unit_test(adam_first_step_moves_each_weight_by_the_learning_rate),
      cmocka_unit_test(warmup_ramps_linearly_to_the_scaled_rate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
