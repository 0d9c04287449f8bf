// python/src/buffers.h — Python objects as remora memory, and remora memory as Python
// objects: the one place the binders convert between them. In: anything with the
// buffer protocol (NumPy arrays, bytes, bytearray, memoryview, mmap), DLPack (PyTorch
// tensors, CuPy arrays, CUDA memory), and this module's own Region, Buffer and
// DmabufMemory, seen in place (never copied), with what holds that memory for as long
// as an operation may touch it. Out: bytes, and NumPy arrays over memory remora owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "remora/remora.h"

namespace remora::python {

namespace nb = nanobind;

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

/// A contiguous range of host or CUDA memory of a Python object.
struct Memory {
  std::byte* data = nullptr;
  size_t size = 0;
  std::optional<DataType> type;  ///< the element type when the object says (array dtype)
  size_t itemsize = 1;
  std::shared_ptr<Holder> holder;
  std::span<std::byte> span() const { return {data, size}; }
};

/// The object's memory, in place. `writable`: remora will write into it (recv, get).
/// A remora.Region (InvalidArgument once deregistered), remora.Buffer (once released)
/// or remora.DmabufMemory is its bytes, as uint8 (a dmabuf's address names them even
/// where the CPU cannot reach them). Otherwise the buffer protocol, then DLPack:
/// InvalidArgument for an object with neither or non-contiguous memory. CUDA device
/// memory (DLPack device kDLCUDA: PyTorch CUDA tensors, CuPy arrays, remora.cuda_empty)
/// is accepted once the CUDA driver loads (use_cuda_memory, binding.h); Unsupported,
/// with the driver's reason, where it does not, and for other devices.
Memory memory_of(nb::handle obj, bool writable);

/// A 1-D NumPy uint8 array over `size` bytes at `data` (no copy) that keeps `owner`
/// alive: Buffer.view(), DmabufMemory.view().
using ByteArray = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;
ByteArray byte_array(std::byte* data, size_t size, nb::handle owner);

/// Python bytes holding a copy of `data` (keys, store values).
nb::bytes to_bytes(std::span<const std::byte> data);

/// The bytes of a Python bytes object, in place (valid while it lives).
std::span<const std::byte> bytes_of(const nb::bytes& b);

}  // namespace remora::python
