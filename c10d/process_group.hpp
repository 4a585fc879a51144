/* ProcessGroupKolo: torch.distributed's c10d::ProcessGroup (torch 1.13) over libkolo's
 * public C API (include/kolo/kolo.h, engine.h). Each collective is handed to kolo's
 * engine as a non-blocking request; a completion thread per process group waits for
 * the requests in submission order, copies results where a temporary was needed, and
 * completes the KoloWork's wait(); its Future (which DDP's reducer and the comm hooks
 * chain on) is completed on a CallbackPool thread. Errors become exceptions carrying kolo's message, which names the
 * lost peer. The communicator is made in Python (kolo.torch.distributed: rendezvous
 * through the c10d store or a kolo job's ring) and handed over by address. */
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "c10d/callbacks.hpp"
#include "kolo/engine.h"
#include "kolo/kolo.h"

namespace kolo_c10d {

/* One collective in flight: its kolo requests, the tensors it returns, and what to
 * do with the result before it counts as complete (copy out of a temporary). */
class KoloWork : public c10d::Work {
 public:
  KoloWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs,
           std::chrono::milliseconds timeout, kolo_comm *comm);
  ~KoloWork() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  /* Blocks until complete; kNoTimeout means the process group's timeout. A timeout
   * aborts the communicator (its requests can no longer complete in order). */
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  /* Filled while submitting (under the group's submit lock). */
  std::vector<kolo_request *> requests;
  kolo_status submit_status = KOLO_OK;
  std::function<void()> on_success;  /* runs on the completion thread before completing */
  std::vector<size_t> counts;        /* recv_counts arrays that must outlive the request */
  std::vector<at::Tensor> keep;      /* temporaries the requests read or write */

  /* Called once by the completion thread: waits for the requests, completes the
   * Work, and hands the Future's completion (its callbacks) to callbacks. */
  void settle(CallbackPool &callbacks);

 private:
  std::string what_;
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds timeout_;
  kolo_comm *comm_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::exception_ptr failure(kolo_status status, const char *message) const;
};

class ProcessGroupKolo : public c10d::ProcessGroup {
 public:
  /* comm: a formed communicator whose rank and size are this group's; owned: destroy it
   * with the group (false: it belongs to kolo's Python runtime, e.g. a kolo job's ring). */
  ProcessGroupKolo(kolo_comm *comm, bool owned, std::chrono::milliseconds timeout);
  ~ProcessGroupKolo() override;

  const std::string getBackendName() const override { return "kolo"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &output_splits,
                                               std::vector<int64_t> &input_splits,
                                               const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;

  kolo_comm *comm() const { return comm_; }

  /* Finishes the queued collectives, then stops and joins the completion and callback
   * threads (releasing the GIL if held); later collectives fail. Idempotent; the
   * destructor calls it. Run at interpreter exit (module.cpp's shutdown_all) so that
   * no thread of the group takes the GIL while Python finalises: one that does is
   * ended by pthread_exit, whose unwinding through a destructor terminates the
   * process ("terminate called without an active exception"). */
  void shutdown();

 private:
  using Submit = std::function<void(KoloWork &)>;
  /* Makes the work, runs submit under the submit lock (every rank submits in the
   * same order) and queues the work for the completion thread. */
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, const char *what,
                                     std::vector<at::Tensor> outputs, const Submit &submit);
  void complete_loop();
  void join_threads();
  std::string next_name(const char *kind);

  kolo_comm *comm_;
  bool owned_;
  std::chrono::milliseconds timeout_;
  uint64_t sequence_ = 0;
  std::mutex submit_mutex_;
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<c10::intrusive_ptr<KoloWork>> queue_;
  bool stopping_ = false;
  std::thread completer_;
  std::mutex shutdown_mutex_;  /* one joiner at a time */
  CallbackPool callbacks_;
};

}  // namespace kolo_c10d
