// Tests for transport/context.cc (include/remora/context.h): creation from options, from
// the environment and from a Config, and their refusals; listening on port 0 and the
// address reported; connect's failures (closed port, port 0, malformed address, a peer
// that never answers the handshake); destruction while endpoints, listeners and requests
// are still held. Real sockets on loopback; every wait has an explicit bound.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "remora/remora.h"
#include "scoped_env.h"

namespace remora {
namespace {

using namespace std::chrono_literals;

using testing::ScopedEnv;

/// A TCP socket listening on 127.0.0.1 that never accepts: connects complete in the
/// kernel's backlog, and nothing ever answers the handshake.
struct SilentServer {
  int fd = -1;
  uint16_t port = 0;
  SilentServer() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, 16), 0);
    socklen_t len = sizeof a;
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
  }
  ~SilentServer() { ::close(fd); }
  SilentServer(const SilentServer&) = delete;
  SilentServer& operator=(const SilentServer&) = delete;
};

std::string loopback(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

TEST(ContextCreate, ConfigReflectsEveryOptionAndDefaultsTheRest) {
  auto ctx = Context::create({.streams_per_endpoint = 3,
                              .chunk_bytes = 64 * 1024,
                              .eager_limit = 8 * 1024,
                              .eager_credit = 256 * 1024,
                              .rma_window = 7,
                              .spin_us = 11,
                              .progress_poll_us = 13,
                              .connect_timeout_ms = 1234,
                              .handshake_timeout_ms = 2345,
                              .wait_timeout_ms = 3456,
                              .pin_mode = PinMode::kOff,
                              .ignore_env = true});
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().to_string();
  const Config& c = (*ctx)->config();
  EXPECT_EQ(c.streams_per_endpoint, 3u);
  EXPECT_EQ(c.chunk_bytes, 64u * 1024);
  EXPECT_EQ(c.eager_limit, 8u * 1024);
  EXPECT_EQ(c.eager_credit, 256u * 1024);
  EXPECT_EQ(c.rma_window, 7u);
  EXPECT_EQ(c.spin_us, 11u);
  EXPECT_EQ(c.progress_poll_us, 13u);
  EXPECT_EQ(c.connect_timeout_ms, 1234u);
  EXPECT_EQ(c.handshake_timeout_ms, 2345u);
  EXPECT_EQ(c.wait_timeout_ms, 3456u);
  EXPECT_EQ(c.pin_mode, PinMode::kOff);
  const Config defaults;
  EXPECT_EQ(c.max_outstanding, defaults.max_outstanding);
  EXPECT_EQ(c.max_unexpected, defaults.max_unexpected);
  EXPECT_EQ(c.progress_linger_us, defaults.progress_linger_us);
}

TEST(ContextCreate, FromAConfigTakesItExactly) {
  Config config;
  config.streams_per_endpoint = 1;
  config.eager_limit = 0;
  config.max_outstanding = 5;
  auto ctx = Context::create(config);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().to_string();
  EXPECT_EQ((*ctx)->config().streams_per_endpoint, 1u);
  EXPECT_EQ((*ctx)->config().eager_limit, 0u);
  EXPECT_EQ((*ctx)->config().max_outstanding, 5u);
}

TEST(ContextCreate, EnvironmentAppliesUnderOptionsAndIgnoreEnvSkipsIt) {
  ScopedEnv streams("REMORA_STREAMS", "5");
  ScopedEnv spin("REMORA_SPIN_US", "77");
  auto from_env = Context::create();
  ASSERT_TRUE(from_env.is_ok()) << from_env.status().to_string();
  EXPECT_EQ((*from_env)->config().streams_per_endpoint, 5u);
  EXPECT_EQ((*from_env)->config().spin_us, 77u);
  auto overridden = Context::create(ContextOptions{.streams_per_endpoint = 3});
  ASSERT_TRUE(overridden.is_ok());
  EXPECT_EQ((*overridden)->config().streams_per_endpoint, 3u) << "an option wins over the environment";
  EXPECT_EQ((*overridden)->config().spin_us, 77u) << "an unset option keeps the environment's value";
  auto ignoring = Context::create({.ignore_env = true});
  ASSERT_TRUE(ignoring.is_ok());
  EXPECT_EQ((*ignoring)->config().streams_per_endpoint, Config{}.streams_per_endpoint);
  EXPECT_EQ((*ignoring)->config().spin_us, Config{}.spin_us);
}

TEST(ContextCreate, MalformedEnvironmentIsRefusedNamingTheVariable) {
  ScopedEnv bad("REMORA_STREAMS", "abc");
  auto ctx = Context::create();
  ASSERT_FALSE(ctx.is_ok());
  EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ctx.status().message().find("REMORA_STREAMS"), std::string::npos) << ctx.status().message();
  EXPECT_TRUE(Context::create({.ignore_env = true}).is_ok()) << "ignore_env must not read the variable";
}

TEST(ContextCreate, OutOfRangeEnvironmentIsRefusedEvenWhenWellFormed) {
  ScopedEnv bad("REMORA_STREAMS", "65");
  auto ctx = Context::create();
  ASSERT_FALSE(ctx.is_ok());
  EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ctx.status().message().find("REMORA_STREAMS"), std::string::npos) << ctx.status().message();
}

TEST(ContextCreate, BadOptionsAreRefusedWithTheReason) {
  struct Case {
    ContextOptions options;
    const char* names;  ///< in the message
  };
  const Case cases[] = {
      {{.streams_per_endpoint = 0, .ignore_env = true}, "REMORA_STREAMS"},
      {{.streams_per_endpoint = 65, .ignore_env = true}, "REMORA_STREAMS"},
      {{.chunk_bytes = 1024, .ignore_env = true}, "REMORA_CHUNK_SIZE"},
      {{.eager_limit = 2u << 20, .ignore_env = true}, "REMORA_EAGER_LIMIT"},
      {{.eager_limit = 4096, .eager_credit = 4096, .ignore_env = true}, "REMORA_EAGER_CREDIT"},
      {{.rma_window = 0, .ignore_env = true}, "REMORA_RMA_WINDOW"},
      {{.staging_buffers = 1, .ignore_env = true}, "REMORA_STAGING_BUFFERS"},
      {{.connect_timeout_ms = 0, .ignore_env = true}, "connect_timeout_ms"},
      {{.handshake_timeout_ms = 0, .ignore_env = true}, "handshake_timeout_ms"},
      {{.wait_timeout_ms = 0, .ignore_env = true}, "REMORA_WAIT_TIMEOUT_MS"},
  };
  for (const auto& c : cases) {
    auto ctx = Context::create(c.options);
    ASSERT_FALSE(ctx.is_ok()) << c.names;
    EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument) << c.names;
    EXPECT_NE(ctx.status().message().find(c.names), std::string::npos) << ctx.status().message();
  }
  Config bad;
  bad.max_outstanding = 0;
  auto ctx = Context::create(bad);
  ASSERT_FALSE(ctx.is_ok());
  EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument);
}

TEST(ContextListen, PortZeroBindsAFreePortAndReportsIt) {
  auto ctx = Context::create({.ignore_env = true}).value();
  auto l = ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  const uint16_t port = (*l)->port();
  EXPECT_NE(port, 0);
  EXPECT_EQ((*l)->address(), loopback(port));
  auto second = ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(second.is_ok());
  EXPECT_NE((*second)->port(), port) << "two listeners on one port";
  // The reported port is the one that accepts: a client connects to it.
  auto client = Context::create({.ignore_env = true}).value();
  auto ep = client->connect(loopback(port), 10s);
  ASSERT_TRUE(ep.is_ok()) << ep.status().to_string();
  EXPECT_EQ((*ep)->peer_address(), loopback(port));
  auto accepted = (*l)->accept(10s);
  ASSERT_TRUE(accepted.is_ok()) << accepted.status().to_string();
  EXPECT_EQ((*accepted)->id(), (*ep)->id());
}

TEST(ContextListen, Ipv6AddressIsReportedInBrackets) {
  auto ctx = Context::create({.ignore_env = true}).value();
  auto l = ctx->listen("[::1]:0");
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ((*l)->address(), "[::1]:" + std::to_string((*l)->port()));
}

TEST(ContextListen, BadAddressesAndABusyPortAreRefused) {
  auto ctx = Context::create({.ignore_env = true}).value();
  auto malformed = ctx->listen("127.0.0.1");
  ASSERT_FALSE(malformed.is_ok());
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);
  auto first = ctx->listen("127.0.0.1:0").value();
  auto busy = ctx->listen(loopback(first->port()));
  ASSERT_FALSE(busy.is_ok()) << "a second listener on a port in use";
  EXPECT_EQ(busy.status().code(), StatusCode::kInvalidArgument) << busy.status().to_string();
  EXPECT_NE(busy.status().message().find("listen on " + loopback(first->port())), std::string::npos)
      << busy.status().message();
}

TEST(ContextConnect, ClosedPortIsUnreachable) {
  uint16_t port = 0;
  {
    SilentServer closed;  // bound, then closed: nobody listens there now
    port = closed.port;
  }
  auto ctx = Context::create({.ignore_env = true}).value();
  auto ep = ctx->connect(loopback(port), 5s);
  ASSERT_FALSE(ep.is_ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnreachable) << ep.status().to_string();
  EXPECT_NE(ep.status().message().find("connect to " + loopback(port)), std::string::npos) << ep.status().message();
}

TEST(ContextConnect, PortZeroAndMalformedAddressesAreInvalid) {
  auto ctx = Context::create({.ignore_env = true}).value();
  for (const char* address : {"127.0.0.1:0", "127.0.0.1", "::1:7100", "[::1]7100"}) {
    auto ep = ctx->connect(address, 1s);
    ASSERT_FALSE(ep.is_ok()) << address;
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidArgument) << address << ": " << ep.status().to_string();
  }
}

// A server whose kernel completes the TCP connect but that never answers the handshake:
// connect ends with kTimeout at the deadline it was given (and does not hang).
TEST(ContextConnect, SilentServerTimesOutAtTheGivenDeadline) {
  SilentServer silent;
  auto ctx = Context::create({.ignore_env = true}).value();
  auto ep = ctx->connect(loopback(silent.port), 300ms);
  ASSERT_FALSE(ep.is_ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kTimeout) << ep.status().to_string();
  EXPECT_NE(ep.status().message().find("handshake with 127.0.0.1:" + std::to_string(silent.port)), std::string::npos)
      << ep.status().message();
}

// The context's connect_timeout_ms bounds a connect given no timeout.
TEST(ContextConnect, ConnectWithoutTimeoutUsesTheConfiguredOne) {
  SilentServer silent;
  auto ctx = Context::create({.connect_timeout_ms = 200, .ignore_env = true}).value();
  auto ep = ctx->connect(loopback(silent.port));
  ASSERT_FALSE(ep.is_ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kTimeout) << ep.status().to_string();
}

// Destroying a context while the application still holds its endpoints, a listener and
// requests in flight: the requests end kAborted, the handles stay safe to use (they
// answer with errors), and the peer sees the connection fail.
TEST(ContextDestroy, WithEndpointsListenersAndRequestsOutstanding) {
  auto server_ctx = Context::create({.ignore_env = true}).value();
  auto client_ctx = Context::create({.ignore_env = true}).value();
  auto listener = server_ctx->listen("127.0.0.1:0").value();
  auto client = client_ctx->connect(loopback(listener->port()), 10s).value();
  auto server = listener->accept(10s).value();
  auto client_listener = client_ctx->listen("127.0.0.1:0").value();

  std::vector<std::byte> small(16), large(4 << 20, std::byte{7});
  Request recv_on_client = client->recv(small, Tag{1});                // nobody sends it
  Request send_from_client = client->send(large, Tag{2});              // rendezvous: nobody receives it
  std::vector<std::byte> server_buf(16);
  Request recv_on_server = server->recv(server_buf, Tag{3});           // nobody sends it
  EXPECT_EQ(recv_on_client.test().code(), StatusCode::kInProgress);

  client_ctx.reset();
  EXPECT_EQ(recv_on_client.wait(5s).code(), StatusCode::kAborted);
  EXPECT_EQ(send_from_client.wait(5s).code(), StatusCode::kAborted);
  EXPECT_TRUE(client->failed());
  EXPECT_EQ(client->send(small, Tag{4}).wait(5s).code(), StatusCode::kAborted) << "a post after destruction";
  auto late = client_listener->accept(1s);
  ASSERT_FALSE(late.is_ok());
  EXPECT_EQ(late.status().code(), StatusCode::kAborted) << late.status().to_string();

  // The other side: its pending receive fails because the peer went away.
  EXPECT_EQ(recv_on_server.wait(10s).code(), StatusCode::kPeerFailed);
  EXPECT_TRUE(server->failed());

  server_ctx.reset();
  auto after = listener->accept(1s);
  ASSERT_FALSE(after.is_ok());
  EXPECT_EQ(after.status().code(), StatusCode::kAborted);
  // Handles released last, after their contexts: nothing to crash on.
  client.reset();
  server.reset();
  listener.reset();
  client_listener.reset();
}

TEST(ContextDestroy, ProgressFromTheApplicationThreadNeverBlocks) {
  auto ctx = Context::create({.ignore_env = true}).value();
  for (int i = 0; i < 1000; ++i) ctx->progress();
  auto l = ctx->listen("127.0.0.1:0");
  EXPECT_TRUE(l.is_ok()) << "the context still works after driving progress itself";
}

}  // namespace
}  // namespace remora
