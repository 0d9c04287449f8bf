// zerocopy/netdev_nl: the netdev family's requests byte for byte against the uAPI layout
// (dev-get, the queue-get dump, bind-rx with its nested queue list, bind-tx), its replies
// parsed from synthetic bytes (malformed ones refused), and the real kernel: dev-get and
// queue-get of lo, and bind-rx / bind-tx on lo with a memfd (no dmabuf exporter here),
// which the kernel must refuse, and which must come back as a clear Status with the
// kernel's errno and message. (The same on a veth pair in a private network namespace:
// tests/integration/devmem_netns_test.cc.)
#include "zerocopy/netdev_nl.h"

#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <net/if.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <vector>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

using test::Bytes;

constexpr uint16_t kFamily = 27;  // any id: the builders take it from the caller

std::vector<std::byte> as_vector(std::span<const std::byte> s) { return {s.begin(), s.end()}; }

Bytes request(uint8_t cmd, uint16_t flags, uint32_t seq) {
  Bytes b;
  b.u32(0).u16(kFamily).u16(static_cast<uint16_t>(NLM_F_REQUEST | flags)).u32(seq).u32(0);
  b.u8(cmd).u8(1).u16(0);
  return b;
}
Bytes reply(uint8_t cmd) {
  Bytes b;
  b.u32(0).u16(kFamily).u16(0).u32(9).u32(4321);
  b.u8(cmd).u8(1).u16(0);
  return b;
}
std::vector<std::byte> finish(Bytes b) {
  b.set_u32(0, static_cast<uint32_t>(b.size()));
  return b.bytes();
}

TEST(NetdevNl, DevGetRequestBytes) {
  Bytes want = request(uapi::kNetdevCmdDevGet, NLM_F_ACK, 3);
  want.attr_u32(uapi::kNetdevADevIfindex, 4);
  const auto expected = finish(want);
  ASSERT_EQ(expected.size(), 28u);
  EXPECT_EQ(as_vector(build_dev_get(kFamily, 3, 4).bytes()), expected);
}

TEST(NetdevNl, QueueDumpRequestBytes) {
  Bytes want = request(uapi::kNetdevCmdQueueGet, NLM_F_DUMP, 8);
  want.attr_u32(uapi::kNetdevAQueueIfindex, 2);
  const auto got = as_vector(build_queue_dump(kFamily, 8, 2).bytes());
  EXPECT_EQ(got, finish(want));
  EXPECT_EQ(static_cast<uint16_t>(got[6]) | static_cast<uint16_t>(got[7]) << 8, 0x301);  // REQUEST | DUMP
}

TEST(NetdevNl, BindRxRequestBytesWithNestedQueues) {
  Bytes want = request(uapi::kNetdevCmdBindRx, NLM_F_ACK, 11);
  want.attr_u32(uapi::kNetdevADmabufIfindex, 4);
  want.attr_u32(uapi::kNetdevADmabufFd, 9);
  for (uint32_t q : {3u, 5u}) {
    want.attr(uapi::kNetdevADmabufQueues | NLA_F_NESTED, 16);
    want.attr_u32(uapi::kNetdevAQueueId, q).attr_u32(uapi::kNetdevAQueueType, uapi::kNetdevQueueTypeRx);
  }
  const auto expected = finish(want);
  ASSERT_EQ(expected.size(), 76u);
  const uint32_t queues[] = {3, 5};
  EXPECT_EQ(as_vector(build_bind_rx(kFamily, 11, 4, 9, queues).bytes()), expected);
}

TEST(NetdevNl, BindRxWithManyQueuesFitsItsBuffer) {
  std::vector<uint32_t> queues(512);
  for (uint32_t i = 0; i < queues.size(); ++i) queues[i] = i;
  const auto m = build_bind_rx(kFamily, 1, 4, 9, queues);
  EXPECT_EQ(m.bytes().size(), 16u + 4 + 8 + 8 + 512 * 20);
}

TEST(NetdevNl, BindTxRequestBytes) {
  Bytes want = request(uapi::kNetdevCmdBindTx, NLM_F_ACK, 12);
  want.attr_u32(uapi::kNetdevADmabufIfindex, 4).attr_u32(uapi::kNetdevADmabufFd, 9);
  EXPECT_EQ(as_vector(build_bind_tx(kFamily, 12, 4, 9).bytes()), finish(want));
}

TEST(NetdevNl, BindingIdReply) {
  Bytes ok = reply(uapi::kNetdevCmdBindRx);
  ok.attr_u32(uapi::kNetdevADmabufId, 3);
  auto id = parse_binding_id(finish(ok));
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  EXPECT_EQ(*id, 3u);

  EXPECT_EQ(parse_binding_id(finish(reply(uapi::kNetdevCmdBindRx))).status().code(), StatusCode::kProtocol);
  Bytes zero = reply(uapi::kNetdevCmdBindTx);
  zero.attr_u32(uapi::kNetdevADmabufId, 0);
  EXPECT_NE(parse_binding_id(finish(zero)).status().message().find("binding id 0"), std::string::npos);
  Bytes wide = reply(uapi::kNetdevCmdBindTx);
  wide.attr(uapi::kNetdevADmabufId, 8).u64(3);
  EXPECT_EQ(parse_binding_id(finish(wide)).status().code(), StatusCode::kProtocol);
}

TEST(NetdevNl, QueueReply) {
  Bytes b = reply(uapi::kNetdevCmdQueueGet);
  b.attr_u32(uapi::kNetdevAQueueId, 15).attr_u32(uapi::kNetdevAQueueIfindex, 4);
  b.attr_u32(uapi::kNetdevAQueueType, uapi::kNetdevQueueTypeRx).attr_u32(uapi::kNetdevAQueueNapiId, 8193);
  b.attr_u32(uapi::kNetdevAQueueDmabuf, 2);
  b.attr(uapi::kNetdevAQueueIoUring | NLA_F_NESTED, 0);
  b.attr_u32(40, 1);  // from a newer kernel: skipped
  auto q = parse_queue(finish(b));
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(q->id, 15u);
  EXPECT_EQ(q->ifindex, 4u);
  EXPECT_TRUE(q->is_rx());
  EXPECT_EQ(q->napi_id, 8193u);
  EXPECT_EQ(q->dmabuf, 2u);
  EXPECT_TRUE(q->io_uring);
  EXPECT_FALSE(q->xsk);

  Bytes tx = reply(uapi::kNetdevCmdQueueGet);
  tx.attr_u32(uapi::kNetdevAQueueId, 0).attr_u32(uapi::kNetdevAQueueIfindex, 1);
  tx.attr_u32(uapi::kNetdevAQueueType, uapi::kNetdevQueueTypeTx);
  auto t = parse_queue(finish(tx));
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(t->is_rx());
  EXPECT_FALSE(t->napi_id.has_value());
  EXPECT_FALSE(t->dmabuf.has_value());

  Bytes bad = reply(uapi::kNetdevCmdQueueGet);
  bad.attr_u32(uapi::kNetdevAQueueId, 0).attr_u32(uapi::kNetdevAQueueIfindex, 1).attr_u32(uapi::kNetdevAQueueType, 7);
  EXPECT_NE(parse_queue(finish(bad)).status().message().find("unknown queue type 7"), std::string::npos);
  Bytes no_id = reply(uapi::kNetdevCmdQueueGet);
  no_id.attr_u32(uapi::kNetdevAQueueIfindex, 1);
  EXPECT_EQ(parse_queue(finish(no_id)).status().code(), StatusCode::kProtocol);
  Bytes wrong_cmd = reply(uapi::kNetdevCmdDevGet);
  wrong_cmd.attr_u32(uapi::kNetdevAQueueId, 0);
  EXPECT_NE(parse_queue(finish(wrong_cmd)).status().message().find("reply command 1, expected 10"), std::string::npos);
}

TEST(NetdevNl, DevReply) {
  Bytes b = reply(uapi::kNetdevCmdDevGet);
  b.attr_u32(uapi::kNetdevADevIfindex, 4);
  b.attr(uapi::kNetdevADevXdpFeatures, 8).u64(0x7f);
  b.attr_u32(uapi::kNetdevADevXdpZcMaxSegs, 1);
  b.attr(uapi::kNetdevADevXdpRxMetadataFeatures, 8).u64(3);
  auto d = parse_dev(finish(b));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->ifindex, 4u);
  EXPECT_EQ(d->xdp_features, 0x7fu);
  EXPECT_EQ(d->xdp_zc_max_segs, 1u);
  EXPECT_EQ(d->xdp_rx_metadata_features, 3u);
  EXPECT_EQ(d->xsk_features, 0u);
}

// ---- the real kernel ----

/// A memfd: the best descriptor this host has (it has no dmabuf exporter).
net::Fd memfd() {
  net::Fd fd(::memfd_create("remora-netdev-test", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::ftruncate(fd.get(), 1 << 16), 0);
  return fd;
}

TEST(NetdevKernel, DevGetAndQueuesOfLoopback) {
  auto client = NetdevClient::open();
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  const uint32_t lo = ::if_nametoindex("lo");
  ASSERT_NE(lo, 0u);
  auto dev = client->dev_get(lo);
  ASSERT_TRUE(dev.is_ok()) << dev.status().to_string();
  EXPECT_EQ(dev->ifindex, lo);
  auto queues = client->queues(lo);
  ASSERT_TRUE(queues.is_ok()) << queues.status().to_string();
  ASSERT_FALSE(queues->empty());
  size_t rx = 0;
  for (const auto& q : *queues) {
    EXPECT_EQ(q.ifindex, lo);
    rx += q.is_rx();
  }
  EXPECT_GE(rx, 1u);
  // The client stays usable after a refusal: dev-get of an interface that does not exist.
  KernelError refusal;
  auto none = client->dev_get(0x7ffffff0u, &refusal);
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(refusal.err, ENODEV) << none.status().to_string();
  EXPECT_TRUE(client->dev_get(lo).is_ok());
}

TEST(NetdevKernel, BindRxOnLoopbackIsRefusedWithAClearReason) {
  net::Fd fd = memfd();
  const uint32_t lo = ::if_nametoindex("lo");
  const uint32_t queues[] = {0};
  KernelError refusal;
  auto b = DevmemBinding::bind_rx(lo, fd.get(), queues, &refusal);
  ASSERT_FALSE(b.is_ok()) << "the kernel bound a memfd to lo's RX queue";
  std::cout << "[ kernel   ] bind-rx on lo: " << b.status().to_string() << "\n";
  if (::geteuid() != 0) {
    EXPECT_EQ(refusal.err, EPERM);
    EXPECT_EQ(b.status().code(), StatusCode::kAccessDenied);
    return;
  }
  // Linux 6.18: lo has no queue-management ops, so the kernel stops there (and points at
  // the ifindex attribute) before it looks at the fd.
  EXPECT_EQ(refusal.err, EOPNOTSUPP);
  EXPECT_EQ(b.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(refusal.bad_attr_type, uapi::kNetdevADmabufIfindex);
  EXPECT_NE(b.status().message().find("devmem bind-rx of fd"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("EOPNOTSUPP"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("cannot do devmem RX"), std::string::npos) << b.status().message();
}

TEST(NetdevKernel, BindTxOnLoopbackIsRefusedWithTheKernelsMessage) {
  net::Fd fd = memfd();
  KernelError refusal;
  auto b = DevmemBinding::bind_tx(::if_nametoindex("lo"), fd.get(), &refusal);
  ASSERT_FALSE(b.is_ok()) << "the kernel bound a memfd for TX on lo";
  std::cout << "[ kernel   ] bind-tx on lo: " << b.status().to_string() << "\n";
  EXPECT_EQ(refusal.err, EOPNOTSUPP);
  EXPECT_EQ(refusal.message, "Driver does not support netmem TX");
  EXPECT_EQ(b.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(b.status().message().find("no netmem TX"), std::string::npos) << b.status().message();
}

TEST(NetdevKernel, BindOfAnInterfaceThatDoesNotExistIsEnodev) {
  net::Fd fd = memfd();
  KernelError refusal;
  auto b = DevmemBinding::bind_tx(0x7ffffff0u, fd.get(), &refusal);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(refusal.err, ENODEV);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("no such interface"), std::string::npos) << b.status().message();
}

TEST(NetdevKernel, BadArgumentsAreRefusedBeforeTheKernel) {
  const uint32_t none[] = {0};
  EXPECT_EQ(DevmemBinding::bind_rx(1, 3, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DevmemBinding::bind_rx(1, -1, none).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace remora::zerocopy
