// python/torch/csrc/module.cc — remora_torch._C: the constructor torch.distributed
// calls through the Python creator (remora_torch/__init__.py), and a query for tests.
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <string>

#include "backend.h"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 double timeout_s, const std::string& host, int local_size) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  return c10::make_intrusive<remora_torch::ProcessGroupRemora>(store, rank, size, timeout, host, local_size);
}

std::string allreduce_algorithm(const c10::intrusive_ptr<c10d::Backend>& backend, size_t bytes) {
  auto* pg = dynamic_cast<remora_torch::ProcessGroupRemora*>(backend.get());
  TORCH_CHECK(pg != nullptr, "not a remora backend");
  return pg->allreduce_algorithm(bytes);
}

py::dict connections(const c10::intrusive_ptr<c10d::Backend>& backend) {
  auto* pg = dynamic_cast<remora_torch::ProcessGroupRemora*>(backend.get());
  TORCH_CHECK(pg != nullptr, "not a remora backend");
  const remora::ConnectionStats st = pg->connections();
  py::dict d;
  d["peers"] = st.peers;
  d["sockets"] = st.sockets;
  d["sealed_peers"] = st.sealed_peers;
  d["segment_ranks"] = st.segment_ranks;
  d["no_segment"] = st.no_segment;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "The remora backend of torch.distributed (C++ part); use remora_torch.";
  // Constructing it meets the other ranks: release the GIL meanwhile.
  m.def("create_backend", &create_backend, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout_s"), py::arg("host"), py::arg("local_size"), py::call_guard<py::gil_scoped_release>(),
        "A ProcessGroupRemora meeting the other ranks through `store` (a c10d Store).");
  m.def("allreduce_algorithm", &allreduce_algorithm, py::arg("backend"), py::arg("bytes"),
        "The algorithm remora runs for an allreduce of `bytes` on this backend (\"ring\", \"rd\", ...).");
  m.def("connections", &connections, py::arg("backend"),
        "What this rank's backend holds to reach the others: peers (ranks with an endpoint), sockets, "
        "sealed_peers (of those, the ones whose connections are sealed: REMORA_ENCRYPT), segment_ranks "
        "(ranks that map this rank's shared segment, itself included; 0: none) and no_segment (why none).");
#ifdef REMORA_TORCH_WINDOWS
  m.attr("has_windows") = true;
#else
  m.attr("has_windows") = false;  // built against a PyTorch without c10d windows (or told so)
#endif
}
