// python/src/buffers.cc — Python objects as remora memory and back (see buffers.h): the
// module's own objects, the buffer protocol and DLPack, each converted here only.
#include "buffers.h"

#include <string>
#include <utility>

#include "binding.h"

namespace remora::python {

namespace {

/// The DataType of a buffer-protocol format character and item size.
std::optional<DataType> type_of_format(const char* format, size_t itemsize) {
  std::string f = format != nullptr ? format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.erase(0, 1);
  if (f.size() != 1) return std::nullopt;
  const char c = f[0];
  switch (c) {
    case 'e': return DataType::kFloat16;
    case 'f': return DataType::kFloat32;
    case 'd': return DataType::kFloat64;
    case 'c':
    case 'B':
    case '?': return DataType::kUint8;
    case 'b': return DataType::kInt8;
    default: break;
  }
  const bool is_signed = c == 'h' || c == 'i' || c == 'l' || c == 'q' || c == 'n';
  const bool is_unsigned = c == 'H' || c == 'I' || c == 'L' || c == 'Q' || c == 'N';
  if (!is_signed && !is_unsigned) return std::nullopt;
  switch (itemsize) {
    case 4: return is_signed ? DataType::kInt32 : DataType::kUint32;
    case 8: return is_signed ? DataType::kInt64 : DataType::kUint64;
    default: return std::nullopt;  // 16-bit integers: remora has no such type
  }
}

std::optional<DataType> type_of_dlpack(nb::dlpack::dtype t) {
  using nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  switch (static_cast<dtype_code>(t.code)) {
    case dtype_code::Float:
      return t.bits == 16 ? std::optional(DataType::kFloat16)
             : t.bits == 32 ? std::optional(DataType::kFloat32)
             : t.bits == 64 ? std::optional(DataType::kFloat64)
                            : std::nullopt;
    case dtype_code::Bfloat: return t.bits == 16 ? std::optional(DataType::kBFloat16) : std::nullopt;
    case dtype_code::Int:
      return t.bits == 8 ? std::optional(DataType::kInt8)
             : t.bits == 32 ? std::optional(DataType::kInt32)
             : t.bits == 64 ? std::optional(DataType::kInt64)
                            : std::nullopt;
    case dtype_code::UInt:
      return t.bits == 8 ? std::optional(DataType::kUint8)
             : t.bits == 32 ? std::optional(DataType::kUint32)
             : t.bits == 64 ? std::optional(DataType::kUint64)
                            : std::nullopt;
    case dtype_code::Bool: return t.bits == 8 ? std::optional(DataType::kUint8) : std::nullopt;
    default: return std::nullopt;
  }
}

std::string obj_type_name(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

/// The bytes of this module's objects that are memory (DmabufMemory, Buffer, Region),
/// as uint8 held by the object; nullopt for any other object.
std::optional<Memory> memory_of_module_object(nb::handle obj) {
  Memory m;
  if (nb::isinstance<DmabufObj>(obj)) {
    // Its address names its bytes even where the CPU cannot reach them (remora moves
    // those by devmem TCP only, and says so).
    DmabufMemory& d = *nb::cast<DmabufObj&>(obj).mem;
    m.data = d.data();
    m.size = d.size();
  } else if (nb::isinstance<BufferObj>(obj)) {
    BufferObj& b = nb::cast<BufferObj&>(obj);
    if (!b.buf.valid()) raise(Status(StatusCode::kInvalidArgument, "the remora.Buffer was released"));
    m.data = b.buf.data();
    m.size = b.buf.size();
  } else if (nb::isinstance<RegionObj>(obj)) {
    RegionObj& r = nb::cast<RegionObj&>(obj);
    if (!r.region.valid()) raise(Status(StatusCode::kInvalidArgument, "the remora.Region was deregistered"));
    m.data = r.region.data();
    m.size = r.region.size();
  } else {
    return std::nullopt;
  }
  m.type = DataType::kUint8;
  m.holder = std::make_shared<Holder>();
  m.holder->owner = nb::borrow(obj);
  return m;
}

/// Raises InvalidArgument unless the DLPack tensor is row-major contiguous (its
/// strides, in elements).
void check_contiguous(nb::handle obj, const nb::ndarray<>& array) {
  int64_t expect = 1;
  for (size_t i = array.ndim(); i-- > 0;) {
    if (array.shape(i) != 1 && array.stride_ptr() != nullptr && array.stride(i) != expect) {
      raise(Status(StatusCode::kInvalidArgument,
                   obj_type_name(obj) + " is not contiguous: remora moves contiguous memory in place (call "
                                        ".contiguous() first)"));
    }
    expect *= static_cast<int64_t>(array.shape(i));
  }
}

/// The memory of a DLPack object: host memory the CPU reaches, or CUDA memory the
/// driver knows.
Memory memory_of_dlpack(nb::handle obj, std::shared_ptr<Holder> holder) {
  nb::ndarray<> array;
  if (!nb::try_cast(obj, array, false)) {
    raise(Status(StatusCode::kInvalidArgument, obj_type_name(obj) + ": its DLPack export could not be imported"));
  }
  const int device = array.device_type();
  // Host memory the CPU reaches directly: plain, CUDA-pinned and CUDA-managed.
  const bool host = device == nb::device::cpu::value || device == nb::device::cuda_host::value ||
                    device == nb::device::cuda_managed::value;
  if (device == nb::device::cuda::value) {
    MemoryDomain& cuda = use_cuda_memory();  // raises with the driver's reason where there is none
    const auto* data = static_cast<std::byte*>(array.data_handle()) + array.byte_offset();
    if (array.nbytes() > 0 && !cuda.owns(data, array.nbytes())) {
      // Never treat it as host memory: the CPU cannot touch a device address.
      raise(Status(StatusCode::kInvalidArgument,
                   obj_type_name(obj) +
                       " says it is CUDA memory (DLPack device type 2), but the CUDA driver "
                       "does not know its " +
                       std::to_string(array.nbytes()) + " bytes"));
    }
  } else if (!host) {
    raise(Status(StatusCode::kUnsupported, obj_type_name(obj) + " lives in memory of DLPack device type " +
                                               std::to_string(device) +
                                               ": remora moves host and CUDA memory only (docs/python.md)"));
  }
  check_contiguous(obj, array);
  Memory m;
  m.data = static_cast<std::byte*>(array.data_handle()) + array.byte_offset();
  m.size = array.nbytes();
  m.itemsize = array.itemsize();
  m.type = type_of_dlpack(array.dtype());
  holder->array = std::move(array);
  m.holder = std::move(holder);
  return m;
}

/// The memory of an object with the buffer protocol (a device array that refuses it
/// falls back to DLPack).
Memory memory_of_buffer(nb::handle obj, bool writable, std::shared_ptr<Holder> holder) {
  const int flags = PyBUF_ND | PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &holder->view, flags) != 0) {
    PyErr_Clear();
    // A device array whose type has the buffer protocol refuses it (nanobind's
    // ndarray does): its DLPack export says where its memory is.
    if (nb::hasattr(obj, "__dlpack__")) return memory_of_dlpack(obj, std::move(holder));
    raise(Status(StatusCode::kInvalidArgument,
                 obj_type_name(obj) + (writable ? " is not a writable buffer (remora would write into it)"
                                                : " does not export its buffer")));
  }
  holder->has_view = true;
  if (PyBuffer_IsContiguous(&holder->view, 'C') == 0) {
    raise(Status(StatusCode::kInvalidArgument,
                 obj_type_name(obj) + " is not contiguous: remora moves contiguous memory in place (copy it first, "
                                      "e.g. numpy.ascontiguousarray)"));
  }
  Memory m;
  m.data = static_cast<std::byte*>(holder->view.buf);
  m.size = static_cast<size_t>(holder->view.len);
  m.itemsize = static_cast<size_t>(holder->view.itemsize);
  m.type = type_of_format(holder->view.format, m.itemsize);
  m.holder = std::move(holder);
  return m;
}

}  // namespace

Memory memory_of(nb::handle obj, bool writable) {
  if (std::optional<Memory> m = memory_of_module_object(obj)) return std::move(*m);
  auto holder = std::make_shared<Holder>();
  holder->owner = nb::borrow(obj);
  if (PyObject_CheckBuffer(obj.ptr()) != 0) return memory_of_buffer(obj, writable, std::move(holder));
  if (nb::hasattr(obj, "__dlpack__")) return memory_of_dlpack(obj, std::move(holder));
  raise(Status(StatusCode::kInvalidArgument,
               obj_type_name(obj) + " has neither the buffer protocol nor DLPack: pass a NumPy array, a PyTorch "
                                    "tensor, bytes, bytearray, memoryview, a remora.Buffer or a remora.Region"));
}

ByteArray byte_array(std::byte* data, size_t size, nb::handle owner) {
  size_t shape[1] = {size};
  return ByteArray(reinterpret_cast<uint8_t*>(data), 1, shape, owner);
}

nb::bytes to_bytes(std::span<const std::byte> data) {
  return nb::bytes(reinterpret_cast<const char*>(data.data()), data.size());
}

std::span<const std::byte> bytes_of(const nb::bytes& b) { return {static_cast<const std::byte*>(b.data()), b.size()}; }

}  // namespace remora::python
