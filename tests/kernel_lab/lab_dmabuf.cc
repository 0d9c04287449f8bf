// lab_dmabuf.cc — see lab_dmabuf.h.
#include "lab_dmabuf.h"

#include <fcntl.h>
#include <linux/dma-buf.h>
#include <linux/dma-heap.h>
#include <linux/udmabuf.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "zerocopy/kernel_error.h"

namespace remora::lab {
namespace {

std::string errno_now(const std::string& what) { return what + ": " + zerocopy::errno_text(errno); }

/// Fills `b` with a udmabuf; "" or why the kernel refused.
std::string make_udmabuf(LabDmabuf& b) {
  net::Fd dev(::open("/dev/udmabuf", O_RDWR | O_CLOEXEC));
  if (!dev.valid()) return errno_now("open /dev/udmabuf");
  b.memfd = net::Fd(::memfd_create("remora-lab-udmabuf", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!b.memfd.valid()) return errno_now("memfd_create");
  if (::ftruncate(b.memfd.get(), static_cast<off_t>(b.size)) != 0) return errno_now("ftruncate");
  // udmabuf takes only memfds that cannot shrink under it.
  if (::fcntl(b.memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK) != 0) return errno_now("F_SEAL_SHRINK");
  udmabuf_create create{};
  create.memfd = static_cast<uint32_t>(b.memfd.get());
  create.flags = UDMABUF_FLAGS_CLOEXEC;
  create.size = b.size;
  b.dmabuf = net::Fd(::ioctl(dev.get(), UDMABUF_CREATE, &create));
  return b.dmabuf.valid() ? "" : errno_now("UDMABUF_CREATE");
}

/// Fills `b` with a buffer of the system DMA-BUF heap; "" or why the kernel refused.
std::string make_heap_buffer(LabDmabuf& b) {
  net::Fd heap(::open("/dev/dma_heap/system", O_RDONLY | O_CLOEXEC));
  if (!heap.valid()) return errno_now("open /dev/dma_heap/system");
  dma_heap_allocation_data alloc{};
  alloc.len = b.size;
  alloc.fd_flags = O_RDWR | O_CLOEXEC;
  if (::ioctl(heap.get(), DMA_HEAP_IOCTL_ALLOC, &alloc) != 0) return errno_now("DMA_HEAP_IOCTL_ALLOC");
  b.dmabuf = net::Fd(static_cast<int>(alloc.fd));
  return "";
}

/// A mapping of the whole buffer of our own, with a sync bracket around `fn(bytes)`.
template <typename Fn>
void with_own_mapping(const LabDmabuf& b, uint64_t flags, Fn fn) {
  void* p = ::mmap(nullptr, b.size, PROT_READ | PROT_WRITE, MAP_SHARED, b.dmabuf.get(), 0);
  ASSERT_NE(p, MAP_FAILED) << errno_now("mmap of the " + b.kind + " dmabuf");
  dma_buf_sync s{.flags = DMA_BUF_SYNC_START | flags};
  EXPECT_EQ(::ioctl(b.dmabuf.get(), DMA_BUF_IOCTL_SYNC, &s), 0) << errno_now("DMA_BUF_IOCTL_SYNC start");
  fn(static_cast<std::byte*>(p));
  s.flags = DMA_BUF_SYNC_END | flags;
  EXPECT_EQ(::ioctl(b.dmabuf.get(), DMA_BUF_IOCTL_SYNC, &s), 0) << errno_now("DMA_BUF_IOCTL_SYNC end");
  ::munmap(p, b.size);
}

}  // namespace

LabDmabuf make_lab_dmabuf(const std::string& kind, size_t size) {
  LabDmabuf b;
  b.kind = kind;
  b.size = size;
  b.error = kind == "udmabuf" ? make_udmabuf(b) : make_heap_buffer(b);
  return b;
}

std::vector<std::byte> read_back(const LabDmabuf& b, uint64_t offset, size_t len) {
  std::vector<std::byte> v(len);
  EXPECT_LE(offset + len, b.size);
  if (b.memfd.valid()) {
    EXPECT_EQ(::pread(b.memfd.get(), v.data(), len, static_cast<off_t>(offset)), static_cast<ssize_t>(len))
        << errno_now("pread of the memfd behind the udmabuf");
  } else {
    with_own_mapping(b, DMA_BUF_SYNC_READ, [&](const std::byte* p) { std::memcpy(v.data(), p + offset, len); });
  }
  return v;
}

void write_in(const LabDmabuf& b, uint64_t offset, std::span<const std::byte> data) {
  ASSERT_LE(offset + data.size(), b.size);
  if (b.memfd.valid()) {
    ASSERT_EQ(::pwrite(b.memfd.get(), data.data(), data.size(), static_cast<off_t>(offset)),
              static_cast<ssize_t>(data.size()))
        << errno_now("pwrite of the memfd behind the udmabuf");
  } else {
    with_own_mapping(b, DMA_BUF_SYNC_WRITE, [&](std::byte* p) { std::memcpy(p + offset, data.data(), data.size()); });
  }
}

}  // namespace remora::lab
