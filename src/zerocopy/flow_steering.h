// zerocopy/flow_steering.h — what `remora rxq` asks of the SIOCETHTOOL ioctl to keep a
// devmem flow on its queue: the RX ring count (ETHTOOL_GRXRINGS), the RSS indirection
// table (ETHTOOL_GRXFHINDIR / ETHTOOL_SRXFHINDIR: RSS spreads ordinary traffic over the
// first queues only, so the last ones are reserved) and ntuple flow-steering rules
// (ETHTOOL_SRXCLSRLINS / ETHTOOL_SRXCLSRLDEL: one TCP flow to one queue). These are the
// requests `ethtool -x/-X/-n/-N` make; the ioctl works on every kernel, where the netlink
// RSS messages are newer than some we run on. Builders are pure (tested field by field);
// FlowSteering does the I/O on one interface.
#pragma once

#include <linux/ethtool.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "remora/status.h"
#include "zerocopy/kernel_error.h"

namespace remora::zerocopy {

/// A TCP flow to steer: the local (destination) port is required; the rest narrows the
/// match where given. Addresses are in network byte order, IPv4 in the first 4 bytes.
struct TcpFlow {
  bool ipv6 = false;
  uint16_t dst_port = 0;  ///< the receiver's port (host order); never 0
  uint16_t src_port = 0;  ///< 0: any
  std::array<uint8_t, 16> dst_addr{};  ///< all zero: any
  std::array<uint8_t, 16> src_addr{};  ///< all zero: any
  /// "tcp4 dst-port 5000 [src-ip 10.0.0.1 ...]", as ethtool -N spells the rule.
  std::string describe() const;
};

/// ETHTOOL_SRXCLSRLINS of `flow` to RX queue `queue`, at a location the driver chooses
/// (RX_CLS_LOC_ANY). The mask marks exactly the fields `flow` sets.
ethtool_rxnfc build_rule_insert(const TcpFlow& flow, uint32_t queue);
/// ETHTOOL_SRXCLSRLDEL of the rule at `location`.
ethtool_rxnfc build_rule_delete(uint32_t location);
/// An RSS indirection table of `size` entries spreading over queues 0..rss_queues-1
/// (what `ethtool -X <if> equal <rss_queues>` sets).
std::vector<uint32_t> equal_indirection(uint32_t size, uint32_t rss_queues);

/// The SIOCETHTOOL requests of one interface. Each refusal fills `*refusal` (the errno;
/// the ioctl carries no message) and returns a Status naming the request.
class FlowSteering {
 public:
  static Result<FlowSteering> open(const std::string& ifname);

  const std::string& ifname() const { return ifname_; }
  /// ETHTOOL_GRXRINGS: how many RX queues RSS and the rules can use.
  Result<uint32_t> rx_rings(KernelError* refusal = nullptr);
  /// ETHTOOL_GRXFHINDIR: the RSS indirection table (queue of each hash bucket).
  Result<std::vector<uint32_t>> indirection(KernelError* refusal = nullptr);
  /// ETHTOOL_SRXFHINDIR of `table` (its size must be the device's).
  Status set_indirection(const std::vector<uint32_t>& table, KernelError* refusal = nullptr);
  /// ETHTOOL_SRXCLSRLINS; the location the driver put the rule at.
  Result<uint32_t> insert_rule(const TcpFlow& flow, uint32_t queue, KernelError* refusal = nullptr);
  Status delete_rule(uint32_t location, KernelError* refusal = nullptr);

 private:
  explicit FlowSteering(std::string ifname) : ifname_(std::move(ifname)) {}
  /// SIOCETHTOOL with `data`; 0 or the errno.
  int ioctl(void* data);
  std::string ifname_;
};

/// What to do about a refused SIOCETHTOOL request with errno `err` on `ifname` ("" when
/// nothing would change it: the driver cannot).
std::string steering_hint(int err, const std::string& ifname, std::string_view request);

}  // namespace remora::zerocopy
