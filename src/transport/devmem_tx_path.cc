// transport/devmem_tx_path.cc — see devmem_tx_path.h.
#include "transport/devmem_tx_path.h"

#include <unistd.h>

#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "zerocopy/netdev_nl.h"

namespace remora::detail {
namespace {

std::shared_ptr<const DevmemTxKernel> system_kernel() {
  auto k = std::make_shared<DevmemTxKernel>();
  k->bind_tx = [](uint32_t ifindex, int dmabuf_fd) -> Result<DevmemTxBinding> {
    REMORA_ASSIGN_OR_RETURN(zerocopy::DevmemBinding b, zerocopy::DevmemBinding::bind_tx(ifindex, dmabuf_fd));
    const uint32_t id = b.id();
    return DevmemTxBinding{.id = id, .hold = std::make_shared<zerocopy::DevmemBinding>(std::move(b))};
  };
  k->send = [](int fd, uint32_t binding_id, uint64_t offset, size_t len) {
    return zerocopy::send_devmem(fd, binding_id, offset, len);
  };
  return k;
}

std::mutex g_kernel_mu;
std::shared_ptr<const DevmemTxKernel> g_kernel;  // guarded by g_kernel_mu; null: the system's

}  // namespace

std::shared_ptr<const DevmemTxKernel> devmem_tx_kernel() {
  std::lock_guard lock(g_kernel_mu);
  if (!g_kernel) g_kernel = system_kernel();
  return g_kernel;
}

void set_devmem_tx_kernel_for_tests(std::shared_ptr<const DevmemTxKernel> kernel) {
  std::lock_guard lock(g_kernel_mu);
  g_kernel = std::move(kernel);
}

Result<std::unique_ptr<DevmemTxSend>> DevmemTxSend::make(std::shared_ptr<const DevmemTxKernel> kernel,
                                                         MemoryDomain& domain, const void* ptr, size_t len,
                                                         uint32_t ifindex, const std::string& ifname) {
  // Drivers export whole pages (CUDA insists): the pages around the range, and the
  // range's place in them.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(ptr) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(ptr) + len + page - 1) / page * page;
  auto exported = domain.export_dmabuf(reinterpret_cast<const void*>(first), end - first);
  if (!exported) return Status(StatusCode::kUnsupported, fmt::format("memory: {}", exported.status().message()));
  net::Fd dmabuf(exported->fd);  // bind-tx takes its own reference; ours goes with this
  if (exported->length < end - first) {
    return Status(StatusCode::kInternal, fmt::format("memory: {} exported {} bytes for a range of {}", domain.name(),
                                                     exported->length, end - first));
  }
  auto bound = kernel->bind_tx(ifindex, dmabuf.get());
  if (!bound) {
    return Status(bound.status().code(), fmt::format("interface: {}: bind-tx of a {} dmabuf: {}", ifname, domain.name(),
                                                     bound.status().message()));
  }
  auto send = std::make_unique<DevmemTxSend>();
  send->kernel = std::move(kernel);
  send->binding = std::move(*bound);
  send->offset = exported->offset + (reinterpret_cast<uintptr_t>(ptr) - first);
  send->length = len;
  return send;
}

Status DevmemTxStreams::enable(int fd) {
  if (enabled(fd)) return Status::ok();
  REMORA_RETURN_IF_ERROR(zerocopy::enable_zerocopy(fd));
  trackers_.emplace(fd, zerocopy::ZerocopyTracker());
  return Status::ok();
}

void DevmemTxStreams::sent(int fd, uint64_t cookie) {
  auto it = trackers_.find(fd);
  if (it != trackers_.end()) it->second.sent(cookie);
}

Status DevmemTxStreams::drain(int fd, const std::function<void(uint64_t cookie)>& released) {
  auto it = trackers_.find(fd);
  if (it == trackers_.end()) return Status::ok();
  return it->second.drain(fd, released);
}

uint64_t DevmemTxStreams::copied() const noexcept {
  uint64_t n = 0;
  for (const auto& [fd, t] : trackers_) n += t.copied();
  return n;
}

net::IoResult DevmemSource::write(int fd, uint64_t offset, uint64_t len) {
  const net::IoResult r = send_.kernel->send(fd, send_.binding.id, send_.offset + offset, static_cast<size_t>(len));
  if (r.kind == net::IoResult::Kind::kBytes && r.bytes > 0) {
    streams_.sent(fd, cookie_);
    ++pending_;
  }
  return r;
}

}  // namespace remora::detail
