// Tests of datapath/staging.cc: device memory (the TestDeviceDomain test double,
// which faults on any direct access) sent and received through pinned bounce buffers
// by two ChunkSchedulers over real socket pairs, driven by hand with a real progress
// engine that delivers the copies' ends. Checked byte for byte: every size around the
// chunk boundaries, device → device, host → device and device → host, pools smaller
// than a transfer (streams stall and resume), copies that end out of order, a failed
// copy on either side that fails its transfer and nothing else, and sources and sinks
// destroyed with copies in flight, whose buffers still come back.
#include "datapath/staging.h"

#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/chunk_link.h"
#include "remora/testing/test_device.h"

namespace remora::detail {
namespace {

using test::incoming;
using test::Link;
using test::outgoing;
using test::pattern;
using testing::TestDeviceDomain;
using testing::TestDeviceOptions;

/// The endpoint's part, for a Link: placed chunks go to the receiving scheduler;
/// progress unstalls its streams and schedules the sender again.
struct Host final : StagingHost {
  Link* link;
  explicit Host(Link* l) : link(l) {}
  void staged_chunk_placed(RxTransfer& t, uint64_t length, const Status& status) override {
    link->rx.chunk_placed(&t, length, status);
  }
  void staging_progressed() override {
    link->rx.unstall();
    link->tx.schedule();
    link->tx.write_all();
  }
};

/// A Link with a device domain, an engine that runs the copies' ends, and one staging
/// pool per side of `buffers` chunk-sized buffers.
struct StagedLink {
  std::unique_ptr<TestDeviceDomain> dev;
  std::shared_ptr<engine::ProgressEngine> engine;
  Link link;
  Host host{&link};
  std::shared_ptr<StagingHost*> anchor = std::make_shared<StagingHost*>(&host);
  std::shared_ptr<StagingPool> tx_pool, rx_pool;

  explicit StagedLink(size_t buffers, TestDeviceOptions o = {}, bool small_socket_buffers = true) {
    o.capacity = size_t{256} << 20;
    dev = TestDeviceDomain::create(o).value();
    engine = engine::ProgressEngine::create({}).value();
    tx_pool = StagingPool::create(*dev, buffers, Link::kChunk).value();
    rx_pool = StagingPool::create(*dev, buffers, Link::kChunk).value();
    link.each_round = [this] { engine->try_progress(); };
    // Small socket buffers: chunks arrive in many pieces, as over TCP, so every read
    // but the first of a chunk lands in the middle of its bounce buffer.
    for (uint16_t i = 0; i < Link::kStreams && small_socket_buffers; ++i) {
      const int small = 4096;
      EXPECT_EQ(::setsockopt(link.tx.fd(i), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    }
  }
  StagingContext context(const std::shared_ptr<StagingPool>& pool) {
    return StagingContext{.engine = engine, .pool = pool, .host = anchor, .chunk_bytes = Link::kChunk};
  }
  /// Drives the engine until every buffer is back in its pool (bounded).
  bool pools_refilled() {
    for (int i = 0; i < 200000; ++i) {
      if (tx_pool->free_buffers() == tx_pool->buffers() && rx_pool->free_buffers() == rx_pool->buffers()) return true;
      engine->try_progress();
    }
    return false;
  }
};

TEST(Staging, DeviceToDeviceLandsIntactAtEverySizeAroundTheChunk) {
  TestDeviceOptions o;
  o.newest_first = true;  // copies queued together end in reverse order
  StagedLink s(3, o);
  constexpr uint64_t C = Link::kChunk;
  uint64_t id = 1;
  for (uint64_t len : {uint64_t{1}, C - 1, C, C + 1, 5 * C + 123, 40 * C + 7}) {
    SCOPED_TRACE(len);
    const auto data = pattern(len, len);
    std::byte* src = s.dev->allocate(len).value();
    std::byte* dst = s.dev->allocate(len + 2).value();
    ASSERT_TRUE(s.dev->write(src, data.data(), len).is_ok());
    const std::vector<std::byte> guard(len + 2, std::byte{0x5A});
    ASSERT_TRUE(s.dev->write(dst, guard.data(), len + 2).is_ok());

    StagingSource source(s.context(s.tx_pool), src, len);
    TxTransfer out = outgoing(wire::ChunkKind::kPut, id, id, len, &source);
    RxTransfer in = incoming(id, len, nullptr);
    StagingSink sink(s.context(s.rx_pool), dst + 1, &in);
    in.sink = &sink;
    const size_t before = s.link.rx_owner.received_ids.size();
    s.link.tx.ready(&out);
    s.link.run(&in, [&] { return s.link.rx_owner.received_ids.size() > before; });

    ASSERT_EQ(s.link.rx_owner.received_ids.size(), before + 1);
    EXPECT_TRUE(s.link.rx_owner.received_ids.back().second.is_ok());
    EXPECT_EQ(s.link.tx_owner.sent_ids.back(), id);
    EXPECT_TRUE(s.link.tx_owner.sent_failures.back().is_ok());
    std::vector<std::byte> got(len + 2);
    ASSERT_TRUE(s.dev->read(got.data(), dst, len + 2).is_ok());
    EXPECT_EQ(got.front(), std::byte{0x5A});  // nothing written before or after
    EXPECT_EQ(got.back(), std::byte{0x5A});
    EXPECT_EQ(std::memcmp(got.data() + 1, data.data(), len), 0);
    ++id;
  }
  EXPECT_TRUE(s.pools_refilled());
  EXPECT_EQ(s.dev->prepared_staging(), 2u);  // one preparation per pool, reused throughout
  EXPECT_TRUE(s.link.tx.idle() && s.link.rx.idle());
}

TEST(Staging, HostToDeviceAndDeviceToHostWithOneBufferPerSide) {
  StagedLink s(1);  // every chunk waits for the previous one's buffer: streams stall
  constexpr uint64_t len = 9 * Link::kChunk + 5;
  const auto data = pattern(len, 3);

  // host → device
  std::byte* dst = s.dev->allocate(len).value();
  HostSource host_source(data.data());
  TxTransfer out1 = outgoing(wire::ChunkKind::kMessage, 1, 1, len, &host_source);
  RxTransfer in1 = incoming(1, len, nullptr);
  StagingSink sink(s.context(s.rx_pool), dst, &in1);
  in1.sink = &sink;
  s.link.tx.ready(&out1);
  s.link.run(&in1, [&] { return s.link.rx_owner.received_ids.size() == 1; });
  ASSERT_EQ(s.link.rx_owner.received_ids.size(), 1u);
  std::vector<std::byte> got(len);
  ASSERT_TRUE(s.dev->read(got.data(), dst, len).is_ok());
  EXPECT_TRUE(got == data);

  // device → host
  std::vector<std::byte> back(len);
  StagingSource source(s.context(s.tx_pool), dst, len);
  HostSink host_sink(back.data());
  TxTransfer out2 = outgoing(wire::ChunkKind::kGet, 2, 2, len, &source);
  RxTransfer in2 = incoming(2, len, &host_sink);
  s.link.tx.ready(&out2);
  s.link.run(&in2, [&] { return s.link.rx_owner.received_ids.size() == 2; });
  ASSERT_EQ(s.link.rx_owner.received_ids.size(), 2u);
  EXPECT_TRUE(s.link.rx_owner.received_ids[1].second.is_ok());
  EXPECT_TRUE(back == data);
  EXPECT_TRUE(s.pools_refilled());
}

// With edge-triggered epoll, bytes already queued on a stream raise no new edge: a
// stream whose sink had no buffer must be read again by unstall() alone, when a copy
// ends and frees one. Nothing here calls read() after the first time.
TEST(Staging, AStreamStalledForABufferIsReadAgainWhenACopyEnds) {
  StagedLink s(1, {}, /*small_socket_buffers=*/false);
  constexpr uint64_t len = 2 * Link::kChunk;  // one chunk per stream
  const auto data = pattern(len, 4);
  std::byte* dst = s.dev->allocate(len).value();
  HostSource source(data.data());
  TxTransfer out = outgoing(wire::ChunkKind::kPut, 1, 1, len, &source);
  RxTransfer in = incoming(1, len, nullptr);
  StagingSink sink(s.context(s.rx_pool), dst, &in);
  in.sink = &sink;
  s.link.tx.ready(&out);
  s.link.tx.schedule();
  s.link.tx.write_all();
  ASSERT_EQ(out.written, len);  // both chunks are in the socket pairs
  for (const wire::ChunkFrame& f : s.link.tx_owner.announced) {
    ASSERT_EQ(s.link.rx.expect(&in, f.stream, f.offset, f.length), "");
  }
  s.link.rx.read(0);
  s.link.rx.read(1);  // no buffer: the one buffer holds the first chunk until its copy ends
  EXPECT_EQ(in.received, Link::kChunk);
  for (int i = 0; i < 200000 && s.link.rx_owner.received_ids.empty(); ++i) s.engine->try_progress();
  ASSERT_EQ(s.link.rx_owner.received_ids.size(), 1u);
  EXPECT_TRUE(s.link.rx_owner.received_ids[0].second.is_ok());
  std::vector<std::byte> got(len);
  ASSERT_TRUE(s.dev->read(got.data(), dst, len).is_ok());
  EXPECT_TRUE(got == data);
}

TEST(Staging, AFailedCopyIntoTheDeviceFailsThatTransferOnly) {
  StagedLink s(2);
  constexpr uint64_t len = 6 * Link::kChunk;
  const auto a = pattern(len, 5), b = pattern(len, 6);
  std::byte* dst_a = s.dev->allocate(len).value();
  std::byte* dst_b = s.dev->allocate(len).value();
  s.dev->fail_copies(dst_a + 3 * Link::kChunk + 10, 1);  // the fourth chunk of a

  HostSource src_a(a.data()), src_b(b.data());
  TxTransfer out_a = outgoing(wire::ChunkKind::kPut, 1, 1, len, &src_a);
  TxTransfer out_b = outgoing(wire::ChunkKind::kPut, 2, 2, len, &src_b);
  RxTransfer in_a = incoming(1, len, nullptr), in_b = incoming(2, len, nullptr);
  StagingSink sink_a(s.context(s.rx_pool), dst_a, &in_a), sink_b(s.context(s.rx_pool), dst_b, &in_b);
  in_a.sink = &sink_a;
  in_b.sink = &sink_b;
  s.link.tx.ready(&out_a);
  s.link.tx.ready(&out_b);
  s.link.run_picking([&](const wire::ChunkFrame& f) { return f.recv_id == 1 ? &in_a : &in_b; },
                     [&] { return s.link.rx_owner.received_ids.size() == 2; });

  ASSERT_EQ(s.link.rx_owner.received_ids.size(), 2u);
  for (const auto& [id, status] : s.link.rx_owner.received_ids) {
    if (id == 1) {
      EXPECT_EQ(status.code(), StatusCode::kDeviceFailed);
      EXPECT_NE(status.message().find("injected"), std::string::npos);
    } else {
      EXPECT_TRUE(status.is_ok()) << status.to_string();
    }
  }
  std::vector<std::byte> got(len);
  ASSERT_TRUE(s.dev->read(got.data(), dst_b, len).is_ok());
  EXPECT_TRUE(got == b);
  EXPECT_TRUE(s.pools_refilled());
  EXPECT_TRUE(s.link.tx_owner.failures.empty() && s.link.rx_owner.failures.empty());
}

TEST(Staging, AFailedCopyOutOfTheDeviceCutsTheTransferAfterWhatWasAnnounced) {
  StagedLink s(2);
  constexpr uint64_t C = Link::kChunk, len = 8 * C;
  const auto data = pattern(len, 8);
  std::byte* src = s.dev->allocate(len).value();
  ASSERT_TRUE(s.dev->write(src, data.data(), len).is_ok());
  s.dev->fail_copies(src + 5 * C, 1);  // the sixth chunk cannot be staged

  StagingSource source(s.context(s.tx_pool), src, len);
  std::vector<std::byte> got(len, std::byte{0});
  HostSink sink(got.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 4, 4, len, &source);
  RxTransfer in = incoming(4, len, &sink);
  s.link.tx.ready(&out);
  s.link.run(&in, [&] { return !s.link.tx_owner.sent_ids.empty() && in.placed == in.announced; });

  ASSERT_EQ(s.link.tx_owner.sent_ids, std::vector<uint64_t>{4});
  EXPECT_EQ(s.link.tx_owner.sent_failures[0].code(), StatusCode::kDeviceFailed);
  // Exactly the five chunks before the failed one were announced, and they landed
  // intact; the receiver's transfer is incomplete (the endpoint tells it why).
  EXPECT_EQ(out.scheduled, 5 * C);
  EXPECT_EQ(in.announced, 5 * C);
  EXPECT_EQ(std::memcmp(got.data(), data.data(), 5 * C), 0);
  EXPECT_TRUE(s.link.rx_owner.received_ids.empty());
  EXPECT_TRUE(s.link.tx.idle());
}

/// A device → device put of `len` bytes (test data `seed`) over a StagedLink of 3
/// buffers per side with failover on both sides, made ready to go.
struct StagedFailoverPut {
  StagedLink s;
  std::vector<std::byte> data;
  std::byte* src;
  std::byte* dst;
  StagingSource source;
  TxTransfer out;
  RxTransfer in;
  StagingSink sink;

  StagedFailoverPut(uint64_t len, uint64_t seed, bool small_socket_buffers)
      : s(3, {}, small_socket_buffers),
        data(pattern(len, seed)),
        src(s.dev->allocate(len).value()),
        dst(s.dev->allocate(len).value()),
        source(s.context(s.tx_pool), src, len),
        out(outgoing(wire::ChunkKind::kPut, 1, 1, len, &source)),
        in(incoming(1, len, nullptr)),
        sink(s.context(s.rx_pool), dst, &in) {
    EXPECT_TRUE(s.dev->write(src, data.data(), len).is_ok());
    s.link.tx.enable_failover();
    s.link.rx.enable_failover();
    in.kind = wire::ChunkKind::kPut;  // a chunk sent again names its kind
    in.sink = &sink;
    s.link.tx.ready(&out);
  }
};

// Failover (docs/rails.md): stream 1 breaks in the middle of a device → device transfer.
// With small socket buffers the sender has a chunk on it written in part (its buffer
// still held) and the receiver a chunk read in part (its bounce buffer open); with the
// usual ones whole chunks sit in the kernel unread, their buffers given back, so they
// are copied out of the device again. Either way every chunk the receiver lacked goes
// again on stream 0, the device memory ends up intact, nothing is placed twice, and
// every buffer comes back.
TEST(Staging, ChunksOnABrokenStreamAreStagedAgainAndLandOnce) {
  for (const bool small : {true, false}) {
    SCOPED_TRACE(small ? "small socket buffers" : "the usual socket buffers");
    constexpr uint64_t C = Link::kChunk, len = 10 * C + 123;
    StagedFailoverPut put(len, small ? 11 : 12, small);
    StagedLink& s = put.s;
    Link& link = s.link;
    TxTransfer& out = put.out;
    RxTransfer& in = put.in;
    const std::vector<std::byte>& data = put.data;
    std::byte* dst = put.dst;
    EXPECT_TRUE(out.confirm) << "staged device memory can be sent again";

    // Nothing is read until the streams are full (chunks go to the emptier stream, so
    // both get some): stream 1 then holds the start of a chunk (small buffers) or whole
    // chunks written and given back (the usual ones). With small buffers the receiver
    // then reads what stream 1 holds: the start of a chunk, into an open bounce buffer.
    // (Bounded by time: the copies end on the domain's threads.)
    const uint64_t on_1 = small ? 1 : C;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (link.tx.bytes_sent(1) < on_1 && std::chrono::steady_clock::now() < deadline) {
      s.engine->try_progress();
      link.tx.schedule();
      link.tx.write_all();
    }
    for (; link.handed < link.tx_owner.announced.size(); ++link.handed) {
      const wire::ChunkFrame& f = link.tx_owner.announced[link.handed];
      ASSERT_EQ(link.rx.expect(&in, f.stream, f.offset, f.length), "");
    }
    ASSERT_GE(link.tx.bytes_sent(1), on_1);
    ASSERT_LT(out.written, len);
    if (small) {
      link.rx.read(1);
      EXPECT_GT(in.received, 0u);
      EXPECT_LT(in.received, C) << "a chunk was read in part";
    }

    Result<uint64_t> tx_read = link.tx.retire(1);
    Result<uint64_t> rx_read = link.rx.retire(1);
    ASSERT_TRUE(tx_read.is_ok() && rx_read.is_ok()) << rx_read.status().to_string();
    EXPECT_EQ(link.tx.peer_retired(1, *rx_read), "");
    EXPECT_EQ(link.rx.peer_retired(1, *tx_read), "");
    link.run(&in, [&] { return !link.rx_owner.received_ids.empty() && !link.tx_owner.sent_ids.empty(); });

    ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
    EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok()) << link.rx_owner.received_ids[0].second.to_string();
    ASSERT_EQ(link.tx_owner.sent_ids.size(), 1u);
    EXPECT_TRUE(link.tx_owner.sent_failures[0].is_ok());
    EXPECT_GE(link.tx.chunks_resent(), 1u);
    EXPECT_EQ(in.placed, len) << "every byte placed once";
    EXPECT_EQ(out.confirmed, len);
    EXPECT_TRUE(link.tx_owner.resend_failures.empty());
    EXPECT_TRUE(link.tx_owner.failures.empty() && link.rx_owner.failures.empty());
    std::vector<std::byte> got(len);
    ASSERT_TRUE(s.dev->read(got.data(), dst, len).is_ok());
    EXPECT_TRUE(got == data);
    EXPECT_TRUE(s.pools_refilled());
    // One copy per chunk each way, and with the usual buffers at least one more: a chunk
    // copied out of the device again.
    const uint64_t chunks = (len + C - 1) / C;
    if (small) {
      EXPECT_GE(s.dev->copies(), 2 * chunks);
    } else {
      EXPECT_GT(s.dev->copies(), 2 * chunks);
    }
  }
}

// A chunk to be staged again whose copy out of the device fails: the resend gives up
// with the copy's error (the endpoint then fails), and nothing wrong is sent.
TEST(Staging, AChunkThatCannotBeStagedAgainFailsTheResend) {
  constexpr uint64_t C = Link::kChunk, len = 8 * C;
  StagedFailoverPut put(len, 13, /*small_socket_buffers=*/false);
  StagedLink& s = put.s;
  Link& link = s.link;
  std::byte* src = put.src;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (link.tx.bytes_sent(1) < C && std::chrono::steady_clock::now() < deadline) {
    s.engine->try_progress();
    link.tx.schedule();
    link.tx.write_all();
  }
  ASSERT_GE(link.tx.bytes_sent(1), C);
  s.dev->fail_copies(src, len);  // every copy out of it from now on
  Result<uint64_t> tx_read = link.tx.retire(1);
  ASSERT_TRUE(tx_read.is_ok());
  EXPECT_EQ(link.tx.peer_retired(1, 0), "");  // the receiver read nothing whole off it
  while (link.tx_owner.resend_failures.empty() && std::chrono::steady_clock::now() < deadline) {
    s.engine->try_progress();
    link.tx.schedule();
  }
  ASSERT_FALSE(
      link.tx_owner.resend_failures.empty());  // each round that tries says so; the endpoint fails at the first
  EXPECT_EQ(link.tx_owner.resend_failures[0].code(), StatusCode::kDeviceFailed);
  EXPECT_NE(link.tx_owner.resend_failures[0].message().find("could not be sent again"), std::string::npos);
  for (const wire::ChunkFrame& f : link.tx_owner.announced) EXPECT_FALSE(f.resend) << "nothing announced again";
}

TEST(Staging, BuffersComeBackWhenSourcesAndSinksGoAwayWithCopiesInFlight) {
  TestDeviceOptions o;
  o.copy_bytes_per_second = 32.0 * 1024 * 1024;  // 2 ms per chunk: copies are in flight
  StagedLink s(4, o);
  constexpr uint64_t len = 8 * Link::kChunk;
  std::byte* dev_mem = s.dev->allocate(len).value();
  {
    // A source stages ahead as soon as it is asked to prepare; then its op is gone.
    auto source = std::make_unique<StagingSource>(s.context(s.tx_pool), dev_mem, len);
    EXPECT_EQ(source->prepare(0, Link::kChunk).code(), StatusCode::kInProgress);
    EXPECT_EQ(s.tx_pool->free_buffers(), 0u);
  }
  {
    // A sink with chunks read and copies to the device started; then its op is gone.
    const auto data = pattern(len, 9);
    HostSource host_source(data.data());
    TxTransfer out = outgoing(wire::ChunkKind::kPut, 1, 1, len, &host_source);
    RxTransfer in = incoming(1, len, nullptr);
    auto sink = std::make_unique<StagingSink>(s.context(s.rx_pool), dev_mem, &in);
    in.sink = sink.get();
    s.link.each_round = nullptr;  // no engine rounds: copies end but are not handled yet
    s.link.tx.ready(&out);
    s.link.run(&in, [&] { return s.rx_pool->free_buffers() == 0 && in.received >= 2 * Link::kChunk; });
    EXPECT_EQ(s.rx_pool->free_buffers(), 0u);
    s.link.rx.clear();
    s.link.tx.clear();
    sink.reset();
  }
  EXPECT_TRUE(s.pools_refilled());
  EXPECT_TRUE(s.link.rx_owner.received_ids.empty());  // nothing reported for the gone op
}

}  // namespace
}  // namespace remora::detail
