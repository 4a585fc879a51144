/* kolo_train_data: loaders for IDX (zlib), CSV and LIBSVM files and the seeded
 * synthetic set; each validates the whole file before handing out a dataset. */
#include "worker/train/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/log.h"
#include "worker/train/rng.h"

#define LOG_TAG "train"
/* LIBSVM rows are stored dense, so the widest index sets every row's size (256 KiB here) */
#define LIBSVM_MAX_FEATURES 65536

struct kolo_train_dataset {
  size_t count, features, classes;
  size_t height, width, channels;
  uint8_t *u8; /* IDX pixels (scaled by 1/255 on gather), or NULL */
  float *f32;  /* float features, or NULL */
  int *labels;
};

/* Allocates an empty dataset of count samples with float or byte storage. */
static kolo_status dataset_alloc(size_t count, size_t features, int bytes,
                                 kolo_train_dataset **out) {
  kolo_train_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) return KOLO_ERR_NO_MEMORY;
  ds->count = count;
  ds->features = features;
  ds->height = 1;
  ds->width = features;
  ds->channels = 1;
  if (features == 784) {
    ds->height = 28;
    ds->width = 28;
  }
  size_t cells = count * features;
  if (bytes) {
    ds->u8 = malloc(cells ? cells : 1);
  } else {
    ds->f32 = malloc((cells ? cells : 1) * sizeof(float));
  }
  ds->labels = malloc((count ? count : 1) * sizeof(int));
  if ((bytes ? (void *)ds->u8 : (void *)ds->f32) == NULL || !ds->labels) {
    kolo_train_data_destroy(ds);
    return KOLO_ERR_NO_MEMORY;
  }
  *out = ds;
  return KOLO_OK;
}

void kolo_train_data_destroy(kolo_train_dataset *ds) {
  if (!ds) return;
  free(ds->u8);
  free(ds->f32);
  free(ds->labels);
  free(ds);
}

size_t kolo_train_data_count(const kolo_train_dataset *ds) {
  return ds->count;
}
size_t kolo_train_data_features(const kolo_train_dataset *ds) {
  return ds->features;
}
size_t kolo_train_data_classes(const kolo_train_dataset *ds) {
  return ds->classes;
}

void kolo_train_data_shape(const kolo_train_dataset *ds, size_t *height, size_t *width,
                           size_t *channels) {
  *height = ds->height;
  *width = ds->width;
  *channels = ds->channels;
}

void kolo_train_data_gather(const kolo_train_dataset *ds, const size_t *index, size_t n, float *x,
                            int *y) {
  size_t f = ds->features;
  for (size_t i = 0; i < n; i++) {
    size_t s = index[i];
    if (ds->u8) {
      const uint8_t *src = ds->u8 + s * f;
      for (size_t j = 0; j < f; j++) x[i * f + j] = (float)src[j] * (1.0f / 255.0f);
    } else {
      memcpy(x + i * f, ds->f32 + s * f, f * sizeof(float));
    }
    y[i] = ds->labels[s];
  }
}

/* Sets classes = the largest label + 1. */
static void count_classes(kolo_train_dataset *ds) {
  int max = 0;
  for (size_t i = 0; i < ds->count; i++) {
    if (ds->labels[i] > max) max = ds->labels[i];
  }
  ds->classes = (size_t)max + 1;
}

/* ---- IDX ---- */

/* Reads exactly length bytes from a gz stream; a short read is a truncated file. */
static kolo_status gz_read_exact(gzFile gz, const char *path, void *buffer, size_t length) {
  uint8_t *p = buffer;
  while (length > 0) {
    unsigned chunk = length > (1u << 30) ? (1u << 30) : (unsigned)length;
    int n = gzread(gz, p, chunk);
    if (n <= 0) {
      int zerr = 0;
      const char *msg = gzerror(gz, &zerr);
      if (n < 0 || (zerr != Z_OK && zerr != Z_STREAM_END)) {
        KOLO_LOGE(LOG_TAG, "%s: read error: %s", path, msg);
        return zerr == Z_ERRNO ? KOLO_ERR_IO : KOLO_ERR_PARSE;
      }
      KOLO_LOGE(LOG_TAG, "%s: truncated (file ends early)", path);
      return KOLO_ERR_PARSE;
    }
    p += n;
    length -= (size_t)n;
  }
  return KOLO_OK;
}

/* Reads exactly length bytes into a new buffer (*out, caller frees) that grows as the
 * data arrives, so a header that claims more than the file holds costs only what the
 * file holds before it is found truncated (a 30-byte file once asked for 8 GB). */
static kolo_status gz_read_grown(gzFile gz, const char *path, size_t length, uint8_t **out) {
  size_t cap = length < (1u << 20) ? length : (1u << 20), used = 0;
  uint8_t *buf = malloc(cap ? cap : 1);
  if (!buf) return KOLO_ERR_NO_MEMORY;
  kolo_status rc = KOLO_OK;
  while (used < length) {
    if (used == cap) {
      size_t grown_cap = cap * 2 < length ? cap * 2 : length;
      uint8_t *grown = realloc(buf, grown_cap);
      if (!grown) {
        rc = KOLO_ERR_NO_MEMORY;
        break;
      }
      buf = grown;
      cap = grown_cap;
    }
    rc = gz_read_exact(gz, path, buf + used, cap - used);
    if (rc != KOLO_OK) break;
    used = cap;
  }
  if (rc != KOLO_OK) {
    free(buf);
    return rc;
  }
  *out = buf;
  return KOLO_OK;
}

/* Opens an IDX file, checks its magic (type u8, ndims), and reads its dims. */
static kolo_status idx_open(const char *path, unsigned ndims, uint32_t *dims, gzFile *out) {
  if (access(path, R_OK) != 0) {
    KOLO_LOGE(LOG_TAG, "%s: %s", path, strerror(errno));
    return errno == ENOENT ? KOLO_ERR_NOT_FOUND : KOLO_ERR_IO;
  }
  gzFile gz = gzopen(path, "rb");
  if (!gz) {
    KOLO_LOGE(LOG_TAG, "%s: cannot open", path);
    return KOLO_ERR_IO;
  }
  gzbuffer(gz, 1 << 17);
  uint8_t header[4];
  kolo_status rc = gz_read_exact(gz, path, header, sizeof header);
  if (rc != KOLO_OK) goto fail;
  if (header[0] != 0 || header[1] != 0 || header[2] != 0x08 || header[3] != ndims) {
    KOLO_LOGE(LOG_TAG, "%s: wrong magic %02x%02x%02x%02x (want 000008%02x, an IDX u8 file)", path,
              header[0], header[1], header[2], header[3], ndims);
    rc = KOLO_ERR_PARSE;
    goto fail;
  }
  for (unsigned i = 0; i < ndims; i++) {
    uint8_t b[4];
    rc = gz_read_exact(gz, path, b, sizeof b);
    if (rc != KOLO_OK) goto fail;
    dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
  }
  *out = gz;
  return KOLO_OK;
fail:
  gzclose(gz);
  return rc;
}

kolo_status kolo_train_data_load_idx(const char *images_path, const char *labels_path,
                                     kolo_train_dataset **out) {
  if (!images_path || !labels_path || !out) return KOLO_ERR_INVALID_ARG;
  gzFile images = NULL, labels = NULL;
  kolo_train_dataset *ds = NULL;
  uint8_t *raw_labels = NULL, *raw_pixels = NULL;
  uint32_t idims[3], ldims[1];
  kolo_status rc = idx_open(images_path, 3, idims, &images);
  if (rc != KOLO_OK) goto out;
  rc = idx_open(labels_path, 1, ldims, &labels);
  if (rc != KOLO_OK) goto out;
  if (idims[0] != ldims[0] || idims[1] == 0 || idims[2] == 0 ||
      (uint64_t)idims[0] * idims[1] * idims[2] > (1ull << 34)) {
    KOLO_LOGE(LOG_TAG, "%s / %s: %u images of %ux%u but %u labels", images_path, labels_path,
              idims[0], idims[1], idims[2], ldims[0]);
    rc = KOLO_ERR_PARSE;
    goto out;
  }
  /* read first, allocate after: memory follows the data the files really hold */
  rc = gz_read_grown(labels, labels_path, ldims[0], &raw_labels);
  if (rc != KOLO_OK) goto out;
  rc = gz_read_grown(images, images_path, (size_t)idims[0] * idims[1] * idims[2], &raw_pixels);
  if (rc != KOLO_OK) goto out;
  rc = dataset_alloc(idims[0], (size_t)idims[1] * idims[2], 1, &ds);
  if (rc != KOLO_OK) goto out;
  ds->height = idims[1];
  ds->width = idims[2];
  memcpy(ds->u8, raw_pixels, ds->count * ds->features);
  for (size_t i = 0; i < ds->count; i++) ds->labels[i] = raw_labels[i];
  count_classes(ds);
out:
  free(raw_labels);
  free(raw_pixels);
  if (images) gzclose(images);
  if (labels) gzclose(labels);
  if (rc != KOLO_OK) {
    kolo_train_data_destroy(ds);
    return rc;
  }
  *out = ds;
  return KOLO_OK;
}

/* Writes dir/<prefix>-<kind>-ubyte(.gz) into buf: the .gz name if it exists, else the plain one. */
static void idx_path(char *buf, size_t len, const char *dir, const char *prefix, const char *kind) {
  snprintf(buf, len, "%s/%s-%s-ubyte.gz", dir, prefix, kind);
  if (access(buf, F_OK) == 0) return;
  snprintf(buf, len, "%s/%s-%s-ubyte", dir, prefix, kind);
}

kolo_status kolo_train_data_load_idx_dir(const char *dir, const char *prefix,
                                         kolo_train_dataset **out) {
  char images[4096], labels[4096];
  idx_path(images, sizeof images, dir, prefix, "images-idx3");
  idx_path(labels, sizeof labels, dir, prefix, "labels-idx1");
  return kolo_train_data_load_idx(images, labels, out);
}

/* ---- CSV and LIBSVM ---- */

/* A growable sample table used while parsing text files. */
typedef struct table {
  float *x;
  int *y;
  size_t count, cap, features;
} table;

/* Appends one row (features floats, already validated). */
static kolo_status table_push(table *t, const float *row, int label) {
  if (t->count == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    float *x = realloc(t->x, cap * t->features * sizeof(float));
    if (!x) return KOLO_ERR_NO_MEMORY;
    t->x = x;
    int *y = realloc(t->y, cap * sizeof(int));
    if (!y) return KOLO_ERR_NO_MEMORY;
    t->y = y;
    t->cap = cap;
  }
  memcpy(t->x + t->count * t->features, row, t->features * sizeof(float));
  t->y[t->count++] = label;
  return KOLO_OK;
}

/* Moves a filled table into a new dataset. */
static kolo_status table_finish(table *t, const char *path, kolo_train_dataset **out) {
  if (t->count == 0) {
    KOLO_LOGE(LOG_TAG, "%s: no samples", path);
    return KOLO_ERR_PARSE;
  }
  kolo_train_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) return KOLO_ERR_NO_MEMORY;
  ds->count = t->count;
  ds->features = t->features;
  ds->height = 1;
  ds->width = t->features;
  ds->channels = 1;
  if (t->features == 784) {
    ds->height = 28;
    ds->width = 28;
  }
  ds->f32 = t->x;
  ds->labels = t->y;
  t->x = NULL;
  t->y = NULL;
  count_classes(ds);
  *out = ds;
  return KOLO_OK;
}

/* Parses a class label: an integer >= 0 (or -1 when allow_minus_one, mapped to 0). */
static int parse_label(const char *s, char **end, int allow_minus_one, int *label) {
  errno = 0;
  double v = strtod(s, end);
  if (*end == s || errno || v != floor(v) || v > 1e6) return -1;
  if (v == -1.0 && allow_minus_one) {
    *label = 0;
    return 0;
  }
  if (v < 0) return -1;
  *label = (int)v;
  return 0;
}

/* Reads the next line of any length into *line (grown as needed); 0 at EOF. */
static ssize_t read_line(FILE *f, char **line, size_t *cap) {
  return getline(line, cap, f);
}

kolo_status kolo_train_data_load_csv(const char *path, kolo_train_dataset **out) {
  if (!path || !out) return KOLO_ERR_INVALID_ARG;
  FILE *f = fopen(path, "r");
  if (!f) {
    KOLO_LOGE(LOG_TAG, "%s: %s", path, strerror(errno));
    return errno == ENOENT ? KOLO_ERR_NOT_FOUND : KOLO_ERR_IO;
  }
  table t = {0};
  float *row = NULL;
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  kolo_status rc = KOLO_OK;
  ssize_t len;
  while ((len = read_line(f, &line, &cap)) > 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (len == 0) continue;
    if (t.features ==
        0) { /* first data line fixes the width; a non-numeric first line is a header */
      char *end;
      strtod(line, &end);
      if (end == line && lineno == 1) continue;
      size_t fields = 1;
      for (char *p = line; *p; p++) fields += *p == ',';
      if (fields < 2) {
        KOLO_LOGE(LOG_TAG, "%s:%zu: need a label and at least one feature", path, lineno);
        rc = KOLO_ERR_PARSE;
        goto out;
      }
      t.features = fields - 1;
      row = malloc(t.features * sizeof(float));
      if (!row) {
        rc = KOLO_ERR_NO_MEMORY;
        goto out;
      }
    }
    char *p = line, *end;
    int label;
    if (parse_label(p, &end, 0, &label) || (*end != ',')) {
      KOLO_LOGE(LOG_TAG, "%s:%zu: bad label (want an integer >= 0 followed by ',')", path, lineno);
      rc = KOLO_ERR_PARSE;
      goto out;
    }
    p = end + 1;
    for (size_t j = 0; j < t.features; j++) {
      errno = 0;
      row[j] = strtof(p, &end);
      int last = j + 1 == t.features;
      if (end != p && !errno && !last && *end == 0) {
        KOLO_LOGE(LOG_TAG, "%s:%zu: only %zu features, want %zu", path, lineno, j + 1, t.features);
        rc = KOLO_ERR_PARSE;
        goto out;
      }
      if (end == p || errno || !isfinite(row[j]) || (last ? *end != 0 : *end != ',')) {
        KOLO_LOGE(LOG_TAG, "%s:%zu: bad or missing feature %zu (want %zu numeric fields)", path,
                  lineno, j + 1, t.features);
        rc = KOLO_ERR_PARSE;
        goto out;
      }
      p = end + 1;
    }
    rc = table_push(&t, row, label);
    if (rc != KOLO_OK) goto out;
  }
  if (ferror(f)) {
    KOLO_LOGE(LOG_TAG, "%s: read error", path);
    rc = KOLO_ERR_IO;
    goto out;
  }
  rc = table_finish(&t, path, out);
out:
  free(line);
  free(row);
  free(t.x);
  free(t.y);
  fclose(f);
  return rc;
}

/* One parsed LIBSVM line: label and (index, value) pairs. */
typedef struct sparse_row {
  int label;
  size_t n, cap;
  size_t *index;
  float *value;
} sparse_row;

/* Parses "label i:v i:v ..." into r; indices 1-based and strictly increasing. */
static int parse_libsvm_line(char *line, sparse_row *r) {
  char *end;
  if (parse_label(line, &end, 1, &r->label)) return -1;
  char *p = end;
  r->n = 0;
  size_t last = 0;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '#') return 0;
    errno = 0;
    unsigned long long idx = strtoull(p, &end, 10);
    if (end == p || *end != ':' || errno || idx == 0 || idx <= last || idx > (1u << 24)) return -1;
    p = end + 1;
    float v = strtof(p, &end);
    if (end == p || !isfinite(v) || (*end && *end != ' ' && *end != '\t')) return -1;
    p = end;
    if (r->n == r->cap) {
      size_t cap = r->cap ? r->cap * 2 : 64;
      size_t *ni = realloc(r->index, cap * sizeof *ni);
      if (!ni) return -2;
      r->index = ni;
      float *nv = realloc(r->value, cap * sizeof *nv);
      if (!nv) return -2;
      r->value = nv;
      r->cap = cap;
    }
    r->index[r->n] = (size_t)idx;
    r->value[r->n++] = v;
    last = (size_t)idx;
  }
}

kolo_status kolo_train_data_load_libsvm(const char *path, size_t features,
                                        kolo_train_dataset **out) {
  if (!path || !out) return KOLO_ERR_INVALID_ARG;
  FILE *f = fopen(path, "r");
  if (!f) {
    KOLO_LOGE(LOG_TAG, "%s: %s", path, strerror(errno));
    return errno == ENOENT ? KOLO_ERR_NOT_FOUND : KOLO_ERR_IO;
  }
  table t = {0};
  sparse_row r = {0};
  float *row = NULL;
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  kolo_status rc = KOLO_OK;
  ssize_t len;
  /* pass 1: validate and find the width */
  size_t width = 0;
  while ((len = read_line(f, &line, &cap)) > 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (len == 0 || line[0] == '#') continue;
    int e = parse_libsvm_line(line, &r);
    if (e == -2) {
      rc = KOLO_ERR_NO_MEMORY;
      goto out;
    }
    if (e) {
      KOLO_LOGE(LOG_TAG,
                "%s:%zu: bad LIBSVM line (want 'label index:value ...', indices 1-based, "
                "increasing)",
                path, lineno);
      rc = KOLO_ERR_PARSE;
      goto out;
    }
    if (r.n && r.index[r.n - 1] > width) width = r.index[r.n - 1];
    if (width > LIBSVM_MAX_FEATURES) {
      /* rows are made dense: one index past this would cost its width in floats per row */
      KOLO_LOGE(LOG_TAG, "%s:%zu: feature index %zu over the %d features kolo-train reads", path,
                lineno, width, LIBSVM_MAX_FEATURES);
      rc = KOLO_ERR_PARSE;
      goto out;
    }
  }
  if (features) {
    if (width > features) {
      KOLO_LOGE(LOG_TAG, "%s: feature index %zu beyond the training set's %zu features", path,
                width, features);
      rc = KOLO_ERR_PARSE;
      goto out;
    }
    width = features;
  }
  if (width == 0) {
    KOLO_LOGE(LOG_TAG, "%s: no features", path);
    rc = KOLO_ERR_PARSE;
    goto out;
  }
  t.features = width;
  row = malloc(width * sizeof(float));
  if (!row) {
    rc = KOLO_ERR_NO_MEMORY;
    goto out;
  }
  /* pass 2: fill */
  rewind(f);
  while ((len = read_line(f, &line, &cap)) > 0) {
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (len == 0 || line[0] == '#') continue;
    if (parse_libsvm_line(line, &r)) {
      rc = KOLO_ERR_IO; /* the file changed under us */
      goto out;
    }
    memset(row, 0, width * sizeof(float));
    for (size_t i = 0; i < r.n; i++) row[r.index[i] - 1] = r.value[i];
    rc = table_push(&t, row, r.label);
    if (rc != KOLO_OK) goto out;
  }
  rc = table_finish(&t, path, out);
out:
  free(line);
  free(row);
  free(r.index);
  free(r.value);
  free(t.x);
  free(t.y);
  fclose(f);
  return rc;
}

/* ---- synthetic ---- */

#define SYN_CLASSES 10
#define SYN_SIDE 28

/* Fills count samples: prototype of a random class plus Gaussian noise. */
static void synthetic_fill(kolo_train_dataset *ds, const float *protos, kolo_train_rng *rng) {
  size_t f = ds->features;
  for (size_t i = 0; i < ds->count; i++) {
    int label = (int)kolo_train_rng_below(rng, SYN_CLASSES);
    ds->labels[i] = label;
    for (size_t j = 0; j < f; j++) {
      ds->f32[i * f + j] = protos[(size_t)label * f + j] + 0.8f * (float)kolo_train_rng_normal(rng);
    }
  }
  ds->classes = SYN_CLASSES;
}

kolo_status kolo_train_data_synthetic(uint64_t seed, size_t train_count, size_t test_count,
                                      kolo_train_dataset **train, kolo_train_dataset **test) {
  if (!train || !test || train_count == 0 || test_count == 0) return KOLO_ERR_INVALID_ARG;
  size_t f = SYN_SIDE * SYN_SIDE;
  kolo_train_dataset *a = NULL, *b = NULL;
  float *protos = malloc(SYN_CLASSES * f * sizeof(float));
  kolo_status rc = protos ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  if (rc != KOLO_OK) goto out;
  kolo_train_rng rng;
  kolo_train_rng_seed(&rng, seed ^ 0x73796E7468657469ull);
  /* smooth-ish prototypes: a few random blobs per class */
  memset(protos, 0, SYN_CLASSES * f * sizeof(float));
  for (size_t c = 0; c < SYN_CLASSES; c++) {
    for (int blob = 0; blob < 4; blob++) {
      double cy = kolo_train_rng_uniform(&rng) * SYN_SIDE,
             cx = kolo_train_rng_uniform(&rng) * SYN_SIDE;
      for (size_t y = 0; y < SYN_SIDE; y++) {
        for (size_t x = 0; x < SYN_SIDE; x++) {
          double d2 = ((double)y - cy) * ((double)y - cy) + ((double)x - cx) * ((double)x - cx);
          protos[c * f + y * SYN_SIDE + x] += (float)exp(-d2 / 18.0);
        }
      }
    }
  }
  rc = dataset_alloc(train_count, f, 0, &a);
  if (rc != KOLO_OK) goto out;
  rc = dataset_alloc(test_count, f, 0, &b);
  if (rc != KOLO_OK) goto out;
  synthetic_fill(a, protos, &rng);
  synthetic_fill(b, protos, &rng);
out:
  free(protos);
  if (rc != KOLO_OK) {
    kolo_train_data_destroy(a);
    kolo_train_data_destroy(b);
    return rc;
  }
  *train = a;
  *test = b;
  return KOLO_OK;
}

/* Copies samples [first, first + n) of ds into a new dataset. */
static kolo_status copy_range(const kolo_train_dataset *ds, size_t first, size_t n,
                              kolo_train_dataset **out) {
  kolo_train_dataset *c = NULL;
  kolo_status rc = dataset_alloc(n, ds->features, ds->u8 != NULL, &c);
  if (rc != KOLO_OK) return rc;
  c->height = ds->height;
  c->width = ds->width;
  c->channels = ds->channels;
  c->classes = ds->classes;
  if (ds->u8) {
    memcpy(c->u8, ds->u8 + first * ds->features, n * ds->features);
  } else {
    memcpy(c->f32, ds->f32 + first * ds->features, n * ds->features * sizeof(float));
  }
  memcpy(c->labels, ds->labels + first, n * sizeof(int));
  *out = c;
  return KOLO_OK;
}

kolo_status kolo_train_data_split(const kolo_train_dataset *ds, size_t test_count,
                                  kolo_train_dataset **train, kolo_train_dataset **test) {
  if (!ds || !train || !test || test_count == 0 || test_count >= ds->count) {
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_train_dataset *a = NULL, *b = NULL;
  kolo_status rc = copy_range(ds, 0, ds->count - test_count, &a);
  if (rc == KOLO_OK) rc = copy_range(ds, ds->count - test_count, test_count, &b);
  if (rc != KOLO_OK) {
    kolo_train_data_destroy(a);
    return rc;
  }
  *train = a;
  *test = b;
  return KOLO_OK;
}
