/* kolo_train_optim: SGD with momentum/weight decay and Adam, one pass over the
 * fused buffers per step, plus the warm-up / worker-scaling schedule. */
#include "worker/train/optim.h"

#include <math.h>
#include <string.h>

void kolo_train_optim_defaults(kolo_train_optim_config *c) {
  memset(c, 0, sizeof *c);
  c->kind = KOLO_TRAIN_SGD;
  c->lr = 0.02f;
  c->lr_scale = 1.0f;
  c->momentum = 0.9f;
  c->beta1 = 0.9f;
  c->beta2 = 0.999f;
  c->epsilon = 1e-8f;
}

kolo_status kolo_train_optim_parse(const char *name, kolo_train_optim_kind *kind) {
  if (!name || !kind) return KOLO_ERR_INVALID_ARG;
  if (strcmp(name, "sgd") == 0) {
    *kind = KOLO_TRAIN_SGD;
  } else if (strcmp(name, "adam") == 0) {
    *kind = KOLO_TRAIN_ADAM;
  } else {
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

const char *kolo_train_optim_name(kolo_train_optim_kind kind) {
  return kind == KOLO_TRAIN_ADAM ? "adam" : "sgd";
}

size_t kolo_train_optim_state_count(kolo_train_optim_kind kind, size_t n) {
  return kind == KOLO_TRAIN_ADAM ? 2 * n : n;
}

float kolo_train_optim_lr(const kolo_train_optim_config *c, uint64_t step) {
  float lr = c->lr * c->lr_scale;
  if (c->warmup > 0 && step < c->warmup) lr *= (float)(step + 1) / (float)c->warmup;
  return lr;
}

void kolo_train_optim_step(const kolo_train_optim_config *c, uint64_t step, float *params,
                           const float *grads, float *state, size_t n) {
  float lr = kolo_train_optim_lr(c, step);
  float wd = c->weight_decay;
  if (c->kind == KOLO_TRAIN_SGD) {
    float mu = c->momentum;
    float *v = state;
    for (size_t i = 0; i < n; i++) {
      float g = grads[i] + wd * params[i];
      v[i] = mu * v[i] + g;
      params[i] -= lr * v[i];
    }
    return;
  }
  float b1 = c->beta1, b2 = c->beta2;
  float *m = state, *v = state + n;
  double t = (double)step + 1.0;
  float corr1 = (float)(1.0 - pow((double)b1, t));
  float corr2 = (float)(1.0 - pow((double)b2, t));
  float step_size = lr / corr1;
  float sqrt_corr2 = sqrtf(corr2);
  for (size_t i = 0; i < n; i++) {
    float g = grads[i] + wd * params[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    params[i] -= step_size * m[i] / (sqrtf(v[i]) / sqrt_corr2 + c->epsilon);
  }
}
