// The NIXL backend's implementation (plugin/nixl/engine.h) without NIXL: two engines in
// one process, over real loopback endpoints, driven as NIXL's agent drives a backend
// (register, exchange connection info and public data, prepare, post, check, release).
// Every test compares the memory on both sides byte for byte: what the descriptors name
// holds the other side's bytes, every other byte its own, and a refused transfer
// changes nothing at all.
#include "engine.h"

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace remora {
inline void PrintTo(StatusCode code, std::ostream* os) { *os << to_string(code); }
}  // namespace remora

namespace remora::nixl_plugin {
namespace {

using namespace std::chrono_literals;
constexpr size_t kMiB = 1 << 20;

std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xff);
  return v;
}

std::unique_ptr<Engine> make_engine(const std::string& agent, const std::string& address = "127.0.0.1:0",
                                    const std::string& ifname = "") {
  Result<std::unique_ptr<Engine>> e = Engine::create(agent, EngineParams{.address = address, .interfaces = ifname});
  EXPECT_TRUE(e) << e.status().to_string();
  return e ? std::move(*e) : nullptr;
}

/// One agent: an engine, one registered buffer filled with its own pattern.
struct Side {
  std::unique_ptr<Engine> engine;
  std::vector<std::byte> mem;
  std::unique_ptr<LocalMemory> reg;

  Side(const std::string& name, size_t bytes, uint32_t seed) : engine(make_engine(name)), mem(pattern(bytes, seed)) {
    Result<std::unique_ptr<LocalMemory>> r =
        engine->register_memory(reinterpret_cast<uintptr_t>(mem.data()), mem.size(), 0, MemKind::kDram);
    EXPECT_TRUE(r) << r.status().to_string();
    reg = std::move(*r);
  }
  uintptr_t at(size_t offset) const { return reinterpret_cast<uintptr_t>(mem.data()) + offset; }
};

/// `from` loads `to`'s connection info and its registration, as NIXL's loadRemoteMD does.
std::unique_ptr<RemoteMemory> load(Side& from, Side& to) {
  EXPECT_TRUE(from.engine->load_conn_info(to.engine->local_agent(), to.engine->conn_info()));
  Result<std::unique_ptr<RemoteMemory>> r = from.engine->load_remote(to.engine->local_agent(), to.at(0), to.mem.size(),
                                                                     MemKind::kDram, to.engine->public_data(*to.reg));
  EXPECT_TRUE(r) << r.status().to_string();
  return r ? std::move(*r) : nullptr;
}

/// Drives `t` (already posted, with `posted` its first status) until it ends.
Status finish(Engine& e, Transfer& t, Status posted) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  Status s = std::move(posted);
  while (s.code() == StatusCode::kInProgress) {
    if (std::chrono::steady_clock::now() > deadline) return Status(StatusCode::kTimeout, "test deadline");
    s = e.check(t);
  }
  return s;
}

Status run(Engine& e, Transfer& t, std::optional<std::string> notification = std::nullopt) {
  return finish(e, t, e.post(t, notification));
}

/// Waits (driving nothing but the engine's own calls) until `count` notifications came.
std::vector<std::pair<std::string, std::string>> notifications(Engine& e, size_t count) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  do {
    e.take_notifications(out);
  } while (out.size() < count && std::chrono::steady_clock::now() < deadline);
  return out;
}

/// `mem` equals `expected` everywhere: the number of differing bytes.
size_t differences(const std::vector<std::byte>& mem, const std::vector<std::byte>& expected) {
  size_t n = 0;
  for (size_t i = 0; i < mem.size(); ++i) n += mem[i] != expected[i];
  return n;
}

TEST(NixlEngine, WriteAndReadListsWithOneNotification) {
  Side a("A", 8 * kMiB, 1), b("B", 8 * kMiB, 2);
  auto remote = load(a, b);
  // Sizes around the eager limit and the chunk size; apart on both sides.
  struct Piece {
    size_t local, remote, len;
  } pieces[] = {{10, 4000, 100}, {5000, 100'000, 64 * 1024 + 1}, {300'000, 3 * kMiB + 7, 3 * kMiB}};
  std::vector<LocalDesc> l;
  std::vector<RemoteDesc> r;
  for (const Piece& p : pieces) {
    l.push_back({a.at(p.local), p.len, a.reg.get()});
    r.push_back({b.at(p.remote), p.len, remote.get()});
  }
  auto w = a.engine->prepare(Direction::kWrite, MemKind::kDram, l, MemKind::kDram, r, "B");
  ASSERT_TRUE(w) << w.status().to_string();
  EXPECT_EQ((*w)->operations(), 3u);
  ASSERT_TRUE(run(*a.engine, **w, "written"));
  std::vector<std::byte> expected_b = pattern(b.mem.size(), 2);
  for (const Piece& p : pieces) std::memcpy(expected_b.data() + p.remote, a.mem.data() + p.local, p.len);
  EXPECT_EQ(differences(b.mem, expected_b), 0u);
  auto notes = notifications(*b.engine, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], std::make_pair(std::string("A"), std::string("written")));

  // READ them back into other places of A.
  std::vector<LocalDesc> back;
  for (const Piece& p : pieces) back.push_back({a.at(p.local + 4 * kMiB), p.len, a.reg.get()});
  auto rd = a.engine->prepare(Direction::kRead, MemKind::kDram, back, MemKind::kDram, r, "B");
  ASSERT_TRUE(rd);
  ASSERT_TRUE(run(*a.engine, **rd));
  std::vector<std::byte> expected_a = pattern(a.mem.size(), 1);
  for (const Piece& p : pieces)
    std::memcpy(expected_a.data() + p.local + 4 * kMiB, expected_b.data() + p.remote, p.len);
  EXPECT_EQ(differences(a.mem, expected_a), 0u);
  EXPECT_TRUE(notifications(*b.engine, 0).empty());  // exactly one, earlier
}

TEST(NixlEngine, DescriptorsThatTouchOnBothSidesBecomeOneOperation) {
  Side a("A", kMiB, 1), b("B", kMiB, 2);
  auto remote = load(a, b);
  std::vector<LocalDesc> l;
  std::vector<RemoteDesc> r, scattered;
  for (size_t i = 0; i < 4; ++i) {
    l.push_back({a.at(i * 4096), 4096, a.reg.get()});
    r.push_back({b.at(8192 + i * 4096), 4096, remote.get()});
    scattered.push_back({b.at(8192 + (3 - i) * 4096), 4096, remote.get()});
  }
  auto merged = a.engine->prepare(Direction::kWrite, MemKind::kDram, l, MemKind::kDram, r, "B");
  ASSERT_TRUE(merged);
  EXPECT_EQ((*merged)->operations(), 1u);
  EXPECT_EQ((*merged)->bytes(), 4 * 4096u);
  auto apart = a.engine->prepare(Direction::kWrite, MemKind::kDram, l, MemKind::kDram, scattered, "B");
  ASSERT_TRUE(apart);
  EXPECT_EQ((*apart)->operations(), 4u);
  ASSERT_TRUE(run(*a.engine, **apart));
  std::vector<std::byte> expected = pattern(b.mem.size(), 2);
  for (size_t i = 0; i < 4; ++i) std::memcpy(expected.data() + 8192 + (3 - i) * 4096, a.mem.data() + i * 4096, 4096);
  EXPECT_EQ(differences(b.mem, expected), 0u);
}

TEST(NixlEngine, BadDescriptorsAreRefusedBeforeAnythingMoves) {
  Side a("A", kMiB, 1), b("B", kMiB, 2), c("C", kMiB, 3);
  auto remote = load(a, b);
  auto of_c = load(a, c);
  auto refuse = [&](std::vector<LocalDesc> l, std::vector<RemoteDesc> r, MemKind lk = MemKind::kDram,
                    const char* agent = "B") {
    Result<std::unique_ptr<Transfer>> t = a.engine->prepare(Direction::kWrite, lk, l, MemKind::kDram, r, agent);
    EXPECT_FALSE(t);
    if (!t) {
      EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
      return t.status().message();
    }
    return std::string();
  };
  const LocalDesc good_l{a.at(0), 4096, a.reg.get()};
  const RemoteDesc good_r{b.at(0), 4096, remote.get()};
  EXPECT_NE(refuse({good_l, good_l}, {good_r}).find("2 descriptors"), std::string::npos);
  EXPECT_NE(refuse({{a.at(0), 4096, a.reg.get()}}, {{b.at(0), 4095, remote.get()}}).find("length"), std::string::npos);
  EXPECT_NE(refuse({{a.at(kMiB - 100), 4096, a.reg.get()}}, {good_r}).find("outside"), std::string::npos);
  EXPECT_NE(refuse({good_l}, {{b.at(kMiB - 4095), 4096, remote.get()}}).find("outside"), std::string::npos);
  EXPECT_NE(refuse({{a.at(0) - 1, 4096, a.reg.get()}}, {good_r}).find("outside"), std::string::npos);
  EXPECT_NE(refuse({{~uintptr_t{0} - 10, 4096, a.reg.get()}}, {good_r}).find("outside"), std::string::npos);
  EXPECT_NE(refuse({{a.at(0), 4096, nullptr}}, {good_r}).find("no registration"), std::string::npos);
  EXPECT_NE(refuse({good_l}, {{c.at(0), 4096, of_c.get()}}).find("\"C\""), std::string::npos);  // C's, named as B's
  EXPECT_NE(refuse({good_l}, {good_r}, MemKind::kVram).find("memory type"), std::string::npos);
  EXPECT_NE(refuse({good_l}, {good_r}, MemKind::kDram, "nobody").find("no connection info"), std::string::npos);
  // Nothing was written anywhere.
  EXPECT_EQ(differences(b.mem, pattern(kMiB, 2)), 0u);
  EXPECT_EQ(differences(c.mem, pattern(kMiB, 3)), 0u);
}

TEST(NixlEngine, ADeregisteredRegionIsRefusedAndNothingIsWritten) {
  Side a("A", kMiB, 1), b("B", kMiB, 2);
  auto remote = load(a, b);
  std::vector<LocalDesc> l = {{a.at(0), 200'000, a.reg.get()}};
  std::vector<RemoteDesc> r = {{b.at(1000), 200'000, remote.get()}};
  auto w = a.engine->prepare(Direction::kWrite, MemKind::kDram, l, MemKind::kDram, r, "B");
  auto rd = a.engine->prepare(Direction::kRead, MemKind::kDram, l, MemKind::kDram, r, "B");
  ASSERT_TRUE(w && rd);
  b.reg.reset();  // NIXL's deregisterMem: every key of the region is revoked
  Status s = run(*a.engine, **w, "never");
  EXPECT_EQ(s.code(), StatusCode::kInvalidKey) << s.to_string();
  s = run(*a.engine, **rd);
  EXPECT_EQ(s.code(), StatusCode::kInvalidKey) << s.to_string();
  EXPECT_EQ(differences(b.mem, pattern(kMiB, 2)), 0u);
  EXPECT_EQ(differences(a.mem, pattern(kMiB, 1)), 0u);
  EXPECT_TRUE(notifications(*b.engine, 0).empty());  // a failed transfer notifies nobody
}

TEST(NixlEngine, AForgedKeyIsRefusedAndNothingIsWritten) {
  Side a("A", kMiB, 1), b("B", kMiB, 2);
  ASSERT_TRUE(a.engine->load_conn_info("B", b.engine->conn_info()));
  std::string data = b.engine->public_data(*b.reg);
  data[32] = static_cast<char>(data[32] ^ 0x40);  // one bit of the key's secret
  auto forged = a.engine->load_remote("B", b.at(0), kMiB, MemKind::kDram, data);
  ASSERT_TRUE(forged);  // well-formed: only B can tell
  // A window widened beyond the region, consistently in the descriptor and the key.
  PublicData wide = *decode_public_data(b.engine->public_data(*b.reg));
  wide.key.length = 2 * kMiB;
  auto widened = a.engine->load_remote("B", b.at(0), 2 * kMiB, MemKind::kDram, encode_public_data(wide));
  ASSERT_TRUE(widened);
  for (RemoteMemory* m : {forged->get(), widened->get()}) {
    std::vector<LocalDesc> l = {{a.at(0), 4096, a.reg.get()}};
    std::vector<RemoteDesc> r = {{b.at(0), 4096, m}};
    auto w = a.engine->prepare(Direction::kWrite, MemKind::kDram, l, MemKind::kDram, r, "B");
    ASSERT_TRUE(w);
    Status s = run(*a.engine, **w);
    EXPECT_EQ(s.code(), StatusCode::kInvalidKey) << s.to_string();
  }
  EXPECT_EQ(differences(b.mem, pattern(kMiB, 2)), 0u);
}

TEST(NixlEngine, PublicDataMustDescribeItsRegistration) {
  Side a("A", kMiB, 1), b("B", kMiB, 2);
  const std::string data = b.engine->public_data(*b.reg);
  EXPECT_EQ(a.engine->load_remote("B", b.at(4096), kMiB, MemKind::kDram, data).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(a.engine->load_remote("B", b.at(0), kMiB - 1, MemKind::kDram, data).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(a.engine->load_remote("B", b.at(0), kMiB, MemKind::kVram, data).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(a.engine->load_remote("B", b.at(0), kMiB, MemKind::kDram, "short").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(NixlEngine, AFinishedTransferIsPostedAgainButNotOneInFlight) {
  Side a("A", 4 * kMiB, 1), b("B", 4 * kMiB, 2);
  auto remote = load(a, b);
  std::vector<LocalDesc> l = {{a.at(0), 4 * kMiB, a.reg.get()}};
  std::vector<RemoteDesc> r = {{b.at(0), 4 * kMiB, remote.get()}};
  auto w = a.engine->prepare(Direction::kWrite, MemKind::kDram, l, MemKind::kDram, r, "B");
  ASSERT_TRUE(w);
  for (uint32_t seed : {11u, 12u, 13u}) {
    const std::vector<std::byte> fresh = pattern(a.mem.size(), seed);
    std::memcpy(a.mem.data(), fresh.data(), fresh.size());  // new bytes in the registered memory
    Status s = a.engine->post(**w, "n" + std::to_string(seed));
    if (s.code() == StatusCode::kInProgress) {
      EXPECT_EQ(a.engine->post(**w, std::nullopt).code(), StatusCode::kNoResource);  // NIXL_ERR_REPOST_ACTIVE
    }
    ASSERT_TRUE(finish(*a.engine, **w, s));
    EXPECT_EQ(differences(b.mem, a.mem), 0u);
    auto notes = notifications(*b.engine, 1);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_EQ(notes[0].second, "n" + std::to_string(seed));
  }
}

TEST(NixlEngine, ReleasingATransferInFlightStopsItAndTheNextOneReconnects) {
  Side a("A", 64 * kMiB, 1), b("B", 64 * kMiB, 2);
  auto remote = load(a, b);
  ASSERT_TRUE(a.engine->connect("B"));
  std::vector<LocalDesc> l = {{a.at(0), 64 * kMiB, a.reg.get()}};
  std::vector<RemoteDesc> r = {{b.at(0), 64 * kMiB, remote.get()}};
  auto rd = a.engine->prepare(Direction::kRead, MemKind::kDram, l, MemKind::kDram, r, "B");
  ASSERT_TRUE(rd);
  Status s = a.engine->post(**rd, std::nullopt);
  ASSERT_TRUE(s.code() == StatusCode::kInProgress || s.is_ok()) << s.to_string();
  a.engine->release(**rd);
  rd->reset();
  // The memory is the caller's again: fill it, and no byte of the released READ may land.
  std::vector<std::byte> sentinel = pattern(64 * kMiB, 99);
  std::memcpy(a.mem.data(), sentinel.data(), sentinel.size());
  std::vector<LocalDesc> small_l = {{a.at(0), 4096, a.reg.get()}};
  std::vector<RemoteDesc> small_r = {{b.at(0), 4096, remote.get()}};
  auto w = a.engine->prepare(Direction::kWrite, MemKind::kDram, small_l, MemKind::kDram, small_r, "B");
  ASSERT_TRUE(w);
  s = run(*a.engine, **w);
  EXPECT_TRUE(s) << s.to_string();  // connected again
  EXPECT_EQ(differences(a.mem, sentinel), 0u);
  std::vector<std::byte> expected_b = pattern(b.mem.size(), 2);
  std::memcpy(expected_b.data(), sentinel.data(), 4096);
  EXPECT_EQ(differences(b.mem, expected_b), 0u);
}

TEST(NixlEngine, AGoneAgentFailsItsTransfersWithoutHanging) {
  Side a("A", kMiB, 1);
  std::vector<std::byte> b_mem = pattern(kMiB, 2);
  std::unique_ptr<RemoteMemory> remote;
  {
    Side b("B", kMiB, 2);
    remote = load(a, b);
    ASSERT_TRUE(a.engine->connect("B"));
  }  // B's engine is gone: its endpoints closed
  std::vector<LocalDesc> l = {{a.at(0), 4096, a.reg.get()}};
  std::vector<RemoteDesc> r = {{remote->base(), 4096, remote.get()}};
  auto w = a.engine->prepare(Direction::kWrite, MemKind::kDram, l, MemKind::kDram, r, "B");
  ASSERT_TRUE(w);
  Status s = run(*a.engine, **w);
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << s.to_string();  // NIXL_ERR_REMOTE_DISCONNECT
  EXPECT_EQ(a.engine->notify("B", "x").code(), StatusCode::kPeerFailed);
}

TEST(NixlEngine, AnAgentBackAtTheSameAddressIsConnectedAgain) {
  // B listens at a fixed port; it goes away, and comes back there with the same info.
  // The port is below the kernel's ephemeral range, so that no other test's connection
  // or port-0 listener can take it in between (that made this test fail under ctest -j).
  Side a("A", kMiB, 1);
  uint16_t port = 0;
  std::string info;
  {
    std::unique_ptr<Engine> b;
    std::mt19937 rng(std::random_device{}());
    for (int attempt = 0; attempt < 50 && b == nullptr; ++attempt) {
      port = static_cast<uint16_t>(20000 + rng() % 12000);
      Result<std::unique_ptr<Engine>> e =
          Engine::create("B", EngineParams{.address = "127.0.0.1:" + std::to_string(port), .interfaces = ""});
      if (e) b = std::move(*e);
    }
    ASSERT_NE(b, nullptr) << "no free port in 20000-31999";
    info = b->conn_info();
    ASSERT_TRUE(a.engine->load_conn_info("B", info));
    ASSERT_TRUE(a.engine->connect("B"));
  }
  std::unique_ptr<Engine> again = make_engine("B", "127.0.0.1:" + std::to_string(port));
  ASSERT_NE(again, nullptr);
  ASSERT_EQ(again->conn_info().substr(again->conn_info().find("addr=")), info.substr(info.find("addr=")));
  // Its info differs from the old one's in the instance alone: A replaces the old
  // connection (which it may not yet have seen fail) when NIXL loads the new metadata.
  ASSERT_NE(again->conn_info(), info);
  ASSERT_TRUE(a.engine->load_conn_info("B", again->conn_info()));
  ASSERT_TRUE(a.engine->notify("B", "back"));
  auto notes = notifications(*again, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].second, "back");
}

TEST(NixlEngine, StandaloneNotificationsArriveInOrderAndHaveABound) {
  Side a("A", 4096, 1), b("B", 4096, 2);
  ASSERT_TRUE(a.engine->load_conn_info("B", b.engine->conn_info()));
  const std::vector<std::string> msgs = {"one", "", std::string("\0\1\2", 3), std::string(60'000, 'x'), "last"};
  for (const std::string& m : msgs) ASSERT_TRUE(a.engine->notify("B", m));
  auto notes = notifications(*b.engine, msgs.size());
  ASSERT_EQ(notes.size(), msgs.size());
  for (size_t i = 0; i < msgs.size(); ++i) EXPECT_EQ(notes[i], std::make_pair(std::string("A"), msgs[i]));
  EXPECT_EQ(a.engine->notify("B", std::string(kMaxNotificationBytes, 'y')).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.engine->notify("nobody", "x").code(), StatusCode::kInvalidArgument);
}

TEST(NixlEngine, TransfersWithinOneAgentGoThroughItsOwnListener) {
  Side a("A", kMiB, 1);
  std::unique_ptr<RemoteMemory> self = a.engine->load_local(*a.reg);
  std::vector<LocalDesc> l = {{a.at(0), 100'000, a.reg.get()}};
  std::vector<RemoteDesc> r = {{a.at(500'000), 100'000, self.get()}};
  ASSERT_TRUE(a.engine->connect("A"));
  auto w = a.engine->prepare(Direction::kWrite, MemKind::kDram, l, MemKind::kDram, r, "A");
  ASSERT_TRUE(w) << w.status().to_string();
  ASSERT_TRUE(run(*a.engine, **w, "self"));
  std::vector<std::byte> expected = pattern(kMiB, 1);
  std::memcpy(expected.data() + 500'000, expected.data(), 100'000);
  EXPECT_EQ(differences(a.mem, expected), 0u);
  auto notes = notifications(*a.engine, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], std::make_pair(std::string("A"), std::string("self")));
}

TEST(NixlEngine, ConnectionInfoNamesWhereItListens) {
  auto specific = make_engine("S", "127.0.0.1:0");
  Result<ConnInfo> s = decode_conn_info(specific->conn_info());
  ASSERT_TRUE(s);
  ASSERT_EQ(s->addresses.size(), 1u);
  EXPECT_TRUE(s->addresses[0].starts_with("127.0.0.1:"));
  EXPECT_EQ(s->host, local_host_identity());

  auto wildcard = make_engine("W", "0.0.0.0:0");
  Result<ConnInfo> w = decode_conn_info(wildcard->conn_info());
  ASSERT_TRUE(w);
  ASSERT_FALSE(w->addresses.empty());
  EXPECT_TRUE(is_loopback_address(w->addresses.back())) << wildcard->conn_info();  // loopback last
  for (const std::string& addr : w->addresses) EXPECT_NE(addr.find(':'), std::string::npos);

  auto only_lo = make_engine("L", "0.0.0.0:0", "lo");
  Result<ConnInfo> lo = decode_conn_info(only_lo->conn_info());
  ASSERT_TRUE(lo);
  for (const std::string& addr : lo->addresses) EXPECT_TRUE(is_loopback_address(addr)) << addr;

  EXPECT_FALSE(Engine::create("N", EngineParams{.address = "0.0.0.0:0", .interfaces = "no-such-if0"}));
}

TEST(NixlEngine, AnotherHostsLoopbackAddressesAreNeverTried) {
  ConnInfo info{.host = "elsewhere", .addresses = {"127.0.0.1:1", "10.1.2.3:7", "[::1]:1", "10.9.9.9:7"}, .instance = {}};
  EXPECT_EQ(connect_candidates(info, false), (std::vector<std::string>{"10.1.2.3:7", "10.9.9.9:7"}));
  EXPECT_EQ(connect_candidates(info, true),
            (std::vector<std::string>{"127.0.0.1:1", "[::1]:1", "10.1.2.3:7", "10.9.9.9:7"}));
}

}  // namespace
}  // namespace remora::nixl_plugin
