/* kolo_nccl: the communicator lifecycle as one pure transition table
 * (NEW -> INITIALIZING -> READY -> FAILED|ABORTED -> DESTROYED). */
#include "kolo_nccl.h"

kolo_status kolo_nccl_state_next(kolo_nccl_state state, kolo_nccl_event event,
                                 kolo_nccl_state *next) {
  kolo_nccl_state to;
  switch (state) {
    case KOLO_NCCL_STATE_NEW:
      if (event == KOLO_NCCL_EV_INIT_START)
        to = KOLO_NCCL_STATE_INITIALIZING;
      else if (event == KOLO_NCCL_EV_ERROR)
        to = KOLO_NCCL_STATE_FAILED;
      else if (event == KOLO_NCCL_EV_DESTROY)
        to = KOLO_NCCL_STATE_DESTROYED;
      else
        return KOLO_ERR_STATE;
      break;
    case KOLO_NCCL_STATE_INITIALIZING:
      if (event == KOLO_NCCL_EV_INIT_DONE)
        to = KOLO_NCCL_STATE_READY;
      else if (event == KOLO_NCCL_EV_ERROR)
        to = KOLO_NCCL_STATE_FAILED;
      else if (event == KOLO_NCCL_EV_ABORT)
        to = KOLO_NCCL_STATE_ABORTED;
      else
        return KOLO_ERR_STATE; /* destroy needs an abort first */
      break;
    case KOLO_NCCL_STATE_READY:
      if (event == KOLO_NCCL_EV_ERROR)
        to = KOLO_NCCL_STATE_FAILED;
      else if (event == KOLO_NCCL_EV_ABORT)
        to = KOLO_NCCL_STATE_ABORTED;
      else if (event == KOLO_NCCL_EV_DESTROY)
        to = KOLO_NCCL_STATE_DESTROYED;
      else
        return KOLO_ERR_STATE;
      break;
    case KOLO_NCCL_STATE_FAILED:
      if (event == KOLO_NCCL_EV_ERROR)
        to = KOLO_NCCL_STATE_FAILED; /* first error kept */
      else if (event == KOLO_NCCL_EV_ABORT)
        to = KOLO_NCCL_STATE_ABORTED;
      else
        return KOLO_ERR_STATE; /* a failed communicator must be aborted */
      break;
    case KOLO_NCCL_STATE_ABORTED:
      if (event == KOLO_NCCL_EV_ABORT || event == KOLO_NCCL_EV_ERROR)
        to = KOLO_NCCL_STATE_ABORTED;
      else if (event == KOLO_NCCL_EV_DESTROY)
        to = KOLO_NCCL_STATE_DESTROYED;
      else
        return KOLO_ERR_STATE;
      break;
    case KOLO_NCCL_STATE_DESTROYED:
    default:
      return KOLO_ERR_STATE;
  }
  *next = to;
  return KOLO_OK;
}

kolo_status kolo_nccl_state_submit_status(kolo_nccl_state state, kolo_status failure) {
  switch (state) {
    case KOLO_NCCL_STATE_READY:
      return KOLO_OK;
    case KOLO_NCCL_STATE_FAILED:
      return failure != KOLO_OK ? failure : KOLO_ERR_STATE;
    case KOLO_NCCL_STATE_ABORTED:
      return KOLO_ERR_ABORTED;
    default:
      return KOLO_ERR_STATE;
  }
}

const char *kolo_nccl_state_name(kolo_nccl_state state) {
  switch (state) {
    case KOLO_NCCL_STATE_NEW:
      return "new";
    case KOLO_NCCL_STATE_INITIALIZING:
      return "initializing";
    case KOLO_NCCL_STATE_READY:
      return "ready";
    case KOLO_NCCL_STATE_FAILED:
      return "failed";
    case KOLO_NCCL_STATE_ABORTED:
      return "aborted";
    case KOLO_NCCL_STATE_DESTROYED:
      return "destroyed";
    default:
      return "unknown";
  }
}
