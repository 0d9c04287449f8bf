// zerocopy/ethtool_nl.cc — see ethtool_nl.h.
#include "zerocopy/ethtool_nl.h"

#include <linux/ethtool.h>
#include <linux/netlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <libmnl/libmnl.h>

#include "net/socket.h"

namespace remora::zerocopy {
namespace {

constexpr uint16_t kRingsMaxAttr = uapi::kEthtoolARingsHdsThreshMax;
constexpr uint16_t kChannelsMaxAttr = uapi::kEthtoolAChannelsCombinedCount;
constexpr uint16_t kFeaturesMaxAttr = uapi::kEthtoolAFeaturesNochange;
constexpr uint16_t kBitsetMaxAttr = uapi::kEthtoolABitsetMask;
constexpr uint16_t kBitMaxAttr = uapi::kEthtoolABitsetBitValue;

/// A request for `cmd` whose header nest (attribute 1 of every ethtool message) names
/// the interface by index, with `flags` in the header.
nl::Message request(uint16_t family, uint8_t cmd, uint16_t nl_flags, uint32_t seq, uint32_t ifindex,
                    uint32_t header_flags = 0) {
  nl::Message m(family, cmd, uapi::kEthtoolFamilyVersion, nl_flags, seq);
  nlattr* header = m.begin_nest(1);  // ETHTOOL_A_*_HEADER is 1 in every message
  m.put_u32(uapi::kEthtoolAHeaderDevIndex, ifindex);
  if (header_flags != 0) m.put_u32(uapi::kEthtoolAHeaderFlags, header_flags);
  m.end_nest(header);
  return m;
}

/// Merges one bitset (verbose form) of features-get into `info`, setting `field` of every
/// feature whose bit is set. In a list (NOMASK) every bit named is set; otherwise a bit is
/// set when it carries the VALUE flag.
Status merge_bitset(const nlattr* bitset, bool FeatureState::*field, FeaturesInfo* info, std::string_view what) {
  if (bitset == nullptr) return Status::ok();
  REMORA_ASSIGN_OR_RETURN(const nl::AttrTable t, nl::parse_nested(bitset, kBitsetMaxAttr));
  if (t[uapi::kEthtoolABitsetBits] == nullptr) {
    if (t[uapi::kEthtoolABitsetValue] != nullptr) {
      return Status(StatusCode::kProtocol, fmt::format("features {}: a compact bitset, which has no names", what));
    }
    return Status::ok();  // an empty set
  }
  const bool list = t[uapi::kEthtoolABitsetNomask] != nullptr;
  REMORA_ASSIGN_OR_RETURN(const auto bits, nl::nested_list(t[uapi::kEthtoolABitsetBits]));
  for (const nlattr* bit : bits) {
    if (mnl_attr_get_type(bit) != uapi::kEthtoolABitsetBitsBit) continue;
    REMORA_ASSIGN_OR_RETURN(const nl::AttrTable b, nl::parse_nested(bit, kBitMaxAttr));
    REMORA_ASSIGN_OR_RETURN(std::string name, nl::get_string(b[uapi::kEthtoolABitsetBitName], "feature bit name"));
    const bool set = list || b[uapi::kEthtoolABitsetBitValue] != nullptr;
    auto it =
        std::find_if(info->features.begin(), info->features.end(), [&](const auto& f) { return f.first == name; });
    if (it == info->features.end()) {
      info->features.emplace_back(std::move(name), FeatureState{});
      it = info->features.end() - 1;
    }
    if (set) it->second.*field = true;
  }
  return Status::ok();
}

}  // namespace

std::optional<FeatureState> FeaturesInfo::find(std::string_view name) const {
  for (const auto& [n, state] : features) {
    if (n == name) return state;
  }
  return std::nullopt;
}

nl::Message build_rings_get(uint16_t family, uint32_t seq, uint32_t ifindex) {
  return request(family, uapi::kEthtoolMsgRingsGet, NLM_F_ACK, seq, ifindex);
}

nl::Message build_channels_get(uint16_t family, uint32_t seq, uint32_t ifindex) {
  return request(family, uapi::kEthtoolMsgChannelsGet, NLM_F_ACK, seq, ifindex);
}

nl::Message build_features_get(uint16_t family, uint32_t seq, uint32_t ifindex) {
  return request(family, uapi::kEthtoolMsgFeaturesGet, NLM_F_ACK, seq, ifindex);
}

nl::Message build_rings_set_tcp_data_split(uint16_t family, uint32_t seq, uint32_t ifindex, uint8_t value) {
  nl::Message m = request(family, uapi::kEthtoolMsgRingsSet, NLM_F_ACK, seq, ifindex, uapi::kEthtoolFlagOmitReply);
  m.put_u8(uapi::kEthtoolARingsTcpDataSplit, value);
  return m;
}

nl::Message build_rings_set_hds_thresh(uint16_t family, uint32_t seq, uint32_t ifindex, uint32_t value) {
  nl::Message m = request(family, uapi::kEthtoolMsgRingsSet, NLM_F_ACK, seq, ifindex, uapi::kEthtoolFlagOmitReply);
  m.put_u32(uapi::kEthtoolARingsHdsThresh, value);
  return m;
}

Result<RingsInfo> parse_rings(std::span<const std::byte> reply) {
  REMORA_ASSIGN_OR_RETURN(const nl::AttrTable t,
                          nl::reply_attrs(reply, uapi::kEthtoolMsgRingsGetReply, kRingsMaxAttr, "rings-get"));
  RingsInfo r;
  REMORA_RETURN_IF_ERROR(nl::get_optional_u32s(t, {{uapi::kEthtoolARingsRx, &r.rx, "rings rx"},
                                                   {uapi::kEthtoolARingsRxMax, &r.rx_max, "rings rx-max"},
                                                   {uapi::kEthtoolARingsTx, &r.tx, "rings tx"},
                                                   {uapi::kEthtoolARingsTxMax, &r.tx_max, "rings tx-max"},
                                                   {uapi::kEthtoolARingsRxBufLen, &r.rx_buf_len, "rx-buf-len"},
                                                   {uapi::kEthtoolARingsHdsThresh, &r.hds_thresh, "hds-thresh"},
                                                   {uapi::kEthtoolARingsHdsThreshMax, &r.hds_thresh_max, "hds-max"}}));
  if (t[uapi::kEthtoolARingsTcpDataSplit] != nullptr) {
    REMORA_ASSIGN_OR_RETURN(r.tcp_data_split, nl::get_u8(t[uapi::kEthtoolARingsTcpDataSplit], "tcp-data-split"));
    if (r.tcp_data_split > uapi::kEthtoolTcpDataSplitEnabled) {
      return Status(StatusCode::kProtocol, fmt::format("tcp-data-split value {} is none of 0, 1, 2", r.tcp_data_split));
    }
  }
  return r;
}

Result<ChannelsInfo> parse_channels(std::span<const std::byte> reply) {
  REMORA_ASSIGN_OR_RETURN(const nl::AttrTable t,
                          nl::reply_attrs(reply, uapi::kEthtoolMsgChannelsGetReply, kChannelsMaxAttr, "channels-get"));
  ChannelsInfo c;
  REMORA_RETURN_IF_ERROR(
      nl::get_optional_u32s(t, {{uapi::kEthtoolAChannelsRxCount, &c.rx, "rx-count"},
                                {uapi::kEthtoolAChannelsTxCount, &c.tx, "tx-count"},
                                {uapi::kEthtoolAChannelsOtherCount, &c.other, "other-count"},
                                {uapi::kEthtoolAChannelsCombinedCount, &c.combined, "combined"},
                                {uapi::kEthtoolAChannelsRxMax, &c.rx_max, "rx-max"},
                                {uapi::kEthtoolAChannelsTxMax, &c.tx_max, "tx-max"},
                                {uapi::kEthtoolAChannelsOtherMax, &c.other_max, "other-max"},
                                {uapi::kEthtoolAChannelsCombinedMax, &c.combined_max, "combined-max"}}));
  return c;
}

Result<FeaturesInfo> parse_features(std::span<const std::byte> reply) {
  REMORA_ASSIGN_OR_RETURN(const nl::AttrTable t,
                          nl::reply_attrs(reply, uapi::kEthtoolMsgFeaturesGetReply, kFeaturesMaxAttr, "features-get"));
  FeaturesInfo info;
  REMORA_RETURN_IF_ERROR(merge_bitset(t[uapi::kEthtoolAFeaturesHw], &FeatureState::changeable, &info, "hw"));
  REMORA_RETURN_IF_ERROR(merge_bitset(t[uapi::kEthtoolAFeaturesActive], &FeatureState::active, &info, "active"));
  return info;
}

// ---- EthtoolClient ----

Result<EthtoolClient> EthtoolClient::open() {
  REMORA_ASSIGN_OR_RETURN(nl::Socket socket, nl::Socket::open());
  REMORA_ASSIGN_OR_RETURN(nl::FamilyInfo family, socket.resolve(uapi::kEthtoolFamilyName));
  return EthtoolClient(std::move(socket), std::move(family));
}

template <typename T, typename Parse>
Result<T> EthtoolClient::get(nl::Message req, Parse parse, std::string_view what, KernelError* refusal) {
  std::optional<T> out;
  REMORA_RETURN_IF_ERROR(socket_.transact(
      req,
      [&](std::span<const std::byte> reply) -> Status {
        REMORA_ASSIGN_OR_RETURN(out, parse(reply));
        return Status::ok();
      },
      what, refusal));
  if (!out) return Status(StatusCode::kProtocol, std::string(what) + ": acknowledged without a reply");
  return std::move(*out);
}

Result<RingsInfo> EthtoolClient::rings(uint32_t ifindex, KernelError* refusal) {
  return get<RingsInfo>(build_rings_get(family_.id, socket_.next_seq(), ifindex), parse_rings,
                        fmt::format("ethtool rings-get ifindex {}", ifindex), refusal);
}

Result<ChannelsInfo> EthtoolClient::channels(uint32_t ifindex, KernelError* refusal) {
  return get<ChannelsInfo>(build_channels_get(family_.id, socket_.next_seq(), ifindex), parse_channels,
                           fmt::format("ethtool channels-get ifindex {}", ifindex), refusal);
}

Result<FeaturesInfo> EthtoolClient::features(uint32_t ifindex, KernelError* refusal) {
  return get<FeaturesInfo>(build_features_get(family_.id, socket_.next_seq(), ifindex), parse_features,
                           fmt::format("ethtool features-get ifindex {}", ifindex), refusal);
}

Status EthtoolClient::probe_tcp_data_split_settable(uint32_t ifindex, uint8_t current, KernelError* refusal) {
  return socket_.transact(
      build_rings_set_tcp_data_split(family_.id, socket_.next_seq(), ifindex, current),
      [](std::span<const std::byte>) { return Status::ok(); },
      fmt::format("ethtool rings-set tcp-data-split={} (its current value) on ifindex {}", current, ifindex), refusal);
}

Status EthtoolClient::set_tcp_data_split(uint32_t ifindex, uint8_t value, KernelError* refusal) {
  return socket_.transact(
      build_rings_set_tcp_data_split(family_.id, socket_.next_seq(), ifindex, value),
      [](std::span<const std::byte>) { return Status::ok(); },
      fmt::format("ethtool rings-set tcp-data-split={} on ifindex {}", value, ifindex), refusal);
}

Status EthtoolClient::set_hds_thresh(uint32_t ifindex, uint32_t value, KernelError* refusal) {
  return socket_.transact(
      build_rings_set_hds_thresh(family_.id, socket_.next_seq(), ifindex, value),
      [](std::span<const std::byte>) { return Status::ok(); },
      fmt::format("ethtool rings-set hds-thresh={} on ifindex {}", value, ifindex), refusal);
}

// ---- Driver name ----

Result<std::string> driver_name(const std::string& ifname) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ || ifname.find('/') != std::string::npos) {
    return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not an interface name", ifname));
  }
  std::error_code ec;
  const auto link = std::filesystem::read_symlink("/sys/class/net/" + ifname + "/device/driver", ec);
  if (!ec && !link.filename().empty()) return link.filename().string();

  net::Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return net::errno_status(errno, "socket for SIOCETHTOOL");
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  ifreq req{};
  std::memcpy(req.ifr_name, ifname.data(), ifname.size());
  req.ifr_data = static_cast<char*>(static_cast<void*>(&info));
  if (::ioctl(fd.get(), SIOCETHTOOL, &req) != 0) {
    const int err = errno;
    return Status(
        err == EOPNOTSUPP ? StatusCode::kUnsupported : StatusCode::kInvalidArgument,
        fmt::format("{}: no device driver in sysfs, and SIOCETHTOOL GDRVINFO answered {}", ifname, errno_text(err)));
  }
  info.driver[sizeof info.driver - 1] = '\0';
  return std::string(info.driver);
}

}  // namespace remora::zerocopy
