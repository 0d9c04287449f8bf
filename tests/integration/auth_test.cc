// Peer authentication (REMORA_AUTH_KEY, docs/protocol.md "Authentication") over real
// loopback sockets: endpoints with K data streams and the rendezvous store work with the
// right key and are refused, with kAccessDenied on the refused side, for a client without
// a key, with a wrong key, and for a keyed client facing a listener without one; a
// recorded handshake replayed on a fresh connection (relayed through a recording proxy)
// is refused because the listener's nonce differs, and reaches no memory; a raw data
// stream attach without a proof is refused while the endpoint it names goes on; the key
// file and its errors; refusals and the one-time warning as logged by a child process;
// a job under `remora run -n 2` with the key in its environment.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "itest_util.h"
#include "remora/memory.h"
#include "remora/store.h"
#include "../scoped_env.h"
#include "support/raw_wire.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;
using testing::ScopedEnv;

constexpr const char* kChildVariable = "AUTH_TEST_CHILD";  // not REMORA_*: the library must not know it

AuthKey key_of(std::string_view secret) {
  auto k = AuthKey::from_secret(secret);
  EXPECT_TRUE(k) << describe(k.status());
  return k ? *k : AuthKey{};
}

/// A context that ignores the environment, with `streams` data streams and `key`.
std::unique_ptr<Context> keyed_context(std::optional<AuthKey> key, uint32_t streams = 3) {
  auto r = Context::create(ContextOptions{.streams_per_endpoint = streams, .handshake_timeout_ms = 5000,
                                          .auth_key = key, .ignore_env = true});
  if (!r) {
    ADD_FAILURE() << "Context::create: " << describe(r.status());
    return nullptr;
  }
  return std::move(r).value();
}

std::vector<std::byte> pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(seed + i * 131 + (i >> 9)));
  return v;
}

std::vector<std::byte> to_bytes(const std::vector<uint8_t>& v) {
  std::vector<std::byte> out(v.size());
  std::memcpy(out.data(), v.data(), v.size());
  return out;
}

/// Moves a large message (chunked over every data stream) each way and checks every byte.
void expect_endpoints_work(Endpoint& a, Endpoint& b, size_t bytes = 3 * 1024 * 1024 + 17) {
  const auto ab = pattern(bytes, 1), ba = pattern(bytes, 2);
  std::vector<std::byte> in_b(bytes), in_a(bytes);
  Request rb = b.recv(in_b, Tag{11});
  Request ra = a.recv(in_a, Tag{12});
  Request sa = a.send(ab, Tag{11});
  Request sb = b.send(ba, Tag{12});
  ASSERT_TRUE(sa.wait(30s).is_ok());
  ASSERT_TRUE(sb.wait(30s).is_ok());
  ASSERT_TRUE(rb.wait(30s).is_ok());
  ASSERT_TRUE(ra.wait(30s).is_ok());
  EXPECT_EQ(rb.bytes(), bytes);
  EXPECT_TRUE(in_b == ab) << "the message a -> b arrived with different bytes";
  EXPECT_TRUE(in_a == ba) << "the message b -> a arrived with different bytes";
}

class Auth : public ::testing::Test {
 protected:
  void listen(std::optional<AuthKey> key) {
    server_ = keyed_context(key);
    ASSERT_TRUE(server_);
    auto l = server_->listen("127.0.0.1:0");
    ASSERT_TRUE(l) << describe(l.status());
    listener_ = std::move(l).value();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(listener_->port()); }

  /// connect() from a context with `key`, accepting meanwhile. Both results.
  std::pair<Result<std::shared_ptr<Endpoint>>, Result<std::shared_ptr<Endpoint>>> connect_with(
      std::optional<AuthKey> key, Context** client_out = nullptr) {
    clients_.push_back(keyed_context(key));
    if (client_out) *client_out = clients_.back().get();
    auto accepted = std::async(std::launch::async, [&] { return listener_->accept(3s); });
    auto c = clients_.back()->connect(address(), 10s);
    return {std::move(c), accepted.get()};
  }

  void expect_no_endpoint_appears() {
    auto a = listener_->accept(300ms);
    EXPECT_FALSE(a) << "an unauthenticated peer was handed to accept()";
    if (!a) {
      EXPECT_EQ(a.status().code(), StatusCode::kTimeout) << describe(a.status());
    }
  }

  /// A keyed client still gets a working endpoint.
  void expect_keyed_client_served(const AuthKey& key) {
    auto [c, a] = connect_with(key);
    ASSERT_TRUE(c) << describe(c.status());
    ASSERT_TRUE(a) << describe(a.status());
    expect_endpoints_work(**c, **a, 64 * 1024);
  }

  std::unique_ptr<Context> server_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<Context>> clients_;
};

TEST_F(Auth, RightKeyGivesEndpointWithEveryStreamAndRma) {
  const AuthKey key = key_of("job secret 42");
  listen(key);
  Context* client = nullptr;
  auto [c, a] = connect_with(key, &client);
  ASSERT_TRUE(c) << describe(c.status());
  ASSERT_TRUE(a) << describe(a.status());
  expect_endpoints_work(**c, **a);
  // One-sided access with the key: a chunked put and get against the server's region.
  std::vector<std::byte> target(2 * 1024 * 1024);
  auto region = server_->register_memory(target.data(), target.size(), Access::kRemoteRead | Access::kRemoteWrite);
  ASSERT_TRUE(region) << describe(region.status());
  const auto rkey = region->remote_key();
  const auto src = pattern(target.size(), 9);
  ASSERT_TRUE((*c)->put(src, rkey, 0).wait(30s).is_ok());
  EXPECT_TRUE(target == src) << "the put landed different bytes";
  std::vector<std::byte> back(target.size());
  ASSERT_TRUE((*c)->get(back, rkey, 0).wait(30s).is_ok());
  EXPECT_TRUE(back == src) << "the get read different bytes";
}

TEST_F(Auth, ClientWithoutKeyIsRefused) {
  const AuthKey key = key_of("job secret");
  listen(key);
  auto [c, a] = connect_with(std::nullopt);
  ASSERT_FALSE(c) << "a client without the key got an endpoint";
  EXPECT_EQ(c.status().code(), StatusCode::kAccessDenied) << describe(c.status());
  EXPECT_NE(c.status().message().find("REMORA_AUTH_KEY"), std::string::npos) << c.status().message();
  EXPECT_FALSE(a) << "the listener handed out an endpoint for a client without the key";
  expect_keyed_client_served(key);
}

TEST_F(Auth, WrongKeyIsRefused) {
  const AuthKey key = key_of("job secret");
  listen(key);
  auto [c, a] = connect_with(key_of("job secreT"));
  ASSERT_FALSE(c) << "a client with another key got an endpoint";
  EXPECT_EQ(c.status().code(), StatusCode::kAccessDenied) << describe(c.status());
  EXPECT_NE(c.status().message().find("differs"), std::string::npos) << c.status().message();
  EXPECT_FALSE(a) << "the listener handed out an endpoint for a client with another key";
  expect_keyed_client_served(key);
}

TEST_F(Auth, KeyedClientRefusesListenerWithoutKey) {
  listen(std::nullopt);
  auto [c, a] = connect_with(key_of("job secret"));
  ASSERT_FALSE(c) << "a keyed client accepted a listener that proved nothing";
  EXPECT_EQ(c.status().code(), StatusCode::kAccessDenied) << describe(c.status());
  EXPECT_NE(c.status().message().find("without proving"), std::string::npos) << c.status().message();
  // Its data streams never came: the half-made endpoint is never handed to accept().
  EXPECT_FALSE(a);
  // Without keys on either side, behaviour is as before.
  auto [c2, a2] = connect_with(std::nullopt);
  ASSERT_TRUE(c2) << describe(c2.status());
  ASSERT_TRUE(a2) << describe(a2.status());
  expect_endpoints_work(**c2, **a2, 64 * 1024);
}

// A liveness probe (role 3, what Communicator::failed_ranks sends) is answered before
// any authentication, with status 0 and no endpoint id, and makes no endpoint; the
// connection is closed and the listener serves keyed clients as before.
TEST_F(Auth, AProbeIsAnsweredWithoutAuthenticationAndMakesNoEndpoint) {
  const AuthKey key = key_of("job secret");
  listen(key);
  for (int i = 0; i < 3; ++i) {
    std::string err;
    raw::Socket s = raw::Socket::connect_to("127.0.0.1", listener_->port(), &err);
    ASSERT_TRUE(s.valid()) << err;
    raw::Hello probe;
    probe.role = 3;
    ASSERT_TRUE(s.send_all(raw::encode(probe), &err)) << err;
    auto reply = s.recv_exact(raw::kHelloSize, 10s, &err);
    ASSERT_TRUE(reply) << "no answer to a probe: " << err;
    const raw::HelloAck ack = raw::decode_ack(*reply);
    EXPECT_EQ(ack.magic, 0x41524D52u);
    EXPECT_EQ(ack.status, 0) << "a probe's answer is status 0, not an AUTH challenge";
    EXPECT_EQ(ack.endpoint_id, 0u) << "a probe gets no endpoint";
    EXPECT_TRUE(s.wait_closed(10s)) << "the listener kept a probe's connection open";
  }
  expect_no_endpoint_appears();
  expect_keyed_client_served(key);
}

TEST_F(Auth, DataStreamAttachWithoutProofIsRefusedAndEndpointGoesOn) {
  const AuthKey key = key_of("job secret");
  listen(key);
  auto [c, a] = connect_with(key);
  ASSERT_TRUE(c) << describe(c.status());
  ASSERT_TRUE(a) << describe(a.status());
  std::string err;
  raw::Hello dh;
  dh.role = 2;
  dh.endpoint_id = 1;
  dh.attach_token = 2;
  dh.stream_count = 3;
  {
    SCOPED_TRACE("a data HELLO that does not offer to authenticate");
    raw::Socket s = raw::Socket::connect_to("127.0.0.1", listener_->port(), &err);
    ASSERT_TRUE(s.valid()) << err;
    ASSERT_TRUE(s.send_all(raw::encode(dh), &err)) << err;
    auto reply = s.recv_exact(raw::kHelloSize, 10s, &err);
    ASSERT_TRUE(reply) << err;
    EXPECT_EQ(raw::decode_ack(*reply).status, 5) << "expected status 5 (unauthenticated), before any token check";
    EXPECT_TRUE(s.wait_closed(10s));
  }
  for (const char* what : {"a random proof", "a proof made with another key"}) {
    SCOPED_TRACE(what);
    raw::Socket s = raw::Socket::connect_to("127.0.0.1", listener_->port(), &err);
    ASSERT_TRUE(s.valid()) << err;
    raw::Hello h = dh;
    h.capabilities = wire::kCapAuth;
    const std::vector<uint8_t> hello = raw::encode(h);
    ASSERT_TRUE(s.send_all(hello, &err)) << err;
    auto reply = s.recv_exact(raw::kHelloSize + wire::kAuthSize, 10s, &err);
    ASSERT_TRUE(reply) << err;
    EXPECT_EQ(raw::decode_ack(std::vector<uint8_t>(reply->begin(), reply->begin() + raw::kHelloSize)).status, 4);
    auto challenge = wire::decode_auth(to_bytes(std::vector<uint8_t>(reply->begin() + raw::kHelloSize, reply->end())));
    ASSERT_TRUE(challenge) << describe(challenge.status());
    ASSERT_EQ(challenge->step, wire::AuthStep::kChallenge);
    const wire::AuthNonce nonce = wire::fresh_auth_nonce();
    wire::AuthProof proof = wire::fresh_auth_nonce();
    if (std::strcmp(what, "a random proof") != 0) {
      proof = wire::auth_proof(key_of("other").bytes, wire::AuthRole::kClient, to_bytes(hello), challenge->nonce, nonce);
    }
    const auto response = wire::encode_auth({.step = wire::AuthStep::kResponse, .nonce = nonce, .proof = proof});
    ASSERT_TRUE(s.send_all(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(response.data()),
                                                 reinterpret_cast<const uint8_t*>(response.data()) + response.size()),
                           &err))
        << err;
    auto verdict = s.recv_exact(wire::kAuthSize, 10s, &err);
    ASSERT_TRUE(verdict) << err;
    auto m = wire::decode_auth(to_bytes(*verdict));
    ASSERT_TRUE(m) << describe(m.status());
    EXPECT_EQ(m->step, wire::AuthStep::kRefused);
    EXPECT_TRUE(s.wait_closed(10s)) << "a refused data connection stays open";
  }
  // The endpoint is unaffected.
  expect_endpoints_work(**c, **a, 1024 * 1024);
}

TEST(AuthClient, RefusesAListenerWhoseProofIsWrong) {
  // A raw listener that plays the keyed server's part without the key: a challenge, then
  // a confirmation carrying a proof it could not make. The client must not trust the
  // HELLO_ACK that follows (an accepted one, with an endpoint id).
  raw::Listener fake;
  ASSERT_TRUE(fake.valid());
  auto server = std::async(std::launch::async, [&]() -> std::string {
    std::string err;
    raw::Socket s = fake.accept(10s, &err);
    if (!s.valid()) return "accept: " + err;
    if (!s.recv_exact(raw::kHelloSize, 10s, &err)) return "HELLO: " + err;
    raw::HelloAck ack{.magic = 0x41524D52, .version = 1, .status = 4, .capabilities = wire::kCapAuth,
                      .stream_count = 3, .rma_window = 256};
    std::vector<uint8_t> out = raw::encode(ack);
    const auto challenge = wire::encode_auth({.step = wire::AuthStep::kChallenge, .nonce = wire::fresh_auth_nonce()});
    for (std::byte b : challenge) out.push_back(std::to_integer<uint8_t>(b));
    if (!s.send_all(out, &err)) return "challenge: " + err;
    if (!s.recv_exact(wire::kAuthSize, 10s, &err)) return "response: " + err;
    out.clear();
    const auto confirm = wire::encode_auth({.step = wire::AuthStep::kConfirm, .proof = wire::fresh_auth_nonce()});
    for (std::byte b : confirm) out.push_back(std::to_integer<uint8_t>(b));
    raw::HelloAck accepted = ack;
    accepted.status = 0;
    accepted.endpoint_id = 7;
    accepted.attach_token = 9;
    const auto tail = raw::encode(accepted);
    out.insert(out.end(), tail.begin(), tail.end());
    if (!s.send_all(out, &err)) return "confirm: " + err;
    // The client opens no data connection: it refused at the proof.
    raw::Socket data = fake.accept(500ms, &err);
    return data.valid() ? "the client opened a data connection after a wrong proof" : "";
  });
  auto client = keyed_context(key_of("job secret"));
  ASSERT_TRUE(client);
  auto c = client->connect("127.0.0.1:" + std::to_string(fake.port()), 10s);
  ASSERT_FALSE(c) << "the client trusted a listener that did not prove the key";
  EXPECT_EQ(c.status().code(), StatusCode::kAccessDenied) << describe(c.status());
  EXPECT_NE(c.status().message().find("could not prove"), std::string::npos) << c.status().message();
  EXPECT_EQ(server.get(), "");
}

/// Relays every connection made to it to `target`, recording what each client sent and
/// what the server answered, in order of acceptance.
class RecordingProxy {
 public:
  explicit RecordingProxy(uint16_t target) : target_(target) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "proxy: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~RecordingProxy() { stop(); }
  uint16_t port() const { return port_; }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto& c : conns_) {
      ::close(c.client);
      ::close(c.server);
    }
    conns_.clear();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  /// After stop(): what the i-th client sent, and what the server sent it.
  const std::vector<uint8_t>& sent(size_t i) const { return sent_.at(i); }
  const std::vector<uint8_t>& answered(size_t i) const { return answered_.at(i); }
  size_t connections() const { return sent_.size(); }

 private:
  struct Conn {
    int client, server;
    size_t index;
    bool open = true;
  };
  void run() {
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (auto& c : conns_) {
        fds.push_back({c.open ? c.client : -1, POLLIN, 0});
        fds.push_back({c.open ? c.server : -1, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;  // a bounded wait, to notice stop_
      if (fds[0].revents & POLLIN) accept_one();
      for (size_t i = 0; i < conns_.size() && 2 * i + 2 < fds.size(); ++i) {
        Conn& c = conns_[i];
        if (fds[2 * i + 1].revents != 0) pump(c, c.client, c.server, sent_[c.index]);
        if (c.open && fds[2 * i + 2].revents != 0) pump(c, c.server, c.client, answered_[c.index]);
      }
    }
  }
  void accept_one() {
    const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target_);
    if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(client);
      ::close(server);
      return;
    }
    conns_.push_back({client, server, sent_.size()});
    sent_.emplace_back();
    answered_.emplace_back();
  }
  void pump(Conn& c, int from, int to, std::vector<uint8_t>& record) {
    uint8_t buf[64 * 1024];
    const ssize_t n = ::recv(from, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      ::shutdown(c.client, SHUT_RDWR);
      ::shutdown(c.server, SHUT_RDWR);
      c.open = false;
      return;
    }
    if (n < 0) return;
    record.insert(record.end(), buf, buf + n);
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::send(to, buf + done, static_cast<size_t>(n - done), MSG_NOSIGNAL);
      if (w <= 0) return;
      done += w;
    }
  }

  uint16_t target_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<Conn> conns_;
  std::vector<std::vector<uint8_t>> sent_, answered_;
};

TEST_F(Auth, ReplayedHandshakeIsRefusedAndReachesNoMemory) {
  const AuthKey key = key_of("job secret");
  listen(key);
  std::vector<std::byte> target(4096, std::byte{0x5A});
  auto region = server_->register_memory(target.data(), target.size(), Access::kRemoteRead | Access::kRemoteWrite);
  ASSERT_TRUE(region) << describe(region.status());
  RecordingProxy proxy(listener_->port());
  {
    auto client = keyed_context(key);
    ASSERT_TRUE(client);
    auto accepted = std::async(std::launch::async, [&] { return listener_->accept(10s); });
    auto c = client->connect("127.0.0.1:" + std::to_string(proxy.port()), 10s);
    auto a = accepted.get();
    ASSERT_TRUE(c) << "a real handshake through the recording proxy: " << describe(c.status());
    ASSERT_TRUE(a) << describe(a.status());
    expect_endpoints_work(**c, **a, 4096);
    (*c)->close();
    (*a)->close();
  }
  proxy.stop();
  ASSERT_EQ(proxy.connections(), 4u) << "control + 3 data connections";
  const size_t handshake = raw::kHelloSize + wire::kAuthSize;
  std::string err;
  for (size_t i = 0; i < proxy.connections(); ++i) {
    SCOPED_TRACE("replaying connection " + std::to_string(i) + (i == 0 ? " (control)" : " (data)"));
    const auto& sent = proxy.sent(i);
    ASSERT_GE(sent.size(), handshake);
    const std::vector<uint8_t> hello(sent.begin(), sent.begin() + raw::kHelloSize);
    const std::vector<uint8_t> response(sent.begin() + raw::kHelloSize, sent.begin() + handshake);
    ASSERT_NE(raw::decode_hello(hello).capabilities & wire::kCapAuth, 0u) << "the keyed client did not offer AUTH";
    raw::Socket s = raw::Socket::connect_to("127.0.0.1", listener_->port(), &err);
    ASSERT_TRUE(s.valid()) << err;
    ASSERT_TRUE(s.send_all(hello, &err)) << err;
    auto reply = s.recv_exact(handshake, 10s, &err);
    ASSERT_TRUE(reply) << err;
    EXPECT_EQ(raw::decode_ack(std::vector<uint8_t>(reply->begin(), reply->begin() + raw::kHelloSize)).status, 4);
    const auto& recorded = proxy.answered(i);
    ASSERT_GE(recorded.size(), handshake);
    EXPECT_FALSE(std::equal(reply->begin() + raw::kHelloSize, reply->end(), recorded.begin() + raw::kHelloSize))
        << "the listener challenged the replay with the nonce of the recorded session";
    // The recorded proof, then a put into the region with its real key, as if accepted.
    std::vector<uint8_t> attack = response;
    const auto payload = pattern(64, 3);
    wire::PutFrame put{.op_id = 1, .offset = 0, .length = payload.size(), .inline_data = true, .payload = payload};
    put.key = region->remote_key().serialize();
    std::vector<std::byte> frame(wire::encoded_size(wire::Frame{put}));
    wire::encode(wire::Frame{put}, frame);
    for (std::byte b : frame) attack.push_back(std::to_integer<uint8_t>(b));
    ASSERT_TRUE(s.send_all(attack, &err)) << err;
    auto verdict = s.recv_exact(wire::kAuthSize, 10s, &err);
    ASSERT_TRUE(verdict) << "no refusal for the replayed proof: " << err;
    auto m = wire::decode_auth(to_bytes(*verdict));
    ASSERT_TRUE(m) << describe(m.status());
    EXPECT_EQ(m->step, wire::AuthStep::kRefused);
    EXPECT_TRUE(s.wait_closed(10s)) << "a replayed handshake's connection stays open";
  }
  expect_no_endpoint_appears();
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](std::byte b) { return b == std::byte{0x5A}; }))
      << "a replayed handshake reached the region";
}

// --- the rendezvous store ---------------------------------------------------------------

TEST(AuthStore, KeyedStoreServesKeyedClientsOnly) {
  const AuthKey key = key_of("store secret");
  auto server = StoreServer::start("127.0.0.1:0", key);
  ASSERT_TRUE(server) << describe(server.status());
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());

  auto good = Store::connect(address, 10s, key);
  ASSERT_TRUE(good) << describe(good.status());
  ASSERT_TRUE((*good)->set("k", "value").is_ok());

  auto none = Store::connect(address, 10s, std::nullopt);
  ASSERT_TRUE(none) << describe(none.status());  // TCP only: the refusal comes with the first request
  auto got = (*none)->get("k", 1s);
  ASSERT_FALSE(got) << "a client without the key read the store";
  EXPECT_EQ(got.status().code(), StatusCode::kAccessDenied) << describe(got.status());
  EXPECT_FALSE((*none)->set("k", "overwritten").is_ok());

  auto wrong = Store::connect(address, 10s, key_of("store secreT"));
  ASSERT_FALSE(wrong) << "a client with another key was let in";
  EXPECT_EQ(wrong.status().code(), StatusCode::kAccessDenied) << describe(wrong.status());

  auto v = (*good)->get("k", 5s);
  ASSERT_TRUE(v) << describe(v.status());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(v->data()), v->size()), "value")
      << "an unauthenticated client changed the value";
}

TEST(AuthStore, KeyedClientRefusesStoreWithoutKey) {
  auto server = StoreServer::start("127.0.0.1:0", std::nullopt);
  ASSERT_TRUE(server) << describe(server.status());
  auto c = Store::connect("127.0.0.1:" + std::to_string((*server)->port()), 10s, key_of("secret"));
  ASSERT_FALSE(c) << "a keyed client accepted a store that proved nothing";
  EXPECT_EQ(c.status().code(), StatusCode::kAccessDenied) << describe(c.status());
}

TEST(AuthStore, ReplayedStoreHandshakeIsRefused) {
  const AuthKey key = key_of("store secret");
  auto server = StoreServer::start("127.0.0.1:0", key);
  ASSERT_TRUE(server) << describe(server.status());
  const uint16_t port = (*server)->port();
  RecordingProxy proxy(port);
  {
    auto c = Store::connect("127.0.0.1:" + std::to_string(proxy.port()), 10s, key);
    ASSERT_TRUE(c) << describe(c.status());
    ASSERT_TRUE((*c)->set("a", "1").is_ok());
  }
  proxy.stop();
  ASSERT_EQ(proxy.connections(), 1u);
  const auto& sent = proxy.sent(0);
  ASSERT_GE(sent.size(), 2 * wire::kAuthSize);
  std::string err;
  raw::Socket s = raw::Socket::connect_to("127.0.0.1", port, &err);
  ASSERT_TRUE(s.valid()) << err;
  ASSERT_TRUE(s.send_all(std::vector<uint8_t>(sent.begin(), sent.begin() + wire::kAuthSize), &err)) << err;
  ASSERT_TRUE(s.recv_exact(wire::kAuthSize, 10s, &err)) << err;  // a fresh challenge
  // The recorded response and the recorded request after it.
  ASSERT_TRUE(s.send_all(std::vector<uint8_t>(sent.begin() + wire::kAuthSize, sent.end()), &err)) << err;
  auto verdict = s.recv_exact(wire::kAuthSize, 10s, &err);
  ASSERT_TRUE(verdict) << err;
  auto m = wire::decode_auth(to_bytes(*verdict));
  ASSERT_TRUE(m) << describe(m.status());
  EXPECT_EQ(m->step, wire::AuthStep::kRefused);
  EXPECT_TRUE(s.wait_closed(10s));
}

// --- configuration ---------------------------------------------------------------------

struct TempFile {
  explicit TempFile(const std::string& content) {
    char name[] = "/tmp/remora_auth_key_XXXXXX";
    const int fd = ::mkstemp(name);
    path = name;
    if (fd >= 0) {
      EXPECT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
      ::close(fd);
    }
  }
  ~TempFile() { ::unlink(path.c_str()); }
  std::string path;
};

TEST(AuthConfig, KeyFileGivesTheSameKeyAsTheSecret) {
  TempFile file("file secret\n");
  ScopedEnv unset_inline("REMORA_AUTH_KEY", "x");
  ::unsetenv("REMORA_AUTH_KEY");
  ScopedEnv env("REMORA_AUTH_KEY_FILE", file.path.c_str());
  auto from_env = AuthKey::from_env();
  ASSERT_TRUE(from_env) << describe(from_env.status());
  ASSERT_TRUE(from_env->has_value());
  EXPECT_EQ((*from_env)->bytes, key_of("file secret").bytes) << "one trailing newline is not part of the secret";
  // A context from the environment authenticates against one given the secret itself.
  auto server = keyed_context(key_of("file secret"));
  ASSERT_TRUE(server);
  auto l = server->listen("127.0.0.1:0");
  ASSERT_TRUE(l) << describe(l.status());
  auto client = Context::create(ContextOptions{});
  ASSERT_TRUE(client) << describe(client.status());
  ASSERT_TRUE((*client)->config().auth_key.has_value());
  auto accepted = std::async(std::launch::async, [&] { return (*l)->accept(10s); });
  auto c = (*client)->connect("127.0.0.1:" + std::to_string((*l)->port()), 10s);
  ASSERT_TRUE(c) << describe(c.status());
  ASSERT_TRUE(accepted.get());
}

TEST(AuthConfig, BadKeysAreRefusedAtCreation) {
  ScopedEnv clear_inline("REMORA_AUTH_KEY", "x");
  ScopedEnv clear_file("REMORA_AUTH_KEY_FILE", "x");
  ::unsetenv("REMORA_AUTH_KEY");
  ::unsetenv("REMORA_AUTH_KEY_FILE");
  auto expect_refused = [](const char* variable, const char* why) {
    SCOPED_TRACE(why);
    auto ctx = Context::create(ContextOptions{});
    ASSERT_FALSE(ctx) << "Context::create accepted " << why;
    EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ctx.status().message().find(variable), std::string::npos) << ctx.status().message();
    auto store = StoreServer::start("127.0.0.1:0");
    ASSERT_FALSE(store) << "StoreServer::start accepted " << why;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  };
  {
    ScopedEnv e("REMORA_AUTH_KEY", "");
    expect_refused("REMORA_AUTH_KEY", "an empty REMORA_AUTH_KEY");
  }
  {
    ScopedEnv e("REMORA_AUTH_KEY_FILE", "/nonexistent/remora-key");
    expect_refused("REMORA_AUTH_KEY_FILE", "a missing key file");
  }
  {
    TempFile empty("\n");
    ScopedEnv e("REMORA_AUTH_KEY_FILE", empty.path.c_str());
    expect_refused("REMORA_AUTH_KEY_FILE", "a key file holding only a newline");
  }
  {
    TempFile f("secret");
    ScopedEnv e1("REMORA_AUTH_KEY", "secret");
    ScopedEnv e2("REMORA_AUTH_KEY_FILE", f.path.c_str());
    expect_refused("REMORA_AUTH_KEY_FILE", "both variables set");
  }
  auto plain = Context::create(ContextOptions{});
  ASSERT_TRUE(plain) << describe(plain.status());
  EXPECT_FALSE((*plain)->config().auth_key.has_value()) << "no variable set must mean no authentication";
}

// --- what a process logs ---------------------------------------------------------------

// Run as a child of the tests below (AUTH_TEST_CHILD names what to do); skipped otherwise.
TEST(AuthChild, Run) {
  const char* mode = std::getenv(kChildVariable);
  if (mode == nullptr) GTEST_SKIP() << "runs only as a child of AuthLog.*";
  const std::string m = mode;
  if (m == "open" || m == "keyed") {
    // Two endpoint listeners and a store on the wildcard address, one on loopback.
    std::optional<AuthKey> key;
    if (m == "keyed") key = key_of("k");
    auto ctx = keyed_context(key);
    ASSERT_TRUE(ctx);
    auto l1 = ctx->listen("0.0.0.0:0");
    auto l2 = ctx->listen("0.0.0.0:0");
    auto l3 = ctx->listen("127.0.0.1:0");
    ASSERT_TRUE(l1 && l2 && l3);
    auto s = StoreServer::start("0.0.0.0:0", key);
    ASSERT_TRUE(s) << describe(s.status());
  } else if (m == "refusals") {
    auto server = keyed_context(key_of("k"));
    ASSERT_TRUE(server);
    auto l = server->listen("127.0.0.1:0");
    ASSERT_TRUE(l);
    const std::string address = "127.0.0.1:" + std::to_string((*l)->port());
    auto none = keyed_context(std::nullopt);
    auto wrong = keyed_context(key_of("K"));
    EXPECT_EQ(none->connect(address, 10s).status().code(), StatusCode::kAccessDenied);
    EXPECT_EQ(wrong->connect(address, 10s).status().code(), StatusCode::kAccessDenied);
    auto store = StoreServer::start("127.0.0.1:0", key_of("k"));
    ASSERT_TRUE(store);
    const std::string store_address = "127.0.0.1:" + std::to_string((*store)->port());
    auto unkeyed = Store::connect(store_address, 10s, std::nullopt);
    ASSERT_TRUE(unkeyed);
    EXPECT_EQ((*unkeyed)->check("x").status().code(), StatusCode::kAccessDenied);
    EXPECT_EQ(Store::connect(store_address, 10s, key_of("K")).status().code(), StatusCode::kAccessDenied);
  }
}

std::string run_child(const std::string& mode) {
  auto p = spawn_program({"/proc/self/exe", "--gtest_filter=AuthChild.Run"},
                         {std::string(kChildVariable) + "=" + mode, "REMORA_LOG=warn"});
  auto [out, status] = finish(*p, 60s);
  EXPECT_TRUE(Process::exited_ok(status)) << Process::describe(status) << "\n" << out;
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(AuthLog, NonLoopbackListenerWithoutKeyWarnsOncePerProcess) {
  const std::string warning = "which is not a loopback address, and no REMORA_AUTH_KEY is set";
  const std::string open = run_child("open");
  EXPECT_EQ(count(open, warning), 1u) << open;
  const std::string keyed = run_child("keyed");
  EXPECT_EQ(count(keyed, warning), 0u) << keyed;
}

TEST(AuthLog, RefusalsAreLoggedWithThePeersAddressAndReason) {
  const std::string out = run_child("refusals");
  EXPECT_NE(out.find("refusing 127.0.0.1:"), std::string::npos) << out;
  EXPECT_GE(count(out, "no authentication proof"), 2u) << "endpoint and store, client without a key\n" << out;
  EXPECT_GE(count(out, "wrong authentication proof"), 2u) << "endpoint and store, client with another key\n" << out;
  EXPECT_NE(out.find("store server: refusing 127.0.0.1:"), std::string::npos) << out;
}

// --- a job ---------------------------------------------------------------------------

TEST(AuthJob, RemoraRunWithTheKeyInTheEnvironment) {
  auto p = spawn_program({REMORA_TOOL_PATH, "run", "-n", "2", "--timeout", "100", "--", REMORA_COLL_PEER_PATH},
                         {"REMORA_COLL_TIMEOUT_MS=60000", "REMORA_AUTH_KEY=job-secret-for-this-test"});
  auto [out, status] = finish(*p);
  EXPECT_TRUE(Process::exited_ok(status)) << Process::describe(status) << "\n" << out;
  for (int r = 0; r < 2; ++r) EXPECT_NE(out.find("rank " + std::to_string(r) + " of 2 ok"), std::string::npos) << out;
  EXPECT_EQ(out.find("REMORA_AUTH_KEY is set"), std::string::npos) << "no unknown-variable or open-listener warning\n" << out;
  EXPECT_EQ(out.find("unknown environment variable"), std::string::npos) << out;
}

TEST(AuthJob, EveryRankReadsTheKeyFromItsEnvironment) {
  // A key file nobody can read fails every rank at Context::create, naming the variable:
  // the ranks of a job do read it (a rank that ignored it would run unauthenticated).
  auto p = spawn_program({REMORA_TOOL_PATH, "run", "-n", "2", "--timeout", "100", "--", REMORA_COLL_PEER_PATH},
                         {"REMORA_COLL_TIMEOUT_MS=60000", "REMORA_AUTH_KEY_FILE=/nonexistent/remora-job-key"});
  auto [out, status] = finish(*p);
  EXPECT_FALSE(Process::exited_ok(status)) << out;
  EXPECT_NE(out.find("REMORA_AUTH_KEY_FILE"), std::string::npos) << out;
}

}  // namespace
}  // namespace remora::itest
