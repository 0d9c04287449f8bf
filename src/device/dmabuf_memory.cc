// device/dmabuf_memory.cc — see remora/dmabuf.h.
#include <fcntl.h>
#include <linux/dma-buf.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include <fmt/format.h>

#include "device/cuda_copy.h"
#include "remora/dmabuf.h"

namespace remora {
namespace {

std::string errno_name(int err) { return fmt::format("{} ({})", err, std::strerror(err)); }

/// The exporter /proc/self/fdinfo names for `fd` ("exp_name:"), or "" when the kernel
/// does not know it as a dmabuf.
std::string exporter_of(int fd) {
  std::ifstream in(fmt::format("/proc/self/fdinfo/{}", fd));
  std::string line;
  while (std::getline(in, line)) {
    constexpr std::string_view kKey = "exp_name:";
    if (line.rfind(kKey, 0) == 0) {
      const size_t at = line.find_first_not_of(" \t", kKey.size());
      return at == std::string::npos ? std::string("?") : line.substr(at);
    }
  }
  return "";
}

}  // namespace

struct DmabufMemory::State final : MemoryDomain {
  int fd = -1;
  uint64_t offset = 0;  // of data()'s first byte in the dmabuf
  uint64_t length = 0;
  void* map = nullptr;  // the mapping (or the reservation), page-aligned
  size_t map_bytes = 0;
  std::byte* base = nullptr;
  bool mapped = false;
  std::string unmapped_reason;
  std::string exporter;

  ~State() override {
    if (map != nullptr) ::munmap(map, map_bytes);
    if (fd >= 0) ::close(fd);
  }

  MemoryKind kind() const noexcept override { return MemoryKind::kDmabuf; }
  std::string_view name() const noexcept override { return "dmabuf"; }

  bool owns(const void* ptr, size_t len) const override {
    const auto* p = static_cast<const std::byte*>(ptr);
    return p >= base && len <= length && static_cast<uint64_t>(p - base) <= length - len;
  }

  Result<DomainRegistration> register_range(void* ptr, size_t len, PinMode /*mode*/) override {
    if (len == 0) return Status(StatusCode::kInvalidArgument, "cannot register an empty range (length 0)");
    if (!owns(ptr, len)) {
      return Status(StatusCode::kInvalidArgument, fmt::format("{} + {} bytes is not inside the dmabuf range {} + {}",
                                                              ptr, len, static_cast<void*>(base), length));
    }
    return DomainRegistration{};  // the exporter holds the pages: nothing to pin
  }
  void deregister_range(void* /*ptr*/, size_t /*len*/, const DomainRegistration& /*reg*/) noexcept override {}

  /// kUnsupported for a CPU copy of a dmabuf the CPU cannot map.
  Status cpu_access(const void* ptr, size_t len, std::string_view what) const {
    if (!owns(ptr, len)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{}: {} + {} bytes is not inside the dmabuf range", what, ptr, len));
    }
    if (mapped) return Status::ok();
    return Status(StatusCode::kUnsupported,
                  fmt::format("{}: the CPU cannot reach this dmabuf ({}): only devmem TCP moves it (devmem TX from "
                              "it, with REMORA_DEVMEM_IFNAME naming a NIC that binds it)",
                              what, unmapped_reason));
  }

  /// DMA_BUF_IOCTL_SYNC around a CPU access (`flags` READ and/or WRITE). A descriptor
  /// that is not a dmabuf refuses it (ENOTTY), which leaves nothing to synchronise.
  void sync(uint64_t flags) const {
    dma_buf_sync s{.flags = flags};
    int r;
    do {
      r = ::ioctl(fd, DMA_BUF_IOCTL_SYNC, &s);
    } while (r != 0 && (errno == EINTR || errno == EAGAIN));
  }

  Result<std::unique_ptr<AsyncCopy>> copy_to_host(void* host_dst, const void* src, size_t len) override {
    REMORA_RETURN_IF_ERROR(cpu_access(src, len, "copy from dmabuf memory"));
    sync(DMA_BUF_SYNC_START | DMA_BUF_SYNC_READ);
    std::memcpy(host_dst, src, len);
    sync(DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ);
    return device::completed_copy();
  }

  Result<std::unique_ptr<AsyncCopy>> copy_from_host(void* dst, const void* host_src, size_t len) override {
    REMORA_RETURN_IF_ERROR(cpu_access(dst, len, "copy into dmabuf memory"));
    sync(DMA_BUF_SYNC_START | DMA_BUF_SYNC_WRITE);
    std::memcpy(dst, host_src, len);
    sync(DMA_BUF_SYNC_END | DMA_BUF_SYNC_WRITE);
    return device::completed_copy();
  }

  Result<std::unique_ptr<AsyncCopy>> scatter(void* dst_base, const void* src_base,
                                             std::span<const ScatterEntry> entries) override {
    for (const ScatterEntry& e : entries) {
      REMORA_RETURN_IF_ERROR(
          cpu_access(static_cast<const std::byte*>(src_base) + e.src_offset, e.length, "scatter within dmabuf memory"));
      REMORA_RETURN_IF_ERROR(
          cpu_access(static_cast<std::byte*>(dst_base) + e.dst_offset, e.length, "scatter within dmabuf memory"));
    }
    sync(DMA_BUF_SYNC_START | DMA_BUF_SYNC_RW);
    for (const ScatterEntry& e : entries) {
      std::memcpy(static_cast<std::byte*>(dst_base) + e.dst_offset,
                  static_cast<const std::byte*>(src_base) + e.src_offset, e.length);
    }
    sync(DMA_BUF_SYNC_END | DMA_BUF_SYNC_RW);
    return device::completed_copy();
  }

  /// The range as itself: devmem TX binds this descriptor.
  Result<DmabufExport> export_dmabuf(const void* ptr, size_t len) override {
    if (!owns(ptr, len)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("dmabuf export: {} + {} bytes is not inside the dmabuf range", ptr, len));
    }
    const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return Status(StatusCode::kNoResource, "dmabuf export: dup: " + errno_name(errno));
    return DmabufExport{
        .fd = dup, .offset = offset + static_cast<uint64_t>(static_cast<const std::byte*>(ptr) - base), .length = len};
  }
};

DmabufMemory::DmabufMemory(std::unique_ptr<State> s) : s_(std::move(s)) {}
DmabufMemory::~DmabufMemory() = default;

Result<std::unique_ptr<DmabufMemory>> DmabufMemory::open(int fd, uint64_t offset, uint64_t length) {
  if (length == 0) return Status(StatusCode::kInvalidArgument, "a dmabuf range of 0 bytes");
  auto s = std::make_unique<State>();
  s->fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (s->fd < 0) return Status(StatusCode::kInvalidArgument, fmt::format("dmabuf fd {}: {}", fd, errno_name(errno)));
  const off_t end = ::lseek(s->fd, 0, SEEK_END);
  if (end < 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("dmabuf fd {} has no size (lseek: {}): not a dmabuf", fd, errno_name(errno)));
  }
  if (offset > static_cast<uint64_t>(end) || length > static_cast<uint64_t>(end) - offset) {
    return Status(StatusCode::kOutOfRange,
                  fmt::format("dmabuf range {} + {} bytes is past the end of the {}-byte buffer", offset, length, end));
  }
  s->offset = offset;
  s->length = length;
  s->exporter = exporter_of(s->fd);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t from = offset / page * page;
  s->map_bytes = static_cast<size_t>((offset + length + page - 1) / page * page - from);
  void* p = ::mmap(nullptr, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, static_cast<off_t>(from));
  if (p != MAP_FAILED) {
    s->mapped = true;
  } else {
    s->unmapped_reason = "mmap: " + errno_name(errno);
    // Address space of its own, never readable, so pointers name the range's bytes.
    p = ::mmap(nullptr, s->map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return Status(StatusCode::kNoResource,
                    fmt::format("dmabuf range of {} bytes: no address space for it ({})", length, errno_name(errno)));
    }
  }
  s->map = p;
  s->base = static_cast<std::byte*>(p) + (offset - from);
  return std::unique_ptr<DmabufMemory>(new DmabufMemory(std::move(s)));
}

std::byte* DmabufMemory::data() const noexcept { return s_->base; }
size_t DmabufMemory::size() const noexcept { return static_cast<size_t>(s_->length); }
bool DmabufMemory::mapped() const noexcept { return s_->mapped; }
const std::string& DmabufMemory::unmapped_reason() const noexcept { return s_->unmapped_reason; }
bool DmabufMemory::is_dmabuf() const noexcept { return !s_->exporter.empty(); }
const std::string& DmabufMemory::exporter() const noexcept { return s_->exporter; }
MemoryDomain& DmabufMemory::domain() noexcept { return *s_; }

}  // namespace remora
