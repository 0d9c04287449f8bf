// Tests for transport/listener.cc: accept's timeout, accept once the listener is
// closed, several clients accepted in the order their handshakes completed, an endpoint
// left unaccepted when the listener closes, and clients that send garbage (or half a
// HELLO) instead of a handshake: dropped, without stalling the good client behind them.
// Real sockets on loopback; every wait has an explicit bound.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "remora/remora.h"

namespace remora {
namespace {

using namespace std::chrono_literals;

std::string loopback(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

/// A plain TCP client connected to 127.0.0.1:port (no remora handshake).
class RawClient {
 public:
  explicit RawClient(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  bool connected() const { return connected_; }
  bool send_all(const std::vector<unsigned char>& bytes) const {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  /// True once the server closed the connection (EOF or reset) within `timeout`.
  bool closed_by_server(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[256];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;  // EOF or reset; bytes (an ack) would mean it answered
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

/// Sends `value` as one byte with tag 1 and waits for it.
Status send_byte(Endpoint& ep, std::byte value) {
  std::byte b = value;
  return ep.send(std::span(&b, 1), Tag{1}).wait(10s);
}

/// Receives the one byte sent with tag 1.
Result<std::byte> recv_byte(Endpoint& ep) {
  std::byte b{};
  if (Status s = ep.recv(std::span(&b, 1), Tag{1}).wait(10s); !s) return s;
  return b;
}

TEST(Listener, AcceptTimesOutWhenNobodyConnects) {
  auto ctx = Context::create({.ignore_env = true}).value();
  auto l = ctx->listen("127.0.0.1:0").value();
  auto ep = l->accept(100ms);
  ASSERT_FALSE(ep.is_ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kTimeout) << ep.status().to_string();
  // A timeout leaves the listener usable.
  auto client = Context::create({.ignore_env = true}).value();
  auto c = client->connect(loopback(l->port()), 10s);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  auto s = l->accept(10s);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ((*s)->id(), (*c)->id());
}

TEST(Listener, AcceptAfterTheContextClosedItIsAborted) {
  auto ctx = Context::create({.ignore_env = true}).value();
  auto l = ctx->listen("127.0.0.1:0").value();
  const uint16_t port = l->port();
  ctx.reset();  // closes the listener
  auto ep = l->accept(1s);
  ASSERT_FALSE(ep.is_ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kAborted) << ep.status().to_string();
  // And it no longer listens.
  auto client = Context::create({.ignore_env = true}).value();
  auto c = client->connect(loopback(port), 5s);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnreachable) << c.status().to_string();
}

// A client whose handshake completed but whom nobody accepted before the listener went
// away is told so: its endpoint fails rather than waiting for a peer that never comes.
TEST(Listener, ClosingFailsTheEndpointsNotYetAccepted) {
  auto server_ctx = Context::create({.ignore_env = true}).value();
  auto l = server_ctx->listen("127.0.0.1:0").value();
  auto client_ctx = Context::create({.ignore_env = true}).value();
  auto c = client_ctx->connect(loopback(l->port()), 10s);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  l.reset();
  std::vector<std::byte> buf(8);
  const Status st = (*c)->recv(buf, Tag{1}).wait(10s);
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.to_string();
}

TEST(Listener, SeveralClientsAreAcceptedInTheOrderTheyConnected) {
  auto server_ctx = Context::create({.ignore_env = true}).value();
  auto l = server_ctx->listen("127.0.0.1:0").value();
  auto client_ctx = Context::create({.ignore_env = true}).value();
  constexpr int kClients = 5;
  std::vector<std::shared_ptr<Endpoint>> clients;
  for (int i = 0; i < kClients; ++i) {
    auto c = client_ctx->connect(loopback(l->port()), 10s);  // returns once its handshake is done
    ASSERT_TRUE(c.is_ok()) << i << ": " << c.status().to_string();
    clients.push_back(*c);
    ASSERT_TRUE(send_byte(**c, std::byte(i)).is_ok());  // eager: done before anyone accepts
  }
  for (int i = 0; i < kClients; ++i) {
    auto s = l->accept(10s);
    ASSERT_TRUE(s.is_ok()) << i << ": " << s.status().to_string();
    EXPECT_EQ((*s)->id(), clients[static_cast<size_t>(i)]->id()) << "accept " << i;
    auto b = recv_byte(**s);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ(static_cast<int>(*b), i) << "accept " << i << " returned another client's endpoint";
  }
  auto none = l->accept(50ms);
  EXPECT_EQ(none.status().code(), StatusCode::kTimeout) << "more endpoints than clients";
}

// Garbage instead of a HELLO is dropped (the connection closed, no endpoint made), a
// client that sent half a HELLO and then nothing waits for its own deadline, and neither
// keeps the next good client from connecting and being accepted.
TEST(Listener, GarbageAndSilentClientsDoNotStallAGoodOne) {
  auto server_ctx = Context::create({.handshake_timeout_ms = 60'000, .ignore_env = true}).value();
  auto l = server_ctx->listen("127.0.0.1:0").value();

  RawClient garbage(l->port());
  ASSERT_TRUE(garbage.connected());
  ASSERT_TRUE(garbage.send_all(std::vector<unsigned char>(256, 0xA5)));
  RawClient http(l->port());
  ASSERT_TRUE(http.connected());
  const std::string get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(200, ' ');
  ASSERT_TRUE(http.send_all(std::vector<unsigned char>(get.begin(), get.end())));
  RawClient half(l->port());
  ASSERT_TRUE(half.connected());
  ASSERT_TRUE(half.send_all({0x52, 0x4d, 0x52}));  // then silence, for longer than this test

  auto client_ctx = Context::create({.ignore_env = true}).value();
  auto c = client_ctx->connect(loopback(l->port()), 10s);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  auto s = l->accept(10s);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ((*s)->id(), (*c)->id()) << "accept returned something made from garbage";
  ASSERT_TRUE(send_byte(**c, std::byte{42}).is_ok());
  auto b = recv_byte(**s);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(*b, std::byte{42});

  EXPECT_TRUE(garbage.closed_by_server(10s)) << "a garbage HELLO must be dropped";
  EXPECT_TRUE(http.closed_by_server(10s)) << "an HTTP request must be dropped";
  auto more = l->accept(50ms);
  EXPECT_EQ(more.status().code(), StatusCode::kTimeout) << "garbage became an endpoint";
}

}  // namespace
}  // namespace remora
