// transport/device_path.h — which data path a transfer of device memory takes, and why.
//
// Per send or receive of device memory an endpoint picks, best first: devmem TCP (the
// NIC reads or writes the memory through a dmabuf binding), io_uring zero-copy receive
// (zcrx), or staging through pinned host buffers (transport/staging.h); host memory
// always takes the host path. REMORA_DEVICE_PATH (Config::device_path) says whether the
// endpoint may fall back (auto) or must use one path (devmem, zcrx, staging: a transfer
// the demanded path cannot take fails with the reason). Every path that is passed over
// is recorded with the reason (the kernel's errno and what would change it, where the
// kernel was asked), and EndpointStats reports the path and reason of the last device
// transfer and a count per path.
//
// What is asked, once per endpoint (on its first device transfer) and cached:
// - devmem TX: can the memory's domain export a dmabuf (asked once per domain, on its
//   first transfer, the answer kept whatever it is), and does the
//   interface REMORA_DEVMEM_IFNAME accept a bind-tx (tried with the best dmabuf this host
//   has, zerocopy/dmabuf_source.h; the binding is dropped at once; bind-tx restarts no
//   queue). Even where both succeed this version's endpoint does not drive devmem TX yet
//   (zerocopy/devmem_tx.h holds the send path), and says so.
// - devmem RX and zcrx: they need RX queues steered and bound for this endpoint's data
//   streams, which only `remora rxq` can set up; no binding is ever tried here (it would
//   restart a queue of a live NIC). Until rxq hands a binding to the endpoint the reason
//   says that, with what the kernel offers (bind-rx in the netdev family, RECV_ZC in
//   io_uring).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "remora/config.h"
#include "remora/memory.h"
#include "remora/status.h"

namespace remora::detail {

enum class DataPath : uint8_t { kHost, kStaging, kDevmem, kZcrx };
std::string_view data_path_name(DataPath p) noexcept;

/// The answers of the kernel and the configuration that do not depend on the memory.
struct DevicePathProbe {
  Status devmem_tx_interface;  ///< ok: REMORA_DEVMEM_IFNAME accepted a bind-tx; else why not
  Status devmem_rx;            ///< why devmem RX is not set up for the data streams
  Status zcrx;                 ///< why zcrx is not set up for the data streams
};

/// Asks the kernel (see the file comment). Never fails: every answer is a Status.
DevicePathProbe probe_device_paths(const Config& config);

/// The path of one transfer and why.
struct PathChoice {
  DataPath path = DataPath::kStaging;
  std::string reason;
};

/// One endpoint's choices: probes once, remembers each domain's dmabuf export answer.
/// Not thread-safe (the endpoint's lock).
class DevicePathSelector {
 public:
  explicit DevicePathSelector(const Config& config) : config_(config) {}
  /// The path for a transfer of [ptr, ptr+len) of `domain`'s memory (`tx`: this side
  /// sends it). An error when the path Config::device_path demands cannot be taken: its
  /// status says why (kUnsupported, the kernel's reason inside).
  Result<PathChoice> choose(MemoryDomain& domain, const void* ptr, size_t len, bool tx);
  /// For tests: the probe to use instead of asking the kernel.
  void set_probe(DevicePathProbe probe) { probe_ = std::move(probe); }

 private:
  Status devmem_tx_for(MemoryDomain& domain, const void* ptr, size_t len);

  Config config_;
  std::optional<DevicePathProbe> probe_;
  std::vector<std::pair<const MemoryDomain*, Status>> export_refusals_;  // ok: it exports
};

}  // namespace remora::detail
