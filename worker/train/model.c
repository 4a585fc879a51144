/* kolo_train_model: layer list, activation buffers and the fused parameter /
 * gradient layout of the built-in MLP and LeNet; forward and backward passes. */
#include "worker/train/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/train/nn.h"
#include "worker/train/rng.h"

typedef enum layer_kind {
  LAYER_DENSE,
  LAYER_RELU,
  LAYER_CONV,
  LAYER_POOL,
  LAYER_FLATTEN
} layer_kind;

typedef struct layer {
  layer_kind kind;
  size_t in_size, out_size; /* floats per sample */
  size_t w_off, w_count, b_off, b_count;
  size_t fan_in;           /* for He init */
  kolo_nn_conv_shape conv; /* LAYER_CONV */
  size_t h, w, c;          /* LAYER_POOL input shape */
  float *col;              /* LAYER_CONV im2col of the last forward */
  size_t *argmax;          /* LAYER_POOL winners of the last forward */
} layer;

#define MAX_LAYERS 32

struct kolo_train_model {
  kolo_train_model_spec spec;
  size_t max_batch;
  size_t layer_count;
  layer layers[MAX_LAYERS];
  size_t param_count;
  float *params; /* bound by the caller */
  float *grads;
  float *act[MAX_LAYERS + 1];  /* act[0] = input, act[i+1] = output of layer i */
  float *dact[MAX_LAYERS + 1]; /* gradients of the same */
  float *dcol;                 /* shared conv backward scratch */
  size_t batch;                /* batch of the last forward */
  char description[128];
};

/* Appends a layer and assigns its parameter range in the fused buffer. */
static layer *add_layer(kolo_train_model *m, layer_kind kind, size_t in_size, size_t out_size,
                        size_t w_count, size_t b_count, size_t fan_in) {
  if (m->layer_count == MAX_LAYERS) return NULL;
  layer *l = &m->layers[m->layer_count++];
  memset(l, 0, sizeof *l);
  l->kind = kind;
  l->in_size = in_size;
  l->out_size = out_size;
  l->w_off = m->param_count;
  l->w_count = w_count;
  l->b_off = l->w_off + w_count;
  l->b_count = b_count;
  l->fan_in = fan_in;
  m->param_count += w_count + b_count;
  return l;
}

static int add_dense(kolo_train_model *m, size_t in, size_t out, int relu) {
  if (!add_layer(m, LAYER_DENSE, in, out, in * out, out, in)) return -1;
  if (relu && !add_layer(m, LAYER_RELU, out, out, 0, 0, 0)) return -1;
  return 0;
}

/* conv (+ReLU) + 2x2 pool over an h x w x c input; updates the shape to the pooled output. */
static int add_conv_pool(kolo_train_model *m, size_t *h, size_t *w, size_t *c, size_t oc,
                         size_t kernel, size_t pad) {
  kolo_nn_conv_shape s = {*h, *w, *c, oc, kernel, pad};
  size_t oh = kolo_nn_conv_out_height(&s), ow = kolo_nn_conv_out_width(&s);
  if (oh % 2 || ow % 2) return -1;
  layer *l = add_layer(m, LAYER_CONV, *h * *w * *c, oh * ow * oc, kolo_nn_conv_weight_count(&s), oc,
                       kernel * kernel * *c);
  if (!l) return -1;
  l->conv = s;
  if (!add_layer(m, LAYER_RELU, oh * ow * oc, oh * ow * oc, 0, 0, 0)) return -1;
  layer *p = add_layer(m, LAYER_POOL, oh * ow * oc, oh * ow * oc / 4, 0, 0, 0);
  if (!p) return -1;
  p->h = oh;
  p->w = ow;
  p->c = oc;
  *h = oh / 2;
  *w = ow / 2;
  *c = oc;
  return 0;
}

/* Builds the layer list from the spec. */
static kolo_status build_layers(kolo_train_model *m) {
  const kolo_train_model_spec *s = &m->spec;
  size_t features = s->height * s->width * s->channels;
  int len = 0;
  if (s->kind == KOLO_TRAIN_MLP) {
    size_t in = features;
    len = snprintf(m->description, sizeof m->description, "mlp:%zu", in);
    for (size_t i = 0; i < s->hidden_count; i++) {
      if (add_dense(m, in, s->hidden[i], 1)) return KOLO_ERR_INVALID_ARG;
      in = s->hidden[i];
      len += snprintf(m->description + len, sizeof m->description - (size_t)len, "-%zu", in);
      if ((size_t)len >= sizeof m->description) return KOLO_ERR_INVALID_ARG;
    }
    if (add_dense(m, in, s->classes, 0)) return KOLO_ERR_INVALID_ARG;
    snprintf(m->description + len, sizeof m->description - (size_t)len, "-%zu", s->classes);
    return KOLO_OK;
  }
  if (s->height != 28 || s->width != 28) return KOLO_ERR_INVALID_ARG;
  size_t h = s->height, w = s->width, c = s->channels;
  if (add_conv_pool(m, &h, &w, &c, 6, 5, 2)) return KOLO_ERR_INVALID_ARG;  /* 28->28->14 */
  if (add_conv_pool(m, &h, &w, &c, 16, 5, 0)) return KOLO_ERR_INVALID_ARG; /* 14->10->5 */
  if (!add_layer(m, LAYER_FLATTEN, h * w * c, h * w * c, 0, 0, 0)) return KOLO_ERR_INVALID_ARG;
  if (add_dense(m, h * w * c, 120, 1) || add_dense(m, 120, 84, 1) ||
      add_dense(m, 84, s->classes, 0)) {
    return KOLO_ERR_INVALID_ARG;
  }
  snprintf(m->description, sizeof m->description, "lenet:%zux%zux%zu-%zu", s->height, s->width,
           s->channels, s->classes);
  return KOLO_OK;
}

kolo_status kolo_train_model_create(const kolo_train_model_spec *spec, size_t max_batch,
                                    kolo_train_model **out) {
  if (!spec || !out || max_batch == 0 || spec->classes < 2 || spec->height == 0 ||
      spec->width == 0 || spec->channels == 0) {
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_status rc = KOLO_OK;
  kolo_train_model *m = calloc(1, sizeof *m);
  if (!m) return KOLO_ERR_NO_MEMORY;
  m->spec = *spec;
  m->max_batch = max_batch;
  rc = build_layers(m);
  if (rc != KOLO_OK) goto out;
  m->grads = calloc(m->param_count, sizeof *m->grads);
  if (!m->grads) {
    rc = KOLO_ERR_NO_MEMORY;
    goto out;
  }
  size_t max_col = 0;
  for (size_t i = 0; i < m->layer_count; i++) {
    layer *l = &m->layers[i];
    if (l->kind == LAYER_FLATTEN) { /* NHWC flatten is the identity on memory: alias */
      if (i == 0) {
        rc = KOLO_ERR_INVALID_ARG;
        goto out;
      }
      m->act[i + 1] = m->act[i];
      m->dact[i + 1] = m->dact[i];
      continue;
    }
    m->act[i + 1] = malloc(max_batch * l->out_size * sizeof(float));
    m->dact[i + 1] = malloc(max_batch * l->out_size * sizeof(float));
    if (!m->act[i + 1] || !m->dact[i + 1]) {
      rc = KOLO_ERR_NO_MEMORY;
      goto out;
    }
    if (l->kind == LAYER_CONV) {
      size_t col = kolo_nn_conv_col_size(&l->conv, max_batch);
      if (col > max_col) max_col = col;
      l->col = malloc(col * sizeof(float));
      if (!l->col) {
        rc = KOLO_ERR_NO_MEMORY;
        goto out;
      }
    } else if (l->kind == LAYER_POOL) {
      l->argmax = malloc(max_batch * l->out_size * sizeof(size_t));
      if (!l->argmax) {
        rc = KOLO_ERR_NO_MEMORY;
        goto out;
      }
    }
  }
  if (max_col) {
    m->dcol = malloc(max_col * sizeof(float));
    if (!m->dcol) rc = KOLO_ERR_NO_MEMORY;
  }
out:
  if (rc != KOLO_OK) {
    kolo_train_model_destroy(m);
    return rc;
  }
  *out = m;
  return KOLO_OK;
}

void kolo_train_model_destroy(kolo_train_model *m) {
  if (!m) return;
  for (size_t i = 0; i < m->layer_count; i++) {
    if (m->layers[i].kind != LAYER_FLATTEN) {
      free(m->act[i + 1]);
      free(m->dact[i + 1]);
    }
    free(m->layers[i].col);
    free(m->layers[i].argmax);
  }
  free(m->dcol);
  free(m->grads);
  free(m);
}

size_t kolo_train_model_param_count(const kolo_train_model *m) {
  return m->param_count;
}
void kolo_train_model_bind(kolo_train_model *m, float *params) {
  m->params = params;
}
float *kolo_train_model_grads(kolo_train_model *m) {
  return m->grads;
}
const char *kolo_train_model_describe(const kolo_train_model *m) {
  return m->description;
}
const float *kolo_train_model_logits(const kolo_train_model *m) {
  return m->act[m->layer_count];
}

/* The layers that have parameters, in order: 2 tensors each. */
static const layer *parameter_layer(const kolo_train_model *m, size_t index, size_t *number) {
  size_t seen = 0;
  for (size_t l = 0; l < m->layer_count; l++) {
    if (m->layers[l].w_count + m->layers[l].b_count == 0) continue;
    if (seen++ == index) {
      *number = l;
      return &m->layers[l];
    }
  }
  return NULL;
}

size_t kolo_train_model_tensor_count(const kolo_train_model *m) {
  size_t count = 0;
  for (size_t l = 0; l < m->layer_count; l++) {
    count += m->layers[l].w_count + m->layers[l].b_count > 0 ? 2 : 0;
  }
  return count;
}

kolo_status kolo_train_model_tensor(const kolo_train_model *m, size_t i, char *name, size_t length,
                                    size_t *offset, size_t *count) {
  size_t number = 0;
  const layer *l = parameter_layer(m, i / 2, &number);
  if (l == NULL) return KOLO_ERR_INVALID_ARG;
  int bias = i % 2 == 1;
  snprintf(name, length, "layer%zu.%s", number, bias ? "bias" : "weight");
  *offset = bias ? l->b_off : l->w_off;
  *count = bias ? l->b_count : l->w_count;
  return KOLO_OK;
}

void kolo_train_model_init_params(kolo_train_model *m, uint64_t seed) {
  kolo_train_rng rng;
  kolo_train_rng_seed(&rng, seed ^ 0x6B6F6C6F696E6974ull);
  for (size_t i = 0; i < m->layer_count; i++) {
    layer *l = &m->layers[i];
    if (!l->w_count) continue;
    double std = sqrt(2.0 / (double)l->fan_in);
    for (size_t j = 0; j < l->w_count; j++) {
      m->params[l->w_off + j] = (float)(std * kolo_train_rng_normal(&rng));
    }
    memset(m->params + l->b_off, 0, l->b_count * sizeof(float));
  }
}

/* Runs every layer on batch samples; act[0] aliases x. */
static void forward(kolo_train_model *m, const float *x, size_t batch) {
  m->act[0] = (float *)x;
  m->batch = batch;
  for (size_t i = 0; i < m->layer_count; i++) {
    layer *l = &m->layers[i];
    const float *in = m->act[i];
    float *out = m->act[i + 1];
    const float *w = m->params + l->w_off, *b = m->params + l->b_off;
    switch (l->kind) {
      case LAYER_DENSE:
        kolo_nn_dense_forward(in, w, b, out, batch, l->in_size, l->out_size);
        break;
      case LAYER_RELU:
        kolo_nn_relu_forward(in, out, batch * l->out_size);
        break;
      case LAYER_CONV:
        kolo_nn_conv_forward(&l->conv, in, w, b, out, l->col, batch);
        break;
      case LAYER_POOL:
        kolo_nn_maxpool_forward(in, out, l->argmax, batch, l->h, l->w, l->c);
        break;
      case LAYER_FLATTEN:
        m->act[i + 1] = m->act[i];
        break;
    }
  }
}

/* Back-propagates dact[layer_count] (already set) through every layer. */
static void backward(kolo_train_model *m, float beta) {
  size_t batch = m->batch;
  for (size_t i = m->layer_count; i-- > 0;) {
    layer *l = &m->layers[i];
    const float *dy = m->dact[i + 1];
    float *dx = i == 0 ? NULL : m->dact[i];
    const float *w = m->params + l->w_off;
    float *dw = m->grads + l->w_off, *db = m->grads + l->b_off;
    switch (l->kind) {
      case LAYER_DENSE:
        kolo_nn_dense_backward(m->act[i], w, dy, dx, dw, db, batch, l->in_size, l->out_size, beta);
        break;
      case LAYER_RELU:
        if (dx) kolo_nn_relu_backward(m->act[i + 1], dy, dx, batch * l->out_size);
        break;
      case LAYER_CONV:
        kolo_nn_conv_backward(&l->conv, l->col, w, dy, dx, dw, db, m->dcol, batch, beta);
        break;
      case LAYER_POOL:
        if (dx) kolo_nn_maxpool_backward(dy, l->argmax, dx, batch, l->h, l->w, l->c);
        break;
      case LAYER_FLATTEN: /* dact[i + 1] aliases dact[i] */
        break;
    }
  }
}

double kolo_train_model_train_batch(kolo_train_model *m, const float *x, const int *labels,
                                    size_t batch, float grad_scale, int accumulate,
                                    size_t *correct) {
  if (batch == 0) {
    if (!accumulate) memset(m->grads, 0, m->param_count * sizeof(float));
    if (correct) *correct = 0;
    return 0.0;
  }
  forward(m, x, batch);
  double loss = kolo_nn_softmax_xent(m->act[m->layer_count], labels, batch, m->spec.classes,
                                     grad_scale, m->dact[m->layer_count], correct);
  backward(m, accumulate ? 1.0f : 0.0f);
  return loss;
}

double kolo_train_model_evaluate(kolo_train_model *m, const float *x, const int *labels,
                                 size_t batch, size_t *correct) {
  if (batch == 0) {
    if (correct) *correct = 0;
    return 0.0;
  }
  forward(m, x, batch);
  return kolo_nn_softmax_xent(m->act[m->layer_count], labels, batch, m->spec.classes, 0.0f, NULL,
                              correct);
}
