// Handshake robustness with raw sockets, bytes built by hand from docs/protocol.md:
// garbage, version-mismatched and out-of-range rma_window HELLOs against a Listener,
// silent and half-finished clients against REMORA_HANDSHAKE_TIMEOUT_MS, bad
// data-connection attaches, and connect() against nothing, a silent server and servers
// that answer garbage or an out-of-range rma_window.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/raw_wire.h"

namespace remora::itest {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr uint32_t kMaxRmaWindow = 65536;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

class Handshake : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = make_context(2, 300);
    ASSERT_TRUE(server_);
    auto l = server_->listen("127.0.0.1:0");
    ASSERT_TRUE(l) << describe(l.status());
    listener_ = std::move(l).value();
  }

  raw::Socket raw_connect() {
    std::string err;
    raw::Socket s = raw::Socket::connect_to("127.0.0.1", listener_->port(), &err);
    EXPECT_TRUE(s.valid()) << err;
    return s;
  }

  // A proper endpoint through the listener still works: connect from a second
  // context, accept, and move one message each way.
  void expect_listener_serves() {
    auto client = make_context(2);
    ASSERT_TRUE(client);
    auto accepted = std::async(std::launch::async, [&] { return listener_->accept(std::chrono::seconds(20)); });
    auto c = client->connect("127.0.0.1:" + std::to_string(listener_->port()), std::chrono::seconds(20));
    auto a = accepted.get();
    ASSERT_TRUE(c) << "connect after the bad client: " << describe(c.status());
    ASSERT_TRUE(a) << "accept after the bad client: " << describe(a.status());
    std::shared_ptr<Endpoint> ce = std::move(c).value(), se = std::move(a).value();
    const char text[] = "still serving";
    std::vector<std::byte> in(64), in2(64);
    Request r1 = se->recv(in, Tag{3});
    Request r2 = ce->recv(in2, Tag{4});
    EXPECT_TRUE(ce->send(std::as_bytes(std::span(text)), Tag{3}).wait(10s).is_ok());
    EXPECT_TRUE(se->send(std::as_bytes(std::span(text)), Tag{4}).wait(10s).is_ok());
    ASSERT_TRUE(r1.wait(10s).is_ok());
    ASSERT_TRUE(r2.wait(10s).is_ok());
    EXPECT_EQ(r1.bytes(), sizeof text);
    EXPECT_EQ(std::memcmp(in.data(), text, sizeof text), 0);
    EXPECT_EQ(std::memcmp(in2.data(), text, sizeof text), 0);
    ce->close();
    se->close();
  }

  std::unique_ptr<Context> server_;
  std::unique_ptr<Listener> listener_;
};

TEST_F(Handshake, BadMagicIsDroppedWithoutReplyAndListenerStaysUsable) {
  raw::Socket s = raw_connect();
  std::string err;
  std::vector<uint8_t> garbage(48);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(0x30 + i * 7);
  ASSERT_TRUE(s.send_all(garbage, &err)) << err;
  size_t replied = 0;
  EXPECT_TRUE(s.wait_closed(10s, &replied)) << "the listener kept a bad-magic connection open";
  EXPECT_EQ(replied, 0u) << "the listener answered a bad-magic HELLO";
  // Valid magic, garbage afterwards (unknown role, reserved bits): refused or dropped.
  raw::Socket s2 = raw_connect();
  raw::Hello h;
  std::vector<uint8_t> bad = raw::encode(h);
  bad[6] = 9;  // role 9
  ASSERT_TRUE(s2.send_all(bad, &err)) << err;
  EXPECT_TRUE(s2.wait_closed(10s)) << "the listener kept a connection with an invalid HELLO open";
  expect_listener_serves();
}

// A client that is no remora peer and sends less than a HELLO (an HTTP request), then
// waits: dropped on its first bytes, long before the handshake timeout of a minute.
TEST(ForeignClient, AShortRequestIsDroppedOnItsFirstBytesNotAtTheHandshakeTimeout) {
  auto server = make_context(1, 60000);
  ASSERT_TRUE(server);
  auto listener = server->listen("127.0.0.1:0");
  ASSERT_TRUE(listener) << describe(listener.status());
  std::string err;
  for (const std::string request : {"GET / HTTP/1.1\r\n\r\n", "R", "RMRX"}) {
    SCOPED_TRACE(request);
    raw::Socket s = raw::Socket::connect_to("127.0.0.1", (*listener)->port(), &err);
    ASSERT_TRUE(s.valid()) << err;
    ASSERT_TRUE(s.send_all(std::vector<uint8_t>(request.begin(), request.end()), &err)) << err;
    if (request == "R") {
      // A prefix of the magic is not yet a foreign peer: the rest may follow.
      const uint8_t rest[] = {'X'};
      ASSERT_TRUE(s.send_all(std::vector<uint8_t>(std::begin(rest), std::end(rest)), &err)) << err;
    }
    size_t replied = 0;
    EXPECT_TRUE(s.wait_closed(20s, &replied)) << "the listener kept a foreign client open";
    EXPECT_EQ(replied, 0u);
  }
}

TEST_F(Handshake, HelloWithRmaWindowOutOfRangeIsDroppedAndListenerStaysUsable) {
  for (uint32_t window : {0u, kMaxRmaWindow + 1, 0xFFFFFFFFu}) {
    SCOPED_TRACE("rma_window " + std::to_string(window));
    raw::Socket s = raw_connect();
    std::string err;
    raw::Hello h;
    h.rma_window = window;
    ASSERT_TRUE(s.send_all(raw::encode(h), &err)) << err;
    size_t replied = 0;
    EXPECT_TRUE(s.wait_closed(10s, &replied)) << "the listener kept a connection with an invalid rma_window open";
    EXPECT_EQ(replied, 0u) << "the listener accepted a HELLO with an invalid rma_window";
  }
  expect_listener_serves();
}

TEST_F(Handshake, VersionMismatchGetsAckWithStatus1ThenClose) {
  raw::Socket s = raw_connect();
  std::string err;
  raw::Hello h;
  h.version = 99;
  ASSERT_TRUE(s.send_all(raw::encode(h), &err)) << err;
  auto reply = s.recv_exact(raw::kHelloSize, 10s, &err);
  ASSERT_TRUE(reply) << "no HELLO_ACK for a version-99 HELLO: " << err;
  const raw::HelloAck ack = raw::decode_ack(*reply);
  EXPECT_EQ(ack.magic, 0x41524D52u);
  EXPECT_EQ(ack.status, 1) << "status should be 1 (version mismatch)";
  EXPECT_EQ(ack.version, 1) << "the ACK carries the server's version";
  EXPECT_TRUE(s.wait_closed(10s)) << "the connection stays open after a version mismatch";
  expect_listener_serves();
}

TEST_F(Handshake, SilentClientIsClosedAfterHandshakeTimeout) {
  const auto t0 = Clock::now();
  raw::Socket silent = raw_connect();
  raw::Socket partial = raw_connect();
  std::string err;
  raw::Hello h;
  std::vector<uint8_t> half = raw::encode(h);
  half.resize(20);  // a HELLO that never finishes
  ASSERT_TRUE(partial.send_all(half, &err)) << err;
  EXPECT_TRUE(silent.wait_closed(10s)) << "a client that sends nothing was not closed within 10 s (timeout 300 ms)";
  const double t_silent = ms_since(t0);
  EXPECT_TRUE(partial.wait_closed(10s)) << "a client with half a HELLO was not closed within 10 s (timeout 300 ms)";
  const double t_partial = ms_since(t0);
  std::printf("[          ] closed after %.0f ms (silent) and %.0f ms (half HELLO); timeout 300 ms\n", t_silent,
              t_partial);
  // No timing assertions: the bounded waits above are the check (a server that never
  // closes them fails); the times are printed for the reader.
  expect_listener_serves();
}

TEST_F(Handshake, DataHelloWithWrongTokenIsRefused) {
  std::string err;
  raw::Socket ctl = raw_connect();
  raw::Hello h;
  h.stream_count = 2;
  ASSERT_TRUE(ctl.send_all(raw::encode(h), &err)) << err;
  auto reply = ctl.recv_exact(raw::kHelloSize, 10s, &err);
  ASSERT_TRUE(reply) << err;
  const raw::HelloAck ack = raw::decode_ack(*reply);
  ASSERT_EQ(ack.status, 0);
  EXPECT_NE(ack.endpoint_id, 0u);
  EXPECT_EQ(ack.stream_count, 2);
  EXPECT_GE(ack.rma_window, 1u) << "an accepted HELLO_ACK must carry the server's rma_window";
  EXPECT_LE(ack.rma_window, kMaxRmaWindow);

  struct BadData {
    const char* what;
    uint64_t id, token;
    uint16_t index;
  };
  for (const BadData& b : {BadData{"wrong token", ack.endpoint_id, ack.attach_token ^ 1, 0},
                           BadData{"unknown endpoint id", ack.endpoint_id + 1000, ack.attach_token, 0},
                           BadData{"index out of range", ack.endpoint_id, ack.attach_token, 2}}) {
    SCOPED_TRACE(b.what);
    raw::Socket d = raw_connect();
    raw::Hello dh;
    dh.role = 2;
    dh.endpoint_id = b.id;
    dh.attach_token = b.token;
    dh.stream_index = b.index;
    dh.stream_count = 2;
    ASSERT_TRUE(d.send_all(raw::encode(dh), &err)) << err;
    // Either a refusal (status 2) then close, or a plain close (a HELLO that does not
    // decode, e.g. index >= count, may be dropped like garbage).
    auto r = d.recv_exact(raw::kHelloSize, 10s, &err);
    if (r) {
      EXPECT_EQ(raw::decode_ack(*r).status, 2) << "a bad data HELLO was not refused";
    }
    EXPECT_TRUE(d.wait_closed(10s)) << "a refused data connection stays open";
  }
  // The half-built endpoint is never handed to accept().
  auto a = listener_->accept(500ms);
  EXPECT_FALSE(a) << "accept returned an endpoint whose data connections never attached";
  if (!a) {
    EXPECT_EQ(a.status().code(), StatusCode::kTimeout) << describe(a.status());
  }
  expect_listener_serves();
}

TEST(Connect, NothingListeningIsUnreachable) {
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  raw::ClosedPort closed;
  ASSERT_NE(closed.port(), 0);
  const auto t0 = Clock::now();
  auto r = ctx->connect("127.0.0.1:" + std::to_string(closed.port()), 3s);
  const double ms = ms_since(t0);
  ASSERT_FALSE(r) << "connected to a port nobody listens on";
  EXPECT_EQ(r.status().code(), StatusCode::kUnreachable) << describe(r.status());
  std::printf("[          ] connect returned after %.0f ms\n", ms);
}

// A fake server: accepts the control connection, checks the HELLO it gets, then
// answers with `reply` (or nothing). Returns the HELLO it read (empty on failure).
class FakeServer {
 public:
  explicit FakeServer(std::optional<std::vector<uint8_t>> reply) {
    thread_ = std::thread([this, reply] {
      std::string err;
      conn_ = listener_.accept(20s, &err);
      if (!conn_.valid()) return;
      auto hello = conn_.recv_exact(raw::kHelloSize, 20s, &err);
      if (!hello) return;
      hello_ = *hello;
      if (reply) (void)conn_.send_all(*reply, &err);
    });
  }
  ~FakeServer() { join(); }
  uint16_t port() const { return listener_.port(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<uint8_t>& hello() const { return hello_; }
  raw::Socket& conn() { return conn_; }

 private:
  raw::Listener listener_;
  raw::Socket conn_;
  std::vector<uint8_t> hello_;
  std::thread thread_;
};

void expect_valid_control_hello(const std::vector<uint8_t>& bytes, uint16_t streams) {
  ASSERT_EQ(bytes.size(), raw::kHelloSize) << "the fake server got no complete HELLO";
  const raw::HelloView h = raw::decode_hello(bytes);
  EXPECT_EQ(h.magic, 0x41524D52u);
  EXPECT_EQ(h.version, 1);
  EXPECT_EQ(h.role, 1);
  EXPECT_EQ(h.reserved7, 0);
  EXPECT_EQ(h.endpoint_id, 0u);
  EXPECT_EQ(h.attach_token, 0u);
  EXPECT_EQ(h.stream_index, 0);
  EXPECT_EQ(h.stream_count, streams);
  EXPECT_GE(h.rma_window, 1u) << "a HELLO must carry the client's rma_window";
  EXPECT_LE(h.rma_window, kMaxRmaWindow);
  EXPECT_GT(h.eager_credit, h.eager_limit);
}

TEST(Connect, GarbageFromServerIsProtocolError) {
  auto ctx = make_context(3);
  ASSERT_TRUE(ctx);
  std::vector<uint8_t> garbage(48, 0xEE);
  FakeServer server(garbage);
  auto r = ctx->connect("127.0.0.1:" + std::to_string(server.port()), 10s);
  server.join();
  expect_valid_control_hello(server.hello(), 3);
  ASSERT_FALSE(r) << "connect() accepted a garbage HELLO_ACK";
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << describe(r.status());
}

// A server that is no remora peer answers less than a HELLO_ACK (an HTTP reply) and keeps
// the connection open: refused on its first bytes as "not a remora peer", not a timeout
// at the end of the minute connect() was given.
TEST(Connect, AForeignServersShortReplyIsRefusedAtOnceNotAtTheDeadline) {
  auto ctx = make_context(1);
  ASSERT_TRUE(ctx);
  const std::string http = "HTTP/1.1 200 OK\r\n\r\n";
  FakeServer server(std::vector<uint8_t>(http.begin(), http.end()));
  auto r = ctx->connect("127.0.0.1:" + std::to_string(server.port()), 60s);
  server.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << describe(r.status());
  EXPECT_NE(r.status().message().find("not a remora peer"), std::string::npos) << describe(r.status());
}

// The lowest descriptor number free now: the next socket's, and the soft limit at
// which that socket would fail with EMFILE.
rlim_t lowest_free_descriptor() {
  const int probe = ::dup(2);
  ::close(probe);
  return static_cast<rlim_t>(probe);
}

// Run in a child: both open-file limits are lowered to what it already holds and a few
// more, so the endpoint's sockets cannot fit (the few: the sanitizers' runtime opens a
// pipe to check memory it reports on). Exit 0 when connect() fails with an error that
// names the address, the limit and the fix; a distinct code for each way it does not.
int connect_without_descriptors() {
  auto ctx = Context::create(ContextOptions{});
  if (!ctx) return 10;
  auto listener = (*ctx)->listen("127.0.0.1:0");
  if (!listener) return 11;
  const rlim_t limit_now = lowest_free_descriptor() + 4;
  const rlimit limit{.rlim_cur = limit_now, .rlim_max = limit_now};
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 12;
  auto r = (*ctx)->connect((*listener)->address(), 5s);
  if (r) return 13;
  const std::string m = r.status().message();
  std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
  if (r.status().code() != StatusCode::kNoResource) return 14;
  if (m.find((*listener)->address()) == std::string::npos) return 15;
  if (m.find("RLIMIT_NOFILE") == std::string::npos || m.find(std::to_string(limit_now)) == std::string::npos) return 16;
  if (m.find("raise the hard limit") == std::string::npos) return 17;
  return 0;
}

// Run in a child: only the soft limit is lowered to what it holds, the hard one left
// where it was. Exit 0 when connect() raises the soft limit itself and the endpoint
// carries a message; a distinct code for each way it does not.
int connect_under_a_low_soft_limit() {
  auto ctx = Context::create(ContextOptions{});
  if (!ctx) return 10;
  auto listener = (*ctx)->listen("127.0.0.1:0");
  if (!listener) return 11;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 12;
  const rlim_t low = lowest_free_descriptor();
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < low + 64) return 0;  // no room to raise into
  limit.rlim_cur = low;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 12;
  auto client = (*ctx)->connect((*listener)->address(), 5s);
  if (!client) {
    std::fprintf(stderr, "%s\n", client.status().to_string().c_str());
    return 13;
  }
  auto server = (*listener)->accept(5s);
  if (!server) return 14;
  const std::vector<std::byte> sent = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}};
  std::vector<std::byte> got(sent.size());
  Request rx = (*server)->recv(got, Tag{7});
  if (!(*client)->send(sent, Tag{7}).wait(5s).is_ok()) return 15;
  if (!rx.wait(5s).is_ok() || got != sent) return 16;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur <= low) return 17;
  return 0;
}

int run_in_child(int (*body)()) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) ::_exit(body());
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -2;
  return WEXITSTATUS(status);
}

TEST(Connect, OutOfDescriptorsNamesTheAddressAndTheOpenFileLimit) {
  EXPECT_EQ(run_in_child(connect_without_descriptors), 0)
      << "see the child's message above (exit codes: connect_without_descriptors)";
}

TEST(Connect, ALowSoftOpenFileLimitIsRaisedTowardTheHardOne) {
  EXPECT_EQ(run_in_child(connect_under_a_low_soft_limit), 0)
      << "see the child's message above (exit codes: connect_under_a_low_soft_limit)";
}

TEST(Connect, VersionMismatchAckIsProtocolError) {
  auto ctx = make_context(1);
  ASSERT_TRUE(ctx);
  raw::HelloAck ack;
  ack.magic = 0x41524D52;
  ack.version = 7;
  ack.status = 1;
  FakeServer server(raw::encode(ack));
  auto r = ctx->connect("127.0.0.1:" + std::to_string(server.port()), 10s);
  server.join();
  expect_valid_control_hello(server.hello(), 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << describe(r.status());
  EXPECT_NE(r.status().message().find("version"), std::string::npos)
      << "the message should say 'version mismatch': " << r.status().message();
}

TEST(Connect, AcceptedAckWithRmaWindowOutOfRangeIsProtocolError) {
  auto ctx = make_context(1);
  ASSERT_TRUE(ctx);
  for (uint32_t window : {0u, kMaxRmaWindow + 1}) {
    SCOPED_TRACE("rma_window " + std::to_string(window));
    raw::HelloAck ack{.magic = 0x41524D52, .version = 1, .status = 0, .capabilities = 0, .endpoint_id = 5,
                      .attach_token = 6, .stream_index = 0, .stream_count = 1, .eager_limit = 16384,
                      .eager_credit = 1 << 20, .rma_window = window};
    FakeServer server(raw::encode(ack));
    auto r = ctx->connect("127.0.0.1:" + std::to_string(server.port()), 10s);
    server.join();
    expect_valid_control_hello(server.hello(), 1);
    ASSERT_FALSE(r) << "connect() accepted a HELLO_ACK with an invalid rma_window";
    EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << describe(r.status());
    EXPECT_NE(r.status().message().find("rma_window"), std::string::npos) << r.status().message();
  }
}

TEST(Connect, RefusalAckMayCarryRmaWindowZero) {
  auto ctx = make_context(1);
  ASSERT_TRUE(ctx);
  raw::HelloAck ack{.magic = 0x41524D52, .version = 1, .status = 3, .capabilities = 0, .endpoint_id = 0,
                    .attach_token = 0, .stream_index = 0, .stream_count = 0, .eager_limit = 0,
                    .eager_credit = 0, .rma_window = 0};
  FakeServer server(raw::encode(ack));
  auto r = ctx->connect("127.0.0.1:" + std::to_string(server.port()), 10s);
  server.join();
  ASSERT_FALSE(r);
  // The refusal is reported as such, not as a malformed acknowledgement.
  EXPECT_EQ(r.status().code(), StatusCode::kUnreachable) << describe(r.status());
}

TEST(Connect, SilentServerTimesOut) {
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  FakeServer server(std::nullopt);
  const auto t0 = Clock::now();
  auto r = ctx->connect("127.0.0.1:" + std::to_string(server.port()), 1s);
  const double ms = ms_since(t0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout) << describe(r.status());
  std::printf("[          ] connect returned after %.0f ms\n", ms);
}

}  // namespace
}  // namespace remora::itest
