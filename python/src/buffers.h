// python/src/buffers.h — Python objects as remora memory: anything with the buffer
// protocol (NumPy arrays, bytes, bytearray, memoryview, mmap) or DLPack (PyTorch
// tensors), seen in place (never copied), and the keep-alive registry that holds
// those objects for as long as an outstanding Request may touch their memory.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "remora/remora.h"

namespace remora::python {

namespace nb = nanobind;

/// Raised from C++ and turned into the remora.Error subclass of its code.
struct StatusError {
  Status status;
};
[[noreturn]] inline void raise(Status s) { throw StatusError{std::move(s)}; }
inline void check(const Status& s) {
  if (!s.is_ok()) raise(s);
}
template <typename T>
T take(Result<T> r) {
  if (!r.is_ok()) raise(r.status());
  return std::move(r).value();
}

/// What holds a Python object's memory for remora: the Py_buffer (buffer protocol,
/// which also stops a bytearray from resizing) or the imported DLPack tensor, and the
/// object itself. Destroyed only with the GIL held.
struct Holder {
  Py_buffer view{};
  bool has_view = false;
  std::optional<nb::ndarray<>> array;
  nb::object owner;
  std::shared_ptr<void> extra;  ///< other storage an operation uses (counts, an atomic's result)
  Holder() = default;
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
  ~Holder() {
    if (has_view) PyBuffer_Release(&view);
  }
};

/// A contiguous range of host (or, refused for now, device) memory of a Python object.
struct Memory {
  std::byte* data = nullptr;
  size_t size = 0;
  std::optional<DataType> type;  ///< the element type when the object says (array dtype)
  size_t itemsize = 1;
  std::shared_ptr<Holder> holder;
  std::span<std::byte> span() const { return {data, size}; }
};

/// The object's memory, in place. `writable`: remora will write into it (recv, get).
/// Region and Buffer objects of this module are accepted too (see bindings). Raises
/// InvalidArgument for an object without either protocol or non-contiguous memory.
/// CUDA device memory (DLPack device kDLCUDA: PyTorch CUDA tensors, CuPy arrays,
/// remora.cuda_empty) is accepted once the CUDA driver loads (use_cuda_memory());
/// Unsupported, with the driver's reason, where it does not, and for other devices.
Memory memory_of(nb::handle obj, bool writable);

/// Loads the CUDA driver and adds the process's CUDA domain to every context of this
/// module, now and later (module.cc), so that their endpoints, regions and collectives
/// stage CUDA memory through pinned host buffers. Once per process; raises Unsupported
/// with the driver's reason where there is none. With the GIL. Returns the domain.
MemoryDomain& use_cuda_memory();

/// Objects kept alive while remora may touch their memory. A token per operation:
/// hold() stores the holders and arranges (through Request::on_done, which runs on
/// remora's threads without the GIL) for the token to be released; sweep(), called with
/// the GIL from every binding that posts or waits, drops what completed operations held.
class KeepAlive {
 public:
  static KeepAlive& instance();
  void hold(const Request& r, std::vector<std::shared_ptr<Holder>> holders);
  void sweep();
  size_t pending();

 private:
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<Holder>>> held_;  // GIL
  uint64_t next_ = 1;                                                        // GIL
  std::mutex mutex_;
  std::vector<uint64_t> released_;  // mutex_
};

}  // namespace remora::python
