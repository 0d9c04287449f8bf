// transport/device_path.cc — see device_path.h.
#include "transport/device_path.h"

#include <net/if.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <fmt/format.h>

#include "zerocopy/dmabuf_source.h"
#include "zerocopy/io_uring_probe.h"
#include "zerocopy/kernel_error.h"
#include "zerocopy/netdev_nl.h"

namespace remora::detail {
namespace {

Status unsupported(std::string text) { return {StatusCode::kUnsupported, std::move(text)}; }

std::string_view mode_name(DevicePathMode m) {
  switch (m) {
    case DevicePathMode::kAuto: return "auto";
    case DevicePathMode::kDevmem: return "devmem";
    case DevicePathMode::kZcrx: return "zcrx";
    case DevicePathMode::kStaging: return "staging";
  }
  return "?";
}

constexpr std::string_view kNoRxq =
    "this endpoint's data streams are not steered to bound RX queues: that takes `remora rxq` (header split, "
    "flow-steering rules, the binding), which does not hand bindings to endpoints in this version";

}  // namespace

std::string_view data_path_name(DataPath p) noexcept {
  switch (p) {
    case DataPath::kHost: return "host";
    case DataPath::kStaging: return "staging";
    case DataPath::kDevmem: return "devmem";
    case DataPath::kZcrx: return "zcrx";
  }
  return "?";
}

DevicePathProbe probe_device_paths(const Config& config) {
  DevicePathProbe out;
  const std::string ifname(config.devmem_ifname.data());
  if (ifname.empty()) {
    const Status none = unsupported("no interface named for device memory (REMORA_DEVMEM_IFNAME is unset)");
    out.devmem_tx_interface = none;
    out.devmem_rx = none;
    out.zcrx = none;
    return out;
  }
  const unsigned ifindex = ::if_nametoindex(ifname.c_str());
  if (ifindex == 0) {
    const Status gone = unsupported(fmt::format("REMORA_DEVMEM_IFNAME={}: no such interface in this network namespace "
                                                "({})",
                                                ifname, zerocopy::errno_text(errno)));
    out.devmem_tx_interface = gone;
    out.devmem_rx = gone;
    out.zcrx = gone;
    return out;
  }

  // devmem TX: a real bind-tx with the best descriptor this host has, dropped at once.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto source = zerocopy::best_dmabuf(16 * page);
  if (!source) {
    out.devmem_tx_interface = source.status().with_context("devmem TX probe");
  } else {
    zerocopy::KernelError refusal;
    auto binding = zerocopy::DevmemBinding::bind_tx(ifindex, source->fd.get(), &refusal);
    if (binding) {
      out.devmem_tx_interface = Status::ok();
    } else {
      std::string text = fmt::format("{}: bind-tx with a {}: {}", ifname, source->describe(), binding.status().message());
      if (!source->is_dmabuf()) text += fmt::format(" (no dmabuf exporter on this host: {})", source->why_no_dmabuf);
      out.devmem_tx_interface = Status(binding.status().code(), text);
    }
  }

  // devmem RX: never bound here (see device_path.h); say what the kernel offers.
  std::string rx = fmt::format("{}: {}", ifname, kNoRxq);
  if (auto client = zerocopy::NetdevClient::open(); !client) {
    rx += fmt::format("; the netdev netlink family is not there: {}", client.status().message());
  } else if (!client->has_bind_rx()) {
    rx += "; this kernel has no bind-rx (devmem RX is Linux 6.12+)";
  }
  out.devmem_rx = unsupported(std::move(rx));

  std::string zc = fmt::format("{}: {}", ifname, kNoRxq);
  const zerocopy::IoUringProbe ring = zerocopy::probe_io_uring();
  if (!ring.ring.is_ok()) {
    zc += "; " + ring.ring.message();
  } else if (!ring.recv_zc) {
    zc += "; this kernel's io_uring has no RECV_ZC (Linux 6.15+)";
  }
  out.zcrx = unsupported(std::move(zc));
  return out;
}

Status DevicePathSelector::devmem_tx_for(MemoryDomain& domain, const void* ptr, size_t len) {
  Status exported_why;
  const auto it = std::find_if(export_refusals_.begin(), export_refusals_.end(),
                               [&](const auto& e) { return e.first == &domain; });
  if (it != export_refusals_.end()) {
    exported_why = it->second;
  } else {
    // Asked once per domain, on its first transfer (an export is not free: CUDA makes a
    // file descriptor), and remembered whatever the answer.
    if (auto exported = domain.export_dmabuf(ptr, len); !exported) {
      exported_why = exported.status();
    } else {
      ::close(exported->fd);
    }
    export_refusals_.emplace_back(&domain, exported_why);
  }
  const Status& nic = probe_->devmem_tx_interface;
  if (!exported_why.is_ok() || !nic.is_ok()) {
    std::string text;
    if (!exported_why.is_ok()) text = "memory: " + exported_why.message();
    if (!nic.is_ok()) text += (text.empty() ? "" : "; ") + std::string("interface: ") + nic.message();
    return unsupported(std::move(text));
  }
  return unsupported(fmt::format(
      "{} memory exports a dmabuf and {} accepts bind-tx, but this version's endpoint does not send through "
      "devmem TX yet (zerocopy/devmem_tx.h is the send path; the endpoint hook is not built)",
      domain.name(), config_.devmem_ifname.data()));
}

Result<PathChoice> DevicePathSelector::choose(MemoryDomain& domain, const void* ptr, size_t len, bool tx) {
  const DevicePathMode mode = config_.device_path;
  if (mode == DevicePathMode::kStaging) {
    return PathChoice{.path = DataPath::kStaging, .reason = "REMORA_DEVICE_PATH=staging"};
  }
  if (!probe_) probe_ = probe_device_paths(config_);

  std::string devmem_why;
  if (tx) {
    const Status s = devmem_tx_for(domain, ptr, len);
    devmem_why = s.message();
  } else {
    devmem_why = probe_->devmem_rx.message();
  }
  const std::string zcrx_why = tx ? std::string("zcrx is a receive path (io_uring has no devmem send)")
                                  : probe_->zcrx.message();

  const std::string_view direction = tx ? "send" : "receive";
  if (mode == DevicePathMode::kDevmem) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("REMORA_DEVICE_PATH=devmem: devmem TCP cannot take this {} of {} memory: {}", direction,
                              domain.name(), devmem_why));
  }
  if (mode == DevicePathMode::kZcrx) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("REMORA_DEVICE_PATH=zcrx: io_uring zero-copy receive cannot take this {} of {} memory: {}",
                              direction, domain.name(), zcrx_why));
  }
  std::string reason = fmt::format("REMORA_DEVICE_PATH={}: devmem: {}", mode_name(mode), devmem_why);
  if (!tx) reason += fmt::format("; zcrx: {}", zcrx_why);
  return PathChoice{.path = DataPath::kStaging, .reason = std::move(reason)};
}

}  // namespace remora::detail
