// remora/capabilities.h — what this host's kernel and network interfaces offer for
// zero-copy data paths, found by trying: header split, flow steering and queue counts
// per interface (ethtool netlink), devmem TCP bind-rx and bind-tx (netdev netlink, with
// the best file descriptor the host has), io_uring and its zero-copy receive (zcrx), and
// MSG_ZEROCOPY. `remora doctor` prints this report; an application can use it to learn
// which path a transfer could take and why another cannot.
//
// Every answer that is not "yes" carries the reason (with the kernel's errno and message
// when it refused something) and, where one exists, the command or setting that would
// change it. Nothing is assumed from version numbers: each capability is tried.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "remora/status.h"

namespace remora {

/// One answer of the probe.
struct ProbeAnswer {
  enum class State : uint8_t {
    kYes,      ///< tried, and it worked (or the kernel reports it on)
    kNo,       ///< tried, and it did not: `reason` says why
    kUnknown,  ///< could not tell (not tried, or the question could not be asked): `reason` says why
  };
  State state = State::kUnknown;
  std::string detail;          ///< what was found or done ("tcp-data-split: disabled", "binding id 3")
  std::string reason;          ///< why not (kNo, kUnknown)
  std::string fix;             ///< a command or setting that would change a kNo; empty when none is known
  int error = 0;               ///< the errno the kernel answered with (0: none)
  std::string kernel_message;  ///< the kernel's own message (netlink extended ack), when it gave one

  bool yes() const { return state == State::kYes; }
};

/// "yes", "no", "unknown".
std::string_view to_string(ProbeAnswer::State state);

/// Queue counts from ethtool channels-get (absent where the driver does not report).
struct QueueCounts {
  std::optional<uint32_t> rx, tx, combined, other;
  std::optional<uint32_t> rx_max, tx_max, combined_max, other_max;
  /// RX queue ids from netdev queue-get (empty when the kernel would not list them).
  std::vector<uint32_t> rx_queue_ids;
};

/// Everything probed on one network interface.
struct InterfaceCapabilities {
  std::string name;
  uint32_t ifindex = 0;
  ProbeAnswer driver;                 ///< detail: the driver's name
  ProbeAnswer header_split;           ///< yes: tcp-data-split enabled now
  ProbeAnswer header_split_settable;  ///< yes: the driver lets it be set (ethtool -G <if> tcp-data-split on)
  ProbeAnswer ntuple;                 ///< yes: ntuple flow steering ("rx-ntuple-filter") on now
  ProbeAnswer queues;                 ///< detail: the counts, as text
  QueueCounts queue_counts;
  ProbeAnswer devmem_rx;  ///< bind-rx of the host's best dmabuf to the last RX queue
  ProbeAnswer devmem_tx;  ///< bind-tx of the host's best dmabuf
  ProbeAnswer zcrx;       ///< io_uring zcrx registration of the last RX queue (host memory area)
  /// A device zero-copy path exists on this interface: a devmem binding succeeded.
  bool device_path() const { return devmem_rx.yes() || devmem_tx.yes(); }
};

/// What is probed once per host.
struct HostCapabilities {
  std::string kernel;          ///< uname release
  ProbeAnswer dmabuf_source;   ///< yes: a dmabuf exporter gave a buffer (detail: which); no: only a memfd
  ProbeAnswer netdev_family;   ///< the netdev netlink family, and whether it has bind-rx and bind-tx
  ProbeAnswer ethtool_family;  ///< the ethtool netlink family
  ProbeAnswer io_uring;        ///< a ring could be set up (detail: zero-copy opcodes)
  ProbeAnswer msg_zerocopy;    ///< SO_ZEROCOPY and one MSG_ZEROCOPY send completed (detail: copied or not)
  /// io_uring zcrx's device-less copy mode (ZCRX_REG_NODEV, Linux 7.1+): a queue with no
  /// NIC under it registered (REMORA_ZCRX_MODE=copy; the kernel copies every byte).
  ProbeAnswer zcrx_copy;
  /// Kernel TLS (CONFIG_TLS): setsockopt(TCP_ULP, "tls") on a connected loopback socket.
  /// Reported only: REMORA_ENCRYPT seals in user space and does not use it.
  ProbeAnswer kernel_tls;
  /// REMORA_ENCRYPT's ciphers in this build (always yes; detail: the libsodium version,
  /// the ciphers it runs here, and the one `on` prefers).
  ProbeAnswer sealing;
  /// CUDA: always kUnknown here ("not probed yet"): the driver, its devices and their
  /// dmabuf export are reported by remora::probe_cuda() (remora/cuda.h), which
  /// `remora doctor` shows in this place.
  ProbeAnswer cuda;
};

/// The whole report.
struct CapabilityReport {
  HostCapabilities host;
  std::vector<InterfaceCapabilities> interfaces;
  /// A device zero-copy path exists on some interface (InterfaceCapabilities::device_path).
  bool device_path_available = false;
  /// Said plainly in every report: what has and has not run on devmem hardware.
  std::string hardware_note;
};

struct CapabilityProbeOptions {
  /// Interfaces to probe by name; empty: every interface of this network namespace.
  std::vector<std::string> interfaces;
  /// Try devmem bind-rx/bind-tx and zcrx registration for real. On a NIC that can do
  /// them they bind the last RX queue for an instant (the queue restarts); false skips
  /// them (answers kUnknown, "not tried").
  bool try_bind = true;
  /// A dmabuf the caller exported to try the binds with, instead of the best one this
  /// layer can make (udmabuf, the DMA-BUF system heap, else a memfd); -1: none. Not
  /// closed here. `remora doctor` passes one exported from CUDA device 0's memory
  /// (remora/cuda.h), where the driver can.
  int dmabuf_fd = -1;
  /// What dmabuf_fd is ("CUDA device 0 (NVIDIA H100 80GB HBM3), 2097152 bytes"); or,
  /// with no fd, why the caller's export failed: reported in the host's dmabuf answer
  /// in place of "no GPU export was tried".
  std::string dmabuf_note = {};
};

/// Probes this host. Each answer is independent: one that cannot be had is kUnknown
/// with its reason, and the others are still probed. An error only for bad options (an
/// interface name that does not exist: kInvalidArgument). Takes up to a few seconds.
/// Needs CAP_NET_ADMIN for bind-rx, zcrx and the header-split settability check;
/// without it those answer kNo with EPERM and say so.
Result<CapabilityReport> probe_capabilities(const CapabilityProbeOptions& options = {});

}  // namespace remora
