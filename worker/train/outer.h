/* kolo_train_outer: the pure arithmetic of LOCAL_SGD and DILOCO (no
 * communication): the outer optimizer's step on the averaged pseudo-gradient
 * (SGD with heavy-ball or Nesterov momentum, as torch.optim.SGD defines it)
 * and the encodings of the outer gradient on the wire (int8 with a float32
 * scale per chunk of KOLO_TRAIN_INT8_CHUNK values). rounds.c drives them. */
#ifndef KOLO_TRAIN_OUTER_H
#define KOLO_TRAIN_OUTER_H

#include <stddef.h>
#include <stdint.h>

#define KOLO_TRAIN_INT8_CHUNK 256

/* One outer step over n values, grad = start - average(params) (the
 * pseudo-gradient): m <- mu m + grad; update = grad + mu m (Nesterov) or m;
 * params <- start - lr update; start <- params (the next round's start).
 * lr 1, mu 0 makes params the average itself: plain local SGD. */
void kolo_train_outer_step(float *params, float *start, float *momentum, const float *grad,
                           size_t n, float lr, float mu, int nesterov);

/* Bytes of n values in the int8 encoding: one float32 scale per chunk, then
 * the n int8 values. */
size_t kolo_train_int8_size(size_t n);

/* Encodes n values: each chunk's scale is its largest magnitude / 127 and a
 * value v becomes round(v / scale) (a chunk of zeros has scale 0). The error
 * of a value is at most half its chunk's scale. */
void kolo_train_int8_encode(const float *values, size_t n, uint8_t *out);

/* acc[i] += weight * (the i-th encoded value), for n values. */
void kolo_train_int8_decode_add(const uint8_t *in, size_t n, float weight, float *acc);

#endif
