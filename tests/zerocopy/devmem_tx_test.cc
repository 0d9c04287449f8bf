// Tests of zerocopy/devmem_tx.cc: the devmem TX control message byte for byte; real
// MSG_ZEROCOPY sends of host memory over loopback whose completions, read from the
// error queue, release exactly the sends made (the same parsing and bookkeeping a
// devmem send's completions go through); the tracker's wrap-around and its refusal of
// ranges naming sends never made; and a devmem sendmsg on an ordinary loopback socket,
// which this kernel refuses with EINVAL (no such binding).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>

#include <cstring>
#include <vector>

#include "net/address.h"
#include "net/socket.h"
#include "zerocopy/devmem_tx.h"
#include "zerocopy/uapi.h"
#include "zerocopy/zc_test_util.h"

namespace remora::zerocopy {
namespace {

using test::tcp_pair;

TEST(DevmemTx, TheControlMessageIsTheKernelsLayoutByteForByte) {
  alignas(cmsghdr) std::byte control[kDevmemTxControlBytes];
  std::memset(control, 0xAB, sizeof control);
  build_devmem_tx_control(0x01020304u, control);
  static_assert(kDevmemTxControlBytes == 24);  // x86_64/arm64: a 16-byte header, 4 bytes, 4 of padding
  const uint64_t len = 20;                      // CMSG_LEN(4)
  const int level = SOL_SOCKET, type = 79;      // SCM_DEVMEM_DMABUF
  std::vector<std::byte> want(24, std::byte{0});
  std::memcpy(want.data(), &len, 8);
  std::memcpy(want.data() + 8, &level, 4);
  std::memcpy(want.data() + 12, &type, 4);
  const uint32_t id = 0x01020304u;
  std::memcpy(want.data() + 16, &id, 4);
  EXPECT_EQ(std::memcmp(control, want.data(), 24), 0);
}

TEST(DevmemTx, ADevmemSendOnAnOrdinarySocketIsRefusedWithEinval) {
  auto [client, server] = tcp_pair();
  ASSERT_TRUE(enable_zerocopy(client.get()).is_ok());
  const net::IoResult r = send_devmem(client.get(), 1, 0, 4096);
  ASSERT_TRUE(r.error());
  EXPECT_EQ(r.err, EINVAL);  // no dmabuf bound for transmit as id 1 on lo
}

TEST(DevmemTx, LoopbackZerocopySendsCompleteThroughTheErrorQueueInOrder) {
  auto [client, server] = tcp_pair();
  ASSERT_TRUE(enable_zerocopy(client.get()).is_ok());
  ZerocopyTracker tracker;
  std::vector<char> payload(32 * 1024, 'z');
  constexpr int kSends = 6;
  for (int i = 0; i < kSends; ++i) {
    const net::IoResult r = send_zerocopy(client.get(), payload.data(), payload.size());
    ASSERT_TRUE(r.moved()) << r.err;
    tracker.sent(100 + static_cast<uint64_t>(i));
    // Keep the receive side drained so that every send goes in whole.
    std::vector<char> sink(payload.size());
    for (size_t got = 0; got < r.bytes;) {
      pollfd p{server.get(), POLLIN, 0};
      ASSERT_EQ(::poll(&p, 1, 10000), 1);
      const ssize_t n = ::recv(server.get(), sink.data(), sink.size(), MSG_DONTWAIT);
      ASSERT_GT(n, 0);
      got += static_cast<size_t>(n);
    }
  }
  std::vector<uint64_t> released;
  for (int round = 0; round < 100 && tracker.in_flight() > 0; ++round) {
    pollfd p{client.get(), 0, 0};  // POLLERR is always reported
    ASSERT_GE(::poll(&p, 1, 10000), 1);
    ASSERT_TRUE(tracker.drain(client.get(), [&](uint64_t c) { released.push_back(c); }).is_ok());
  }
  EXPECT_EQ(tracker.in_flight(), 0u);
  EXPECT_EQ(released, (std::vector<uint64_t>{100, 101, 102, 103, 104, 105}));
  EXPECT_GE(tracker.completions(), 1u);
  EXPECT_EQ(tracker.copied(), tracker.completions());  // loopback always copies
}

TEST(DevmemTx, TheTrackerWrapsAndRefusesRangesOfSendsNeverMade) {
  ZerocopyTracker t(0xFFFFFFFEu);  // sequence numbers FFFFFFFE, FFFFFFFF, 0, 1, 2
  for (uint64_t i = 0; i < 5; ++i) t.sent(i);
  std::vector<uint64_t> got;
  ASSERT_TRUE(t.complete({.first = 0xFFFFFFFEu, .last = 1}, [&](uint64_t c) { got.push_back(c); }).is_ok());
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(t.in_flight(), 1u);
  const Status bad = t.complete({.first = 2, .last = 6}, [&](uint64_t c) { got.push_back(c); });
  EXPECT_EQ(bad.code(), StatusCode::kProtocol);
  EXPECT_NE(bad.message().find("1 of them in flight"), std::string::npos) << bad.to_string();
  EXPECT_EQ(got.back(), 4u);  // the one that was in flight is released all the same
  EXPECT_EQ(t.in_flight(), 0u);
}

TEST(DevmemTx, ACompletionWithAnErrnoIsAnErrorAndOtherMessagesAreSkipped) {
  alignas(cmsghdr) std::byte control[2 * CMSG_SPACE(sizeof(sock_extended_err))] = {};
  auto put = [&](size_t at, int level, int type, uint8_t origin, uint32_t err) {
    cmsghdr h{};
    h.cmsg_len = CMSG_LEN(sizeof(sock_extended_err));
    h.cmsg_level = level;
    h.cmsg_type = type;
    sock_extended_err ee{};
    ee.ee_origin = origin;
    ee.ee_errno = err;
    ee.ee_info = 3;
    ee.ee_data = 4;
    std::memcpy(control + at, &h, sizeof h);
    std::memcpy(control + at + CMSG_LEN(0), &ee, sizeof ee);
  };
  put(0, SOL_IP, IP_RECVERR, SO_EE_ORIGIN_TIMESTAMPING, 0);  // not ours: skipped
  put(CMSG_SPACE(sizeof(sock_extended_err)), SOL_IPV6, IPV6_RECVERR, SO_EE_ORIGIN_ZEROCOPY, 0);
  msghdr msg{};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  auto c = parse_zerocopy_completion(msg);
  ASSERT_TRUE(c.is_ok());
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->first, 3u);
  EXPECT_EQ((*c)->last, 4u);
  put(CMSG_SPACE(sizeof(sock_extended_err)), SOL_IP, IP_RECVERR, SO_EE_ORIGIN_ZEROCOPY, ENOBUFS);
  c = parse_zerocopy_completion(msg);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("3..4"), std::string::npos);
}

}  // namespace
}  // namespace remora::zerocopy
