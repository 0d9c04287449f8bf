// Encryption in flight (REMORA_ENCRYPT, docs/encryption.md) over real loopback sockets,
// with same-host pulls off so every byte goes over TCP: every transfer kind intact with 1
// and 2 data streams; a relay between the two endpoints that records every byte finds a
// known 64-byte pattern and a serialized remote key without encryption and neither with
// it, and so does tcpdump on the veth between two network namespaces; the same relay flipping a byte in, dropping,
// replaying or reordering a record on the control stream or on a data stream makes the receiving endpoint fail with
// kProtocol
// ("failed authentication", the peer's address), the other fail too, and the receive
// buffer holds nothing but a prefix of valid bytes; mismatched settings are refused at
// connect naming REMORA_ENCRYPT; no key is refused at Context::create naming both.
#include <netinet/in.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "core/little_endian.h"
#include "itest_util.h"
#include "net/seal.h"
#include "net/socket.h"
#include "remora/memory.h"
#include "remora/store.h"
#include "remora/testing/test_device.h"
#include "support/netns.h"
#include "support/process.h"
#include "support/raw_wire.h"
#include "wire/auth.h"
#include "wire/handshake.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;

AuthKey key_of(std::string_view secret) {
  auto k = AuthKey::from_secret(secret);
  EXPECT_TRUE(k) << describe(k.status());
  return k ? *k : AuthKey{};
}

std::unique_ptr<Context> make_context(EncryptMode mode, uint32_t streams, std::optional<AuthKey> key = std::nullopt) {
  if (!key) key = key_of("encryption test secret");  // both sides authenticate, encrypting or not
  auto r = Context::create(ContextOptions{.streams_per_endpoint = streams,
                                          .handshake_timeout_ms = 5000,
                                          .peer_timeout_ms = 60000,
                                          .same_host_pulls = false,
                                          .encrypt = mode,
                                          .auth_key = key,
                                          .ignore_env = true});
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

/// What the relay does to the client's bytes on one connection, after the handshake.
enum class Tamper { kNone, kFlip, kDrop, kReplay, kReorder };

/// Relays every connection made to it to `target` (accepted in order: the control
/// stream, then data streams 0, 1, ...), recording every byte both ways. On connection
/// `victim` it parses the client's records (`tag` bytes of tag each) after the handshake
/// (HELLO and AUTH response, 120 bytes) and applies `tamper` to record `record`.
class Relay {
 public:
  Relay(uint16_t target, size_t victim = 0, Tamper tamper = Tamper::kNone, size_t record = 0,
        size_t tag = net::kSealTagSize)
      : target_(target), victim_(victim), tamper_(tamper), record_(record), tag_(tag) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "relay: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() { stop(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
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
  /// After stop(): every byte relayed, both ways, all connections.
  const std::vector<uint8_t>& all() const { return all_; }
  bool tampered() const { return tampered_; }

 private:
  static constexpr size_t kClientHandshake = wire::kHelloSize + wire::kAuthSize;
  struct Conn {
    int client = -1, server = -1;
    size_t index = 0;
    bool open = true;
    std::vector<uint8_t> pending;  // the victim's client bytes not yet forwarded
    size_t handshake_left = kClientHandshake;
    size_t records = 0;
    std::vector<uint8_t> held;  // a record held back (reorder)
  };
  void run() {
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (auto& c : conns_) {
        fds.push_back({c.open ? c.client : -1, POLLIN, 0});
        fds.push_back({c.open ? c.server : -1, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;  // bounded: notices stop_
      if (fds[0].revents & POLLIN) accept_one();
      for (size_t i = 0; i < conns_.size() && 2 * i + 2 < fds.size(); ++i) {
        Conn& c = conns_[i];
        if (fds[2 * i + 1].revents != 0) pump(c, true);
        if (c.open && fds[2 * i + 2].revents != 0) pump(c, false);
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
    Conn c;
    c.client = client;
    c.server = server;
    c.index = conns_.size();
    conns_.push_back(std::move(c));
  }
  static void close_both(Conn& c) {
    ::shutdown(c.client, SHUT_RDWR);
    ::shutdown(c.server, SHUT_RDWR);
    c.open = false;
  }
  void forward(Conn& c, int to, const uint8_t* p, size_t n) {
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::send(to, p + done, n - done, MSG_NOSIGNAL);
      if (w <= 0) {
        // The receiving side is gone (a failed endpoint closes its sockets, often with
        // unread bytes: a reset): end the other side too, as a closed path would, or
        // its endpoint would learn of it only from its peer timeout (60 s).
        close_both(c);
        return;
      }
      done += static_cast<size_t>(w);
    }
  }
  void pump(Conn& c, bool from_client) {
    uint8_t buf[64 * 1024];
    const ssize_t n = ::recv(from_client ? c.client : c.server, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      close_both(c);
      return;
    }
    if (n < 0) return;
    all_.insert(all_.end(), buf, buf + n);
    if (!from_client || c.index != victim_ || tamper_ == Tamper::kNone) {
      forward(c, from_client ? c.server : c.client, buf, static_cast<size_t>(n));
      return;
    }
    c.pending.insert(c.pending.end(), buf, buf + n);
    size_t at = 0;
    if (c.handshake_left > 0) {
      const size_t k = std::min(c.handshake_left, c.pending.size());
      forward(c, c.server, c.pending.data(), k);
      c.handshake_left -= k;
      at = k;
    }
    while (c.handshake_left == 0 && c.pending.size() - at >= net::kSealHeaderSize) {
      const uint32_t len = core::load_u32(reinterpret_cast<const std::byte*>(c.pending.data() + at));
      const size_t whole = net::kSealHeaderSize + len + tag_;
      if (c.pending.size() - at < whole) break;
      std::vector<uint8_t> rec(c.pending.begin() + static_cast<ptrdiff_t>(at),
                               c.pending.begin() + static_cast<ptrdiff_t>(at + whole));
      at += whole;
      const size_t i = c.records++;
      if (i == record_) {
        tampered_ = true;
        if (tamper_ == Tamper::kFlip) rec[net::kSealHeaderSize + len / 2] ^= 0x01;
        if (tamper_ == Tamper::kDrop) continue;
        if (tamper_ == Tamper::kReplay) forward(c, c.server, rec.data(), rec.size());
        if (tamper_ == Tamper::kReorder) {
          c.held = rec;
          continue;
        }
      }
      forward(c, c.server, rec.data(), rec.size());
      if (i == record_ + 1 && !c.held.empty()) forward(c, c.server, c.held.data(), c.held.size());
    }
    c.pending.erase(c.pending.begin(), c.pending.begin() + static_cast<ptrdiff_t>(at));
  }

  uint16_t target_;
  size_t victim_;
  Tamper tamper_;
  size_t record_;
  size_t tag_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> tampered_{false};
  std::thread thread_;
  std::vector<Conn> conns_;
  std::vector<uint8_t> all_;
};

/// A pair of endpoints, the client connected through a relay when one is given.
struct Pair {
  std::unique_ptr<Context> server, client;
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Endpoint> c, s;

  Status connect(EncryptMode server_mode, EncryptMode client_mode, uint32_t streams, uint16_t* port) {
    server = make_context(server_mode, streams);
    client = make_context(client_mode, streams);
    if (!server || !client) return Status(StatusCode::kInternal, "no context");
    auto l = server->listen("127.0.0.1:0");
    if (!l) return l.status();
    listener = std::move(l).value();
    if (port != nullptr) *port = listener->port();
    return Status::ok();
  }
  Status finish(const std::string& address) {
    auto accepted = std::async(std::launch::async, [this] { return listener->accept(10s); });
    auto cr = client->connect(address, 10s);
    auto ar = accepted.get();
    if (!cr) return cr.status();
    if (!ar) return ar.status();
    c = *cr;
    s = *ar;
    return Status::ok();
  }
};

/// Every transfer kind between `a` (initiator) and `b` (target, owning `b_ctx`'s memory).
void expect_every_kind(Context& b_ctx, Endpoint& a, Endpoint& b) {
  // Messages: eager (small) and chunked (a few MiB, every data stream), both ways.
  for (size_t bytes : {size_t{8}, size_t{4000}, size_t{3 * 1024 * 1024 + 17}}) {
    const auto ab = pattern(bytes, 1), ba = pattern(bytes, 2);
    std::vector<std::byte> in_b(bytes), in_a(bytes);
    Request rb = b.recv(in_b, Tag{11});
    Request ra = a.recv(in_a, Tag{12});
    Request sa = a.send(ab, Tag{11});
    Request sb = b.send(ba, Tag{12});
    ASSERT_TRUE(sa.wait(30s).is_ok());
    ASSERT_TRUE(sb.wait(30s).is_ok());
    ASSERT_TRUE(rb.wait(30s).is_ok()) << describe(rb.wait(0s));
    ASSERT_TRUE(ra.wait(30s).is_ok());
    EXPECT_TRUE(in_b == ab) << bytes << " bytes a -> b arrived different";
    EXPECT_TRUE(in_a == ba) << bytes << " bytes b -> a arrived different";
  }
  // One-sided: puts (inline and chunked, one with a notification), gets, atomics.
  std::vector<std::byte> target(4 * 1024 * 1024);
  auto region = b_ctx.register_memory(target.data(), target.size(), kAllAccess);
  ASSERT_TRUE(region) << describe(region.status());
  const RemoteKey rkey = region->remote_key();
  const auto small = pattern(100, 3), large = pattern(3 * 1024 * 1024 + 5, 4);
  ASSERT_TRUE(a.put(small, rkey, 8).wait(30s).is_ok());
  ASSERT_TRUE(a.put(large, rkey, 4096, {.notify = 77}).wait(30s).is_ok());
  auto note = b.wait_notification(30s);
  ASSERT_TRUE(note) << describe(note.status());
  EXPECT_EQ(note->value, 77u);
  EXPECT_EQ(note->length, large.size());
  EXPECT_TRUE(std::equal(small.begin(), small.end(), target.begin() + 8));
  EXPECT_TRUE(std::equal(large.begin(), large.end(), target.begin() + 4096));
  std::vector<std::byte> got_small(small.size()), got_large(large.size());
  ASSERT_TRUE(a.get(got_small, rkey, 8).wait(30s).is_ok());
  ASSERT_TRUE(a.get(got_large, rkey, 4096).wait(30s).is_ok());
  EXPECT_TRUE(got_small == small);
  EXPECT_TRUE(got_large == large);
  uint64_t before = 0, swapped = 0;
  std::memset(target.data(), 0, 8);
  ASSERT_TRUE(a.fetch_add(&before, rkey, 0, 5).wait(30s).is_ok());
  ASSERT_TRUE(a.fetch_add(&before, rkey, 0, 6).wait(30s).is_ok());
  EXPECT_EQ(before, 5u);
  ASSERT_TRUE(a.compare_swap(&swapped, rkey, 0, {.expected = 11, .desired = 99}).wait(30s).is_ok());
  EXPECT_EQ(swapped, 11u);
  uint64_t now = 0;
  std::memcpy(&now, target.data(), 8);
  EXPECT_EQ(now, 99u);
  ASSERT_TRUE(a.flush().wait(30s).is_ok());
}

/// Whether this build or CPU lacks the cipher `mode` names (AES-256-GCM without AES
/// instructions; AEGIS with a libsodium before 1.0.19, where scripts/lib/sodium.sh could
/// not fetch 1.0.22). If so, checks that Context::create refuses it with kUnsupported
/// naming it, so such a build or CPU is tested, not skipped; the caller stops there.
bool refused_here(EncryptMode mode) {
  const std::optional<net::SealCipher> named =
      mode == EncryptMode::kOn ? std::nullopt : net::single_cipher(net::offered_ciphers(mode));
  if (!named || net::cipher_available(*named)) return false;
  auto r = Context::create(
      ContextOptions{.encrypt = mode, .auth_key = key_of("encryption test secret"), .ignore_env = true});
  EXPECT_FALSE(r) << "a build without " << net::cipher_name(*named) << " created a context asked for it";
  if (!r) {
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << describe(r.status());
    EXPECT_NE(r.status().message().find(net::cipher_name(*named)), std::string::npos) << r.status().message();
  }
  return true;
}

class Encrypted : public ::testing::TestWithParam<std::tuple<EncryptMode, uint32_t>> {};

TEST_P(Encrypted, EveryTransferKindIntact) {
  const auto [mode, streams] = GetParam();
  if (refused_here(mode)) return;
  Pair p;
  uint16_t port = 0;
  ASSERT_TRUE(p.connect(mode, mode, streams, &port).is_ok());
  ASSERT_TRUE(p.finish("127.0.0.1:" + std::to_string(port)).is_ok());
  expect_every_kind(*p.server, *p.c, *p.s);
  EXPECT_TRUE(p.c->failure().is_ok());
  EXPECT_TRUE(p.s->failure().is_ok());
}

// Same-host pulls on, both ends in this process (so on one host): a sealed endpoint still
// keeps its control stream sealed on TCP instead of moving it into the shared-memory
// channel (docs/protocol.md), and says why.
TEST(EncryptionSettings, ASealedEndpointKeepsItsControlStreamOffTheSharedMemoryChannel) {
  auto make = [] {
    auto r = Context::create(ContextOptions{.streams_per_endpoint = 1,
                                            .handshake_timeout_ms = 5000,
                                            .same_host_pulls = true,
                                            .encrypt = EncryptMode::kOn,
                                            .auth_key = key_of("encryption test secret"),
                                            .ignore_env = true});
    EXPECT_TRUE(r) << describe(r.status());
    return r ? std::move(r).value() : nullptr;
  };
  Pair p;
  p.server = make();
  p.client = make();
  ASSERT_TRUE(p.server && p.client);
  auto l = p.server->listen("127.0.0.1:0");
  ASSERT_TRUE(l) << describe(l.status());
  p.listener = std::move(l).value();
  ASSERT_TRUE(p.finish("127.0.0.1:" + std::to_string(p.listener->port())).is_ok());
  expect_every_kind(*p.server, *p.c, *p.s);
  for (const Endpoint* ep : {p.c.get(), p.s.get()}) {
    const EndpointStats st = ep->stats();
    EXPECT_FALSE(st.encryption.empty());
    EXPECT_FALSE(st.shm_tx || st.shm_rx);
    EXPECT_EQ(st.shm_reason, "REMORA_ENCRYPT: the control stream stays sealed on TCP");
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Encrypted,
                         ::testing::Combine(::testing::Values(EncryptMode::kOn, EncryptMode::kAes256Gcm,
                                                              EncryptMode::kChacha20Poly1305, EncryptMode::kAegis256,
                                                              EncryptMode::kAegis128l),
                                            ::testing::Values(1u, 2u)));

bool contains(const std::vector<uint8_t>& hay, std::span<const std::byte> needle) {
  const auto* n = reinterpret_cast<const uint8_t*>(needle.data());
  return std::search(hay.begin(), hay.end(), n, n + needle.size()) != hay.end();
}

/// What the capture tests send between the connected `p`: a 64-byte pattern (eager, and
/// repeated through a chunked message and a chunked put of 2 MiB) and the server's
/// remote key as a message, as applications send them; every byte checked. Sets `mark`
/// and `key`, the bytes a capture must (plain) or must not (sealed) find; `big` is the
/// size of the chunked transfers.
void send_mark_and_key(Pair& p, std::vector<std::byte>* mark, std::vector<std::byte>* key, size_t* big_size) {
  mark->resize(64);
  for (size_t i = 0; i < mark->size(); ++i) (*mark)[i] = std::byte(static_cast<uint8_t>(0xA0 ^ (i * 37)));
  std::vector<std::byte> big(2 * 1024 * 1024);
  for (size_t i = 0; i < big.size(); i += mark->size()) std::memcpy(big.data() + i, mark->data(), mark->size());
  *big_size = big.size();
  std::vector<std::byte> target(big.size());
  auto region = p.server->register_memory(target.data(), target.size(), kAllAccess);
  ASSERT_TRUE(region) << describe(region.status());
  const auto serialized = region->remote_key().serialize();
  key->assign(serialized.begin(), serialized.end());
  std::vector<std::byte> key_in(key->size()), small_in(mark->size()), big_in(big.size());
  Request rk = p.c->recv(key_in, Tag{1});
  ASSERT_TRUE(p.s->send(*key, Tag{1}).wait(30s).is_ok());
  ASSERT_TRUE(rk.wait(30s).is_ok());
  auto rkey = RemoteKey::deserialize(key_in);
  ASSERT_TRUE(rkey) << describe(rkey.status());
  Request rs = p.s->recv(small_in, Tag{2});
  Request rb = p.s->recv(big_in, Tag{3});
  ASSERT_TRUE(p.c->send(*mark, Tag{2}).wait(30s).is_ok());
  ASSERT_TRUE(p.c->send(big, Tag{3}).wait(30s).is_ok());
  ASSERT_TRUE(rs.wait(30s).is_ok());
  ASSERT_TRUE(rb.wait(30s).is_ok());
  ASSERT_TRUE(p.c->put(big, *rkey, 0).wait(30s).is_ok());
  EXPECT_TRUE(small_in == *mark);
  EXPECT_TRUE(big_in == big);
  EXPECT_TRUE(target == big);
  p.c.reset();
  p.s.reset();
}

/// The capture through a recording relay on loopback: the pattern and the key found in
/// the bytes without encryption (the check can fail), absent with it.
void capture(EncryptMode mode, bool expect_visible) {
  Pair p;
  uint16_t port = 0;
  ASSERT_TRUE(p.connect(mode, mode, 2, &port).is_ok());
  Relay relay(port);
  ASSERT_TRUE(p.finish(relay.address()).is_ok());
  std::vector<std::byte> mark, key;
  size_t big = 0;
  send_mark_and_key(p, &mark, &key, &big);
  if (::testing::Test::HasFatalFailure()) return;
  relay.stop();
  ASSERT_GT(relay.all().size(), 2 * big) << "the relay saw the transfers";
  EXPECT_EQ(contains(relay.all(), mark), expect_visible) << "the 64-byte pattern on the wire";
  EXPECT_EQ(contains(relay.all(), key), expect_visible) << "the serialized remote key on the wire";
}

TEST(EncryptionCapture, PlainTrafficShowsPatternAndKey) { capture(EncryptMode::kOff, true); }
TEST(EncryptionCapture, SealedTrafficShowsNeither) { capture(EncryptMode::kOn, false); }

/// The same capture taken by tcpdump on the veth between two network namespaces (the
/// server's sockets in one, the client's in the other, this process holding both): every
/// packet as the kernel put it on the link, headers and all, into a pcap file that is
/// searched whole. The pattern repeats through 4 MiB, so most copies lie inside one
/// packet; the key is one small message.
void veth_capture(EncryptMode mode, bool expect_visible) {
  if (run_command({"sh", "-c", "command -v tcpdump"}, std::chrono::seconds(10)).status != 0) {
    // Not a skip: the test command installs it (scripts/lib/deps.sh), and without it
    // this check of what reaches the wire would silently never run.
    FAIL() << "tcpdump is not installed: apt-get install tcpdump (scripts/lib/deps.sh installs it)";
  }
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  char dir_template[] = "/tmp/remora_capture_XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string pcap = dir + "/veth.pcap";
  std::vector<std::string> argv = net.exec_prefix(net.ns_a());
  // -U, --immediate-mode: each packet read and written as it comes; -B: a 64 MiB kernel
  // buffer, so that none of the
  // transfers' packets are dropped before tcpdump reads them.
  for (const char* a : {"tcpdump", "-i", "rmr0", "-n", "-U", "--immediate-mode", "-s", "0", "-B", "65536", "-w"})
    argv.emplace_back(a);
  argv.push_back(pcap);
  argv.emplace_back("tcp");
  Process dump({.argv = argv, .env = {}, .capture_stderr = true});
  ASSERT_TRUE(dump.ok()) << dump.error();
  // tcpdump says "listening on rmr0" once its capture is open.
  bool listening = false;
  std::string said;
  while (!listening) {
    auto line = dump.read_line(20s);
    if (!line) break;
    said += *line + "\n";
    listening = line->find("listening on") != std::string::npos;
  }
  ASSERT_TRUE(listening) << "tcpdump did not start capturing: " << said;

  Pair p;
  p.server = make_context(mode, 2);
  p.client = make_context(mode, 2);
  ASSERT_TRUE(p.server && p.client);
  std::string err;
  uint16_t port = 0;
  ASSERT_TRUE(in_netns(
      net.ns_a(),
      [&] {
        auto l = p.server->listen(net.addr_a() + ":0");
        if (!l) {
          err = describe(l.status());
          return;
        }
        p.listener = std::move(l).value();
        port = p.listener->port();
      },
      &err))
      << err;
  ASSERT_TRUE(p.listener) << err;
  Status connected;
  ASSERT_TRUE(in_netns(
      net.ns_b(), [&] { connected = p.finish(net.addr_a() + ":" + std::to_string(port)); }, &err))
      << err;
  ASSERT_TRUE(connected.is_ok()) << describe(connected);
  std::vector<std::byte> mark, key;
  size_t big = 0;
  send_mark_and_key(p, &mark, &key, &big);
  if (::testing::Test::HasFatalFailure()) return;

  // tcpdump writes what it has read when told to stop, not what the kernel still holds
  // for it: first a last connection from b carries an end mark (the listener drops it as
  // no remora peer), and the file is read again at each write tcpdump makes to it until
  // the mark is in it, after every packet of the transfers.
  const std::string end_mark = "capture end " + std::to_string(::getpid()) + " " + std::to_string(port);
  ASSERT_TRUE(in_netns(
      net.ns_b(),
      [&] {
        raw::Socket s = raw::Socket::connect_to(net.addr_a(), port, &err);
        if (s.valid()) s.send_all(std::vector<uint8_t>(end_mark.begin(), end_mark.end()), &err);
      },
      &err))
      << err;
  const int watch = ::inotify_init1(IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(::inotify_add_watch(watch, pcap.c_str(), IN_MODIFY), 0);
  auto read_capture = [&] {
    std::ifstream in(pcap, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const auto end_bytes = std::as_bytes(std::span(end_mark.data(), end_mark.size()));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  std::vector<uint8_t> captured = read_capture();
  while (!contains(captured, end_bytes) && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{.fd = watch, .events = POLLIN, .revents = 0};
    if (::poll(&pfd, 1, 1000) > 0) {
      std::array<char, 4096> events{};
      (void)!::read(watch, events.data(), events.size());
    }
    captured = read_capture();
  }
  ::close(watch);
  ASSERT_TRUE(contains(captured, end_bytes)) << "tcpdump never wrote the end mark's packet";

  dump.signal(SIGINT);
  const auto status = dump.wait(20s);
  ASSERT_TRUE(status.has_value()) << "tcpdump did not stop";
  const std::string summary = dump.read_all(5s);  // "N packets captured ... M dropped by kernel"
  EXPECT_TRUE(Process::exited_ok(*status)) << Process::describe(*status) << ": " << summary;
  std::filesystem::remove_all(dir);
  ASSERT_GT(captured.size(), 2 * big) << "the capture holds the transfers; tcpdump: " << summary;
  EXPECT_EQ(contains(captured, mark), expect_visible) << "the 64-byte pattern on the veth";
  EXPECT_EQ(contains(captured, key), expect_visible) << "the serialized remote key on the veth";
}

TEST(EncryptionCapture, PlainTrafficOnAVethShowsPatternAndKey) { veth_capture(EncryptMode::kOff, true); }
TEST(EncryptionCapture, SealedTrafficOnAVethShowsNeither) { veth_capture(EncryptMode::kOn, false); }

/// The cipher both sides with `mode` seal with (this build's choice for `on`).
std::optional<net::SealCipher> cipher_of(EncryptMode mode) { return net::preferred_cipher(net::offered_ciphers(mode)); }

/// The relay tampers with record `record` of connection `victim` (0: control, 1: data
/// stream 0) on the way to the server; the client keeps sending, so records follow it.
void tamper(size_t victim, Tamper what, size_t record, EncryptMode mode) {
  if (refused_here(mode)) return;
  const std::optional<net::SealCipher> cipher = cipher_of(mode);
  ASSERT_TRUE(cipher.has_value());
  Pair p;
  uint16_t port = 0;
  ASSERT_TRUE(p.connect(mode, mode, 1, &port).is_ok());
  Relay relay(port, victim, what, record, net::seal_tag_size(*cipher));
  ASSERT_TRUE(p.finish(relay.address()).is_ok());
  constexpr size_t kBytes = 1024 * 1024;
  const auto payload = pattern(kBytes, 9);
  std::vector<std::vector<std::byte>> in(8, std::vector<std::byte>(kBytes, std::byte{0xEE}));
  std::vector<Request> recvs, sends;
  for (size_t i = 0; i < in.size(); ++i) recvs.push_back(p.s->recv(in[i], Tag{100 + i}));
  for (size_t i = 0; i < in.size(); ++i) sends.push_back(p.c->send(payload, Tag{100 + i}));
  for (auto& r : recvs) (void)r.wait(30s);
  for (auto& r : sends) (void)r.wait(30s);
  ASSERT_TRUE(relay.tampered()) << "the relay reached the record to tamper with";
  // The server read the tampered stream: it failed, and says why and with whom.
  const Status s = p.s->failure();
  EXPECT_EQ(s.code(), StatusCode::kProtocol) << describe(s);
  EXPECT_NE(s.message().find("failed authentication"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("127.0.0.1:"), std::string::npos) << "names the peer: " << s.message();
  EXPECT_NE(s.message().find(victim == 0 ? "control stream" : "data stream 0"), std::string::npos) << s.message();
  // The client's endpoint ends too (its peer closed on it).
  Request probe = p.c->recv(std::span<std::byte>(in[0].data(), 8), Tag{999});
  EXPECT_FALSE(probe.wait(60s).is_ok());
  EXPECT_FALSE(p.c->failure().is_ok());
  // No receive holds anything but a prefix of the valid bytes, the rest untouched.
  size_t failed = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const auto& b = in[i];
    const size_t valid = static_cast<size_t>(std::mismatch(b.begin(), b.end(), payload.begin()).first - b.begin());
    EXPECT_TRUE(std::all_of(b.begin() + static_cast<ptrdiff_t>(valid), b.end(),
                            [](std::byte x) { return x == std::byte{0xEE}; }))
        << "receive " << i << " holds bytes that are neither valid nor untouched from offset " << valid;
    if (!recvs[i].wait(0s).is_ok()) ++failed;
  }
  EXPECT_GT(failed, 0u) << "some receive failed";
}

struct TamperCase {
  size_t victim;
  Tamper what;
  size_t record;
  EncryptMode mode = EncryptMode::kOn;
};
class Tampered : public ::testing::TestWithParam<TamperCase> {};
TEST_P(Tampered, EndpointFailsAndNothingInvalidIsDelivered) {
  const TamperCase t = GetParam();
  tamper(t.victim, t.what, t.record, t.mode);
}
// Every tamper with `on`'s cipher (AEGIS-256 where the build has it); a flip and a
// replay on a data stream with each named cipher too.
INSTANTIATE_TEST_SUITE_P(Records, Tampered,
                         ::testing::Values(TamperCase{0, Tamper::kFlip, 2}, TamperCase{0, Tamper::kDrop, 2},
                                           TamperCase{0, Tamper::kReplay, 2}, TamperCase{0, Tamper::kReorder, 2},
                                           TamperCase{1, Tamper::kFlip, 0}, TamperCase{1, Tamper::kDrop, 3},
                                           TamperCase{1, Tamper::kReplay, 1}, TamperCase{1, Tamper::kReorder, 1},
                                           TamperCase{1, Tamper::kFlip, 2, EncryptMode::kAes256Gcm},
                                           TamperCase{1, Tamper::kReplay, 1, EncryptMode::kAes256Gcm},
                                           TamperCase{1, Tamper::kFlip, 2, EncryptMode::kChacha20Poly1305},
                                           TamperCase{1, Tamper::kReplay, 1, EncryptMode::kChacha20Poly1305},
                                           TamperCase{1, Tamper::kFlip, 2, EncryptMode::kAegis256},
                                           TamperCase{1, Tamper::kReplay, 1, EncryptMode::kAegis256},
                                           TamperCase{1, Tamper::kFlip, 2, EncryptMode::kAegis128l},
                                           TamperCase{1, Tamper::kReplay, 1, EncryptMode::kAegis128l}));

Status connect_modes(EncryptMode server_mode, EncryptMode client_mode) {
  Pair p;
  uint16_t port = 0;
  if (Status s = p.connect(server_mode, client_mode, 1, &port); !s) return s;
  auto accepted = std::async(std::launch::async, [&] { return p.listener->accept(3s); });
  auto cr = p.client->connect("127.0.0.1:" + std::to_string(port), 10s);
  auto ar = accepted.get();
  EXPECT_FALSE(ar) << "the listener handed out an endpoint whose client was refused";
  return cr.status();
}

TEST(EncryptionSettings, MismatchRefusedAtConnectNamingTheSetting) {
  for (auto [server_mode, client_mode] :
       {std::pair{EncryptMode::kOn, EncryptMode::kOff}, std::pair{EncryptMode::kOff, EncryptMode::kOn},
        std::pair{EncryptMode::kAes256Gcm, EncryptMode::kChacha20Poly1305},
        std::pair{EncryptMode::kAegis256, EncryptMode::kAes256Gcm},
        std::pair{EncryptMode::kAegis128l, EncryptMode::kAegis256}}) {
    if (refused_here(server_mode) || refused_here(client_mode)) continue;  // refused at create instead
    const Status s = connect_modes(server_mode, client_mode);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << describe(s);
    EXPECT_NE(s.message().find("REMORA_ENCRYPT"), std::string::npos) << s.message();
  }
}

// `on` takes the first cipher of net::kSealCiphers both sides offer: AEGIS-256 between
// two builds that have it, the cipher a side names (AES-256-GCM, ChaCha20-Poly1305,
// AEGIS-128L) with that side, both sides saying which; a build without AEGIS refuses to
// be asked for it by name.
TEST(EncryptionSettings, OnPrefersAegisAndMeetsANamedCipher) {
  // Without AES instructions `on` offers ChaCha20-Poly1305 alone, and neither AES-256-GCM
  // nor AEGIS-128L can be named.
  const bool aes = !refused_here(EncryptMode::kAes256Gcm);
  const bool aegis = !refused_here(EncryptMode::kAegis256) && aes;
  for (EncryptMode client_mode :
       {EncryptMode::kOn, EncryptMode::kAes256Gcm, EncryptMode::kChacha20Poly1305, EncryptMode::kAegis128l}) {
    if (client_mode == EncryptMode::kAegis128l && !aegis) continue;
    if (client_mode == EncryptMode::kAes256Gcm && !aes) continue;
    Pair p;
    uint16_t port = 0;
    ASSERT_TRUE(p.connect(EncryptMode::kOn, client_mode, 1, &port).is_ok());
    ASSERT_TRUE(p.finish("127.0.0.1:" + std::to_string(port)).is_ok());
    const auto msg = pattern(300000, 6);
    std::vector<std::byte> in(msg.size());
    Request r = p.s->recv(in, Tag{1});
    ASSERT_TRUE(p.c->send(msg, Tag{1}).wait(30s).is_ok());
    ASSERT_TRUE(r.wait(30s).is_ok());
    EXPECT_TRUE(in == msg);
    const std::string want = client_mode == EncryptMode::kAegis128l          ? "aegis128l"
                             : client_mode == EncryptMode::kChacha20Poly1305 ? "chacha20poly1305"
                             : client_mode == EncryptMode::kOn && aegis      ? "aegis256"
                             : client_mode == EncryptMode::kOn && !aes       ? "chacha20poly1305"
                                                                             : "aes256gcm";
    EXPECT_EQ(p.c->stats().encryption, want);
    EXPECT_EQ(p.s->stats().encryption, want);
  }
}

TEST(EncryptionSettings, NoSecretRefusedAtCreate) {
  auto r = Context::create(ContextOptions{.encrypt = EncryptMode::kOn, .ignore_env = true});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("REMORA_ENCRYPT"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("REMORA_AUTH_KEY"), std::string::npos) << r.status().message();
}

TEST(EncryptionSettings, DevmemAndZcrxRefusedWithTheReason) {
  for (DevicePathMode path : {DevicePathMode::kDevmem, DevicePathMode::kZcrx}) {
    auto r = Context::create(
        ContextOptions{.device_path = path, .encrypt = EncryptMode::kOn, .auth_key = key_of("s"), .ignore_env = true});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("never reaches the CPU"), std::string::npos) << r.status().message();
  }
}

/// Device memory under encryption (REMORA_DEVICE_PATH=auto) is staged through host
/// buffers, where it is sealed, and the path's reason says so.
TEST(EncryptionSettings, DeviceMemoryIsStagedAndSealed) {
  auto dev_a = testing::TestDeviceDomain::create({.capacity = size_t{64} << 20}).value();
  auto dev_b = testing::TestDeviceDomain::create({.capacity = size_t{64} << 20}).value();
  Pair p;
  uint16_t port = 0;
  ASSERT_TRUE(p.connect(EncryptMode::kOn, EncryptMode::kOn, 2, &port).is_ok());
  ASSERT_TRUE(p.server->add_memory_domain(*dev_b).is_ok());
  ASSERT_TRUE(p.client->add_memory_domain(*dev_a).is_ok());
  ASSERT_TRUE(p.finish("127.0.0.1:" + std::to_string(port)).is_ok());
  const size_t len = 3 * 1024 * 1024 + 11;
  const auto data = pattern(len, 6);
  std::byte* out = dev_a->allocate(len).value();
  std::byte* in = dev_b->allocate(len).value();
  ASSERT_TRUE(dev_a->write(out, data.data(), len).is_ok());
  Request r = p.s->recv(std::span(in, len), Tag{5});
  ASSERT_TRUE(p.c->send(std::span<const std::byte>(out, len), Tag{5}).wait(30s).is_ok());
  ASSERT_TRUE(r.wait(30s).is_ok());
  std::vector<std::byte> got(len);
  ASSERT_TRUE(dev_b->read(got.data(), in, len).is_ok());
  EXPECT_TRUE(got == data);
  for (Endpoint* ep : {p.c.get(), p.s.get()}) {
    const EndpointStats st = ep->stats();
    EXPECT_EQ(st.device_path, "staging");
    EXPECT_NE(st.device_path_reason.find("REMORA_ENCRYPT"), std::string::npos) << st.device_path_reason;
    EXPECT_EQ(st.devmem_transfers, 0u);
    EXPECT_EQ(st.zcrx_transfers, 0u);
  }
}

/// The rendezvous store through a recording relay: a 64-byte value set and read back,
/// visible on the wire without encryption and not with it.
void store_capture(EncryptMode mode, bool expect_visible) {
  const AuthKey key = key_of("store secret");
  auto server = StoreServer::start("127.0.0.1:0", key, mode);
  ASSERT_TRUE(server) << describe(server.status());
  Relay relay((*server)->port());
  auto store = Store::connect(relay.address(), 10s, key, mode);
  ASSERT_TRUE(store) << describe(store.status());
  std::vector<std::byte> value(64);
  for (size_t i = 0; i < value.size(); ++i) value[i] = std::byte(static_cast<uint8_t>(0x5C ^ (i * 29)));
  ASSERT_TRUE((*store)->set("bootstrap/addr", value).is_ok());
  auto got = (*store)->get("bootstrap/addr", 10s);
  ASSERT_TRUE(got) << describe(got.status());
  EXPECT_TRUE(*got == value);
  store->reset();
  relay.stop();
  EXPECT_EQ(contains(relay.all(), value), expect_visible) << "the stored value on the wire";
  const std::string_view name = "bootstrap/addr";
  EXPECT_EQ(contains(relay.all(), std::as_bytes(std::span(name.data(), name.size()))), expect_visible)
      << "the key's name on the wire";
}

TEST(EncryptionStore, PlainTrafficShowsTheValue) { store_capture(EncryptMode::kOff, true); }
TEST(EncryptionStore, SealedTrafficDoesNot) { store_capture(EncryptMode::kOn, false); }

TEST(EncryptionStore, MismatchRefusedNamingTheSetting) {
  const AuthKey key = key_of("store secret");
  for (auto [server_mode, client_mode] :
       {std::pair{EncryptMode::kOn, EncryptMode::kOff}, std::pair{EncryptMode::kOff, EncryptMode::kOn}}) {
    auto server = StoreServer::start("127.0.0.1:0", key, server_mode);
    ASSERT_TRUE(server) << describe(server.status());
    auto store = Store::connect("127.0.0.1:" + std::to_string((*server)->port()), 10s, key, client_mode);
    ASSERT_FALSE(store) << "a store client whose REMORA_ENCRYPT differs was served";
    EXPECT_EQ(store.status().code(), StatusCode::kUnsupported) << describe(store.status());
    EXPECT_NE(store.status().message().find("REMORA_ENCRYPT"), std::string::npos) << store.status().message();
  }
  auto keyless = StoreServer::start("127.0.0.1:0", std::nullopt, EncryptMode::kOn);
  ASSERT_FALSE(keyless);
  EXPECT_EQ(keyless.status().code(), StatusCode::kInvalidArgument);
}

TEST(EncryptionRecords, SealOpenAndEveryTamperFails) {
  for (net::SealCipher cipher : net::kSealCiphers) {
    if (!net::cipher_available(cipher)) continue;
    SCOPED_TRACE(std::string(net::cipher_name(cipher)));
    net::SealKey key{};
    key[0] = std::byte{7};
    const auto plain = pattern(1000, 3);
    auto rec = net::seal_record(cipher, key, 5, plain);
    ASSERT_EQ(rec.size(), plain.size() + net::kSealHeaderSize + net::seal_tag_size(cipher));
    auto opened = net::open_record(cipher, key, 5, rec);
    ASSERT_TRUE(opened) << describe(opened.status());
    EXPECT_TRUE(*opened == plain);
    EXPECT_FALSE(net::open_record(cipher, key, 6, rec)) << "another record number (replayed or reordered)";
    net::SealKey other = key;
    other[1] = std::byte{1};
    EXPECT_FALSE(net::open_record(cipher, other, 5, rec)) << "another key (another connection or direction)";
    for (size_t at : {size_t{4}, rec.size() / 2, rec.size() - 1}) {
      auto bad = rec;
      bad[at] ^= std::byte{0x80};
      EXPECT_FALSE(net::open_record(cipher, key, 5, bad)) << "flipped byte " << at;
    }
    // The length is associated data: a record re-framed shorter does not open.
    auto cut = rec;
    cut.erase(cut.begin() + 4);
    core::store_u32(cut.data(), static_cast<uint32_t>(plain.size() - 1));
    EXPECT_FALSE(net::open_record(cipher, key, 5, cut));
    // No plaintext in the record.
    EXPECT_EQ(std::search(rec.begin(), rec.end(), plain.begin(), plain.begin() + 16), rec.end());
  }
}

// A record whose plaintext fits in what the receive asked for opens straight into the
// caller's buffer. One that fails to open there leaves zeros in the record's part of it
// (not bytes of no meaning), the receive fails with EBADMSG, and nothing past that part
// is touched.
TEST(EncryptionRecords, ARecordThatFailsToOpenInTheCallersBufferLeavesZerosThere) {
  for (net::SealCipher cipher : net::kSealCiphers) {
    if (!net::cipher_available(cipher)) continue;
    SCOPED_TRACE(std::string(net::cipher_name(cipher)));
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    net::Fd raw(fds[0]), rx(fds[1]);
    net::SealKeys keys{.cipher = cipher};
    keys.recv[0] = std::byte{9};
    ASSERT_TRUE(net::seal_socket(rx.get(), keys).is_ok());
    const auto plain = pattern(4000, 4);
    auto good = net::seal_record(cipher, keys.recv, 0, plain);
    auto bad = net::seal_record(cipher, keys.recv, 1, plain);
    bad[bad.size() / 2] ^= std::byte{0x80};
    for (const auto* rec : {&good, &bad}) {
      ASSERT_EQ(::send(raw.get(), rec->data(), rec->size(), 0), static_cast<ssize_t>(rec->size()));
    }
    std::vector<std::byte> got(plain.size(), std::byte{0xEE});
    net::IoResult r = net::recv_some(rx.get(), got.data(), got.size());
    ASSERT_TRUE(r.moved() && r.bytes == plain.size()) << r.err;
    EXPECT_TRUE(got == plain);
    std::vector<std::byte> more(2 * plain.size(), std::byte{0xEE});
    r = net::recv_some(rx.get(), more.data(), more.size());
    ASSERT_TRUE(r.error());
    EXPECT_EQ(r.err, EBADMSG);
    const auto split = more.begin() + static_cast<ptrdiff_t>(plain.size());
    EXPECT_TRUE(std::all_of(more.begin(), split, [](std::byte b) { return b == std::byte{0}; }));
    EXPECT_TRUE(std::all_of(split, more.end(), [](std::byte b) { return b == std::byte{0xEE}; }));
  }
}

/// A connected pair of Unix stream sockets, sealed for `cipher` with keys made from
/// `seed`: what `tx` sends `rx` opens. `sndbuf` (bytes, 0: the default) is tx's send buffer.
void sealed_pair(net::SealCipher cipher, uint8_t seed, int sndbuf, net::Fd* tx, net::Fd* rx) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  *tx = net::Fd(fds[0]);
  *rx = net::Fd(fds[1]);
  if (sndbuf > 0) {
    ASSERT_EQ(::setsockopt(tx->get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf), 0);
  }
  net::SealKeys keys{.cipher = cipher};
  keys.send[0] = std::byte{seed};
  keys.recv[0] = std::byte{static_cast<uint8_t>(seed + 1)};
  ASSERT_TRUE(net::seal_socket(tx->get(), keys).is_ok());
  std::swap(keys.send, keys.recv);
  ASSERT_TRUE(net::seal_socket(rx->get(), keys).is_ok());
}

/// Receives into `got` from `*received` on all that the sealed socket `fd` holds now.
void take_all(int fd, std::vector<std::byte>& got, size_t* received) {
  for (;;) {
    const net::IoResult r = net::recv_some(fd, got.data() + *received, got.size() - *received);
    ASSERT_FALSE(r.error()) << r.err;
    if (!r.moved() || r.bytes == 0) return;
    *received += r.bytes;
  }
}

// A caller counts what send_some reported sent (the control stream's replay and its
// HANDLED check do), so the peer must never open a record the sender has not reported:
// each record counts as sent once it is wholly in the kernel, though the rest of the
// sealed batch is not. A socket that holds less than one record makes every batch cross
// a record boundary between two calls; after each call the receiver takes all it can.
TEST(EncryptionRecords, EveryRecordWhollySentIsReportedAtOnce) {
  for (net::SealCipher cipher : net::kSealCiphers) {
    if (!net::cipher_available(cipher)) continue;
    SCOPED_TRACE(std::string(net::cipher_name(cipher)));
    net::Fd tx, rx;
    ASSERT_NO_FATAL_FAILURE(sealed_pair(cipher, 1, 8 << 10, &tx, &rx));

    const auto data = pattern(size_t{1} << 20, 9);
    std::vector<std::byte> got(data.size());
    size_t sent = 0, received = 0, calls = 0;
    while (received < data.size()) {
      ASSERT_LT(++calls, 100000U) << "no progress";
      if (sent < data.size()) {
        const net::IoResult r = net::send_some(tx.get(), data.data() + sent, data.size() - sent);
        ASSERT_FALSE(r.error()) << r.err;
        if (r.moved()) sent += r.bytes;
      }
      ASSERT_NO_FATAL_FAILURE(take_all(rx.get(), got, &received));
      ASSERT_LE(received, sent) << "the peer opened bytes the sender was not told are sent";
    }
    EXPECT_EQ(sent, data.size());
    EXPECT_TRUE(got == data);
  }
}

// A scattered read (net::recv_some_scattered, as segmented transfers read a chunk into
// several blocks) fills its buffers in order, through the sealing layer and on a plain
// socket alike: buffers of every size class, apart in memory, read again from the first
// byte not filled; the stream arrives whole.
TEST(EncryptionRecords, AScatteredReadFillsEveryBufferInOrder) {
  std::vector<std::optional<net::SealCipher>> ciphers{std::nullopt};
  for (net::SealCipher c : net::kSealCiphers) {
    if (net::cipher_available(c)) ciphers.emplace_back(c);
  }
  for (const std::optional<net::SealCipher>& cipher : ciphers) {
    SCOPED_TRACE(cipher ? std::string(net::cipher_name(*cipher)) : std::string("plain"));
    net::Fd tx, rx;
    if (cipher) {
      ASSERT_NO_FATAL_FAILURE(sealed_pair(*cipher, 5, 8 << 10, &tx, &rx));
    } else {
      int fds[2];
      ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
      tx = net::Fd(fds[0]);
      rx = net::Fd(fds[1]);
    }
    const std::vector<size_t> sizes{1, 7, 4096, 65535, 65536, 65537, 3, 16384, 131072, 1, 70000};
    std::vector<std::vector<std::byte>> pieces;
    std::vector<std::byte> whole;
    for (size_t i = 0; i < 2 * sizes.size(); ++i) {
      pieces.emplace_back(sizes[i % sizes.size()], std::byte{0xEE});
      const auto p = pattern(pieces.back().size(), static_cast<uint8_t>(i + 1));
      whole.insert(whole.end(), p.begin(), p.end());
    }
    size_t sent = 0, piece = 0, into = 0, calls = 0;
    while (piece < pieces.size()) {
      ASSERT_LT(++calls, 200000U) << "no progress";
      if (sent < whole.size()) {
        const net::IoResult w = net::send_some(tx.get(), whole.data() + sent, whole.size() - sent);
        ASSERT_FALSE(w.error()) << w.err;
        if (w.moved()) sent += w.bytes;
      }
      std::vector<iovec> iov;
      for (size_t i = piece; i < pieces.size() && iov.size() < 8; ++i) {
        const size_t skip = i == piece ? into : 0;
        iov.push_back({.iov_base = pieces[i].data() + skip, .iov_len = pieces[i].size() - skip});
      }
      const net::IoResult r = net::recv_some_scattered(rx.get(), iov.data(), static_cast<int>(iov.size()));
      if (r.would_block()) continue;
      ASSERT_TRUE(r.moved()) << static_cast<int>(r.kind) << " " << r.err;
      for (size_t n = r.bytes; n > 0;) {
        const size_t take = std::min(n, pieces[piece].size() - into);
        n -= take;
        into += take;
        if (into == pieces[piece].size()) ++piece, into = 0;
      }
    }
    std::vector<std::byte> got;
    for (const auto& p : pieces) got.insert(got.end(), p.begin(), p.end());
    EXPECT_TRUE(got == whole);
  }
}

// A gathered send (net::send_some_gathered, as data streams send queued chunks) seals
// its pieces together, each in records of its own: pieces of every size class, offered
// again from the first byte not reported sent, as a caller does; the stream arrives whole
// and the receiver never opens a byte the sender was not told is sent.
TEST(EncryptionRecords, AGatheredSendSealsEveryPieceInOrder) {
  for (net::SealCipher cipher : net::kSealCiphers) {
    if (!net::cipher_available(cipher)) continue;
    SCOPED_TRACE(std::string(net::cipher_name(cipher)));
    net::Fd tx, rx;
    ASSERT_NO_FATAL_FAILURE(sealed_pair(cipher, 3, 8 << 10, &tx, &rx));

    // Pieces apart in memory, smaller and larger than a record, more than a batch holds.
    const std::vector<size_t> sizes{1, 7, 4096, 65535, 65536, 65537, 300000, 3, 16384, 131072, 1, 70000};
    std::vector<std::vector<std::byte>> pieces;
    std::vector<std::byte> whole;
    for (size_t i = 0; i < 3 * sizes.size(); ++i) {
      pieces.push_back(pattern(sizes[i % sizes.size()], static_cast<uint8_t>(i)));
      whole.insert(whole.end(), pieces.back().begin(), pieces.back().end());
    }
    std::vector<std::byte> got(whole.size());
    size_t piece = 0, into = 0;  // the first byte not reported sent: piece, offset in it
    size_t sent = 0, received = 0, calls = 0;
    while (received < whole.size()) {
      ASSERT_LT(++calls, 200000U) << "no progress";
      if (piece < pieces.size()) {
        std::vector<iovec> iov;
        for (size_t i = piece; i < pieces.size() && iov.size() < 16; ++i) {
          const size_t skip = i == piece ? into : 0;
          iov.push_back({.iov_base = pieces[i].data() + skip, .iov_len = pieces[i].size() - skip});
        }
        const net::IoResult r = net::send_some_gathered(tx.get(), iov.data(), static_cast<int>(iov.size()));
        ASSERT_FALSE(r.error()) << r.err;
        if (r.moved()) {
          sent += r.bytes;
          for (size_t n = r.bytes; n > 0;) {
            const size_t take = std::min(n, pieces[piece].size() - into);
            n -= take;
            into += take;
            if (into == pieces[piece].size()) ++piece, into = 0;
          }
        }
      }
      ASSERT_NO_FATAL_FAILURE(take_all(rx.get(), got, &received));
      ASSERT_LE(received, sent) << "the peer opened bytes the sender was not told are sent";
    }
    EXPECT_EQ(sent, whole.size());
    EXPECT_TRUE(got == whole);
    EXPECT_GE(net::seal_counters(tx.get()).records_sealed, pieces.size());  // none across two pieces

    // With room in the socket, one call takes several pieces (not only the first).
    net::Fd tx2, rx2;
    ASSERT_NO_FATAL_FAILURE(sealed_pair(cipher, 5, 0, &tx2, &rx2));
    std::array<iovec, 3> three{};
    size_t total = 0;
    for (size_t i = 0; i < three.size(); ++i) {
      three[i] = {.iov_base = pieces[i].data(), .iov_len = pieces[i].size()};
      total += pieces[i].size();
    }
    const net::IoResult r = net::send_some_gathered(tx2.get(), three.data(), 3);
    ASSERT_TRUE(r.moved());
    EXPECT_EQ(r.bytes, total);
    std::vector<std::byte> first(total);
    size_t n = 0;
    while (n < total) {
      const net::IoResult in = net::recv_some(rx2.get(), first.data() + n, total - n);
      ASSERT_TRUE(in.moved() && in.bytes > 0);
      n += in.bytes;
    }
    EXPECT_TRUE(std::equal(first.begin(), first.end(), whole.begin()));
  }
}

// An offer shorter than the one before it (a send worker offering a queue's front chunk
// after the progress thread offered the whole queue) is reported in full, and the
// records sealed past it may go into the kernel in the same call: the peer can read
// them before their bytes are offered again. sealed_take_sent reports them, in order,
// once; the next offer of them would have been told at once too.
TEST(EncryptionRecords, BytesSentPastAShorterOfferAreTakenOnce) {
  for (net::SealCipher cipher : net::kSealCiphers) {
    if (!net::cipher_available(cipher)) continue;
    SCOPED_TRACE(std::string(net::cipher_name(cipher)));
    net::Fd tx, rx;
    ASSERT_NO_FATAL_FAILURE(sealed_pair(cipher, 7, 0, &tx, &rx));
    EXPECT_EQ(net::sealed_take_sent(tx.get(), 1000), 0U);

    // The socket is full (of bytes below the layer, read back below it), so the first
    // offer seals both pieces and sends nothing.
    std::vector<std::byte> filler(4096, std::byte{0x5A});
    size_t filled = 0;
    for (;;) {
      const ssize_t n = ::send(tx.get(), filler.data(), filler.size(), MSG_DONTWAIT);
      if (n < 0) {
        ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << errno;
        break;
      }
      filled += static_cast<size_t>(n);
    }
    const auto a = pattern(10000, 1), b = pattern(100, 2);
    std::array<iovec, 2> both{iovec{.iov_base = const_cast<std::byte*>(a.data()), .iov_len = a.size()},
                              iovec{.iov_base = const_cast<std::byte*>(b.data()), .iov_len = b.size()}};
    EXPECT_TRUE(net::send_some_gathered(tx.get(), both.data(), 2).would_block());
    for (size_t drained = 0; drained < filled;) {
      const ssize_t n = ::recv(rx.get(), filler.data(), std::min(filler.size(), filled - drained), 0);
      ASSERT_GT(n, 0) << errno;
      drained += static_cast<size_t>(n);
    }

    // The second offer is the first piece alone: both records go, the first is told.
    const net::IoResult r = net::send_some(tx.get(), a.data(), a.size());
    ASSERT_TRUE(r.moved()) << r.err;
    EXPECT_EQ(r.bytes, a.size());
    EXPECT_EQ(net::sealed_take_sent(tx.get(), 60), 60U);
    EXPECT_EQ(net::sealed_take_sent(tx.get(), 1000), 40U);
    EXPECT_EQ(net::sealed_take_sent(tx.get(), 1000), 0U);

    std::vector<std::byte> got(a.size() + b.size());
    size_t received = 0;
    while (received < got.size()) {
      const net::IoResult in = net::recv_some(rx.get(), got.data() + received, got.size() - received);
      ASSERT_TRUE(in.moved() && in.bytes > 0) << in.err;
      received += in.bytes;
    }
    EXPECT_TRUE(std::equal(a.begin(), a.end(), got.begin()));
    EXPECT_TRUE(std::equal(b.begin(), b.end(), got.begin() + static_cast<ptrdiff_t>(a.size())));

    // Taken, they are not told again: the next offer is sealed and sent anew.
    const auto c = pattern(50, 3);
    const net::IoResult next = net::send_some(tx.get(), c.data(), c.size());
    ASSERT_TRUE(next.moved() && next.bytes == c.size()) << next.err;
    std::vector<std::byte> third(c.size());
    for (size_t n = 0; n < third.size();) {
      const net::IoResult in = net::recv_some(rx.get(), third.data() + n, third.size() - n);
      ASSERT_TRUE(in.moved() && in.bytes > 0) << in.err;
      n += in.bytes;
    }
    EXPECT_TRUE(third == c);
  }
}

TEST(EncryptionKeys, EveryConnectionAndDirectionHasItsOwn) {
  const AuthKey k = key_of("s");
  const auto hello = pattern(48, 1);
  wire::AuthNonce a{}, b{}, c{};
  a[0] = std::byte{1};
  b[0] = std::byte{2};
  c[0] = std::byte{3};
  const auto one = wire::derive_seal_keys(k.bytes, 1, hello, a, b);
  const auto again = wire::derive_seal_keys(k.bytes, 1, hello, a, b);
  const auto other = wire::derive_seal_keys(k.bytes, 1, hello, a, c);
  const auto cipher = wire::derive_seal_keys(k.bytes, 2, hello, a, b);
  EXPECT_EQ(one.client_to_server, again.client_to_server);
  EXPECT_NE(one.client_to_server, one.server_to_client);
  EXPECT_NE(one.client_to_server, other.client_to_server);
  EXPECT_NE(one.server_to_client, other.server_to_client);
  EXPECT_NE(one.client_to_server, cipher.client_to_server);
}

}  // namespace
}  // namespace remora::itest
