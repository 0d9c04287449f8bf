// Tests of remora::recv_any (a receive from any of several endpoints): one server
// context with an endpoint to each of two or three client contexts, real sockets on
// loopback, messages across the eager and rendezvous sizes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "remora/remora.h"

namespace remora {
namespace {

using namespace std::chrono_literals;

/// A server context with one endpoint to each of `n` client contexts.
struct Star {
  std::unique_ptr<Context> server_ctx;
  std::unique_ptr<Listener> listener;
  std::vector<std::unique_ptr<Context>> client_ctx;
  std::vector<std::shared_ptr<Endpoint>> clients;    ///< client i's side
  std::vector<std::shared_ptr<Endpoint>> at_server;  ///< the server's side of client i
  std::vector<Endpoint*> list() const {
    std::vector<Endpoint*> v;
    for (const auto& e : at_server) v.push_back(e.get());
    return v;
  }
};

Star make_star(int n, ContextOptions opts = {}) {
  opts.ignore_env = true;
  Star s;
  s.server_ctx = Context::create(opts).value();
  s.listener = s.server_ctx->listen("127.0.0.1:0").value();
  for (int i = 0; i < n; ++i) {
    s.client_ctx.push_back(Context::create(opts).value());
    auto c = s.client_ctx.back()->connect("127.0.0.1:" + std::to_string(s.listener->port()), 10s);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    s.clients.push_back(c.value());
    auto a = s.listener->accept(10s);  // accepted in connect order: one at a time
    EXPECT_TRUE(a.is_ok()) << a.status().to_string();
    s.at_server.push_back(a.value());
  }
  return s;
}

/// `n` bytes naming their sender and sequence number, then a pattern of both.
std::vector<std::byte> message(size_t n, uint32_t sender, uint32_t seq) {
  std::vector<std::byte> v(std::max<size_t>(n, 8));
  std::memcpy(v.data(), &sender, 4);
  std::memcpy(v.data() + 4, &seq, 4);
  for (size_t i = 8; i < v.size(); ++i) v[i] = static_cast<std::byte>((i * 31 + sender * 7 + seq) & 0xFF);
  v.resize(std::max<size_t>(n, 8));
  return v;
}

constexpr Tag kTag{42};

TEST(RecvAny, TakesTheMessageThatArrivesLaterAndLeavesTheOtherEndpointsAlone) {
  Star s = make_star(2);
  std::vector<std::byte> buf(64);
  int matched = -7;
  Endpoint* eps[] = {s.at_server[0].get(), s.at_server[1].get()};
  Request r = recv_any(eps, buf, kTag, &matched);
  auto m1 = message(40, 1, 0);
  ASSERT_TRUE(s.clients[1]->send(m1, kTag).wait(10s).is_ok());
  ASSERT_TRUE(r.wait(10s).is_ok());
  EXPECT_EQ(matched, 1);
  ASSERT_EQ(r.bytes(), 40u);
  EXPECT_TRUE(std::equal(m1.begin(), m1.end(), buf.begin()));
  // The copy left posted on endpoint 0 takes nothing: a plain receive there gets the
  // next message, and the any-receive's buffer is untouched by it.
  const auto before = buf;
  auto m0 = message(48, 0, 0);
  std::vector<std::byte> got(64);
  Request plain = s.at_server[0]->recv(got, kTag);
  ASSERT_TRUE(s.clients[0]->send(m0, kTag).wait(10s).is_ok());
  ASSERT_TRUE(plain.wait(10s).is_ok());
  ASSERT_EQ(plain.bytes(), 48u);
  EXPECT_TRUE(std::equal(m0.begin(), m0.end(), got.begin()));
  EXPECT_EQ(buf, before);
}

TEST(RecvAny, MessagesAlreadyWaitingAreTakenOneAtATimeLowestIndexFirst) {
  Star s = make_star(3);
  for (int i = 0; i < 3; ++i) {
    auto m = message(16 + static_cast<size_t>(i), static_cast<uint32_t>(i), 0);
    ASSERT_TRUE(s.clients[static_cast<size_t>(i)]->send(m, kTag).wait(10s).is_ok());
  }
  // Wait until all three are in (a plain receive of another tag on each endpoint
  // after a second message proves the first arrived: messages arrive in order).
  for (int i = 0; i < 3; ++i) {
    auto marker = message(8, 9, 9);
    ASSERT_TRUE(s.clients[static_cast<size_t>(i)]->send(marker, Tag{7}).wait(10s).is_ok());
    std::vector<std::byte> got(8);
    ASSERT_TRUE(s.at_server[static_cast<size_t>(i)]->recv(got, Tag{7}).wait(10s).is_ok());
  }
  auto list = s.list();
  for (int want = 0; want < 3; ++want) {
    std::vector<std::byte> buf(64);
    int matched = -1;
    Request r = recv_any(list, buf, kTag, &matched);
    ASSERT_TRUE(r.wait(10s).is_ok());
    EXPECT_EQ(matched, want);
    auto m = message(16 + static_cast<size_t>(want), static_cast<uint32_t>(want), 0);
    ASSERT_EQ(r.bytes(), m.size());
    EXPECT_TRUE(std::equal(m.begin(), m.end(), buf.begin()));
  }
}

TEST(RecvAny, EveryMessageIsReceivedOnceInOrderPerSenderAcrossSizes) {
  Star s = make_star(3, {.streams_per_endpoint = 2, .chunk_bytes = 64 * 1024, .eager_limit = 4096});
  const std::vector<size_t> sizes = {8, 100, 4095, 4096, 4097, 65536, 300000, 12, (1 << 20) + 3};
  const int per_sender = static_cast<int>(sizes.size());
  std::vector<std::thread> senders;
  std::atomic<int> send_failures{0};
  for (int c = 0; c < 3; ++c) {
    senders.emplace_back([&, c] {
      for (int k = 0; k < per_sender; ++k) {
        auto m = message(sizes[static_cast<size_t>((k + c) % per_sender)], static_cast<uint32_t>(c),
                         static_cast<uint32_t>(k));
        if (!s.clients[static_cast<size_t>(c)]->send(m, kTag).wait(20s).is_ok()) ++send_failures;
      }
    });
  }
  auto list = s.list();
  std::map<int, int> next_seq;
  std::vector<std::byte> buf((1 << 20) + 16);
  for (int n = 0; n < 3 * per_sender; ++n) {
    int matched = -1;
    Request r = recv_any(list, buf, kTag, &matched);
    Status st = r.wait(20s);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_GE(matched, 0);
    ASSERT_LT(matched, 3);
    uint32_t sender = 0, seq = 0;
    std::memcpy(&sender, buf.data(), 4);
    std::memcpy(&seq, buf.data() + 4, 4);
    EXPECT_EQ(static_cast<int>(sender), matched);
    EXPECT_EQ(static_cast<int>(seq), next_seq[matched]) << "messages of one sender out of order";
    auto want = message(sizes[(seq + sender) % sizes.size()], sender, seq);
    ASSERT_EQ(r.bytes(), want.size());
    ASSERT_TRUE(std::equal(want.begin(), want.end(), buf.begin())) << "sender " << sender << " seq " << seq;
    ++next_seq[matched];
  }
  for (auto& t : senders) t.join();
  EXPECT_EQ(send_failures.load(), 0);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(next_seq[c], per_sender);
}

TEST(RecvAny, DeadCopiesDoNotPileUpAgainstTheOutstandingLimit) {
  // 8 outstanding ops per endpoint: 40 any-receives that endpoint 1 never answers would
  // exhaust it if each left a copy there for good.
  Star s = make_star(2, {.max_outstanding = 8});
  auto list = s.list();
  for (uint32_t k = 0; k < 40; ++k) {
    std::vector<std::byte> buf(16);
    int matched = -1;
    Request r = recv_any(list, buf, kTag, &matched);
    auto m = message(16, 0, k);
    ASSERT_TRUE(s.clients[0]->send(m, kTag).wait(10s).is_ok());
    Status st = r.wait(10s);
    ASSERT_TRUE(st.is_ok()) << "round " << k << ": " << st.to_string();
    EXPECT_EQ(matched, 0);
    EXPECT_EQ(buf, m);
  }
  // Endpoint 1 still receives normally.
  std::vector<std::byte> got(16);
  Request plain = s.at_server[1]->recv(got, kTag);
  auto m = message(16, 1, 0);
  ASSERT_TRUE(s.clients[1]->send(m, kTag).wait(10s).is_ok());
  ASSERT_TRUE(plain.wait(10s).is_ok());
  EXPECT_EQ(got, m);
}

TEST(RecvAny, ConcurrentReceiversEachTakeADifferentMessage) {
  Star s = make_star(2);
  auto list = s.list();
  constexpr int kPerSender = 50;
  std::atomic<int> received{0};
  std::vector<std::vector<int>> seen(2, std::vector<int>(kPerSender, 0));
  std::mutex mu;
  std::vector<std::thread> receivers;
  for (int t = 0; t < 2; ++t) {
    receivers.emplace_back([&] {
      for (int k = 0; k < kPerSender; ++k) {
        std::vector<std::byte> buf(32);
        int matched = -1;
        Request r = recv_any(list, buf, kTag, &matched);
        if (!r.wait(20s).is_ok()) return;
        uint32_t sender = 0, seq = 0;
        std::memcpy(&sender, buf.data(), 4);
        std::memcpy(&seq, buf.data() + 4, 4);
        std::lock_guard lock(mu);
        if (static_cast<int>(sender) == matched && seq < kPerSender) ++seen[sender][seq];
        ++received;
      }
    });
  }
  for (int k = 0; k < kPerSender; ++k) {
    for (int c = 0; c < 2; ++c) {
      auto m = message(32, static_cast<uint32_t>(c), static_cast<uint32_t>(k));
      ASSERT_TRUE(s.clients[static_cast<size_t>(c)]->send(m, kTag).wait(10s).is_ok());
    }
  }
  for (auto& t : receivers) t.join();
  EXPECT_EQ(received.load(), 2 * kPerSender);
  for (int c = 0; c < 2; ++c) {
    for (int k = 0; k < kPerSender; ++k)
      EXPECT_EQ(seen[static_cast<size_t>(c)][static_cast<size_t>(k)], 1) << c << " " << k;
  }
}

TEST(RecvAny, APeerThatClosedDropsOutAndTheLastOneFailsTheReceive) {
  Star s = make_star(2);
  auto list = s.list();
  // Client 1 sends one message, then closes orderly: it is still received.
  auto m1 = message(24, 1, 0);
  ASSERT_TRUE(s.clients[1]->send(m1, kTag).wait(10s).is_ok());
  s.clients[1]->close();
  // Wait for the close to reach the server: its endpoint reports the peer's close.
  std::vector<std::byte> probe(8);
  Status closed = s.at_server[1]->recv(probe, Tag{99}).wait(10s);
  ASSERT_EQ(closed.code(), StatusCode::kPeerFailed) << closed.to_string();
  std::vector<std::byte> buf(64);
  int matched = -1;
  Request r = recv_any(list, buf, kTag, &matched);
  ASSERT_TRUE(r.wait(10s).is_ok());
  EXPECT_EQ(matched, 1);
  EXPECT_TRUE(std::equal(m1.begin(), m1.end(), buf.begin()));
  // Nothing more from 1: the next any-receive waits for 0.
  Request r2 = recv_any(list, buf, kTag, &matched);
  auto m0 = message(30, 0, 0);
  ASSERT_TRUE(s.clients[0]->send(m0, kTag).wait(10s).is_ok());
  ASSERT_TRUE(r2.wait(10s).is_ok());
  EXPECT_EQ(matched, 0);
  EXPECT_TRUE(std::equal(m0.begin(), m0.end(), buf.begin()));
  // A receive posted while 0 is still open fails when 0 closes too.
  Request r3 = recv_any(list, buf, kTag, &matched);
  s.clients[0]->close();
  Status st = r3.wait(10s);
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.to_string();
  // And one posted after both closed fails at once.
  Status st4 = recv_any(list, buf, kTag, &matched).wait(10s);
  EXPECT_EQ(st4.code(), StatusCode::kPeerFailed) << st4.to_string();
}

TEST(RecvAny, AnAbortedPeerFailsTheReceive) {
  Star s = make_star(2);
  auto list = s.list();
  std::vector<std::byte> buf(64);
  int matched = -1;
  Request r = recv_any(list, buf, kTag, &matched);
  s.clients[1]->abort();
  Status st = r.wait(10s);
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.to_string();
  EXPECT_EQ(matched, 1);
}

TEST(RecvAny, TruncationAndBadArguments) {
  Star s = make_star(2, {.eager_limit = 4096});
  auto list = s.list();
  std::vector<std::byte> small(16);
  int matched = -1;
  Request r = recv_any(list, small, kTag, &matched);
  auto big = message(100, 0, 0);
  ASSERT_TRUE(s.clients[0]->send(big, kTag).wait(10s).is_ok());  // eager: only the receiver learns
  EXPECT_EQ(r.wait(10s).code(), StatusCode::kTruncated);
  EXPECT_EQ(matched, 0);

  EXPECT_EQ(recv_any({}, small, kTag, &matched).wait(1s).code(), StatusCode::kInvalidArgument);
  std::vector<Endpoint*> nulls = {nullptr, nullptr};
  EXPECT_EQ(recv_any(nulls, small, kTag, &matched).wait(1s).code(), StatusCode::kInvalidArgument);
  // Endpoints of two contexts: the server's and a client's.
  std::vector<Endpoint*> mixed = {s.at_server[0].get(), s.clients[1].get()};
  EXPECT_EQ(recv_any(mixed, small, kTag, &matched).wait(1s).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace remora
