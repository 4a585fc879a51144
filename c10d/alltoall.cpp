/* ProcessGroupKolo::alltoall_base over kolo's named all-to-all (engine.h): rank r's
 * block for every rank, split along dim 0 by input_splits (equal blocks when empty),
 * arrives at that rank in rank order, split by output_splits. kolo's engine reports
 * the counts that arrived; a rank whose blocks disagree with this rank's
 * output_splits fails the work with both numbers. */
#include "c10d/process_group.hpp"

#include <numeric>
#include <stdexcept>

namespace kolo_c10d {
namespace {

/* Byte counts of the blocks of t along dim 0 (equal blocks when splits is empty). */
std::vector<size_t> block_bytes(const at::Tensor &t, const std::vector<int64_t> &splits, int size,
                                const char *which) {
  TORCH_CHECK(t.dim() >= 1, "kolo backend: alltoall_base's ", which, " needs a dimension 0");
  int64_t rows = t.size(0);
  size_t row_bytes = rows == 0 ? 0 : size_t(t.numel() / rows) * t.element_size();
  std::vector<size_t> out(size_t(size), 0);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "kolo backend: alltoall_base's ", which, " has ", rows,
                " rows, not a multiple of the group size ", size, " (give split sizes)");
    for (auto &b : out) b = size_t(rows / size) * row_bytes;
    return out;
  }
  TORCH_CHECK(int(splits.size()) == size, "kolo backend: alltoall_base's ", which,
              " split sizes have ", splits.size(), " entries, not ", size);
  int64_t total = 0;
  for (int i = 0; i < size; i++) {
    TORCH_CHECK(splits[i] >= 0, "kolo backend: negative split size");
    total += splits[i];
    out[i] = size_t(splits[i]) * row_bytes;
  }
  TORCH_CHECK(total == rows, "kolo backend: alltoall_base's ", which, " split sizes add up to ",
              total, ", not its ", rows, " rows");
  return out;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupKolo::alltoall_base(at::Tensor &output,
                                                               at::Tensor &input,
                                                               std::vector<int64_t> &output_splits,
                                                               std::vector<int64_t> &input_splits,
                                                               const c10d::AllToAllOptions &opts) {
  const char *what = "alltoall_base";
  TORCH_CHECK(input.defined() && output.defined() && input.device().is_cpu() &&
                  output.device().is_cpu(),
              "kolo backend: alltoall_base takes CPU tensors");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(),
              "kolo backend: alltoall_base's input and output differ in dtype");
  std::vector<size_t> send_counts = block_bytes(input, input_splits, size_, "input");
  std::vector<size_t> expected = block_bytes(output, output_splits, size_, "output");
  at::Tensor send = input.contiguous();
  at::Tensor recv = output.is_contiguous() ? output : output.contiguous();
  return run(c10d::OpType::ALLTOALL_BASE, what, {output}, [&](KoloWork &w) {
    /* [0, size): what this rank sends; [size, 2 size): what arrived (filled by kolo) */
    w.counts = send_counts;
    w.counts.resize(2 * size_t(size_), 0);
    std::string name = next_name("alltoall");
    kolo_request *r = nullptr;
    kolo_status status = kolo_alltoall_named(comm_, name.c_str(), send.data_ptr(), w.counts.data(),
                                             recv.data_ptr(), size_t(recv.numel()) * recv.element_size(),
                                             w.counts.data() + size_, KOLO_UINT8, &r);
    if (status == KOLO_OK)
      w.requests.push_back(r);
    else
      w.submit_status = status;
    w.keep.insert(w.keep.end(), {send, recv});
    KoloWork *self = &w;
    at::Tensor user = output;
    int n = size_;
    w.on_success = [self, expected, user, recv, n]() mutable {
      for (int i = 0; i < n; i++) {
        size_t got = self->counts[size_t(n + i)];
        if (got != expected[size_t(i)])
          throw std::runtime_error("kolo: alltoall_base: rank " + std::to_string(i) + " sent " +
                                   std::to_string(got) + " bytes, this rank's output_split_sizes expected " +
                                   std::to_string(expected[size_t(i)]));
      }
      if (!recv.is_same(user)) user.copy_(recv);
    };
  });
}

}  // namespace kolo_c10d
