// zerocopy/dmabuf_source.cc — see dmabuf_source.h.
#include "zerocopy/dmabuf_source.h"

#include <fcntl.h>
#include <linux/dma-heap.h>
#include <linux/udmabuf.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include <fmt/format.h>

#include "zerocopy/kernel_error.h"

namespace remora::zerocopy {
namespace {

constexpr char kUdmabufPath[] = "/dev/udmabuf";
constexpr char kSystemHeapPath[] = "/dev/dma_heap/system";

Result<net::Fd> make_memfd(size_t size, unsigned flags) {
  net::Fd fd(::memfd_create("remora-dmabuf-probe", MFD_CLOEXEC | flags));
  if (!fd.valid()) return net::errno_status(errno, "memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) return net::errno_status(errno, "ftruncate(memfd)");
  return fd;
}

/// An exporter's device, or why not (`absent` says what would make it appear).
Result<net::Fd> open_exporter(const char* path, int flags, std::string_view absent) {
  net::Fd dev(::open(path, flags | O_CLOEXEC));
  if (dev.valid()) return dev;
  const int err = errno;
  return Status(StatusCode::kUnsupported,
                fmt::format("{}: {}{}", path, errno_text(err), err == ENOENT ? fmt::format(" ({})", absent) : ""));
}

/// A dmabuf from /dev/udmabuf, or why not.
Result<net::Fd> from_udmabuf(size_t size) {
  REMORA_ASSIGN_OR_RETURN(net::Fd dev,
                          open_exporter(kUdmabufPath, O_RDWR, "modprobe udmabuf, where the kernel has CONFIG_UDMABUF"));
  REMORA_ASSIGN_OR_RETURN(net::Fd memfd, make_memfd(size, MFD_ALLOW_SEALING));
  // udmabuf takes only memfds that cannot shrink under it.
  if (::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK) != 0) return net::errno_status(errno, "F_SEAL_SHRINK");
  udmabuf_create create{};
  create.memfd = static_cast<uint32_t>(memfd.get());
  create.flags = UDMABUF_FLAGS_CLOEXEC;
  create.size = size;
  const int fd = ::ioctl(dev.get(), UDMABUF_CREATE, &create);
  if (fd < 0) return Status(StatusCode::kUnsupported, fmt::format("UDMABUF_CREATE: {}", errno_text(errno)));
  return net::Fd(fd);
}

/// A dmabuf from the system DMA-BUF heap, or why not.
Result<net::Fd> from_system_heap(size_t size) {
  REMORA_ASSIGN_OR_RETURN(net::Fd heap,
                          open_exporter(kSystemHeapPath, O_RDONLY, "a kernel with CONFIG_DMABUF_HEAPS_SYSTEM"));
  dma_heap_allocation_data alloc{};
  alloc.len = size;
  alloc.fd_flags = O_RDWR | O_CLOEXEC;
  if (::ioctl(heap.get(), DMA_HEAP_IOCTL_ALLOC, &alloc) != 0) {
    return Status(StatusCode::kUnsupported, fmt::format("DMA_HEAP_IOCTL_ALLOC: {}", errno_text(errno)));
  }
  return net::Fd(static_cast<int>(alloc.fd));
}

}  // namespace

std::string DmabufSource::describe() const {
  switch (kind) {
    case Kind::kUdmabuf: return "udmabuf";
    case Kind::kDmaHeap: return "dma-heap system";
    case Kind::kMemfd: return "memfd (not a dmabuf)";
    case Kind::kExported: return exporter;
  }
  return "?";
}

Result<DmabufSource> exported_dmabuf(int fd, size_t size, std::string exporter) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return Status(StatusCode::kInvalidArgument, fmt::format("dmabuf fd {}: {}", fd, errno_text(errno)));
  DmabufSource out;
  out.kind = DmabufSource::Kind::kExported;
  out.fd = net::Fd(copy);
  out.size = size;
  out.exporter = std::move(exporter);
  return out;
}

Result<DmabufSource> best_dmabuf(size_t size, std::string_view gpu_note) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (size == 0 || size % page != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("dmabuf size {} is not a positive multiple of {}", size, page));
  }
  DmabufSource out;
  out.size = size;
  auto udmabuf = from_udmabuf(size);
  if (udmabuf) {
    out.kind = DmabufSource::Kind::kUdmabuf;
    out.fd = std::move(*udmabuf);
    return out;
  }
  auto heap = from_system_heap(size);
  if (heap) {
    out.kind = DmabufSource::Kind::kDmaHeap;
    out.fd = std::move(*heap);
    return out;
  }
  REMORA_ASSIGN_OR_RETURN(out.fd, make_memfd(size, 0));
  out.why_no_dmabuf = fmt::format("no dmabuf exporter here: {}; {}; {}", udmabuf.status().message(),
                                  heap.status().message(), gpu_note);
  return out;
}

}  // namespace remora::zerocopy
