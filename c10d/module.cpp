/* _kolo_c10d: the Python extension module behind kolo.torch.distributed. It exposes
 * one factory, create(comm, owned, timeout_ms), which wraps a formed kolo_comm (made
 * by the Python side through ctypes, so both share the one libkolo the process
 * loaded: the extension links libkolo.so.0 by soname) into a ProcessGroupKolo and
 * returns it as torch's own c10d ProcessGroup type, and shutdown_all(), which
 * kolo.torch.distributed registers with atexit: it stops the threads of every group
 * still alive while the interpreter is whole (ProcessGroupKolo::shutdown says why).
 * The module's one piece of state is that list of groups, held weakly so that it
 * keeps none alive. Registering the backend and the rendezvous are Python
 * (python/kolo/torch/distributed.py). */
#include <torch/python.h>

#include <pybind11/chrono.h>

#include <mutex>
#include <vector>

#include "c10d/process_group.hpp"

namespace {

using Weak = c10::weak_intrusive_ptr<kolo_c10d::ProcessGroupKolo>;

struct LiveGroups {
  std::mutex mutex;
  std::vector<Weak> groups;
};

LiveGroups &live_groups() {
  static LiveGroups *live = new LiveGroups;  /* never destroyed: used until exit */
  return *live;
}

c10::intrusive_ptr<c10d::ProcessGroup> create(uintptr_t comm, bool owned, int64_t timeout_ms) {
  TORCH_CHECK(comm != 0, "kolo backend: no communicator");
  TORCH_CHECK(timeout_ms > 0, "kolo backend: the timeout must be positive");
  auto group = c10::make_intrusive<kolo_c10d::ProcessGroupKolo>(
      reinterpret_cast<kolo_comm *>(comm), owned, std::chrono::milliseconds(timeout_ms));
  LiveGroups &live = live_groups();
  std::lock_guard<std::mutex> lock(live.mutex);
  std::vector<Weak> kept;
  for (auto &weak : live.groups)
    if (!weak.expired()) kept.push_back(std::move(weak));
  kept.emplace_back(group);
  live.groups.swap(kept);
  return group;
}

/* Called without the GIL (call_guard). Returns how many groups were shut down. */
size_t shutdown_all() {
  std::vector<Weak> groups;
  {
    LiveGroups &live = live_groups();
    std::lock_guard<std::mutex> lock(live.mutex);
    groups.swap(live.groups);
  }
  size_t count = 0;
  for (auto &weak : groups) {
    c10::intrusive_ptr<kolo_c10d::ProcessGroupKolo> group = weak.lock();
    if (!group) continue;
    group->shutdown();
    count++;
  }
  return count;
}

}  // namespace

PYBIND11_MODULE(_kolo_c10d, m) {
  m.doc() = "kolo's c10d ProcessGroup (torch.distributed backend 'kolo')";
  m.def("create", &create, py::arg("comm"), py::arg("owned"), py::arg("timeout_ms"),
        py::call_guard<py::gil_scoped_release>(),
        "Wraps a formed kolo_comm (its address) into a c10d ProcessGroup.");
  m.def("shutdown_all", &shutdown_all, py::call_guard<py::gil_scoped_release>(),
        "Finishes queued work and stops the threads of every kolo process group still "
        "alive (at interpreter exit); their later collectives fail. Returns the count.");
}
