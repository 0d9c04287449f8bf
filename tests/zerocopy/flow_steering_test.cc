// flow_steering_test.cc — the SIOCETHTOOL requests of `remora rxq`, byte for byte at the
// kernel's offsets (struct ethtool_rxnfc is 192 bytes on every 64-bit ABI: fs at 16,
// fs.h_u at 20, fs.m_u at 92, ring_cookie at 168, location at 176); the RSS table
// `ethtool -X equal` sets; and the real ioctls on this host's loopback, refused by the
// kernel with the errno (lo has no RX rings, RSS or ntuple rules) and the hint to match.
#include "zerocopy/flow_steering.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

std::vector<uint8_t> bytes_of(const ethtool_rxnfc& n) {
  std::vector<uint8_t> b(sizeof n);
  std::memcpy(b.data(), &n, sizeof n);
  return b;
}

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }

TEST(FlowSteering, RxnfcLayoutIsTheKernels) {
  static_assert(sizeof(ethtool_rxnfc) == 192);
  static_assert(offsetof(ethtool_rxnfc, fs) == 16 && offsetof(ethtool_rxnfc, fs.h_u) == 20);
  static_assert(offsetof(ethtool_rxnfc, fs.m_u) == 92 && offsetof(ethtool_rxnfc, fs.ring_cookie) == 168);
  static_assert(offsetof(ethtool_rxnfc, fs.location) == 176);
}

TEST(FlowSteering, Tcp4RuleOnPortOnlyBytes) {
  TcpFlow flow;
  flow.dst_port = 5000;  // 0x1388, big-endian on the wire
  std::vector<uint8_t> want(192, 0);
  put32(want, 0, 0x32);  // ETHTOOL_SRXCLSRLINS
  put32(want, 16, 1);    // TCP_V4_FLOW
  want[20 + 10] = 0x13, want[20 + 11] = 0x88;  // h_u.tcp_ip4_spec.pdst
  want[92 + 10] = 0xff, want[92 + 11] = 0xff;  // m_u: match on pdst alone
  want[168] = 7;                                // ring_cookie: queue 7 (u64)
  put32(want, 176, 0xffffffff);                 // location RX_CLS_LOC_ANY
  EXPECT_EQ(bytes_of(build_rule_insert(flow, 7)), want);
}

TEST(FlowSteering, Tcp4FiveTupleBytes) {
  TcpFlow flow;
  flow.dst_port = 5000;
  flow.src_port = 40000;  // 0x9c40
  flow.dst_addr = {10, 0, 0, 2};
  flow.src_addr = {10, 0, 0, 1};
  std::vector<uint8_t> want(192, 0);
  put32(want, 0, 0x32);
  put32(want, 16, 1);
  const uint8_t h[] = {10, 0, 0, 1, 10, 0, 0, 2, 0x9c, 0x40, 0x13, 0x88};  // ip4src, ip4dst, psrc, pdst
  std::memcpy(&want[20], h, sizeof h);
  std::memset(&want[92], 0xff, 12);
  want[168] = 15;
  put32(want, 176, 0xffffffff);
  EXPECT_EQ(bytes_of(build_rule_insert(flow, 15)), want);
  EXPECT_EQ(flow.describe(), "flow-type tcp4 dst-port 5000 src-port 40000 dst-ip 10.0.0.2 src-ip 10.0.0.1");
}

TEST(FlowSteering, Tcp6RuleBytes) {
  TcpFlow flow;
  flow.ipv6 = true;
  flow.dst_port = 443;  // 0x01bb
  ASSERT_EQ(inet_pton(AF_INET6, "fd00::2", flow.dst_addr.data()), 1);
  std::vector<uint8_t> want(192, 0);
  put32(want, 0, 0x32);
  put32(want, 16, 5);  // TCP_V6_FLOW
  std::memcpy(&want[20 + 16], flow.dst_addr.data(), 16);  // ip6dst
  want[20 + 34] = 0x01, want[20 + 35] = 0xbb;             // pdst
  std::memset(&want[92 + 16], 0xff, 16);
  want[92 + 34] = 0xff, want[92 + 35] = 0xff;
  want[168] = 3;
  put32(want, 176, 0xffffffff);
  EXPECT_EQ(bytes_of(build_rule_insert(flow, 3)), want);
  EXPECT_EQ(flow.describe(), "flow-type tcp6 dst-port 443 dst-ip fd00::2");
}

TEST(FlowSteering, RuleDeleteBytes) {
  std::vector<uint8_t> want(192, 0);
  put32(want, 0, 0x31);  // ETHTOOL_SRXCLSRLDEL
  put32(want, 176, 1023);
  EXPECT_EQ(bytes_of(build_rule_delete(1023)), want);
}

TEST(FlowSteering, EqualIndirectionKeepsTheLastQueuesOut) {
  EXPECT_EQ(equal_indirection(8, 3), (std::vector<uint32_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  const auto t = equal_indirection(128, 15);
  ASSERT_EQ(t.size(), 128u);
  for (uint32_t q : t) EXPECT_LT(q, 15u);
}

TEST(FlowSteering, LoopbackRefusesEveryRequestWithTheErrno) {
  auto s = FlowSteering::open("lo");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  KernelError ke;
  auto rings = s->rx_rings(&ke);
  ASSERT_FALSE(rings.is_ok());
  EXPECT_EQ(ke.err, EOPNOTSUPP);
  EXPECT_EQ(rings.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(rings.status().message().find("SIOCETHTOOL ETHTOOL_GRXRINGS (RX ring count) on lo: the kernel refused: "
                                          "EOPNOTSUPP"),
            std::string::npos)
      << rings.status().message();
  ke = {};
  EXPECT_FALSE(s->indirection(&ke).is_ok());
  EXPECT_EQ(ke.err, EOPNOTSUPP);
  TcpFlow flow;
  flow.dst_port = 5000;
  ke = {};
  auto rule = s->insert_rule(flow, 0, &ke);
  ASSERT_FALSE(rule.is_ok());
  EXPECT_NE(rule.status().message().find("flow-type tcp4 dst-port 5000 action 0"), std::string::npos);
  ke = {};
  EXPECT_FALSE(s->delete_rule(0, &ke).is_ok());
  EXPECT_NE(ke.err, 0);
  EXPECT_FALSE(FlowSteering::open("no/such").is_ok());
  EXPECT_FALSE(FlowSteering::open("").is_ok());
}

TEST(FlowSteering, HintsNameTheFix) {
  EXPECT_EQ(steering_hint(EPERM, "eth1", "x"), "run as root, or give the process CAP_NET_ADMIN");
  EXPECT_EQ(steering_hint(EOPNOTSUPP, "eth1", "x"), "");
}

}  // namespace
}  // namespace remora::zerocopy
