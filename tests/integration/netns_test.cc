// The random exchange between two remora_test_peer processes in two network
// namespaces joined by a veth pair (MTU 1500, a real link rather than loopback).
// The namespaces live only as long as the test (RAII), also when it fails.
#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/netns.h"

namespace remora::itest {
namespace {

TEST(Netns, RandomExchangeOverVeth) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  const size_t count = scaled<size_t>(1500, 300);
  const std::vector<std::string> common = {"--scenario=exchange", "--seed=4711", "--count=" + std::to_string(count),
                                           "--max-size=2097152", "--expect-streams=2",
                                           // Another network namespace is another host: no same-host pulls.
                                           "--expect-same-host=no"};
  const std::vector<std::string> env = {"REMORA_STREAMS=2"};

  std::vector<std::string> a_args = common;
  a_args.insert(a_args.end(), {"--role=listen", "--address=" + net.addr_a() + ":0", "--side=0", "--close=follow"});
  auto a = spawn_peer(a_args, env, net.exec_prefix(net.ns_a()));
  ASSERT_TRUE(a->ok());
  const uint16_t port = read_port(*a);
  ASSERT_NE(port, 0);

  std::vector<std::string> b_args = common;
  b_args.insert(b_args.end(), {"--role=connect", "--address=" + net.addr_a() + ":" + std::to_string(port), "--side=1",
                               "--close=initiate"});
  auto b = spawn_peer(b_args, env, net.exec_prefix(net.ns_b()));
  ASSERT_TRUE(b->ok());

  expect_peer_success(*b);
  expect_peer_success(*a);
}

}  // namespace
}  // namespace remora::itest
