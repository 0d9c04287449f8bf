// datapath/device_path.cc — see device_path.h.
#include "datapath/device_path.h"

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
    "this endpoint's data streams are not steered to bound RX queues: that takes `remora rxq serve` (header split, "
    "flow-steering rules, the binding) and REMORA_RXQ_SOCKET naming its socket";
constexpr std::string_view kNoZcrxLoop =
    "this endpoint's data streams are not read by io_uring zero-copy receive: that takes REMORA_DEVICE_PATH=zcrx, "
    "`remora rxq serve --client-queues N` (a queue reserved for the endpoint, its flows steered there) with "
    "REMORA_RXQ_SOCKET naming its socket, and CAP_NET_ADMIN (the endpoint registers the queue)";

}  // namespace

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
    const Status gone =
        unsupported(fmt::format("REMORA_DEVMEM_IFNAME={}: no such interface in this network namespace "
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
      std::string text =
          fmt::format("{}: bind-tx with a {}: {}", ifname, source->describe(), binding.status().message());
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

  std::string zc = fmt::format("{}: {}", ifname, kNoZcrxLoop);
  const zerocopy::IoUringProbe ring = zerocopy::probe_io_uring();
  if (!ring.ring.is_ok()) {
    zc += "; " + ring.ring.message();
  } else if (!ring.recv_zc) {
    zc += "; this kernel's io_uring has no RECV_ZC (Linux 6.15+)";
  }
  out.zcrx = unsupported(std::move(zc));
  return out;
}

Result<std::unique_ptr<DevmemTxSend>> DevicePathSelector::devmem_tx_for(MemoryDomain& domain, const void* ptr,
                                                                        size_t len, bool drives_devmem_tx) {
  if (!drives_devmem_tx) {
    return unsupported(
        "this version sends messages, chunked puts and the replies to peers' chunked gets by devmem TX (an inline "
        "put or get reply travels in its frame)");
  }
  if (len == 0) return unsupported("an empty message has nothing for the NIC to read");
  if (config_.checksum != ChecksumMode::kNone) {
    return unsupported(
        "REMORA_CHECKSUM=crc32c: the CRC is computed on the host, and devmem TX never brings the "
        "bytes there");
  }
  const std::string ifname(config_.devmem_ifname.data());
  const unsigned ifindex = ifname.empty() ? 0 : ::if_nametoindex(ifname.c_str());
  if (ifindex == 0) {  // the probe says why: the name is unset, or no such interface here
    return probe_->devmem_tx_interface.is_ok() ? unsupported(fmt::format("no interface {}", ifname))
                                               : probe_->devmem_tx_interface;
  }
  const auto it =
      std::find_if(devmem_refusals_.begin(), devmem_refusals_.end(), [&](const auto& e) { return e.first == &domain; });
  if (it != devmem_refusals_.end()) return it->second;
  // A send from a registered region goes through the region's binding (made once);
  // others export and bind their own range. A refusal is remembered for the domain (its
  // driver or the NIC would say the same again).
  auto send = bindings_ ? bindings_->send_for(devmem_tx_kernel(), domain, ptr, len, ifindex, ifname)
                        : DevmemTxSend::make(devmem_tx_kernel(), domain, ptr, len, ifindex, ifname);
  if (send) return send;
  std::string text = send.status().message();
  if (text.rfind("memory:", 0) == 0 && !probe_->devmem_tx_interface.is_ok()) {
    text += "; interface: " + probe_->devmem_tx_interface.message();
  }
  Status refused = unsupported(std::move(text));
  devmem_refusals_.emplace_back(&domain, refused);
  return refused;
}

Result<PathChoice> DevicePathSelector::choose(MemoryDomain& domain, const void* ptr, size_t len, bool tx,
                                              bool drives_devmem_tx, bool drives_devmem_rx) {
  const DevicePathMode mode = config_.device_path;
  if (config_.encrypt != EncryptMode::kOff) {
    // Config::validate refuses REMORA_DEVICE_PATH=devmem|zcrx beside it; auto lands here.
    return PathChoice{.path = DataPath::kStaging,
                      .reason =
                          "REMORA_ENCRYPT: devmem TCP and io_uring zcrx never bring the payload to the CPU, "
                          "where it is sealed: staging through pinned host buffers",
                      .devmem_tx = nullptr};
  }
  if (mode == DevicePathMode::kStaging) {
    return PathChoice{.path = DataPath::kStaging, .reason = "REMORA_DEVICE_PATH=staging", .devmem_tx = nullptr};
  }
  if (!probe_) probe_ = probe_device_paths(config_);

  std::string devmem_why;
  if (tx) {
    auto send = devmem_tx_for(domain, ptr, len, drives_devmem_tx);
    if (send) {
      std::string reason = fmt::format(
          "REMORA_DEVICE_PATH={}: devmem TX: {} memory exported as a dmabuf and bound "
          "for transmit on {} (binding {}{})",
          mode_name(mode), domain.name(), config_.devmem_ifname.data(), (*send)->binding.id,
          (*send)->region_binding ? ", its registered region's, kept until the region is deregistered"
                                  : ", this transfer's own: the memory is in no registered region");
      return PathChoice{.path = DataPath::kDevmem, .reason = std::move(reason), .devmem_tx = std::move(*send)};
    }
    devmem_why = send.status().message();
  } else if (zcrx_rx_ready() && drives_devmem_rx && config_.checksum == ChecksumMode::kNone) {
    return PathChoice{.path = DataPath::kZcrx,
                      .reason = fmt::format("REMORA_DEVICE_PATH={}: io_uring zcrx into {} memory: {}", mode_name(mode),
                                            domain.name(), zcrx_rx_->message()),
                      .devmem_tx = nullptr};
  } else if (devmem_rx_ready() && drives_devmem_rx && config_.checksum != ChecksumMode::kNone) {
    devmem_why = fmt::format(
        "the data streams are steered ({}), but with REMORA_CHECKSUM=crc32c device memory is "
        "received through host buffers, where the CRC is checked",
        devmem_rx_->message());
  } else if (devmem_rx_ready() && drives_devmem_rx) {
    return PathChoice{.path = DataPath::kDevmem,
                      .reason = fmt::format("REMORA_DEVICE_PATH={}: devmem RX into {} memory: {}", mode_name(mode),
                                            domain.name(), devmem_rx_->message()),
                      .devmem_tx = nullptr};
  } else if (devmem_rx_ready()) {
    devmem_why = fmt::format(
        "the data streams are steered ({}), but this transfer's bytes come inline on the "
        "control stream",
        devmem_rx_->message());
  } else {
    devmem_why = devmem_rx_ ? devmem_rx_->message() : probe_->devmem_rx.message();
  }
  std::string zcrx_why;
  if (tx) {
    zcrx_why = "zcrx is a receive path (io_uring has no devmem send)";
  } else if (zcrx_rx_ready() && config_.checksum != ChecksumMode::kNone) {
    zcrx_why = fmt::format(
        "the data streams are read by zcrx ({}), but with REMORA_CHECKSUM=crc32c device memory is received through "
        "host buffers, where the CRC is checked",
        zcrx_rx_->message());
  } else if (zcrx_rx_ready()) {
    zcrx_why = fmt::format(
        "the data streams are read by zcrx ({}), but this transfer's bytes come inline on the "
        "control stream",
        zcrx_rx_->message());
  } else {
    zcrx_why = zcrx_rx_ ? zcrx_rx_->message() : probe_->zcrx.message();
  }

  const std::string_view direction = tx ? "send" : "receive";
  if (mode == DevicePathMode::kDevmem) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("REMORA_DEVICE_PATH=devmem: devmem TCP cannot take this {} of {} memory: {}", direction,
                              domain.name(), devmem_why));
  }
  if (mode == DevicePathMode::kZcrx && !tx) {
    return Status(
        StatusCode::kUnsupported,
        fmt::format("REMORA_DEVICE_PATH=zcrx: io_uring zero-copy receive cannot take this {} of {} memory: {}",
                    direction, domain.name(), zcrx_why));
  }
  if (mode == DevicePathMode::kZcrx) {
    // zcrx demands how device memory is received; a send goes as under auto.
    return PathChoice{.path = DataPath::kStaging,
                      .reason = fmt::format("REMORA_DEVICE_PATH=zcrx: {}, so this send goes as under auto: devmem: {}",
                                            zcrx_why, devmem_why),
                      .devmem_tx = nullptr};
  }
  std::string reason = fmt::format("REMORA_DEVICE_PATH={}: devmem: {}", mode_name(mode), devmem_why);
  if (!tx) reason += fmt::format("; zcrx: {}", zcrx_why);
  return PathChoice{.path = DataPath::kStaging, .reason = std::move(reason), .devmem_tx = nullptr};
}

}  // namespace remora::detail
