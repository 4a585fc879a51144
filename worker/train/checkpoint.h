/* kolo_train_checkpoint: durable checkpoints of the training state. A file is
 * a 32-byte header (magic "KOLOCKPT", version, sizes, CRC32 of the payload and
 * of the header) followed by the state blob; it is written to a temporary
 * name, fsync'ed and renamed, so a reader sees a whole file or none. */
#ifndef KOLO_TRAIN_CHECKPOINT_H
#define KOLO_TRAIN_CHECKPOINT_H

#include <stddef.h>

#include "kolo/status.h"
#include "worker/train/state.h"

#define KOLO_TRAIN_CHECKPOINT_VERSION 1
/* Checkpoints kept in a directory; older ones are deleted after a successful write. */
#define KOLO_TRAIN_CHECKPOINT_KEEP 3

/* Writes dir/ckpt-<step, 12 digits>.kolo atomically (creating dir if needed)
 * and prunes all but the newest KOLO_TRAIN_CHECKPOINT_KEEP. path (may be NULL)
 * receives the file name. */
kolo_status kolo_train_checkpoint_write(const char *dir, kolo_train_state *state, char *path,
                                        size_t path_length);

/* Reads and verifies one checkpoint file into state. A short file, bad magic or
 * version, or a CRC mismatch -> KOLO_ERR_CORRUPT; another model -> KOLO_ERR_INVALID_ARG.
 * The state is untouched on any error. */
kolo_status kolo_train_checkpoint_read(const char *path, kolo_train_state *state);

/* Loads the newest checkpoint in dir that verifies, logging and skipping any
 * that does not. KOLO_ERR_NOT_FOUND when there is none. */
kolo_status kolo_train_checkpoint_restore_latest(const char *dir, kolo_train_state *state,
                                                 char *path, size_t path_length);

#endif
