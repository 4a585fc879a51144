/* kolo_train_model_spec_parse (model.h): the model name and hidden sizes of a
 * built-in model, parsed apart from the model itself (no BLAS), so kolo-train's flag
 * parser, and through it kolo-server, refuse bad hidden sizes before anything runs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "worker/train/model.h"

kolo_status kolo_train_model_spec_parse(const char *model, const char *hidden,
                                        kolo_train_model_spec *spec) {
  if (!model || !spec) return KOLO_ERR_INVALID_ARG;
  if (strcmp(model, "mlp") == 0) {
    spec->kind = KOLO_TRAIN_MLP;
  } else if (strcmp(model, "lenet") == 0) {
    spec->kind = KOLO_TRAIN_LENET;
  } else {
    return KOLO_ERR_INVALID_ARG;
  }
  spec->hidden_count = 0;
  if (!hidden || !*hidden) return KOLO_OK;
  const char *p = hidden;
  while (*p) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno || v == 0 || v > 65536) return KOLO_ERR_INVALID_ARG;
    if (spec->hidden_count == KOLO_TRAIN_MAX_HIDDEN) return KOLO_ERR_INVALID_ARG;
    spec->hidden[spec->hidden_count++] = (size_t)v;
    if (*end == ',') {
      end++;
      if (!*end) return KOLO_ERR_INVALID_ARG;
    } else if (*end) {
      return KOLO_ERR_INVALID_ARG;
    }
    p = end;
  }
  return KOLO_OK;
}
