// datapath/device_path.h — which data path a transfer of device memory takes, and why.
//
// Per send or receive of device memory an endpoint picks, best first: devmem TCP (the
// NIC reads or writes the memory through a dmabuf binding), io_uring zero-copy receive
// (zcrx), or staging through pinned host buffers (datapath/staging.h); host memory
// always takes the host path. REMORA_DEVICE_PATH (Config::device_path) says whether the
// endpoint may fall back (auto) or must use one path (devmem, zcrx, staging: a transfer
// the demanded path cannot take fails with the reason; zcrx, a receive path, demands
// only how device memory is received, and sends go as under auto). Every path passed over
// is recorded with the reason (the kernel's errno and what would change it, where the
// kernel was asked), and EndpointStats reports the path and reason of the last device
// transfer and a count per path.
//
// What is asked:
// - devmem TX (message sends and chunked puts; datapath/devmem_tx_path.h): per send,
//   the memory's domain exports the range as a dmabuf and the interface
//   REMORA_DEVMEM_IFNAME binds it for transmit (bind-tx restarts no queue); a domain
//   that refused to export, or whose dmabuf the interface refused to bind, is not asked
//   again by this endpoint. Where both succeed the send goes by devmem TX. Not with
//   REMORA_CHECKSUM=crc32c (the CRC needs the bytes on the host), and not for inline
//   puts and served gets. Once per endpoint, for the reason given when the memory
//   cannot be exported, the interface is tried with the best dmabuf this host has
//   (zerocopy/dmabuf_source.h; dropped at once).
// - devmem RX: every data stream of the endpoint steered by `remora rxq` to RX queues
//   bound to its buffer (REMORA_RXQ_SOCKET; datapath/devmem_rx_lease.h). Then message
//   receives, chunked gets and a peer's chunked puts into device memory go by devmem
//   RX; bytes that come inline on the control stream stage, and so does everything with
//   REMORA_CHECKSUM=crc32c. No binding is ever tried here (it would restart a queue of
//   a live NIC). Without rxq the reason says so, with what the kernel
//   offers (bind-rx in the netdev family).
// - zcrx (REMORA_DEVICE_PATH=zcrx only: the endpoint itself registers a queue, which
//   takes CAP_NET_ADMIN and restarts the queue): every data stream steered by `remora
//   rxq` to a queue it reserved for the endpoint, which the endpoint registered with an
//   io_uring of its own (datapath/zcrx_path.h). Then the same receives as devmem RX go
//   by zcrx, with the same exceptions. Otherwise the reason says why not, with what the
//   kernel offers (RECV_ZC in io_uring).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datapath/devmem_tx_path.h"
#include "datapath/transfer.h"
#include "remora/config.h"
#include "remora/memory.h"
#include "remora/status.h"

namespace remora::detail {

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
  std::unique_ptr<DevmemTxSend> devmem_tx;  ///< kDevmem sends: the dmabuf and its binding
};

/// One endpoint's choices: probes once, remembers each domain's dmabuf export answer.
/// Not thread-safe (the endpoint's lock).
class DevicePathSelector {
 public:
  explicit DevicePathSelector(const Config& config) : config_(config) {}
  /// The path for a transfer of [ptr, ptr+len) of `domain`'s memory (`tx`: this side
  /// sends it; `drives_devmem_tx`: the caller can send it by devmem TX, as message sends
  /// and chunked puts can). An error when the path Config::device_path demands cannot be taken: its
  /// status says why (kUnsupported, the kernel's reason inside).
  /// `drives_devmem_rx`: the caller can receive it by devmem RX (message receives and
  /// chunked gets can, once every data stream is steered: set_devmem_rx).
  Result<PathChoice> choose(MemoryDomain& domain, const void* ptr, size_t len, bool tx, bool drives_devmem_tx = false,
                            bool drives_devmem_rx = false);
  /// What this endpoint's data streams are: ok, every one steered to devmem RX queues
  /// (the message describes the binding); else why devmem RX is not set up for them.
  void set_devmem_rx(Status steered) { devmem_rx_ = std::move(steered); }
  bool devmem_rx_ready() const noexcept { return devmem_rx_ && devmem_rx_->is_ok(); }
  /// The same for io_uring zcrx: ok, every data stream is read by it (the message
  /// describes the queue); else why not.
  void set_zcrx_rx(Status read) { zcrx_rx_ = std::move(read); }
  bool zcrx_rx_ready() const noexcept { return zcrx_rx_ && zcrx_rx_->is_ok(); }
  /// For tests: the probe to use instead of asking the kernel.
  void set_probe(DevicePathProbe probe) { probe_ = std::move(probe); }
  /// The context's bindings of registered regions (devmem TX); without it every devmem
  /// send binds its own.
  void set_binding_cache(std::shared_ptr<DevmemTxBindingCache> cache) { bindings_ = std::move(cache); }

 private:
  /// The export and binding of a devmem send, or why not.
  Result<std::unique_ptr<DevmemTxSend>> devmem_tx_for(MemoryDomain& domain, const void* ptr, size_t len,
                                                      bool drives_devmem_tx);

  Config config_;
  std::optional<DevicePathProbe> probe_;
  std::optional<Status> devmem_rx_;                                      // set_devmem_rx; unset: the probe's answer
  std::optional<Status> zcrx_rx_;                                        // set_zcrx_rx; unset: the probe's answer
  std::vector<std::pair<const MemoryDomain*, Status>> devmem_refusals_;  // per domain: export or bind-tx refused
  std::shared_ptr<DevmemTxBindingCache> bindings_;
};

}  // namespace remora::detail
