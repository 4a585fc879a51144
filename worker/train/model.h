/* kolo_train_model: the built-in models (an MLP and LeNet) as a list of layers
 * over one fused parameter buffer and one fused gradient buffer, so a SYNC step
 * all-reduces every gradient in a single call. */
#ifndef KOLO_TRAIN_MODEL_H
#define KOLO_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

#define KOLO_TRAIN_MAX_HIDDEN 8

typedef enum kolo_train_model_kind {
  KOLO_TRAIN_MLP = 0,   /* dense-ReLU ... dense */
  KOLO_TRAIN_LENET = 1, /* conv5x5x6(pad 2)-pool-conv5x5x16-pool-dense120-dense84-dense */
} kolo_train_model_kind;

typedef struct kolo_train_model_spec {
  kolo_train_model_kind kind;
  size_t height, width, channels; /* input image (an MLP sees height*width*channels features) */
  size_t classes;
  size_t hidden[KOLO_TRAIN_MAX_HIDDEN]; /* MLP hidden layer widths */
  size_t hidden_count;
} kolo_train_model_spec;

typedef struct kolo_train_model kolo_train_model;

/* Fills spec->kind and the hidden sizes from "mlp"/"lenet" and "256,128"
 * (hidden may be NULL or "" for none). Input shape and classes are left alone. */
kolo_status kolo_train_model_spec_parse(const char *model, const char *hidden,
                                        kolo_train_model_spec *spec);

/* Builds the layers for batches of up to max_batch samples. The model has no
 * parameters until kolo_train_model_bind gives it a buffer. LeNet needs a
 * 28x28 input (any channel count). */
kolo_status kolo_train_model_create(const kolo_train_model_spec *spec, size_t max_batch,
                                    kolo_train_model **out);
void kolo_train_model_destroy(kolo_train_model *model);

/* Number of float parameters (= number of gradients). */
size_t kolo_train_model_param_count(const kolo_train_model *model);
/* Points the model at params (param_count floats, owned by the caller, e.g. the training state). */
void kolo_train_model_bind(kolo_train_model *model, float *params);
/* The fused gradient buffer (param_count floats), same layout as the parameters. */
float *kolo_train_model_grads(kolo_train_model *model);
/* "mlp:784-256-128-10" / "lenet:28x28x1-10": identifies the parameter layout. */
const char *kolo_train_model_describe(const kolo_train_model *model);

/* The parameter tensors (each layer's weight, then its bias), for collectives
 * that name them: how many, and tensor i's name ("layer2.weight"), offset into
 * the fused buffers and element count. KOLO_ERR_INVALID_ARG past the end. */
size_t kolo_train_model_tensor_count(const kolo_train_model *model);
kolo_status kolo_train_model_tensor(const kolo_train_model *model, size_t i, char *name,
                                    size_t length, size_t *offset, size_t *count);

/* He-normal weights and zero biases into the bound parameters, from seed. */
void kolo_train_model_init_params(kolo_train_model *model, uint64_t seed);

/* Forward + softmax cross-entropy + backward on batch samples x (batch *
 * features floats) with labels. The gradient is that of grad_scale * (sum of the
 * per-sample losses): pass 1/batch for the mean, 1/(batch*k) when accumulating k
 * micro-batches. accumulate = 0 overwrites the gradient buffer, 1 adds to it.
 * Returns the mean loss; *correct (may be NULL) gets the number of hits. */
double kolo_train_model_train_batch(kolo_train_model *model, const float *x, const int *labels,
                                    size_t batch, float grad_scale, int accumulate,
                                    size_t *correct);

/* Forward only: mean loss and number of correct predictions. */
double kolo_train_model_evaluate(kolo_train_model *model, const float *x, const int *labels,
                                 size_t batch, size_t *correct);

/* The logits of the last forward pass (batch x classes). */
const float *kolo_train_model_logits(const kolo_train_model *model);

#endif
