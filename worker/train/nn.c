/* kolo_nn: float32 layer kernels of the built-in trainer. Every matrix product
 * is one cblas_sgemm call (OpenBLAS); the rest are simple loops over NHWC data. */
#include "worker/train/nn.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

void kolo_nn_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                  const float *a, const float *b, float beta, float *c) {
  size_t lda = trans_a ? m : k;
  size_t ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
              (blasint)lda, b, (blasint)ldb, beta, c, (blasint)n);
}

/* Adds bias[cols] to each of rows rows of y. */
static void add_bias_rows(float *y, const float *bias, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    float *row = y + r * cols;
    for (size_t c = 0; c < cols; c++) row[c] += bias[c];
  }
}

/* dbias[c] = beta * dbias[c] + sum over rows of dy[r][c]. */
static void sum_rows(const float *dy, float *dbias, size_t rows, size_t cols, float beta) {
  if (beta == 0.0f) memset(dbias, 0, cols * sizeof *dbias);
  for (size_t r = 0; r < rows; r++) {
    const float *row = dy + r * cols;
    for (size_t c = 0; c < cols; c++) dbias[c] += row[c];
  }
}

void kolo_nn_dense_forward(const float *x, const float *w, const float *bias, float *y,
                           size_t batch, size_t in, size_t out) {
  kolo_nn_gemm(0, 0, batch, out, in, 1.0f, x, w, 0.0f, y);
  add_bias_rows(y, bias, batch, out);
}

void kolo_nn_dense_backward(const float *x, const float *w, const float *dy, float *dx, float *dw,
                            float *dbias, size_t batch, size_t in, size_t out, float beta) {
  kolo_nn_gemm(1, 0, in, out, batch, 1.0f, x, dy, beta, dw); /* dw = x^T dy */
  sum_rows(dy, dbias, batch, out, beta);
  if (dx) kolo_nn_gemm(0, 1, batch, in, out, 1.0f, dy, w, 0.0f, dx); /* dx = dy w^T */
}

void kolo_nn_relu_forward(const float *x, float *y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void kolo_nn_relu_backward(const float *y, const float *dy, float *dx, size_t n) {
  for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

size_t kolo_nn_conv_out_height(const kolo_nn_conv_shape *s) {
  return s->height + 2 * s->pad - s->kernel + 1;
}

size_t kolo_nn_conv_out_width(const kolo_nn_conv_shape *s) {
  return s->width + 2 * s->pad - s->kernel + 1;
}

size_t kolo_nn_conv_weight_count(const kolo_nn_conv_shape *s) {
  return s->kernel * s->kernel * s->in_channels * s->out_channels;
}

size_t kolo_nn_conv_col_size(const kolo_nn_conv_shape *s, size_t batch) {
  return batch * kolo_nn_conv_out_height(s) * kolo_nn_conv_out_width(s) * s->kernel * s->kernel *
         s->in_channels;
}

/* In-bounds kernel columns [lo, hi) for output column ox: 0 <= ox + kx - pad < width. */
static void kernel_span(const kolo_nn_conv_shape *s, size_t ox, size_t *lo, size_t *hi) {
  *lo = ox < s->pad ? s->pad - ox : 0;
  size_t limit = s->width + s->pad - ox; /* kx < limit */
  *hi = limit < s->kernel ? limit : s->kernel;
}

/* col[(b, oy, ox), (ky, kx, c)] = x[b, oy+ky-pad, ox+kx-pad, c] or 0 outside the
 * image. In NHWC the in-bounds part of one kernel row is contiguous in x. */
static void im2col(const kolo_nn_conv_shape *s, const float *x, float *col, size_t batch) {
  size_t oh = kolo_nn_conv_out_height(s), ow = kolo_nn_conv_out_width(s);
  size_t k = s->kernel, c = s->in_channels, row = k * c;
  for (size_t b = 0; b < batch; b++) {
    const float *img = x + b * s->height * s->width * c;
    for (size_t oy = 0; oy < oh; oy++) {
      for (size_t ox = 0; ox < ow; ox++) {
        size_t lo, hi;
        kernel_span(s, ox, &lo, &hi);
        for (size_t ky = 0; ky < k; ky++, col += row) {
          long iy = (long)oy + (long)ky - (long)s->pad;
          if (iy < 0 || iy >= (long)s->height) {
            for (size_t i = 0; i < row; i++) col[i] = 0.0f;
            continue;
          }
          const float *src = img + ((size_t)iy * s->width + ox + lo - s->pad) * c;
          for (size_t i = 0; i < lo * c; i++) col[i] = 0.0f;
          for (size_t i = 0; i < (hi - lo) * c; i++) col[lo * c + i] = src[i];
          for (size_t i = hi * c; i < row; i++) col[i] = 0.0f;
        }
      }
    }
  }
}

/* The adjoint of im2col: dx (zeroed first) += every column entry at its pixel. */
static void col2im(const kolo_nn_conv_shape *s, const float *dcol, float *dx, size_t batch) {
  size_t oh = kolo_nn_conv_out_height(s), ow = kolo_nn_conv_out_width(s);
  size_t k = s->kernel, c = s->in_channels, row = k * c;
  memset(dx, 0, batch * s->height * s->width * c * sizeof *dx);
  for (size_t b = 0; b < batch; b++) {
    float *img = dx + b * s->height * s->width * c;
    for (size_t oy = 0; oy < oh; oy++) {
      for (size_t ox = 0; ox < ow; ox++) {
        size_t lo, hi;
        kernel_span(s, ox, &lo, &hi);
        for (size_t ky = 0; ky < k; ky++, dcol += row) {
          long iy = (long)oy + (long)ky - (long)s->pad;
          if (iy < 0 || iy >= (long)s->height) continue;
          float *dst = img + ((size_t)iy * s->width + ox + lo - s->pad) * c;
          for (size_t i = 0; i < (hi - lo) * c; i++) dst[i] += dcol[lo * c + i];
        }
      }
    }
  }
}

void kolo_nn_conv_forward(const kolo_nn_conv_shape *s, const float *x, const float *w,
                          const float *bias, float *y, float *col, size_t batch) {
  size_t rows = batch * kolo_nn_conv_out_height(s) * kolo_nn_conv_out_width(s);
  size_t kkc = s->kernel * s->kernel * s->in_channels;
  im2col(s, x, col, batch);
  kolo_nn_gemm(0, 0, rows, s->out_channels, kkc, 1.0f, col, w, 0.0f, y);
  add_bias_rows(y, bias, rows, s->out_channels);
}

void kolo_nn_conv_backward(const kolo_nn_conv_shape *s, const float *col, const float *w,
                           const float *dy, float *dx, float *dw, float *dbias, float *dcol,
                           size_t batch, float beta) {
  size_t rows = batch * kolo_nn_conv_out_height(s) * kolo_nn_conv_out_width(s);
  size_t kkc = s->kernel * s->kernel * s->in_channels;
  kolo_nn_gemm(1, 0, kkc, s->out_channels, rows, 1.0f, col, dy, beta, dw); /* dw = col^T dy */
  sum_rows(dy, dbias, rows, s->out_channels, beta);
  if (dx) {
    kolo_nn_gemm(0, 1, rows, kkc, s->out_channels, 1.0f, dy, w, 0.0f, dcol); /* dcol = dy w^T */
    col2im(s, dcol, dx, batch);
  }
}

void kolo_nn_maxpool_forward(const float *x, float *y, size_t *argmax, size_t batch, size_t h,
                             size_t w, size_t c) {
  size_t oh = h / 2, ow = w / 2;
  for (size_t b = 0; b < batch; b++) {
    for (size_t oy = 0; oy < oh; oy++) {
      for (size_t ox = 0; ox < ow; ox++) {
        for (size_t ch = 0; ch < c; ch++) {
          size_t best = ((b * h + 2 * oy) * w + 2 * ox) * c + ch;
          for (size_t dy = 0; dy < 2; dy++) {
            for (size_t dx = 0; dx < 2; dx++) {
              size_t idx = ((b * h + 2 * oy + dy) * w + 2 * ox + dx) * c + ch;
              if (x[idx] > x[best]) best = idx;
            }
          }
          size_t o = ((b * oh + oy) * ow + ox) * c + ch;
          y[o] = x[best];
          argmax[o] = best;
        }
      }
    }
  }
}

void kolo_nn_maxpool_backward(const float *dy, const size_t *argmax, float *dx, size_t batch,
                              size_t h, size_t w, size_t c) {
  size_t n_out = batch * (h / 2) * (w / 2) * c;
  memset(dx, 0, batch * h * w * c * sizeof *dx);
  for (size_t o = 0; o < n_out; o++) dx[argmax[o]] += dy[o];
}

double kolo_nn_softmax_xent(const float *logits, const int *labels, size_t batch, size_t classes,
                            float scale, float *dlogits, size_t *correct) {
  double total = 0.0;
  size_t hits = 0;
  for (size_t b = 0; b < batch; b++) {
    const float *row = logits + b * classes;
    size_t best = 0;
    float max = -FLT_MAX;
    for (size_t c = 0; c < classes; c++) {
      if (row[c] > max) {
        max = row[c];
        best = c;
      }
    }
    if ((int)best == labels[b]) hits++;
    double sum = 0.0;
    for (size_t c = 0; c < classes; c++) sum += exp((double)(row[c] - max));
    double log_sum = log(sum);
    total += log_sum - (double)(row[labels[b]] - max);
    if (dlogits) {
      float *drow = dlogits + b * classes;
      for (size_t c = 0; c < classes; c++) {
        double p = exp((double)(row[c] - max) - log_sum);
        drow[c] = scale * (float)(p - ((int)c == labels[b] ? 1.0 : 0.0));
      }
    }
  }
  if (correct) *correct = hits;
  return batch ? total / (double)batch : 0.0;
}
