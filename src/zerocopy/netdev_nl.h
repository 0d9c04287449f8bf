// zerocopy/netdev_nl.h — the "netdev" generic netlink family: dev-get, queue-get (a dump
// of one interface's queues), and the devmem bindings, bind-rx (a dmabuf bound to RX
// queues) and bind-tx (a dmabuf bound for transmit). The requests are built and the
// replies parsed by pure functions (tested byte for byte); NetdevClient and
// DevmemBinding do the I/O. A binding lives as long as the netlink socket that made it,
// so DevmemBinding owns that socket: destroying it unbinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remora/status.h"
#include "zerocopy/genl.h"
#include "zerocopy/kernel_error.h"
#include "zerocopy/uapi.h"

namespace remora::zerocopy {

/// dev-get's answer (what the netdev family knows of an interface; nothing here says
/// "devmem": that is learnt only by binding).
struct NetdevInfo {
  uint32_t ifindex = 0;
  uint64_t xdp_features = 0;              ///< NETDEV_XDP_ACT_* bits
  uint32_t xdp_zc_max_segs = 0;           ///< AF_XDP zero-copy segments (0: none)
  uint64_t xdp_rx_metadata_features = 0;  ///< NETDEV_XDP_RX_METADATA_* bits
  uint64_t xsk_features = 0;              ///< NETDEV_XSK_FLAGS_* bits
};

/// One queue of queue-get.
struct NetdevQueue {
  uint32_t id = 0;
  uint32_t ifindex = 0;
  uint32_t type = 0;                ///< uapi::kNetdevQueueTypeRx or kNetdevQueueTypeTx
  std::optional<uint32_t> napi_id;  ///< the NAPI instance serving it, when it has one
  std::optional<uint32_t> dmabuf;   ///< the devmem binding bound to it (RX), if any
  bool io_uring = false;            ///< an io_uring zcrx instance holds it
  bool xsk = false;                 ///< an AF_XDP socket holds it
  bool is_rx() const { return type == uapi::kNetdevQueueTypeRx; }
};

// ---- Pure builders and parsers ----

/// dev-get for `ifindex` (NLM_F_ACK).
nl::Message build_dev_get(uint16_t family, uint32_t seq, uint32_t ifindex);
Result<NetdevInfo> parse_dev(std::span<const std::byte> reply);

/// queue-get as a dump filtered to `ifindex` (NLM_F_DUMP).
nl::Message build_queue_dump(uint16_t family, uint32_t seq, uint32_t ifindex);
Result<NetdevQueue> parse_queue(std::span<const std::byte> reply);

/// bind-rx: `dmabuf_fd` bound to the RX queues `rx_queues` of `ifindex` (NLM_F_ACK). The
/// attributes go ifindex, fd, then one NETDEV_A_DMABUF_QUEUES nest {id, type rx} per queue.
nl::Message build_bind_rx(uint16_t family, uint32_t seq, uint32_t ifindex, uint32_t dmabuf_fd,
                          std::span<const uint32_t> rx_queues);
/// bind-tx: `dmabuf_fd` bound for transmit on `ifindex` (NLM_F_ACK).
nl::Message build_bind_tx(uint16_t family, uint32_t seq, uint32_t ifindex, uint32_t dmabuf_fd);
/// The binding id of bind-rx's or bind-tx's reply (NETDEV_A_DMABUF_ID, never 0).
Result<uint32_t> parse_binding_id(std::span<const std::byte> reply);

// ---- I/O ----

/// A netlink socket with the netdev family resolved. Not thread-safe.
class NetdevClient {
 public:
  /// kUnsupported when the kernel has no netdev family (before 6.3).
  static Result<NetdevClient> open();

  const nl::FamilyInfo& family() const { return family_; }
  /// Whether this kernel implements bind-rx (6.12) and bind-tx (6.16): the controller
  /// lists the family's operations.
  bool has_bind_rx() const { return family_.has_op(uapi::kNetdevCmdBindRx); }
  bool has_bind_tx() const { return family_.has_op(uapi::kNetdevCmdBindTx); }

  Result<NetdevInfo> dev_get(uint32_t ifindex, KernelError* refusal = nullptr);
  Result<std::vector<NetdevQueue>> queues(uint32_t ifindex, KernelError* refusal = nullptr);

 private:
  NetdevClient(nl::Socket socket, nl::FamilyInfo family) : socket_(std::move(socket)), family_(std::move(family)) {}
  nl::Socket socket_;
  nl::FamilyInfo family_;
};

/// A dmabuf bound to an interface for devmem TCP, alive as long as this object: it owns
/// the netlink socket the binding was made on, and the kernel unbinds when that closes
/// (also when the process dies). Move-only.
class DevmemBinding {
 public:
  enum class Direction : uint8_t { kRx, kTx };

  /// bind-rx: the RX queues `rx_queues` of `ifindex` fill from `dmabuf_fd`. Needs
  /// CAP_NET_ADMIN, a driver with the queue API and unreadable netmem, header split on,
  /// and a real dmabuf. A refusal fills `*refusal` (errno and the kernel's message) and
  /// returns a Status that says what would change it.
  static Result<DevmemBinding> bind_rx(uint32_t ifindex, int dmabuf_fd, std::span<const uint32_t> rx_queues,
                                       KernelError* refusal = nullptr);
  /// bind-tx: `dmabuf_fd` can be sent from on `ifindex` (6.16; a driver with netmem TX).
  static Result<DevmemBinding> bind_tx(uint32_t ifindex, int dmabuf_fd, KernelError* refusal = nullptr);

  uint32_t id() const { return id_; }
  uint32_t ifindex() const { return ifindex_; }
  Direction direction() const { return direction_; }

 private:
  DevmemBinding(nl::Socket socket, uint32_t id, uint32_t ifindex, Direction d)
      : socket_(std::move(socket)), id_(id), ifindex_(ifindex), direction_(d) {}
  static Result<DevmemBinding> bind(Direction d, uint32_t ifindex, int dmabuf_fd, std::span<const uint32_t> rx_queues,
                                    KernelError* refusal);
  nl::Socket socket_;
  uint32_t id_;
  uint32_t ifindex_;
  Direction direction_;
};

/// What to do about a bind-rx or bind-tx refusal with this errno and kernel message
/// ("" when nothing we know would change it). Used for the Status messages and by the doctor.
std::string bind_refusal_hint(DevmemBinding::Direction d, const KernelError& refusal);

}  // namespace remora::zerocopy
