// lab_dmabuf.h — real dmabufs for the kernel lab's tests, made here with the kernel's own
// interfaces (not through the library, which the tests check): a udmabuf over a sealed
// memfd (UDMABUF_CREATE) and a buffer of the DMA-BUF system heap (DMA_HEAP_IOCTL_ALLOC);
// and a view of each buffer's bytes that is independent of DmabufMemory's mapping (the
// memfd behind a udmabuf, or a mapping of our own of the heap buffer, bracketed by
// DMA_BUF_IOCTL_SYNC), so that what a transfer wrote is read back another way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "net/socket.h"

namespace remora::lab {

struct LabDmabuf {
  std::string kind;  ///< "udmabuf" or "dma-heap"
  net::Fd dmabuf;
  net::Fd memfd;  ///< udmabuf: the memfd whose pages the dmabuf exports
  size_t size = 0;
  std::string error;  ///< why none could be made ("" when made)
  bool ok() const { return error.empty(); }
};

/// A dmabuf of `size` bytes (a multiple of the page size) of `kind`, or one whose
/// `error` says why the kernel refused.
LabDmabuf make_lab_dmabuf(const std::string& kind, size_t size);

/// The buffer's bytes [offset, offset + len), read without DmabufMemory. Fails the test
/// (and returns what it has) when the kernel refuses the read or the sync.
std::vector<std::byte> read_back(const LabDmabuf& b, uint64_t offset, size_t len);
/// Writes `data` at `offset`, without DmabufMemory.
void write_in(const LabDmabuf& b, uint64_t offset, std::span<const std::byte> data);

}  // namespace remora::lab
