// devmem TX driven by the endpoint (datapath/devmem_tx_path.h), on a machine where no
// NIC can bind a dmabuf for transmit. What is real here: the endpoints and their data
// streams (loopback TCP, another process receiving), the test device's memory, exported
// as the memfd behind it (TestDeviceOptions::export_memfd: a stand-in for a dmabuf), the
// SO_ZEROCOPY streams and the kernel's MSG_ZEROCOPY completions on their error queues,
// which gate each send's completion. What stands in for the kernel and NIC (and only in
// the sending process): bind-tx, which maps the "dmabuf" instead of binding it, and the
// devmem sendmsg, which becomes a MSG_ZEROCOPY send of the same bytes straight from that
// mapping, so the kernel reads the device memory after sendmsg returns, as the NIC would.
// Also against the real kernel: the devmem sendmsg itself on loopback (EINVAL: no such
// binding), which fails the send and the endpoint with that errno, without a hang.
#include <net/if.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include "datapath/devmem_tx_path.h"
#include "itest_util.h"
#include "remora/testing/test_device.h"
#include "support/exchange.h"
#include "support/test_data.h"
#include "zerocopy/devmem_tx.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;
using testing::TestDeviceDomain;

constexpr uint64_t kChunk = 64 * 1024;

/// A stand-in of the kernel and NIC for devmem TX (see the top of this file). Counts
/// what it was asked, and the bindings still held.
struct StandinNic {
  struct Mapping {
    std::byte* base = nullptr;
    size_t size = 0;
  };
  std::mutex mu;
  std::map<uint32_t, Mapping> bound;  // binding id -> the "dmabuf" mapped
  uint32_t next_id = 77;
  std::atomic<uint64_t> binds{0}, sends{0}, bytes{0};
  uint32_t lo = ::if_nametoindex("lo");
  bool refuse_bind = false;

  std::shared_ptr<const detail::DevmemTxKernel> kernel() {
    auto k = std::make_shared<detail::DevmemTxKernel>();
    k->bind_tx = [this](uint32_t ifindex, int fd) -> Result<detail::DevmemTxBinding> {
      if (refuse_bind) return Status(StatusCode::kUnsupported, "stand-in NIC: no netmem TX");
      if (ifindex != lo) return Status(StatusCode::kInvalidArgument, "stand-in NIC: not lo");
      struct stat st {};
      if (::fstat(fd, &st) != 0 || st.st_size <= 0) return Status(StatusCode::kInvalidArgument, "stand-in: fstat");
      void* base = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) return Status(StatusCode::kInvalidArgument, "stand-in: mmap");
      std::lock_guard lock(mu);
      const uint32_t id = next_id++;
      bound[id] = Mapping{static_cast<std::byte*>(base), static_cast<size_t>(st.st_size)};
      ++binds;
      // Unbound (unmapped) when the endpoint lets the binding go.
      auto hold = std::shared_ptr<void>(nullptr, [this, id](void*) {
        std::lock_guard l(mu);
        auto it = bound.find(id);
        if (it != bound.end()) {
          ::munmap(it->second.base, it->second.size);
          bound.erase(it);
        }
      });
      return detail::DevmemTxBinding{.id = id, .hold = hold};
    };
    k->send = [this](int fd, uint32_t id, uint64_t offset, size_t len) -> net::IoResult {
      Mapping m;
      {
        std::lock_guard lock(mu);
        auto it = bound.find(id);
        if (it == bound.end() || offset > it->second.size || len > it->second.size - offset) {
          return net::IoResult{.kind = net::IoResult::Kind::kError, .err = EINVAL};  // as the kernel answers
        }
        m = it->second;
      }
      ++sends;
      const net::IoResult r = zerocopy::send_zerocopy(fd, m.base + offset, len);
      if (r.kind == net::IoResult::Kind::kBytes) bytes += r.bytes;
      return r;
    };
    return k;
  }
  size_t held() {
    std::lock_guard lock(mu);
    return bound.size();
  }
};

/// `nic`'s kernel, except that its sendmsgs are ordinary sends: the bytes arrive, but the
/// kernel never reports them on the error queue, as for a NIC that has not read the
/// memory yet.
std::shared_ptr<const detail::DevmemTxKernel> never_completing(StandinNic& nic) {
  auto k = std::make_shared<detail::DevmemTxKernel>(*nic.kernel());
  k->send = [&nic](int fd, uint32_t id, uint64_t offset, size_t len) -> net::IoResult {
    std::byte* base = nullptr;
    {
      std::lock_guard lock(nic.mu);
      base = nic.bound.at(id).base;
    }
    const ssize_t n = ::send(fd, base + offset, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return net::IoResult{.kind = net::IoResult::Kind::kBytes, .bytes = static_cast<size_t>(n)};
    if (errno == EAGAIN) return net::IoResult{.kind = net::IoResult::Kind::kWouldBlock};
    return net::IoResult{.kind = net::IoResult::Kind::kError, .err = errno};
  };
  return k;
}

/// Puts a stand-in kernel in place for the test's duration.
struct ScopedKernel {
  explicit ScopedKernel(std::shared_ptr<const detail::DevmemTxKernel> k) {
    detail::set_devmem_tx_kernel_for_tests(std::move(k));
  }
  ~ScopedKernel() { detail::set_devmem_tx_kernel_for_tests(nullptr); }
  ScopedKernel(const ScopedKernel&) = delete;
  ScopedKernel& operator=(const ScopedKernel&) = delete;
};

/// `data` copied into new memory of `dev` (nullptr on failure, reported).
std::byte* on_device(TestDeviceDomain& dev, const std::vector<std::byte>& data) {
  auto mem = dev.allocate(data.size());
  EXPECT_TRUE(mem.is_ok());
  if (!mem) return nullptr;
  const Status w = dev.write(*mem, data.data(), data.size());
  EXPECT_TRUE(w.is_ok()) << describe(w);
  return w.is_ok() ? *mem : nullptr;
}

/// `a` (sending) connected to a plain context in this process (with `peer_timeout_ms`,
/// if given).
Pair pair_with(DeviceContext& a, std::optional<uint32_t> peer_timeout_ms = std::nullopt) {
  auto b = Context::create(ContextOptions{
      .streams_per_endpoint = 2, .chunk_bytes = kChunk, .peer_timeout_ms = peer_timeout_ms, .ignore_env = true});
  EXPECT_TRUE(b.is_ok()) << describe(b.status());
  if (!b) return {};
  return make_pair_in_process(std::move(a.ctx), std::move(*b));
}

DeviceContext exporting_context(DevicePathMode mode, std::optional<uint32_t> peer_timeout_ms = std::nullopt) {
  DeviceContext d;
  d.dev = TestDeviceDomain::create({.capacity = size_t{64} << 20, .export_memfd = true}).value();
  ::setenv("REMORA_DEVMEM_IFNAME", "lo", 1);  // read by Context::create
  auto ctx = Context::create(ContextOptions{
      .streams_per_endpoint = 2, .chunk_bytes = kChunk, .peer_timeout_ms = peer_timeout_ms, .device_path = mode});
  ::unsetenv("REMORA_DEVMEM_IFNAME");
  EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
  if (!ctx) return d;
  d.ctx = std::move(ctx).value();
  EXPECT_TRUE(d.ctx->add_memory_domain(*d.dev).is_ok());
  return d;
}

/// A context with an exporting test device (`mode`) paired with a plain one, and `len`
/// bytes of test stream `seed` in its device memory, ready to be sent from `src`.
struct Sender {
  DeviceContext a;  // before the pair: it outlives it
  Pair p;
  std::vector<std::byte> data;
  std::byte* src = nullptr;
};

Sender sender(DevicePathMode mode, uint64_t len, uint64_t seed,
              std::optional<uint32_t> peer_timeout_ms = std::nullopt) {
  Sender s;
  s.a = exporting_context(mode, peer_timeout_ms);
  if (!s.a.ctx) return s;
  s.p = pair_with(s.a, peer_timeout_ms);
  s.data = stream_bytes(len, seed);
  s.src = on_device(*s.a.dev, s.data);
  return s;
}

TEST(DevmemTxEndpoint, MessagesOfDeviceMemoryGoByDevmemAndCompleteOnlyOnceTheKernelIsDone) {
  StandinNic nic;
  ScopedKernel scoped(nic.kernel());
  DeviceContext mine = exporting_context(DevicePathMode::kAuto);
  ASSERT_TRUE(mine.ctx);
  // One byte, a chunk and one, several chunks from an offset that is not page-aligned.
  const std::vector<uint64_t> sizes = {1, kChunk + 1, 5 * kChunk + 3};
  std::string list;
  for (uint64_t s : sizes) list += (list.empty() ? "" : ",") + std::to_string(s);
  PeerSession s = start_listening_peer(
      *mine.ctx, {"--scenario=device-echo", "--sizes=" + list, "--memory=device", "--close=follow"},
      {"REMORA_CHUNK_SIZE=" + std::to_string(kChunk)});
  ASSERT_TRUE(s.ep);
  std::byte* out = mine.dev->allocate(6 * kChunk + 4096).value() + 100;
  std::byte* in = mine.dev->allocate(6 * kChunk).value();
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("message of " + std::to_string(sizes[i]) + " bytes");
    const auto data = stream_bytes(sizes[i], i + 1);
    ASSERT_TRUE(mine.dev->write(out, data.data(), sizes[i]).is_ok());
    const uint64_t binds = nic.binds.load();
    const Status sent = s.ep->send(std::span<const std::byte>(out, sizes[i]), Tag{100 + i}).wait(60s);
    ASSERT_TRUE(sent.is_ok()) << describe(sent);
    // Complete means the kernel reported every sendmsg of it done (the next test shows a
    // send is held until then). One binding per send.
    EXPECT_EQ(nic.binds.load(), binds + 1);
    const EndpointStats st = s.ep->stats();
    EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
    EXPECT_NE(st.device_path_reason.find("devmem TX: test-device memory exported as a dmabuf and bound for transmit "
                                         "on lo"),
              std::string::npos)
        << st.device_path_reason;
    EXPECT_EQ(st.devmem_transfers, i + 1);
    auto line = s.peer->read_line(60s);
    ASSERT_TRUE(line);
    EXPECT_EQ(*line, "RECV " + std::to_string(i) + " ok " + hex64(XXH3_64bits(data.data(), data.size())));
    // The echo comes back by staging (devmem receive is not driven), intact.
    ASSERT_TRUE(s.ep->recv(std::span(in, sizes[i]), Tag{200 + i}).wait(60s).is_ok());
    std::vector<std::byte> got(sizes[i]);
    ASSERT_TRUE(mine.dev->read(got.data(), in, sizes[i]).is_ok());
    EXPECT_TRUE(got == data);
  }
  EXPECT_EQ(nic.bytes.load(), 1 + (kChunk + 1) + (5 * kChunk + 3));
  EXPECT_GE(nic.sends.load(), 1u + 2u + 6u);      // at least one sendmsg per chunk
  EXPECT_EQ(s.ep->stats().staged_transfers, 3u);  // the three echoes
  EXPECT_EQ(*s.peer->read_line(60s), "DONE");
  EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
  EXPECT_EQ(nic.held(), 0u);  // every binding went with its send
}

TEST(DevmemTxEndpoint, ARefusedBindStagesUnderAutoAndFailsADemandedDevmemSend) {
  StandinNic nic;
  nic.refuse_bind = true;
  ScopedKernel scoped(nic.kernel());
  for (const DevicePathMode mode : {DevicePathMode::kAuto, DevicePathMode::kDevmem}) {
    SCOPED_TRACE(mode == DevicePathMode::kAuto ? "auto" : "devmem");
    const uint64_t len = 3 * kChunk + 5;
    Sender snd = sender(mode, len, 9);
    Pair& p = snd.p;
    ASSERT_TRUE(p.ea && p.eb && snd.src != nullptr);
    const auto& data = snd.data;
    std::byte* out = snd.src;
    std::vector<std::byte> got(len);
    Request r = p.eb->recv(std::span(got), Tag{1});
    const Status sent = p.ea->send(std::span<const std::byte>(out, len), Tag{1}).wait(30s);
    const EndpointStats st = p.ea->stats();
    EXPECT_NE(st.device_path_reason.find("interface: lo: bind-tx of a test-device dmabuf: stand-in NIC: no netmem TX"),
              std::string::npos)
        << st.device_path_reason;
    if (mode == DevicePathMode::kAuto) {
      ASSERT_TRUE(sent.is_ok()) << describe(sent);
      ASSERT_TRUE(r.wait(30s).is_ok());
      EXPECT_TRUE(got == data);
      EXPECT_EQ(st.device_path, "staging");
      EXPECT_EQ(st.staged_transfers, 1u);
    } else {
      EXPECT_EQ(sent.code(), StatusCode::kUnsupported) << describe(sent);
      EXPECT_EQ(st.device_path, "refused");
      EXPECT_EQ(st.device_path_refusals, 1u);
      // The endpoint goes on: a host message still arrives.
      const auto host = stream_bytes(100, 3);
      ASSERT_TRUE(p.ea->send(std::span(host), Tag{1}).wait(30s).is_ok());
      ASSERT_TRUE(r.wait(30s).is_ok());
      EXPECT_TRUE(std::equal(host.begin(), host.end(), got.begin()));
    }
    EXPECT_EQ(st.devmem_transfers, 0u);
    EXPECT_EQ(nic.binds.load(), 0u);
    reset(p);
  }
}

TEST(DevmemTxEndpoint, ASendIsNotCompleteWhileTheKernelHasNotReportedItsSendmsgsDone) {
  // A stand-in whose sendmsgs are ordinary sends: the bytes arrive, but the kernel never
  // reports them on the error queue, as a NIC that has not read the memory yet would not.
  StandinNic nic;
  ScopedKernel scoped(never_completing(nic));
  const uint64_t len = 2 * kChunk + 7;
  Sender snd = sender(DevicePathMode::kAuto, len, 5);
  Pair& p = snd.p;
  ASSERT_TRUE(p.ea && p.eb && snd.src != nullptr);
  const auto& data = snd.data;
  std::byte* out = snd.src;
  std::vector<std::byte> got(len);
  Request r = p.eb->recv(std::span(got), Tag{1});
  Request sent = p.ea->send(std::span<const std::byte>(out, len), Tag{1});
  ASSERT_TRUE(r.wait(30s).is_ok());  // every byte arrived
  EXPECT_TRUE(got == data);
  // ...but the send is held: the memory may still be read. (A bounded wait that must
  // run out; it never completes however long it waits.)
  EXPECT_EQ(sent.wait(300ms).code(), StatusCode::kTimeout);
  EXPECT_EQ(nic.held(), 1u);
  EXPECT_EQ(p.ea->stats().devmem_transfers, 0u);
  // Aborting the endpoint fails it, and lets the binding go.
  p.ea->abort();
  const Status after = sent.wait(30s);
  EXPECT_FALSE(after.is_ok());
  EXPECT_NE(after.code(), StatusCode::kTimeout) << describe(after);
  reset(p);  // the endpoints and contexts gone: so is the binding
  EXPECT_EQ(nic.held(), 0u);
}

/// `nic`'s kernel, except that it shuts down the data stream its `at`-th sendmsg is for
/// first (the sendmsg then fails: EPIPE), and records the byte range of each sendmsg
/// that sent bytes.
struct BreakingKernel {
  BreakingKernel(StandinNic& n, uint64_t call) : nic(n), at(call) {}
  StandinNic& nic;
  uint64_t at;
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> by_devmem;  // [offset, end) of each sendmsg that sent bytes
  std::set<int> sent_on;                                 // the sockets of those sendmsgs
  uint64_t calls = 0;
  int broken = -1;

  std::shared_ptr<const detail::DevmemTxKernel> kernel() {
    auto k = std::make_shared<detail::DevmemTxKernel>(*nic.kernel());
    k->send = [this, send = k->send](int fd, uint32_t id, uint64_t offset, size_t n) {
      {
        std::lock_guard lock(mu);
        if (++calls == at) {
          ::shutdown(fd, SHUT_RDWR);
          broken = fd;
        }
      }
      const net::IoResult r = send(fd, id, offset, n);
      std::lock_guard lock(mu);
      if (r.kind == net::IoResult::Kind::kBytes && r.bytes > 0) {
        by_devmem.emplace_back(offset, offset + r.bytes);
        sent_on.insert(fd);
      }
      return r;
    };
    return k;
  }
  /// The stream broke, and no byte range went by devmem twice (a chunk sent again went
  /// from a host copy).
  void expect_broken_and_nothing_sent_twice_by_devmem() {
    std::lock_guard lock(mu);
    EXPECT_GE(broken, 0) << "the stream was never broken (" << calls << " sendmsgs)";
    std::sort(by_devmem.begin(), by_devmem.end());
    for (size_t i = 1; i < by_devmem.size(); ++i) {
      EXPECT_LE(by_devmem[i - 1].second, by_devmem[i].first)
          << "bytes from " << by_devmem[i].first << " went by devmem twice";
    }
  }
};

/// A devmem sender whose stream breaks at the 20th sendmsg, and `len` bytes of test
/// stream `seed` in its device memory.
struct BreakingSender {
  explicit BreakingSender(uint64_t seed, std::optional<uint32_t> peer_timeout_ms = std::nullopt)
      : snd(sender(DevicePathMode::kAuto, len, seed, peer_timeout_ms)) {}
  static constexpr uint64_t len = 64 * kChunk + 11;
  StandinNic nic;
  BreakingKernel breaking{nic, 20};
  ScopedKernel scoped{breaking.kernel()};
  Sender snd;

  /// Failover went as expected on the sending (or serving) endpoint and its peer.
  void expect_one_stream_retired_and_chunks_resent() {
    const EndpointStats st = snd.p.ea->stats();
    EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
    EXPECT_TRUE(st.failover);
    EXPECT_EQ(st.streams_retired, 1u);
    EXPECT_GE(st.chunks_resent, 1u);
    EXPECT_EQ(snd.p.eb->stats().streams_retired, 1u);
    breaking.expect_broken_and_nothing_sent_twice_by_devmem();
  }
};

// Failover: a data stream that breaks in the middle of a devmem send (the stand-in shuts
// it down at the 20th sendmsg) is retired, and the chunks on it the peer had not
// confirmed go again on the other stream, copied out of the device into host memory
// (the surviving stream may leave by a NIC that holds no binding of this memory): no
// byte range goes by devmem twice, and the message lands once, every byte checked.
TEST(DevmemTxEndpoint, AStreamBrokenMidSendHasItsChunksSentAgainFromHostCopies) {
  BreakingSender b(9);
  Pair& p = b.snd.p;
  ASSERT_TRUE(p.ea && p.eb && b.snd.src != nullptr);
  std::vector<std::byte> got(b.len);
  Request r = p.eb->recv(std::span(got), Tag{1});
  Request sent = p.ea->send(std::span<const std::byte>(b.snd.src, b.len), Tag{1});
  const Status received = r.wait(60s);
  ASSERT_TRUE(received.is_ok()) << describe(received);
  const Status done = sent.wait(60s);
  ASSERT_TRUE(done.is_ok()) << describe(done);
  EXPECT_TRUE(got == b.snd.data);
  b.expect_one_stream_retired_and_chunks_resent();
}

// After the break, while the stream is retired, the next message still goes by devmem
// (on the stream left; a retired stream has no socket to set up). Then the plain side
// connects the stream again (REJOIN; its first attempt at a heartbeat tick, a quarter
// of the 4 s peer timeout) and the sender takes it back with zero-copy completions on:
// a message announced while the stream was retired (its send waiting for the receive,
// posted only after the rejoin), and one sent after the rejoin, both go by devmem on
// both streams.
TEST(DevmemTxEndpoint, AMessageGoesByDevmemWhileAStreamIsRetiredAndOnItOnceItIsBack) {
  BreakingSender b(11, /*peer_timeout_ms=*/4000);
  Pair& p = b.snd.p;
  ASSERT_TRUE(p.ea && p.eb && b.snd.src != nullptr);
  auto forget_sockets = [&] {
    std::lock_guard lock(b.breaking.mu);
    b.breaking.sent_on.clear();
  };
  // Receives message `tag`, whose send is `sent` (posted already); the number of sockets
  // its devmem sendmsgs went on.
  auto receive = [&](uint64_t tag, const Request& sent) -> size_t {
    std::vector<std::byte> got(b.len);
    const Status received = p.eb->recv(std::span(got), Tag{tag}).wait(60s);
    EXPECT_TRUE(received.is_ok()) << describe(received);
    const Status done = sent.wait(60s);
    EXPECT_TRUE(done.is_ok()) << describe(done);
    EXPECT_TRUE(got == b.snd.data);
    const EndpointStats st = p.ea->stats();
    EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
    std::lock_guard lock(b.breaking.mu);
    return b.breaking.sent_on.size();
  };
  auto send_once = [&](uint64_t tag) -> size_t {
    forget_sockets();
    return receive(tag, p.ea->send(std::span<const std::byte>(b.snd.src, b.len), Tag{tag}));
  };
  send_once(1);  // stream 1 breaks under it
  b.expect_one_stream_retired_and_chunks_resent();
  const bool retired_throughout = p.ea->stats().streams_rejoined == 0;
  const size_t streams_while_retired = send_once(2);
  // Message 3 is announced now; with no receive for it, it waits (for the CTS).
  forget_sockets();
  const Request announced = p.ea->send(std::span<const std::byte>(b.snd.src, b.len), Tag{3});
  const bool announced_while_retired = p.ea->stats().streams_rejoined == 0;
  if (retired_throughout && announced_while_retired) {
    // Stream 1 was retired from before message 2 until after it: the one stream left.
    EXPECT_EQ(streams_while_retired, 1u);
  }
  // A bounded wait for the rejoin, which no event of the API reports.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while ((p.ea->stats().streams_rejoined == 0 || p.eb->stats().streams_rejoined == 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(p.ea->stats().streams_rejoined, 1u);
  ASSERT_EQ(p.eb->stats().streams_rejoined, 1u);
  EXPECT_FALSE(announced.done()) << "message 3 completed with no receive for it";
  EXPECT_EQ(receive(3, announced), 2u) << "the message announced before the rejoin went on one stream only";
  ::testing::Test::RecordProperty("announced_while_retired", announced_while_retired ? "yes" : "no");
  EXPECT_EQ(send_once(4), 2u) << "devmem sends went on one stream only";
}

// The same for a peer's get of a registered device region, served by devmem: the chunks
// go again from host copies read through the region (bracketed as every read of it),
// the get completes with every byte checked, and deregistration then returns with every
// binding gone.
TEST(DevmemTxEndpoint, AStreamBrokenMidServedGetHasItsChunksSentAgainFromHostCopies) {
  BreakingSender b(10);
  Pair& p = b.snd.p;
  ASSERT_TRUE(p.ea && p.eb && b.snd.src != nullptr);
  auto region = p.a->register_memory(b.snd.src, b.len, Access::kRemoteRead);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  std::vector<std::byte> got(b.len);
  const Status done = p.eb->get(std::span(got), region->remote_key(), 0).wait(60s);
  ASSERT_TRUE(done.is_ok()) << describe(done);
  EXPECT_TRUE(got == b.snd.data);
  b.expect_one_stream_retired_and_chunks_resent();
  region->deregister();
  reset(p);
  EXPECT_EQ(b.nic.held(), 0u);
}

TEST(DevmemTxEndpoint, ChunkedPutsOfDeviceMemoryGoByDevmemAndInlineOnesInTheirFrame) {
  StandinNic nic;
  ScopedKernel scoped(nic.kernel());
  DeviceContext a = exporting_context(DevicePathMode::kAuto);
  ASSERT_TRUE(a.ctx);
  Pair p = pair_with(a);
  ASSERT_TRUE(p.ea && p.eb);
  // The target's window: host memory of the plain context.
  const uint64_t window_len = 6 * kChunk;
  std::vector<std::byte> window(window_len, std::byte{0x5a});
  auto region = p.b->register_memory(window.data(), window.size(), Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  const RemoteKey key = region->remote_key();
  uint64_t devmem_puts = 0;
  // Inline (below the eager limit), one chunk and one byte, several chunks, at an
  // unaligned offset on both sides.
  for (const uint64_t len : {uint64_t{100}, kChunk + 1, 4 * kChunk + 7}) {
    SCOPED_TRACE("put of " + std::to_string(len) + " bytes");
    const auto data = stream_bytes(len, len);
    std::byte* src = on_device(*a.dev, data);
    ASSERT_NE(src, nullptr);
    const uint64_t binds = nic.binds.load();
    const Status put = p.ea->put(std::span<const std::byte>(src, len), key, 333).wait(30s);
    ASSERT_TRUE(put.is_ok()) << describe(put);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), window.begin() + 333));
    const EndpointStats st = p.ea->stats();
    if (len <= 100) {  // inline: staged into its PUT frame
      EXPECT_EQ(nic.binds.load(), binds);
      EXPECT_EQ(st.device_path, "staging");
      EXPECT_NE(st.device_path_reason.find("an inline put or get reply travels in its frame"), std::string::npos)
          << st.device_path_reason;
    } else {
      EXPECT_EQ(nic.binds.load(), binds + 1);
      EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
      ++devmem_puts;
    }
    EXPECT_EQ(st.devmem_transfers, devmem_puts);
  }
  // A flush after them completes, and covers nothing that failed.
  EXPECT_TRUE(p.ea->flush().wait(30s).is_ok());
  reset(p);
  EXPECT_EQ(nic.held(), 0u);
}

TEST(DevmemTxEndpoint, SendsAndPutsFromARegisteredRegionShareItsOneBindingUntilItIsDeregistered) {
  StandinNic nic;
  ScopedKernel scoped(nic.kernel());
  // A KV-cache-like region of device memory, registered once, sent from in pieces.
  const uint64_t len = 6 * kChunk;
  Sender snd = sender(DevicePathMode::kAuto, len, 11);
  Pair& p = snd.p;
  ASSERT_TRUE(p.ea && p.eb && snd.src != nullptr);
  DeviceContext& a = snd.a;
  const auto& contents = snd.data;
  std::byte* mem = snd.src;
  auto region = p.a->register_memory(mem, len, Access::kLocalWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  // Messages (and their receives into host memory), each from another part of it.
  auto send_from = [&](const std::byte* src, uint64_t n, uint64_t tag, const std::byte* expect) {
    std::vector<std::byte> got(n);
    Request r = p.eb->recv(std::span(got), Tag{tag});
    const Status sent = p.ea->send(std::span<const std::byte>(src, n), Tag{tag}).wait(30s);
    EXPECT_TRUE(sent.is_ok()) << describe(sent);
    EXPECT_TRUE(r.wait(30s).is_ok());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expect)) << "message " << tag << " differs";
  };
  auto at = [&](uint64_t offset) { return contents.data() + offset; };
  const uint64_t binds = nic.binds.load();
  send_from(mem + 1000, kChunk + 1, 1, at(1000));
  EXPECT_EQ(nic.binds.load(), binds + 1);  // the region's binding, made by its first send
  EXPECT_NE(p.ea->stats().device_path_reason.find("its registered region's, kept until the region is deregistered"),
            std::string::npos)
      << p.ea->stats().device_path_reason;
  send_from(mem, 1, 2, at(0));
  send_from(mem + len - 3 * kChunk - 5, 3 * kChunk + 5, 3, at(len - 3 * kChunk - 5));  // up to its last byte
  EXPECT_EQ(nic.binds.load(), binds + 1);                                              // no more binds
  EXPECT_EQ(nic.held(), 1u);                                                           // kept after the sends completed
  // A chunked put from it too.
  std::vector<std::byte> window(2 * kChunk, std::byte{0x5a});
  auto target = p.b->register_memory(window.data(), window.size(), Access::kRemoteWrite);
  ASSERT_TRUE(target.is_ok()) << describe(target.status());
  ASSERT_TRUE(p.ea->put(std::span<const std::byte>(mem + 7, kChunk + 9), target->remote_key(), 0).wait(30s).is_ok());
  EXPECT_TRUE(std::equal(contents.begin() + 7, contents.begin() + 7 + kChunk + 9, window.begin()));
  EXPECT_EQ(nic.binds.load(), binds + 1);
  EXPECT_EQ(p.ea->stats().devmem_transfers, 4u);
  // Memory in no registered region is bound for its send alone.
  const auto loose = stream_bytes(kChunk + 3, 12);
  std::byte* other = on_device(*a.dev, loose);
  ASSERT_NE(other, nullptr);
  send_from(other, loose.size(), 4, loose.data());
  EXPECT_EQ(nic.binds.load(), binds + 2);
  EXPECT_EQ(nic.held(), 1u);  // that one went with its send; the region's stays
  EXPECT_NE(p.ea->stats().device_path_reason.find("this transfer's own: the memory is in no registered region"),
            std::string::npos)
      << p.ea->stats().device_path_reason;
  // Deregistration lets the region's binding go at once.
  region->deregister();
  EXPECT_EQ(nic.held(), 0u);
  // Registered again, the same memory is bound again, once.
  auto again = p.a->register_memory(mem, len, Access::kLocalWrite);
  ASSERT_TRUE(again.is_ok()) << describe(again.status());
  send_from(mem + 64, 2 * kChunk, 5, at(64));
  send_from(mem + 3 * kChunk, kChunk, 6, at(3 * kChunk));
  EXPECT_EQ(nic.binds.load(), binds + 3);
  EXPECT_EQ(nic.held(), 1u);
  target->deregister();
  reset(p);  // the context's bindings go with it, though the region is still registered
  EXPECT_EQ(nic.held(), 0u);
}

TEST(DevmemTxEndpoint, APutIsNotCompleteWhileTheKernelHasNotReportedItsSendmsgsDone) {
  StandinNic nic;
  ScopedKernel scoped(never_completing(nic));
  const uint64_t len = 3 * kChunk;
  Sender snd = sender(DevicePathMode::kAuto, len, 11);
  Pair& p = snd.p;
  ASSERT_TRUE(p.ea && p.eb && snd.src != nullptr);
  const auto& data = snd.data;
  std::byte* src = snd.src;
  std::vector<std::byte> window(len);
  auto region = p.b->register_memory(window.data(), window.size(), Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  Request put = p.ea->put(std::span<const std::byte>(src, len), region->remote_key(), 0, {.notify = 7});
  // The target has every byte (its notification comes after the data)...
  auto note = p.eb->wait_notification(30s);
  ASSERT_TRUE(note.is_ok()) << describe(note.status());
  EXPECT_EQ(note->value, 7u);
  EXPECT_TRUE(window == data);
  // ...but the put is held while the memory may still be read (a bounded wait that must
  // run out), and a flush behind it waits too.
  EXPECT_EQ(put.wait(300ms).code(), StatusCode::kTimeout);
  Request flush = p.ea->flush();
  EXPECT_EQ(flush.wait(50ms).code(), StatusCode::kTimeout);
  EXPECT_EQ(nic.held(), 1u);
  p.ea->abort();
  const Status after = put.wait(30s);
  EXPECT_FALSE(after.is_ok());
  EXPECT_NE(after.code(), StatusCode::kTimeout) << describe(after);
  EXPECT_FALSE(flush.wait(30s).is_ok());
  reset(p);
  EXPECT_EQ(nic.held(), 0u);
}

TEST(DevmemTxEndpoint, APeersChunkedGetOfADeviceRegionIsSentByDevmemThroughTheRegionsBinding) {
  StandinNic nic;
  ScopedKernel scoped(nic.kernel());
  const uint64_t len = 5 * kChunk + 123;
  Sender snd = sender(DevicePathMode::kAuto, len, 21);  // its context (p.ea) serves; the plain one gets
  Pair& p = snd.p;
  ASSERT_TRUE(p.ea && p.eb && snd.src != nullptr);
  const auto& contents = snd.data;
  auto region = p.a->register_memory(snd.src, len, Access::kRemoteRead);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  const RemoteKey key = region->remote_key();
  const uint64_t binds = nic.binds.load();
  uint64_t by_devmem = 0;
  // Chunked replies from unaligned offsets (one chunk and one, several, up to the last
  // byte), and an inline one (in its RESP frame, copied out of the device).
  struct Case {
    uint64_t offset, length;
  };
  for (const Case c :
       {Case{5, kChunk + 1}, Case{kChunk, 3 * kChunk + 7}, Case{len - 2 * kChunk - 9, 2 * kChunk + 9}, Case{77, 100}}) {
    SCOPED_TRACE(fmt::format("get of {} bytes at {}", c.length, c.offset));
    std::vector<std::byte> got(c.length + 16, std::byte{0xee});
    const Status g = p.eb->get(std::span(got.data(), c.length), key, c.offset).wait(30s);
    ASSERT_TRUE(g.is_ok()) << describe(g);
    EXPECT_TRUE(std::equal(contents.begin() + static_cast<std::ptrdiff_t>(c.offset),
                           contents.begin() + static_cast<std::ptrdiff_t>(c.offset + c.length), got.begin()));
    EXPECT_TRUE(std::all_of(got.end() - 16, got.end(), [](std::byte b) { return b == std::byte{0xee}; }));
    const EndpointStats st = p.ea->stats();
    if (c.length <= 100) {
      EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;
    } else {
      ++by_devmem;
      EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
      EXPECT_NE(st.device_path_reason.find("its registered region's"), std::string::npos) << st.device_path_reason;
    }
    EXPECT_EQ(st.devmem_transfers, by_devmem);
  }
  EXPECT_EQ(p.ea->stats().served_gets, 4u);
  EXPECT_EQ(nic.binds.load(), binds + 1);  // the region's one binding served every reply
  EXPECT_GE(nic.bytes.load(), (kChunk + 1) + (3 * kChunk + 7) + (2 * kChunk + 9));
  region->deregister();
  EXPECT_EQ(nic.held(), 0u);
  reset(p);
}

TEST(DevmemTxEndpoint, AServedGetIsNotAnsweredWhileTheKernelHasNotReportedItsReplyDone) {
  StandinNic nic;
  ScopedKernel scoped(never_completing(nic));
  const uint64_t len = 3 * kChunk;
  Sender snd = sender(DevicePathMode::kAuto, len, 22);
  Pair& p = snd.p;
  ASSERT_TRUE(p.ea && p.eb && snd.src != nullptr);
  auto region = p.a->register_memory(snd.src, len, Access::kRemoteRead);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  std::vector<std::byte> got(len);
  Request get = p.eb->get(std::span(got), region->remote_key(), 0);
  // Every byte may be there, but the target answers only once the NIC is done reading
  // the region (a bounded wait that must run out).
  EXPECT_EQ(get.wait(300ms).code(), StatusCode::kTimeout);
  EXPECT_EQ(nic.held(), 1u);
  // The serving endpoint aborted: the get fails, and the region's brackets are closed,
  // so deregistration returns.
  p.ea->abort();
  const Status after = get.wait(30s);
  EXPECT_FALSE(after.is_ok());
  EXPECT_NE(after.code(), StatusCode::kTimeout) << describe(after);
  region->deregister();
  reset(p);
  EXPECT_EQ(nic.held(), 0u);
}

TEST(DevmemTxEndpoint, TheRealDevmemSendmsgOnLoopbackFailsTheSendWithTheKernelsErrno) {
  // The stand-in binds; the sendmsg is the real one, which loopback refuses (EINVAL: no
  // binding on its device).
  StandinNic nic;
  auto k = std::make_shared<detail::DevmemTxKernel>(*nic.kernel());
  k->send = [](int fd, uint32_t id, uint64_t offset, size_t len) { return zerocopy::send_devmem(fd, id, offset, len); };
  ScopedKernel scoped(k);
  const uint64_t len = 2 * kChunk;
  Sender snd = sender(DevicePathMode::kAuto, len, 13);
  Pair& p = snd.p;
  ASSERT_TRUE(p.ea && p.eb && snd.src != nullptr);
  std::byte* out = snd.src;
  std::vector<std::byte> got(len);
  Request r = p.eb->recv(std::span(got), Tag{1});
  const Status sent = p.ea->send(std::span<const std::byte>(out, len), Tag{1}).wait(30s);
  EXPECT_FALSE(sent.is_ok());
  EXPECT_NE(sent.code(), StatusCode::kTimeout) << describe(sent);
  EXPECT_EQ(sent.code(), StatusCode::kInvalidArgument) << describe(sent);  // EINVAL
  EXPECT_NE(sent.message().find("Invalid argument"), std::string::npos) << describe(sent);
  EXPECT_EQ(p.ea->stats().device_path, "devmem");
  // The receiver hears of it too, and nothing hangs.
  const Status got_status = r.wait(30s);
  EXPECT_FALSE(got_status.is_ok());
  EXPECT_NE(got_status.code(), StatusCode::kTimeout) << describe(got_status);
  reset(p);
  EXPECT_EQ(nic.held(), 0u);
}

}  // namespace
}  // namespace remora::itest
