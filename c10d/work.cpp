/* KoloWork: the c10d::Work of one kolo collective. The completion thread of its
 * process group calls settle(), which waits for the kolo requests, runs the copy-out
 * step on success, completes the Work (wait()) and posts the completion of its Future
 * (what DDP's reducer and comm hooks chain on) to the group's CallbackPool. Failures carry kolo's own message, which names
 * the lost rank ("peer lost: rank 2 (connection closed)"). */
#include "c10d/process_group.hpp"

#include <cstring>
#include <stdexcept>

namespace kolo_c10d {

KoloWork::KoloWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs,
                   std::chrono::milliseconds timeout, kolo_comm *comm)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      comm_(comm),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

KoloWork::~KoloWork() = default;

bool KoloWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool KoloWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr KoloWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

std::vector<at::Tensor> KoloWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> KoloWork::getFuture() { return future_; }

void KoloWork::abort() { kolo_comm_abort(comm_); }

bool KoloWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) timeout = timeout_;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [this] { return completed_; })) {
    lock.unlock();
    /* the ring runs operations in order: one that never completes blocks every later
     * one, so the communicator is failed (every rank's pending work fails with it) */
    kolo_comm_abort(comm_);
    throw std::runtime_error("kolo: " + what_ + " timed out after " +
                             std::to_string(timeout.count()) +
                             " ms; the communicator is aborted (re-create the process group)");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::exception_ptr KoloWork::failure(kolo_status status, const char *message) const {
  int failed_rank = -1;
  kolo_status comm_status = kolo_comm_error(comm_, &failed_rank);
  char comm_text[KOLO_RESULT_MESSAGE_BYTES] = "";
  kolo_comm_error_message(comm_, comm_text, sizeof comm_text);
  if (status == KOLO_ERR_ABORTED && comm_status != KOLO_OK) status = comm_status;
  std::string detail = message != nullptr && message[0] != '\0' ? message
                       : comm_text[0] != '\0'                   ? comm_text
                                                                : kolo_strerror(status);
  std::string text = "kolo: " + what_ + " failed: " + detail + " (" + kolo_status_name(status) + ")";
  if (failed_rank >= 0 && detail.find("rank") == std::string::npos)
    text += "; lost rank " + std::to_string(failed_rank);
  return std::make_exception_ptr(std::runtime_error(text));
}

void KoloWork::settle(CallbackPool &callbacks) {
  kolo_status status = submit_status;
  std::string message;
  for (kolo_request *request : requests) {
    kolo_result result;
    std::memset(&result, 0, sizeof result);
    kolo_status code = kolo_wait_result(request, &result);
    kolo_free(result.output);
    if (code != KOLO_OK && status == KOLO_OK) {
      status = code;
      message = result.message;
    }
  }
  requests.clear();
  std::exception_ptr error;
  if (status != KOLO_OK) {
    error = failure(status, message.c_str());
  } else if (on_success) {
    try {
      on_success();
    } catch (...) {
      error = std::current_exception();
    }
  }
  on_success = nullptr;
  keep.clear();
  finish(error);
  c10::intrusive_ptr<c10::ivalue::Future> future = future_;
  std::vector<at::Tensor> outputs = outputs_;
  callbacks.post([future, error, outputs]() {
    if (error)
      future->setError(error);
    else
      future->markCompleted(c10::IValue(outputs));
  });
}

}  // namespace kolo_c10d
