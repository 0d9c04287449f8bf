// remora/dmabuf.h — memory in a dmabuf: a range of a dmabuf file descriptor (a GPU
// driver's export, a udmabuf, a DMA-BUF heap's buffer) given an address, so that the
// rest of the API names it by pointer like any other memory: register it as a Region
// with remote keys, send and receive from it, put into it and get from it.
//
//   auto mem = remora::DmabufMemory::open(fd, offset, length).value();
//   ctx->add_memory_domain(mem->domain());
//   auto region = ctx->register_memory(mem->data(), mem->size(), Access::kRemoteWrite);
//
// Where the exporter lets the CPU map the dmabuf (udmabuf and the heaps do; GPU drivers
// mostly do not), data() is that mapping, and the domain's copies are memcpy bracketed
// by DMA_BUF_IOCTL_SYNC, so every path works, staging included. Where it does not,
// data() is address space reserved for the range (never readable by the CPU) and only
// devmem TCP can move it: devmem TX sends straight from the dmabuf (the domain exports
// the range, and REMORA_DEVMEM_IFNAME binds it); a transfer that would need a CPU copy
// fails with `unsupported` saying so. Either way the domain exports the range as itself
// (a duplicate of the descriptor and the offset), which is what devmem TX binds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "remora/memory.h"
#include "remora/status.h"

namespace remora {

class DmabufMemory {
 public:
  /// [offset, offset + length) of the dmabuf `fd` (duplicated: the caller keeps and
  /// closes its own). kInvalidArgument for a descriptor that is not open or a length of
  /// 0; kOutOfRange for a range past the buffer's end. Any descriptor mmap() accepts is
  /// taken (is_dmabuf() says whether the kernel knows it as a dmabuf: only a real one
  /// can be bound by a NIC).
  static Result<std::unique_ptr<DmabufMemory>> open(int fd, uint64_t offset, uint64_t length);
  ~DmabufMemory();
  DmabufMemory(const DmabufMemory&) = delete;
  DmabufMemory& operator=(const DmabufMemory&) = delete;

  /// The address of the range's first byte, and its bytes.
  std::byte* data() const noexcept;
  size_t size() const noexcept;
  /// The CPU can read and write it (the exporter let it be mapped).
  bool mapped() const noexcept;
  /// Why not, when it is not mapped (mmap's errno).
  const std::string& unmapped_reason() const noexcept;
  /// The kernel knows the descriptor as a dmabuf (/proc/self/fdinfo names an exporter).
  bool is_dmabuf() const noexcept;
  /// The exporter's name ("udmabuf", "system", a GPU driver's), or "" when not a dmabuf.
  const std::string& exporter() const noexcept;
  /// The memory domain of data(): give it to Context::add_memory_domain. Valid while
  /// this object lives, which must outlive every region of it and every context it was
  /// added to.
  MemoryDomain& domain() noexcept;

 private:
  struct State;
  explicit DmabufMemory(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace remora
