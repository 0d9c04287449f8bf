// zerocopy/ethtool_nl: the ethtool requests byte for byte (the header nest naming the
// interface, rings-set of tcp-data-split with OMIT_REPLY), rings / channels / features
// replies parsed from synthetic bytes (header split on, off and unreported; a verbose
// bitset in list and in mask form; a compact one refused), and the real kernel asked
// about every interface here: each answer is either a value or a refusal with its errno
// and a reason, never silence.
#include "zerocopy/ethtool_nl.h"

#include <linux/netlink.h>
#include <net/if.h>

#include <cerrno>
#include <iostream>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

using test::Bytes;

constexpr uint16_t kFamily = 21;

std::vector<std::byte> as_vector(std::span<const std::byte> s) { return {s.begin(), s.end()}; }
std::vector<std::byte> finish(Bytes b) {
  b.set_u32(0, static_cast<uint32_t>(b.size()));
  return b.bytes();
}
Bytes request(uint8_t cmd, uint32_t ifindex, std::optional<uint32_t> header_flags = std::nullopt) {
  Bytes b;
  b.u32(0).u16(kFamily).u16(NLM_F_REQUEST | NLM_F_ACK).u32(5).u32(0);
  b.u8(cmd).u8(1).u16(0);
  b.attr(1 | NLA_F_NESTED, header_flags ? 16 : 8).attr_u32(uapi::kEthtoolAHeaderDevIndex, ifindex);
  if (header_flags) b.attr_u32(uapi::kEthtoolAHeaderFlags, *header_flags);
  return b;
}
Bytes reply(uint8_t cmd) {
  Bytes b;
  b.u32(0).u16(kFamily).u16(0).u32(5).u32(99);
  b.u8(cmd).u8(1).u16(0);
  b.attr(1 | NLA_F_NESTED, 16)
      .attr_u32(uapi::kEthtoolAHeaderDevIndex, 4)
      .attr(uapi::kEthtoolAHeaderDevName, 4)
      .str("eth")
      .u8(0);
  return b;
}

TEST(EthtoolNl, GetRequestsNameTheInterfaceInTheHeaderNest) {
  EXPECT_EQ(as_vector(build_rings_get(kFamily, 5, 4).bytes()), finish(request(uapi::kEthtoolMsgRingsGet, 4)));
  EXPECT_EQ(as_vector(build_channels_get(kFamily, 5, 4).bytes()), finish(request(uapi::kEthtoolMsgChannelsGet, 4)));
  EXPECT_EQ(as_vector(build_features_get(kFamily, 5, 4).bytes()), finish(request(uapi::kEthtoolMsgFeaturesGet, 4)));
  EXPECT_EQ(build_rings_get(kFamily, 5, 4).bytes().size(), 32u);
}

TEST(EthtoolNl, RingsSetOfHeaderSplitBytes) {
  Bytes want = request(uapi::kEthtoolMsgRingsSet, 4, uapi::kEthtoolFlagOmitReply);
  want.attr(uapi::kEthtoolARingsTcpDataSplit, 1).u8(uapi::kEthtoolTcpDataSplitDisabled).zeros(3);
  const auto expected = finish(want);
  ASSERT_EQ(expected.size(), 48u);
  EXPECT_EQ(as_vector(build_rings_set_tcp_data_split(kFamily, 5, 4, uapi::kEthtoolTcpDataSplitDisabled).bytes()),
            expected);
}

TEST(EthtoolNl, RingsSetOfHdsThreshBytes) {
  Bytes want = request(uapi::kEthtoolMsgRingsSet, 4, uapi::kEthtoolFlagOmitReply);
  want.attr_u32(uapi::kEthtoolARingsHdsThresh, 0x01020304);
  const auto expected = finish(want);
  ASSERT_EQ(expected.size(), 48u);
  EXPECT_EQ(as_vector(build_rings_set_hds_thresh(kFamily, 5, 4, 0x01020304).bytes()), expected);
}

TEST(EthtoolNl, RingsReplyWithHeaderSplitOnOffAndUnreported) {
  Bytes on = reply(uapi::kEthtoolMsgRingsGetReply);
  on.attr_u32(uapi::kEthtoolARingsRxMax, 4096).attr_u32(uapi::kEthtoolARingsRx, 1024);
  on.attr_u32(uapi::kEthtoolARingsTxMax, 4096).attr_u32(uapi::kEthtoolARingsTx, 512);
  on.attr(uapi::kEthtoolARingsTcpDataSplit, 1).u8(uapi::kEthtoolTcpDataSplitEnabled).zeros(3);
  on.attr(13, 1).u8(0).zeros(3);  // TX_PUSH, not read
  on.attr_u32(uapi::kEthtoolARingsHdsThresh, 0).attr_u32(uapi::kEthtoolARingsHdsThreshMax, 1024);
  auto r = parse_rings(finish(on));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->rx, 1024u);
  EXPECT_EQ(r->rx_max, 4096u);
  EXPECT_EQ(r->tx, 512u);
  EXPECT_EQ(r->tcp_data_split, uapi::kEthtoolTcpDataSplitEnabled);
  EXPECT_EQ(r->hds_thresh, 0u);
  EXPECT_EQ(r->hds_thresh_max, 1024u);

  Bytes off = reply(uapi::kEthtoolMsgRingsGetReply);
  off.attr(uapi::kEthtoolARingsTcpDataSplit, 1).u8(uapi::kEthtoolTcpDataSplitDisabled).zeros(3);
  EXPECT_EQ(parse_rings(finish(off))->tcp_data_split, uapi::kEthtoolTcpDataSplitDisabled);

  Bytes silent = reply(uapi::kEthtoolMsgRingsGetReply);
  silent.attr_u32(uapi::kEthtoolARingsRxMax, 256).attr_u32(uapi::kEthtoolARingsRx, 256);
  auto s = parse_rings(finish(silent));
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->tcp_data_split, uapi::kEthtoolTcpDataSplitUnknown);
  EXPECT_FALSE(s->hds_thresh.has_value());

  Bytes bogus = reply(uapi::kEthtoolMsgRingsGetReply);
  bogus.attr(uapi::kEthtoolARingsTcpDataSplit, 1).u8(3).zeros(3);
  EXPECT_EQ(parse_rings(finish(bogus)).status().code(), StatusCode::kProtocol);
  // The request's number is not the reply's: a reply with cmd 15 is not a rings reply.
  EXPECT_EQ(parse_rings(finish(reply(uapi::kEthtoolMsgRingsGet))).status().code(), StatusCode::kProtocol);
}

TEST(EthtoolNl, ChannelsReply) {
  Bytes b = reply(uapi::kEthtoolMsgChannelsGetReply);
  b.attr_u32(uapi::kEthtoolAChannelsCombinedMax, 16).attr_u32(uapi::kEthtoolAChannelsCombinedCount, 8);
  b.attr_u32(uapi::kEthtoolAChannelsOtherMax, 1).attr_u32(uapi::kEthtoolAChannelsOtherCount, 1);
  auto c = parse_channels(finish(b));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->combined, 8u);
  EXPECT_EQ(c->combined_max, 16u);
  EXPECT_EQ(c->other, 1u);
  EXPECT_FALSE(c->rx.has_value());
  EXPECT_FALSE(c->tx_max.has_value());
}

/// One verbose bitset: {[NOMASK], SIZE, BITS {BIT {INDEX, NAME, [VALUE]}...}}. In a list
/// (NOMASK) the bits named are the set ones; otherwise VALUE marks them.
struct Bit {
  uint32_t index;
  std::string name;
  bool value;
};
void bitset(Bytes& b, uint16_t type, bool list, const std::vector<Bit>& bits) {
  const size_t set = b.open(type | NLA_F_NESTED);
  if (list) b.attr(uapi::kEthtoolABitsetNomask, 0);
  b.attr_u32(uapi::kEthtoolABitsetSize, 64);
  const size_t all = b.open(uapi::kEthtoolABitsetBits | NLA_F_NESTED);
  for (const Bit& bit : bits) {
    const size_t one = b.open(uapi::kEthtoolABitsetBitsBit | NLA_F_NESTED);
    b.attr_u32(uapi::kEthtoolABitsetBitIndex, bit.index);
    const auto len = static_cast<uint16_t>(bit.name.size() + 1);
    b.attr(uapi::kEthtoolABitsetBitName, len).str(bit.name).u8(0).zeros((4 - len % 4) % 4);
    if (bit.value) b.attr(uapi::kEthtoolABitsetBitValue, 0);
    b.close(one);
  }
  b.close(all);
  b.close(set);
}

TEST(EthtoolNl, FeaturesReplyInListAndMaskForm) {
  Bytes b = reply(uapi::kEthtoolMsgFeaturesGetReply);
  bitset(b, uapi::kEthtoolAFeaturesHw, true, {{36, "rx-ntuple-filter", false}, {1, "tx-checksum-ipv4", false}});
  bitset(b, uapi::kEthtoolAFeaturesActive, false,
         {{36, "rx-ntuple-filter", false}, {1, "tx-checksum-ipv4", true}, {31, "loopback", true}});
  auto f = parse_features(finish(b));
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto ntuple = f->find(uapi::kNtupleFeatureName);
  ASSERT_TRUE(ntuple.has_value());
  EXPECT_TRUE(ntuple->changeable);
  EXPECT_FALSE(ntuple->active);
  auto csum = f->find("tx-checksum-ipv4");
  ASSERT_TRUE(csum.has_value());
  EXPECT_TRUE(csum->changeable && csum->active);
  auto lo = f->find("loopback");
  ASSERT_TRUE(lo.has_value());
  EXPECT_TRUE(lo->active);
  EXPECT_FALSE(lo->changeable);  // "[fixed]"
  EXPECT_FALSE(f->find("rx-gro-hw").has_value());
}

TEST(EthtoolNl, CompactBitsetsHaveNoNamesAndAreRefused) {
  Bytes b = reply(uapi::kEthtoolMsgFeaturesGetReply);
  b.attr(uapi::kEthtoolAFeaturesHw | NLA_F_NESTED, 8 + 12);
  b.attr_u32(uapi::kEthtoolABitsetSize, 64).attr(uapi::kEthtoolABitsetValue, 8).u64(0x10);
  auto f = parse_features(finish(b));
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("compact bitset"), std::string::npos) << f.status().message();
}

// ---- the real kernel, every interface of this namespace ----

std::vector<std::pair<std::string, uint32_t>> interfaces() {
  std::vector<std::pair<std::string, uint32_t>> out;
  std::unique_ptr<struct if_nameindex, decltype(&if_freenameindex)> list(::if_nameindex(), &if_freenameindex);
  for (const struct if_nameindex* i = list.get(); i != nullptr && i->if_index != 0; ++i) {
    out.emplace_back(i->if_name, i->if_index);
  }
  return out;
}

/// A refusal must say why: an errno from the kernel and a message naming the request.
template <typename T>
void expect_value_or_reason(const Result<T>& r, const KernelError& refusal, const std::string& what) {
  if (r.is_ok()) return;
  EXPECT_NE(refusal.err, 0) << what << ": failed without a kernel errno: " << r.status().to_string();
  EXPECT_NE(r.status().message().find("the kernel refused"), std::string::npos) << r.status().message();
  std::cout << "[ kernel   ] " << what << ": " << r.status().to_string() << "\n";
}

TEST(EthtoolKernel, EveryInterfaceAnswersOrSaysWhyNot) {
  auto client = EthtoolClient::open();
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  const auto ifs = interfaces();
  ASSERT_FALSE(ifs.empty());
  for (const auto& [name, index] : ifs) {
    SCOPED_TRACE(name);
    KernelError rk, ck, fk;
    auto rings = client->rings(index, &rk);
    expect_value_or_reason(rings, rk, name + " rings");
    auto channels = client->channels(index, &ck);
    expect_value_or_reason(channels, ck, name + " channels");
    auto features = client->features(index, &fk);
    ASSERT_TRUE(features.is_ok()) << features.status().to_string();  // every netdev has features
    EXPECT_TRUE(features->find(uapi::kNtupleFeatureName).has_value()) << "the kernel names every feature bit";
    if (rings) {
      KernelError sk;
      Status s = client->probe_tcp_data_split_settable(index, rings->tcp_data_split, &sk);
      if (!s) {
        EXPECT_NE(sk.err, 0) << s.to_string();
        std::cout << "[ kernel   ] " << name << " header split settable: " << s.to_string() << "\n";
      }
      // Nothing changed: the same answer as before.
      auto again = client->rings(index);
      ASSERT_TRUE(again.is_ok());
      EXPECT_EQ(again->tcp_data_split, rings->tcp_data_split);
    }
    auto driver = driver_name(name);
    if (driver) {
      EXPECT_FALSE(driver->empty());
    } else {
      EXPECT_NE(driver.status().message().find(name), std::string::npos) << driver.status().message();
    }
  }
}

TEST(EthtoolKernel, LoopbackHasNoRingsAndSaysSo) {
  auto client = EthtoolClient::open();
  ASSERT_TRUE(client.is_ok());
  KernelError refusal;
  auto rings = client->rings(::if_nametoindex("lo"), &refusal);
  ASSERT_FALSE(rings.is_ok());
  EXPECT_EQ(refusal.err, EOPNOTSUPP);
  EXPECT_EQ(rings.status().code(), StatusCode::kUnsupported);
  auto features = client->features(::if_nametoindex("lo"));
  ASSERT_TRUE(features.is_ok());
  auto ntuple = features->find(uapi::kNtupleFeatureName);
  ASSERT_TRUE(ntuple.has_value());
  EXPECT_FALSE(ntuple->changeable);  // "ntuple-filters: off [fixed]"
  EXPECT_FALSE(ntuple->active);
  auto driver = driver_name("lo");
  ASSERT_FALSE(driver.is_ok());
  EXPECT_NE(driver.status().message().find("no device driver in sysfs"), std::string::npos)
      << driver.status().message();
}

TEST(EthtoolKernel, DriverNameRefusesWhatIsNotAnInterfaceName) {
  EXPECT_EQ(driver_name("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(driver_name("../lo").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(driver_name("averyveryverylongname").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(driver_name("remora-none0").is_ok());
}

}  // namespace
}  // namespace remora::zerocopy
