/* _kolo_c10d: the Python extension module behind kolo.torch.distributed. It exposes
 * one factory, create(comm, owned, timeout_ms), which wraps a formed kolo_comm (made
 * by the Python side through ctypes, so both share the one libkolo the process
 * loaded: the extension links libkolo.so.0 by soname) into a ProcessGroupKolo and
 * returns it as torch's own c10d ProcessGroup type. Registering the backend and the
 * rendezvous are Python (python/kolo/torch/distributed.py). */
#include <torch/python.h>

#include <pybind11/chrono.h>

#include "c10d/process_group.hpp"

namespace {

c10::intrusive_ptr<c10d::ProcessGroup> create(uintptr_t comm, bool owned, int64_t timeout_ms) {
  TORCH_CHECK(comm != 0, "kolo backend: no communicator");
  TORCH_CHECK(timeout_ms > 0, "kolo backend: the timeout must be positive");
  return c10::make_intrusive<kolo_c10d::ProcessGroupKolo>(
      reinterpret_cast<kolo_comm *>(comm), owned, std::chrono::milliseconds(timeout_ms));
}

}  // namespace

PYBIND11_MODULE(_kolo_c10d, m) {
  m.doc() = "kolo's c10d ProcessGroup (torch.distributed backend 'kolo')";
  m.def("create", &create, py::arg("comm"), py::arg("owned"), py::arg("timeout_ms"),
        py::call_guard<py::gil_scoped_release>(),
        "Wraps a formed kolo_comm (its address) into a c10d ProcessGroup.");
}
