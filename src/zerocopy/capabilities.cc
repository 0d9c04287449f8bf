// zerocopy/capabilities.cc — the capability probe behind `remora doctor`
// (remora/capabilities.h): asks ethtool and netdev netlink about each interface, tries the
// devmem bindings and zcrx for real, and probes io_uring and MSG_ZEROCOPY, turning every
// answer into a ProbeAnswer with its reason and, where one exists, its fix.
#include "remora/capabilities.h"

#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "net/seal.h"
#include "net/socket.h"
#include "zerocopy/dmabuf_source.h"
#include "zerocopy/ethtool_nl.h"
#include "zerocopy/io_uring_probe.h"
#include "zerocopy/msg_zerocopy.h"
#include "zerocopy/netdev_nl.h"

namespace remora {

std::string_view to_string(ProbeAnswer::State state) {
  switch (state) {
    case ProbeAnswer::State::kYes: return "yes";
    case ProbeAnswer::State::kNo: return "no";
    case ProbeAnswer::State::kUnknown: return "unknown";
  }
  return "unknown";
}

namespace {

using zerocopy::KernelError;

constexpr size_t kProbeDmabufBytes = 64 * 4096;
constexpr char kRootFix[] = "run as root, or give the process CAP_NET_ADMIN";
constexpr char kHardwareNote[] =
    "Nothing in remora has run on devmem-capable hardware: no NIC with header split was available where it was "
    "built and tested (a GPU's dmabuf, exported on an H100 machine, was refused by its virtio_net). The bind and "
    "zcrx answers below are the kernel's real answers to real attempts on this host; a 'yes' would come only from "
    "a successful binding. What remora's endpoints drive: devmem TX for message sends, puts, and replies to "
    "peers' gets of device memory whose dmabuf the interface binds (REMORA_DEVMEM_IFNAME); devmem RX for message "
    "receives, gets and peers' puts into device memory once `remora rxq serve` has steered every data stream of the "
    "endpoint (REMORA_RXQ_SOCKET; rxq binds its own host-memory dmabuf, or a receive area of the endpoint's device "
    "memory); io_uring zcrx for the same receives with REMORA_DEVICE_PATH=zcrx (a queue rxq reserves, registered "
    "by the endpoint). Everything else stages.";

ProbeAnswer yes(std::string detail) {
  ProbeAnswer a;
  a.state = ProbeAnswer::State::kYes;
  a.detail = std::move(detail);
  return a;
}

ProbeAnswer no(std::string reason, std::string fix = {}, const KernelError& kernel = {}) {
  ProbeAnswer a;
  a.state = ProbeAnswer::State::kNo;
  a.reason = std::move(reason);
  a.fix = std::move(fix);
  a.error = kernel.err;
  a.kernel_message = kernel.message;
  return a;
}

ProbeAnswer unknown(std::string reason, const KernelError& kernel = {}) {
  ProbeAnswer a;
  a.state = ProbeAnswer::State::kUnknown;
  a.reason = std::move(reason);
  a.error = kernel.err;
  a.kernel_message = kernel.message;
  return a;
}

/// Whether this process holds CAP_NET_ADMIN (bit 12 of CapEff in /proc/self/status).
bool has_net_admin() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const unsigned long long caps = std::stoull(line.substr(7), nullptr, 16);
    return (caps >> 12) & 1ULL;
  }
  return ::geteuid() == 0;
}

/// The interfaces to probe: every one of the namespace, or those named (in that order).
Result<std::vector<std::pair<std::string, uint32_t>>> interfaces(const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, uint32_t>> out;
  if (!names.empty()) {
    for (const std::string& name : names) {
      const unsigned index = ::if_nametoindex(name.c_str());
      if (index == 0) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("no network interface '{}' in this network namespace", name));
      }
      out.emplace_back(name, index);
    }
    return out;
  }
  std::unique_ptr<struct if_nameindex, decltype(&if_freenameindex)> list(::if_nameindex(), &if_freenameindex);
  if (!list) return Status(StatusCode::kInternal, fmt::format("if_nameindex: {}", zerocopy::errno_text(errno)));
  for (const struct if_nameindex* i = list.get(); i->if_index != 0; ++i) out.emplace_back(i->if_name, i->if_index);
  return out;
}

std::string opt(const std::optional<uint32_t>& v) { return v ? std::to_string(*v) : "n/a"; }

// ---- per interface ----

void probe_rings(zerocopy::EthtoolClient* ethtool, InterfaceCapabilities* c) {
  KernelError ke;
  auto rings = ethtool->rings(c->ifindex, &ke);
  if (!rings) {
    const std::string why = fmt::format("the driver reports no ring parameters: {}", rings.status().message());
    c->header_split = no(why, "", ke);
    c->header_split_settable = no(why, "", ke);
    return;
  }
  const std::string set_cmd = fmt::format("ethtool -G {} tcp-data-split on", c->name);
  switch (rings->tcp_data_split) {
    case zerocopy::uapi::kEthtoolTcpDataSplitEnabled:
      c->header_split = yes(fmt::format("tcp-data-split: enabled{}",
                                        rings->hds_thresh ? fmt::format(", hds-thresh {}", *rings->hds_thresh) : ""));
      break;
    case zerocopy::uapi::kEthtoolTcpDataSplitDisabled: c->header_split = no("tcp-data-split: disabled", set_cmd); break;
    default:
      c->header_split =
          no("the driver does not report tcp-data-split (rings-get has no ETHTOOL_A_RINGS_TCP_DATA_SPLIT):"
             " it has no header split, or does not say");
      break;
  }
  if (!has_net_admin()) {
    c->header_split_settable = unknown("checking needs CAP_NET_ADMIN (a rings-set of the current value)");
    return;
  }
  KernelError set_ke;
  Status s = ethtool->probe_tcp_data_split_settable(c->ifindex, rings->tcp_data_split, &set_ke);
  if (s) {
    c->header_split_settable =
        yes("the driver accepts tcp-data-split (a rings-set of its current value, which "
            "changes nothing)");
    if (!c->header_split.yes()) c->header_split.fix = set_cmd;
  } else {
    c->header_split_settable = no(s.message(), set_ke.err == EPERM ? kRootFix : "", set_ke);
    if (set_ke.err == EOPNOTSUPP) c->header_split.fix.clear();  // no command would change it
  }
}

void probe_features(zerocopy::EthtoolClient* ethtool, InterfaceCapabilities* c) {
  KernelError ke;
  auto features = ethtool->features(c->ifindex, &ke);
  if (!features) {
    c->ntuple = unknown(features.status().message(), ke);
    return;
  }
  const auto ntuple = features->find(zerocopy::uapi::kNtupleFeatureName);
  if (!ntuple) {
    c->ntuple = no("the kernel lists no rx-ntuple-filter feature for this interface");
  } else if (ntuple->active) {
    c->ntuple = yes("rx-ntuple-filter: on");
  } else if (ntuple->changeable) {
    c->ntuple = no("rx-ntuple-filter: off", fmt::format("ethtool -K {} ntuple on", c->name));
  } else {
    c->ntuple = no("rx-ntuple-filter: off [fixed]: the driver has no ntuple flow steering");
  }
}

void probe_queues(zerocopy::EthtoolClient* ethtool, zerocopy::NetdevClient* netdev, InterfaceCapabilities* c) {
  KernelError ke;
  auto ch = ethtool ? ethtool->channels(c->ifindex, &ke)
                    : Result<zerocopy::ChannelsInfo>(Status(StatusCode::kUnsupported, "no ethtool family"));
  std::vector<std::string> parts;
  QueueCounts& q = c->queue_counts;
  if (ch) {
    q.rx = ch->rx, q.tx = ch->tx, q.combined = ch->combined, q.other = ch->other;
    q.rx_max = ch->rx_max, q.tx_max = ch->tx_max, q.combined_max = ch->combined_max, q.other_max = ch->other_max;
    parts.push_back(fmt::format("channels rx {} tx {} combined {} (max rx {} tx {} combined {})", opt(q.rx), opt(q.tx),
                                opt(q.combined), opt(q.rx_max), opt(q.tx_max), opt(q.combined_max)));
  }
  std::string queue_error;
  if (netdev != nullptr) {
    KernelError qke;
    auto list = netdev->queues(c->ifindex, &qke);
    if (list) {
      for (const auto& queue : *list) {
        if (queue.is_rx()) q.rx_queue_ids.push_back(queue.id);
      }
      parts.push_back(fmt::format("RX queue ids (netdev queue-get): {}",
                                  q.rx_queue_ids.empty() ? "none" : fmt::format("{}", fmt::join(q.rx_queue_ids, ","))));
    } else {
      queue_error = list.status().message();
    }
  }
  if (parts.empty()) {
    c->queues = unknown(fmt::format("channels-get: {}{}", ch.status().message(),
                                    queue_error.empty() ? "" : "; queue-get: " + queue_error),
                        ke);
    return;
  }
  c->queues = yes(fmt::format("{}", fmt::join(parts, "; ")));
  if (!ch) c->queues.reason = "channels-get: " + ch.status().message();
}

/// The RX queue the bind and zcrx attempts use: the last one (devmem setups keep the last
/// queues away from RSS), from queue-get, else from the channel counts, else 0.
uint32_t probe_queue(const QueueCounts& q) {
  if (!q.rx_queue_ids.empty()) return q.rx_queue_ids.back();
  const uint32_t n = q.combined.value_or(0) + q.rx.value_or(0);
  return n > 0 ? n - 1 : 0;
}

/// The fix for a refused bind, from its errno and what else the interface lacks.
std::string bind_fix(const KernelError& ke, const zerocopy::DmabufSource* source, const InterfaceCapabilities& c,
                     bool rx) {
  if (ke.err == EPERM || ke.err == EACCES) return kRootFix;
  if (ke.err == EOPNOTSUPP || ke.err == ENODEV) return "";  // the driver cannot: no command changes that
  std::vector<std::string> steps;
  if (rx && !c.header_split.yes() && !c.header_split.fix.empty()) steps.push_back(c.header_split.fix);
  if (source == nullptr || !source->is_dmabuf()) {
    steps.push_back("a dmabuf exporter: a GPU driver's dmabuf export, or modprobe udmabuf");
  }
  return fmt::format("{}", fmt::join(steps, "; "));
}

ProbeAnswer try_bind(bool rx, zerocopy::NetdevClient* netdev, const zerocopy::DmabufSource* source,
                     const InterfaceCapabilities& c, uint32_t queue) {
  if (netdev == nullptr) return unknown("the netdev netlink family is not available (see the host section)");
  if (rx ? !netdev->has_bind_rx() : !netdev->has_bind_tx()) {
    return no(fmt::format("this kernel's netdev family has no {} (devmem RX: Linux 6.12, TX: 6.16)",
                          rx ? "bind-rx" : "bind-tx"),
              rx ? "Linux 6.12 or later" : "Linux 6.16 or later");
  }
  if (source == nullptr) return unknown("no file descriptor to bind (not even a memfd could be made)");
  KernelError ke;
  const uint32_t queues[] = {queue};
  auto binding = rx ? zerocopy::DevmemBinding::bind_rx(c.ifindex, source->fd.get(), queues, &ke)
                    : zerocopy::DevmemBinding::bind_tx(c.ifindex, source->fd.get(), &ke);
  if (binding) {
    // The binding ends here, when its netlink socket closes.
    return yes(fmt::format("bound a {} to {}: binding id {}, released at once", source->describe(),
                           rx ? fmt::format("RX queue {}", queue) : std::string("transmit"), binding->id()));
  }
  std::string reason = binding.status().message();
  if (!source->is_dmabuf()) {
    reason += fmt::format(" [the fd tried was a {}: this host has no dmabuf exporter]", source->describe());
  }
  return no(std::move(reason), bind_fix(ke, source, c, rx), ke);
}

ProbeAnswer try_zcrx(const InterfaceCapabilities& c, uint32_t queue) {
  KernelError ke;
  Status s = zerocopy::try_zcrx_register(c.ifindex, queue, &ke);
  if (!zerocopy::built_with_io_uring()) return unknown(s.message());
  if (s) return yes(fmt::format("registered RX queue {} with a host memory area; released at once", queue));
  std::string fix;
  if (ke.err == EPERM) fix = kRootFix;
  if (ke.err == EINVAL && !c.header_split.yes()) fix = c.header_split.fix;
  return no(s.message(), std::move(fix), ke);
}

// ---- per host ----

ProbeAnswer io_uring_answer() {
  const zerocopy::IoUringProbe p = zerocopy::probe_io_uring();
  if (!zerocopy::built_with_io_uring()) return unknown(p.ring.message());
  if (!p.ring) {
    std::string fix;
    if (p.ring_refusal.err == EPERM && p.disabled_sysctl && *p.disabled_sysctl != 0) {
      fix = "sysctl kernel.io_uring_disabled=0";
    }
    return no(p.ring.message(), std::move(fix), p.ring_refusal);
  }
  std::string detail =
      fmt::format("rings set up; SEND_ZC: {}, RECV_ZC (zcrx): {}; zcrx setup flags: {}", p.send_zc ? "yes" : "no",
                  p.recv_zc ? "yes" : "no (Linux 6.15+)", p.zcrx_ring ? "accepted" : p.zcrx_ring.message());
  if (p.disabled_sysctl) detail += fmt::format("; kernel.io_uring_disabled={}", *p.disabled_sysctl);
  return yes(std::move(detail));
}

ProbeAnswer zcrx_copy_answer() {
  KernelError ke;
  Status s = zerocopy::try_zcrx_device_less(&ke);
  if (!zerocopy::built_with_io_uring()) return unknown(s.message());
  if (!s) {
    const std::string fix = ke.err == EPERM    ? kRootFix
                            : ke.err == EINVAL ? "a Linux 7.1 or later kernel (ZCRX_REG_NODEV)"
                                               : "";
    return no(s.message(), fix, ke);
  }
  ProbeAnswer a =
      yes("registered a device-less queue (ZCRX_REG_NODEV) with a host memory area; released at once. "
          "REMORA_DEVICE_PATH=zcrx REMORA_ZCRX_MODE=copy reads every data stream through it");
  a.reason =
      "copy mode: the kernel copies each stream's bytes into the area, so nothing is zero-copy; a NIC with header "
      "split and a zcrx queue (REMORA_ZCRX_MODE=nic, with `remora rxq serve`) would place the payload there "
      "without a copy";
  return a;
}

ProbeAnswer msg_zerocopy_answer() {
  zerocopy::MsgZerocopyProbe p;
  Status s = zerocopy::probe_msg_zerocopy(&p);
  if (!s) return no(s.message(), "", p.refusal);
  return yes(fmt::format("SO_ZEROCOPY accepted; a 64 KiB MSG_ZEROCOPY send over loopback completed (sends {}..{}){}",
                         p.first, p.last,
                         p.copied ? ", copied by the kernel (loopback always copies; zero copy needs a NIC's "
                                    "transmit path)"
                                  : ", without a copy"));
}

ProbeAnswer kernel_tls_answer() {
  net::SockAddr loopback;
  auto* in = reinterpret_cast<sockaddr_in*>(&loopback.storage);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  loopback.length = sizeof(sockaddr_in);
  auto listener = net::listen_tcp(loopback, 1);
  if (!listener) return unknown("a loopback listener for the probe: " + listener.status().message());
  auto where = net::local_address(listener->get());
  if (!where) return unknown("the probe listener's address: " + where.status().message());
  auto client = net::connect_tcp(*where, net::Clock::now() + std::chrono::seconds(2));
  if (!client) return unknown("a loopback connection for the probe: " + client.status().message());
  // Attaching the "tls" upper-layer protocol needs an established TCP socket; the
  // connection need not be accepted for that.
  static constexpr char kTls[] = "tls";
  if (::setsockopt(client->get(), SOL_TCP, TCP_ULP, kTls, sizeof kTls) != 0) {
    const int err = errno;
    KernelError kernel;
    kernel.err = err;
    return no(fmt::format("setsockopt(TCP_ULP, \"tls\") on a connected loopback socket: {}", std::strerror(err)),
              err == ENOENT ? "modprobe tls (a kernel built with CONFIG_TLS)" : "", kernel);
  }
  return yes(
      "the kernel attaches its \"tls\" upper-layer protocol to TCP sockets (CONFIG_TLS); remora does not use it: "
      "REMORA_ENCRYPT seals in user space (libsodium); NIC offload (TLS or PSP) is not probed");
}

ProbeAnswer sealing_answer() {
  std::string ciphers;
  for (net::SealCipher c : net::kSealCiphers) {
    if (!net::cipher_available(c)) continue;
    if (!ciphers.empty()) ciphers += ", ";
    ciphers += net::cipher_name(c);
  }
  const std::optional<net::SealCipher> on = net::preferred_cipher(net::offered_ciphers(EncryptMode::kOn));
  std::string detail = fmt::format("libsodium {}: {}; REMORA_ENCRYPT=on prefers {}", net::sodium_version(), ciphers,
                                   on ? net::cipher_name(*on) : "none");
  if (!net::cipher_available(net::SealCipher::kAegis256)) {
    detail += " (no AEGIS-256: this libsodium predates 1.0.19; scripts/lib/sodium.sh builds 1.0.22)";
  }
  return yes(detail);
}

}  // namespace

Result<CapabilityReport> probe_capabilities(const CapabilityProbeOptions& options) {
  REMORA_ASSIGN_OR_RETURN(const auto ifaces, interfaces(options.interfaces));
  CapabilityReport report;
  report.hardware_note = kHardwareNote;
  HostCapabilities& host = report.host;
  utsname u{};
  if (::uname(&u) == 0) host.kernel = u.release;

  // The CUDA driver, its devices and their dmabuf export are the device layer's to
  // probe (remora::probe_cuda(), remora/cuda.h; `remora doctor` reports both); this
  // layer sits below it and cannot.
  host.cuda = unknown("not probed yet by probe_capabilities(): see remora::probe_cuda() in remora/cuda.h");

  std::optional<zerocopy::DmabufSource> source;
  if (options.dmabuf_fd >= 0) {
    auto s = zerocopy::exported_dmabuf(options.dmabuf_fd, 0, options.dmabuf_note);
    if (s) {
      host.dmabuf_source = yes(options.dmabuf_note);
      source = std::move(*s);
    } else {
      host.dmabuf_source = unknown(s.status().message());
    }
  } else if (auto s = zerocopy::best_dmabuf(kProbeDmabufBytes,
                                            options.dmabuf_note.empty() ? "no GPU export was tried"
                                                                        : std::string_view(options.dmabuf_note))) {
    host.dmabuf_source = s->is_dmabuf() ? yes(fmt::format("{} ({} bytes)", s->describe(), s->size))
                                        : no(s->why_no_dmabuf, "modprobe udmabuf, or a GPU driver's dmabuf export");
    source = std::move(*s);
  } else {
    host.dmabuf_source = unknown(s.status().message());
  }

  std::optional<zerocopy::NetdevClient> netdev;
  if (auto n = zerocopy::NetdevClient::open()) {
    netdev = std::move(*n);
    host.netdev_family = yes(fmt::format("family id {}; bind-rx: {}; bind-tx: {}", netdev->family().id,
                                         netdev->has_bind_rx() ? "yes" : "no (Linux 6.12+)",
                                         netdev->has_bind_tx() ? "yes" : "no (Linux 6.16+)"));
  } else {
    host.netdev_family = no(n.status().message(), "Linux 6.12 or later for devmem TCP");
  }
  std::optional<zerocopy::EthtoolClient> ethtool;
  if (auto e = zerocopy::EthtoolClient::open()) {
    ethtool = std::move(*e);
    host.ethtool_family = yes("available");
  } else {
    host.ethtool_family = no(e.status().message());
  }
  host.io_uring = io_uring_answer();
  host.msg_zerocopy = msg_zerocopy_answer();
  host.zcrx_copy = zcrx_copy_answer();
  host.kernel_tls = kernel_tls_answer();
  host.sealing = sealing_answer();

  for (const auto& [name, index] : ifaces) {
    InterfaceCapabilities c;
    c.name = name;
    c.ifindex = index;
    if (auto d = zerocopy::driver_name(name)) {
      c.driver = yes(*d);
    } else {
      c.driver = no(d.status().message());
    }
    if (ethtool) {
      probe_rings(&*ethtool, &c);
      probe_features(&*ethtool, &c);
    } else {
      c.header_split = c.header_split_settable = c.ntuple = unknown("the ethtool netlink family is not available");
    }
    probe_queues(ethtool ? &*ethtool : nullptr, netdev ? &*netdev : nullptr, &c);
    if (options.try_bind) {
      const uint32_t queue = probe_queue(c.queue_counts);
      c.devmem_rx = try_bind(true, netdev ? &*netdev : nullptr, source ? &*source : nullptr, c, queue);
      c.devmem_tx = try_bind(false, netdev ? &*netdev : nullptr, source ? &*source : nullptr, c, queue);
      c.zcrx = try_zcrx(c, queue);
    } else {
      c.devmem_rx = c.devmem_tx = c.zcrx =
          unknown("not tried: bind attempts were turned off (remora doctor --no-bind)");
    }
    report.device_path_available = report.device_path_available || c.device_path();
    report.interfaces.push_back(std::move(c));
  }
  return report;
}

}  // namespace remora
