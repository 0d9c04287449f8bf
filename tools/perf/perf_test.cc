// tools/perf/perf_test.cc — the perf library's in-process parts: sizes, patterns,
// checksums, iteration counts, the collective benchmark's bus factors and option
// checks, the memory kinds and copy rates, the p2p plan's JSON, the staging check's
// option checks, and device buffers (fill, check, damage, reuse) on the test device. The tool end to end (spawned
// follower, every mode) runs as CTest tests in tools/programs.cmake.
#include "perf.h"

#include <vector>

#include <gtest/gtest.h>

#include "memory.h"
#include "p2p.h"
#include "pattern.h"
#include "remora/cuda.h"
#include "remora/testing/test_device.h"
#include "session.h"

namespace remora::perf {
namespace {

TEST(ParseSize, AcceptsBytesAndBinarySuffixes) {
  EXPECT_EQ(parse_size("8").value(), 8u);
  EXPECT_EQ(parse_size("4K").value(), 4096u);
  EXPECT_EQ(parse_size("16m").value(), size_t{16} << 20);
  EXPECT_EQ(parse_size("1G").value(), size_t{1} << 30);
  EXPECT_EQ(parse_size("0").value(), 0u);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"", "K", "3X", "-1", "1.5M", "12345678901234"}) {
    auto r = parse_size(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(FormatSize, RoundTripsWithParse) {
  for (size_t s : {size_t{1}, size_t{1000}, size_t{4096}, size_t{3} << 20, size_t{64} << 20, size_t{2} << 30}) {
    EXPECT_EQ(parse_size(format_size(s)).value(), s) << format_size(s);
  }
  EXPECT_EQ(format_size(1536), "1536");
}

TEST(Checksum, SeesEveryKindOfDamage) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{33}, size_t{4097}}) {
    std::vector<std::byte> a(n + 1);
    fill_pattern(std::span(a).first(n), 42);
    const uint64_t good = checksum(std::span(a).first(n));
    EXPECT_EQ(checksum(std::span(a).first(n)), good);
    EXPECT_NE(checksum(std::span(a).first(n + 1)), good) << "longer, n=" << n;
    if (n == 0) continue;
    EXPECT_NE(checksum(std::span(a).first(n - 1)), good) << "truncated, n=" << n;
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      std::vector<std::byte> b(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n));
      b[at] ^= std::byte{0x10};
      EXPECT_NE(checksum(b), good) << "bit flip at " << at << ", n=" << n;
    }
    EXPECT_NE(checksum(std::span(a).subspan(1, n)), good) << "shifted, n=" << n;
  }
}

TEST(FillPattern, DependsOnSeedAndPosition) {
  std::vector<std::byte> a(4096), b(4096);
  fill_pattern(a, 1);
  fill_pattern(b, 2);
  EXPECT_NE(a, b);
  fill_pattern(b, 1);
  EXPECT_EQ(a, b);
  // No period of one word: a stale copy shifted by 8 bytes must not look right.
  EXPECT_FALSE(std::equal(a.begin(), a.end() - 8, a.begin() + 8));
}

TEST(WindowSlots, DistinctBuffersUpTo64MiB) {
  EXPECT_EQ(internal::window_slots(8, 64), 64u);
  EXPECT_EQ(internal::window_slots(size_t{1} << 20, 64), 64u);
  EXPECT_EQ(internal::window_slots(size_t{16} << 20, 64), 4u);
  EXPECT_EQ(internal::window_slots(size_t{1} << 30, 64), 1u);
  EXPECT_EQ(internal::window_slots(0, 8), 8u);
}

TEST(RmaMode, ParsesItsOwnNames) {
  for (RmaMode m : {RmaMode::kPutBandwidth, RmaMode::kGetBandwidth, RmaMode::kPutLatency, RmaMode::kGetLatency,
                    RmaMode::kPutRate, RmaMode::kNotifyLatency}) {
    EXPECT_EQ(parse_rma_mode(to_string(m)).value(), m) << to_string(m);
  }
  EXPECT_EQ(parse_rma_mode("bw").status().code(), StatusCode::kInvalidArgument);
}

TEST(DefaultStep, ScalesBySizeAndKeepsOverrides) {
  using internal::default_step;
  using internal::StepKind;
  // A window of 64 x 16M is 1 GiB: the floor of 5 windows; small sizes hit the ceiling.
  EXPECT_EQ(default_step(StepKind::kWindow, size_t{16} << 20, 64, {}, {}).iters, 5u);
  EXPECT_EQ(default_step(StepKind::kWindow, 8, 64, {}, {}).iters, 100u);
  EXPECT_EQ(default_step(StepKind::kRate, 8, 64, {}, {}).iters, 2000u);
  EXPECT_EQ(default_step(StepKind::kPingPong, 8, 1, {}, {}).iters, 10000u);
  EXPECT_EQ(default_step(StepKind::kPingPong, 8, 1, {}, {}).warmup, 1000u);
  const auto st = default_step(StepKind::kWindow, 8, 64, 7, 0);
  EXPECT_EQ(st.iters, 7u);
  EXPECT_EQ(st.warmup, 0u);
}

TEST(DefaultStep, CollectivesMoveAbout256MiBPerSize) {
  using internal::default_step;
  using internal::StepKind;
  EXPECT_EQ(default_step(StepKind::kCollective, size_t{64} << 20, 1, {}, {}).iters, 5u);
  EXPECT_EQ(default_step(StepKind::kCollective, size_t{16} << 20, 1, {}, {}).iters, 16u);
  EXPECT_EQ(default_step(StepKind::kCollective, 4096, 1, {}, {}).iters, 1000u);
  EXPECT_EQ(default_step(StepKind::kCollective, 0, 1, {}, {}).iters, 1000u);  // barrier
  EXPECT_EQ(default_step(StepKind::kCollective, 4096, 1, {}, {}).warmup, 20u);
  EXPECT_EQ(default_step(StepKind::kCollective, size_t{64} << 20, 1, {}, {}).warmup, 1u);
  EXPECT_EQ(default_step(StepKind::kCollective, 4096, 1, 3, 0).iters, 3u);
}

TEST(BusFactor, AsNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllreduce, 2), 1.0);
  for (auto op : {CollectiveKind::kAllgather, CollectiveKind::kReduceScatter, CollectiveKind::kAlltoall,
                  CollectiveKind::kGather, CollectiveKind::kScatter}) {
    EXPECT_DOUBLE_EQ(bus_factor(op, 4), 0.75) << to_string(op);
  }
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kBroadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kReduce, 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllreduce, 1), 0.0);
}

TEST(CollValidate, RefusesWhatNoRankCouldRun) {
  CollOptions o;
  o.sizes = {4096};
  EXPECT_TRUE(validate(o, 2).is_ok());
  o.ops = {CollectiveKind::kGather};
  o.root = 2;
  EXPECT_NE(validate(o, 2).message().find("--root 2 is not a rank of 2 ranks"), std::string::npos);
  EXPECT_TRUE(validate(o, 3).is_ok());
  o.ops = {CollectiveKind::kAllreduce};  // not rooted: the root does not matter
  EXPECT_TRUE(validate(o, 2).is_ok());
  o.redop = ReduceOp::kAvg;
  o.type = DataType::kInt32;
  EXPECT_EQ(validate(o, 2).code(), StatusCode::kInvalidArgument);
  o.type = DataType::kBFloat16;
  EXPECT_TRUE(validate(o, 2).is_ok());
  o.expect_ranks = 3;
  EXPECT_NE(validate(o, 2).message().find("-n 3 but the launcher started 2 ranks"), std::string::npos);
  o.expect_ranks.reset();
  o.sizes.clear();
  EXPECT_EQ(validate(o, 2).code(), StatusCode::kInvalidArgument);
}

TEST(SummarizeLatency, NearestRankAndDivisor) {
  std::vector<double> us;
  for (int i = 100; i >= 1; --i) us.push_back(i);
  const LatencySummary one_way = internal::summarize_latency(us, 2);
  EXPECT_DOUBLE_EQ(one_way.avg_us, 25.25);
  EXPECT_DOUBLE_EQ(one_way.p50_us, 25);
  EXPECT_DOUBLE_EQ(one_way.p99_us, 49.5);
  EXPECT_DOUBLE_EQ(one_way.min_us, 0.5);
  EXPECT_DOUBLE_EQ(one_way.max_us, 50);
  EXPECT_DOUBLE_EQ(internal::summarize_latency(us, 1).p50_us, 50);
  EXPECT_DOUBLE_EQ(internal::summarize_latency({}, 1).avg_us, 0);
}

TEST(BenchMemory, ParsesTheKindsItKnows) {
  EXPECT_EQ(parse_bench_memory("host").value(), MemoryKind::kHost);
  EXPECT_EQ(parse_bench_memory("test-device").value(), testing::kTestDeviceKind);
  EXPECT_EQ(parse_bench_memory("cuda").value(), MemoryKind::kCuda);  // parsed; refused when opened
  for (const char* bad : {"", "gpu", "dmabuf", "Host", "test_device"}) {
    auto r = parse_bench_memory(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("use host, test-device or cuda"), std::string::npos) << bad;
  }
}

TEST(BenchMemory, CudaOpensWhereThereIsADriverElseIsRefusedWithTheReason) {
  const CudaProbe probe = probe_cuda();
  const Status cuda = internal::memory_available(MemoryKind::kCuda);
  internal::DeviceSet devices;
  if (probe.driver_loaded && !probe.devices.empty()) {
    EXPECT_TRUE(cuda.is_ok()) << cuda.to_string();
    internal::DeviceMemory* dev = devices.open(MemoryKind::kCuda).value();
    ASSERT_NE(dev, nullptr);
    internal::DeviceBlock block = dev->allocate(4096).value();
    std::vector<std::byte> out(4096, std::byte{0x5c}), in(4096);
    ASSERT_TRUE(dev->write(block.data(), out).is_ok());
    ASSERT_TRUE(dev->read(in, block.data()).is_ok());
    EXPECT_EQ(in, out);
    return;
  }
  EXPECT_EQ(cuda.code(), StatusCode::kUnsupported);
  EXPECT_NE(cuda.message().find("cuda memory: " + probe.reason), std::string::npos) << cuda.message();
  EXPECT_EQ(devices.open(MemoryKind::kCuda).status().code(), StatusCode::kUnsupported);
}

TEST(BenchMemory, HostAndTestDeviceOpen) {
  internal::DeviceSet devices;
  EXPECT_TRUE(internal::memory_available(MemoryKind::kHost).is_ok());
  EXPECT_TRUE(internal::memory_available(testing::kTestDeviceKind).is_ok());
  EXPECT_EQ(devices.open(MemoryKind::kHost).value(), nullptr);
  internal::DeviceMemory* dev = devices.open(testing::kTestDeviceKind).value();
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->kind(), testing::kTestDeviceKind);
  EXPECT_EQ(devices.open(testing::kTestDeviceKind).value(), dev) << "opened once per side";
}

TEST(DeviceCopyRate, ParsesNumbersSuffixesAndAuto) {
  EXPECT_TRUE(parse_device_copy_rate("auto").value().automatic);
  EXPECT_DOUBLE_EQ(parse_device_copy_rate("0").value().bytes_per_second, 0);
  EXPECT_DOUBLE_EQ(parse_device_copy_rate("2500000000").value().bytes_per_second, 2.5e9);
  EXPECT_DOUBLE_EQ(parse_device_copy_rate("2.5e9").value().bytes_per_second, 2.5e9);
  EXPECT_DOUBLE_EQ(parse_device_copy_rate("2G").value().bytes_per_second, 2.0 * (1 << 30));
  EXPECT_FALSE(parse_device_copy_rate("2G").value().automatic);
  for (const char* bad : {"", "-1", "fast", "1.5G", "nan", "inf", "2e9x"}) {
    auto r = parse_device_copy_rate(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(to_string(DeviceCopyRate{}), "unlimited");
  EXPECT_EQ(to_string(DeviceCopyRate{.automatic = true}), "auto");
  EXPECT_EQ(to_string(DeviceCopyRate{.bytes_per_second = 2.5e9}), "2.500 GB/s");
}

TEST(MemoryOptions, ThePeerIsAsThisSideUnlessSet) {
  MemoryOptions o;
  o.local = testing::kTestDeviceKind;
  EXPECT_EQ(o.peer_kind(), testing::kTestDeviceKind);
  o.peer = MemoryKind::kHost;
  EXPECT_EQ(o.peer_kind(), MemoryKind::kHost);
}

internal::P2pPlan sample_plan() {
  using internal::P2pStep;
  return {.mode = P2pMode::kBiBandwidth,
          .window = 8,
          .distinct_buffers = true,
          .buffers = BufferSource::kRegister,
          .inject_corruption = true,
          .steps = {P2pStep{.counts = {.size = 0, .iters = 3, .warmup = 1}},
                    P2pStep{.counts = {.size = 4096, .iters = 5, .warmup = 0},
                            .driver_memory = testing::kTestDeviceKind,
                            .follower_memory = MemoryKind::kHost},
                    P2pStep{.counts = {.size = size_t{64} << 20, .iters = 2, .warmup = 1},
                            .driver_memory = MemoryKind::kHost,
                            .follower_memory = MemoryKind::kCuda}}};
}

TEST(P2pPlan, RoundTripsThroughJsonWithTheMemoryOfEachStep) {
  const internal::P2pPlan plan = sample_plan();
  const nlohmann::json j = internal::to_json(plan);
  EXPECT_EQ(j["steps"][1]["driver_memory"], "test-device");
  EXPECT_EQ(j["steps"][2]["follower_memory"], "cuda");
  // What the follower reads is what it gets over the wire: parse the text.
  const auto back = internal::p2p_plan_from_json(nlohmann::json::parse(j.dump())).value();
  EXPECT_EQ(back.mode, plan.mode);
  EXPECT_EQ(back.window, plan.window);
  EXPECT_EQ(back.distinct_buffers, plan.distinct_buffers);
  EXPECT_EQ(back.buffers, plan.buffers);
  EXPECT_EQ(back.inject_corruption, plan.inject_corruption);
  ASSERT_EQ(back.steps.size(), plan.steps.size());
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    EXPECT_EQ(back.steps[i].counts.size, plan.steps[i].counts.size) << i;
    EXPECT_EQ(back.steps[i].counts.iters, plan.steps[i].counts.iters) << i;
    EXPECT_EQ(back.steps[i].counts.warmup, plan.steps[i].counts.warmup) << i;
    EXPECT_EQ(back.steps[i].driver_memory, plan.steps[i].driver_memory) << i;
    EXPECT_EQ(back.steps[i].follower_memory, plan.steps[i].follower_memory) << i;
  }
  EXPECT_EQ(internal::to_json(back), j);
  EXPECT_EQ(plan.driver_memory(), (std::vector<MemoryKind>{MemoryKind::kHost, testing::kTestDeviceKind}));
  EXPECT_EQ(plan.follower_memory(), (std::vector<MemoryKind>{MemoryKind::kHost, MemoryKind::kCuda}));
}

TEST(P2pPlan, RefusesWhatTheDriverCouldNotHaveSent) {
  const nlohmann::json good = internal::to_json(sample_plan());
  const auto refused = [](nlohmann::json j, std::string_view why) {
    const auto r = internal::p2p_plan_from_json(j);
    ASSERT_FALSE(r.is_ok()) << j.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << j.dump();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  nlohmann::json j = good;
  j["steps"][1]["driver_memory"] = "gpu";
  refused(j, "unknown memory kind 'gpu'");
  j = good;
  j["steps"][0].erase("follower_memory");
  refused(j, "no 'follower_memory'");
  j = good;
  j["steps"][0]["size"] = -1;
  refused(j, "'size' is -1");
  j = good;
  j["window"] = uint64_t{1} << 40;
  refused(j, "'window' is");
  j = good;
  j["mode"] = "put_bw";
  refused(j, "mode 'put_bw'");
  j = good;
  j["kind"] = "rma";
  refused(j, "kind 'rma'");
  j = good;
  j["steps"] = "all";
  refused(j, "no 'steps' list");
  refused(nlohmann::json::array(), "no 'kind'");
}

TEST(NetworkRate, BytesOneWayPerSecond) {
  P2pRow row;
  row.bandwidth_mbps = 2000;
  EXPECT_DOUBLE_EQ(network_rate(P2pMode::kBandwidth, row), 2e9);
  EXPECT_DOUBLE_EQ(network_rate(P2pMode::kLatency, row), 2e9);
  EXPECT_DOUBLE_EQ(network_rate(P2pMode::kBiBandwidth, row), 1e9);  // both directions counted
}

TEST(StagingCheck, RefusesOptionsThatCannotGiveAnAnswerBeforeStartingAnything) {
  const PeerOptions nowhere{.peer = "", .self_exe = "/nonexistent/remora"};  // a spawn would fail differently
  const auto refused = [&](StagingCheckOptions o, std::string_view why) {
    const auto r = run_staging_check(nowhere, o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  StagingCheckOptions o;
  o.pairs = 3;
  refused(o, "at least 4 pairs, so that the median stands on both orders");
  o = {};
  o.size = 0;
  refused(o, "--size must be at least 1 byte");
  o = {};
  o.calibration_iters = 0;
  refused(o, "must be at least 1");
}

/// A context with a test device added, and a BufferSet over both.
struct DeviceBuffers : ::testing::Test {
  internal::DeviceSet devices;  // before the context: outlives it
  std::unique_ptr<Context> ctx = Context::create().value();
  internal::DeviceMemory* dev = nullptr;
  void SetUp() override {
    ASSERT_TRUE(devices.attach(*ctx).is_ok());
    dev = devices.open(testing::kTestDeviceKind).value();
  }
};

TEST_F(DeviceBuffers, FillCheckAndDamageGoThroughTheDevice) {
  internal::BufferSet buffers(*ctx, BufferSource::kPool);
  buffers.use_memory(dev);
  auto buf = buffers.get(100000).value();  // device memory: touching it directly faults
  ASSERT_TRUE(dev->domain().owns(buf.data(), buf.size()));
  ASSERT_TRUE(buffers.fill(buf, 7).is_ok());
  EXPECT_EQ(buffers.check(buf, 7).value(), "");
  EXPECT_NE(buffers.check(buf, 8).value(), "") << "another seed's pattern";
  ASSERT_TRUE(buffers.damage(buf, 4242).is_ok());
  EXPECT_EQ(buffers.check(buf, 7).value().rfind("byte 4242 is ", 0), 0u) << buffers.check(buf, 7).value();
  EXPECT_EQ(buffers.damage(buf, buf.size()).code(), StatusCode::kOutOfRange);
  // Host buffers of the same set stay host memory, checked in place.
  auto ack = buffers.get_host(4).value();
  EXPECT_FALSE(dev->domain().owns(ack.data(), ack.size()));
  ASSERT_TRUE(buffers.fill(ack, 1).is_ok());
  EXPECT_EQ(buffers.check(ack, 1).value(), "");
}

TEST_F(DeviceBuffers, ReleasedDeviceBuffersAreReusedNotReallocated) {
  internal::BufferSet buffers(*ctx, BufferSource::kRegister);
  buffers.use_memory(dev);
  std::byte* first = buffers.get(size_t{1} << 20).value().data();
  std::byte* second = buffers.get(size_t{1} << 20).value().data();
  EXPECT_NE(first, second);
  buffers.release_all();
  // The test device cannot free: without reuse every size of a run would take new memory.
  const std::byte* again = buffers.get(4096).value().data();  // the smallest free block that fits
  EXPECT_TRUE(again == first || again == second);
  buffers.use_memory(nullptr);
  EXPECT_FALSE(dev->domain().owns(buffers.get(4096).value().data(), 4096));
}

}  // namespace
}  // namespace remora::perf
