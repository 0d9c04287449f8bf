// datapath/devmem_rx_lease.cc — see devmem_rx_lease.h.
#include "datapath/devmem_rx_lease.h"

#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "datapath/zcrx_path.h"
#include "net/socket.h"
#include "zerocopy/flow_steering.h"
#include "zerocopy/kernel_error.h"

namespace remora::detail {
namespace {

std::mutex g_kernel_mu;
std::shared_ptr<const DevmemRxKernel> g_kernel;  // guarded by g_kernel_mu; null: the system's

/// One end of a flow: its port and address, from a socket address.
bool end_of(const net::SockAddr& a, uint16_t* port, std::array<uint8_t, 16>* addr) {
  if (a.family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a.get());
    *port = ntohs(in->sin_port);
    std::memcpy(addr->data(), &in->sin_addr, 4);
    return true;
  }
  if (a.family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a.get());
    *port = ntohs(in6->sin6_port);
    std::memcpy(addr->data(), &in6->sin6_addr, 16);
    return true;
  }
  return false;
}

/// The flow of connected TCP socket `fd` as its receiver sees it: packets from the
/// peer's address and port to ours.
Result<zerocopy::TcpFlow> flow_of(int fd) {
  REMORA_ASSIGN_OR_RETURN(const net::SockAddr local, net::local_address(fd));
  REMORA_ASSIGN_OR_RETURN(const net::SockAddr peer, net::peer_address(fd));
  zerocopy::TcpFlow f;
  f.ipv6 = local.family() == AF_INET6;
  if (local.family() != peer.family() || !end_of(local, &f.dst_port, &f.dst_addr) ||
      !end_of(peer, &f.src_port, &f.src_addr)) {
    return Status(StatusCode::kUnsupported, "devmem RX: a data stream that is neither TCP over IPv4 nor over IPv6");
  }
  return f;
}

bool same_file(int a, int b) {
  struct stat sa = {};
  struct stat sb = {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

std::shared_ptr<const DevmemRxKernel> devmem_rx_kernel() {
  std::lock_guard lock(g_kernel_mu);
  if (!g_kernel) g_kernel = std::make_shared<const DevmemRxKernel>();
  return g_kernel;
}

void set_devmem_rx_kernel_for_tests(std::shared_ptr<const DevmemRxKernel> kernel) {
  std::lock_guard lock(g_kernel_mu);
  g_kernel = std::move(kernel);
}

DevmemRxLease::DevmemRxLease(zerocopy::rxq::Client client, std::shared_ptr<const DevmemRxKernel> kernel)
    : client_(std::move(client)), kernel_(std::move(kernel)) {}

DevmemRxLease::~DevmemRxLease() = default;

Result<std::unique_ptr<DevmemRxLease>> DevmemRxLease::open(const std::string& path) {
  REMORA_ASSIGN_OR_RETURN(zerocopy::rxq::Client client, zerocopy::rxq::Client::connect(path));
  return std::unique_ptr<DevmemRxLease>(new DevmemRxLease(std::move(client), devmem_rx_kernel()));
}

Status DevmemRxLease::bind_area(MemoryDomain& domain, uint64_t size, std::chrono::milliseconds timeout) {
  if (steered_ != 0 || area_ != nullptr) {
    return Status(StatusCode::kInternal, "devmem RX: a receive area after streams were steered, or a second one");
  }
  REMORA_ASSIGN_OR_RETURN(void* p, domain.allocate_area(size));
  auto area = std::shared_ptr<void>(p, [d = &domain](void* m) { d->free_area(m); });
  auto exported = domain.export_dmabuf(p, size);
  if (!exported) return exported.status();
  net::Fd dmabuf(exported->fd);
  // The dmabuf may be more than the area (an export names the range's place in it):
  // rxq is told its whole size, and the receivers see its byte 0 at area - offset.
  const off_t whole = ::lseek(dmabuf.get(), 0, SEEK_END);
  if (whole < 0 || static_cast<uint64_t>(whole) < exported->offset + size) {
    return Status(StatusCode::kInternal,
                  fmt::format("devmem RX: the {} memory domain exported a dmabuf of {} bytes "
                              "for {} at offset {}",
                              domain.name(), static_cast<int64_t>(whole), size, exported->offset));
  }
  REMORA_ASSIGN_OR_RETURN(const zerocopy::rxq::BindFlowReply r,
                          client_.bind_dmabuf(dmabuf.get(), static_cast<uint64_t>(whole), timeout));
  const bool standin = (r.flags & zerocopy::rxq::kFlagStandin) != 0;
  if (standin && !kernel_->standin) {
    return Status(StatusCode::kUnsupported,
                  "rxq serves in stand-in mode (it did not bind our receive area, and no rule steers our flows): "
                  "not used");
  }
  auto* bytes = static_cast<std::byte*>(p);
  binding_ = DevmemRxBinding{.id = r.binding_id,
                             .domain = &domain,
                             .base = bytes - exported->offset,
                             .size = static_cast<uint64_t>(whole),
                             .allow_linear = true,
                             .cpu_sync_fd = -1};
  area_ = std::move(area);
  describe_ = fmt::format("its own receive area of {} bytes of {} memory{}, binding {} on rxq's queue {} for it", size,
                          domain.name(), standin ? " (rxq's stand-in mode: not bound)" : "", r.binding_id, r.queue);
  if (kernel_->area_bound) kernel_->area_bound(binding_, bytes, size);
  return Status::ok();
}

Status DevmemRxLease::reserve_zcrx(uint64_t area_bytes, MemoryDomain* device, std::chrono::milliseconds timeout) {
  if (steered_ != 0 || area_ != nullptr || zcrx_ != nullptr) {
    return Status(StatusCode::kInternal, "zcrx: a queue reserved after streams were steered, or a second one");
  }
  zerocopy::ZcrxQueue::Options o{.area_bytes = area_bytes};
  std::shared_ptr<void> area;
  net::Fd dmabuf;
  std::byte* device_base = nullptr;
  if (device != nullptr) {
    REMORA_ASSIGN_OR_RETURN(void* p, device->allocate_area(area_bytes));
    area = std::shared_ptr<void>(p, [device](void* m) { device->free_area(m); });
    REMORA_ASSIGN_OR_RETURN(const DmabufExport exported, device->export_dmabuf(p, area_bytes));
    dmabuf = net::Fd(exported.fd);
    const off_t whole = ::lseek(dmabuf.get(), 0, SEEK_END);
    if (exported.offset != 0 || whole < 0 || static_cast<uint64_t>(whole) != area_bytes) {
      return Status(StatusCode::kUnsupported,
                    fmt::format("zcrx takes a whole dmabuf as its area, and the {} memory domain exported the {}-byte "
                                "area as {} bytes at offset {} of a dmabuf of {} bytes",
                                device->name(), area_bytes, area_bytes, exported.offset, static_cast<int64_t>(whole)));
    }
    o.dmabuf_fd = dmabuf.get();
    device_base = static_cast<std::byte*>(p);
  }
  REMORA_ASSIGN_OR_RETURN(const zerocopy::rxq::BindFlowReply r, client_.reserve_queue(timeout));
  const bool standin = (r.flags & zerocopy::rxq::kFlagStandin) != 0;
  if (standin && !kernel_->standin) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("rxq serves in stand-in mode (queue {} is reserved for us, but no rule steers our "
                              "flows there): not used",
                              r.queue));
  }
  o.ifindex = zerocopy::rxq::ifindex_of(r);
  o.rx_queue = r.queue;
  DevmemRxBinding binding{
      .id = 0, .domain = device, .base = device_base, .size = area_bytes, .allow_linear = false, .cpu_sync_fd = -1};
  if (device != nullptr && kernel_->area_bound) kernel_->area_bound(binding, device_base, area_bytes);
  zerocopy::KernelError refusal;
  REMORA_ASSIGN_OR_RETURN(
      zcrx_, zerocopy::ZcrxQueue::open(o, kernel_->zcrx ? kernel_->zcrx : zerocopy::io_uring_zcrx_kernels(), &refusal));
  if (device != nullptr) {
    binding.id = zcrx_->registration().zcrx_id;
    binding_ = binding;
  } else {
    binding_ = host_area_binding(*zcrx_);
  }
  area_ = std::move(area);
  zcrx_dmabuf_ = std::move(dmabuf);
  describe_ = zcrx_->describe() + (device != nullptr ? fmt::format(" in {} memory", device->name()) : std::string()) +
              fmt::format(", the queue reserved by rxq{}", standin ? " (stand-in mode)" : "");
  return Status::ok();
}

Result<std::unique_ptr<DevmemStreamIn>> DevmemRxLease::steer(int fd, std::chrono::milliseconds timeout) {
  REMORA_ASSIGN_OR_RETURN(const zerocopy::TcpFlow flow, flow_of(fd));
  REMORA_ASSIGN_OR_RETURN(zerocopy::rxq::FlowLease lease, client_.bind_flow(flow, timeout));
  const zerocopy::rxq::BindFlowReply& r = lease.reply;
  const bool standin = (r.flags & zerocopy::rxq::kFlagStandin) != 0;
  if (zcrx_ != nullptr) {
    // To our own zcrx queue: rxq passes no buffer.
    if ((r.flags & zerocopy::rxq::kFlagClientZcrx) == 0 || r.queue != zcrx_->rx_queue()) {
      return Status(StatusCode::kProtocol, fmt::format("rxq steered {} to queue {}, not to our zcrx queue {}",
                                                       flow.describe(), r.queue, zcrx_->rx_queue()));
    }
    if ((r.flags & zerocopy::rxq::kFlagRuleRefused) != 0 && !kernel_->standin) {
      return Status(StatusCode::kUnsupported, fmt::format("rxq could not steer {}: {}", flow.describe(), r.message));
    }
    REMORA_ASSIGN_OR_RETURN(auto stream, zcrx_->add_stream(fd));
    queues_ += fmt::format("{}{}", steered_ == 0 ? "" : ", ", r.queue);
    ++steered_;
    return std::make_unique<DevmemStreamIn>(
        std::make_shared<ZcrxReceiver>(fd, binding_, zcrx_, std::move(stream), area_));
  }
  if (area_ != nullptr) {
    // Into our own area: rxq passes no buffer, and the flow goes to our queue.
    if ((r.flags & zerocopy::rxq::kFlagClientDmabuf) == 0 || r.binding_id != binding_.id) {
      return Status(StatusCode::kProtocol,
                    fmt::format("rxq steered {} into its own buffer (binding {}), not into our receive area "
                                "(binding {})",
                                flow.describe(), r.binding_id, binding_.id));
    }
    if ((r.flags & zerocopy::rxq::kFlagRuleRefused) != 0 && !kernel_->standin) {
      return Status(StatusCode::kUnsupported, fmt::format("rxq could not steer {}: {}", flow.describe(), r.message));
    }
    queues_ += fmt::format("{}{}", steered_ == 0 ? "" : ", ", r.queue);
    ++steered_;
    auto receiver = std::make_shared<DevmemReceiver>(fd, binding_, kernel_->recvmsg, kernel_->dontneed, area_);
    return std::make_unique<DevmemStreamIn>(std::move(receiver));
  }
  if (standin && !kernel_->standin) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("rxq serves in stand-in mode (its buffer is a memfd, not a dmabuf, and no rule steers "
                              "{}): not used",
                              flow.describe()));
  }
  if ((r.flags & zerocopy::rxq::kFlagRuleRefused) != 0 && !kernel_->standin) {
    return Status(StatusCode::kUnsupported, fmt::format("rxq could not steer {}: {}", flow.describe(), r.message));
  }
  if (map_ == nullptr) {
    void* p = ::mmap(nullptr, r.dmabuf_size, PROT_READ, MAP_SHARED, lease.dmabuf.get(), 0);
    if (p == MAP_FAILED) {
      return Status(StatusCode::kUnsupported,
                    fmt::format("devmem RX: rxq's {}-byte buffer cannot be mapped ({}): remora copies fragments out "
                                "of a host-memory buffer (udmabuf or the DMA-BUF system heap)",
                                r.dmabuf_size, zerocopy::errno_text(errno)));
    }
    const size_t bytes = r.dmabuf_size;
    buffer_ = std::make_shared<net::Fd>(std::move(lease.dmabuf));
    // The mapping holds the descriptor too: DMA_BUF_IOCTL_SYNC goes to it.
    map_ = std::shared_ptr<void>(p, [bytes, fd = buffer_](void* m) { ::munmap(m, bytes); });
    map_bytes_ = bytes;
    binding_ = DevmemRxBinding{.id = r.binding_id,
                               .domain = &host_domain(),
                               .base = static_cast<const std::byte*>(p),
                               .size = r.dmabuf_size,
                               .allow_linear = true,
                               .cpu_sync_fd = standin ? -1 : buffer_->get()};
    describe_ = fmt::format("rxq's {} of {} bytes, binding {}", standin ? "stand-in memfd" : "dmabuf", r.dmabuf_size,
                            r.binding_id);
  } else if (r.binding_id != binding_.id || r.dmabuf_size != map_bytes_ ||
             !same_file(lease.dmabuf.get(), buffer_->get())) {
    return Status(StatusCode::kProtocol,
                  fmt::format("rxq steered {} to another buffer (binding {}, {} bytes) than this endpoint's first "
                              "stream (binding {}, {} bytes)",
                              flow.describe(), r.binding_id, r.dmabuf_size, binding_.id, map_bytes_));
  }
  queues_ += fmt::format("{}{}", steered_ == 0 ? "" : ", ", r.queue);
  ++steered_;
  auto receiver = std::make_shared<DevmemReceiver>(fd, binding_, kernel_->recvmsg, kernel_->dontneed, map_);
  return std::make_unique<DevmemStreamIn>(std::move(receiver));
}

}  // namespace remora::detail
