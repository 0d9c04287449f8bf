// datapath/devmem_tx_path.cc — see devmem_tx_path.h.
#include "datapath/devmem_tx_path.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "mem/region_access.h"
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

namespace {

/// A dmabuf of the pages around [ptr, ptr + len) bound for transmit: the binding, and
/// where the range's first byte is in the dmabuf.
struct Bound {
  DevmemTxBinding binding;
  uint64_t offset = 0;
};

Result<Bound> export_and_bind(const DevmemTxKernel& kernel, MemoryDomain& domain, const void* ptr, size_t len,
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
  auto bound = kernel.bind_tx(ifindex, dmabuf.get());
  if (!bound) {
    // "a test-device dmabuf", "a cuda dmabuf"; a dmabuf domain's own memory is "a dmabuf".
    const std::string what = domain.name() == "dmabuf" ? "dmabuf" : fmt::format("{} dmabuf", domain.name());
    return Status(bound.status().code(),
                  fmt::format("interface: {}: bind-tx of a {}: {}", ifname, what, bound.status().message()));
  }
  return Bound{.binding = std::move(*bound), .offset = exported->offset + (reinterpret_cast<uintptr_t>(ptr) - first)};
}

}  // namespace

Result<std::unique_ptr<DevmemTxSend>> DevmemTxSend::make(std::shared_ptr<const DevmemTxKernel> kernel,
                                                         MemoryDomain& domain, const void* ptr, size_t len,
                                                         uint32_t ifindex, const std::string& ifname) {
  REMORA_ASSIGN_OR_RETURN(Bound bound, export_and_bind(*kernel, domain, ptr, len, ifindex, ifname));
  auto send = std::make_unique<DevmemTxSend>();
  send->kernel = std::move(kernel);
  send->binding = std::move(bound.binding);
  send->offset = bound.offset;
  send->length = len;
  return send;
}

// --- the bindings of registered regions ------------------------------------------

struct DevmemTxBindingCache::Shared {
  /// One region's binding on one interface, made by one kernel (tests swap kernels).
  struct Entry {
    std::shared_ptr<const DevmemTxKernel> kernel;
    DevmemTxBinding binding;
    std::byte* base = nullptr;  ///< the region's first byte
    uint64_t offset = 0;        ///< of `base` in the dmabuf
  };
  struct Key {
    uint32_t region = 0, generation = 0, ifindex = 0;
    auto operator<=>(const Key&) const = default;
  };
  mutable std::mutex mu;
  std::map<Key, Entry> entries;

  /// The region (id, generation) went: its bindings too (outside the lock, the holds).
  void drop(RegionId id, uint32_t generation) {
    std::vector<Entry> gone;
    {
      std::lock_guard lock(mu);
      for (auto it = entries.begin(); it != entries.end();) {
        if (it->first.region == static_cast<uint32_t>(id) && it->first.generation == generation) {
          gone.push_back(std::move(it->second));
          it = entries.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
};

DevmemTxBindingCache::DevmemTxBindingCache(const MemoryRegistry& registry)
    : registry_(RegistryInternals::shared_state(registry)), shared_(std::make_shared<Shared>()) {
  std::weak_ptr<Shared> weak = shared_;
  listener_ = add_release_listener(*registry_, [weak](RegionId id, uint32_t generation) {
    if (auto shared = weak.lock()) shared->drop(id, generation);
  });
}

DevmemTxBindingCache::~DevmemTxBindingCache() { remove_release_listener(*registry_, listener_); }

size_t DevmemTxBindingCache::size() const {
  std::lock_guard lock(shared_->mu);
  return shared_->entries.size();
}

Result<std::unique_ptr<DevmemTxSend>> DevmemTxBindingCache::send_for(std::shared_ptr<const DevmemTxKernel> kernel,
                                                                     MemoryDomain& domain, const void* ptr, size_t len,
                                                                     uint32_t ifindex, const std::string& ifname) {
  const std::optional<CoveringRegion> region = find_covering_region(*registry_, domain, ptr, len);
  if (!region) return DevmemTxSend::make(std::move(kernel), domain, ptr, len, ifindex, ifname);
  const Shared::Key key{static_cast<uint32_t>(region->id), region->generation, ifindex};
  auto send_through = [&](const Shared::Entry& e) {
    auto send = std::make_unique<DevmemTxSend>();
    send->kernel = e.kernel;
    send->binding = e.binding;  // a hold of its own: the binding outlives the entry while this send needs it
    send->offset = e.offset + static_cast<uint64_t>(static_cast<const std::byte*>(ptr) - e.base);
    send->length = len;
    send->region_binding = true;
    return send;
  };
  {
    std::lock_guard lock(shared_->mu);
    auto it = shared_->entries.find(key);
    if (it != shared_->entries.end() && it->second.kernel == kernel) return send_through(it->second);
  }
  // The region's first devmem send (on this interface): export and bind all of it,
  // without the lock (a netlink request).
  REMORA_ASSIGN_OR_RETURN(Bound bound, export_and_bind(*kernel, domain, region->base, region->length, ifindex, ifname));
  Shared::Entry made{
      .kernel = kernel, .binding = std::move(bound.binding), .base = region->base, .offset = bound.offset};
  std::unique_ptr<DevmemTxSend> send;
  Shared::Entry replaced;
  {
    std::lock_guard lock(shared_->mu);
    auto [it, inserted] = shared_->entries.try_emplace(key);
    if (!inserted && it->second.kernel == kernel) {
      send = send_through(it->second);  // another endpoint bound it meanwhile: ours goes
    } else {
      replaced = std::exchange(it->second, std::move(made));
      send = send_through(it->second);
    }
  }
  // Deregistered while we bound it: its release listener may have run before the entry
  // was there. Then nothing would drop it, so drop it here (this send keeps its hold).
  if (!region_live(*registry_, region->id, region->generation)) shared_->drop(region->id, region->generation);
  return send;
}

Status DevmemTxStreams::enable(int fd) {
  if (enabled(fd)) return Status::ok();
  REMORA_RETURN_IF_ERROR(zerocopy::enable_zerocopy(fd));
  trackers_.emplace(fd, zerocopy::ZerocopyTracker());
  used_ = true;
  return Status::ok();
}

void DevmemTxStreams::abandon(int fd, const std::function<void(uint64_t cookie)>& released) {
  auto it = trackers_.find(fd);
  if (it == trackers_.end()) return;
  (void)it->second.drain(fd, released);  // an error there changes nothing: all go below
  it->second.release_all(released);
  trackers_.erase(it);
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

DevmemSource::~DevmemSource() {
  // Sendmsgs never reported complete (the endpoint failed): their brackets end here,
  // or deregistration would wait for them forever.
  if (access_ != nullptr) {
    for (; pending_ > 0; --pending_) access_->end();
  }
}

Status DevmemSource::prepare_again(uint64_t offset, uint64_t len) {
  if (!again_) {
    if (!make_again_) return Status(StatusCode::kInternal, "devmem TX: this send cannot send a chunk again");
    REMORA_ASSIGN_OR_RETURN(again_, make_again_());
  }
  return again_->prepare_again(offset, len);
}

net::IoResult DevmemSource::write_again(int fd, uint64_t offset, uint64_t len) {
  return again_->write_again(fd, offset, len);  // prepare_again made it
}

void DevmemSource::chunk_sent(uint64_t offset, uint64_t length) {
  // A chunk sent again gives its host copy back; one sent by devmem has none there.
  if (again_) again_->chunk_sent(offset, length);
}

void DevmemSource::released() noexcept {
  if (pending_ == 0) return;
  --pending_;
  if (access_ != nullptr) access_->end();  // the NIC is done with this sendmsg's memory
}

net::IoResult DevmemSource::write(int fd, uint64_t offset, uint64_t len) {
  if (access_ != nullptr && (revoked_ || !access_->begin())) {
    // Deregistered: never read it again, but keep the stream in step with the announced
    // chunk by sending zeros from host memory; the reply says "revoked".
    revoked_ = true;
    return net::send_some(fd, zeros().data(), std::min<uint64_t>(len, zeros().size()));
  }
  const net::IoResult r = send_->kernel->send(fd, send_->binding.id, send_->offset + offset, static_cast<size_t>(len));
  if (r.kind == net::IoResult::Kind::kBytes && r.bytes > 0) {
    streams_.sent(fd, cookie_);
    ++pending_;  // a served get's bracket stays open until this sendmsg's completion
  } else if (access_ != nullptr) {
    access_->end();  // nothing went: nothing for the NIC to read
  }
  return r;
}

}  // namespace remora::detail
