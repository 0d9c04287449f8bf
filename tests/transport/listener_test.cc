// Tests for transport/listener.cc: accept's timeout, accept once the listener is
// closed, several clients accepted in the order their handshakes completed, an endpoint
// left unaccepted when the listener closes, and clients that send garbage (or half a
// HELLO) instead of a handshake: dropped, without stalling the good client behind them;
// and a thread waiting in accept that lets the progress thread park for a spinner.
// Real sockets on loopback; every wait has an explicit bound.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/progress.h"
#include "remora/remora.h"
#include "transport/context_core.h"

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

/// True once `done`, false after 10 s; `poll` runs between the looks.
bool within_10s(const std::function<bool()>& done, const std::function<void()>& poll) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    poll();
  }
  return true;
}

/// The system call thread `tid` of this process is blocked in, -1 if it runs.
long blocked_in(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long nr = -1;
  return (f >> nr) ? nr : -1;
}

// A thread that sits in accept() (an accept loop for the process's life, as NIXL's
// acceptor and the collectives' rendezvous have) does not keep the progress thread from
// parking while another thread spins on the same context: otherwise the two poll the
// same sockets and take turns at the lock. A client that connects meanwhile is still
// accepted, through the spinner's polls, and so is one that connects once nobody spins
// (the parked thread looks around within its linger period).
TEST(Listener, AThreadWaitingInAcceptLetsTheProgressThreadParkForASpinner) {
  auto ctx = Context::create({.ignore_env = true}).value();
  auto l = ctx->listen("127.0.0.1:0").value();
  engine::ProgressEngine& e = *detail::ContextInternals::core(*ctx)->engine();
  std::atomic<pid_t> acceptor_tid{0};
  std::atomic<bool> first_done{false};
  Result<std::shared_ptr<Endpoint>> first = Status(StatusCode::kInternal, "not run");
  Result<std::shared_ptr<Endpoint>> second = Status(StatusCode::kInternal, "not run");
  std::thread acceptor([&] {
    acceptor_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    first = l->accept(30s);
    first_done = true;
    second = l->accept(30s);
  });
  // The acceptor is asleep in accept (futex) before this thread starts to spin.
  ASSERT_TRUE(within_10s([&] { return acceptor_tid.load() != 0 && blocked_in(acceptor_tid) == SYS_futex; },
                         [] { std::this_thread::yield(); }));
  e.waiter_enter();
  {
    engine::ProgressEngine::Guard g(e);
    e.post([] {});  // wakes the progress thread, which then sees the spinner
  }
  // Not driving progress yet: the post's wake-up is the progress thread's to take.
  EXPECT_TRUE(within_10s([&] { return e.parked(); }, [&] { e.waiter_polling(engine::Clock::now()); }))
      << "the progress thread never parked";
  const auto spin = [&] {
    e.waiter_polling(engine::Clock::now());
    (void)e.try_progress();
  };
  auto client = Context::create({.ignore_env = true}).value();
  Result<std::shared_ptr<Endpoint>> c1 = Status(StatusCode::kInternal, "not run");
  std::thread dial1([&] { c1 = client->connect(loopback(l->port()), 10s); });
  EXPECT_TRUE(within_10s([&] { return first_done.load(); }, spin)) << "not accepted while this thread spun";
  dial1.join();
  e.waiter_exit();
  auto c2 = client->connect(loopback(l->port()), 10s);
  ASSERT_TRUE(c2.is_ok()) << c2.status().to_string();
  acceptor.join();
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  ASSERT_TRUE(c1.is_ok()) << c1.status().to_string();
  EXPECT_EQ((*first)->id(), (*c1)->id());
  EXPECT_EQ((*second)->id(), (*c2)->id());
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
