/* Implementation of outer.h. */
#include "worker/train/outer.h"

#include <math.h>
#include <string.h>

void kolo_train_outer_step(float *params, float *start, float *momentum, const float *grad,
                           size_t n, float lr, float mu, int nesterov) {
  for (size_t i = 0; i < n; i++) {
    float g = grad[i];
    float m = mu * momentum[i] + g;
    momentum[i] = m;
    float update = nesterov ? g + mu * m : m;
    float p = start[i] - lr * update;
    params[i] = p;
    start[i] = p;
  }
}

static size_t chunks(size_t n) {
  return (n + KOLO_TRAIN_INT8_CHUNK - 1) / KOLO_TRAIN_INT8_CHUNK;
}

size_t kolo_train_int8_size(size_t n) {
  return chunks(n) * sizeof(float) + n;
}

void kolo_train_int8_encode(const float *values, size_t n, uint8_t *out) {
  size_t c = chunks(n);
  int8_t *q = (int8_t *)(out + c * sizeof(float));
  for (size_t k = 0; k < c; k++) {
    size_t begin = k * KOLO_TRAIN_INT8_CHUNK;
    size_t end = begin + KOLO_TRAIN_INT8_CHUNK < n ? begin + KOLO_TRAIN_INT8_CHUNK : n;
    float top = 0.0f;
    for (size_t i = begin; i < end; i++) {
      float a = fabsf(values[i]);
      if (a > top) top = a;
    }
    float scale = top / 127.0f;
    memcpy(out + k * sizeof(float), &scale, sizeof scale);
    float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (size_t i = begin; i < end; i++) {
      float v = rintf(values[i] * inverse);
      if (v > 127.0f) v = 127.0f;
      if (v < -127.0f) v = -127.0f;
      q[i] = (int8_t)v;
    }
  }
}

void kolo_train_int8_decode_add(const uint8_t *in, size_t n, float weight, float *acc) {
  size_t c = chunks(n);
  const int8_t *q = (const int8_t *)(in + c * sizeof(float));
  for (size_t k = 0; k < c; k++) {
    size_t begin = k * KOLO_TRAIN_INT8_CHUNK;
    size_t end = begin + KOLO_TRAIN_INT8_CHUNK < n ? begin + KOLO_TRAIN_INT8_CHUNK : n;
    float scale;
    memcpy(&scale, in + k * sizeof(float), sizeof scale);
    float s = scale * weight;
    for (size_t i = begin; i < end; i++) acc[i] += s * (float)q[i];
  }
}
