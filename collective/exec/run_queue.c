/* The executor's queue at the exec floor: handing a request to the executor
 * and completing one (status, message, waiters woken), both under the queue's
 * mutex. The face (queue.c) runs the executor thread and the callers' waits;
 * the engine hands agreed work over and completes what it decides alone (a
 * failure, a join) through these two. */
#include "collective/exec/exec.h"

void kolo_request_complete_locked(kolo_queue *queue, kolo_request *request, kolo_status status) {
  request->status = status;
  if (status != KOLO_OK && request->message[0] == '\0' && atomic_load(&queue->net->failed)) {
    kolo_net_error_message(queue->net, request->message, sizeof request->message);
  }
  if (request->negotiated && queue->outstanding > 0) queue->outstanding--;
  request->done = 1;
  pthread_cond_broadcast(&queue->cond);
}

void kolo_queue_push_locked(kolo_queue *queue, kolo_request *request) {
  request->next = NULL;
  if (queue->queue_tail)
    queue->queue_tail->next = request;
  else
    queue->queue_head = request;
  queue->queue_tail = request;
  pthread_cond_signal(&queue->exec_cond);
}
