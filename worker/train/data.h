/* kolo_train_data: in-memory labelled datasets for the built-in trainer, read
 * from MNIST-format IDX files (gzip or plain, via zlib), CSV, LIBSVM, or made
 * up from a seed. Bad files are refused with a logged reason, never half-loaded. */
#ifndef KOLO_TRAIN_DATA_H
#define KOLO_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

typedef struct kolo_train_dataset kolo_train_dataset;

/* Reads an IDX image file (magic 0x00000803, u8 pixels) and its IDX label file
 * (0x00000801). Pixels become floats in [0, 1]. .gz or plain, truncated or
 * mismatched files -> KOLO_ERR_PARSE / KOLO_ERR_IO / KOLO_ERR_NOT_FOUND. */
kolo_status kolo_train_data_load_idx(const char *images_path, const char *labels_path,
                                     kolo_train_dataset **out);

/* Finds <prefix>-images-idx3-ubyte[.gz] and <prefix>-labels-idx1-ubyte[.gz] in
 * dir (prefix "train" or "t10k") and loads them. */
kolo_status kolo_train_data_load_idx_dir(const char *dir, const char *prefix,
                                         kolo_train_dataset **out);

/* CSV: one sample per line, "label,f1,f2,...", label an integer >= 0; a first
 * line that does not start with a number is a header and skipped. Every row
 * needs the same number of fields. 784 features are treated as a 28x28 image. */
kolo_status kolo_train_data_load_csv(const char *path, kolo_train_dataset **out);

/* LIBSVM: "label idx:value ..." with 1-based increasing indices; label -1 maps
 * to class 0 (the binary +1/-1 convention), other labels must be integers >= 0.
 * features = 0 takes the largest index in the file; otherwise indices above it
 * are an error (loading a test file with the training set's width). */
kolo_status kolo_train_data_load_libsvm(const char *path, size_t features,
                                        kolo_train_dataset **out);

/* A seeded synthetic 10-class problem of 28x28 "images" (class prototypes plus
 * noise): train_count training and test_count test samples, same prototypes. */
kolo_status kolo_train_data_synthetic(uint64_t seed, size_t train_count, size_t test_count,
                                      kolo_train_dataset **train, kolo_train_dataset **test);

/* Splits ds into its first count - test_count samples and its last test_count
 * (copies; ds is unchanged). */
kolo_status kolo_train_data_split(const kolo_train_dataset *ds, size_t test_count,
                                  kolo_train_dataset **train, kolo_train_dataset **test);

void kolo_train_data_destroy(kolo_train_dataset *ds);

size_t kolo_train_data_count(const kolo_train_dataset *ds);
size_t kolo_train_data_features(const kolo_train_dataset *ds);
/* Number of classes: the largest label + 1. */
size_t kolo_train_data_classes(const kolo_train_dataset *ds);
/* Image shape (height x width x channels = features); 1 x features x 1 for tabular data. */
void kolo_train_data_shape(const kolo_train_dataset *ds, size_t *height, size_t *width,
                           size_t *channels);

/* Copies samples index[0..n) into x (n * features floats) and labels into y. */
void kolo_train_data_gather(const kolo_train_dataset *ds, const size_t *index, size_t n, float *x,
                            int *y);

#endif
