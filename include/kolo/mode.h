/* The training mode a job asked for, as a process sees it (issue 26). A job spec
 * chooses SYNC (gradients all-reduced every step), ASYNC (background model averaging
 * with bounded staleness), LOCAL_SGD or DILOCO (inner steps of the user's optimizer,
 * then an outer step on the averaged pseudo-gradient) and the mode's parameters; the
 * kolo-worker agent (and `kolorun --mode`) hands them to every process as the
 * KOLO_MODE* environment:
 *
 *   KOLO_MODE                 SYNC | ASYNC | LOCAL_SGD | DILOCO (unset = SYNC)
 *   KOLO_MODE_SYNC_EVERY      steps between averages (LOCAL_SGD / DILOCO: inner steps H)
 *   KOLO_MODE_MAX_STALENESS   ASYNC: averaging rounds a rank may have outstanding
 *   KOLO_MODE_OUTER_LR        DILOCO: the outer SGD's learning rate
 *   KOLO_MODE_OUTER_MOMENTUM  DILOCO: its momentum, in [0, 1)
 *   KOLO_MODE_NESTEROV        DILOCO: 0 | 1
 *   KOLO_MODE_COMPRESSION     LOCAL_SGD / DILOCO: none | fp16 | int8 (the outer gradient)
 *   KOLO_MODE_FRAGMENTS       LOCAL_SGD / DILOCO: parts of the model synced at staggered steps
 *
 * Programs never parse these themselves: they call kolo_mode_from_env (Python through
 * ctypes), run that mode, and tell the agent so with kolo_elastic_acknowledge_mode. A job
 * whose mode is not SYNC fails, with a reason saying so, when its process reports progress
 * or exits without having acknowledged it: nobody silently runs another mode. */
#ifndef KOLO_MODE_H
#define KOLO_MODE_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/elastic.h"
#include "kolo/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* libkolo exports these: kolo/api.h */

/* The values are kolo.v1.Mode's (proto/kolo/v1/job.proto). */
typedef enum kolo_mode {
  KOLO_MODE_SYNC = 1,
  KOLO_MODE_ASYNC = 2,
  KOLO_MODE_LOCAL_SGD = 3,
  KOLO_MODE_DILOCO = 4,
} kolo_mode;

/* How LOCAL_SGD / DILOCO send the outer gradient (int8: with a scale per chunk). */
typedef enum kolo_compression {
  KOLO_COMPRESSION_NONE = 0,
  KOLO_COMPRESSION_FP16 = 1,
  KOLO_COMPRESSION_INT8 = 2,
} kolo_compression;

typedef struct kolo_mode_spec {
  kolo_mode mode;
  uint32_t sync_every;    /* ASYNC: steps between averages; LOCAL_SGD/DILOCO: inner steps H */
  uint32_t max_staleness; /* ASYNC: averaging rounds a rank may have outstanding (>= 1);
                           * LOCAL_SGD/DILOCO: rounds an average is applied late (0: at once) */
  double outer_lr;        /* LOCAL_SGD (always 1) / DILOCO */
  double outer_momentum;  /* LOCAL_SGD (always 0) / DILOCO, in [0, 1) */
  int nesterov;           /* 0 or 1 */
  kolo_compression compression;
  uint32_t fragments; /* 1 = the whole model at once */
} kolo_mode_spec;

/* Limits every spec is checked against (kolo_mode_spec_validate). */
#define KOLO_MODE_MAX_SYNC_EVERY 1000000u
#define KOLO_MODE_MAX_STALENESS 1000u
#define KOLO_MODE_MAX_OUTER_LR 100.0
#define KOLO_MODE_MAX_FRAGMENTS 1024u

/* The mode's defaults:
 *   SYNC       sync_every 1
 *   ASYNC      sync_every 8, max_staleness 1 (the built-in trainer's ASYNC until now)
 *   LOCAL_SGD  sync_every 50, outer_lr 1, outer_momentum 0
 *   DILOCO     sync_every 50, outer_lr 0.7, outer_momentum 0.9, nesterov 1 (the DiLoCo paper's
 *              outer optimizer)
 * and for every mode compression none, fragments 1; a parameter the mode does not use
 * holds the value that means "off" (max_staleness 0 outside ASYNC: LOCAL_SGD/DILOCO wait for
 * each round's average; k >= 1 folds round r's average in at the end of round r + k, so the
 * average travels while the next k rounds compute), outer_lr 1 and
 * momentum 0 outside DILOCO). KOLO_ERR_INVALID_ARG for an unknown mode or a NULL out. */
kolo_status kolo_mode_spec_default(kolo_mode mode, kolo_mode_spec *out);

/* Checks spec against its mode: sync_every 1..KOLO_MODE_MAX_SYNC_EVERY (SYNC: 1), ASYNC's
 * max_staleness 1..KOLO_MODE_MAX_STALENESS (LOCAL_SGD/DILOCO's 0..KOLO_MODE_MAX_STALENESS,
 * SYNC's 0), DILOCO's outer_lr in (0, KOLO_MODE_MAX_OUTER_LR]
 * and outer_momentum in [0, 1), nesterov 0|1, LOCAL_SGD's outer optimizer at 1 / 0, a known
 * compression, fragments 1..min(KOLO_MODE_MAX_FRAGMENTS, sync_every) (SYNC / ASYNC: 1). KOLO_OK,
 * or KOLO_ERR_INVALID_ARG with a message naming the parameter in err (may be NULL). */
kolo_status kolo_mode_spec_validate(const kolo_mode_spec *spec, char *err, size_t err_len);

/* Reads the KOLO_MODE* environment into *out: the mode's defaults, then each variable the
 * mode uses. Every set variable must be well formed (a variable the mode does not use is
 * checked but not applied), and the result must pass kolo_mode_spec_validate; otherwise
 * KOLO_ERR_INVALID_ARG with a message naming the variable in err (may be NULL). */
kolo_status kolo_mode_from_env(kolo_mode_spec *out, char *err, size_t err_len);

/* "SYNC", "ASYNC", "LOCAL_SGD", "DILOCO"; "?" for anything else. */
const char *kolo_mode_name(kolo_mode mode);

/* A mode's name, case-insensitive ('-' reads as '_'): KOLO_OK, or KOLO_ERR_INVALID_ARG. */
kolo_status kolo_mode_parse(const char *name, kolo_mode *out);

/* "none", "fp16", "int8"; "?" for anything else. */
const char *kolo_compression_name(kolo_compression compression);

/* A compression's name, case-insensitive: KOLO_OK, or KOLO_ERR_INVALID_ARG. */
kolo_status kolo_compression_parse(const char *name, kolo_compression *out);

/* Tells the kolo-worker agent that this process runs mode (the agent protocol's MODE
 * line): call it once the program has set itself up to train in that mode. Without an
 * agent (kolorun, a fixed ring) it does nothing and returns KOLO_OK. KOLO_ERR_INVALID_ARG
 * for a NULL elastic or an unknown mode. The agent fails a job that asked for another
 * mode than the one acknowledged, or whose process reports progress or exits before
 * acknowledging a mode other than SYNC. */
kolo_status kolo_elastic_acknowledge_mode(kolo_elastic *elastic, kolo_mode mode);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
