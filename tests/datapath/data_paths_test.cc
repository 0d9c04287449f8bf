// Tests of datapath/data_paths.cc and path_end.cc: the one choice of an operation's
// source or sink, and what an operation asks of it. Host memory (an operation's own
// buffer, a granted region, the discard sink) gets its host end in place, and choosing,
// holding and using it allocates nothing (counted here with a replaced operator new).
// Device memory of the test device (TestDeviceDomain, which faults on any direct access)
// gets a staging source or sink when chunked and a bounce when inline, the path and
// reason recorded in the stats; the inline copies are checked byte for byte, with a real
// progress engine delivering their ends. REMORA_DEVICE_PATH=devmem with no devmem NIC is
// refused, and the refusal recorded. A moved end keeps its device source or sink where it
// is.
#include "datapath/data_paths.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/path_end.h"
#include "remora/testing/test_device.h"

namespace {
/// operator new calls on this thread while counting.
thread_local bool counting = false;
thread_local size_t allocations = 0;
}  // namespace

// Counts, and allocates with malloc; the deletes below release with free, so that the
// pair matches whatever runtime (AddressSanitizer's among them) provides the others.
void* operator new(std::size_t n) {
  if (counting) ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// GCC cannot see that these free only what the operator new above malloc'ed.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace remora::detail {
namespace {

using testing::TestDeviceDomain;

/// Counts the allocations of this thread for as long as it lives.
struct AllocationCount {
  AllocationCount() {
    allocations = 0;
    counting = true;
  }
  ~AllocationCount() { counting = false; }
  size_t operator()() const { return allocations; }
};

std::vector<std::byte> pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(seed + i * 13);
  return v;
}

/// The endpoint's part: nothing is scheduled here, so placed chunks and progress are
/// only counted.
struct Host final : StagingHost {
  void staged_chunk_placed(RxTransfer&, uint64_t, const Status&) override { ++placed; }
  void staging_progressed() override { ++progressed; }
  int placed = 0, progressed = 0;
};

/// A DataPaths as an endpoint's, with the test device as its context's device domain
/// (or none) and a real engine for the copies' ends.
struct Paths {
  explicit Paths(bool with_device = true, DevicePathMode mode = DevicePathMode::kAuto) {
    config.device_path = mode;
    dev = TestDeviceDomain::create({.capacity = size_t{64} << 20}).value();
    engine = engine::ProgressEngine::create({}).value();
    if (with_device) domains.push_back(dev.get());
    paths = std::make_unique<DataPaths>(DataPaths::Params{.config = &config,
                                                          .engine = engine,
                                                          .domains = &domains,
                                                          .devmem_tx_bindings = nullptr,
                                                          .peer = "peer",
                                                          .stats = &stats,
                                                          .host = &host,
                                                          .streams = nullptr});
  }
  Result<PathEnd> choose(Direction direction, TransferClass cls, const void* p, size_t n) {
    return paths->choose({.direction = direction, .cls = cls, .memory = paths->memory_of(p, n)});
  }
  /// Runs progress rounds until `done` (bounded by a count, never by time).
  template <typename Done>
  bool progress_until(Done done) {
    for (int i = 0; i < 200000 && !done(); ++i) engine->try_progress();
    return done();
  }

  Config config;
  EndpointStats stats;
  Host host;
  std::unique_ptr<TestDeviceDomain> dev;
  std::shared_ptr<engine::ProgressEngine> engine;
  std::vector<MemoryDomain*> domains;
  std::unique_ptr<DataPaths> paths;
};

TEST(DataPaths, HostMemoryTakesTheHostPathAndAllocatesNothing) {
  Paths p;
  std::vector<std::byte> buffer = pattern(4096, 1);
  std::vector<std::byte> into(4096);
  size_t counted = 0;
  {
    AllocationCount count;
    for (TransferClass cls : {TransferClass::kInline, TransferClass::kChunked}) {
      Result<PathEnd> source = p.choose(Direction::kSend, cls, buffer.data(), buffer.size());
      ASSERT_TRUE(source.is_ok());
      EXPECT_EQ(source->path(), DataPath::kHost);
      EXPECT_EQ(source->device(), nullptr);
      ASSERT_NE(source->source(), nullptr);
      EXPECT_EQ(source->source()->host_bytes(), buffer.data()) << "the host source is the buffer itself";
      EXPECT_EQ(source->travels_inline(), cls == TransferClass::kInline);
      const Status read = source->read_inline(
          [&](std::span<const std::byte> bytes) {
            EXPECT_EQ(bytes.data(), buffer.data());
            EXPECT_EQ(bytes.size(), buffer.size());
          },
          [] { return ChunkSource::InlineLater(); });
      EXPECT_TRUE(read.is_ok());

      RxTransfer t;
      Result<PathEnd> sink = p.choose(Direction::kReceive, cls, into.data(), into.size());
      ASSERT_TRUE(sink.is_ok());
      EXPECT_EQ(sink->path(), DataPath::kHost);
      EXPECT_NE(sink->sink(t), nullptr);
      EXPECT_TRUE(sink->place_inline(buffer, [] { return ChunkSink::InlinePlaced(); }).is_ok());
      EXPECT_EQ(sink->in_flight(), 0u);
      EXPECT_FALSE(sink->revoked());
      EXPECT_FALSE(source->zero_copy());
    }
    PathEnd discard = p.paths->discard(100);
    RxTransfer t;
    EXPECT_EQ(discard.sink(t), &p.paths->discard_sink());
    counted = count();
  }
  EXPECT_EQ(counted, 0u) << "host memory's ends must not allocate per operation";
  EXPECT_EQ(std::memcmp(into.data(), buffer.data(), buffer.size()), 0);
  EXPECT_EQ(p.stats.device_path, "") << "host memory never reaches the device path selector";
  EXPECT_EQ(p.stats.staged_transfers, 0u);
  {
    // The count counts: device memory's end is allocated.
    std::byte* device = p.dev->allocate(4096).value();
    AllocationCount count;
    Result<PathEnd> staged = p.choose(Direction::kReceive, TransferClass::kChunked, device, 4096);
    EXPECT_TRUE(staged.is_ok());
    EXPECT_GT(count(), 0u);
  }
}

TEST(DataPaths, AnEmptyRangeIsHostMemoryWhateverItPointsAt) {
  Paths p;
  std::byte* device = p.dev->allocate(4096).value();
  EXPECT_TRUE(p.paths->memory_of(device, 0).on_host());
  EXPECT_FALSE(p.paths->memory_of(device, 1).on_host());
  Result<PathEnd> end = p.choose(Direction::kSend, TransferClass::kChunked, device, 0);
  ASSERT_TRUE(end.is_ok());
  EXPECT_EQ(end->path(), DataPath::kHost);
}

TEST(DataPaths, ChunkedDeviceMemoryStagesAndTheStatsSayWhy) {
  Paths p;
  std::byte* device = p.dev->allocate(1 << 20).value();
  Result<PathEnd> source = p.choose(Direction::kSend, TransferClass::kChunked, device, 1 << 20);
  ASSERT_TRUE(source.is_ok()) << source.status().to_string();
  EXPECT_EQ(source->path(), DataPath::kStaging);
  EXPECT_EQ(source->device(), p.dev.get());
  EXPECT_EQ(source->source()->host_bytes(), nullptr) << "device memory is never pulled by a same-host peer";
  EXPECT_EQ(p.stats.device_path, "staging");
  EXPECT_NE(p.stats.device_path_reason.find("REMORA_DEVICE_PATH=auto: devmem: "), std::string::npos)
      << p.stats.device_path_reason;
  // Staging started at once: a copy out of the device is in flight until its end is delivered.
  EXPECT_GT(source->in_flight(), 0u);
  EXPECT_TRUE(p.progress_until([&] { return source->in_flight() == 0; }));

  Result<PathEnd> sink = p.choose(Direction::kReceive, TransferClass::kChunked, device, 1 << 20);
  ASSERT_TRUE(sink.is_ok());
  EXPECT_EQ(sink->path(), DataPath::kStaging);
  EXPECT_NE(p.stats.device_path_reason.find("; zcrx: "), std::string::npos) << "a receive names both zero-copy paths";
}

TEST(DataPaths, InlineDeviceMemoryGoesThroughOneHostCopy) {
  Paths p;
  const auto data = pattern(300, 7);
  std::byte* src = p.dev->allocate(4096).value();
  std::byte* dst = p.dev->allocate(4096).value();
  ASSERT_TRUE(p.dev->write(src, data.data(), data.size()).is_ok());

  // An initiator's inline put: copied to host memory before posting, without the lock.
  Result<PathEnd> source = p.choose(Direction::kSend, TransferClass::kInline, src, data.size());
  ASSERT_TRUE(source.is_ok());
  EXPECT_EQ(source->path(), DataPath::kStaging);
  EXPECT_FALSE(source->inline_ready());
  ASSERT_TRUE(source->copy_inline(std::chrono::seconds(10)).is_ok());
  EXPECT_TRUE(source->inline_ready());
  std::vector<std::byte> read;
  EXPECT_TRUE(source
                  ->read_inline([&](std::span<const std::byte> bytes) { read.assign(bytes.begin(), bytes.end()); },
                                [] { return ChunkSource::InlineLater(); })
                  .is_ok());
  EXPECT_EQ(read, data);

  // An inline receive: the frame's bytes are copied in, the operation told when it ended.
  Result<PathEnd> sink = p.choose(Direction::kReceive, TransferClass::kInline, dst, data.size());
  ASSERT_TRUE(sink.is_ok());
  std::vector<std::byte> frame = data;  // reused by the control stream once the call returns
  bool placed = false;
  Status outcome(StatusCode::kInternal, "not yet");
  const Status started = sink->place_inline(frame, [&] {
    return [&](const Status& s) {
      placed = true;
      outcome = s;
    };
  });
  EXPECT_EQ(started.code(), StatusCode::kInProgress);
  std::memset(frame.data(), 0, frame.size());
  EXPECT_EQ(sink->in_flight(), 1u);
  EXPECT_TRUE(p.progress_until([&] { return placed; }));
  EXPECT_TRUE(outcome.is_ok()) << outcome.to_string();
  EXPECT_EQ(sink->in_flight(), 0u);
  std::vector<std::byte> got(data.size());
  ASSERT_TRUE(p.dev->read(got.data(), dst, got.size()).is_ok());
  EXPECT_EQ(got, data);
}

TEST(DataPaths, AServedInlineGetOfDeviceMemoryIsReadWhenItsCopyEnds) {
  Paths p;
  const auto data = pattern(64, 9);
  std::byte* src = p.dev->allocate(4096).value();
  ASSERT_TRUE(p.dev->write(src, data.data(), data.size()).is_ok());
  Result<PathEnd> source = p.choose(Direction::kSend, TransferClass::kInline, src, data.size());
  ASSERT_TRUE(source.is_ok());
  bool now = false;
  std::vector<std::byte> later;
  const Status read = source->read_inline([&](std::span<const std::byte>) { now = true; },
                                          [&] {
                                            return [&](std::span<const std::byte> bytes, const Status& s) {
                                              EXPECT_TRUE(s.is_ok());
                                              later.assign(bytes.begin(), bytes.end());
                                            };
                                          });
  EXPECT_EQ(read.code(), StatusCode::kInProgress);
  EXPECT_FALSE(now);
  EXPECT_TRUE(p.progress_until([&] { return !later.empty(); }));
  EXPECT_EQ(later, data);
}

TEST(DataPaths, AFailedInlineCopyFailsTheOperationAndPlacesNothing) {
  Paths p;
  std::byte* dst = p.dev->allocate(4096).value();
  p.dev->fail_copies(dst, 4096);
  Result<PathEnd> sink = p.choose(Direction::kReceive, TransferClass::kInline, dst, 16);
  ASSERT_TRUE(sink.is_ok());
  const auto bytes = pattern(16, 3);
  Status outcome;
  bool ended = false;
  const Status started = sink->place_inline(bytes, [&] {
    return [&](const Status& s) {
      ended = true;
      outcome = s;
    };
  });
  if (started.code() == StatusCode::kInProgress) {
    EXPECT_TRUE(p.progress_until([&] { return ended; }));
  } else {
    outcome = started;
  }
  EXPECT_EQ(outcome.code(), StatusCode::kDeviceFailed) << outcome.to_string();
}

TEST(DataPaths, ADemandedPathThatCannotBeTakenIsRefusedAndRecorded) {
  Paths p(/*with_device=*/true, DevicePathMode::kDevmem);
  std::byte* device = p.dev->allocate(1 << 20).value();
  Result<PathEnd> source = p.choose(Direction::kSend, TransferClass::kChunked, device, 1 << 20);
  ASSERT_FALSE(source.is_ok());
  EXPECT_EQ(source.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(source.status().message().find("REMORA_DEVICE_PATH=devmem"), std::string::npos)
      << source.status().message();
  EXPECT_EQ(p.stats.device_path, "refused");
  EXPECT_EQ(p.stats.device_path_reason, source.status().message());
  EXPECT_EQ(p.stats.device_path_refusals, 1u);
}

TEST(DataPaths, WithoutDeviceDomainsEveryBufferIsHostMemory) {
  Paths p(/*with_device=*/false);
  std::byte* device = p.dev->allocate(4096).value();
  EXPECT_TRUE(p.paths->memory_of(device, 4096).on_host()) << "no domain of the context owns it";
}

TEST(DataPaths, AMovedEndKeepsItsDeviceSinkWhereItIs) {
  Paths p;
  std::byte* dst = p.dev->allocate(1 << 20).value();
  Result<PathEnd> chosen = p.choose(Direction::kReceive, TransferClass::kChunked, dst, 1 << 20);
  ASSERT_TRUE(chosen.is_ok());
  RxTransfer t;
  ChunkSink* sink = chosen->sink(t);
  PathEnd moved = std::move(*chosen);
  EXPECT_EQ(moved.sink(t), sink);
  EXPECT_EQ(moved.path(), DataPath::kStaging);
  EXPECT_EQ(moved.length(), uint64_t{1} << 20);
}

TEST(DataPaths, AnOperationCountsItsPathOnce) {
  EndpointStats stats;
  Paths p;
  std::byte* device = p.dev->allocate(1 << 20).value();
  Result<PathEnd> staged = p.choose(Direction::kReceive, TransferClass::kChunked, device, 4096);
  ASSERT_TRUE(staged.is_ok());
  count_posted(stats, *staged);
  count_completed(stats, *staged, 4096);
  std::vector<std::byte> host(16);
  Result<PathEnd> plain = p.choose(Direction::kReceive, TransferClass::kChunked, host.data(), host.size());
  ASSERT_TRUE(plain.is_ok());
  count_posted(stats, *plain);
  count_completed(stats, *plain, 16);
  EXPECT_EQ(stats.staged_transfers, 1u);
  EXPECT_EQ(stats.staged_bytes, 4096u);
  EXPECT_EQ(stats.devmem_transfers + stats.zcrx_transfers, 0u);
}

}  // namespace
}  // namespace remora::detail
