// zerocopy/dmabuf_source.h — the best file descriptor this host can offer to a devmem
// bind attempt: a real dmabuf from /dev/udmabuf (over a sealed memfd) or from the DMA-BUF
// system heap (/dev/dma_heap/system) where the kernel has one, else a plain memfd, which
// is not a dmabuf: binding it shows how far the kernel gets before it refuses. A GPU's
// dmabuf export (CUDA) is made by the CUDA memory domain; its fd can be wrapped here
// (Kind::kExported) so the bind attempts treat it like any other.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "net/socket.h"
#include "remora/status.h"

namespace remora::zerocopy {

struct DmabufSource {
  enum class Kind : uint8_t {
    kUdmabuf,  ///< a dmabuf made by /dev/udmabuf from a sealed memfd
    kDmaHeap,  ///< a dmabuf from /dev/dma_heap/system
    kMemfd,    ///< a memfd: not a dmabuf (no exporter on this host)
    kExported, ///< a dmabuf exported by a device driver (a GPU's), described by `exporter`
  };
  Kind kind = Kind::kMemfd;
  net::Fd fd;
  size_t size = 0;
  /// kMemfd: why no dmabuf could be had, exporter by exporter.
  std::string why_no_dmabuf;
  /// kExported: what exported it.
  std::string exporter;

  bool is_dmabuf() const { return kind != Kind::kMemfd; }
  /// "udmabuf", "dma-heap system", "memfd (not a dmabuf)", or the exporter
  std::string describe() const;
};

/// The best descriptor of `size` bytes (a multiple of the page size) this host has: a
/// dmabuf if any exporter gives one, else a memfd with `why_no_dmabuf` filled (ending
/// with `gpu_note`: what became of a GPU export). An error only when not even a memfd
/// can be made.
Result<DmabufSource> best_dmabuf(size_t size, std::string_view gpu_note = "no GPU export was tried");

/// A device driver's dmabuf export (`fd` is duplicated; the caller keeps its own).
Result<DmabufSource> exported_dmabuf(int fd, size_t size, std::string exporter);

}  // namespace remora::zerocopy
