/* ProcessGroupKolo's collectives: each checks its tensors (CPU, a dtype kolo reduces,
 * matching sizes), submits kolo's non-blocking call under the submit lock (every rank
 * issues c10d collectives in the same order, which is the order kolo's ring runs its
 * unnamed operations in) and queues the work for the completion thread. Data-moving
 * collectives (broadcast, all-gather, all-to-all) move bytes, so they take any dtype;
 * reductions take kolo's dtypes and ops. Non-contiguous tensors go through a
 * contiguous temporary that is copied back on success. */
#include "c10d/process_group.hpp"

#include <Python.h>

#include <numeric>
#include <stdexcept>

namespace kolo_c10d {
namespace {

const char kDtypes[] = "uint8, int32, int64, float16, bfloat16, float32, float64";

kolo_dtype reduce_dtype(const at::Tensor &t, const char *what) {
  switch (t.scalar_type()) {
    case at::kByte: return KOLO_UINT8;
    case at::kInt: return KOLO_INT32;
    case at::kLong: return KOLO_INT64;
    case at::kHalf: return KOLO_FLOAT16;
    case at::kBFloat16: return KOLO_BFLOAT16;
    case at::kFloat: return KOLO_FLOAT32;
    case at::kDouble: return KOLO_FLOAT64;
    default:
      TORCH_CHECK(false, "kolo backend: ", what, " does not reduce ", t.scalar_type(),
                  " tensors (kolo reduces ", kDtypes, ")");
  }
}

kolo_op reduce_op(const c10d::ReduceOp &op, const char *what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return KOLO_SUM;
    case c10d::ReduceOp::AVG: return KOLO_AVG;
    case c10d::ReduceOp::MIN: return KOLO_MIN;
    case c10d::ReduceOp::MAX: return KOLO_MAX;
    case c10d::ReduceOp::PRODUCT: return KOLO_PROD;
    default:
      TORCH_CHECK(false, "kolo backend: ", what, " does not support ReduceOp ", int(op.op_),
                  " (kolo has SUM, AVG, MIN, MAX, PRODUCT; not BAND, BOR, BXOR, PREMUL_SUM)");
  }
}

void check_cpu(const at::Tensor &t, const char *what) {
  TORCH_CHECK(t.defined(), "kolo backend: ", what, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "kolo backend: ", what, " takes CPU tensors; got one on ",
              t.device(), " (CUDA tensors are not supported by this backend yet)");
  TORCH_CHECK(t.layout() == at::kStrided, "kolo backend: ", what, " takes dense tensors");
}

at::Tensor &single(std::vector<at::Tensor> &tensors, const char *what) {
  TORCH_CHECK(tensors.size() == 1, "kolo backend: ", what, " takes one tensor per process (got ",
              tensors.size(), ")");
  check_cpu(tensors[0], what);
  return tensors[0];
}

size_t bytes(const at::Tensor &t) { return size_t(t.numel()) * t.element_size(); }

/* t itself when contiguous, else a contiguous copy. */
at::Tensor dense(const at::Tensor &t) { return t.is_contiguous() ? t : t.contiguous(); }

/* After success, copies a temporary back into the caller's tensor if they differ. */
void copy_back(KoloWork &w, const at::Tensor &user, const at::Tensor &temp) {
  if (temp.is_same(user)) return;
  w.on_success = [user, temp]() mutable { user.copy_(temp); };
}

/* request by reference: read after the kolo call (argument order is unspecified) */
void add(KoloWork &w, kolo_status status, kolo_request *const &request) {
  if (status == KOLO_OK)
    w.requests.push_back(request);
  else if (w.submit_status == KOLO_OK)
    w.submit_status = status;
}

at::Tensor flatten(const std::vector<at::Tensor> &tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto &t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

/* Copies consecutive pieces of flat into tensors (their shapes). */
void unflatten(const at::Tensor &flat, std::vector<at::Tensor> tensors) {
  int64_t offset = 0;
  for (auto &t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

ProcessGroupKolo::ProcessGroupKolo(kolo_comm *comm, bool owned, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(kolo_comm_rank(comm), kolo_comm_size(comm)),
      comm_(comm),
      owned_(owned),
      timeout_(timeout) {
  init();
  completer_ = std::thread([this] { complete_loop(); });
}

ProcessGroupKolo::~ProcessGroupKolo() {
  shutdown();
  if (owned_) kolo_comm_destroy(comm_);
}

void ProcessGroupKolo::shutdown() {
  {
    /* under the submit lock: a collective that saw the group running is queued
     * before the completion thread can see stopping_ (it drains the queue first) */
    std::lock_guard<std::mutex> submit(submit_mutex_);
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  std::lock_guard<std::mutex> once(shutdown_mutex_);
  /* the completion thread may be running a Python callback (a comm hook's then()),
   * or dropping the last reference to a tensor Python made: both need the GIL this
   * thread holds when Python drops the group or calls shutdown_all() */
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState *state = PyEval_SaveThread();
    join_threads();
    PyEval_RestoreThread(state);
  } else {
    join_threads();
  }
}

void ProcessGroupKolo::join_threads() {
  if (completer_.joinable()) completer_.join();
  callbacks_.stop();
}

void ProcessGroupKolo::complete_loop() {
  at::NoGradGuard no_grad; /* copy-backs write into leaf tensors that may require grad */
  for (;;) {
    c10::intrusive_ptr<KoloWork> work;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work = queue_.front();
      queue_.pop_front();
    }
    work->settle(callbacks_);
  }
}

std::string ProcessGroupKolo::next_name(const char *kind) {
  /* names cycle: one may be reused once its request was handed back (engine.h) */
  return std::string("torch.c10d.") + kind + "." + std::to_string(sequence_++ % 4096);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::run(c10d::OpType type, const char *what,
                                                     std::vector<at::Tensor> outputs,
                                                     const Submit &submit) {
  auto work = c10::make_intrusive<KoloWork>(rank_, type, what, std::move(outputs), timeout_, comm_);
  {
    std::lock_guard<std::mutex> guard(submit_mutex_);
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      TORCH_CHECK(!stopping_, "kolo backend: ", what,
                  " on a process group that is shut down (the interpreter is exiting)");
    }
    submit(*work);
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.push_back(work);
  }
  queue_cv_.notify_one();
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::broadcast(std::vector<at::Tensor> &tensors,
                                                           const c10d::BroadcastOptions &opts) {
  at::Tensor &t = single(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "kolo backend: broadcast root ",
              opts.rootRank, " is not a rank of this group (size ", size_, ")");
  at::Tensor temp = dense(t);
  return run(c10d::OpType::BROADCAST, "broadcast", tensors, [&](KoloWork &w) {
    kolo_request *r = nullptr;
    add(w, kolo_broadcast_async(comm_, temp.data_ptr(), bytes(temp), KOLO_UINT8, int(opts.rootRank), &r),
        r);
    w.keep.push_back(temp);
    copy_back(w, t, temp);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::allreduce(std::vector<at::Tensor> &tensors,
                                                           const c10d::AllreduceOptions &opts) {
  at::Tensor &t = single(tensors, "allreduce");
  kolo_dtype dtype = reduce_dtype(t, "allreduce");
  kolo_op op = reduce_op(opts.reduceOp, "allreduce");
  at::Tensor temp = dense(t);
  return run(c10d::OpType::ALLREDUCE, "allreduce", tensors, [&](KoloWork &w) {
    kolo_request *r = nullptr;
    void *p = temp.data_ptr();
    add(w, kolo_allreduce_async(comm_, p, p, size_t(temp.numel()), dtype, op, &r), r);
    w.keep.push_back(temp);
    copy_back(w, t, temp);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::allreduce_coalesced(
    std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) {
  TORCH_CHECK(!tensors.empty(), "kolo backend: allreduce_coalesced of no tensors");
  for (const auto &t : tensors) {
    check_cpu(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "kolo backend: allreduce_coalesced takes tensors of one dtype (got ",
                tensors[0].scalar_type(), " and ", t.scalar_type(), ")");
  }
  kolo_dtype dtype = reduce_dtype(tensors[0], "allreduce_coalesced");
  kolo_op op = reduce_op(opts.reduceOp, "allreduce_coalesced");
  at::Tensor flat = flatten(tensors);
  return run(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, [&](KoloWork &w) {
    kolo_request *r = nullptr;
    void *p = flat.data_ptr();
    add(w, kolo_allreduce_async(comm_, p, p, size_t(flat.numel()), dtype, op, &r), r);
    w.keep.push_back(flat);
    std::vector<at::Tensor> targets = tensors;
    w.on_success = [flat, targets]() { unflatten(flat, targets); };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::reduce(std::vector<at::Tensor> &tensors,
                                                        const c10d::ReduceOptions &opts) {
  at::Tensor &t = single(tensors, "reduce");
  kolo_dtype dtype = reduce_dtype(t, "reduce");
  kolo_op op = reduce_op(opts.reduceOp, "reduce");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "kolo backend: reduce root ",
              opts.rootRank, " is not a rank of this group (size ", size_, ")");
  /* an all-reduce whose result only the root keeps (the others reduce into a copy) */
  bool root = opts.rootRank == rank_;
  at::Tensor temp = root ? dense(t) : t.contiguous().clone();
  return run(c10d::OpType::REDUCE, "reduce", tensors, [&](KoloWork &w) {
    kolo_request *r = nullptr;
    void *p = temp.data_ptr();
    add(w, kolo_allreduce_async(comm_, p, p, size_t(temp.numel()), dtype, op, &r), r);
    w.keep.push_back(temp);
    if (root) copy_back(w, t, temp);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::allgather(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &opts) {
  at::Tensor &in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == size_,
              "kolo backend: allgather takes one output list of ", size_, " tensors");
  for (const auto &o : outputs[0]) {
    check_cpu(o, "allgather");
    TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                "kolo backend: allgather outputs must match the input's size and dtype (",
                in.numel(), " ", in.scalar_type(), "; got ", o.numel(), " ", o.scalar_type(), ")");
  }
  at::Tensor send = dense(in);
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  return run(c10d::OpType::ALLGATHER, "allgather", outputs[0], [&](KoloWork &w) {
    kolo_request *r = nullptr;
    add(w,
        kolo_allgather_async(comm_, send.data_ptr(), bytes(send), flat.data_ptr(), bytes(flat),
                             nullptr, KOLO_UINT8, &r),
        r);
    w.keep.insert(w.keep.end(), {send, flat});
    std::vector<at::Tensor> targets = outputs[0];
    w.on_success = [flat, targets]() { unflatten(flat, targets); };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::_allgather_base(
    at::Tensor &output, at::Tensor &input, const c10d::AllgatherOptions &opts) {
  check_cpu(input, "_allgather_base");
  check_cpu(output, "_allgather_base");
  TORCH_CHECK(output.numel() == input.numel() * size_ && output.scalar_type() == input.scalar_type(),
              "kolo backend: _allgather_base's output must hold ", size_, " x ", input.numel(),
              " elements of ", input.scalar_type(), " (got ", output.numel(), " of ",
              output.scalar_type(), ")");
  at::Tensor send = dense(input);
  at::Tensor recv = dense(output);
  return run(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output}, [&](KoloWork &w) {
    kolo_request *r = nullptr;
    add(w,
        kolo_allgather_async(comm_, send.data_ptr(), bytes(send), recv.data_ptr(), bytes(recv),
                             nullptr, KOLO_UINT8, &r),
        r);
    w.keep.insert(w.keep.end(), {send, recv});
    copy_back(w, output, recv);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::reduce_scatter(
    std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ReduceScatterOptions &opts) {
  at::Tensor &out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == size_,
              "kolo backend: reduce_scatter takes one input list of ", size_, " tensors");
  for (const auto &i : inputs[0]) {
    check_cpu(i, "reduce_scatter");
    TORCH_CHECK(i.numel() == out.numel() && i.scalar_type() == out.scalar_type(),
                "kolo backend: reduce_scatter inputs must match the output's size and dtype");
  }
  kolo_dtype dtype = reduce_dtype(out, "reduce_scatter");
  kolo_op op = reduce_op(opts.reduceOp, "reduce_scatter");
  at::Tensor send = flatten(inputs[0]);
  at::Tensor recv = dense(out);
  return run(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, [&](KoloWork &w) {
    kolo_request *r = nullptr;
    add(w,
        kolo_reducescatter_async(comm_, send.data_ptr(), recv.data_ptr(), size_t(recv.numel()),
                                 dtype, op, &r),
        r);
    w.keep.insert(w.keep.end(), {send, recv});
    copy_back(w, out, recv);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::_reduce_scatter_base(
    at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) {
  check_cpu(input, "_reduce_scatter_base");
  check_cpu(output, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == output.numel() * size_ && output.scalar_type() == input.scalar_type(),
              "kolo backend: _reduce_scatter_base's input must hold ", size_, " x ",
              output.numel(), " elements of ", output.scalar_type(), " (got ", input.numel(),
              " of ", input.scalar_type(), ")");
  kolo_dtype dtype = reduce_dtype(output, "_reduce_scatter_base");
  kolo_op op = reduce_op(opts.reduceOp, "_reduce_scatter_base");
  at::Tensor send = dense(input);
  at::Tensor recv = dense(output);
  return run(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output},
             [&](KoloWork &w) {
               kolo_request *r = nullptr;
               add(w,
                   kolo_reducescatter_async(comm_, send.data_ptr(), recv.data_ptr(),
                                            size_t(recv.numel()), dtype, op, &r),
                   r);
               w.keep.insert(w.keep.end(), {send, recv});
               copy_back(w, output, recv);
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::barrier(const c10d::BarrierOptions &opts) {
  return run(c10d::OpType::BARRIER, "barrier", {}, [&](KoloWork &w) {
    kolo_request *r = nullptr;
    add(w, kolo_barrier_async(comm_, &r), r);
  });
}

}  // namespace kolo_c10d
