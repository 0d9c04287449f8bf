// python/src/bind_device.cc — device memory in Python: CUDA memory (the process's
// CUDA domain, added to every context once the package first sees CUDA memory;
// remora.cuda_empty and remora.cuda_copy for programs without a framework) and
// remora.DmabufMemory (a range of a dmabuf descriptor, remora/dmabuf.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "binding.h"

namespace remora::python {

namespace {

using namespace nb::literals;

/// The CUDA domain once CUDA memory was first used, and every open context of this
/// module, so that each gets it (use_cuda_memory). Both with the GIL.
MemoryDomain* g_cuda = nullptr;
std::vector<ContextObj*> g_contexts;

void bind_cuda(nb::module_& m) {
  m.def(
      "cuda_empty",
      [](size_t nbytes, int device) {
        use_cuda_memory();
        void* p = nullptr;
        {
          nb::gil_scoped_release unlocked;
          p = take(cuda_allocate(std::max<size_t>(nbytes, 1), device));
        }
        nb::capsule owner(p, [](void* q) noexcept { (void)cuda_free(q); });
        return nb::ndarray<nb::array_api, uint8_t, nb::ndim<1>, nb::device::cuda>(
            p, {nbytes}, owner, {}, nb::dtype<uint8_t>(), nb::device::cuda::value, device);
      },
      "nbytes"_a, "device"_a = 0,
      "`nbytes` of CUDA device memory on `device` (cuMemAlloc in its primary context, through the driver: "
      "no CUDA runtime needed), uninitialised, as a 1-D uint8 array that exports DLPack (kDLCUDA) and is "
      "freed when the last reference to it goes. For programs that have no PyTorch or CuPy to allocate "
      "device memory with. Unsupported, with the driver's reason, where no CUDA driver loads.");
  m.def(
      "cuda_copy",
      [](nb::handle dst, nb::handle src) {
        Memory d = memory_of(dst, true);
        Memory s = memory_of(src, false);
        if (d.size != s.size) {
          raise(Status(StatusCode::kInvalidArgument,
                       "cuda_copy: dst has " + std::to_string(d.size) + " bytes and src " + std::to_string(s.size)));
        }
        MemoryDomain& cuda = use_cuda_memory();
        const bool dst_dev = cuda.owns(d.data, d.size), src_dev = cuda.owns(s.data, s.size);
        if (dst_dev == src_dev) {
          raise(Status(StatusCode::kInvalidArgument,
                       "cuda_copy copies between host and CUDA memory: one side must be each (device to device "
                       "and host to host are the frameworks' and memcpy's)"));
        }
        nb::gil_scoped_release unlocked;
        auto copy = dst_dev ? cuda.copy_from_host(d.data, s.data, s.size) : cuda.copy_to_host(d.data, s.data, s.size);
        check(copy.is_ok() ? (*copy)->wait(kForever) : copy.status());
      },
      "dst"_a, "src"_a,
      "Copies `src` into `dst`, one of them CUDA memory and the other host memory, of the same size, "
      "through the CUDA driver (waits for the copy, GIL released). With cuda_empty, what moves data in "
      "and out of device memory for programs without a framework.");
}

void bind_dmabuf(nb::module_& m) {
  nb::class_<DmabufObj>(m, "DmabufMemory",
                        "Memory in a dmabuf (remora/dmabuf.h): [offset, offset + length) of the dmabuf descriptor "
                        "`fd` (a GPU driver's export, a udmabuf, a DMA-BUF heap buffer; duplicated, the caller "
                        "keeps its own). Give it to Context.add_memory, then use it wherever memory is expected "
                        "(register, send, recv, put, get). Where the CPU can map it, view() shows its bytes and every "
                        "path works; where it cannot, only devmem TCP moves it, and a transfer that would copy it on "
                        "the CPU raises Unsupported saying so.")
      .def(
          "__init__",
          [](DmabufObj* self, int fd, uint64_t offset, uint64_t length) {
            new (self) DmabufObj{take(DmabufMemory::open(fd, offset, length))};
          },
          "fd"_a, "offset"_a, "length"_a,
          "InvalidArgument for a descriptor that is not open or has no size, or a length of 0; OutOfRange for "
          "a range past the buffer's end.")
      .def(
          "view",
          [](nb::handle self) {
            DmabufMemory& d = *nb::cast<DmabufObj&>(self).mem;
            if (!d.mapped()) {
              raise(Status(StatusCode::kUnsupported,
                           "the CPU cannot reach this dmabuf (" + d.unmapped_reason() + "): it has no view"));
            }
            return byte_array(d.data(), d.size(), self);
          },
          "A NumPy uint8 array over its bytes (no copy; keeps it alive). Unsupported where the CPU cannot map it.")
      .def_prop_ro(
          "size", [](const DmabufObj& d) { return d.mem->size(); }, "bytes of the range")
      .def_prop_ro(
          "address", [](const DmabufObj& d) { return reinterpret_cast<uintptr_t>(d.mem->data()); },
          "the address that names the range's first byte")
      .def_prop_ro(
          "mapped", [](const DmabufObj& d) { return d.mem->mapped(); }, "the CPU can read and write it")
      .def_prop_ro(
          "unmapped_reason", [](const DmabufObj& d) { return d.mem->unmapped_reason(); },
          "why not (mmap's errno), or \"\"")
      .def_prop_ro(
          "is_dmabuf", [](const DmabufObj& d) { return d.mem->is_dmabuf(); },
          "the kernel knows the descriptor as a dmabuf (only a real one can be bound by a NIC)")
      .def_prop_ro(
          "exporter", [](const DmabufObj& d) { return d.mem->exporter(); },
          "the exporter's name (\"udmabuf\", \"system\", a GPU driver's), or \"\"")
      .def("__len__", [](const DmabufObj& d) { return d.mem->size(); });
}

}  // namespace

MemoryDomain& use_cuda_memory() {
  if (g_cuda != nullptr) return *g_cuda;
  MemoryDomain* cuda = take(cuda_domain());
  for (ContextObj* c : g_contexts) {
    if (c->ctx) check(c->ctx->add_memory_domain(*cuda));
  }
  g_cuda = cuda;
  return *cuda;
}

void attach_cuda(ContextObj& c) {
  if (g_cuda != nullptr) check(c.ctx->add_memory_domain(*g_cuda));
  g_contexts.push_back(&c);
}

void detach_cuda(ContextObj& c) { std::erase(g_contexts, &c); }

void bind_device(nb::module_& m) {
  bind_cuda(m);
  bind_dmabuf(m);
}

}  // namespace remora::python
