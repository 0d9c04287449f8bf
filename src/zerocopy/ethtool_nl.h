// zerocopy/ethtool_nl.h — what `remora doctor` asks the "ethtool" generic netlink family
// about an interface: rings (header split: ETHTOOL_A_RINGS_TCP_DATA_SPLIT, and whether
// the driver lets it be set), channels (queue counts and maxima) and features (ntuple
// flow steering, "rx-ntuple-filter"); and the driver's name (sysfs, else the
// SIOCETHTOOL GDRVINFO ioctl). Builders and parsers are pure; EthtoolClient does the I/O.
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

/// rings-get's answer. The kernel leaves out what the driver does not report.
struct RingsInfo {
  std::optional<uint32_t> rx, rx_max, tx, tx_max, rx_buf_len;
  /// uapi::kEthtoolTcpDataSplit{Unknown,Disabled,Enabled}; Unknown when the driver does
  /// not report header split (the kernel omits the attribute then).
  uint8_t tcp_data_split = uapi::kEthtoolTcpDataSplitUnknown;
  std::optional<uint32_t> hds_thresh, hds_thresh_max;  ///< header-split threshold (6.13+ drivers)
};

/// channels-get's answer (queue counts; the kernel omits kinds the driver lacks).
struct ChannelsInfo {
  std::optional<uint32_t> rx, tx, other, combined;
  std::optional<uint32_t> rx_max, tx_max, other_max, combined_max;
};

/// One feature of features-get.
struct FeatureState {
  bool changeable = false;  ///< in the hw set: `ethtool -K` may turn it on or off ("[fixed]" otherwise)
  bool active = false;      ///< on now
};

/// features-get's answer: every feature named in any of its bitsets.
struct FeaturesInfo {
  std::vector<std::pair<std::string, FeatureState>> features;
  /// The feature named `name`, or nullopt when the kernel does not list it.
  std::optional<FeatureState> find(std::string_view name) const;
};

// ---- Pure builders and parsers ----

/// rings-get, channels-get, features-get for `ifindex` (NLM_F_ACK). Features come in the
/// verbose bitset form (names included), since bit numbers change between kernels.
nl::Message build_rings_get(uint16_t family, uint32_t seq, uint32_t ifindex);
nl::Message build_channels_get(uint16_t family, uint32_t seq, uint32_t ifindex);
nl::Message build_features_get(uint16_t family, uint32_t seq, uint32_t ifindex);
/// rings-set of ETHTOOL_A_RINGS_TCP_DATA_SPLIT to `value` alone (NLM_F_ACK,
/// ETHTOOL_FLAG_OMIT_REPLY). Sent with the value the interface already has, it changes
/// nothing (the kernel compares and returns before calling the driver) but still runs
/// the check that refuses drivers that cannot set header split: the doctor's probe.
nl::Message build_rings_set_tcp_data_split(uint16_t family, uint32_t seq, uint32_t ifindex, uint8_t value);

/// rings-set of ETHTOOL_A_RINGS_HDS_THRESH to `value` alone (NLM_F_ACK,
/// ETHTOOL_FLAG_OMIT_REPLY): the payload size under which a header-split queue still
/// puts the payload with the headers (in host memory: SCM_DEVMEM_LINEAR on a devmem
/// stream). Linux 6.13+ drivers that report it; the kernel refuses a value above
/// hds-thresh-max, and drivers without it ("setting hds-thresh is not supported").
nl::Message build_rings_set_hds_thresh(uint16_t family, uint32_t seq, uint32_t ifindex, uint32_t value);

Result<RingsInfo> parse_rings(std::span<const std::byte> reply);
Result<ChannelsInfo> parse_channels(std::span<const std::byte> reply);
Result<FeaturesInfo> parse_features(std::span<const std::byte> reply);

// ---- I/O ----

/// A netlink socket with the ethtool family resolved. Not thread-safe.
class EthtoolClient {
 public:
  static Result<EthtoolClient> open();

  Result<RingsInfo> rings(uint32_t ifindex, KernelError* refusal = nullptr);
  Result<ChannelsInfo> channels(uint32_t ifindex, KernelError* refusal = nullptr);
  Result<FeaturesInfo> features(uint32_t ifindex, KernelError* refusal = nullptr);
  /// Whether the driver lets header split be set: rings-set with `current` (the value
  /// rings() just reported), which leaves the interface as it is. ok: it can be set;
  /// otherwise the kernel's refusal (EOPNOTSUPP "setting TCP data split is not
  /// supported"; EPERM without CAP_NET_ADMIN).
  Status probe_tcp_data_split_settable(uint32_t ifindex, uint8_t current, KernelError* refusal = nullptr);
  /// rings-set of tcp-data-split to `value` (`ethtool -G <if> tcp-data-split on|off|auto`):
  /// `remora rxq` turns header split on, and puts back what was there.
  Status set_tcp_data_split(uint32_t ifindex, uint8_t value, KernelError* refusal = nullptr);
  /// Sets the header-split threshold (build_rings_set_hds_thresh).
  Status set_hds_thresh(uint32_t ifindex, uint32_t value, KernelError* refusal = nullptr);

 private:
  EthtoolClient(nl::Socket socket, nl::FamilyInfo family) : socket_(std::move(socket)), family_(std::move(family)) {}
  template <typename T, typename Parse>
  Result<T> get(nl::Message request, Parse parse, std::string_view what, KernelError* refusal);
  nl::Socket socket_;
  nl::FamilyInfo family_;
};

/// The interface's driver: the name of /sys/class/net/<ifname>/device/driver, else the
/// SIOCETHTOOL ETHTOOL_GDRVINFO answer ("veth"); an error saying why when neither has one
/// (lo: a virtual device with no driver).
Result<std::string> driver_name(const std::string& ifname);

}  // namespace remora::zerocopy
