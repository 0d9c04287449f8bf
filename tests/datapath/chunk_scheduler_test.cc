// Tests of the ChunkScheduler alone: two schedulers, one sending and one receiving,
// over real non-blocking socket pairs, driven by hand (no engine, no endpoint). The
// CHUNK frames the sender announces are handed to the receiver as the control stream
// would. Host memory moves through HostSource/HostSink; the test sinks show what a
// device-memory sink relies on: chunks completed later and out of order
// (ChunkScheduler::chunk_placed), and a chunk that fails while the streams stay in step.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/chunk_link.h"
#include "mem/region_access.h"

namespace remora::detail {
namespace {

using test::Blocks;
using test::incoming;
using test::Link;
using test::outgoing;
using test::pattern;
using test::RecordingOwner;

TEST(ChunkScheduler, HostMemoryLandsIntactOverEveryStream) {
  Link link;
  const auto data = pattern(5 * Link::kChunk + 123, 1);
  std::vector<std::byte> got(data.size());
  HostSource source(data.data());
  HostSink sink(got.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 7, 9, data.size(), &source);
  RxTransfer in;
  in.id = 9;
  in.length = data.size();
  in.sink = &sink;
  link.tx.ready(&out);
  link.run(&in, [&] { return !link.rx_owner.received_ids.empty(); });

  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(link.tx_owner.sent_ids, std::vector<uint64_t>{7});
  EXPECT_EQ(link.tx.chunks_sent(), 6u);
  // Both streams carried chunks (least-queued choice), in order per transfer.
  EXPECT_GT(link.tx.chunks_per_stream()[0], 0u);
  EXPECT_GT(link.tx.chunks_per_stream()[1], 0u);
  uint64_t next = 0;
  for (const wire::ChunkFrame& f : link.tx_owner.announced) {
    EXPECT_EQ(f.offset, next);
    EXPECT_EQ(f.recv_id, 9u);
    next += f.length;
  }
  EXPECT_EQ(next, data.size());
  EXPECT_TRUE(link.tx.idle() && link.rx.idle());
  EXPECT_TRUE(link.tx_owner.failures.empty() && link.rx_owner.failures.empty());
}

// REMORA_RAIL_SPLIT=equal (the reference bench/rails.py compares with): chunks go to the
// streams strictly in turn, whatever their load, and every byte still lands.
TEST(ChunkScheduler, EqualSplitGivesTheStreamsChunksInTurn) {
  Link link;
  link.tx.set_equal_split(true);
  const auto data = pattern(6 * Link::kChunk + 77, 3);
  std::vector<std::byte> got(data.size());
  HostSource source(data.data());
  HostSink sink(got.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 4, 5, data.size(), &source);
  RxTransfer in = incoming(5, data.size(), &sink);
  link.tx.ready(&out);
  link.run(&in, [&] { return !link.rx_owner.received_ids.empty(); });

  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok());
  EXPECT_TRUE(got == data);
  ASSERT_EQ(link.tx_owner.announced.size(), 7u);
  for (size_t i = 0; i < link.tx_owner.announced.size(); ++i) {
    EXPECT_EQ(link.tx_owner.announced[i].stream, i % Link::kStreams) << "chunk " << i;
  }
  EXPECT_EQ(link.tx.chunks_per_stream()[0], 4u);
  EXPECT_EQ(link.tx.chunks_per_stream()[1], 3u);
}

// Rails place chunks by measured rate only when the rates are clearly apart: two rails
// measured alike (rate samples at CPU speed jitter by tens of percent) take the
// least-queued choice, a 1 Gbit/s and a 200 Mbit/s rail are placed by rate, and with
// fewer than two rates known the choice is left as it was.
TEST(ChunkScheduler, ChunksArePlacedByRateOnlyWhenTheRailsRatesAreClearlyApart) {
  constexpr double kGbit = 125e6;
  const std::vector<double> alike{4.1e9, 2.3e9};
  const std::vector<double> fast_and_slow{kGbit, kGbit / 5};
  const std::vector<double> unmeasured_slow{kGbit, 0};
  const std::vector<double> one_rail{kGbit};
  const std::vector<double> three_one_slow{kGbit, kGbit, kGbit / 4};
  EXPECT_EQ(ChunkScheduler::rates_differ(alike), false);
  EXPECT_EQ(ChunkScheduler::rates_differ(fast_and_slow), true);
  EXPECT_EQ(ChunkScheduler::rates_differ(three_one_slow), true);
  EXPECT_EQ(ChunkScheduler::rates_differ(unmeasured_slow), std::nullopt);
  EXPECT_EQ(ChunkScheduler::rates_differ(one_rail), std::nullopt);
}

/// Like a staging sink: each chunk lands in a bounce buffer, and "copying" it to its
/// destination finishes later, when the test says so, in any order — or fails.
class DeferredSink final : public ChunkSink {
 public:
  explicit DeferredSink(std::byte* dst) : dst_(dst) {}
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override {
    if (bounce_.size() < offset + len) bounce_.resize(offset + len);
    *asked = len;
    return in.recv_some(bounce_.data() + offset, len);
  }
  Status chunk_arrived(uint64_t offset, uint64_t length) override {
    pending.emplace_back(offset, length);
    return Status(StatusCode::kInProgress, "copy queued");
  }
  /// The copy of chunk `i` of `pending` finished (or failed).
  void finish(ChunkScheduler& s, RxTransfer* t, size_t i, const Status& status) {
    const auto [offset, length] = pending[i];
    if (status.is_ok()) std::memcpy(dst_ + offset, bounce_.data() + offset, length);
    s.chunk_placed(t, length, status);
  }
  std::vector<std::pair<uint64_t, uint64_t>> pending;

 private:
  std::byte* dst_;
  std::vector<std::byte> bounce_;
};

// Served gets out of a registered region: their chunks go out gathered too, each source
// holding its region only for the sendmsg. The region deregistered while most chunks
// still wait: the deregistration does not wait for them, no byte of the region is read
// after it, the gets sent from then on say revoked and carry zeros, and the streams stay
// in step (every block arrives at its length, the earlier ones exact).
TEST(ChunkScheduler, ServedGetsFromARegionGoOutGatheredAndStopReadingItOnceDeregistered) {
  for (const bool deregister_midway : {false, true}) {
    SCOPED_TRACE(deregister_midway ? "deregistered midway" : "registered throughout");
    Link link;
    for (uint16_t i = 0; i < Link::kStreams; ++i) {
      const int small = 4096;  // the sends stop inside chunks, and most chunks wait queued
      ASSERT_EQ(::setsockopt(link.tx.fd(i), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    }
    constexpr size_t kBlocks = 200;
    std::mt19937_64 rng(21);
    std::vector<size_t> offset(kBlocks), size(kBlocks);
    size_t total = 0;
    for (size_t i = 0; i < kBlocks; ++i) {
      offset[i] = total;
      size[i] = 1 + rng() % 5000;
      total += size[i] + 64;  // a gap between blocks that no get covers
    }
    const std::vector<std::byte> contents = pattern(total, 22);
    MemoryRegistry registry{PinMode::kTry};
    std::vector<std::byte> memory = contents;
    auto region = registry.register_memory(memory.data(), memory.size(), Access::kRemoteRead);
    ASSERT_TRUE(region.is_ok()) << region.status().to_string();
    const RemoteKey key = region->remote_key(0, memory.size(), Access::kRemoteRead).value();
    std::vector<RegionAccess> access;
    access.reserve(kBlocks);
    Blocks<RegionSource> b(kBlocks);
    for (size_t i = 0; i < kBlocks; ++i) {
      auto a = acquire_access(registry, key, offset[i], size[i], Access::kRemoteRead);
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      access.push_back(std::move(a).value());
      b.add(wire::ChunkKind::kGet, i, 3000 + i, size[i], std::byte{0xEE}, &access.back());
    }
    for (TxTransfer& t : b.outs) link.tx.ready(&t);
    auto pick = [&](const wire::ChunkFrame& f) { return &b.ins[f.recv_id - 3000]; };
    if (deregister_midway) {
      link.run_picking(pick, [&] { return link.rx_owner.received_ids.size() >= kBlocks / 4; });
      ASSERT_LT(link.rx_owner.received_ids.size(), kBlocks);
      region->deregister();                                      // returns: no send holds the region between calls
      std::fill(memory.begin(), memory.end(), std::byte{0x77});  // what a later read would find
    }
    link.run_picking(pick, [&] { return link.rx_owner.received_ids.size() == kBlocks; });
    ASSERT_EQ(link.rx_owner.received_ids.size(), kBlocks);
    size_t revoked = 0;
    for (size_t i = 0; i < kBlocks; ++i) {
      const std::byte* want = contents.data() + offset[i];
      const std::vector<std::byte>& got = b.got[i];
      if (!b.sources[i].revoked()) {
        EXPECT_TRUE(std::equal(got.begin(), got.end(), want)) << "block " << i;
        continue;
      }
      ++revoked;
      // Its bytes up to where the region went, then zeros: never the 0x77 written after.
      size_t k = 0;
      while (k < got.size() && got[k] == want[k]) ++k;
      for (; k < got.size(); ++k) ASSERT_EQ(got[k], std::byte{0}) << "block " << i << " byte " << k;
    }
    EXPECT_EQ(revoked > 0, deregister_midway) << revoked << " revoked";
    EXPECT_TRUE(link.tx.idle() && link.rx.idle());
    EXPECT_TRUE(link.tx_owner.failures.empty() && link.rx_owner.failures.empty());
  }
}

// A slowed stream must look full once about a chunk waits unsent in its kernel buffer,
// or it takes chunks that later transfers wait for (see attach()).
// A list of small blocks: many one-chunk transfers queue on each stream and go out
// several per sendmsg. Tiny socket buffers make those sends stop inside a chunk, so the
// bytes each one moved must be handed to the queued chunks in order: every block lands
// whole, each transfer is reported sent once, in the order posted on its stream.
TEST(ChunkScheduler, SmallChunksQueuedBehindEachOtherLandWholeWhateverEachSendMoved) {
  Link link;
  for (uint16_t i = 0; i < Link::kStreams; ++i) {
    const int small = 4096;  // the kernel doubles it; still far below what is queued
    ASSERT_EQ(::setsockopt(link.tx.fd(i), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  }
  constexpr size_t kBlocks = 300;
  std::mt19937_64 rng(11);
  std::vector<std::vector<std::byte>> data;
  data.reserve(kBlocks);
  Blocks<HostSource> b(kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) {
    const size_t n = 1 + rng() % 6000;
    data.push_back(pattern(n, 100 + i));
    b.add(wire::ChunkKind::kPut, i, 1000 + i, n, std::byte{0}, data.back().data());
  }
  for (TxTransfer& t : b.outs) link.tx.ready(&t);
  link.run_picking([&](const wire::ChunkFrame& f) { return &b.ins[f.recv_id - 1000]; },
                   [&] { return link.rx_owner.received_ids.size() == kBlocks; });

  ASSERT_EQ(link.rx_owner.received_ids.size(), kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) EXPECT_TRUE(b.got[i] == data[i]) << "block " << i;
  std::vector<uint64_t> sent = link.tx_owner.sent_ids;
  ASSERT_EQ(sent.size(), kBlocks);
  // Per stream, transfers finish in the order their chunks were announced.
  std::vector<uint64_t> last(Link::kStreams, 0);
  std::vector<bool> first(Link::kStreams, true);
  std::vector<uint16_t> stream_of(kBlocks);
  for (const wire::ChunkFrame& f : link.tx_owner.announced) stream_of[f.recv_id - 1000] = f.stream;
  for (uint64_t id : sent) {
    const uint16_t st = stream_of[id];
    EXPECT_TRUE(first[st] || id > last[st]) << "transfer " << id << " reported sent out of order";
    first[st] = false;
    last[st] = id;
  }
  std::sort(sent.begin(), sent.end());
  EXPECT_TRUE(std::adjacent_find(sent.begin(), sent.end()) == sent.end()) << "a transfer reported sent twice";
  EXPECT_TRUE(link.tx.idle() && link.rx.idle());
  EXPECT_TRUE(link.tx_owner.failures.empty() && link.rx_owner.failures.empty());
}

TEST(ChunkScheduler, AStreamHoldsAtMostAChunkUnsentInTheKernel) {
  RecordingOwner owner;
  ChunkScheduler s{owner, 1, Link::kChunk, "peer"};
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(s.attach(0, net::Fd(fd)).is_ok());
  int unsent = 0;
  socklen_t len = sizeof unsent;
  ASSERT_EQ(::getsockopt(s.fd(0), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &unsent, &len), 0);
  EXPECT_EQ(static_cast<uint64_t>(unsent), Link::kChunk);
}

// The progress engine is edge-triggered: a stream that met a full socket waits for its
// EPOLLOUT. Here no edge is ever passed on (writable() is never called), as when one
// went unreported: the sender stops with chunks queued, and unblock_drained() finds
// each blocked stream whose socket the receiver drained and has it written again,
// until every byte has landed.
TEST(ChunkScheduler, AStreamBlockedOnAFullSocketIsWrittenAgainOnceDrainedWithoutItsEdge) {
  Link link;
  const auto data = pattern(64 * Link::kChunk + 5, 3);  // 4 MiB: far beyond the socket pairs' buffers
  std::vector<std::byte> got(data.size());
  HostSource source(data.data());
  HostSink sink(got.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 4, 6, data.size(), &source);
  RxTransfer in;
  in.id = 6;
  in.length = data.size();
  in.sink = &sink;
  link.tx.ready(&out);
  auto round = [&](bool read) {
    link.tx.schedule();
    link.tx.write_all();
    for (; link.handed < link.tx_owner.announced.size(); ++link.handed) {
      const wire::ChunkFrame& f = link.tx_owner.announced[link.handed];
      ASSERT_EQ(link.rx.expect(&in, f.stream, f.offset, f.length), "");
    }
    for (uint16_t i = 0; read && i < Link::kStreams; ++i) link.rx.read(i);
  };
  // The receiver reads nothing until both sockets are full and the sender has stopped
  // (no chunk announced in a round) ...
  size_t announced = 0;
  for (int i = 0; i < 1000 && (i == 0 || link.tx_owner.announced.size() != announced); ++i) {
    announced = link.tx_owner.announced.size();
    round(false);
  }
  ASSERT_LT(announced, 65u);
  // ... then reads all it can: without edges the sender stays stopped.
  uint64_t before = 0;
  for (int i = 0; i < 1000 && (i == 0 || in.received != before); ++i) {
    before = in.received;
    round(true);
  }
  ASSERT_LT(in.received, data.size());
  ASSERT_EQ(link.tx_owner.announced.size(), announced);
  // Both sockets drained, both streams blocked: both are written again, and the rest
  // arrives (whatever blocks again on the way is found the same way).
  EXPECT_EQ(link.tx.unblock_drained(), Link::kStreams);
  EXPECT_EQ(link.tx.unblock_drained(), 0u);  // once: nothing written since
  for (int i = 0; i < 100000 && link.rx_owner.received_ids.empty(); ++i) {
    round(true);
    link.tx.unblock_drained();
  }
  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(link.tx_owner.failures.empty() && link.rx_owner.failures.empty());
}

TEST(ChunkScheduler, ASinkMayCompleteChunksLaterAndOutOfOrder) {
  Link link;
  const auto data = pattern(4 * Link::kChunk + 77, 2);
  std::vector<std::byte> got(data.size());
  HostSource source(data.data());
  DeferredSink sink(got.data());
  TxTransfer out = outgoing(wire::ChunkKind::kPut, 1, 3, data.size(), &source);
  RxTransfer in;
  in.kind = wire::ChunkKind::kPut;
  in.id = 3;
  in.length = data.size();
  in.sink = &sink;
  link.tx.ready(&out);
  link.run(&in, [&] { return in.received == data.size(); });

  ASSERT_EQ(in.received, data.size());
  ASSERT_EQ(sink.pending.size(), 5u);
  EXPECT_TRUE(link.rx_owner.received_ids.empty()) << "completed before any chunk was placed";
  // Place the chunks last first; the transfer completes only with the last of them.
  for (size_t i = sink.pending.size(); i-- > 1;) {
    sink.finish(link.rx, &in, i, Status::ok());
    EXPECT_TRUE(link.rx_owner.received_ids.empty()) << "completed with chunk 0 still being copied";
  }
  sink.finish(link.rx, &in, 0, Status::ok());
  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok());
  EXPECT_TRUE(got == data);
}

TEST(ChunkScheduler, AFailedChunkFailsItsTransferAndTheStreamsStayInStep) {
  Link link;
  const auto first = pattern(3 * Link::kChunk + 5, 3);
  const auto second = pattern(2 * Link::kChunk + 9, 4);
  std::vector<std::byte> got_first(first.size()), got_second(second.size());
  HostSource source1(first.data()), source2(second.data());
  DeferredSink failing(got_first.data());
  HostSink sink2(got_second.data());
  TxTransfer out1 = outgoing(wire::ChunkKind::kMessage, 1, 1, first.size(), &source1);
  TxTransfer out2 = outgoing(wire::ChunkKind::kMessage, 2, 2, second.size(), &source2);
  RxTransfer in1, in2;
  in1.id = 1;
  in1.length = first.size();
  in1.sink = &failing;
  in2.id = 2;
  in2.length = second.size();
  in2.sink = &sink2;
  link.tx.ready(&out1);
  link.tx.ready(&out2);
  link.run_picking([&](const wire::ChunkFrame& f) { return f.recv_id == 1 ? &in1 : &in2; },
                   [&] { return !link.rx_owner.received_ids.empty(); });
  // The second transfer completed intact although the first is still being copied.
  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_EQ(link.rx_owner.received_ids[0].first, 2u);
  EXPECT_TRUE(got_second == second);
  // The first: its chunk 1 fails; the others are placed; it completes once, failed.
  ASSERT_EQ(in1.received, first.size());
  ASSERT_EQ(failing.pending.size(), 4u);
  const Status copy_failed(StatusCode::kInternal, "device copy failed");
  for (size_t i = 0; i < failing.pending.size(); ++i) failing.finish(link.rx, &in1, i, i == 1 ? copy_failed : Status::ok());
  ASSERT_EQ(link.rx_owner.received_ids.size(), 2u);
  EXPECT_EQ(link.rx_owner.received_ids[1].first, 1u);
  EXPECT_EQ(link.rx_owner.received_ids[1].second, copy_failed);
  EXPECT_TRUE(link.tx_owner.failures.empty() && link.rx_owner.failures.empty());
}

TEST(ChunkScheduler, FramesThatBreakTheProtocolAreRefused) {
  Link link;
  RxTransfer in;
  in.id = 1;
  in.length = 1000;
  HostSink sink(nullptr);
  in.sink = &sink;
  EXPECT_NE(link.rx.expect(&in, 2, 0, 10), "") << "stream beyond K";
  EXPECT_NE(link.rx.expect(&in, 0, 0, 0), "") << "empty chunk";
  EXPECT_NE(link.rx.expect(&in, 0, 0, 1001), "") << "longer than the transfer";
  EXPECT_NE(link.rx.expect(&in, 0, 10, 10), "") << "a gap before it";
  EXPECT_EQ(link.rx.expect(&in, 0, 0, 600), "");
  EXPECT_NE(link.rx.expect(&in, 1, 0, 10), "") << "a repeat";
  EXPECT_NE(link.rx.expect(&in, 1, 600, 401), "") << "past the end";
  EXPECT_EQ(link.rx.expect(&in, 1, 600, 400), "");
  EXPECT_EQ(in.announced, 1000u);
}

TEST(ChunkScheduler, GivesWayWhenAskedAndResumesWhereItStopped) {
  Link link;
  const auto data = pattern(8 * Link::kChunk, 5);
  std::vector<std::byte> got(data.size());
  HostSource source(data.data());
  HostSink sink(got.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 1, 1, data.size(), &source);
  RxTransfer in;
  in.id = 1;
  in.length = data.size();
  in.sink = &sink;
  link.tx.ready(&out);
  // Fill the streams with several chunks each before the receiver reads.
  for (int i = 0; i < 4; ++i) {
    link.tx.schedule();
    link.tx.write_all();
  }
  for (; link.handed < link.tx_owner.announced.size(); ++link.handed) {
    const wire::ChunkFrame& f = link.tx_owner.announced[link.handed];
    ASSERT_EQ(link.rx.expect(&in, f.stream, f.offset, f.length), "");
  }
  link.rx_owner.yield = true;  // another thread wants the lock
  const uint64_t before = in.received;
  link.rx.read(0);
  EXPECT_GT(in.received, before) << "a read that gives way still makes progress";
  EXPECT_EQ(link.rx_owner.resumes, 1) << "it asked to be resumed";
  link.rx_owner.yield = false;
  link.rx.resume();
  link.run(&in, [&] { return !link.rx_owner.received_ids.empty(); });
  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_TRUE(got == data);
}

// --- failover (docs/protocol.md, "Failover") ---------------------------------------

// A stream breaks after the sender put chunks on both: each side retires it, the
// receiver's RETIRE says how many it read whole, and every other chunk the sender put
// there goes again on the surviving stream, landing once at its own offset.
/// A message of `size` bytes over a Link with failover on both sides, after one round:
/// chunks on both streams, announced and handed to the receiver (which read nothing yet).
struct FailoverSend {
  Link link;
  std::vector<std::byte> data, got;
  HostSource source;
  HostSink sink;
  TxTransfer out;
  RxTransfer in;
  /// `tx_workers`: the sender's chunks are written by them from the first.
  FailoverSend(size_t size, uint64_t seed, StreamWorkers* tx_workers = nullptr)
      : data(pattern(size, seed)),
        got(size),
        source(data.data()),
        sink(got.data()),
        out(outgoing(wire::ChunkKind::kMessage, 1, 1, size, &source)),
        in(incoming(1, size, &sink)) {
    link.tx.enable_failover();
    link.rx.enable_failover();
    if (tx_workers != nullptr) link.tx.set_workers(tx_workers, 1);
    link.tx.ready(&out);
    link.tx.schedule();
    link.tx.write_all();
    for (; link.handed < link.tx_owner.announced.size(); ++link.handed) {
      const wire::ChunkFrame& f = link.tx_owner.announced[link.handed];
      EXPECT_EQ(link.rx.expect(&in, f.stream, f.offset, f.length), "");
    }
  }
  /// Workers may still hold `data` or `got`: take the streams back first.
  ~FailoverSend() {
    link.tx.cancel_jobs();
    link.rx.cancel_jobs();
  }
  /// Both sides retire stream `index` and hear the other's RETIRE.
  void retire_both(uint16_t index) {
    Result<uint64_t> tx_read = link.tx.retire(index);
    Result<uint64_t> rx_read = link.rx.retire(index);
    ASSERT_TRUE(rx_read.is_ok() && tx_read.is_ok());
    EXPECT_EQ(link.tx.peer_retired(index, *rx_read), "");
    EXPECT_EQ(link.rx.peer_retired(index, *tx_read), "");
  }
  /// Runs until the message arrived and was confirmed; then it must be whole, once.
  void finish() {
    link.run(&in, [&] { return !link.rx_owner.received_ids.empty() && !link.tx_owner.sent_ids.empty(); });
    ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
    EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok());
    EXPECT_TRUE(got == data);
    EXPECT_GE(link.tx.chunks_resent(), 1u);
    ASSERT_EQ(link.tx_owner.sent_ids.size(), 1u);  // sent once, when every chunk was confirmed
    EXPECT_TRUE(link.tx.idle());
    EXPECT_TRUE(link.rx.idle());
  }
};

TEST(ChunkSchedulerFailover, ARetiredStreamsChunksGoAgainOnTheOtherAndLandOnce) {
  FailoverSend send(8 * Link::kChunk + 123, 36);
  Link& link = send.link;
  EXPECT_TRUE(send.out.confirm);  // host memory can be sent again
  // The receiver reads stream 0 only.
  link.rx.read(0);
  ASSERT_GT(link.tx.bytes_sent(1), 0u);
  // Stream 1 breaks.
  Result<uint64_t> rx_read = link.rx.retire(1);
  Result<uint64_t> tx_read = link.tx.retire(1);
  ASSERT_TRUE(rx_read.is_ok() && tx_read.is_ok());
  EXPECT_EQ(*rx_read, 0u);  // the receiver read nothing whole off it
  EXPECT_EQ(link.tx.live_streams(), 1u);
  // A resent chunk the receiver does not lack is refused before anything moves.
  EXPECT_NE(link.rx.expect_resend(wire::ChunkKind::kMessage, 1, 0, 0, Link::kChunk), "");
  EXPECT_NE(link.rx.expect_resend(wire::ChunkKind::kMessage, 2, 0, Link::kChunk, Link::kChunk), "");
  EXPECT_EQ(link.tx.peer_retired(1, *rx_read), "");
  EXPECT_EQ(link.rx.peer_retired(1, *tx_read), "");
  EXPECT_NE(link.tx.peer_retired(1, *rx_read), "");  // once per stream
  send.finish();
  EXPECT_EQ(send.out.confirmed, send.data.size());
  EXPECT_TRUE(link.tx_owner.resend_failures.empty());
}

// Every stream retired (the endpoint waits for a rejoin): nothing is announced while
// none is usable, and once one is taken back on both sides, the chunks that were on the
// broken ones and those never scheduled go on it, and the transfer lands whole, once.
TEST(ChunkSchedulerFailover, WithEveryStreamRetiredChunksWaitForOneTakenBack) {
  FailoverSend send(8 * Link::kChunk + 5, 38);
  Link& link = send.link;
  ASSERT_GE(link.handed, 2u);
  for (uint16_t i = 0; i < Link::kStreams; ++i) {
    Result<uint64_t> rx_read = link.rx.retire(i);
    Result<uint64_t> tx_read = link.tx.retire(i);
    ASSERT_TRUE(rx_read.is_ok() && tx_read.is_ok());
    ASSERT_EQ(link.tx.peer_retired(i, *rx_read), "");
    ASSERT_EQ(link.rx.peer_retired(i, *tx_read), "");
  }
  EXPECT_EQ(link.tx.live_streams(), 0u);
  const size_t before = link.tx_owner.announced.size();
  link.tx.schedule();
  link.tx.write_all();
  EXPECT_EQ(link.tx_owner.announced.size(), before) << "a chunk was announced on a retired stream";
  // Stream 0 comes back: the receiving side reads it at once, the sending side writes.
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  ASSERT_TRUE(link.tx.reinstate(0, net::Fd(fds[0]), /*tx=*/true).is_ok());
  ASSERT_TRUE(link.rx.reinstate(0, net::Fd(fds[1]), /*tx=*/false).is_ok());
  send.finish();
  for (size_t k = before; k < link.tx_owner.announced.size(); ++k) EXPECT_EQ(link.tx_owner.announced[k].stream, 0u);
  // A transfer readied while every stream is retired and nothing waits to go again:
  // none of its chunks is announced either.
  Link bare;
  bare.tx.enable_failover();
  bare.rx.enable_failover();
  for (uint16_t i = 0; i < Link::kStreams; ++i) {
    ASSERT_TRUE(bare.tx.retire(i).is_ok() && bare.rx.retire(i).is_ok());
    ASSERT_EQ(bare.tx.peer_retired(i, 0), "");
  }
  TxTransfer later = outgoing(wire::ChunkKind::kMessage, 2, 2, 3 * Link::kChunk, &send.source);
  bare.tx.ready(&later);
  bare.tx.schedule();
  bare.tx.write_all();
  EXPECT_TRUE(bare.tx_owner.announced.empty()) << "a chunk was announced on a retired stream";
}

// A stream whose chunks go unconfirmed while one on another path works is stalled: a
// link that stopped without an error. Confirmations travel on the control stream, so
// after a break of that the endpoint restarts every stream's wait, and none is judged
// until a whole timeout passed again.
TEST(ChunkSchedulerFailover, AStreamLeftUnconfirmedIsStalledUntilItsWaitIsRestarted) {
  FailoverSend send(3 * Link::kChunk - 100, 39);  // two chunks on stream 0, one on 1: all in the kernel
  Link& link = send.link;
  link.tx.set_stream_paths({0, 1});
  ASSERT_GT(link.tx.bytes_sent(0), 0u);
  ASSERT_GT(link.tx.bytes_sent(1), 0u);
  // The receiver reads stream 0 only and confirms what it read whole there.
  link.rx.read(0);
  uint64_t read_on_0 = 0;
  for (const auto& [stream, chunks] : link.rx_owner.reads) {
    if (stream == 0) read_on_0 = chunks;
  }
  ASSERT_GT(read_on_0, 0u);
  ASSERT_EQ(link.tx.confirmed(0, read_on_0), "");
  const auto timeout = std::chrono::seconds(10);
  const auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(link.tx.stalled(now, timeout).empty()) << "judged before a whole timeout passed";
  EXPECT_EQ(link.tx.stalled(now + 2 * timeout, timeout), std::vector<uint16_t>{1});
  // One path alone is never judged against itself.
  link.tx.set_stream_paths({0, 0});
  EXPECT_TRUE(link.tx.stalled(now + 2 * timeout, timeout).empty());
  link.tx.set_stream_paths({0, 1});
  // Restarted at `before` or later, stream 1 has waited less than `wait` at
  // before + wait - 1 ns; counted from its chunk's queueing (at `now` or earlier) it
  // would have waited at least 2 * wait - 1 ns by then.
  auto before = std::chrono::steady_clock::now();
  while (before - now < std::chrono::microseconds(1)) before = std::chrono::steady_clock::now();
  const auto wait = before - now;
  link.tx.restart_progress_clocks();
  EXPECT_TRUE(link.tx.stalled(before + wait - std::chrono::nanoseconds(1), wait).empty())
      << "the wait was not restarted";
  EXPECT_EQ(link.tx.stalled(before + 2 * wait, wait), std::vector<uint16_t>{1});
}

// Confirmation is what completes a kept transfer: written whole is not enough, and a
// count the sender never wrote is refused.
TEST(ChunkSchedulerFailover, ASendIsDoneOnlyOnceConfirmedAndBadCountsAreRefused) {
  Link link;
  link.tx.enable_failover();
  const std::vector<std::byte> data = pattern(Link::kChunk / 2, 37);
  HostSource source(data.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 1, 1, data.size(), &source);
  link.tx.ready(&out);
  link.tx.schedule();
  link.tx.write_all();
  ASSERT_EQ(link.tx_owner.announced.size(), 1u);
  const uint16_t stream = link.tx_owner.announced[0].stream;
  EXPECT_EQ(out.written, data.size());
  EXPECT_TRUE(link.tx_owner.sent_ids.empty());  // written, not yet confirmed
  EXPECT_NE(link.tx.confirmed(stream, 2), "");  // more than was written whole
  EXPECT_NE(link.tx.confirmed(static_cast<uint16_t>(Link::kStreams), 1), "");
  EXPECT_EQ(link.tx.confirmed(stream, 1), "");
  ASSERT_EQ(link.tx_owner.sent_ids.size(), 1u);
  EXPECT_NE(link.tx.confirmed(stream, 0), "");  // a count never goes back
}

// --- receive workers (stream_workers.h, REMORA_PROGRESS_THREADS) ------------------------

// Every chunk's bytes are taken off the stream by a worker thread, into the receive
// buffer, and finished by the scheduler: each message lands whole, byte for byte.
// Sends one message of each size class over `link` (ids 1, 2, ...), each checked byte for
// byte where it landed; the bytes sent in all.
uint64_t deliver_each_size(Link& link, uint64_t seed) {
  uint64_t total = 0;
  uint64_t id = 1;
  for (const size_t size :
       {size_t{1}, Link::kChunk - 1, size_t{Link::kChunk}, 3 * Link::kChunk + 5, 40 * Link::kChunk + 3}) {
    const std::vector<std::byte> data = pattern(size, seed + id);
    std::vector<std::byte> got(size, std::byte{0x5a});
    HostSink sink(got.data());
    RxTransfer in = incoming(id, size, &sink);
    const Status st = link.deliver(data, in, sink, id);
    EXPECT_TRUE(st.is_ok()) << size << " bytes: " << st.to_string();
    EXPECT_TRUE(got == data) << size << " bytes";
    total += size;
    ++id;
  }
  return total;
}

TEST(ChunkSchedulerWorkers, ChunksReceivedByWorkersLandIntact) {
  StreamWorkers workers(2);
  Link link;
  link.rx.set_workers(&workers, 1);
  const uint64_t total = deliver_each_size(link, 50);
  EXPECT_GT(link.rx.worker_jobs(), 0u);
  EXPECT_EQ(link.rx.worker_bytes(), total) << "bytes read on the progress thread instead";
  EXPECT_TRUE(link.rx.idle());
}

// A stream retired while a worker has it: what the worker read counts until the
// retirement resets the chunk, every chunk owed comes again on the other stream, and
// the message lands whole, once.
TEST(ChunkSchedulerWorkers, AStreamRetiredWhileAWorkerReadsItLosesNothing) {
  StreamWorkers workers(2);
  FailoverSend send(8 * Link::kChunk + 123, 51);
  Link& link = send.link;
  link.rx.set_workers(&workers, 1);
  link.rx.read(0);
  link.rx.read(1);  // both streams handed to workers
  ASSERT_GT(link.tx.bytes_sent(1), 0u);
  send.retire_both(1);  // cancels the worker's job first
  send.finish();
  EXPECT_GT(link.rx.worker_jobs(), 0u);
}

// The operation whose memory a worker writes into is gone (redirected to the drain):
// once redirect() returns, nothing more is written there, and the rest of its bytes
// are drained so that the stream stays in step.
TEST(ChunkSchedulerWorkers, ARedirectedTransfersMemoryIsNotWrittenAfterTheRedirect) {
  StreamWorkers workers(1);
  Link link;
  link.rx.set_workers(&workers, 1);
  const std::vector<std::byte> data = pattern(2 * Link::kChunk, 52);  // a chunk per stream, both announced
  HostSource source(data.data());
  TxTransfer out = outgoing(wire::ChunkKind::kGet, 1, 1, data.size(), &source);
  std::vector<std::byte> got(data.size());
  HostSink sink(got.data());
  RxTransfer in = incoming(1, data.size(), &sink);
  in.kind = wire::ChunkKind::kGet;
  link.tx.ready(&out);
  link.tx.schedule();
  link.tx.write_all();
  for (; link.handed < link.tx_owner.announced.size(); ++link.handed) {
    const wire::ChunkFrame& f = link.tx_owner.announced[link.handed];
    ASSERT_EQ(link.rx.expect(&in, f.stream, f.offset, f.length), "");
  }
  link.rx.read(0);  // handed to the worker
  DiscardSink discard;
  RxTransfer drain = incoming(0, UINT64_MAX, &discard);
  link.rx.redirect([](const RxTransfer& t) { return t.kind == wire::ChunkKind::kGet; }, &drain);
  std::fill(got.begin(), got.end(), std::byte{0xa5});
  // The rest of the bytes go to the drain; the sender's transfer is sent whole.
  link.run(&drain, [&] { return !link.tx_owner.sent_ids.empty() && link.rx.idle(); });
  EXPECT_EQ(link.handed, 2u);
  ASSERT_EQ(link.tx_owner.sent_ids.size(), 1u);
  EXPECT_TRUE(link.rx.idle());
  EXPECT_TRUE(link.rx_owner.failures.empty());
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](std::byte b) { return b == std::byte{0xa5}; }))
      << "a worker wrote into the memory after the redirect";
}

// --- send workers (the same threads) ---------------------------------------------------

// Every chunk's bytes are put on the stream by a worker thread and finished by the
// scheduler: each message lands whole, byte for byte, with workers on both sides
// sharing one pool of two, then one (a stream's two directions on one worker).
TEST(ChunkSchedulerWorkers, ChunksSentByWorkersLandIntact) {
  for (const uint32_t threads : {2u, 1u}) {
    StreamWorkers workers(threads);
    Link link;
    link.tx.set_workers(&workers, 1);
    link.rx.set_workers(&workers, 1);
    SCOPED_TRACE(testing::Message() << threads << " workers");
    const uint64_t total = deliver_each_size(link, 60);
    EXPECT_GT(link.tx.worker_send_jobs(), 0u);
    EXPECT_EQ(link.tx.worker_send_bytes(), total) << "bytes written on the progress thread instead";
    EXPECT_EQ(link.tx.worker_jobs(), 0u);  // the sender received nothing
    EXPECT_TRUE(link.tx.idle());
    EXPECT_TRUE(link.rx.idle());
  }
}

// The peer has every byte before the send worker's report came (a put's RESP can say so):
// reap_tx_jobs counts them at once and tells the Owner, as the report would have; the
// report that comes later changes nothing (nothing counted twice).
TEST(ChunkSchedulerWorkers, ASendJobReapedBeforeItsReportIsCountedOnce) {
  StreamWorkers workers(1);
  Link link;
  link.tx.set_workers(&workers, 1);
  const std::vector<std::byte> data = pattern(2 * Link::kChunk, 63);  // a chunk per stream
  std::vector<std::byte> got(data.size());
  HostSource source(data.data());
  HostSink sink(got.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 1, 1, data.size(), &source);
  RxTransfer in = incoming(1, data.size(), &sink);
  link.tx.ready(&out);
  link.tx.schedule();
  link.tx.write_all();
  ASSERT_EQ(link.tx.worker_send_jobs(), 2u);
  for (; link.handed < link.tx_owner.announced.size(); ++link.handed) {
    const wire::ChunkFrame& f = link.tx_owner.announced[link.handed];
    ASSERT_EQ(link.rx.expect(&in, f.stream, f.offset, f.length), "");
  }
  // The receiver takes every byte; the sender runs none of the workers' reports.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (link.rx_owner.received_ids.empty() && std::chrono::steady_clock::now() < deadline) {
    link.rx.read(0);
    link.rx.read(1);
  }
  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(link.tx_owner.sent_ids.empty());
  link.tx.reap_tx_jobs();
  EXPECT_EQ(out.written, data.size());
  ASSERT_EQ(link.tx_owner.sent_ids.size(), 1u);
  EXPECT_TRUE(link.tx.idle());
  link.tx_owner.run_posted();  // the reports, late
  EXPECT_EQ(link.tx_owner.sent_ids.size(), 1u);
  EXPECT_EQ(out.written, data.size());
  EXPECT_EQ(link.tx.worker_send_bytes(), data.size());
  EXPECT_TRUE(link.tx_owner.failures.empty());
}

// A source that counts its holds (gather_begin, gather_end).
class HeldSource final : public ChunkSource {
 public:
  explicit HeldSource(const std::byte* data) : host_(data), data_(data) {}
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override { return host_.write(fd, offset, len); }
  const std::byte* gather_begin() noexcept override {
    begun.fetch_add(1);
    return data_;
  }
  void gather_end() noexcept override { ended.fetch_add(1); }
  std::atomic<int> begun{0}, ended{0};

 private:
  HostSource host_;
  const std::byte* data_;
};

// The sending operations are gone (clear_tx, as when the control stream is lost): once
// it returns, no worker holds their memory, whatever it was doing; what the workers
// report afterwards changes nothing.
TEST(ChunkSchedulerWorkers, ClearingTheSendsTakesTheirMemoryBackFromTheWorkers) {
  StreamWorkers workers(2);
  Link link;
  link.tx.set_workers(&workers, 1);
  // More than the socket pairs hold, so that the workers wait on full sockets.
  const std::vector<std::byte> data = pattern(64 * Link::kChunk, 61);
  HeldSource source(data.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 1, 1, data.size(), &source);
  link.tx.ready(&out);
  link.tx.schedule();
  link.tx.write_all();
  EXPECT_GT(link.tx.worker_send_jobs(), 0u);
  link.tx.clear_tx();
  EXPECT_EQ(source.begun.load(), source.ended.load()) << "a worker still holds the memory of a send that is gone";
  link.tx_owner.run_posted();
  EXPECT_TRUE(link.tx_owner.sent_ids.empty());
  EXPECT_TRUE(link.tx_owner.failures.empty());
  EXPECT_TRUE(link.tx.idle());
}

// A stream retired while a send worker writes on it: what the worker wrote counts in
// the chunk's progress until the peer's RETIRE says what arrived whole, every other chunk
// goes again on the other stream, and the message lands whole, once.
TEST(ChunkSchedulerWorkers, AStreamRetiredWhileAWorkerSendsOnItLosesNothing) {
  StreamWorkers workers(2);
  FailoverSend send(64 * Link::kChunk + 123, 62, &workers);
  Link& link = send.link;
  ASSERT_GT(link.tx.worker_send_jobs(), 0u);
  // Nothing read off stream 1 yet: the chunk the worker writes there goes again.
  send.retire_both(1);  // cancels the worker's job first
  send.finish();
}

}  // namespace
}  // namespace remora::detail
