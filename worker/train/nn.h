/* kolo_nn: the float32 layer kernels of the built-in trainer (dense, ReLU,
 * conv2d via im2col + GEMM, 2x2 max-pool, softmax cross-entropy). Tensors are
 * row-major, images NHWC; every matrix product goes through cblas_sgemm. */
#ifndef KOLO_TRAIN_NN_H
#define KOLO_TRAIN_NN_H

#include <stddef.h>

/* C[m x n] = alpha * op(A) * op(B) + beta * C, row-major, the one GEMM all layers use. */
void kolo_nn_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                  const float *a, const float *b, float beta, float *c);

/* Dense: y[batch x out] = x[batch x in] * w[in x out] + bias[out]. */
void kolo_nn_dense_forward(const float *x, const float *w, const float *bias, float *y,
                           size_t batch, size_t in, size_t out);
/* Gradients of a dense layer. dw, dbias are overwritten (beta 0) or added to (beta 1,
 * gradient accumulation). dx may be NULL (first layer). */
void kolo_nn_dense_backward(const float *x, const float *w, const float *dy, float *dx, float *dw,
                            float *dbias, size_t batch, size_t in, size_t out, float beta);

/* ReLU over n values, y may equal x. Backward: dx = dy where y > 0 (dx may equal dy). */
void kolo_nn_relu_forward(const float *x, float *y, size_t n);
void kolo_nn_relu_backward(const float *y, const float *dy, float *dx, size_t n);

/* Shape of a square-kernel, stride-1 convolution over NHWC images. */
typedef struct kolo_nn_conv_shape {
  size_t height, width, in_channels; /* input image */
  size_t out_channels, kernel, pad;  /* kernel x kernel filters, zero padding on each side */
} kolo_nn_conv_shape;

size_t kolo_nn_conv_out_height(const kolo_nn_conv_shape *s);
size_t kolo_nn_conv_out_width(const kolo_nn_conv_shape *s);
/* Floats of im2col scratch needed for batch images: batch*oh*ow * kernel*kernel*in. */
size_t kolo_nn_conv_col_size(const kolo_nn_conv_shape *s, size_t batch);
/* Weights are [kernel*kernel*in_channels x out_channels] (rows ordered kh, kw, c). */
size_t kolo_nn_conv_weight_count(const kolo_nn_conv_shape *s);

/* y[batch, oh, ow, oc] = im2col(x) * w + bias. col is scratch of conv_col_size
 * floats; it keeps im2col(x) for the backward pass. */
void kolo_nn_conv_forward(const kolo_nn_conv_shape *s, const float *x, const float *w,
                          const float *bias, float *y, float *col, size_t batch);
/* Gradients from dy given col from the forward pass. dw/dbias overwritten
 * (beta 0) or accumulated (beta 1). dx (may be NULL) is overwritten; it uses
 * dcol, scratch of conv_col_size floats. */
void kolo_nn_conv_backward(const kolo_nn_conv_shape *s, const float *col, const float *w,
                           const float *dy, float *dx, float *dw, float *dbias, float *dcol,
                           size_t batch, float beta);

/* 2x2, stride 2 max-pool over NHWC [batch, h, w, c] (h and w even). argmax
 * (batch*h/2*w/2*c entries) records the winning input index for backward. */
void kolo_nn_maxpool_forward(const float *x, float *y, size_t *argmax, size_t batch, size_t h,
                             size_t w, size_t c);
/* dx (batch*h*w*c) is overwritten: dy routed to the winners, 0 elsewhere. */
void kolo_nn_maxpool_backward(const float *dy, const size_t *argmax, float *dx, size_t batch,
                              size_t h, size_t w, size_t c);

/* Mean softmax cross-entropy of logits [batch x classes] against labels, and
 * dlogits = scale * (softmax - onehot) (scale is usually 1/batch). Returns the
 * mean loss. dlogits may be NULL (evaluation). correct (may be NULL) receives
 * the number of rows whose arg-max equals the label. */
double kolo_nn_softmax_xent(const float *logits, const int *labels, size_t batch, size_t classes,
                            float scale, float *dlogits, size_t *correct);

#endif
