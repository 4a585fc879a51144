/* kolo_train_optim: SGD (momentum, weight decay) and Adam over the fused
 * parameter buffer, with linear learning-rate warm-up and scaling by the number
 * of workers. The optimizer's state lives in the caller's buffer (the training
 * state), so it is checkpointed and broadcast with the weights. */
#ifndef KOLO_TRAIN_OPTIM_H
#define KOLO_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

typedef enum kolo_train_optim_kind {
  KOLO_TRAIN_SGD = 0,
  KOLO_TRAIN_ADAM = 1,
} kolo_train_optim_kind;

typedef struct kolo_train_optim_config {
  kolo_train_optim_kind kind;
  float lr;           /* base learning rate (one worker) */
  float lr_scale;     /* multiplier, e.g. the number of workers (Goyal et al./Horovod); 1 = none */
  uint64_t warmup;    /* steps of linear warm-up to lr * lr_scale; 0 = none */
  float momentum;     /* SGD */
  float weight_decay; /* L2, added to the gradient (both optimizers) */
  float beta1, beta2, epsilon; /* Adam */
} kolo_train_optim_config;

/* Defaults: SGD, lr 0.02, scale 1, no warm-up, momentum 0.9, no decay, Adam 0.9/0.999/1e-8. */
void kolo_train_optim_defaults(kolo_train_optim_config *config);

/* "sgd" or "adam". */
kolo_status kolo_train_optim_parse(const char *name, kolo_train_optim_kind *kind);
const char *kolo_train_optim_name(kolo_train_optim_kind kind);

/* Floats of optimizer state for n parameters (SGD: velocity n; Adam: m and v, 2n). */
size_t kolo_train_optim_state_count(kolo_train_optim_kind kind, size_t n);

/* Learning rate at 0-based step: lr * lr_scale * min(1, (step + 1) / warmup). */
float kolo_train_optim_lr(const kolo_train_optim_config *config, uint64_t step);

/* Applies one update at 0-based step to params from grads, using and updating
 * state (state_count floats, zero at step 0). grads is left unchanged. */
void kolo_train_optim_step(const kolo_train_optim_config *config, uint64_t step, float *params,
                           const float *grads, float *state, size_t n);

#endif
